"""The statements ``PostgresStore`` runs (each a parameterised query, written once here) and the parameters it
builds for them: threads, messages, resources, the export's keyset pages, lease arguments."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...codecs import Thread
from ...codecs._time import utc_now
from ...errors import ValidationError
from .._protocol import ResourceChange, UnsetType
from .._query import encode_metadata, stored_thread, validate_thread
from ._rows import (
    MSG_COLS,
    MSG_FROM,
    MSG_KEY,
    RESOURCE_COLS,
    THREAD_COLS,
    as_naive,
    as_object,
    check_text,
    metadata_param,
    order_by,
)

__all__ = (
    "STATS_KEYS",
    "STATS_SQL",
    "CHUNK",
    "CREATE_RESOURCE",
    "CREATE_THREAD",
    "DELETE_MESSAGES",
    "INSERT_MESSAGES",
    "MODIFY_RESOURCE",
    "RESOURCE_SET",
    "UPDATE_MESSAGES",
    "UPDATE_RESOURCE",
    "UPDATE_THREAD",
    "check_lease_args",
    "columns",
    "page_after",
    "resource_params",
    "thread_params",
)

CHUNK = 500  # messages a page of the export reads


CREATE_THREAD = (
    'WITH ins AS (INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "createdAtZ", '
    '"updatedAt", "updatedAtZ") VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING '
    "RETURNING id), seq AS (INSERT INTO threadmind_thread_seq (thread_id) SELECT id FROM ins "
    "ON CONFLICT (thread_id) DO UPDATE SET seq = DEFAULT) SELECT count(*) FROM ins"
)
INSERT_MESSAGES = (
    "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], "
    "$6::timestamp[], $7::timestamptz[], $8::text[]) WITH ORDINALITY AS i(id, thread_id, content, role, type, "
    "created, created_z, resource_id, ord)), "
    'ins AS (INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "createdAtZ", '
    '"resourceId") SELECT id, thread_id, content, role, type, created, created_z, resource_id FROM input '
    "ORDER BY ord) "
    "INSERT INTO threadmind_message_seq (message_id) SELECT id FROM input ORDER BY ord "
    "ON CONFLICT (message_id) DO NOTHING"
)
UPDATE_THREAD = (
    'UPDATE mastra_threads t SET title = COALESCE($2, t.title), metadata = CASE WHEN $3::boolean THEN '
    f"{as_object('t.metadata')} || $4::jsonb "
    'ELSE t.metadata END, "updatedAt" = $5, "updatedAtZ" = $6 WHERE t.id = $1 '
    f"RETURNING {THREAD_COLS}"
)
UPDATE_RESOURCE = (
    'INSERT INTO mastra_resources AS r (id, "workingMemory", metadata, "createdAt", "createdAtZ", "updatedAt", '
    '"updatedAtZ") VALUES ($1, $2, $3::jsonb, $4, $5, $4, $5) ON CONFLICT (id) DO UPDATE SET '
    '"workingMemory" = CASE WHEN $6::boolean THEN EXCLUDED."workingMemory" ELSE r."workingMemory" END, '
    f"metadata = CASE WHEN $7::boolean THEN {as_object('r.metadata')} || EXCLUDED.metadata ELSE r.metadata END, "
    '"updatedAt" = EXCLUDED."updatedAt", "updatedAtZ" = EXCLUDED."updatedAtZ" '
    f"RETURNING {RESOURCE_COLS}"
)
DELETE_MESSAGES = (
    "WITH d AS (DELETE FROM mastra_messages WHERE id = ANY($1::text[]) RETURNING thread_id), "
    "s AS (DELETE FROM threadmind_message_seq WHERE message_id = ANY($1::text[])), "
    'b AS (UPDATE mastra_threads SET "updatedAt" = $2, "updatedAtZ" = $3 WHERE id IN (SELECT thread_id FROM d)) '
    "SELECT DISTINCT thread_id FROM d"
)
UPDATE_MESSAGES = (
    "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamp[], "
    "$6::timestamptz[], $7::text[]) AS u(id, content, role, type, created, created_z, resource_id)), "
    'w AS (UPDATE mastra_messages m SET content = u.content, role = u.role, type = u.type, "createdAt" = u.created, '
    '"createdAtZ" = u.created_z, "resourceId" = u.resource_id FROM u WHERE m.id = u.id) '
    'UPDATE mastra_threads SET "updatedAt" = $8, "updatedAtZ" = $9 WHERE id = ANY($10::text[])'
)

RESOURCE_SET = (
    '"workingMemory" = CASE WHEN $6::boolean THEN $2 ELSE r."workingMemory" END, '
    f"metadata = CASE WHEN $7::boolean THEN {as_object('r.metadata')} || $3::jsonb ELSE r.metadata END, "
    '"updatedAt" = $4, "updatedAtZ" = $5'
)
MODIFY_RESOURCE = f"UPDATE mastra_resources r SET {RESOURCE_SET} WHERE r.id = $1 RETURNING {RESOURCE_COLS}"
CREATE_RESOURCE = (
    'INSERT INTO mastra_resources AS r (id, "workingMemory", metadata, "createdAt", "createdAtZ", "updatedAt", '
    f'"updatedAtZ") VALUES ($1, $2, $3::jsonb, $4, $5, $4, $5) ON CONFLICT (id) DO NOTHING RETURNING {RESOURCE_COLS}'
)



def page_after(thread_id: str, after: tuple[Any, ...] | None) -> Callable[[Any], Awaitable[list[Any]]]:
    """Keyset paging over one thread (for export)."""

    async def read(conn: Any) -> list[Any]:
        if after is None:
            return list(await conn.fetch(
                f"SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.thread_id = $1 ORDER BY {order_by(False)} LIMIT {CHUNK}",
                thread_id))
        return list(await conn.fetch(
            f"SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.thread_id = $1 AND "
            f"{MSG_KEY} > ($2::timestamp, $3::bigint, $4::text) ORDER BY {order_by(False)} LIMIT {CHUNK}",
            thread_id, *after))

    return read


def resource_params(resource_id: str, change: ResourceChange) -> list[Any]:
    """The parameters of ``MODIFY_RESOURCE`` / ``CREATE_RESOURCE`` for one change."""
    memory = None if isinstance(change.working_memory, UnsetType) else change.working_memory
    check_text(memory, "working_memory")
    patch = metadata_param(encode_metadata(dict(change.metadata or {}), "metadata"), "metadata")
    now = utc_now()
    return [resource_id, memory, patch, as_naive(now), now, not isinstance(change.working_memory, UnsetType),
            change.metadata is not None]


def check_lease_args(key: str, owner: str, ttl: float) -> None:
    for value, field in ((key, "key"), (owner, "owner")):
        if not isinstance(value, str) or not value:
            raise ValidationError(f"lease {field} must be a non-empty string, got {value!r}")
        check_text(value, field)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 1e9:
        raise ValidationError(f"lease ttl must be a number of seconds > 0, got {ttl!r}")


def thread_params(thread: Thread) -> tuple[Thread, list[Any]]:
    """The thread as stored and the parameters of ``CREATE_THREAD``."""
    validate_thread(thread)
    for name in ("id", "resource_id", "title"):
        check_text(getattr(thread, name), f"thread.{name}")
    stored, meta = stored_thread(thread)
    meta = metadata_param(meta, "thread.metadata")
    return stored, [stored.id, stored.resource_id, stored.title, meta, as_naive(stored.created_at), stored.created_at,
                    as_naive(stored.updated_at), stored.updated_at]


def columns(rows: Sequence[list[Any]]) -> list[list[Any]]:
    """Message rows (id, thread, content, role, type, created, resource) as the array columns of an insert."""
    return [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
            [r[4] for r in rows], [as_naive(r[5]) for r in rows], [r[5] for r in rows], [r[6] for r in rows]]


# The row counts ``PostgresStore.stats`` reports, with the database's size in bytes.
STATS_SQL = (
    "SELECT (SELECT count(*) FROM mastra_threads), (SELECT count(*) FROM mastra_messages), "
    '(SELECT count(*) FROM (SELECT "resourceId" FROM mastra_threads UNION SELECT id FROM mastra_resources) u), '
    "(SELECT count(*) FROM mastra_resources), pg_database_size(current_database())")
STATS_KEYS = ("threads", "messages", "resources", "working_memories", "file_bytes")
