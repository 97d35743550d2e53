"""``Memory.load_index()``: a server loads the index before it takes traffic, instead of meeting the load (queries
read SQL meanwhile, and hnswlib reads a snapshot holding the GIL) with its first requests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, PgVectorStore, PostgresStore, SQLiteStore
from threadmind.stores._vectors import _hnsw_session, _hnsw_snapshot
from threadmind.testing import actor_system

from ._support import make_message

OPTIONS = {"lastMessages": 0, "semanticRecall": {"scope": "resource", "topK": 1, "messageRange": 0}}


def _memory(tmp_path: Path) -> Memory:
    return Memory(storage=SQLiteStore(tmp_path / "m.db"), vector=HnswVectorStore(tmp_path / "vec"),
                  embedder=HashEmbedder(dim=32), options=OPTIONS)


def _stats(memory: Memory) -> Any:
    index = actor_system(memory).index
    assert index is not None
    return index.statistics().store


async def _stored(memory: Memory, n: int) -> None:
    await memory.create_thread(thread_id="t1", resource_id="r1")
    await memory.save_messages([make_message(f"m{i}", "t1", "r1", f"note {i} about tram line {i}", i)
                                for i in range(n)])


async def _stored_then_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """50 messages with their snapshot saved at close; from then on every snapshot read fails."""
    async with _memory(tmp_path) as memory:
        await _stored(memory, 50)

    def _broken(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_hnsw_session, "load_snapshot", _broken)


@pytest.fixture
def slow_snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every snapshot loads in the background, and reading one takes 0.3 s (a large one, here)."""
    monkeypatch.setattr(_hnsw_session, "LOAD_IN_BACKGROUND_ABOVE", 10)
    load = _hnsw_snapshot.load_snapshot

    def _slow(*args: Any) -> Any:
        time.sleep(0.3)
        return load(*args)

    monkeypatch.setattr(_hnsw_session, "load_snapshot", _slow)


@pytest.mark.usefixtures("slow_snapshot_reads")
async def test_load_index_waits_for_the_background_load_so_no_query_meets_it(tmp_path: Path) -> None:
    async with _memory(tmp_path) as memory:
        await _stored(memory, 300)  # closing saves the snapshot of an index this small
    async with _memory(tmp_path) as memory:
        assert await memory.load_index() == 300
        stats = _stats(memory)
        assert not stats.loading and stats.snapshot_loads == 1 and stats.sql_queries == 0
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="note 217 about tram")
        assert [m.id for m in found.messages] == ["m217"]
        assert _stats(memory).sql_queries == 0  # answered by the loaded index
        assert await memory.load_index() == 300  # again: nothing to wait for
    async with _memory(tmp_path) as memory:  # without it, the first query meets the load and reads SQL
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="note 217 about tram")
        assert [m.id for m in found.messages] == ["m217"]
        assert _stats(memory).loading and _stats(memory).sql_queries == 1


@pytest.mark.usefixtures("slow_snapshot_reads")
async def test_a_failed_load_does_not_leave_load_index_waiting(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    await _stored_then_unreadable(tmp_path, monkeypatch)
    async with _memory(tmp_path) as memory:
        with anyio.fail_after(10):
            assert await memory.load_index() == 0  # nothing loaded: the failure is logged
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="note 17 about tram")
        assert [m.id for m in found.messages] == ["m17"]  # still answered, from the stored rows
        assert _stats(memory).sql_queries == 1


@pytest.mark.usefixtures("slow_snapshot_reads")
async def test_a_close_during_load_index_ends_the_wait(tmp_path: Path) -> None:
    async with _memory(tmp_path) as memory:
        await _stored(memory, 50)
    memory = _memory(tmp_path)
    await memory.start()
    results: list[int] = []
    async with anyio.create_task_group() as tg:
        async def _load() -> None:
            results.append(await memory.load_index())

        tg.start_soon(_load)
        await anyio.sleep(0.05)  # the snapshot is being read
        with anyio.fail_after(10):
            await memory.aclose()
    assert results == [0]


async def test_load_index_without_semantic_recall_is_zero(tmp_path: Path) -> None:
    async with Memory(storage=SQLiteStore(tmp_path / "m.db")) as memory:
        assert await memory.load_index() == 0


async def test_with_pgvector_load_index_returns_the_vectors_at_once(pg_dsn: str) -> None:
    def _pg() -> Memory:
        return Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=HashEmbedder(dim=32),
                      options=OPTIONS)

    async with _pg() as memory:
        await _stored(memory, 20)
    async with _pg() as memory:
        assert await memory.load_index() == 20


async def test_a_small_index_whose_load_failed_is_not_waited_for_again(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A small index loads before its first operation returns; when that load fails, the failure reaches the
    caller, and later calls (which do not load again) must not wait for it."""
    await _stored_then_unreadable(tmp_path, monkeypatch)
    async with _memory(tmp_path) as memory:
        with pytest.raises(RuntimeError, match="disk on fire"):
            await memory.load_index()
        with anyio.fail_after(10):
            assert await memory.load_index() == 0
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="note 17 about tram")
        assert [m.id for m in found.messages] == ["m17"]  # answered from the stored rows
