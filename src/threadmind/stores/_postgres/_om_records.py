"""Observational-memory records in PostgreSQL: Mastra's ``mastra_observational_memory`` table (``@mastra/pg``).

The table is created with the store's schema (its 39 columns as ``@mastra/pg`` declares them). Encodings are that
package's: ``config`` is JSON text, ``observedMessageIds`` and ``metadata`` are ``jsonb``, flags are ``boolean``,
every timestamp is written in both forms and read ``…Z`` first. ``put`` replaces the whole row by id, as the SQLite
store's ``INSERT OR REPLACE`` does (columns threadmind does not model are reset).

Nothing is cached: processes on other hosts write the same table, so every ``current`` reads the server. ``replace``
is a compare-and-set in one transaction, under a transaction-scoped advisory lock on the lookup key (the key may
have no row yet), so two processes that observed the same messages never both commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._om import OM_TABLE, OMRecord, same_record
from ._pool import transaction
from ._rows import as_naive, decode_json, from_columns

__all__ = ("PostgresOMStore",)

# Written by threadmind, in this order; every other column of Mastra's table is reset to its NULL/false/0.
_WRITE = (
    "id", "lookupKey", "scope", "resourceId", "threadId", "activeObservations", "originType", "config",
    "generationCount", "lastObservedAt", "lastObservedAtZ", "lastReflectionAt", "lastReflectionAtZ",
    "pendingMessageTokens", "totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting",
    "observedMessageIds", "observedTimezone", "metadata", "createdAt", "createdAtZ", "updatedAt", "updatedAtZ",
    "bufferedObservationChunks", "lastBufferedAtTokens", "bufferedReflection", "bufferedReflectionTokens",
    "bufferedReflectionInputTokens", "reflectedObservationLineCount",
)
_CASTS = {"observedMessageIds": "::jsonb", "metadata": "::jsonb", "bufferedObservationChunks": "::jsonb"}
_RESET = {
    "activeObservationsPendingUpdate": "NULL", "bufferedObservations": "NULL", "bufferedObservationTokens": "NULL",
    "bufferedMessageIds": "NULL",
    "isBufferingObservation": "false", "isBufferingReflection": "false",
    "lastBufferedAtTime": "NULL", "lastBufferedAtTimeZ": "NULL",
}
_PUT = (
    f"INSERT INTO {OM_TABLE} ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in (*_WRITE, *_RESET))}) VALUES ("
    + ", ".join([f"${i + 1}{_CASTS.get(c, '')}" for i, c in enumerate(_WRITE)] + list(_RESET.values()))
    + ') ON CONFLICT (id) DO UPDATE SET '
    + ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in (*_WRITE[1:], *_RESET))
)
_READ = (
    'id, "lookupKey", scope, "resourceId", "threadId", "activeObservations", "originType", config, '
    '"generationCount", "lastObservedAt", "lastObservedAtZ", "lastReflectionAt", "lastReflectionAtZ", '
    '"pendingMessageTokens", "totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", '
    '"observedMessageIds"::text, "observedTimezone", metadata::text, "createdAt", "createdAtZ", "updatedAt", '
    '"updatedAtZ", "bufferedObservationChunks"::text, "lastBufferedAtTokens", "bufferedReflection", '
    '"bufferedReflectionTokens", "bufferedReflectionInputTokens", "reflectedObservationLineCount"'
)
_ORDER = 'ORDER BY "generationCount" {d}, COALESCE("createdAtZ", "createdAt") {d}'
_CURRENT = f'SELECT {_READ} FROM {OM_TABLE} WHERE "lookupKey" = $1 {_ORDER.format(d="DESC")} LIMIT 1'


def _stamp(value: datetime | None) -> tuple[datetime | None, datetime | None]:
    return (None, None) if value is None else (as_naive(value), value)


def _params(record: OMRecord) -> list[Any]:
    observed, observed_z = _stamp(record.last_observed_at)
    reflected, reflected_z = _stamp(record.last_reflection_at)
    created, created_z = _stamp(record.created_at)
    updated, updated_z = _stamp(record.updated_at)
    return [
        record.id, record.lookup_key, record.scope, record.resource_id, record.thread_id,
        record.active_observations, record.origin_type,
        json.dumps(record.config, separators=(",", ":"), default=str), record.generation_count,
        observed, observed_z, reflected, reflected_z, record.pending_message_tokens, record.total_tokens_observed,
        record.observation_token_count, bool(record.is_observing), bool(record.is_reflecting),
        json.dumps(record.observed_message_ids, separators=(",", ":")), record.observed_timezone,
        None if record.metadata is None else json.dumps(record.metadata, separators=(",", ":")),
        created, created_z, updated, updated_z,
        json.dumps(record.buffered_chunks, separators=(",", ":")) if record.buffered_chunks else None,
        record.last_buffered_at_tokens, record.buffered_reflection, record.buffered_reflection_tokens,
        record.buffered_reflection_input_tokens, record.reflected_line_count,
    ]


def _optional(zoned: datetime | None, plain: datetime | None) -> datetime | None:
    return None if zoned is None and plain is None else from_columns(zoned, plain)


def _from_row(row: Sequence[Any]) -> OMRecord:
    where = f"{OM_TABLE}[{row[0]}]"
    return OMRecord(
        id=row[0], lookup_key=row[1], scope="resource" if row[2] == "resource" else "thread",
        resource_id=row[3], thread_id=row[4], active_observations=row[5] or "", origin_type=row[6],
        config=decode_json(row[7], where + ".config") or {}, generation_count=int(row[8] or 0),
        last_observed_at=_optional(row[10], row[9]), last_reflection_at=_optional(row[12], row[11]),
        pending_message_tokens=int(row[13] or 0), total_tokens_observed=int(row[14] or 0),
        observation_token_count=int(row[15] or 0), is_observing=bool(row[16]), is_reflecting=bool(row[17]),
        observed_message_ids=list(decode_json(row[18], where + ".observedMessageIds") or []),
        observed_timezone=row[19],
        metadata=decode_json(row[20], where + ".metadata"), created_at=from_columns(row[22], row[21]),
        updated_at=from_columns(row[24], row[23]),
        buffered_chunks=[c for c in decode_json(row[25], where + ".bufferedObservationChunks") or []
                         if isinstance(c, dict)],
        last_buffered_at_tokens=int(row[26] or 0), buffered_reflection=row[27] or None,
        buffered_reflection_tokens=None if row[28] is None else int(row[28]),
        buffered_reflection_input_tokens=None if row[29] is None else int(row[29]),
        reflected_line_count=None if row[30] is None else int(row[30]),
    )


class PostgresOMStore:
    """``ObservationalMemoryStore`` over a ``PostgresStore``'s ``mastra_observational_memory`` table.

    ``ttl`` is accepted for the protocol's sake; records are always read from the server (see the module
    docstring).
    """

    def __init__(self, store: Any, ttl: float | None = None) -> None:
        self._store = store
        self._ttl = ttl

    async def current(self, key: str) -> OMRecord | None:
        """The newest generation for ``key``, or None."""
        row = await self._store.run_read(lambda conn: conn.fetchrow(_CURRENT, key), "observational memory read")
        return None if row is None else _from_row(row)

    async def history(self, key: str) -> list[OMRecord]:
        """Every generation for ``key``, oldest first."""
        rows = await self._store.run_read(lambda conn: conn.fetch(
            f'SELECT {_READ} FROM {OM_TABLE} WHERE "lookupKey" = $1 {_ORDER.format(d="ASC")}', key),
            "observational memory read")
        return [_from_row(row) for row in rows]

    async def put(self, record: OMRecord) -> None:
        """Insert or replace a record by id."""
        params = _params(record)
        await self._store.run_write(lambda conn: conn.execute(_PUT, *params), "observational memory write")

    async def replace(self, record: OMRecord, *, expected: OMRecord | None) -> bool:
        """Write ``record`` only if the current record of its key is still ``expected``, in one transaction."""
        params = _params(record)
        key = record.lookup_key

        async def run(conn: Any) -> bool:
            async with transaction(conn):
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"threadmind.om:{key}")
                row = await conn.fetchrow(_CURRENT, key)
                if not same_record(None if row is None else _from_row(row), expected):
                    return False
                await conn.execute(_PUT, *params)
                return True

        done: bool = await self._store.run_write(run, "observational memory write")
        return done

    async def delete(self, key: str) -> None:
        """Forget every generation for ``key``."""
        await self._store.run_write(lambda conn: conn.execute(
            f'DELETE FROM {OM_TABLE} WHERE "lookupKey" = $1', key), "observational memory write")
