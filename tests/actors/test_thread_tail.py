"""The thread actor's in-memory tail always answers the default window exactly as the database would."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from tests._factories import msg, text_msg, tool_part

from threadmind import Memory, Message
from threadmind.actors._tail import Tail
from threadmind.actors._thread_actor import Exclusive, GetThread, LoadWindow
from threadmind.errors import ResourceMismatch
from threadmind.stores import InMemoryStore, SQLiteStore
from threadmind.testing import actor_system, processor_access

BASE = datetime(2025, 1, 1, tzinfo=UTC)


def _msg(i: int, seconds: int, text: str | None = None) -> Message:
    return text_msg("user", text or f"message {i}", id=f"m{i}", at=BASE + timedelta(seconds=seconds),
                    thread_id="t", resource_id="r")


@pytest.mark.parametrize("cached_reads", [True, False], ids=["cached-reads", "mailbox-reads"])
@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_random_operations_keep_the_tail_exact(
    tmp_path: Path, kind: str, cached_reads: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threadmind.actors._registry.tracing_enabled", lambda: not cached_reads)
    rng = random.Random(5)
    store = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else InMemoryStore()
    async with Memory(storage=store, options={"lastMessages": 7}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        known: list[int] = []
        next_id = 0
        for step in range(150):
            action = rng.random()
            if action < 0.55 or not known:  # new messages, often with equal timestamps, sometimes older
                batch = []
                for _ in range(rng.randint(1, 3)):
                    batch.append(_msg(next_id, rng.choice([step, step, step - 50, 0])))
                    known.append(next_id)
                    next_id += 1
                await memory.save_messages(batch)
            elif action < 0.7:  # re-save an existing id with new text (keeps its place)
                i = rng.choice(known)
                await memory.save_messages([_msg(i, 999, text=f"edited {i} at {step}")])
            elif action < 0.8:
                i = known.pop(rng.randrange(len(known)))
                await memory.delete_messages([f"m{i}"])
            elif action < 0.9:
                i = rng.choice(known)
                await memory.update_messages([{"id": f"m{i}", "content": {"content": f"updated {i}"}}])
            else:
                await memory.update_thread("t", title=f"title {step}")
            fast = await memory.recall("t", resource_id="r")
            exact = await memory.recall("t", resource_id="r", per_page=7)  # straight from the store
            assert [(m.id, m.text) for m in fast.messages] == [(m.id, m.text) for m in exact.messages], step
            assert fast.total == exact.total == len(known)
            assert fast.has_more == exact.has_more


def test_tail_merge_rules() -> None:
    clock = [0.0]
    tail = Tail([_msg(1, 10), _msg(2, 20)], total=5, owner="r", clock=lambda: clock[0], ttl=1.0)
    assert tail.window(2) is not None and tail.window(3) is None  # only two of five held
    assert tail.merge([_msg(3, 20)], capacity=10)  # equal timestamp: after the stored one
    assert [m.id for m in tail.messages] == ["m1", "m2", "m3"] and tail.total == 6
    assert not tail.merge([_msg(9, 5)], capacity=10)  # older than the window: cannot place it exactly
    clock[0] = 2.0
    assert not tail.fresh


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_a_tail_is_out_of_the_collectors_sight(tmp_path: Path, kind: str) -> None:
    """Every conversation keeps a tail: what it holds must not lengthen full collections (see ``_tail``)."""
    store = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else InMemoryStore()
    async with Memory(storage=store, options={"lastMessages": 5}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        saved = [_msg(i, i) for i in range(4)]
        call = msg("assistant", tool_part("call", "c1", args={"nested": {"q": [1, 2]}}), id="tool", at=BASE,
                   thread_id="t", resource_id="r")
        await memory.save_messages(saved[:2])
        await memory.save_messages([*saved[2:], call])  # merged into the tail the first save left
        fast = await memory.recall("t", resource_id="r")
        assert [m.id for m in fast.messages] == ["m0", "tool", "m1", "m2", "m3"]
        assert fast.messages == [m for m in (await memory.recall("t", resource_id="r", per_page=5)).messages]
        threads = actor_system(memory).threads
        tail = threads.get("t")._tail
        assert tail is not None and len(tail.messages) == 5
        gc.collect()  # tuples of untracked objects are untracked by a collection
        assert not any(map(gc.is_tracked, (tail.messages, tail._created, tail._ids)))
        text_parts = [m.content.parts for m in tail.messages if m.id != "tool"]
        assert len(text_parts) == 4 and not any(map(gc.is_tracked, text_parts))
        tool = next(m for m in tail.messages if m.id == "tool")
        assert gc.is_tracked(tool.content.parts)  # holds a tracked dict of arguments: stays in sight


# -- cached reads answered without a mailbox round trip ------------------------------------------------------


async def test_cached_reads_of_an_idle_actor_skip_the_mailbox(tmp_path: Path) -> None:
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 5}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, i) for i in range(3)])
        threads = actor_system(memory).threads
        assert threads is not None
        actor = threads.get("t")
        handled: list[Any] = []
        real_handle = actor.handle

        async def _handle(command: Any) -> Any:
            handled.append(command)
            return await real_handle(command)

        actor.handle = _handle  # type: ignore[method-assign]
        before = actor.statistics()
        page = await threads.ask("t", LoadWindow(5, "r"))
        row = await threads.ask("t", GetThread())
        assert [m.id for m in page.messages] == ["m0", "m1", "m2"] and row is not None and row.resource_id == "r"
        after = actor.statistics()
        assert after.processed == before.processed + 2  # counted like handled commands ...
        assert handled == []  # ... but never handled by the actor's loop
        with pytest.raises(ResourceMismatch):  # the handler's checks apply to the cached answer too
            await threads.ask("t", LoadWindow(5, "someone-else"))
        assert actor.statistics().failed == after.failed + 1
        await memory.save_messages([_msg(i, i) for i in range(3, 80)])  # more than the tail keeps
        handled.clear()
        page = await threads.ask("t", LoadWindow(75, "r"))  # beyond the tail: the actor reads the store
        assert len(page.messages) == 75 and [type(c) for c in handled] == [LoadWindow]


async def test_a_read_behind_queued_work_waits_its_turn(tmp_path: Path) -> None:
    """While a command runs, a read goes through the mailbox and sees what that command changed."""
    store = SQLiteStore(tmp_path / "m.db")
    async with Memory(storage=store) as memory:
        await memory.create_thread(thread_id="t", resource_id="r", title="old")
        threads = actor_system(memory).threads
        assert threads is not None
        assert (await threads.ask("t", GetThread())).title == "old"  # now cached
        release = anyio.Event()
        titles: list[str] = []

        async def _slow_update() -> None:
            await release.wait()
            await store.update_thread("t", title="new")  # behind the actor's back, inside its exclusive turn

        async def _read() -> None:
            titles.append((await threads.ask("t", GetThread())).title)

        async with anyio.create_task_group() as tg:
            tg.start_soon(threads.ask, "t", Exclusive(_slow_update))
            while not threads.get("t").statistics().busy:
                await anyio.lowlevel.checkpoint()
            tg.start_soon(_read)
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            assert titles == []  # not answered from the cache while the exclusive command runs
            release.set()
        assert titles == ["new"]


async def test_cached_reads_are_still_checkpoints(tmp_path: Path) -> None:
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 5}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(0, 0)])
        ticks = 0

        async def _ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(_ticker)
            await anyio.lowlevel.checkpoint()
            start = ticks
            for _ in range(50):
                await memory.recall("t", resource_id="r")
            assert ticks - start >= 40  # other tasks ran between the reads
            tg.cancel_scope.cancel()


async def test_reads_since_a_time_from_the_tail_equal_the_stores(tmp_path: Path) -> None:
    """Every message from a time on (observational memory's unobserved rows): answered from the tail when it
    provably holds them all, else from the store; either way exactly the store's answer."""
    from threadmind.stores import DateRange, MessageQuery

    rng = random.Random(8)
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 7}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        known: list[int] = []
        next_id = 0
        for step in range(120):
            action = rng.random()
            if action < 0.75 or not known:
                batch = []
                for _ in range(rng.randint(1, 4)):
                    batch.append(_msg(next_id, rng.choice([step, step, step - 1])))  # many equal timestamps
                    known.append(next_id)
                    next_id += 1
                await memory.save_messages(batch)
            elif action < 0.85:
                await memory.delete_messages([f"m{known.pop(rng.randrange(len(known)))}"])
            else:
                await memory.recall("t", resource_id="r")  # reloads a dropped tail
            cursor = BASE + timedelta(seconds=rng.randint(max(0, step - 30), step + 1))
            for bound in (None, DateRange(start=cursor), DateRange(start=cursor, start_exclusive=True)):
                query = MessageQuery(thread_id="t", per_page=False, direction="ASC", date_range=bound,
                                     include_total=False)
                fast = await processor_access(memory).list_messages(query)
                exact = await memory.storage.list_messages(query)
                assert [m.id for m in fast.messages] == [m.id for m in exact.messages], (step, bound)
                assert (fast.total, fast.has_more) == (exact.total, exact.has_more)


async def test_a_read_since_a_time_shared_beyond_the_tail_goes_to_the_store(tmp_path: Path) -> None:
    from threadmind.stores import DateRange, MessageQuery

    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 7}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, 10) for i in range(70)])  # one timestamp, more rows than the tail
        await memory.save_messages([_msg(70, 11)])
        await memory.recall("t", resource_id="r")  # the tail: the newest few of them
        since = MessageQuery(thread_id="t", per_page=False, date_range=DateRange(start=BASE + timedelta(seconds=10)))
        assert len((await processor_access(memory).list_messages(since)).messages) == 71
        after = MessageQuery(thread_id="t", per_page=False,
                             date_range=DateRange(start=BASE + timedelta(seconds=10), start_exclusive=True))
        assert [m.id for m in (await processor_access(memory).list_messages(after)).messages] == ["m70"]


async def test_a_reload_reads_as_many_rows_as_the_windows_asked(tmp_path: Path) -> None:
    """The tail holds the longest window read through the actor (at least TAIL_MIN): a thread read ten at a
    time reloads 16 rows, not a fixed 64; one that was asked for 100 reloads 100."""
    from threadmind.actors._thread_actor import TAIL_MIN
    from threadmind.stores import MessageQuery

    class Counting(SQLiteStore):
        sizes: list[Any] = []

        async def list_messages(self, query: MessageQuery) -> Any:
            self.sizes.append(query.per_page)
            return await super().list_messages(query)

        async def get_thread_with_tail(self, thread_id: str, size: int) -> Any:
            self.sizes.append(size)
            return await super().get_thread_with_tail(thread_id, size)

    store = Counting(tmp_path / "m.db")
    async with Memory(storage=store, options={"lastMessages": 10}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, i) for i in range(150)])
        await memory.delete_messages(["m0"])  # drops the tail
        store.sizes.clear()
        assert len((await memory.recall("t", resource_id="r")).messages) == 10
        assert store.sizes == [TAIL_MIN]
        last_100 = MessageQuery(thread_id="t", resource_id="r", per_page=100, direction="DESC")
        assert len((await processor_access(memory).list_messages(last_100)).messages) == 100  # a token budget's read
        await memory.delete_messages(["m1"])
        store.sizes.clear()
        assert len((await memory.recall("t", resource_id="r")).messages) == 10
        assert store.sizes == [100]  # the longest window asked so far: both served from memory again
        assert (await processor_access(memory).list_messages(last_100)).messages[0].id == "m149"
        assert store.sizes == [100]


async def test_a_turn_on_a_thread_idle_past_the_ttl_reads_the_row_and_the_window_together(tmp_path: Path) -> None:
    from threadmind.agent import Agent
    from threadmind.models import ScriptedModel
    from threadmind.stores import MessageQuery

    class Counting(SQLiteStore):
        calls: list[str] = []

        async def get_thread(self, thread_id: str) -> Any:
            self.calls.append("get_thread")
            return await super().get_thread(thread_id)

        async def list_messages(self, query: MessageQuery) -> Any:
            self.calls.append("list_messages")
            return await super().list_messages(query)

        async def get_thread_with_tail(self, thread_id: str, size: int) -> Any:
            self.calls.append("get_thread_with_tail")
            return await super().get_thread_with_tail(thread_id, size)

    store = Counting(tmp_path / "m.db")
    now = [1000.0]
    async with Memory(storage=store, options={"lastMessages": 10}) as memory:
        threads = actor_system(memory).threads
        assert threads is not None
        threads.get("t")._clock = lambda: now[0]  # the thread's actor, on a clock the test moves
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, i) for i in range(30)])
        model = ScriptedModel(["a1", "a2"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("q1", thread_id="t", resource_id="r")
        now[0] += 3.0  # the user took three seconds to answer: the row and the tail have expired
        store.calls.clear()
        await agent.generate("q2", thread_id="t", resource_id="r")
        assert store.calls == ["get_thread_with_tail"]  # the row and the window in one read
        assert [m.text for m in model.requests[1].messages][-3:] == ["q1", "a1", "q2"]


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_writes_straight_into_the_store_are_seen_at_once(tmp_path: Path, kind: str) -> None:
    """The store counts its writes per thread, so a write that bypasses the thread's actor (a processor built
    on ``memory.storage``) drops the actor's caches at once instead of after the 2 s expiry."""
    store = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else InMemoryStore()
    async with Memory(storage=store, options={"lastMessages": 5}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, i) for i in range(3)])
        threads = actor_system(memory).threads
        assert threads is not None
        assert [m.id for m in (await memory.recall("t", resource_id="r")).messages] == ["m0", "m1", "m2"]
        await memory.storage.save_messages("t", [_msg(3, 3)])  # past the actor
        assert [m.id for m in (await memory.recall("t", resource_id="r")).messages] == ["m0", "m1", "m2", "m3"]
        await memory.storage.delete_messages(["m1"])
        assert [m.id for m in (await memory.recall("t", resource_id="r")).messages] == ["m0", "m2", "m3"]
        await threads.ask("t", GetThread())  # cache the row
        await memory.storage.update_thread("t", metadata={"topic": "tea"})
        row = await threads.ask("t", GetThread())
        assert row is not None and row.metadata == {"topic": "tea"}


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_concurrent_writes_past_the_actor_never_leave_a_stale_window(tmp_path: Path, kind: str) -> None:
    """Saves through the actor and straight into the store at once (one group commit may carry both): after
    each round the cached window equals the store's."""
    rng = random.Random(12)
    store = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else InMemoryStore()
    async with Memory(storage=store, options={"lastMessages": 6}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        next_id = 0
        for step in range(40):
            batches: list[tuple[bool, list[Message]]] = []
            for _ in range(rng.randint(1, 4)):
                batch = [_msg(next_id + k, step) for k in range(rng.randint(1, 2))]
                next_id += len(batch)
                batches.append((rng.random() < 0.4, batch))

            async def save(direct: bool, batch: list[Message]) -> None:
                if direct:
                    await memory.storage.save_messages("t", batch)
                else:
                    await memory.save_messages(batch)

            async with anyio.create_task_group() as tg:
                for direct, batch in batches:
                    tg.start_soon(save, direct, batch)
            fast = await memory.recall("t", resource_id="r")
            exact = await memory.recall("t", resource_id="r", per_page=6)
            assert [m.id for m in fast.messages] == [m.id for m in exact.messages], step
            assert fast.total == exact.total == next_id


@pytest.mark.parametrize("bad", [-1, True, "2", float("nan")])
def test_cache_ttl_is_validated(bad: Any) -> None:
    from threadmind.errors import ConfigError

    with pytest.raises(ConfigError, match="cache_ttl"):
        Memory(storage=InMemoryStore(), cache_ttl=bad)


async def test_without_a_cache_ttl_a_turn_after_a_pause_reads_nothing(tmp_path: Path) -> None:
    """``cache_ttl=None`` (only this process writes the file): the row and the window stay cached however long
    the thread idles, and writes through this process still reach them at once."""
    from threadmind.agent import Agent
    from threadmind.models import ScriptedModel
    from threadmind.stores import MessageQuery

    class Counting(SQLiteStore):
        reads = 0

        async def execute_read(self, fn: Any) -> Any:
            self.reads += 1
            return await super().execute_read(fn)

    store = Counting(tmp_path / "m.db")
    now = [1000.0]
    async with Memory(storage=store, options={"lastMessages": 10}, cache_ttl=None) as memory:
        threads = actor_system(memory).threads
        assert threads is not None
        threads.get("t")._clock = lambda: now[0]
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([_msg(i, i) for i in range(30)])
        model = ScriptedModel(["a1", "a2", "a3"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("q1", thread_id="t", resource_id="r")
        now[0] += 3600.0  # an hour later
        reads = store.reads
        await agent.generate("q2", thread_id="t", resource_id="r")
        assert store.reads == reads
        await store.save_messages("t", [_msg(99, 10**9)])  # straight into the store (dated ahead): seen at once
        page = await processor_access(memory).list_messages(MessageQuery(thread_id="t", per_page=3, direction="DESC"))
        assert page.messages[0].id == "m99"
