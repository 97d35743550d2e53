"""A ``save_messages`` batch that spans threads commits in one transaction: every thread's part or none."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory
from threadmind.actors._thread_actor import Exclusive
from threadmind.errors import StorageError
from threadmind.stores import SQLiteStore
from threadmind.testing import actor_system

from ._support import PLAIN_LOOP, all_ids, msg


async def test_a_storage_failure_in_one_part_writes_no_part(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    async with Memory(storage=store) as memory:
        for tid in ("t1", "t2", "t3"):
            await memory.create_thread(resource_id="r1", thread_id=tid)
        # SQLite itself refuses t2's rows: no check before the write can see this coming.
        await store.execute_write(lambda conn: conn.execute(
            "CREATE TRIGGER refuse_t2 BEFORE INSERT ON mastra_messages WHEN NEW.thread_id = 't2' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END"))
        batch = [msg("a", "t1", ms=1), msg("b", "t2", ms=2), msg("c", "t3", ms=3)]
        with pytest.raises(StorageError, match="refused by the test trigger"):
            await memory.save_messages(batch)
        assert [await all_ids(memory, tid) for tid in ("t1", "t2", "t3")] == [[], [], []]
        assert await memory.list_messages_by_id(["a", "b", "c"]) == []
        # every thread keeps working, and a batch that avoids t2 commits whole
        await memory.save_messages([msg("a", "t1", ms=1), msg("c", "t3", ms=3)])
        assert [await all_ids(memory, tid) for tid in ("t1", "t2", "t3")] == [["a"], [], ["c"]]


async def test_a_caller_cancelled_midway_leaves_all_or_nothing(memory: Memory) -> None:
    for tid in ("t1", "t2"):
        await memory.create_thread(resource_id="r1", thread_id=tid)
    threads = actor_system(memory).threads
    assert threads is not None
    release = anyio.Event()
    holding = anyio.Event()

    async def hold_t2() -> None:
        holding.set()
        await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(threads.ask, "t2", Exclusive(hold_t2, "test_hold"))
        await holding.wait()  # t2's actor is busy: the batch's t2 part must wait behind it
        with anyio.move_on_after(0.2) as scope:
            await memory.save_messages([msg("a", "t1", ms=1), msg("b", "t2", ms=2)])
        assert scope.cancelled_caught
        release.set()
    stored = (await all_ids(memory, "t1"), await all_ids(memory, "t2"))  # each read queues behind the batch
    assert stored in ((["a"], ["b"]), ([], []))
    # The batch had started (it held t1) when its caller left, so it finished: both parts are there.
    assert stored == (["a"], ["b"])


@PLAIN_LOOP
async def test_overlapping_batches_in_any_order_never_deadlock(memory: Memory) -> None:
    """80 batches over random subsets of 8 threads (listed in random orders) and 80 single saves, all at
    once: all finish, and every two batches that share threads are in the same order in each of them."""
    tids = [f"t{i}" for i in range(8)]
    for tid in tids:
        await memory.create_thread(resource_id="r1", thread_id=tid)
    rng = random.Random(7)
    batches = {f"b{i:02d}": rng.sample(tids, rng.randint(2, 5)) for i in range(80)}

    async def save_batch(name: str, members: list[str]) -> None:
        await memory.save_messages([msg(f"{name}-{tid}", tid, ms=0) for tid in members])  # one created_at

    async def save_single(i: int) -> None:
        await memory.save_messages([msg(f"s{i:02d}", tids[i % 8], ms=0)])

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i, (name, members) in enumerate(batches.items()):
                tg.start_soon(save_batch, name, members)
                tg.start_soon(save_single, i)
    position: dict[tuple[str, str], int] = {}
    for tid in tids:
        ids = await all_ids(memory, tid)
        expected: set[Any] = {f"{name}-{tid}" for name, members in batches.items() if tid in members}
        expected |= {f"s{i:02d}" for i in range(80) if tids[i % 8] == tid}
        assert sorted(ids) == sorted(expected)
        for index, mid in enumerate(ids):
            if not mid.startswith("s"):
                position[(mid.split("-")[0], tid)] = index
    for (a, members_a), (b, members_b) in itertools.combinations(batches.items(), 2):
        shared = sorted(set(members_a) & set(members_b))
        orders = {position[(a, tid)] < position[(b, tid)] for tid in shared}
        assert len(orders) <= 1, f"{a} and {b} are ordered differently across {shared}"


class _WithoutSaveMany:
    """A store that lacks ``save_messages_many`` (the batched save across threads the contract requires)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "save_messages_many":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_save_many_is_refused_at_construction(tmp_path: Path) -> None:
    """A batch spanning threads must commit in one transaction: a store that cannot do that is refused when
    the Memory is built, naming what it lacks, instead of committing each thread's part on its own."""
    from threadmind.errors import ConfigError

    with pytest.raises(ConfigError, match="save_messages_many") as info:
        Memory(storage=_WithoutSaveMany(SQLiteStore(tmp_path / "m.db")))
    assert info.value.code == "THREADMIND_STORE_INCOMPLETE"


@pytest.mark.parametrize("operation", ["update", "delete"])
async def test_updates_and_deletes_across_threads_are_one_transaction(tmp_path: Path, operation: str) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    async with Memory(storage=store) as memory:
        for tid in ("t1", "t2"):
            await memory.create_thread(resource_id="r1", thread_id=tid)
        await memory.save_messages([msg("a", "t1", ms=1, text="a0"), msg("b", "t2", ms=2, text="b0")])
        event = "UPDATE" if operation == "update" else "DELETE"
        await store.execute_write(lambda conn: conn.execute(
            f"CREATE TRIGGER refuse_t2 BEFORE {event} ON mastra_messages WHEN OLD.thread_id = 't2' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END"))
        with pytest.raises(StorageError, match="refused by the test trigger"):
            if operation == "update":
                await memory.update_messages([{"id": "a", "content": {"content": "a1"}},
                                              {"id": "b", "content": {"content": "b1"}}])
            else:
                await memory.delete_messages(["a", "b"])
        kept = await memory.list_messages_by_id(["a", "b"])
        assert [(m.id, m.text) for m in kept] == [("a", "a0"), ("b", "b0")]  # t1's part was not applied either
        assert [m.id for m in (await memory.recall("t1")).messages] == ["a"]
