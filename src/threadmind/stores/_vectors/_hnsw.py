"""HnswVectorStore: SQL vector rows (the source of truth) served by an hnswlib index kept as a validated cache.

Vectors are rows of the message store's database (:mod:`._vector_records`), written behind the caller once
they are searchable in memory (:mod:`._write_behind`; the pending mark written with each message makes that
crash-safe). The in-memory index (:mod:`._hnsw_index`) is a cache of those rows: restored from a snapshot
(:mod:`._hnsw_snapshot`) plus the rows changed since, or rebuilt from the rows page by page. A large index
loads in the background; until it is ready, every query is answered exactly from the scope's rows in SQL
(semantic recall is always scoped to a thread or a resource, both indexed columns).

Lifecycle costs stay flat as the data grows: shutdown writes no snapshot of a large index and inserts nothing
(staged vectors are replayed from SQL at the next start); snapshots are saved in the background once enough
changed, by a forked child on Linux (hnswlib's ``save_index`` holds the GIL while it writes); hnswlib work runs
in one thread at a time, in chunks, insertion at a lower CPU priority than serving. Exact search over a scope
whose contiguous copy is not cached reads the scope's stored rows rather than copying vectors out of hnswlib.

Several processes may share one database: before answering a query the index compares the database's
change counter (SQLite: ``PRAGMA data_version`` on a private connection, no SQL read when nothing changed;
PostgreSQL: the vector change sequence, one round trip) and, when another process committed vector rows,
replays them (every change carries a sequence number).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import numpy as np

from ...errors import ConfigError
from .._protocol import SaveHook, Store
from .._vector_records import PendingVector, SQLiteVectorRecords, VectorRecord
from ._contract import VectorHit, VectorStoreStatistics
from ._hnsw_entries import IndexEntry
from ._hnsw_index import (
    BRUTE_FORCE_LIMIT,
    F32,
    MAX_ANN_FETCH,
    SCOPE_CACHE_BYTES,
    SPACES,
    HnswIndex,
    Metric,
)
from ._hnsw_session import Session
from ._hnsw_snapshot import save_snapshot
from ._scope_blocks import SearchHit

__all__ = (
    "BRUTE_FORCE_LIMIT", "MAX_ANN_FETCH", "HnswVectorStore", "Metric", "SearchHit", "IndexEntry", "HnswIndex",
    "save_snapshot",
)

_log = logging.getLogger("threadmind.index")




class HnswVectorStore:
    """Configuration and on-disk home of the hnswlib message index; pass it to ``Memory(vector=...)``.

    ``path`` is a directory that holds the snapshot files (nothing is written outside it); None keeps the
    index in memory only, rebuilt from the SQL records at each start. Processes may share one path.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        metric: Metric = "cosine",
        m: int = 16,
        ef_construction: int = 64,
        ef_search: int = 64,
        scope_cache_bytes: int = SCOPE_CACHE_BYTES,
    ) -> None:
        if metric not in SPACES:
            raise ConfigError(f"metric must be one of 'cosine', 'euclidean', 'dotproduct', not {metric!r}")
        for name, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}")
        if isinstance(scope_cache_bytes, bool) or not isinstance(scope_cache_bytes, int) or scope_cache_bytes < 0:
            raise ConfigError(f"`scope_cache_bytes` must be a non-negative integer, got {scope_cache_bytes!r}")
        self._path = Path(path) if path is not None else None
        self._metric: Metric = metric
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._scope_cache_bytes = scope_cache_bytes
        self._owner: object | None = None
        self._session: Session | None = None

    @property
    def path(self) -> Path | None:
        """The snapshot directory, or None for memory only."""
        return self._path

    @property
    def metric(self) -> Metric:
        """``cosine``, ``euclidean`` or ``dotproduct`` (hnswlib ``cosine``, ``l2``, ``ip``)."""
        return self._metric

    @property
    def m(self) -> int:
        """HNSW graph degree."""
        return self._m

    @property
    def ef_construction(self) -> int:
        """HNSW build-time candidate list size."""
        return self._ef_construction

    @property
    def ef_search(self) -> int:
        """HNSW query-time candidate list size (set again after every load)."""
        return self._ef_search

    @property
    def scope_cache_bytes(self) -> int:
        """Budget for the contiguous per-scope copies that exact search keeps (0 turns the cache off)."""
        return self._scope_cache_bytes

    def __repr__(self) -> str:
        return (
            f"HnswVectorStore({str(self._path) if self._path else None!r}, metric={self._metric!r}, m={self._m}, "
            f"ef_construction={self._ef_construction}, ef_search={self._ef_search}, "
            f"scope_cache_bytes={self._scope_cache_bytes})"
        )

    # configuration -------------------------------------------------------------------------------
    def adopt(self, metric: Metric, m: int, ef_construction: int, ef_search: int) -> None:
        """(Memory) Take ``semanticRecall.indexConfig``'s values for the parameters this store left at their
        defaults; one given differently on both sides raises ``ConfigError``."""
        self._metric = _adopted("metric", metric, self._metric, "cosine")
        self._m = _adopted("m", m, self._m, 16)
        self._ef_construction = _adopted("ef_construction", ef_construction, self._ef_construction, 64)
        self._ef_search = _adopted("ef_search", ef_search, self._ef_search, 64)

    def adopt_index(self, kind: str | None, lists: int | None) -> None:
        """(Memory) ``semanticRecall.indexConfig.type``: hnswlib keeps an HNSW graph whatever it says, and says so
        when told ``ivfflat`` or ``flat`` (the HNSW keys, ``hnsw.m`` and ``hnsw.efConstruction``, do apply)."""
        if kind in ("ivfflat", "flat"):
            _log.info("semanticRecall.indexConfig type %r does not apply to HnswVectorStore: its index is an hnswlib "
                      "HNSW graph (m=%d, ef_construction=%d)%s", kind, self._m, self._ef_construction,
                      "; ivf.lists is ignored" if lists is not None else "")

    def _claim(self, owner: object) -> None:
        """Make ``owner`` the only actor using this store: an hnswlib index must have one owner."""
        if self._owner is not None and self._owner is not owner:
            raise ConfigError("this HnswVectorStore is already used by another running Memory; give each its own")
        self._owner = owner

    def _release(self, owner: object) -> None:
        if self._owner is owner:
            self._owner = None

    def open_index(self, name: str, dim: int, capacity: int = 0) -> HnswIndex:
        """(its session) A fresh, empty in-memory index object with this store's settings."""
        return HnswIndex(
            name=name, dim=dim, metric=self._metric, m=self._m, ef_construction=self._ef_construction,
            ef_search=self._ef_search, directory=self._path, scope_cache_bytes=self._scope_cache_bytes,
            capacity=capacity,
        )

    def _live(self) -> Session:
        if self._session is None:
            raise ConfigError("the vector store is not open", code="THREADMIND_INDEX_CLOSED")
        return self._session

    # the VectorStore protocol ----------------------------------------------------------------------
    async def open(self, store: Store, *, owner: object) -> None:
        """Bind to the message store: create the vector tables, start background work."""
        self._claim(owner)
        try:
            session = Session(self, store)
            await session.start()
        except BaseException:
            self._release(owner)
            raise
        self._session = session

    async def close(self) -> None:
        """Make buffered rows durable and stop, in bounded time (see the module docstring)."""
        session, self._session = self._session, None
        if session is not None:
            try:
                await session.close()
            finally:
                self._owner = None

    def pending_marker(self) -> SaveHook | None:
        """The in-transaction pending mark for a SQL message store, else None."""
        session = self._session
        return SQLiteVectorRecords.pending_marker if session is not None and session.sql else None

    async def use_index(self, name: str, dimension: int) -> None:
        await self._live().use_index(name, dimension)

    async def wait_loaded(self) -> int:
        """Until the snapshot is read and the rows it lacked are added (a large index loads in the background);
        the vectors the index holds."""
        return await self._live().wait_loaded()

    @property
    def index_name(self) -> str | None:
        return self._session.name if self._session is not None else None

    def prepare(self, vectors: F32) -> F32:
        """Rows as scored: unit length for cosine (as hnswlib stores them), raw otherwise."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._metric == "cosine":
            vectors = vectors / (np.linalg.norm(vectors, axis=-1, keepdims=True) + np.float32(1e-30))
        return vectors

    def has_message(self, message_id: str) -> bool:
        index = self._live().index
        return index.has_message(message_id) if index is not None else True  # unknown while loading

    def stage(self, records: Sequence[VectorRecord], rows: F32) -> bool:
        return self._live().stage(records, rows)

    async def write(self, records: Sequence[VectorRecord], *, background: bool = False, staged: bool = True) -> None:
        """Store rows (see :meth:`VectorStore.write`); ``staged``: :meth:`stage` accepted them."""
        await self._live().write(records, background=background, staged=staged)

    async def query(
        self, vector: F32, *, top_k: int, resource_id: str | None, thread_id: str | None
    ) -> list[VectorHit]:
        return await self._live().query(vector, top_k, resource_id, thread_id)

    async def delete_messages(self, message_ids: Sequence[str]) -> None:
        session = self._live()
        await session.change(session.records.delete_by_message_ids(None, message_ids),
                             lambda index, seq: index.delete_messages(message_ids, seq))

    async def delete_thread(self, thread_id: str) -> None:
        session = self._live()
        await session.change(session.records.delete_by_thread(thread_id),
                             lambda index, seq: index.delete_thread(thread_id, seq))

    async def move_thread(self, thread_id: str, resource_id: str) -> None:
        session = self._live()
        now: list[str] = []  # the resource written: the thread's as stored (another process may move it too)
        await session.change(session.records.move_thread(thread_id, resource_id, written=now),
                             lambda index, seq: index.move_thread(thread_id, now[0] if now else resource_id, seq))

    async def copy_messages(self, id_map: Mapping[str, str], *, thread_id: str, resource_id: str) -> None:
        await self._live().copy_messages(id_map, thread_id, resource_id)

    async def catch_up(self) -> int:
        return await self._live().catch_up()

    async def barrier(self) -> None:
        session = self._live()
        if session.coalescing is not None:
            await session.coalescing.flush()
        else:
            await anyio.lowlevel.checkpoint()

    async def flush(self) -> int:
        return await self._live().flush_all()

    async def persist(self) -> bool:
        return await self._live().persist(force=True)

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        await self._live().records.add_pending(items, error)

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        return await self._live().records.take_pending(limit, before)

    async def clear_pending(self, message_ids: Sequence[str]) -> None:
        await self._live().records.clear_pending(message_ids)

    async def pending_count(self, before: float | None = None) -> int:
        return await self._live().records.pending_count(before)

    async def message_ids_with_vectors(self) -> set[str]:
        session = self._live()
        return await session.records.message_ids_with_vectors(session.name) if session.name else set()

    def statistics(self) -> VectorStoreStatistics:
        session = self._session
        return session.statistics() if session is not None else VectorStoreStatistics()


_P = TypeVar("_P")


def _adopted(name: str, wanted: _P, ours: _P, default: _P) -> _P:
    if wanted == default or wanted == ours:
        return ours
    if ours != default:
        raise ConfigError(f"semanticRecall.indexConfig sets {name}={wanted!r} but the HnswVectorStore was given "
                          f"{name}={ours!r}; set it in one place")
    return wanted
