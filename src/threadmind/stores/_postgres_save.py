"""The message save of ``PostgresStore``: any number of threads' parts in one statement, one round trip.

The statement locks the threads' rows (``FOR UPDATE``, in id order so concurrent saves never deadlock), checks
everything ``save_messages`` promises (each thread exists, every message carries its owner's resource id, no id
belongs to another thread), and only when all of that holds bumps ``updatedAt``, upserts the messages (a re-saved id
keeps its ``createdAt`` and position), records new ids' insertion sequence and, when asked, the pending-vector marks.
It runs in autocommit, so it is applied whole or not at all. Refusals come back as data and are raised here in the
order the SQLite store raises them. One race is left to the statement itself: an id inserted into another thread
by a transaction that committed after the statement's snapshot is skipped by the upsert's ``WHERE``; the row count
then differs and ``threadmind_fail`` aborts the statement (SQLSTATE ``TM001``), which the store re-runs once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..codecs import Message
from ..errors import ThreadNotFound, ValidationError
from . import _query as q
from ._postgres_rows import as_naive, check_text, from_columns

__all__ = ("SAVE_SQL", "Part", "interpret", "parts_of", "save_params")

SAVE_SQL = """
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamp[],
                       $7::timestamptz[], $8::text[])
    WITH ORDINALITY AS i(id, thread_id, content, role, type, created, created_z, resource_id, ord)
), parts AS (
  SELECT * FROM unnest($9::text[], $10::text[]) AS p(thread_id, resource_id)
), owners AS (
  SELECT t.id, t."resourceId" FROM mastra_threads t WHERE t.id = ANY($9::text[]) ORDER BY t.id FOR UPDATE
), clash AS (
  SELECT m.id, m.thread_id FROM mastra_messages m JOIN input i ON i.id = m.id WHERE m.thread_id <> i.thread_id
), verdict AS (
  SELECT NOT EXISTS (SELECT 1 FROM parts p LEFT JOIN owners o ON o.id = p.thread_id
                     WHERE o.id IS NULL OR p.resource_id IS NULL OR o."resourceId" <> p.resource_id)
     AND NOT EXISTS (SELECT 1 FROM clash) AS ok
), bump AS (
  UPDATE mastra_threads t SET "updatedAt" = $11, "updatedAtZ" = $12
  FROM verdict WHERE verdict.ok AND t.id = ANY($9::text[]) RETURNING t.id
), saved AS (
  INSERT INTO mastra_messages AS m (id, thread_id, content, role, type, "createdAt", "createdAtZ", "resourceId")
  SELECT i.id, i.thread_id, i.content, i.role, i.type, i.created, i.created_z, i.resource_id
  FROM input i, verdict WHERE verdict.ok ORDER BY i.ord
  ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, role = EXCLUDED.role, type = EXCLUDED.type,
    "resourceId" = EXCLUDED."resourceId"
  WHERE m.thread_id = EXCLUDED.thread_id
  RETURNING m.id, m."createdAt", m."createdAtZ"
), seq AS (
  INSERT INTO threadmind_message_seq (message_id)
  SELECT i.id FROM input i, verdict WHERE verdict.ok ORDER BY i.ord
  ON CONFLICT (message_id) DO NOTHING
), pending AS (
  INSERT INTO threadmind_vector_pending (message_id, thread_id, resource_id, attempts, last_error, created_at,
                                         updated_at)
  SELECT i.id, i.thread_id, i.resource_id, 0, NULL, $13::float8, $13::float8
  FROM input i, verdict WHERE verdict.ok AND $14::boolean
  ON CONFLICT (message_id) DO NOTHING
)
SELECT v.ok,
  ARRAY(SELECT ROW(o.id, o."resourceId") FROM owners o) AS owners,
  ARRAY(SELECT ROW(c.id, c.thread_id) FROM clash c) AS clash,
  ARRAY(SELECT ROW(s.id, s."createdAt", s."createdAtZ") FROM saved s) AS saved,
  CASE WHEN v.ok AND (SELECT count(*) FROM saved) <> $15
       THEN threadmind_fail('a message id of this save was claimed by another thread while it ran') END
FROM verdict v
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
            created = q.ms(m.created_at)
            first = rows.get(m.id)
            rows[m.id] = [m.id, thread_id, q.encode_content_text(m.content), m.role, m.type or "v2",
                          first[5] if first else created, m.resource_id]
        self.rows = rows
        resources = {m.resource_id for m in messages}
        self.resource = resources.pop() if len(resources) == 1 else None


def parts_of(by_thread: Mapping[str, Sequence[Message]]) -> list[Part]:
    """Validated parts (empty ones dropped); an id in two parts is refused (it cannot belong to both)."""
    checked = {thread_id: q.validate_messages(thread_id, messages) for thread_id, messages in by_thread.items()}
    parts = [Part(thread_id, messages) for thread_id, messages in checked.items() if messages]
    claimed: dict[str, str] = {}
    for part in parts:
        check_text(part.thread_id, "thread_id")
        for mid in part.rows:
            other = claimed.setdefault(mid, part.thread_id)
            if other != part.thread_id:
                raise ValidationError(f"message id {mid!r} already belongs to thread {other!r}; a message cannot "
                                      f"move to thread {part.thread_id!r}")
    return parts


def save_params(parts: Sequence[Part], now: datetime, mark_pending: bool) -> list[Any]:
    """The parameters of :data:`SAVE_SQL`."""
    rows = [row for part in parts for row in part.rows.values()]
    return [
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
        [r[4] for r in rows], [as_naive(r[5]) for r in rows], [r[5] for r in rows], [r[6] for r in rows],
        [p.thread_id for p in parts], [p.resource for p in parts],
        as_naive(now), now, time.time(), mark_pending, len(rows),
    ]


def interpret(parts: Sequence[Part], record: Any) -> dict[str, dict[str, datetime]]:
    """The refusal of the first failing part (raised), or per thread the re-saved ids whose ``createdAt`` was kept."""
    if not record[0]:
        owners = dict(record[1])
        clash = dict(record[2])
        for part in parts:
            owner = owners.get(part.thread_id)
            if owner is None:
                raise ThreadNotFound(part.thread_id)
            q.check_owner(part.thread_id, owner, part.messages)
            for mid in part.rows:
                if mid in clash:
                    raise ValidationError(f"message id {mid!r} already belongs to thread {clash[mid]!r}; a message "
                                          f"cannot move to thread {part.thread_id!r}")
        raise AssertionError("the save was refused for no reason it reports")  # pragma: no cover
    stored = {mid: from_columns(zoned, plain) for mid, plain, zoned in record[3]}
    kept: dict[str, dict[str, datetime]] = {}
    for part in parts:
        mine: dict[str, datetime] = {}
        for mid, row in part.rows.items():
            at = stored.get(mid)
            if at is not None and at != row[5]:
                mine[mid] = at
        kept[part.thread_id] = mine
    return kept
