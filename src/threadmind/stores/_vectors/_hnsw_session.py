"""An opened :class:`~threadmind.stores.HnswVectorStore`: loading, queries, catch-up, insertion, snapshots.

See :mod:`._hnsw` for the design; this module holds the running state of one open store.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import msgspec
import numpy as np

from .._protocol import Store
from .._vector_records import SQLiteVectorRecords, VectorRecord, VectorRecords
from .._vector_records_memory import InMemoryVectorRecords
from . import _hnsw_snapshot
from ._contract import VectorHit, VectorStoreStatistics
from ._hnsw_entries import IndexBusy, IndexEntry, decode_records
from ._hnsw_index import F32, FLUSH_CHUNK, HnswIndex
from ._hnsw_snapshot import fork_snapshot, load_snapshot, manifest_count, reap_snapshot, save_snapshot, stop_snapshot
from ._scope_blocks import SearchHit, merge, scores, top_messages
from ._write_behind import CoalescingRecords

if TYPE_CHECKING:
    from ._hnsw import HnswVectorStore

__all__ = ("Session",)

logger = logging.getLogger("threadmind.index")
T = TypeVar("T")

#: Snapshots with more vectors than this load in the background (queries read SQL meanwhile), and so does an
#: index whose stored rows outnumber its snapshot by more than this many (hnswlib adds ~1 500 vectors/s here:
#: a start must not wait seconds for the rows a snapshot lacks).
LOAD_IN_BACKGROUND_ABOVE = 50_000
REPLAY_IN_BACKGROUND_ABOVE = 2_048
#: ``aclose`` saves a snapshot only of an index this small (a fixed cost), after adding at most one chunk of
#: staged vectors to hnswlib; larger ones are saved in the background.
SNAPSHOT_AT_CLOSE_MAX = 50_000
#: A background snapshot is due once this many vectors (or a tenth of the index, if more) changed in hnswlib.
SNAPSHOT_EVERY = 20_000
#: Snapshots of an index this small are written by a thread of this process, not a forked child: hnswlib holds
#: the GIL while it writes (a few milliseconds at this size), less than a fork costs (7 ms in a small process,
#: more as its memory grows). Larger ones are forked where the platform can (see ``_hnsw_snapshot``).
THREAD_SNAPSHOT_MAX = 4_096
#: Staged vectors wait for ``FLUSH_IDLE`` seconds without upserts before going into hnswlib, unless this many.
FLUSH_BACKLOG = 16_384
FLUSH_IDLE = 0.5
#: The flusher sizes its chunks to take about this long in hnswlib (what a close may wait for).
FLUSH_CHUNK_SECONDS = 0.25
#: Rows per page when adding stored rows to an index being loaded (rebuild, or the tail after a snapshot).
LOAD_PAGE = 1024
#: A search whose scope would copy at least this many vectors out of hnswlib reads the stored rows instead.
STORED_READ_ABOVE = 8
#: hnswlib insertion (the flusher's chunks, a load's pages) runs this much nicer than the serving threads: the
#: graph only speeds up scopes too large for exact search, so it takes the CPU that saves and queries leave.
BUILD_NICENESS = 10
#: Tombstones of this many recent changes are kept after a snapshot, for processes that are a little behind.
KEEP_TOMBSTONES = 10_000



def _lower_priority() -> None:
    """Make the calling thread :data:`BUILD_NICENESS` nicer (Linux keeps a nice value per thread, and threads
    hnswlib starts inherit it); best effort: raising a nice value needs no privilege, failing costs nothing."""
    if not BUILD_NICENESS or sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BUILD_NICENESS))
    except OSError:
        pass


async def _own_thread(fn: Callable[..., T], args: tuple[Any, ...], *, name: str, daemon: bool, nice: bool) -> T:
    """Run ``fn(*args)`` in a new thread and wait for it without holding a worker thread of anyio's."""
    done = anyio.Event()
    token = anyio.lowlevel.current_token()
    outcome: list[Any] = []

    def _body() -> None:
        try:
            if nice:
                _lower_priority()
            outcome.append((True, fn(*args)))
        except BaseException as exc:  # handed to the awaiting task
            outcome.append((False, exc))
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except Exception:  # the event loop is gone: nobody waits any more
            pass

    threading.Thread(target=_body, name=name, daemon=daemon).start()
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


class Session:
    """One opened HnswVectorStore: records, the in-memory index (once loaded) and the background tasks."""

    def __init__(self, config: HnswVectorStore, store: Store) -> None:
        self.config = config
        raw = store.vector_records()
        self.sql = isinstance(raw, SQLiteVectorRecords)
        self.raw = raw
        # SQL rows of background upserts share one write every few batches (see _write_behind).
        self.coalescing = CoalescingRecords(raw) if self.sql else None
        self.records: VectorRecords = self.coalescing if self.coalescing is not None else raw
        self.name: str | None = None
        self.dim = 0
        self.index: HnswIndex | None = None
        self.limiter = anyio.CapacityLimiter(1)
        self.lock = anyio.Lock()  # a load's final replay and swap against concurrent changes
        self.task_group: anyio.abc.TaskGroup | None = None
        self.loader = anyio.CancelScope()  # replaced by each background load, cancelled by close
        self.flusher = anyio.CancelScope()
        self.saving = anyio.CancelScope()  # replaced by each background save, cancelled by close
        self.saves_in_flight = 0  # snapshots being written (statistics: snapshot_saving)
        self.loaded = anyio.Event()  # set once the index is live, its load failed, or the session closes
        self.added_at_start = 0  # rows the loaded snapshot lacked, added at this start; 0 once a snapshot has them
        self.flush_wanted = anyio.Event()
        self.chunk = FLUSH_CHUNK // 4  # staged vectors per flusher chunk (see _flush_chunk)
        # Chunks taken from the staged set and not yet in hnswlib; ``chunk_done`` is set (and replaced) as each ends.
        self.chunks_in_flight = 0
        self.chunk_done = anyio.Event()
        self.closing = False
        self.watch: sqlite3.Connection | None = None
        # Records in a database server (PostgreSQL) other processes write: every query reads the change sequence
        # first (one round trip), the SQLite file has its change counter instead (``watch``).
        self.server = not self.sql and not isinstance(raw, InMemoryVectorRecords)
        self.seen_version: int | None = None
        # Stored rows are read instead of copying vectors out of hnswlib when a scope's block is not cached
        # (SQL reads ~0.4 ms per 100 rows, hnswlib's get_items ~3.5 ms); not for records kept in memory.
        self.read_stored_scopes = self.sql or self.server
        # Vector ids staged whose row write has not returned yet: their stored row may be older than the index.
        self.unsettled: dict[str, int] = {}
        self.counters = {"sql_queries": 0, "snapshot_loads": 0, "rebuilds": 0, "snapshot_saves": 0, "catch_ups": 0,
                         "stored_scope_reads": 0}

    # lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        if isinstance(self.raw, SQLiteVectorRecords):
            await self.raw.ensure_tables()
            self.watch = await self._open_watch()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self.task_group = task_group
        task_group.start_soon(self._flusher)

    async def _open_watch(self) -> sqlite3.Connection | None:
        """A private read-only connection whose ``data_version`` tells whether another connection committed."""
        assert isinstance(self.raw, SQLiteVectorRecords)
        path = await self.raw.database_file()
        if not path:
            return None

        def _connect() -> sqlite3.Connection | None:
            try:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0, check_same_thread=False,
                                       isolation_level=None)
                conn.execute("SELECT seq FROM threadmind_vector_seq WHERE id = 0").fetchone()
                return conn
            except sqlite3.Error:
                return None

        return await anyio.to_thread.run_sync(_connect)

    async def close(self) -> None:
        self.closing = True
        self.loaded.set()
        self.loader.cancel()
        self.flusher.cancel()  # a chunk being added to hnswlib finishes first (about half a second)
        self.saving.cancel()
        try:
            with anyio.CancelScope(shield=True):
                if self.coalescing is not None:
                    await self.coalescing.flush()
                index = self.index
                if (index is not None and self.config.path is not None and index.dirty
                        and index.count <= SNAPSHOT_AT_CLOSE_MAX):
                    if index.staged <= FLUSH_CHUNK:  # one chunk at most: the rest is replayed at the next start
                        await self.flush_all()
                    await self._save(index, cancellable=False)
        finally:
            if self.watch is not None:
                self.watch.close()
            assert self.task_group is not None
            self.task_group.cancel_scope.cancel()
            await self.task_group.__aexit__(None, None, None)

    async def _daemon(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` in a daemon thread of its own: a load that ``close`` abandons never delays process exit."""
        return await _own_thread(fn, args, name="threadmind index loader", daemon=True, nice=False)

    async def _build(self, fn: Callable[..., T], *args: Any) -> T:
        """hnswlib insertion in a thread of its own at a lower CPU priority (see :data:`BUILD_NICENESS`); not a
        daemon: a process exiting lets the chunk being added finish (about half a second)."""
        return await _own_thread(fn, args, name="threadmind index builder", daemon=False, nice=True)

    async def _thread(self, fn: Callable[..., T], *args: Any, cancellable: bool = False) -> T:
        """hnswlib work in a worker thread; the limiter makes it the index's only user."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter, abandon_on_cancel=cancellable)

    # loading ---------------------------------------------------------------------------------------
    async def use_index(self, name: str, dim: int) -> None:
        if self.name is not None:
            await anyio.lowlevel.checkpoint()
            return
        self.name, self.dim = name, dim
        count = await anyio.to_thread.run_sync(manifest_count, self.config.path, name)
        rows = await self.records.size_hint(name)
        if (count or 0) > LOAD_IN_BACKGROUND_ABOVE or rows - (count or 0) > REPLAY_IN_BACKGROUND_ABOVE:
            assert self.task_group is not None
            self.task_group.start_soon(self._load_in_background)
            return
        async with self.lock:
            try:
                await self._load(name, dim, locked=True)
            finally:
                self.loaded.set()  # a failed load is not tried again: queries keep reading SQL

    async def wait_loaded(self) -> int:
        """Until the index selected by :meth:`use_index` is live (or its load failed, or the session closes); the
        vectors it holds."""
        if self.name is None:
            await anyio.lowlevel.checkpoint()
        else:
            await self.loaded.wait()
        index = self.index
        return index.count if index is not None and not self.closing else 0

    async def _load_in_background(self) -> None:
        assert self.name is not None
        if self.closing:
            return
        self.loader = anyio.CancelScope()
        with self.loader:
            try:
                await self._load(self.name, self.dim, locked=False)
            except Exception:
                logger.exception("loading vector index %s failed; queries keep reading SQL", self.name)
            finally:
                self.loaded.set()  # nobody waits for a load that will not come

    async def _load(self, name: str, dim: int, *, locked: bool) -> None:
        """Load the snapshot (or rebuild from SQL), add the rows changed since straight to hnswlib, page by page,
        while nothing reads this index; then replay the last changes and make it live.

        Only reading the snapshot runs in an abandonable daemon thread; each page is added in a worker thread a
        close waits for (about half a second), so no hnswlib insertion is ever cut off by the process exiting.
        """
        background = not locked

        async def _add(page: Sequence[VectorRecord]) -> None:
            if self.closing:
                raise anyio.get_cancelled_exc_class()()
            with anyio.CancelScope(shield=True):
                await self._build(index.add_now, page)
            self.added_at_start += len(page)

        rows = await self.records.size_hint(name)
        index = self.config.open_index(name, dim)
        capacity = int(rows * 1.1)
        reason = await (self._daemon(load_snapshot, index, capacity) if background
                        else anyio.to_thread.run_sync(load_snapshot, index, capacity))
        if reason is None:
            current, pruned = await self.records.sequence(name)
            if index.applied_seq > current:
                reason = "snapshot is newer than the database"
            elif index.applied_seq < pruned:
                reason = "snapshot is older than the deletions the database still remembers"
        if reason is None:
            since = index.applied_seq
            after = (since, 0)
            while True:  # up to `current` only: rows written meanwhile are replayed when it goes live
                page, after = await self.records.load_changes(name, since, after, LOAD_PAGE, current)
                if not page:
                    break
                await _add(page)
            index.drop_vectors(await self.records.deleted_since(name, since))
            index.caught_up(current)
            self.counters["snapshot_loads"] += 1
        else:
            if reason not in ("no path", "missing"):
                logger.info("rebuilding vector index %s from SQL: %s", name, reason)
            index = self.config.open_index(name, dim)
            index.reserve(capacity)
            since, _ = await self.records.sequence(name)
            after_row = 0
            while True:
                page, after_row = await self.records.load_page(name, after_row, LOAD_PAGE)
                if not page:
                    break
                await _add(page)
            index.applied_seq = since
            index.snapshot_seq = None
            self.counters["rebuilds"] += 1
        await self._catch_up(index)
        if locked:
            await self._go_live(index)
        else:
            async with self.lock:
                await self._go_live(index)

    async def _catch_up(self, index: HnswIndex) -> None:
        """Stage the rows written while the index loaded, a page at a time with the event loop free between pages,
        until what is left is one page: going live then replays only that under the lock. (Staging the tail of a
        load during 4 000 saves/s in one go held the loop 0.7 s; hnswlib cannot add rows as fast as they come.)"""
        name = index.name
        staged = LOAD_PAGE + 1
        while staged > LOAD_PAGE and not self.closing:  # a pass that found a page or less leaves it to the replay
            current, _ = await self.records.sequence(name)
            since = index.applied_seq
            if current <= since:
                return
            index.drop_vectors(await self.records.deleted_since(name, since))
            after, staged = (since, 0), 0
            while True:
                page, after = await self.records.load_changes(name, since, after, LOAD_PAGE, current)
                if not page:
                    break
                index.upsert_records(page)  # staged: searched exactly at once, added to hnswlib by the flusher
                staged += len(page)
                await anyio.lowlevel.checkpoint()
            index.caught_up(current)

    async def _go_live(self, index: HnswIndex) -> None:
        """(lock held) Replay what changed since the index was read, then serve queries from it."""
        records, deleted, seq = await self.records.load(index.name, since_seq=index.applied_seq)
        index.replay(records, deleted, seq)
        self.index = index
        self.loaded.set()
        self.flush_wanted.set()

    # changes ---------------------------------------------------------------------------------------
    def stage(self, records: Sequence[VectorRecord], rows: F32) -> bool:
        index = self.index
        if index is None or self._others_read_rows():
            return False
        entries = [IndexEntry(0, r.vector_id, r.message_id, r.thread_id, r.resource_id) for r in records]
        index.upsert(entries, rows, prepared=True)
        unsettled = self.unsettled
        for record in records:
            unsettled[record.vector_id] = unsettled.get(record.vector_id, 0) + 1
        self.flush_wanted.set()
        return True

    async def write(self, records: Sequence[VectorRecord], *, background: bool, staged: bool,
                    fresh_only: bool = False) -> None:
        """Store rows; ``fresh_only``: copies, which yield to a message's rows written meanwhile."""
        assert self.name is not None
        if staged:
            seq = await self.records.upsert(self.name, records, background=background)
            self._settle(records)
            index = self.index
            if index is not None:
                index.note_seq(seq)
            return
        async with self.lock:  # not searchable yet: a load finishing meanwhile must see these rows
            # As written: a message moved meanwhile has its thread of now, one deleted meanwhile (by another store
            # object, or process, on the file) none.
            stored: list[VectorRecord] = []
            seq = await self.records.upsert(self.name, records, written=stored, stored_only=self._others_read_rows(),
                                            fresh_only=fresh_only)
            index = self.index
            if index is not None:
                gone = {r.message_id for r in records} - {r.message_id for r in stored} if not fresh_only else set()
                if gone:  # deleted meanwhile: its rows went with the write, whose seq this index notes as its own
                    index.delete_messages(sorted(gone))
                index.upsert_records(stored, seq)
                self.flush_wanted.set()

    def _others_read_rows(self) -> bool:
        """Whether another index may query these rows now (a database server; a SQLite file another process, or
        another store object of this process, has open): then vectors are not answered from memory before their
        rows are committed, so another process's next query finds what a save acknowledged (SPEC §10)."""
        if self.server:
            return True
        raw = self.raw
        return isinstance(raw, SQLiteVectorRecords) and raw.shared()

    def _settle(self, records: Sequence[VectorRecord]) -> None:
        """Staged rows are stored now (a failed write leaves them unsettled: searched from hnswlib's copy)."""
        unsettled = self.unsettled
        for record in records:
            left = unsettled.get(record.vector_id, 0) - 1
            if left > 0:
                unsettled[record.vector_id] = left
            else:
                unsettled.pop(record.vector_id, None)

    async def change(self, write: Any, apply: Callable[[HnswIndex, int], None]) -> None:
        """Run a delete or move in SQL, then in the index (a load finishing meanwhile replays it itself)."""
        seq: int = await write
        async with self.lock:
            index = self.index
            if index is not None:
                apply(index, seq)
                self.flush_wanted.set()

    async def copy_messages(self, id_map: Mapping[str, str], thread_id: str, resource_id: str) -> None:
        assert self.name is not None
        copies = [
            msgspec.structs.replace(
                r, vector_id=id_map[r.message_id] + r.vector_id[len(r.message_id):],
                message_id=id_map[r.message_id], thread_id=thread_id, resource_id=resource_id,
            )
            for r in await self.records.records_for_messages(self.name, list(id_map))
        ]
        if copies:
            await self.write(copies, background=False, staged=False, fresh_only=True)

    # queries ---------------------------------------------------------------------------------------
    async def query(self, vector: F32, k: int, resource_id: str | None, thread_id: str | None) -> list[VectorHit]:
        index = self.index
        if index is not None and await self._changed_elsewhere(index):
            await self.catch_up()
            index = self.index
        if index is None:
            return await self._query_rows(vector, k, resource_id, thread_id)
        try:
            hits = await self._search(index, vector, k, resource_id, thread_id)
        except IndexBusy:
            return await self._query_rows(vector, k, resource_id, thread_id)
        return [VectorHit(h.message_id, h.thread_id, h.resource_id, h.score) for h in hits]

    async def _search(
        self, index: HnswIndex, vector: F32, k: int, resource_id: str | None, thread_id: str | None
    ) -> list[SearchHit]:
        """Exact over small scopes on the loop; large scopes ask hnswlib (worker thread) for candidates and
        filter them here. The maps only change on the loop, so the scope is read again after every await and a
        search sees one consistent state."""
        scope, size = index.scope_rows(resource_id, thread_id)
        if size == 0:
            await anyio.lowlevel.checkpoint()
            return []
        fetch = index.ann_fetch(k, size)
        if fetch is not None:
            candidates = await self._thread(index.knn, vector, fetch)
            scope, size = index.scope_rows(resource_id, thread_id)  # it may have changed meanwhile
            staged = index.staged_in(scope)  # not in hnswlib yet: searched exactly beside it
            hits = index.ann_hits(candidates, k, scope, size - len(staged)) if candidates is not None else None
            if hits is not None:
                if staged:
                    hits = merge(hits, index.exact(vector, k, staged), k)
                return hits
        return await self._exact(index, vector, k, resource_id, thread_id)

    async def _exact(
        self, index: HnswIndex, vector: F32, k: int, resource_id: str | None, thread_id: str | None
    ) -> list[SearchHit]:
        """Exact search over the scope; a scope whose block is not cached is read from the stored rows first
        when that is cheaper than copying its vectors out of hnswlib."""
        key = index.scope_key(resource_id, thread_id)
        scope, _ = index.scope_rows(resource_id, thread_id)
        stored: dict[str, bytes] | None = None
        if self.read_stored_scopes and index.gather_reads(scope, key) >= STORED_READ_ABOVE:
            assert self.name is not None
            # The inner records, not the write-behind wrapper: a read must not wait for buffered writes
            # (their rows are unsettled and come from the index's own copies).
            stored = await self.raw.scope_embeddings(self.name, resource_id=resource_id, thread_id=thread_id)
            self.counters["stored_scope_reads"] += 1
            unsettled = self.unsettled
            if unsettled:
                for vector_id in [v for v in stored if v in unsettled]:
                    del stored[vector_id]
        else:
            await anyio.lowlevel.checkpoint()
        scope, _ = index.scope_rows(resource_id, thread_id)  # a set read before the await may be orphaned
        return index.exact(vector, k, scope, key, stored)

    async def _query_rows(
        self, vector: F32, k: int, resource_id: str | None, thread_id: str | None
    ) -> list[VectorHit]:
        """Exact top-k from the scope's stored rows (while the index loads, or while hnswlib is resized)."""
        assert self.name is not None
        records = await self.records.scope_records(self.name, resource_id=resource_id, thread_id=thread_id)
        self.counters["sql_queries"] += 1
        if not records:
            return []
        _, block = decode_records(records, self.dim)
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(self.dim)
        metric = self.config.metric

        def _hit(row: int, score: float) -> tuple[str, SearchHit]:
            r = records[row]
            return r.message_id, SearchHit(r.message_id, r.thread_id, r.resource_id, score)

        unit = self.config.prepare(block) if metric == "cosine" else block
        hits = top_messages(scores(metric, unit, query), list(range(len(records))), k, _hit)
        return [VectorHit(h.message_id, h.thread_id, h.resource_id, h.score) for h in hits]

    async def _changed_elsewhere(self, index: HnswIndex) -> bool:
        """Whether another connection may have committed vector rows this index lacks (SQLite: no SQL read when
        the database's change counter did not move; a database server: its change sequence, one round trip)."""
        if self.server:
            current, _ = await self.records.sequence(index.name)
            return current > index.applied_seq
        watch = self.watch
        if watch is None:
            return False
        try:
            version = int(watch.execute("PRAGMA data_version").fetchone()[0])
            if version == self.seen_version:
                return False
            self.seen_version = version
            row = watch.execute("SELECT seq FROM threadmind_vector_seq WHERE id = 0").fetchone()
        except sqlite3.Error:
            return True  # could not tell: ask through the store
        return row is not None and int(row[0]) > index.applied_seq

    async def catch_up(self) -> int:
        """Replay rows other processes committed since this index last looked; returns how many changes."""
        async with self.lock:
            index = self.index
            if index is None:
                return 0
            current, pruned = await self.records.sequence(index.name)
            if current <= index.applied_seq:
                return 0
            if index.applied_seq < pruned:  # deletions we never saw are forgotten: load afresh
                logger.info("vector index %s is too far behind the database; reloading it", index.name)
                self.index = None
                assert self.task_group is not None
                self.task_group.start_soon(self._load_in_background)
                return 0
            records, deleted, seq = await self.records.load(index.name, since_seq=index.applied_seq)
            if index.applied_seq == 0:
                # A load from the start leaves deletions out (nothing before them to undo), but this index may hold
                # rows of its own applied ahead of another's change (its sequence had a gap): drop what is deleted.
                deleted = [*deleted, *await self.records.deleted_since(index.name, 0)]
            index.replay(records, deleted, seq)
            self.counters["catch_ups"] += 1
            self.flush_wanted.set()
            return len(records) + len(deleted)

    # hnswlib insertion and snapshots ---------------------------------------------------------------
    async def _flusher(self) -> None:
        """Hand staged vectors to hnswlib when the index is quiet, or as soon as the backlog is large.

        Building HNSW costs ~2 000 vectors/s per core (M=16, ef_construction=64, 384 dims) and only serves
        scopes too large for exact search; until a vector is added, queries search it exactly beside HNSW.
        """
        with self.flusher:
            while True:
                await self.flush_wanted.wait()
                self.flush_wanted = anyio.Event()
                index = self.index
                if index is None:
                    continue
                if index.staged < FLUSH_BACKLOG:
                    with anyio.move_on_after(FLUSH_IDLE) as quiet:
                        await self.flush_wanted.wait()  # another change: wait for quiet again
                    if not quiet.cancelled_caught:
                        continue
                while index is self.index and (index.untaken or index.marks) and not self.closing:
                    await self._flush_chunk(index)
                    await anyio.lowlevel.checkpoint()  # where a close's cancellation gets in
                    if index.added_since_snapshot >= self._snapshot_due(index):
                        break  # save a snapshot now and then even while saves keep coming
                try:
                    await self.persist()
                except Exception:  # a failed snapshot only costs a longer replay at the next start
                    logger.exception("could not save the vector index snapshot")
                if index.untaken and not self.closing:
                    self.flush_wanted.set()  # more to insert

    async def _flush_chunk(self, index: HnswIndex) -> int:
        """Add one chunk of staged vectors, sized from the last ones to take about :data:`FLUSH_CHUNK_SECONDS`
        (a close waits for the chunk being added; hnswlib slows down as the graph grows)."""
        plan = index.take_flush(self.chunk)
        self.chunks_in_flight += 1
        try:
            with anyio.CancelScope(shield=True):
                async with self.limiter:
                    started = time.perf_counter()
                    added = await self._build(index.apply_flush, plan)
                    elapsed = time.perf_counter() - started
            if added >= 32 and elapsed > 0:
                self.chunk = max(64, min(FLUSH_CHUNK, int(FLUSH_CHUNK_SECONDS * added / elapsed)))
            return added
        except Exception:  # those vectors stay exactly searchable; HNSW misses them until a rebuild
            logger.exception("adding staged vectors to the hnswlib index failed")
            return 0
        finally:
            index.finish_flush(plan)
            self.chunks_in_flight -= 1
            done, self.chunk_done = self.chunk_done, anyio.Event()
            done.set()

    async def flush_all(self) -> int:
        """Every staged vector into hnswlib now, chunk by chunk; returns once none is left outside it, also
        none of a chunk the background flusher had taken (its vectors are no longer staged, nor in hnswlib yet)."""
        await self.barrier()
        index = self.index
        added = 0
        while index is not None and index is self.index:
            if index.untaken or index.marks:
                added += await self._flush_chunk(index)
            elif self.chunks_in_flight:
                await self.chunk_done.wait()
            else:
                break
        return added

    async def barrier(self) -> None:
        if self.coalescing is not None:
            await self.coalescing.flush()

    async def persist(self, *, force: bool = False) -> bool:
        """Save a snapshot when due (``force``: whenever anything changed), after flushing staged vectors."""
        index = self.index
        if index is None or self.config.path is None or not index.dirty:
            return False
        if force:
            await self.flush_all()
        elif index.added_since_snapshot < self._snapshot_due(index):
            return False
        return await self._save(index, cancellable=not force)

    def _snapshot_due(self, index: HnswIndex) -> int:
        """Changes in hnswlib since the last snapshot that make the next one due: a tenth of the index, at least
        :data:`SNAPSHOT_EVERY`; just :data:`SNAPSHOT_EVERY` after a start that added that many rows its snapshot
        lacked, which every later start would add again (40 000 at a million vectors took ~30 s here, each time)."""
        if self.added_at_start >= SNAPSHOT_EVERY:
            return SNAPSHOT_EVERY
        return max(SNAPSHOT_EVERY, index.count // 10)

    async def _save(self, index: HnswIndex, *, cancellable: bool) -> bool:
        forked = _hnsw_snapshot.FORKED_SNAPSHOTS and index.count > THREAD_SNAPSHOT_MAX
        view = index.snapshot_view(shared=forked)
        added = index.added_since_snapshot
        scope = anyio.CancelScope()
        if cancellable:
            if self.closing:
                return False
            self.saving = scope
        with scope:
            self.saves_in_flight += 1
            try:
                if forked:
                    saved = await self._save_in_child(index, view)
                else:
                    saved = await self._thread(save_snapshot, index, view, cancellable=cancellable)
            finally:
                self.saves_in_flight -= 1
            if not saved:
                return False
            index.snapshot_seq = view[2]
            index.added_since_snapshot -= added
            self.added_at_start = 0
            self.counters["snapshot_saves"] += 1
            if view[2] > KEEP_TOMBSTONES:
                await self.records.prune_tombstones(index.name, view[2] - KEEP_TOMBSTONES)
            return True
        return False  # cancelled: the process is closing

    async def _save_in_child(self, index: HnswIndex, view: Any) -> bool:
        """Fork the snapshot writer (quick, under the limiter: no hnswlib call runs meanwhile), then wait for it
        in a thread of its own while hnswlib work goes on; a cancelled wait kills it."""
        pid = await self._thread(fork_snapshot, index, view)
        try:
            return await anyio.to_thread.run_sync(reap_snapshot, pid, abandon_on_cancel=True)
        except BaseException:
            stop_snapshot(pid)
            raise

    def statistics(self) -> VectorStoreStatistics:
        index = self.index
        counters = self.counters
        return VectorStoreStatistics(
            vectors=index.count if index else 0,
            add_items_calls=index.add_items_calls if index else 0,
            brute_force_queries=index.brute_force_queries if index else 0,
            ann_queries=index.ann_queries if index else 0,
            sql_queries=counters["sql_queries"],
            snapshot_loads=counters["snapshot_loads"],
            rebuilds=counters["rebuilds"],
            snapshot_saves=counters["snapshot_saves"],
            catch_ups=counters["catch_ups"],
            staged=index.staged if index else 0,
            max_staged=index.max_staged if index else 0,
            memory_bytes=index.memory_bytes() if index else 0,
            ann_bytes=index.ann_bytes() if index else 0,
            row_writes=self.coalescing.writes if self.coalescing is not None else 0,
            stored_scope_reads=counters["stored_scope_reads"],
            ann_vector_copies=index.ann_vector_copies if index else 0,
            loading=self.name is not None and index is None,
            snapshot_saving=self.saves_in_flight > 0,
        )
