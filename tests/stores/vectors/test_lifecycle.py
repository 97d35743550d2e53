"""Lifecycle costs that must not grow with the index: close, restart, loading in the background."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.actors._index_actor import IndexActor
from threadmind.codecs import Message
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors import _hnsw_index, _hnsw_session
from threadmind.stores._vectors._hnsw import HnswVectorStore

from ._support import FlakyEmbedder, make_message, persist


@asynccontextmanager
async def _running(store: SQLiteStore, vec: Path) -> AsyncIterator[IndexActor]:
    async with IndexActor(store=store, vector=HnswVectorStore(vec), embedder=FlakyEmbedder(), retry_interval=None) \
            as actor:
        yield actor


def _messages(n: int, thread: str = "t1", resource: str = "r1", prefix: str = "m") -> list[Message]:
    return [make_message(f"{prefix}{i}", thread, resource, f"note {i} about {prefix} trams in lisbon", i)
            for i in range(n)]


def _before_each_flush(monkeypatch: pytest.MonkeyPatch, hook: Callable[[Any], object]) -> None:
    """Call ``hook(plan)`` before hnswlib is handed each flush plan (in its worker thread)."""
    apply = _hnsw_index.HnswIndex.apply_flush

    def _apply(index: Any, plan: Any) -> int:
        hook(plan)
        return apply(index, plan)

    monkeypatch.setattr(_hnsw_index.HnswIndex, "apply_flush", _apply)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "m.db") as store:
        yield store


async def _snapshot_of_the_first(
    kept: int, messages: list[Message], store: SQLiteStore, vec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store ``messages`` with vectors; the index snapshot holds the first ``kept`` of them, the rest are in SQL
    only (closing writes no snapshot for them)."""
    await persist(store, messages)
    async with _running(store, vec) as actor:
        await actor.upsert_messages(messages[:kept])
        assert await actor.persist()
        monkeypatch.setattr(_hnsw_session, "SNAPSHOT_AT_CLOSE_MAX", 0)
        await actor.upsert_messages(messages[kept:])


class _Counting:
    """Counts the vectors handed to hnswlib and the snapshots written."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.added = 0
        self.saves = 0
        save, fork = _hnsw_session.save_snapshot, _hnsw_session.fork_snapshot  # type: ignore[attr-defined]

        def _count(plan: Any) -> None:
            self.added += len(plan.labels)

        def _save(index: Any, view: Any) -> bool:
            self.saves += 1
            return save(index, view)

        def _fork(index: Any, view: Any) -> int:  # a child process writes it (see _hnsw_snapshot)
            self.saves += 1
            return fork(index, view)

        _before_each_flush(monkeypatch, _count)
        monkeypatch.setattr(_hnsw_session, "save_snapshot", _save)
        monkeypatch.setattr(_hnsw_session, "fork_snapshot", _fork)


async def test_close_adds_and_rewrites_nothing_however_many_vectors_are_staged(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large index's close neither inserts staged vectors nor writes a snapshot; the next start replays them."""
    monkeypatch.setattr(_hnsw_session, "SNAPSHOT_AT_CLOSE_MAX", 100)  # "large", at a test's size
    counting = _Counting(monkeypatch)
    messages = _messages(600)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        assert actor.statistics().staged == 600
        counting.added = counting.saves = 0
    assert (counting.added, counting.saves) == (0, 0)  # the close did no work that grows with the index
    async with _running(store, tmp_path / "vec") as actor:
        hits = await actor.query(messages[123].text, top_k=1, thread_id="t1")
        assert [h.message_id for h in hits] == ["m123"]
        assert actor.statistics().vectors == 600


async def test_close_of_a_small_index_inserts_at_most_one_chunk(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_hnsw_session, "FLUSH_CHUNK", 64)
    counting = _Counting(monkeypatch)
    messages = _messages(300)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        counting.added = 0
    assert counting.added == 0 and counting.saves == 1  # more than a chunk staged: snapshot of what hnswlib has


async def test_a_restart_keeps_no_vector_outside_hnswlib(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a snapshot copies no vector out of hnswlib, and the rows written after it go straight into
    hnswlib: the only vectors held are hnswlib's own."""
    messages = _messages(200)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages[:150])
        assert await actor.persist()
        monkeypatch.setattr(_hnsw_session, "SNAPSHOT_AT_CLOSE_MAX", 0)  # the last 50 only in SQL
        await actor.upsert_messages(messages[150:])
        await actor.delete_messages(["m0"])
        await actor.upsert_messages([messages[1]])  # replaced after the snapshot: one copy, the new label
    async with _running(store, tmp_path / "vec") as actor:
        hits = await actor.query(messages[7].text, top_k=1, thread_id=None)  # loads the index; caches no block
        assert [h.message_id for h in hits] == ["m7"]
        assert [h.message_id for h in await actor.query(messages[170].text, top_k=1, thread_id="t1")] == ["m170"]
        assert "m0" not in {h.message_id for h in await actor.query(messages[0].text, top_k=5, thread_id="t1")}
        stats = actor.statistics()
        assert stats.snapshot_loads == 1 and stats.vectors == 199 and stats.staged == 0
        assert stats.memory_bytes - stats.store.ann_bytes <= 2 * 200 * (32 * 4 + 8)  # scope blocks only


async def test_queries_read_sql_while_a_large_index_loads(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the snapshot is loaded, queries are exact from the scope's rows, and changes made meanwhile hold."""
    messages = _messages(50) + _messages(30, thread="t2", resource="r2", prefix="x")
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        assert await actor.persist()
    release = threading.Event()
    load = _hnsw_session.load_snapshot  # type: ignore[attr-defined]

    def _slow_load(index: Any, capacity: int = 0) -> str | None:
        release.wait(20)
        return load(index, capacity)

    monkeypatch.setattr(_hnsw_session, "LOAD_IN_BACKGROUND_ABOVE", 0)
    monkeypatch.setattr(_hnsw_session, "load_snapshot", _slow_load)
    late = make_message("late", "t1", "r1", "a fresh note about zebra crossings", 99)
    await persist(store, [late])
    async with _running(store, tmp_path / "vec") as actor:
        hits = await actor.query(messages[3].text, top_k=3, thread_id="t1")
        assert hits[0].message_id == "m3"
        assert {h.thread_id for h in await actor.query("trams", top_k=10, resource_id="r2")} == {"t2"}
        await actor.upsert_messages([late])  # written to SQL at once: found by the next query
        assert (await actor.query(late.text, top_k=1, thread_id="t1"))[0].message_id == "late"
        await actor.delete_messages(["m3"])
        assert "m3" not in {h.message_id for h in await actor.query(messages[3].text, top_k=3, thread_id="t1")}
        stats = actor.statistics().store
        assert stats.loading and stats.sql_queries == 4 and stats.snapshot_loads == 0
        release.set()
        with anyio.fail_after(20):
            while actor.statistics().store.loading:  # noqa: ASYNC110 - the loader thread reports by itself
                await anyio.sleep(0.01)
        stats = actor.statistics().store
        assert stats.snapshot_loads == 1 and stats.vectors == 80  # 80 - m3 + late
        assert (await actor.query(late.text, top_k=1, thread_id="t1"))[0].message_id == "late"
        assert "m3" not in {h.message_id for h in await actor.query(messages[3].text, top_k=3, thread_id="t1")}
        assert actor.statistics().store.sql_queries == 4  # the loaded index answers now


async def test_a_close_during_a_background_load_returns_at_once(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = _messages(20)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        assert await actor.persist()
    release = threading.Event()
    monkeypatch.setattr(_hnsw_session, "LOAD_IN_BACKGROUND_ABOVE", 0)
    monkeypatch.setattr(_hnsw_session, "load_snapshot", lambda index, capacity=0: release.wait(20) and None)
    try:
        with anyio.fail_after(5):  # would wait the 20 s the loader thread is held
            async with _running(store, tmp_path / "vec") as actor:
                assert (await actor.query(messages[2].text, top_k=1, thread_id="t1"))[0].message_id == "m2"
    finally:
        release.set()


@pytest.mark.parametrize("tail_limit", [100, 10_000])
async def test_a_start_does_not_wait_for_the_rows_a_small_snapshot_lacks(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail_limit: int
) -> None:
    """More rows past the snapshot than ``REPLAY_IN_BACKGROUND_ABOVE`` load in the background (queries read SQL
    meanwhile); fewer are added before the index answers."""
    messages = _messages(400)
    await _snapshot_of_the_first(100, messages, store, tmp_path / "vec", monkeypatch)
    monkeypatch.setattr(_hnsw_session, "REPLAY_IN_BACKGROUND_ABOVE", tail_limit)
    release = threading.Event()
    add_now = _hnsw_index.HnswIndex.add_now

    def _slow_add(index: Any, records: Any) -> None:
        release.wait(20 if tail_limit == 100 else 0)
        add_now(index, records)

    monkeypatch.setattr(_hnsw_index.HnswIndex, "add_now", _slow_add)
    async with _running(store, tmp_path / "vec") as actor:
        hits = await actor.query(messages[250].text, top_k=1, thread_id="t1")
        assert [h.message_id for h in hits] == ["m250"]
        stats = actor.statistics().store
        background = tail_limit == 100
        assert stats.loading is background and (stats.sql_queries == 1) is background
        release.set()
        with anyio.fail_after(20):
            while actor.statistics().store.loading:  # noqa: ASYNC110 - the loader thread reports by itself
                await anyio.sleep(0.01)
        assert actor.statistics().store.vectors == 400
        assert [h.message_id for h in await actor.query(messages[399].text, top_k=1, thread_id="t1")] == ["m399"]


@pytest.mark.parametrize(("seconds", "later"), [(1e-6, 64), (1e6, 1024)])
async def test_flusher_chunks_are_sized_to_take_a_bounded_time(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float, later: int
) -> None:
    """A close waits for the chunk being added to hnswlib, and hnswlib slows down as its graph grows: chunks are
    sized from the time the last one took (``FLUSH_CHUNK_SECONDS``), between 64 and ``FLUSH_CHUNK``."""
    monkeypatch.setattr(_hnsw_session, "FLUSH_CHUNK_SECONDS", seconds)
    sizes: list[int] = []
    _before_each_flush(monkeypatch, lambda plan: sizes.append(len(plan.labels)))
    messages = _messages(3000)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        await actor.flush()
        assert actor.statistics().staged == 0
    chunks = [size for size in sizes if size]
    assert chunks[0] == _hnsw_index.FLUSH_CHUNK // 4 and sum(chunks) == 3000
    assert set(chunks[1:-1]) == {later}


async def test_flush_waits_for_the_chunk_the_background_flusher_is_adding(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher's chunk leaves the staged set when taken, not when hnswlib has it: ``flush()`` then found nothing
    staged and returned while that chunk was still being added."""
    monkeypatch.setattr(_hnsw_session, "FLUSH_IDLE", 0.01)
    taken, release = threading.Event(), threading.Event()

    def _hold_the_first(plan: Any) -> None:
        if plan.labels and not taken.is_set():
            taken.set()
            release.wait(10)

    _before_each_flush(monkeypatch, _hold_the_first)
    messages = _messages(100)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        with anyio.fail_after(10):
            while not taken.is_set():  # noqa: ASYNC110 - the flusher's worker thread reports by itself
                await anyio.sleep(0.01)
        flushed = anyio.Event()

        async def _flush() -> None:
            await actor.flush()
            flushed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(_flush)
            await anyio.sleep(0.2)
            assert not flushed.is_set() and actor.statistics().staged == 100  # the chunk is still in hnswlib's hands
            release.set()
            with anyio.fail_after(10):
                await flushed.wait()
            assert actor.statistics().staged == 0
        assert [h.message_id for h in await actor.query(messages[42].text, top_k=1, thread_id="t1")] == ["m42"]


async def test_rows_written_while_an_index_loads_are_staged_a_page_at_a_time(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saves go on while the index loads, faster than hnswlib adds rows: what they wrote is staged a page at a
    time with the event loop free between pages, and going live (under the lock) replays at most a page."""
    messages = _messages(40)
    await _snapshot_of_the_first(20, messages, store, tmp_path / "vec", monkeypatch)
    monkeypatch.setattr(_hnsw_session, "REPLAY_IN_BACKGROUND_ABOVE", 0)
    monkeypatch.setattr(_hnsw_session, "LOAD_PAGE", 16)
    release = threading.Event()
    add_now = _hnsw_index.HnswIndex.add_now
    replay = _hnsw_index.HnswIndex.replay
    replayed: list[int] = []

    def _slow_add(index: Any, records: Any) -> None:
        release.wait(20)
        add_now(index, records)

    def _counted_replay(index: Any, records: Any, deleted: Any, seq: int) -> None:
        replayed.append(len(records))
        replay(index, records, deleted, seq)

    monkeypatch.setattr(_hnsw_index.HnswIndex, "add_now", _slow_add)
    monkeypatch.setattr(_hnsw_index.HnswIndex, "replay", _counted_replay)
    late = _messages(200, thread="t2", resource="r2", prefix="late")
    await persist(store, late)
    async with _running(store, tmp_path / "vec") as actor:
        assert [h.message_id for h in await actor.query(messages[1].text, top_k=1, thread_id="t1")] == ["m1"]
        assert actor.statistics().store.loading  # answered from SQL: the tail is being added
        await actor.upsert_messages(late)  # into SQL while the tail of the snapshot is being added
        release.set()
        with anyio.fail_after(20):
            while actor.statistics().store.loading:  # noqa: ASYNC110 - the loader thread reports by itself
                await anyio.sleep(0.01)
        assert replayed and max(replayed) <= 16, replayed
        assert actor.statistics().store.vectors == 240
        assert [h.message_id for h in await actor.query(late[123].text, top_k=1, thread_id="t2")] == ["late123"]
        assert [h.message_id for h in await actor.query(messages[33].text, top_k=1, thread_id="t1")] == ["m33"]


@pytest.mark.parametrize(("kept", "snapshot_every"), [(100, 200), (370, 20)])
async def test_a_start_that_added_a_long_tail_saves_a_snapshot_so_the_next_start_adds_none(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int, snapshot_every: int
) -> None:
    """The rows a snapshot lacks are added to hnswlib at the start; once that is ``SNAPSHOT_EVERY`` or more (here
    300, or 30: less than the tenth of the index that makes a running process's snapshot due), the started
    process saves one soon after going live, with no new write: a process restarted again (or crash-looping)
    does not add the same tail every time (300 000 vectors, ~200 s, at a million messages)."""
    messages = _messages(400)
    await _snapshot_of_the_first(kept, messages, store, tmp_path / "vec", monkeypatch)
    monkeypatch.setattr(_hnsw_session, "SNAPSHOT_EVERY", snapshot_every)
    monkeypatch.setattr(_hnsw_session, "FLUSH_IDLE", 0.01)
    added: list[int] = []
    add_now = _hnsw_index.HnswIndex.add_now

    def _counted(index: Any, records: Any) -> None:
        added.append(len(records))
        add_now(index, records)

    monkeypatch.setattr(_hnsw_index.HnswIndex, "add_now", _counted)
    async with _running(store, tmp_path / "vec") as actor:
        assert [h.message_id for h in await actor.query(messages[250].text, top_k=1, thread_id="t1")] == ["m250"]
        with anyio.fail_after(20):
            while actor.statistics().store.snapshot_saves == 0:  # noqa: ASYNC110 - the flusher saves by itself
                await anyio.sleep(0.01)
    assert sum(added) == 400 - kept
    added.clear()
    async with _running(store, tmp_path / "vec") as actor:
        assert [h.message_id for h in await actor.query(messages[399].text, top_k=1, thread_id="t1")] == ["m399"]
        assert actor.statistics().store.vectors == 400
    assert sum(added) == 0  # the second start found every vector in the snapshot
