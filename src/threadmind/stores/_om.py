"""Observational-memory records: one row per generation in Mastra's ``mastra_observational_memory`` table.

SQLite gets the reference's table (column names, declared types and ``NOT NULL`` as Mastra's
``OBSERVATIONAL_MEMORY_SCHEMA``), created ``IF NOT EXISTS`` on first use through the store's writer;
JSON columns are written as JSON text, timestamps as ISO-8601 text, booleans as 0/1. Any other store
keeps its records in a dictionary owned by the :class:`ObservationalMemoryStore` object.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, Protocol

import anyio
import msgspec

from ..codecs._jsonb import decode_jsonb
from ..codecs._time import from_iso, to_iso
from ..errors import StorageError
from ._versions import FileCounts, WriteCounts

__all__ = (
    "OM_TABLE",
    "InMemoryOMStore",
    "OMRecord",
    "ObservationalMemoryStore",
    "SQLiteOMStore",
    "compare_and_set",
    "lookup_key",
    "same_record",
)

OM_TABLE = "mastra_observational_memory"
_CAS_ATTEMPTS = 8  # compare-and-set rounds a commit tries while other writers change the record under it

OriginType = Literal["initialization", "observation", "reflection"]

# (column, declared type, NOT NULL) in Mastra's order.
_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "TEXT", True),
    ("lookupKey", "TEXT", True),
    ("scope", "TEXT", True),
    ("resourceId", "TEXT", False),
    ("threadId", "TEXT", False),
    ("activeObservations", "TEXT", True),
    ("activeObservationsPendingUpdate", "TEXT", False),
    ("originType", "TEXT", True),
    ("config", "TEXT", True),
    ("generationCount", "INTEGER", True),
    ("lastObservedAt", "TEXT", False),
    ("lastReflectionAt", "TEXT", False),
    ("pendingMessageTokens", "INTEGER", True),
    ("totalTokensObserved", "INTEGER", True),
    ("observationTokenCount", "INTEGER", True),
    ("isObserving", "INTEGER", True),
    ("isReflecting", "INTEGER", True),
    ("observedMessageIds", "TEXT", False),
    ("observedTimezone", "TEXT", False),
    ("bufferedObservations", "TEXT", False),
    ("bufferedObservationTokens", "INTEGER", False),
    ("bufferedMessageIds", "TEXT", False),
    ("bufferedReflection", "TEXT", False),
    ("bufferedReflectionTokens", "INTEGER", False),
    ("bufferedReflectionInputTokens", "INTEGER", False),
    ("reflectedObservationLineCount", "INTEGER", False),
    ("bufferedObservationChunks", "TEXT", False),
    ("isBufferingObservation", "INTEGER", True),
    ("isBufferingReflection", "INTEGER", True),
    ("lastBufferedAtTokens", "INTEGER", True),
    ("lastBufferedAtTime", "TEXT", False),
    ("metadata", "TEXT", False),
    ("createdAt", "TEXT", True),
    ("updatedAt", "TEXT", True),
)
_NAMES = tuple(name for name, _, _ in _COLUMNS)
_DDL = (
    f"CREATE TABLE IF NOT EXISTS {OM_TABLE} (\n"
    + ",\n".join(
        f'  "{name}" {kind}{" NOT NULL" if not_null else ""}{" PRIMARY KEY" if name == "id" else ""}'
        for name, kind, not_null in _COLUMNS
    )
    + "\n)",
    f'CREATE INDEX IF NOT EXISTS idx_om_lookup_key ON {OM_TABLE} ("lookupKey")',
)
_SELECT = ", ".join(f'"{name}"' for name in _NAMES)
_INSERT = f"INSERT OR REPLACE INTO {OM_TABLE} ({_SELECT}) VALUES ({', '.join('?' for _ in _NAMES)})"


def lookup_key(scope: str, thread_id: str | None, resource_id: str | None) -> str:
    """``thread:<id>`` or ``resource:<id>``: how records of one scope key are found."""
    return f"resource:{resource_id}" if scope == "resource" else f"thread:{thread_id}"


class OMRecord(msgspec.Struct, kw_only=True):
    """One generation of observational memory (the live one is the highest ``generation_count``)."""

    id: str
    lookup_key: str
    scope: Literal["thread", "resource"]
    resource_id: str | None
    thread_id: str | None
    active_observations: str = ""
    origin_type: OriginType = "initialization"
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    generation_count: int = 0
    last_observed_at: datetime | None = None
    last_reflection_at: datetime | None = None
    pending_message_tokens: int = 0
    total_tokens_observed: int = 0
    observation_token_count: int = 0
    is_observing: bool = False
    is_reflecting: bool = False
    observed_message_ids: list[str] = msgspec.field(default_factory=list)
    observed_timezone: str | None = None
    metadata: dict[str, Any] | None = None
    #: Observations computed ahead of the threshold, not yet active (``bufferedObservationChunks``, Mastra's
    #: chunk objects: ``cycleId``, ``observations``, ``tokenCount``, ``messageIds``, ``messageTokens``,
    #: ``lastObservedAt``, ``createdAt``), oldest first; and the unobserved tokens at the last buffering.
    buffered_chunks: list[dict[str, Any]] = msgspec.field(default_factory=list)
    last_buffered_at_tokens: int = 0
    #: A reflection computed ahead (``bufferedReflection``) of the first ``reflected_line_count`` lines of the
    #: observations, its tokens, and the tokens of what it condensed; the rest of the lines follow it when it
    #: becomes the next generation.
    buffered_reflection: str | None = None
    buffered_reflection_tokens: int | None = None
    buffered_reflection_input_tokens: int | None = None
    reflected_line_count: int | None = None
    created_at: datetime
    updated_at: datetime

    def copy(self) -> OMRecord:
        """An independent copy (records handed out are never shared with the store's own)."""
        return msgspec.structs.replace(self, config=dict(self.config),
                                       observed_message_ids=list(self.observed_message_ids),
                                       metadata=dict(self.metadata) if self.metadata is not None else None,
                                       buffered_chunks=[dict(c, messageIds=list(c.get("messageIds") or []))
                                                        for c in self.buffered_chunks])


def _row(record: OMRecord) -> tuple[Any, ...]:
    values: dict[str, Any] = {
        "id": record.id,
        "lookupKey": record.lookup_key,
        "scope": record.scope,
        "resourceId": record.resource_id,
        "threadId": record.thread_id,
        "activeObservations": record.active_observations,
        "originType": record.origin_type,
        "config": json.dumps(record.config, separators=(",", ":"), default=str),
        "generationCount": record.generation_count,
        "lastObservedAt": to_iso(record.last_observed_at) if record.last_observed_at else None,
        "lastReflectionAt": to_iso(record.last_reflection_at) if record.last_reflection_at else None,
        "pendingMessageTokens": record.pending_message_tokens,
        "totalTokensObserved": record.total_tokens_observed,
        "observationTokenCount": record.observation_token_count,
        "isObserving": int(record.is_observing),
        "isReflecting": int(record.is_reflecting),
        "observedMessageIds": json.dumps(record.observed_message_ids, separators=(",", ":")),
        "observedTimezone": record.observed_timezone,
        "bufferedObservationChunks": json.dumps(record.buffered_chunks, separators=(",", ":"))
        if record.buffered_chunks else None,
        "bufferedReflection": record.buffered_reflection,
        "bufferedReflectionTokens": record.buffered_reflection_tokens,
        "bufferedReflectionInputTokens": record.buffered_reflection_input_tokens,
        "reflectedObservationLineCount": record.reflected_line_count,
        "isBufferingObservation": 0,
        "isBufferingReflection": 0,
        "lastBufferedAtTokens": record.last_buffered_at_tokens,
        "metadata": json.dumps(record.metadata, separators=(",", ":")) if record.metadata is not None else None,
        "createdAt": to_iso(record.created_at),
        "updatedAt": to_iso(record.updated_at),
    }
    return tuple(values.get(name) for name in _NAMES)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _json(value: Any, where: str) -> Any:
    """A JSON text column, or a JSONB blob as Mastra writes them."""
    if value is None:
        return None
    try:
        return decode_jsonb(value) if isinstance(value, (bytes, bytearray)) else json.loads(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StorageError(f"{where} is not valid JSON/JSONB: {exc}") from exc


def _from_row(row: sqlite3.Row | tuple[Any, ...]) -> OMRecord:
    """A stored row as a record; a row no record can hold (bad times, counts, JSON) is a ``StorageError`` naming
    the row and the cause."""
    v = dict(zip(_NAMES, row, strict=True))
    where = f"{OM_TABLE}[{v['id']}]"
    try:
        return _record_of(v, where)
    except StorageError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise StorageError(f"{where} cannot be read as an observational-memory record: {exc}") from exc


def _record_of(v: dict[str, Any], where: str) -> OMRecord:
    return OMRecord(
        id=v["id"],
        lookup_key=v["lookupKey"],
        scope="resource" if v["scope"] == "resource" else "thread",
        resource_id=v["resourceId"],
        thread_id=v["threadId"],
        active_observations=v["activeObservations"] or "",
        origin_type=v["originType"],
        config=_json(v["config"], where + ".config") or {},
        generation_count=int(v["generationCount"] or 0),
        last_observed_at=from_iso(v["lastObservedAt"]) if v["lastObservedAt"] else None,
        last_reflection_at=from_iso(v["lastReflectionAt"]) if v["lastReflectionAt"] else None,
        pending_message_tokens=int(v["pendingMessageTokens"] or 0),
        total_tokens_observed=int(v["totalTokensObserved"] or 0),
        observation_token_count=int(v["observationTokenCount"] or 0),
        is_observing=bool(v["isObserving"]),
        is_reflecting=bool(v["isReflecting"]),
        observed_message_ids=list(_json(v["observedMessageIds"], where + ".observedMessageIds") or []),
        observed_timezone=v["observedTimezone"],
        metadata=_json(v["metadata"], where + ".metadata"),
        buffered_chunks=[c for c in _json(v["bufferedObservationChunks"], where + ".bufferedObservationChunks")
                         or [] if isinstance(c, dict)],
        last_buffered_at_tokens=int(v["lastBufferedAtTokens"] or 0),
        buffered_reflection=v["bufferedReflection"] or None,
        buffered_reflection_tokens=_int_or_none(v["bufferedReflectionTokens"]),
        buffered_reflection_input_tokens=_int_or_none(v["bufferedReflectionInputTokens"]),
        reflected_line_count=_int_or_none(v["reflectedObservationLineCount"]),
        created_at=from_iso(v["createdAt"]),
        updated_at=from_iso(v["updatedAt"]),
    )


class ObservationalMemoryStore(Protocol):
    """Where OM records live: the current generation per lookup key, and every generation for history."""

    async def current(self, key: str) -> OMRecord | None:
        """The newest generation for ``key``, or None."""
        ...

    async def history(self, key: str) -> list[OMRecord]:
        """Every generation for ``key``, oldest first."""
        ...

    async def put(self, record: OMRecord) -> None:
        """Insert or replace a record by id."""
        ...

    async def replace(self, record: OMRecord, *, expected: OMRecord | None) -> bool:
        """Write ``record`` only if the current record of its key is still ``expected`` (see ``same_record``;
        None: there is none), in one transaction; False (nothing written) otherwise. Two processes that
        observed the same messages can therefore never both commit."""
        ...

    async def delete(self, key: str) -> None:
        """Forget every generation for ``key``."""
        ...


_CURRENT_TTL = 2.0  # seconds a current record is kept (as the thread actors keep their tails)
_CURRENT_KEYS = 4096  # most keys kept, least recently asked dropped first


def same_record(a: OMRecord | None, b: OMRecord | None) -> bool:
    """Whether two reads saw the same generation with the same observations (id, generation, cursor, text,
    buffered chunks and reflection)."""
    if a is None or b is None:
        return a is b
    return (a.id, a.generation_count, a.last_observed_at, a.active_observations, a.buffered_chunks,
            a.buffered_reflection) == \
        (b.id, b.generation_count, b.last_observed_at, b.active_observations, b.buffered_chunks, b.buffered_reflection)


async def compare_and_set(records: ObservationalMemoryStore, key: str,
                          change: Callable[[OMRecord | None], OMRecord | None]) -> OMRecord | None:
    """Write ``change(current)`` over the record ``key`` by compare-and-set and return it; when another writer (a
    turn activating chunks, in any process: activations take no claim) changed the record between the read and the
    write, read it again and ask ``change`` again, so a result that still fits is kept rather than dropped and
    computed a second time. None when ``change`` says it no longer fits (returns None) or every attempt lost."""
    for _ in range(_CAS_ATTEMPTS):
        current = await records.current(key)
        record = change(current)
        if record is None:
            return None
        if await records.replace(record, expected=current):
            return record
    return None


class SQLiteOMStore:

    """OM records in the SQLite file, through the store's group-commit writer and snapshot reader.

    Every agent turn with observational memory asks for the current record, which changes only when an
    observation or reflection is written; so the current record of each key is kept for ``_CURRENT_TTL``
    seconds (a bound on staleness when another process writes the file). Every write to a key, through this
    object or another on the same file in this process, counts in the file's shared ``records`` counter: a
    kept record whose count moved is dropped, and a read that overlapped a write is not kept.
    """

    def __init__(self, store: Any, ttl: float | None = None) -> None:
        self._store = store
        self._ttl = ttl  # None: _CURRENT_TTL
        self._ready = False
        self._lock = anyio.Lock()
        # key -> (record, expires at, (the key's write count, the store's cache epoch) when it was read)
        self._current: OrderedDict[str, tuple[OMRecord | None, float, tuple[int, int]]] = OrderedDict()
        self._own_counts = WriteCounts()  # for a store that shares no counters

    def _counts(self) -> WriteCounts:
        counts = getattr(self._store, "write_counts", None)  # read each time: shared once the store is open
        return counts.records if isinstance(counts, FileCounts) else self._own_counts

    async def _ensure(self) -> None:
        if self._ready:
            return
        async with self._lock:
            if not self._ready:

                def create(conn: sqlite3.Connection) -> None:
                    for statement in _DDL:
                        conn.execute(statement)

                await self._store.execute_write(create)
                self._ready = True

    def _epoch(self) -> int | None:
        """The store's cache epoch: a kept record read in the same epoch may be served (no other process can have
        written the file since); None while another process may be writing (read through)."""
        epoch = getattr(self._store, "cache_epoch", None)
        result: int | None = 0 if epoch is None else epoch()
        return result

    async def current(self, key: str) -> OMRecord | None:
        await self._ensure()
        counts = self._counts()
        epoch = self._epoch()
        seen = (counts.get(key), -1 if epoch is None else epoch)
        cached = self._current.get(key)
        trusted = epoch is not None
        if trusted and cached is not None and time.monotonic() < cached[1] and cached[2] == seen:
            self._current.move_to_end(key)
            await anyio.lowlevel.checkpoint()
            return cached[0].copy() if cached[0] is not None else None
        columns = _SELECT

        def read(conn: sqlite3.Connection) -> OMRecord | None:
            row = conn.execute(
                f'SELECT {columns} FROM {OM_TABLE} WHERE "lookupKey" = ? '
                'ORDER BY "generationCount" DESC, "createdAt" DESC LIMIT 1', (key,)
            ).fetchone()
            return _from_row(tuple(row)) if row is not None else None

        result: OMRecord | None = await self._store.execute_read(read)
        if trusted and (counts.get(key), self._epoch()) == seen:
            ttl = _CURRENT_TTL if self._ttl is None else self._ttl
            self._current[key] = (result.copy() if result is not None else None, time.monotonic() + ttl, seen)
            self._current.move_to_end(key)
            if len(self._current) > _CURRENT_KEYS:
                self._current.popitem(last=False)
        return result

    async def history(self, key: str) -> list[OMRecord]:
        await self._ensure()
        columns = _SELECT

        def read(conn: sqlite3.Connection) -> list[OMRecord]:
            rows = conn.execute(
                f'SELECT {columns} FROM {OM_TABLE} WHERE "lookupKey" = ? ORDER BY "generationCount", "createdAt"',
                (key,),
            ).fetchall()
            return [_from_row(tuple(r)) for r in rows]

        result: list[OMRecord] = await self._store.execute_read(read)
        return result

    async def put(self, record: OMRecord) -> None:
        await self._ensure()
        row = _row(record)
        await self._counted(record.lookup_key, lambda conn: conn.execute(_INSERT, row) and None)

    async def replace(self, record: OMRecord, *, expected: OMRecord | None) -> bool:
        await self._ensure()
        row = _row(record)
        columns = _SELECT
        key = record.lookup_key

        def write(conn: sqlite3.Connection) -> bool:
            found = conn.execute(
                f'SELECT {columns} FROM {OM_TABLE} WHERE "lookupKey" = ? '
                'ORDER BY "generationCount" DESC, "createdAt" DESC LIMIT 1', (key,)
            ).fetchone()
            current = _from_row(tuple(found)) if found is not None else None
            if not same_record(current, expected):
                return False
            conn.execute(_INSERT, row)
            return True

        self._current.pop(key, None)
        try:
            done: bool = await self._store.execute_write(write)
        finally:
            self._current.pop(key, None)
            self._counts().bump((key,))
        return done

    async def delete(self, key: str) -> None:
        await self._ensure()

        await self._counted(
            key, lambda conn: conn.execute(f'DELETE FROM {OM_TABLE} WHERE "lookupKey" = ?', (key,)) and None)

    async def _counted(self, key: str, write: Any) -> None:
        """Run ``write`` through the store's writer; count it for ``key`` whether it succeeded or not."""
        self._current.pop(key, None)
        try:
            await self._store.execute_write(write)
        finally:
            self._current.pop(key, None)
            self._counts().bump((key,))


class InMemoryOMStore:
    """OM records in a dictionary (``InMemoryStore``'s; gone when the process ends)."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, OMRecord]] = {}

    async def current(self, key: str) -> OMRecord | None:
        await anyio.lowlevel.checkpoint()
        records = self._records.get(key)
        if not records:
            return None
        newest = max(records.values(), key=lambda r: (r.generation_count, r.created_at))
        return newest.copy()

    async def history(self, key: str) -> list[OMRecord]:
        await anyio.lowlevel.checkpoint()
        records = self._records.get(key, {})
        return [r.copy() for r in sorted(records.values(), key=lambda r: (r.generation_count, r.created_at))]

    async def put(self, record: OMRecord) -> None:
        await anyio.lowlevel.checkpoint()
        self._records.setdefault(record.lookup_key, {})[record.id] = record.copy()

    async def replace(self, record: OMRecord, *, expected: OMRecord | None) -> bool:
        await anyio.lowlevel.checkpoint()
        records = self._records.get(record.lookup_key)
        current = max(records.values(), key=lambda r: (r.generation_count, r.created_at)) if records else None
        if not same_record(current, expected):
            return False
        self._records.setdefault(record.lookup_key, {})[record.id] = record.copy()
        return True

    async def delete(self, key: str) -> None:
        await anyio.lowlevel.checkpoint()
        self._records.pop(key, None)
