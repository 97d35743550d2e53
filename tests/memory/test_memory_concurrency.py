"""Real concurrency through Memory: one thread hammered by hundreds of savers, many threads, ties, cancellation."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import pytest
from anyio.lowlevel import checkpoint

from threadmind import Memory, Message
from threadmind.stores import SQLiteStore

from ._support import BASE, PLAIN_LOOP, StoreFactory, all_ids, msg


def _batch(i: int, size: int = 3, *, ms: int | None = None) -> list[Message]:
    """A batch whose messages share one created_at (so only the sequence orders them)."""
    stamp = ms if ms is not None else i % 7
    return [msg(f"b{i:04d}-{j}", ms=stamp) for j in range(size)]


def _check_batches_contiguous(ids: list[str], batches: int, size: int) -> list[int]:
    """Every message once; each batch contiguous and in its own order. Returns the batch order."""
    assert len(ids) == len(set(ids)) == batches * size
    order: list[int] = []
    for start in range(0, len(ids), size):
        chunk = ids[start:start + size]
        batch = int(chunk[0][1:5])
        assert chunk == [f"b{batch:04d}-{j}" for j in range(size)], f"batch interleaved at {start}: {chunk}"
        order.append(batch)
    assert sorted(order) == list(range(batches))
    return order


@PLAIN_LOOP
async def test_500_concurrent_saves_on_one_thread(memory: Memory) -> None:
    await memory.create_thread(resource_id="r1", thread_id="t1")
    async with anyio.create_task_group() as tg:
        for i in range(500):
            tg.start_soon(memory.save_messages, _batch(i))
    ids = await all_ids(memory, "t1")
    order = _check_batches_contiguous(ids, 500, 3)
    # (created_at, sequence): timestamps never decrease along the stored order
    stamps = [b % 7 for b in order]
    assert stamps == sorted(stamps)
    stored = (await memory.recall("t1", per_page=False)).messages
    assert [m.created_at for m in stored] == sorted(m.created_at for m in stored)


async def test_concurrent_saves_with_one_shared_timestamp(memory: Memory) -> None:
    """All batches share one created_at: order is pure commit sequence, never interleaved, same on every read."""
    await memory.create_thread(resource_id="r1", thread_id="t1")
    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(memory.save_messages, _batch(i, 4, ms=0))
    first = await all_ids(memory, "t1")
    _check_batches_contiguous(first, 200, 4)
    assert await all_ids(memory, "t1") == first
    desc = (await memory.recall("t1", per_page=False, direction="DESC")).messages
    assert [m.id for m in desc] == first[::-1]
    window = (await memory.recall("t1")).messages
    assert [m.id for m in window] == first[-10:]


@PLAIN_LOOP
async def test_1000_threads_saved_in_parallel(memory: Memory) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(1000):
            tg.start_soon(partial(memory.create_thread, resource_id=f"r{i % 10}", thread_id=f"t{i}"))
    async with anyio.create_task_group() as tg:
        for i in range(1000):
            batch = [msg(f"t{i}-{j}", f"t{i}", f"r{i % 10}", ms=j) for j in range(2)]
            tg.start_soon(memory.save_messages, batch)
    assert (await memory.list_threads(per_page=False)).total == 1000
    assert (await memory.list_threads(resource_id="r3", per_page=False)).total == 100
    for i in (0, 1, 499, 999):
        result = await memory.recall(f"t{i}", resource_id=f"r{i % 10}")
        assert [m.id for m in result.messages] == [f"t{i}-0", f"t{i}-1"]
    stored = await memory.list_messages_by_id([f"t{i}-{j}" for i in range(1000) for j in range(2)])
    assert len(stored) == 2000


async def test_one_batch_across_many_threads(memory: Memory) -> None:
    for i in range(20):
        await memory.create_thread(resource_id="r1", thread_id=f"t{i}")
    batch = [msg(f"m{i}-{j}", f"t{i}", ms=j) for j in range(3) for i in range(20)]
    result = await memory.save_messages(batch)
    assert {m.id for m in result.messages} == {m.id for m in batch}
    for i in range(20):
        assert await all_ids(memory, f"t{i}") == [f"m{i}-{j}" for j in range(3)]


class TestEqualTimestamps:
    async def test_sequential_saves_never_reorder(self, make_store: StoreFactory) -> None:
        async with Memory(storage=make_store(), options={"lastMessages": 7}) as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            expected: list[str] = []
            for i in range(40):  # ids deliberately sort against save order
                batch = [msg(f"{99 - i:02d}-{c}", ms=0, role="assistant" if i % 2 else "user") for c in "ba"]
                await memory.save_messages(batch)
                expected.extend(m.id for m in batch)
            assert await all_ids(memory, "t1") == expected
            assert [m.id for m in (await memory.recall("t1")).messages] == expected[-7:]
            desc = await memory.recall("t1", per_page=False, direction="DESC")
            assert [m.id for m in desc.messages] == expected[::-1]
            asc_pages = [m.id for p in range(8) for m in
                         (await memory.recall("t1", per_page=10, page=p, direction="ASC")).messages]
            assert asc_pages == expected

    async def test_ties_survive_reopening(self, tmp_path: object) -> None:
        from pathlib import Path

        from threadmind.stores import SQLiteStore

        path = Path(str(tmp_path)) / "ties.db"
        expected = [f"{9 - i}" for i in range(10)]
        async with Memory(storage=SQLiteStore(path)) as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            for mid in expected:
                await memory.save_messages([msg(mid, ms=5)])
        async with Memory(storage=SQLiteStore(path)) as memory:
            assert await all_ids(memory, "t1") == expected
            await memory.save_messages([msg("0", text="re-saved", created_at=BASE + timedelta(days=1))])
            assert await all_ids(memory, "t1") == expected  # a re-save keeps its slot


class TestCancellation:
    @pytest.mark.parametrize("delay", [0, 1, 2, 3, 5, 8, 13])
    async def test_cancelled_saves_are_all_or_nothing(self, memory: Memory, delay: int) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        batches = [[msg(f"c{i:03d}-{j}", ms=i) for j in range(5)] for i in range(60)]
        outcome: dict[int, str] = {}

        async def _save(i: int, scope: anyio.CancelScope, started: anyio.Event) -> None:
            with scope:
                started.set()
                await memory.save_messages(batches[i])
                outcome[i] = "done"
            outcome.setdefault(i, "cancelled")

        async def _cancel_later(scope: anyio.CancelScope, started: anyio.Event, after: int) -> None:
            await started.wait()
            for _ in range(after):
                await checkpoint()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            for i in range(len(batches)):
                scope, started = anyio.CancelScope(), anyio.Event()
                tg.start_soon(_save, i, scope, started)
                tg.start_soon(_cancel_later, scope, started, (delay + i) % 9)
        stored = set(await all_ids(memory, "t1"))
        for i, batch in enumerate(batches):
            present = [m.id in stored for m in batch]
            assert all(present) or not any(present), f"batch {i} half-written: {present}"
            if outcome[i] == "done":
                assert all(present)
        # the thread and its actor keep working
        await memory.save_messages([msg("after", ms=1000)])
        ids = await all_ids(memory, "t1")
        assert ids[-1] == "after" and len(ids) == len(stored) + 1
        assert (await memory.recall("t1")).messages[-1].id == "after"

    async def test_cancelled_while_actor_busy_then_reused(self, memory: Memory) -> None:
        """Cancel callers queued behind a long batch; none of their batches is half there."""
        await memory.create_thread(resource_id="r1", thread_id="t1")
        big = [msg(f"big-{j:04d}", ms=0) for j in range(3000)]
        with anyio.CancelScope() as outer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(memory.save_messages, big)
                for i in range(50):
                    tg.start_soon(memory.save_messages, [msg(f"q{i:02d}-{j}", ms=1) for j in range(3)])
                await anyio.wait_all_tasks_blocked()
                outer.cancel()
        ids = await all_ids(memory, "t1")
        big_present = sum(1 for i in ids if i.startswith("big-"))
        assert big_present in (0, 3000)
        for i in range(50):
            present = sum(1 for x in ids if x.startswith(f"q{i:02d}-"))
            assert present in (0, 3)
        await memory.save_messages([msg("later", ms=5)])
        assert (await all_ids(memory, "t1"))[-1] == "later"


async def test_two_memories_on_one_file_see_each_others_writes_at_once(tmp_path: Path) -> None:
    """Store objects on one file share their write counts: no cached window or row outlives the other's write."""
    options = {"lastMessages": 5, "workingMemory": {"enabled": True}}
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options=options) as first, \
            Memory(storage=SQLiteStore(tmp_path / "m.db"), options=options) as second:
        await first.create_thread(resource_id="r1", thread_id="t1")
        await first.save_messages([msg("a", ms=1)])
        assert [m.id for m in (await second.recall("t1")).messages] == ["a"]  # second now caches the window
        await first.save_messages([msg("b", ms=2)])
        assert [m.id for m in (await second.recall("t1")).messages] == ["a", "b"]
        await second.delete_messages(["a"])
        assert [m.id for m in (await first.recall("t1")).messages] == ["b"]
        await first.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Notes\n- one")
        assert await second.get_working_memory(thread_id="t1", resource_id="r1") == "# Notes\n- one"
        await second.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Notes\n- two")
        assert await first.get_working_memory(thread_id="t1", resource_id="r1") == "# Notes\n- two"
