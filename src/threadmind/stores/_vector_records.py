"""Vector records in the SQL store: the source of truth behind the hnswlib index (which is only a cache).

Every change gets a number from one monotonically increasing sequence: upserted and moved rows carry the
``seq`` of their last change, deletions leave a tombstone with theirs. An index snapshot remembers the
sequence it reflects, so a restart replays only what changed since (``load(index, since_seq)``) and a
deleted vector can never come back. Messages whose vectors could not be made wait in a pending table.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import msgspec

from ..codecs import Message

__all__ = (
    "PendingVector",
    "SQLExecutor",
    "SQLiteVectorRecords",
    "VectorRecord",
    "VectorRecords",
)

T = TypeVar("T")

# SQLite binds at most 32 766 parameters per statement; stay well below for IN (...) lists.
_IN_CHUNK = 500
# How long a write-behind vector write may wait to share the next commit (a lone caller's next save comes
# well within it): one commit per save instead of two.
_BACKGROUND_DEFER = 0.002


class VectorRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One stored vector: ids, scope, and the little-endian float32 ``embedding`` bytes."""

    vector_id: str
    message_id: str
    thread_id: str
    resource_id: str
    role: str
    created_at: str
    embedding: bytes


class PendingVector(msgspec.Struct, frozen=True, kw_only=True):
    """A message whose vectors are still owed (the embedder failed); retried by the index actor."""

    message_id: str
    thread_id: str
    resource_id: str
    attempts: int = 0
    last_error: str | None = None


@runtime_checkable
class VectorRecords(Protocol):
    """Durable vector rows, a change log for snapshot replay, and the pending queue."""

    async def upsert(self, index_name: str, records: Sequence[VectorRecord], *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        """Replace all vectors of the records' messages in ``index_name``; clear their pending entries.

        A stored message's rows take its thread and resource of the moment they commit (another process may have
        moved it since its vectors were made: its writes are not ordered with these); ``stored_only``: a message
        not stored then gets no rows (another process deleted it meanwhile); ``fresh_only``: a message with rows
        keeps them (a clone's copies yield to the rows an edit of the copy wrote meanwhile from its own text).
        ``written`` (when given) receives the records as stored. Returns the sequence number of the change.
        ``background``: nobody waits for it (write-behind), so the write may wait briefly to share the next commit.
        """
        ...

    async def delete_by_message_ids(self, index_name: str | None, ids: Sequence[str]) -> int:
        """Delete the messages' vectors (in every index when ``index_name`` is None) and pending entries."""
        ...

    async def delete_by_thread(self, thread_id: str) -> int:
        """Delete every vector and pending entry of a thread, in all indexes."""
        ...

    async def move_thread(self, thread_id: str, resource_id: str, *, written: list[str] | None = None) -> int:
        """Give the thread's vectors and pending entries a new ``resource_id``: the thread's resource when it commits,
        if the thread is stored (two processes moving one thread at once end with the resource its row has);
        ``written`` (when given) receives the resource written."""
        ...

    async def load(self, index_name: str, since_seq: int = 0) -> tuple[list[VectorRecord], list[str], int]:
        """Records changed after ``since_seq``, vector ids deleted after it (and not live), the current seq."""
        ...

    async def records_for_messages(self, index_name: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The live records of these messages (used to copy vectors when a thread is cloned)."""
        ...

    async def prune_tombstones(self, index_name: str, upto_seq: int) -> None:
        """Forget tombstones a saved snapshot already reflects."""

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        """Record messages that need vectors; an existing entry gets ``attempts + 1`` and the new error."""

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        """Up to ``limit`` pending entries, least attempted first (they stay until cleared).

        With ``before`` (a ``time.time()``), in-flight markers written after it (attempts 0) are left out.
        """
        ...

    async def clear_pending(self, ids: Sequence[str]) -> None:
        """Remove pending entries by message id."""

    async def pending_count(self, before: float | None = None) -> int:
        """How many messages are pending (``before`` as in :meth:`take_pending`)."""
        ...

    async def message_ids_with_vectors(self, index_name: str) -> set[str]:
        """Ids of messages that have at least one vector in ``index_name``."""
        ...

    async def scope_records(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> list[VectorRecord]:
        """The live records of one thread or resource (both given: the thread's rows of that resource)."""
        ...

    async def scope_embeddings(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> dict[str, bytes]:
        """Vector id → stored embedding of :meth:`scope_records`' rows (what an exact search reads)."""
        ...

    async def load_page(self, index_name: str, after: int, limit: int) -> tuple[list[VectorRecord], int]:
        """Up to ``limit`` live records in storage order after position ``after``; the last one's position
        (``after`` again when none are left). Start at 0: a rebuild reads the index in pages."""
        ...

    async def size_hint(self, index_name: str) -> int:
        """About how many vector rows there are (an upper bound, cheap to read)."""
        ...

    async def load_changes(
        self, index_name: str, since_seq: int, after: tuple[int, int], limit: int, until_seq: int | None = None
    ) -> tuple[list[VectorRecord], tuple[int, int]]:
        """Up to ``limit`` live records changed after ``since_seq`` (and not after ``until_seq``), in change
        order, after position ``after`` (start at ``(since_seq, 0)``); and the position to continue from. For
        replaying a long tail in pages."""
        ...

    async def deleted_since(self, index_name: str, since_seq: int) -> list[str]:
        """Vector ids deleted after ``since_seq`` and not live again."""
        ...

    async def sequence(self, index_name: str) -> tuple[int, int]:
        """The current change sequence, and the sequence up to which tombstones of ``index_name`` were
        forgotten (an index that reflects less than that cannot catch up by replay: it must be rebuilt)."""
        ...


@runtime_checkable
class SQLExecutor(Protocol):
    """What ``SQLiteStore`` offers to code that keeps its own tables: jobs run in the DB thread."""

    async def execute_write(self, fn: Callable[[sqlite3.Connection], T], *, defer: float = 0.0) -> T: ...

    async def execute_read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    def read_elsewhere(self) -> bool: ...


def _current_scopes(conn: sqlite3.Connection, message_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(in a write) Each stored message's thread and resource now (its own resource, else its thread's)."""
    found: dict[str, tuple[str, str]] = {}
    for part in _chunks(message_ids):
        for mid, thread_id, resource_id in conn.execute(
                'SELECT m.id, m.thread_id, coalesce(nullif(m."resourceId", \'\'), t."resourceId", \'\') '
                "FROM mastra_messages AS m LEFT JOIN mastra_threads AS t ON t.id = m.thread_id "
                f"WHERE m.id IN ({_marks(len(part))})", part):
            found[mid] = (thread_id or "", resource_id)
    return found


def _with_rows(conn: sqlite3.Connection, index_name: str, message_ids: Sequence[str]) -> set[str]:
    """(in a write) Those of the messages that have rows in the index."""
    found: set[str] = set()
    for part in _chunks(message_ids):
        found.update(row[0] for row in conn.execute(
            f"SELECT DISTINCT message_id FROM threadmind_vectors WHERE +index_name = ? AND message_id IN "
            f"({_marks(len(part))})", (index_name, *part)))
    return found


def _chunks(items: Sequence[str], size: int = _IN_CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


# ------------------------------------------------------------------------------------------- SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threadmind_vectors (
    index_name TEXT NOT NULL,
    vector_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at TEXT NOT NULL,
    embedding BLOB NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (index_name, vector_id)
);
CREATE INDEX IF NOT EXISTS threadmind_vectors_message ON threadmind_vectors (message_id);
CREATE INDEX IF NOT EXISTS threadmind_vectors_thread ON threadmind_vectors (thread_id);
CREATE INDEX IF NOT EXISTS threadmind_vectors_resource ON threadmind_vectors (resource_id);
CREATE INDEX IF NOT EXISTS threadmind_vectors_seq ON threadmind_vectors (index_name, seq);
CREATE TABLE IF NOT EXISTS threadmind_vector_tombstones (
    index_name TEXT NOT NULL,
    vector_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (index_name, vector_id)
);
CREATE INDEX IF NOT EXISTS threadmind_vector_tombstones_seq ON threadmind_vector_tombstones (index_name, seq);
CREATE TABLE IF NOT EXISTS threadmind_vector_seq (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO threadmind_vector_seq (id, seq) VALUES (0, 0);
CREATE TABLE IF NOT EXISTS threadmind_vector_pruned (
    index_name TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS threadmind_vector_pending (
    message_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
"""

_COLUMNS = "vector_id, message_id, thread_id, resource_id, role, created_at, embedding"


def _sqlite_scope(resource_id: str | None, thread_id: str | None) -> tuple[str, list[str]]:
    """The WHERE clause (after ``+index_name = ?``) and its parameters for one thread and/or resource."""
    if thread_id is not None:
        if resource_id is not None:
            return "thread_id = ? AND resource_id = ?", [thread_id, resource_id]
        return "thread_id = ?", [thread_id]
    if resource_id is not None:
        return "resource_id = ?", [resource_id]
    return "1", []


def _next_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("UPDATE threadmind_vector_seq SET seq = seq + 1 WHERE id = 0 RETURNING seq").fetchone()
    return int(row[0])


def _current_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT seq FROM threadmind_vector_seq WHERE id = 0").fetchone()
    return int(row[0]) if row else 0


def _pruned_seq(conn: sqlite3.Connection, index_name: str) -> int:
    row = conn.execute("SELECT seq FROM threadmind_vector_pruned WHERE index_name = ?", (index_name,)).fetchone()
    return int(row[0]) if row else 0


def _record(row: sqlite3.Row | tuple[object, ...]) -> VectorRecord:
    vector_id, message_id, thread_id, resource_id, role, created_at, embedding = tuple(row)
    return VectorRecord(
        vector_id=str(vector_id),
        message_id=str(message_id),
        thread_id=str(thread_id),
        resource_id=str(resource_id),
        role=str(role),
        created_at=str(created_at),
        embedding=bytes(embedding),
    )


def _tombstone_where(conn: sqlite3.Connection, seq: int, where: str, params: Sequence[object]) -> None:
    """Write tombstones for the rows matching ``where``, then delete those rows."""
    conn.execute(
        "INSERT OR REPLACE INTO threadmind_vector_tombstones (index_name, vector_id, seq) "
        f"SELECT index_name, vector_id, ? FROM threadmind_vectors WHERE {where}",
        (seq, *params),
    )
    conn.execute(f"DELETE FROM threadmind_vectors WHERE {where}", tuple(params))


class SQLiteVectorRecords:
    """Vector records in our own ``threadmind_*`` tables of a ``SQLiteStore`` (jobs on its DB thread)."""

    def __init__(self, store: SQLExecutor) -> None:
        self._store = store
        self._ready = False

    async def _ensure(self) -> None:
        if self._ready:
            return

        def _create(conn: sqlite3.Connection) -> None:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)

        await self._store.execute_write(_create)
        self._ready = True

    async def _write(self, fn: Callable[[sqlite3.Connection], T], defer: float = 0.0) -> T:
        await self._ensure()
        return await self._store.execute_write(fn, defer=defer)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        await self._ensure()
        return await self._store.execute_read(fn)

    async def ensure_tables(self) -> None:
        """Create our tables now (before any message save carries a pending marker)."""
        await self._ensure()

    async def database_file(self) -> str:
        """The path of the store's database file ("" for an in-memory database)."""

        def _main_file(conn: sqlite3.Connection) -> str:
            for _, name, file in conn.execute("PRAGMA database_list"):
                if name == "main":
                    return str(file or "")
            return ""

        return await self._store.execute_read(_main_file)

    def shared(self) -> bool:
        """Whether another store object (of another process, or a second one of this process) may query these
        rows now."""
        return self._store.read_elsewhere()

    @staticmethod
    def pending_marker(conn: sqlite3.Connection, messages: Sequence[Message]) -> None:
        """(inside a message save's transaction) Mark the messages as awaiting vectors.

        The write-behind vector upsert clears the marks; a crash in between leaves them for ``retry_pending``.
        """
        now = time.time()
        # Multi-row statements, not executemany: one GIL round trip per statement instead of per row.
        for start in range(0, len(messages), _IN_CHUNK):
            part = messages[start : start + _IN_CHUNK]
            conn.execute(
                "INSERT INTO threadmind_vector_pending (message_id, thread_id, resource_id, attempts, last_error, "
                "created_at, updated_at) VALUES " + ",".join(["(?, ?, ?, 0, NULL, ?, ?)"] * len(part))
                + " ON CONFLICT (message_id) DO NOTHING",
                [value for m in part for value in (m.id, m.thread_id, m.resource_id or "", now, now)],
            )

    async def upsert(self, index_name: str, records: Sequence[VectorRecord], *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        """See :meth:`VectorRecords.upsert` (the messages' thread and resource read in the write's transaction)."""
        message_ids = sorted({r.message_id for r in records})

        def _job(conn: sqlite3.Connection) -> int:
            live = _current_scopes(conn, message_ids)
            kept = _with_rows(conn, index_name, message_ids) if fresh_only else set()
            rows_now = [r if (now := live.get(r.message_id)) is None or now == (r.thread_id, r.resource_id)
                        else msgspec.structs.replace(r, thread_id=now[0], resource_id=now[1])
                        for r in records if (not stored_only or r.message_id in live) and r.message_id not in kept]
            if written is not None:
                written.extend(rows_now)
            new_ids = {r.vector_id for r in rows_now}
            seq = _next_seq(conn)
            for part in _chunks(message_ids):
                old = conn.execute(
                    # `+index_name`: look up by message_id (its index), not by scanning the whole PK prefix
                    "SELECT vector_id FROM threadmind_vectors WHERE +index_name = ? "
                    f"AND message_id IN ({_marks(len(part))})",
                    (index_name, *part),
                ).fetchall()
                gone = [(index_name, row[0], seq) for row in old if row[0] not in new_ids] if not fresh_only else []
                if gone:
                    conn.executemany(
                        "INSERT OR REPLACE INTO threadmind_vector_tombstones (index_name, vector_id, seq) "
                        "VALUES (?, ?, ?)",
                        gone,
                    )
                    conn.executemany(
                        "DELETE FROM threadmind_vectors WHERE index_name = ? AND vector_id = ?",
                        [(g[0], g[1]) for g in gone],
                    )
                conn.execute(f"DELETE FROM threadmind_vector_pending WHERE message_id IN ({_marks(len(part))})", part)
            for start in range(0, len(rows_now), _IN_CHUNK):  # multi-row: one GIL round trip per statement
                rows = rows_now[start : start + _IN_CHUNK]
                conn.execute(
                    "INSERT INTO threadmind_vectors (index_name, vector_id, message_id, thread_id, resource_id, "
                    "role, created_at, embedding, seq) VALUES " + ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
                    + " ON CONFLICT (index_name, vector_id) DO UPDATE SET message_id = excluded.message_id, "
                    "thread_id = excluded.thread_id, resource_id = excluded.resource_id, role = excluded.role, "
                    "created_at = excluded.created_at, embedding = excluded.embedding, seq = excluded.seq",
                    [
                        value
                        for r in rows
                        for value in (index_name, r.vector_id, r.message_id, r.thread_id, r.resource_id, r.role,
                                      r.created_at, r.embedding, seq)
                    ],
                )
            return seq

        return await self._write(_job, _BACKGROUND_DEFER if background else 0.0)

    async def delete_by_message_ids(self, index_name: str | None, ids: Sequence[str]) -> int:
        ids = list(ids)

        def _job(conn: sqlite3.Connection) -> int:
            seq = _next_seq(conn)
            for part in _chunks(ids):
                where = f"message_id IN ({_marks(len(part))})"
                if index_name is None:
                    _tombstone_where(conn, seq, where, part)
                else:
                    _tombstone_where(conn, seq, f"+index_name = ? AND {where}", (index_name, *part))
                conn.execute(f"DELETE FROM threadmind_vector_pending WHERE {where}", part)
            return seq

        return await self._write(_job)

    async def delete_by_thread(self, thread_id: str) -> int:
        def _job(conn: sqlite3.Connection) -> int:
            seq = _next_seq(conn)
            _tombstone_where(conn, seq, "thread_id = ?", (thread_id,))
            conn.execute("DELETE FROM threadmind_vector_pending WHERE thread_id = ?", (thread_id,))
            return seq

        return await self._write(_job)

    async def move_thread(self, thread_id: str, resource_id: str, *, written: list[str] | None = None) -> int:
        def _job(conn: sqlite3.Connection) -> int:
            row = conn.execute('SELECT "resourceId" FROM mastra_threads WHERE id = ?', (thread_id,)).fetchone()
            now = str(row[0]) if row is not None and row[0] else resource_id
            if written is not None:
                written.append(now)
            seq = _next_seq(conn)
            conn.execute(
                "UPDATE threadmind_vectors SET resource_id = ?, seq = ? WHERE thread_id = ?",
                (now, seq, thread_id),
            )
            conn.execute(
                "UPDATE threadmind_vector_pending SET resource_id = ? WHERE thread_id = ?", (now, thread_id)
            )
            return seq

        return await self._write(_job)

    async def load(self, index_name: str, since_seq: int = 0) -> tuple[list[VectorRecord], list[str], int]:
        def _job(conn: sqlite3.Connection) -> tuple[list[VectorRecord], list[str], int]:
            current = _current_seq(conn)
            records = [
                _record(row)
                for row in conn.execute(
                    f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE index_name = ? AND seq > ? ORDER BY seq, rowid",
                    (index_name, since_seq),
                )
            ]
            deleted: list[str] = []
            if since_seq > 0:
                deleted = [
                    str(row[0])
                    for row in conn.execute(
                        "SELECT t.vector_id FROM threadmind_vector_tombstones t WHERE t.index_name = ? AND t.seq > ? "
                        "AND NOT EXISTS (SELECT 1 FROM threadmind_vectors v "
                        "WHERE v.index_name = t.index_name AND v.vector_id = t.vector_id)",
                        (index_name, since_seq),
                    )
                ]
            return records, deleted, current

        return await self._read(_job)

    async def records_for_messages(self, index_name: str, ids: Sequence[str]) -> list[VectorRecord]:
        ids = list(ids)

        def _job(conn: sqlite3.Connection) -> list[VectorRecord]:
            out: list[VectorRecord] = []
            for part in _chunks(ids):
                out.extend(
                    _record(row)
                    for row in conn.execute(
                        f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE +index_name = ? "
                        f"AND message_id IN ({_marks(len(part))}) ORDER BY message_id, vector_id",
                        (index_name, *part),
                    )
                )
            return out

        return await self._read(_job)

    async def prune_tombstones(self, index_name: str, upto_seq: int) -> None:
        def _job(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM threadmind_vector_tombstones WHERE index_name = ? AND seq <= ?", (index_name, upto_seq)
            )
            conn.execute(
                "INSERT INTO threadmind_vector_pruned (index_name, seq) VALUES (?, ?) ON CONFLICT (index_name) "
                "DO UPDATE SET seq = max(seq, excluded.seq)",
                (index_name, upto_seq),
            )

        await self._write(_job)

    async def scope_records(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> list[VectorRecord]:
        where, params = _sqlite_scope(resource_id, thread_id)

        def _job(conn: sqlite3.Connection) -> list[VectorRecord]:
            # `+index_name`: use the scope's index, not the primary key's prefix
            return [_record(row) for row in conn.execute(
                f"SELECT {_COLUMNS} FROM threadmind_vectors WHERE +index_name = ? AND {where}", (index_name, *params)
            )]

        return await self._read(_job)

    async def scope_embeddings(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> dict[str, bytes]:
        where, params = _sqlite_scope(resource_id, thread_id)

        def _job(conn: sqlite3.Connection) -> dict[str, bytes]:
            return dict(conn.execute(
                f"SELECT vector_id, embedding FROM threadmind_vectors WHERE +index_name = ? AND {where}",
                (index_name, *params),
            ).fetchall())

        return await self._read(_job)

    async def load_page(self, index_name: str, after: int, limit: int) -> tuple[list[VectorRecord], int]:
        def _job(conn: sqlite3.Connection) -> tuple[list[VectorRecord], int]:
            rows = conn.execute(
                f"SELECT rowid, {_COLUMNS} FROM threadmind_vectors WHERE rowid > ? AND +index_name = ? "
                "ORDER BY rowid LIMIT ?",
                (after, index_name, limit),
            ).fetchall()
            return [_record(row[1:]) for row in rows], (int(rows[-1][0]) if rows else after)

        return await self._read(_job)

    async def load_changes(
        self, index_name: str, since_seq: int, after: tuple[int, int], limit: int, until_seq: int | None = None
    ) -> tuple[list[VectorRecord], tuple[int, int]]:
        seq, rowid = after
        until = (1 << 62) if until_seq is None else until_seq

        def _job(conn: sqlite3.Connection) -> tuple[list[VectorRecord], tuple[int, int]]:
            rows = conn.execute(
                f"SELECT seq, rowid, {_COLUMNS} FROM threadmind_vectors WHERE index_name = ? AND seq >= ? "
                "AND (seq > ? OR rowid > ?) AND seq > ? AND seq <= ? ORDER BY seq, rowid LIMIT ?",
                (index_name, seq, seq, rowid, since_seq, until, limit),
            ).fetchall()
            if not rows:
                return [], after
            return [_record(row[2:]) for row in rows], (int(rows[-1][0]), int(rows[-1][1]))

        return await self._read(_job)

    async def deleted_since(self, index_name: str, since_seq: int) -> list[str]:
        def _job(conn: sqlite3.Connection) -> list[str]:
            return [str(row[0]) for row in conn.execute(
                "SELECT t.vector_id FROM threadmind_vector_tombstones t WHERE t.index_name = ? AND t.seq > ? "
                "AND NOT EXISTS (SELECT 1 FROM threadmind_vectors v "
                "WHERE v.index_name = t.index_name AND v.vector_id = t.vector_id)",
                (index_name, since_seq),
            )]

        return await self._read(_job)

    async def size_hint(self, index_name: str) -> int:
        def _job(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT max(rowid) FROM threadmind_vectors").fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return await self._read(_job)

    async def sequence(self, index_name: str) -> tuple[int, int]:
        def _job(conn: sqlite3.Connection) -> tuple[int, int]:
            return _current_seq(conn), _pruned_seq(conn, index_name)

        return await self._read(_job)

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        now = time.time()

        def _job(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO threadmind_vector_pending (message_id, thread_id, resource_id, attempts, last_error, "
                "created_at, updated_at) VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET "
                "thread_id = excluded.thread_id, resource_id = excluded.resource_id, "
                "attempts = threadmind_vector_pending.attempts + 1, last_error = excluded.last_error, "
                "updated_at = excluded.updated_at",
                [(p.message_id, p.thread_id, p.resource_id, error, now, now) for p in items],
            )

        await self._write(_job)

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        def _job(conn: sqlite3.Connection) -> list[PendingVector]:
            return [
                PendingVector(message_id=r[0], thread_id=r[1], resource_id=r[2], attempts=r[3], last_error=r[4])
                for r in conn.execute(
                    "SELECT message_id, thread_id, resource_id, attempts, last_error FROM threadmind_vector_pending "
                    "WHERE attempts > 0 OR created_at < ? ORDER BY attempts, updated_at, message_id LIMIT ?",
                    (math.inf if before is None else before, limit),
                )
            ]

        return await self._read(_job)

    async def clear_pending(self, ids: Sequence[str]) -> None:
        ids = list(ids)

        def _job(conn: sqlite3.Connection) -> None:
            for part in _chunks(ids):
                conn.execute(f"DELETE FROM threadmind_vector_pending WHERE message_id IN ({_marks(len(part))})", part)

        await self._write(_job)

    async def pending_count(self, before: float | None = None) -> int:
        def _job(conn: sqlite3.Connection) -> int:
            return int(conn.execute(
                "SELECT count(*) FROM threadmind_vector_pending WHERE attempts > 0 OR created_at < ?",
                (math.inf if before is None else before,),
            ).fetchone()[0])

        return await self._read(_job)

    async def message_ids_with_vectors(self, index_name: str) -> set[str]:
        def _job(conn: sqlite3.Connection) -> set[str]:
            return {
                str(r[0])
                for r in conn.execute(
                    "SELECT DISTINCT message_id FROM threadmind_vectors WHERE index_name = ?", (index_name,)
                )
            }

        return await self._read(_job)
