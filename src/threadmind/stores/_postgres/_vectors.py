"""Vector records in PostgreSQL: the ``VectorRecords`` protocol over ``PostgresStore``'s ``threadmind_vector*`` tables.

The same tables, columns and semantics as the SQLite store's (``_vector_records``), with embeddings as ``bytea``.
Every change takes the next number from the one-row ``threadmind_vector_seq`` counter inside its own statement; the
row lock that ``UPDATE`` takes is held until commit, so changes from any number of processes get their numbers in
commit order and a reader that has seen number ``n`` has seen every change up to ``n`` (``load`` replays
exactly what it missed). Each change is one statement in autocommit: applied whole or not at all. The identity
column ``pos`` is a row's storage position (SQLite's rowid): ``load_page`` pages by it, ``load_changes`` by
``(seq, pos)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from .._vector_records import PendingVector, VectorRecord

__all__ = ("PostgresVectorRecords",)

_COLUMNS = "vector_id, message_id, thread_id, resource_id, role, created_at, embedding"
_NEXT = "next AS (UPDATE threadmind_vector_seq SET seq = seq + 1 WHERE id = 0 RETURNING seq)"

_UPSERT = f"""
WITH {_NEXT},
rec AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[])
          WITH ORDINALITY AS r(vector_id, message_id, thread_id, resource_id, role, created_at, embedding, n)),
live AS (SELECT m.id, m.thread_id, coalesce(nullif(m."resourceId", ''), t."resourceId", '') AS resource_id
         FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id
         WHERE m.id = ANY($3::text[]) FOR SHARE OF m),
kept AS (SELECT DISTINCT o.message_id FROM threadmind_vectors o
         WHERE $10::boolean AND o.index_name = $1 AND o.message_id = ANY($3::text[])),
gone AS (SELECT v.vector_id FROM threadmind_vectors v
         WHERE NOT $10::boolean AND v.index_name = $1 AND v.message_id = ANY($3::text[])
           AND NOT (v.vector_id = ANY($2::text[]))),
tomb AS (INSERT INTO threadmind_vector_tombstones (index_name, vector_id, seq)
         SELECT $1, gone.vector_id, next.seq FROM gone, next
         ON CONFLICT (index_name, vector_id) DO UPDATE SET seq = EXCLUDED.seq),
del AS (DELETE FROM threadmind_vectors v USING gone WHERE v.index_name = $1 AND v.vector_id = gone.vector_id),
pend AS (DELETE FROM threadmind_vector_pending WHERE message_id = ANY($3::text[])),
ins AS (INSERT INTO threadmind_vectors (index_name, vector_id, message_id, thread_id, resource_id, role, created_at,
                                        embedding, seq)
        SELECT $1, rec.vector_id, rec.message_id, coalesce(live.thread_id, rec.thread_id),
               coalesce(live.resource_id, rec.resource_id), rec.role, rec.created_at, rec.embedding, next.seq
        FROM rec LEFT JOIN live ON live.id = rec.message_id, next
        WHERE (live.id IS NOT NULL OR NOT $9::boolean) AND rec.message_id NOT IN (SELECT message_id FROM kept)
        ORDER BY rec.n  -- rows keep the records' order
        ON CONFLICT (index_name, vector_id) DO UPDATE SET message_id = EXCLUDED.message_id,
          thread_id = EXCLUDED.thread_id, resource_id = EXCLUDED.resource_id, role = EXCLUDED.role,
          created_at = EXCLUDED.created_at, embedding = EXCLUDED.embedding, seq = EXCLUDED.seq
        RETURNING vector_id, thread_id, resource_id)
SELECT next.seq, array_agg(ins.vector_id), array_agg(ins.thread_id), array_agg(ins.resource_id)
FROM next LEFT JOIN ins ON true GROUP BY next.seq
"""
"""Replace messages' vectors; a stored message's rows take its thread and resource as they are when the statement
runs (``live``: its row locked against a move or a deletion until the write commits), for another process may have
moved it since its vectors were made (its vector writes are not ordered with these); with ``$9`` a message not
stored gets no rows (deleted meanwhile); with ``$10`` a message that has rows keeps them (copies yield)."""


def _delete_where(where: str, pending: str) -> str:
    """A change that tombstones and deletes the vectors matching ``where`` and the pending entries matching
    ``pending``."""
    return f"""
WITH {_NEXT},
gone AS (DELETE FROM threadmind_vectors v WHERE {where} RETURNING v.index_name, v.vector_id),
tomb AS (INSERT INTO threadmind_vector_tombstones (index_name, vector_id, seq)
         SELECT gone.index_name, gone.vector_id, next.seq FROM gone, next
         ON CONFLICT (index_name, vector_id) DO UPDATE SET seq = EXCLUDED.seq),
pend AS (DELETE FROM threadmind_vector_pending p WHERE {pending})
SELECT seq FROM next
"""


_DELETE_IDS_IN = _delete_where("v.message_id = ANY($2::text[]) AND ($1::text IS NULL OR v.index_name = $1)",
                               "p.message_id = ANY($2::text[])")
_DELETE_THREAD = _delete_where("v.thread_id = $1", "p.thread_id = $1")
_MOVE_THREAD = f"""
WITH {_NEXT},
owner AS (SELECT coalesce((SELECT nullif("resourceId", '') FROM mastra_threads WHERE id = $1 FOR SHARE), $2)
          AS resource_id),
mv AS (UPDATE threadmind_vectors SET resource_id = owner.resource_id, seq = next.seq FROM next, owner
       WHERE thread_id = $1),
pend AS (UPDATE threadmind_vector_pending SET resource_id = owner.resource_id FROM owner WHERE thread_id = $1)
SELECT next.seq, owner.resource_id FROM next, owner
"""
"""Re-scope a thread's vectors to its resource as stored when this runs (its row locked against another move until
then), else to the resource given: two processes moving one thread at once end with the resource its row has."""


def _record(row: Sequence[Any]) -> VectorRecord:
    return VectorRecord(vector_id=str(row[0]), message_id=str(row[1]), thread_id=str(row[2]),
                        resource_id=str(row[3]), role=str(row[4]), created_at=str(row[5]), embedding=bytes(row[6]))


def _pending(row: Sequence[Any]) -> PendingVector:
    return PendingVector(message_id=row[0], thread_id=row[1], resource_id=row[2], attempts=int(row[3]),
                         last_error=row[4])


def _before(before: float | None) -> float:
    return math.inf if before is None else before


async def _deleted(conn: Any, index_name: str, since_seq: int) -> list[str]:
    return [str(row[0]) for row in await conn.fetch(
        "SELECT t.vector_id FROM threadmind_vector_tombstones t WHERE t.index_name = $1 AND t.seq > $2 "
        "AND NOT EXISTS (SELECT 1 FROM threadmind_vectors v WHERE v.index_name = t.index_name "
        "AND v.vector_id = t.vector_id) ORDER BY t.seq, t.vector_id", index_name, since_seq)]


def _scope(resource_id: str | None, thread_id: str | None) -> tuple[str, list[str]]:
    """The WHERE clause (after ``index_name = $1``) and its parameters for one thread and/or resource."""
    if thread_id is not None and resource_id is not None:
        return " AND thread_id = $2 AND resource_id = $3", [thread_id, resource_id]
    if thread_id is not None:
        return " AND thread_id = $2", [thread_id]
    if resource_id is not None:
        return " AND resource_id = $2", [resource_id]
    return "", []


class PostgresVectorRecords:
    """``VectorRecords`` in a ``PostgresStore``'s database (its tables are created when the store opens)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def ensure_tables(self) -> None:
        """Open the store (which creates the tables) before any message save carries a pending mark."""
        await self._store.open()

    async def _seq(self, sql: str, *args: Any, doing: str) -> int:
        async def run(conn: Any) -> int:
            return int(await conn.fetchval(sql, *args))

        result: int = await self._store.run_write(run, doing)
        return result

    async def upsert(self, index_name: str, records: Sequence[VectorRecord], *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        """See :meth:`VectorRecords.upsert` (``_UPSERT``)."""
        latest = {r.vector_id: r for r in records}  # one row per vector id (the last wins)
        rows = list(latest.values())
        args = (index_name, [r.vector_id for r in rows], [r.message_id for r in rows], [r.thread_id for r in rows],
                [r.resource_id for r in rows], [r.role for r in rows], [r.created_at for r in rows],
                [r.embedding for r in rows], stored_only, fresh_only)
        seq, ids, threads, resources = await self._store.run_write(lambda conn: conn.fetchrow(_UPSERT, *args),
                                                                   "vector upsert")
        if written is not None:
            now = {vid: (tid, rid) for vid, tid, rid in zip(ids or (), threads or (), resources or (), strict=True)
                   if vid is not None}
            written.extend(r if scope == (r.thread_id, r.resource_id)
                           else msgspec.structs.replace(r, thread_id=scope[0], resource_id=scope[1])
                           for r in rows if (scope := now.get(r.vector_id)) is not None)
        return int(seq)

    async def delete_by_message_ids(self, index_name: str | None, ids: Sequence[str]) -> int:
        """Delete the messages' vectors (in every index when ``index_name`` is None) and pending entries."""
        return await self._seq(_DELETE_IDS_IN, index_name, list(ids), doing="vector delete")

    async def delete_by_thread(self, thread_id: str) -> int:
        """Delete every vector and pending entry of a thread, in all indexes."""
        return await self._seq(_DELETE_THREAD, thread_id, doing="vector delete")

    async def move_thread(self, thread_id: str, resource_id: str, *, written: list[str] | None = None) -> int:
        """See :meth:`VectorRecords.move_thread` (``_MOVE_THREAD``)."""
        seq, now = await self._store.run_write(lambda conn: conn.fetchrow(_MOVE_THREAD, thread_id, resource_id),
                                               "vector move")
        if written is not None:
            written.append(str(now))
        return int(seq)

    async def load(self, index_name: str, since_seq: int = 0) -> tuple[list[VectorRecord], list[str], int]:
        """Records changed after ``since_seq``, vector ids deleted after it (and not live), the current seq."""

        async def run(conn: Any) -> tuple[list[VectorRecord], list[str], int]:
            async with conn.transaction(isolation="repeatable_read", readonly=True):  # one snapshot for all three
                current = int(await conn.fetchval("SELECT seq FROM threadmind_vector_seq WHERE id = 0") or 0)
                records = [_record(row) for row in await conn.fetch(
                    f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE index_name = $1 AND seq > $2 "
                    "ORDER BY seq, pos", index_name, since_seq)]
                deleted = await _deleted(conn, index_name, since_seq) if since_seq > 0 else []
            return records, deleted, current

        result: tuple[list[VectorRecord], list[str], int] = await self._store.run_read(run, "vector load")
        return result

    async def records_for_messages(self, index_name: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The live records of these messages (used to copy vectors when a thread is cloned)."""
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE index_name = $1 AND message_id = ANY($2::text[]) "
            'ORDER BY message_id COLLATE "C", vector_id COLLATE "C"', index_name, list(ids)), "vector read")
        return [_record(row) for row in rows]

    async def prune_tombstones(self, index_name: str, upto_seq: int) -> None:
        """Forget tombstones a saved snapshot already reflects (and remember how far, see :meth:`sequence`)."""
        await self._store.run_write(lambda conn: conn.execute(
            "WITH d AS (DELETE FROM threadmind_vector_tombstones WHERE index_name = $1 AND seq <= $2) "
            "INSERT INTO threadmind_vector_pruned (index_name, seq) VALUES ($1, $2) ON CONFLICT (index_name) "
            "DO UPDATE SET seq = GREATEST(threadmind_vector_pruned.seq, EXCLUDED.seq)", index_name, upto_seq),
            "vector prune")

    async def scope_records(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> list[VectorRecord]:
        """The live records of one thread or resource (both given: the thread's rows of that resource)."""
        where, params = _scope(resource_id, thread_id)
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE index_name = $1{where}", index_name, *params),
            "vector read")
        return [_record(row) for row in rows]

    async def scope_embeddings(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> dict[str, bytes]:
        """Vector id → stored embedding of the scope's rows."""
        where, params = _scope(resource_id, thread_id)
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f"SELECT vector_id, embedding FROM threadmind_vectors WHERE index_name = $1{where}", index_name, *params),
            "vector read")
        return {str(row[0]): bytes(row[1]) for row in rows}

    async def load_page(self, index_name: str, after: int, limit: int) -> tuple[list[VectorRecord], int]:
        """Up to ``limit`` live records in storage order after position ``after``, and the last one's position."""
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f"SELECT pos, {_COLUMNS} FROM threadmind_vectors WHERE index_name = $1 AND pos > $2 ORDER BY pos LIMIT $3",
            index_name, after, limit), "vector load")
        return [_record(row[1:]) for row in rows], (int(rows[-1][0]) if rows else after)

    async def size_hint(self, index_name: str) -> int:
        """The largest storage position of the index: at least its number of rows, read from an index."""
        found = await self._store.run_read(lambda conn: conn.fetchval(
            "SELECT max(pos) FROM threadmind_vectors WHERE index_name = $1", index_name), "vector read")
        return int(found or 0)

    async def load_changes(
        self, index_name: str, since_seq: int, after: tuple[int, int], limit: int, until_seq: int | None = None
    ) -> tuple[list[VectorRecord], tuple[int, int]]:
        """Up to ``limit`` live records changed after ``since_seq`` (and not after ``until_seq``) in change order,
        after position ``after`` (start at ``(since_seq, 0)``); and the position to continue from."""
        until = (1 << 62) if until_seq is None else until_seq
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f"SELECT seq, pos, {_COLUMNS} FROM threadmind_vectors WHERE index_name = $1 AND seq > $2 AND seq <= $3 "
            "AND (seq, pos) > ($4, $5) ORDER BY seq, pos LIMIT $6",
            index_name, since_seq, until, after[0], after[1], limit), "vector load")
        if not rows:
            return [], after
        return [_record(row[2:]) for row in rows], (int(rows[-1][0]), int(rows[-1][1]))

    async def deleted_since(self, index_name: str, since_seq: int) -> list[str]:
        """Vector ids deleted after ``since_seq`` and not live again."""
        found: list[str] = await self._store.run_read(lambda conn: _deleted(conn, index_name, since_seq),
                                                      "vector load")
        return found

    async def sequence(self, index_name: str) -> tuple[int, int]:
        """The current change sequence, and how far tombstones of ``index_name`` were forgotten (one round trip)."""
        row = await self._store.run_read(lambda conn: conn.fetchrow(
            "SELECT (SELECT seq FROM threadmind_vector_seq WHERE id = 0), "
            "(SELECT seq FROM threadmind_vector_pruned WHERE index_name = $1)", index_name), "vector read")
        return int(row[0] or 0), int(row[1] or 0)

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        """Record messages that need vectors; an existing entry gets ``attempts + 1`` and the new error."""
        latest = {p.message_id: p for p in items}
        now = time.time()
        await self._store.run_write(lambda conn: conn.execute(
            "INSERT INTO threadmind_vector_pending (message_id, thread_id, resource_id, attempts, last_error, "
            "created_at, updated_at) SELECT u.m, u.t, u.r, 1, $4, $5, $5 FROM unnest($1::text[], $2::text[], "
            "$3::text[]) AS u(m, t, r) ON CONFLICT (message_id) DO UPDATE SET thread_id = EXCLUDED.thread_id, "
            "resource_id = EXCLUDED.resource_id, attempts = threadmind_vector_pending.attempts + 1, "
            "last_error = EXCLUDED.last_error, updated_at = EXCLUDED.updated_at",
            list(latest), [p.thread_id for p in latest.values()], [p.resource_id for p in latest.values()], error,
            now), "vector pending")

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        """Up to ``limit`` pending entries, least attempted first (they stay until cleared)."""
        rows = await self._store.run_read(lambda conn: conn.fetch(
            "SELECT message_id, thread_id, resource_id, attempts, last_error FROM threadmind_vector_pending "
            'WHERE attempts > 0 OR created_at < $1 ORDER BY attempts, updated_at, message_id COLLATE "C" LIMIT $2',
            _before(before), limit), "vector pending")
        return [_pending(row) for row in rows]

    async def clear_pending(self, ids: Sequence[str]) -> None:
        """Remove pending entries by message id."""
        await self._store.run_write(lambda conn: conn.execute(
            "DELETE FROM threadmind_vector_pending WHERE message_id = ANY($1::text[])", list(ids)), "vector pending")

    async def pending_count(self, before: float | None = None) -> int:
        """How many messages are pending (``before`` as in :meth:`take_pending`)."""
        count = await self._store.run_read(lambda conn: conn.fetchval(
            "SELECT count(*) FROM threadmind_vector_pending WHERE attempts > 0 OR created_at < $1", _before(before)),
            "vector pending")
        return int(count)

    async def message_ids_with_vectors(self, index_name: str) -> set[str]:
        """Ids of messages that have at least one vector in ``index_name``."""
        rows = await self._store.run_read(lambda conn: conn.fetch(
            "SELECT DISTINCT message_id FROM threadmind_vectors WHERE index_name = $1", index_name), "vector read")
        return {str(row[0]) for row in rows}
