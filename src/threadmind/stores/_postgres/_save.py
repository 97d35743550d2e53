"""The message save of ``PostgresStore``: any number of threads' parts in one statement, one round trip.

The statement bumps each thread's ``updatedAt`` where the thread exists and is owned by the messages' resource
(that ``UPDATE`` locks the rows, and re-checks them once a concurrent writer commits); only when every thread was
bumped does it upsert the messages (a re-saved id keeps its ``createdAt`` and position; an id of another thread is
skipped by the upsert's ``WHERE``), record new ids' insertion sequence, their keyword index rows (see
``_tsvector``; the versions of the keyword scopes they touch go up, and the statement returns each scope's
new version and its own share of the change) and, when asked, the pending-vector marks.
A fenced save also reads its lease rows ``FOR SHARE`` (see ``_lease_rows``; a statement that carries several
callers' saves checks each one's lease): when one was lost, the statement aborts itself with
``threadmind_fail('lease lost')`` and the store raises ``LeaseLost``.
When a thread was missed or an id skipped, ``threadmind_fail`` aborts the whole statement (SQLSTATE ``TM001``): it
runs in autocommit, so nothing of it is applied. The store then reads why (:data:`DIAGNOSE_SQL`) and raises what the
SQLite store raises, in its order (:func:`refusal`); when nothing is wrong any more (a concurrent writer moved on),
it runs the save again.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...codecs import Message
from ...errors import MessageIdTaken, ResourceMismatch, ThreadNotFound
from .._keyword_blocks import CountedRow
from .._protocol import Lease
from .._query import check_owner, encode_content_text, ms, validate_messages
from ._rows import as_naive, check_text, from_columns
from ._tsvector import BUMPED, entry_columns, keyword_entries

__all__ = ("DIAGNOSE_SQL", "SAVE_SQL", "Part", "kept", "parts_of", "refusal", "save_params", "save_sql")

SAVE_SQL = f"""
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamp[],
                       $7::timestamptz[], $8::text[])
    WITH ORDINALITY AS i(id, thread_id, content, role, type, created, created_z, resource_id, ord)
), bump AS (
  UPDATE mastra_threads t SET "updatedAt" = $11, "updatedAtZ" = $12
  FROM unnest($9::text[], $10::text[]) AS p(thread_id, resource_id)
  WHERE t.id = p.thread_id AND t."resourceId" = p.resource_id
  RETURNING t.id
), fence AS (
  SELECT l.owner = f.owner AND l.token = f.token AND l.expires_at > clock_timestamp() AS held
  FROM unnest($15::text[], $16::text[], $17::bigint[]) AS f(key, owner, token)
  JOIN threadmind_leases l ON l.key = f.key ORDER BY l.key FOR SHARE OF l
), go AS (
  SELECT count(*) = cardinality($9::text[]) AS ok,
         (SELECT count(*) FROM fence WHERE held) = cardinality($15::text[]) AS fenced
  FROM bump
), saved AS (
  INSERT INTO mastra_messages AS m (id, thread_id, content, role, type, "createdAt", "createdAtZ", "resourceId")
  SELECT i.id, i.thread_id, i.content, i.role, i.type, i.created, i.created_z, i.resource_id
  FROM input i, go WHERE go.ok AND go.fenced ORDER BY i.ord
  ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, role = EXCLUDED.role, type = EXCLUDED.type,
    "resourceId" = EXCLUDED."resourceId"
  WHERE m.thread_id = EXCLUDED.thread_id
  RETURNING m.id, m."createdAt", m."createdAtZ"
), seq AS (
  INSERT INTO threadmind_message_seq (message_id)
  SELECT i.id FROM input i, go WHERE go.ok ORDER BY i.ord
  ON CONFLICT (message_id) DO NOTHING
), pending AS (
  INSERT INTO threadmind_vector_pending (message_id, thread_id, resource_id, attempts, last_error, created_at,
                                         updated_at)
  SELECT i.id, i.thread_id, i.resource_id, 0, NULL, $13::float8, $13::float8
  FROM input i, go WHERE go.ok AND $14::boolean
  ON CONFLICT (message_id) DO NOTHING
), words AS (
  INSERT INTO threadmind_keywords AS k (message_id, thread_id, resource_id, len, tsv)
  SELECT u.id, u.thread_id, u.resource_id, u.len, u.tsv::tsvector
  FROM unnest($18::text[], $19::text[], $20::text[], $21::int[], $22::text[]) AS u(id, thread_id, resource_id, len,
                                                                                     tsv), go
  WHERE go.ok AND go.fenced
  ON CONFLICT (message_id) DO UPDATE SET thread_id = EXCLUDED.thread_id, resource_id = EXCLUDED.resource_id,
    len = EXCLUDED.len, tsv = EXCLUDED.tsv
  WHERE k.thread_id = EXCLUDED.thread_id
  RETURNING k.thread_id, k.resource_id
), before AS (
  SELECT k.thread_id, k.resource_id FROM threadmind_keywords k WHERE k.message_id = ANY($18::text[])
), touched AS (
  SELECT thread_id, resource_id FROM before UNION SELECT thread_id, resource_id FROM words
), {BUMPED}
SELECT CASE WHEN NOT go.fenced THEN threadmind_fail('lease lost')
            WHEN NOT go.ok OR (SELECT count(*) FROM saved) <> cardinality($1::text[])
            THEN threadmind_fail('refused') END,
       ARRAY(SELECT ROW(s.id, s."createdAt", s."createdAtZ") FROM saved s),
       ARRAY(SELECT ROW(b.scope, b.slot, b.n) FROM bumped b),
       pg_current_xact_id()::text
FROM go
"""


_SAVE_HEAD, _SAVE_TAIL = SAVE_SQL.split(f"{BUMPED}\n")
_MARKED = "FROM input i, go WHERE go.ok AND $14::boolean"
assert _SAVE_HEAD.count(_MARKED) == 1


@functools.lru_cache(maxsize=16)
def save_sql(table: str | None = None, vector_type: str = "", namespace: str = "") -> str:
    """:data:`SAVE_SQL`, and with a vector ``table`` the CTEs that replace the saved messages' vectors there (the
    parameters of :meth:`VectorRows.params` after the save's): only when the save applies, with each row's
    ``created_at`` as stored, and clearing the messages' pending marks. (The namespace is tested so that no index
    serves it, as ``PgVectorStore`` tests it everywhere: see ``namespace_is``.)"""
    if table is None:
        return SAVE_SQL
    vectors = f"""vrec AS (
  SELECT r.vector_id, r.metadata || jsonb_build_object('created_at', to_char(
           COALESCE(s."createdAtZ", s."createdAt" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
           'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) AS metadata,
         r.embedding
  FROM unnest($23::text[], $24::text[], $25::jsonb[], $26::{vector_type}[])
    AS r(vector_id, message_id, metadata, embedding)
  JOIN saved s ON s.id = r.message_id
), vgone AS (
  DELETE FROM {table} v USING go WHERE go.ok AND go.fenced AND COALESCE(v.namespace, '') = '{namespace}'
    AND v.metadata->>'message_id' = ANY($24::text[]) AND NOT (v.vector_id = ANY($23::text[]))
), vpending AS (
  DELETE FROM threadmind_vector_pending p USING go WHERE go.ok AND go.fenced AND p.message_id = ANY($24::text[])
), vsaved AS (
  INSERT INTO {table} (vector_id, embedding, metadata, namespace)
  SELECT vector_id, embedding, metadata, '{namespace}' FROM vrec
  ON CONFLICT (namespace, vector_id) DO UPDATE SET embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata
), """
    # Messages whose vectors the statement writes are not marked (a batch across threads may mark its other parts).
    head = _SAVE_HEAD.replace(_MARKED, _MARKED + " AND NOT (i.id = ANY($24::text[]))")
    return f"{head}{vectors}{BUMPED}\n{_SAVE_TAIL}"


DIAGNOSE_SQL = """
SELECT ARRAY(SELECT ROW(t.id, t."resourceId") FROM mastra_threads t WHERE t.id = ANY($1::text[])),
       ARRAY(SELECT ROW(m.id, m.thread_id) FROM mastra_messages m WHERE m.id = ANY($2::text[]))
"""


class Part:
    """One thread's messages of a save: as validated, and as rows (one per id: first position, last content)."""

    __slots__ = ("messages", "resource", "rows", "thread_id")

    def __init__(self, thread_id: str, messages: list[Message]) -> None:
        self.thread_id = thread_id
        self.messages = messages
        rows: dict[str, list[Any]] = {}
        for i, m in enumerate(messages):
            for value, field in ((m.id, "id"), (m.resource_id, "resource_id"), (m.role, "role"), (m.type, "type")):
                check_text(value, f"messages[{i}].{field}")
            created = ms(m.created_at)
            first = rows.get(m.id)
            rows[m.id] = [m.id, thread_id, encode_content_text(m.content), m.role, m.type or "v2",
                          first[5] if first else created, m.resource_id]
        self.rows = rows
        resources = {m.resource_id for m in messages}
        self.resource = resources.pop() if len(resources) == 1 else None


def parts_of(by_thread: Mapping[str, Sequence[Message]]) -> list[Part]:
    """Validated parts (empty ones dropped); an id in two parts is refused (it cannot belong to both)."""
    checked = {thread_id: validate_messages(thread_id, messages) for thread_id, messages in by_thread.items()}
    parts = [Part(thread_id, messages) for thread_id, messages in checked.items() if messages]
    claimed: dict[str, str] = {}
    for part in parts:
        check_text(part.thread_id, "thread_id")
        for mid in part.rows:
            other = claimed.setdefault(mid, part.thread_id)
            if other != part.thread_id:
                raise MessageIdTaken(mid, other, part.thread_id)
    return parts


def save_params(parts: Sequence[Part], now: datetime, mark_pending: bool,
                fences: Sequence[Lease]) -> tuple[list[Any], list[CountedRow]]:
    """The parameters of :data:`SAVE_SQL`, and the keyword rows it writes (for the store's cached blocks)."""
    rows = [row for part in parts for row in part.rows.values()]
    entries = keyword_entries([(m, m.resource_id or part.resource or "") for part in parts for m in part.messages])
    threads = sorted(parts, key=lambda part: part.thread_id)  # concurrent saves lock their threads in one order
    return [
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
        [r[4] for r in rows], [as_naive(r[5]) for r in rows], [r[5] for r in rows], [r[6] for r in rows],
        [p.thread_id for p in threads], [p.resource for p in threads],
        as_naive(now), now, time.time(), mark_pending,
        [f.key for f in fences], [f.owner for f in fences], [f.token for f in fences],
        *entry_columns(entries),
    ], [row for row, _ in entries]


def refusal(parts: Sequence[Part], record: Any) -> Exception | None:
    """The error the first failing part earns, from :data:`DIAGNOSE_SQL`'s row; None when nothing is wrong."""
    owners = dict(record[0])
    homes = dict(record[1])
    for part in parts:
        owner = owners.get(part.thread_id)
        if owner is None:
            return ThreadNotFound(part.thread_id)
        try:
            check_owner(part.thread_id, owner, part.messages)
        except ResourceMismatch as exc:
            return exc
        for mid in part.rows:
            home = homes.get(mid)
            if home is not None and home != part.thread_id:
                return MessageIdTaken(mid, home, part.thread_id)
    return None


def kept(parts: Sequence[Part], saved: Any) -> dict[str, dict[str, datetime]]:
    """Per thread, the re-saved ids whose stored ``createdAt`` was kept (differs from the one written)."""
    stored = {mid: from_columns(zoned, plain) for mid, plain, zoned in saved}
    out: dict[str, dict[str, datetime]] = {}
    for part in parts:
        mine: dict[str, datetime] = {}
        for mid, row in part.rows.items():
            at = stored.get(mid)
            if at is not None and at != row[5]:
                mine[mid] = at
        out[part.thread_id] = mine
    return out
