"""ActorRegistry: single activation, passivation (fake clock), LRU eviction, the passivation race, aclose."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests._factories import FakeClock

from threadmind.actors._actor import Actor
from threadmind.actors._mailbox import MailboxClosed
from threadmind.actors._registry import ActorRegistry, RegistryStatistics
from threadmind.errors import ConfigError, ThreadmindError
from threadmind.testing import actor_system


@dataclass(frozen=True)
class Work:
    """A command: an id, optional gates."""

    id: int
    started: anyio.Event | None = None
    release: anyio.Event | None = None


class Worker(Actor[Work]):
    """Records every handled command in a log shared by all activations."""

    def __init__(self, key: str, log: list[tuple[str, int]], clock: Callable[[], float]) -> None:
        super().__init__(key, clock=clock)
        self.log = log

    async def handle(self, command: Work) -> Any:
        if command.started is not None:
            command.started.set()
        if command.release is not None:
            await command.release.wait()
        await checkpoint()
        self.log.append((self.key, command.id))
        return (self.key, command.id)


def make_registry(
    clock: FakeClock | None = None,
    *,
    idle_timeout: float = 60.0,
    max_actors: int = 10_000,
    sweep_interval: float | None = None,
) -> tuple[ActorRegistry[Worker], list[tuple[str, int]]]:
    log: list[tuple[str, int]] = []
    clk = clock or FakeClock()
    registry = ActorRegistry(
        lambda key: Worker(key, log, clk),
        idle_timeout=idle_timeout,
        max_actors=max_actors,
        clock=clk,
        sweep_interval=sweep_interval,
    )
    return registry, log


class TestActivation:
    async def test_get_or_create_single_activation(self) -> None:
        registry, _ = make_registry()
        async with registry:
            seen: list[Worker] = []

            async def lookup() -> None:
                await checkpoint()
                seen.append(registry.get("k"))

            async with anyio.create_task_group() as tg:
                for _ in range(200):
                    tg.start_soon(lookup)
            assert len({id(a) for a in seen}) == 1
            assert "k" in registry and "other" not in registry and len(registry) == 1
            assert registry.statistics() == RegistryStatistics(live=1, created=1, passivated=0, evicted=0)

    async def test_ask_routes_by_key_and_keys_run_concurrently(self) -> None:
        registry, log = make_registry()
        started, release = anyio.Event(), anyio.Event()
        async with registry, anyio.create_task_group() as tg:
            tg.start_soon(registry.ask, "a", Work(1, started=started, release=release))
            await started.wait()
            with anyio.fail_after(5):
                assert await registry.ask("b", Work(2)) == ("b", 2)  # a is blocked, b is not
            release.set()
        assert sorted(log) == [("a", 1), ("b", 2)]

    async def test_factory_must_honour_the_key(self) -> None:
        async with ActorRegistry(lambda key: Worker("wrong", [], FakeClock()), sweep_interval=None) as registry:
            with pytest.raises(ConfigError, match="'wrong'"):
                registry.get("k")
            assert len(registry) == 0

    @pytest.mark.parametrize(
        "kwargs",
        [
            pytest.param({"idle_timeout": -1.0}, id="negative-timeout"),
            pytest.param({"idle_timeout": float("nan")}, id="nan-timeout"),
            pytest.param({"max_actors": 0}, id="zero-cap"),
            pytest.param({"sweep_interval": 0.0}, id="zero-interval"),
            pytest.param({"loop_linger": -0.5}, id="negative-linger"),
            pytest.param({"loop_linger": float("nan")}, id="nan-linger"),
        ],
    )
    def test_invalid_options(self, kwargs: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            ActorRegistry(lambda key: Worker(key, [], FakeClock()), **kwargs)


class TestPassivation:
    async def test_sweep_passivates_only_actors_idle_long_enough(self) -> None:
        clock = FakeClock()
        registry, log = make_registry(clock, idle_timeout=60.0)
        async with registry:
            first_a = registry.get("a")
            await registry.ask("a", Work(1))
            clock.now += 30
            await registry.ask("b", Work(2))
            assert registry.sweep() == 0
            clock.now += 30  # a idle for 60 s, b for 30 s
            assert registry.sweep() == 1
            assert "a" not in registry and "b" in registry
            assert first_a.closed
            assert await registry.ask("a", Work(3)) == ("a", 3)  # a fresh activation
            assert registry.get("a") is not first_a
            assert registry.statistics() == RegistryStatistics(live=2, created=3, passivated=1, evicted=0)
        assert log == [("a", 1), ("b", 2), ("a", 3)]

    async def test_busy_actor_is_never_passivated(self) -> None:
        clock = FakeClock()
        registry, _ = make_registry(clock, idle_timeout=1.0)
        started, release = anyio.Event(), anyio.Event()
        async with registry, anyio.create_task_group() as tg:
            tg.start_soon(registry.ask, "a", Work(1, started=started, release=release))
            await started.wait()
            clock.now += 1000
            assert registry.sweep() == 0
            assert "a" in registry
            release.set()
            await wait_all_tasks_blocked()
            clock.now += 1000
            assert registry.sweep() == 1

    async def test_background_sweeper(self) -> None:
        clock = FakeClock()
        swept = anyio.Event()

        class Observed(ActorRegistry[Worker]):
            def sweep(self, limit: int | None = None) -> int:
                count = super().sweep(limit)
                if count:
                    swept.set()
                return count

        registry = Observed(lambda key: Worker(key, [], clock), idle_timeout=5.0, clock=clock, sweep_interval=0.001)
        async with registry:
            await registry.ask("a", Work(1))
            clock.now += 10
            with anyio.fail_after(5):
                await swept.wait()
            assert "a" not in registry
            assert registry.statistics().passivated == 1


    @pytest.mark.slow
    async def test_a_sweep_touches_the_stale_actors_and_one_more(self) -> None:
        """Thousands of fresh actors: a sweep stops at the first fresh one instead of scanning them all."""
        clock = FakeClock()
        looked: list[str] = []

        class Counted(Worker):
            @property
            def idle(self) -> bool:
                looked.append(self.key)
                return super().idle

        registry = ActorRegistry(lambda key: Counted(key, [], clock), idle_timeout=60.0, clock=clock,
                                 sweep_interval=None)
        async with registry:
            for i in range(10):
                await registry.ask(f"old{i}", Work(i))
            clock.now += 50
            for i in range(3000):
                await registry.ask(f"new{i}", Work(i))
            clock.now += 20  # the old ones idle 70 s, the new ones 20 s
            looked.clear()
            assert registry.sweep() == 10
            assert len(looked) == 11 and len(registry) == 3000
            looked.clear()
            assert registry.sweep() == 0 and len(looked) == 1

    async def test_the_background_sweeper_passivates_a_backlog_in_slices(self) -> None:
        """Many actors going stale at once are passivated a slice at a time, with the event loop between."""
        from threadmind.actors import _registry

        clock = FakeClock()
        registry, _ = make_registry(clock, idle_timeout=5.0, sweep_interval=0.001)
        slices: list[int] = []
        sweep = registry.sweep

        emptied = anyio.Event()

        def _sweep(limit: int | None = None) -> int:
            count = sweep(limit)
            slices.append(count)
            if not len(registry):
                emptied.set()
            return count

        registry.sweep = _sweep  # type: ignore[method-assign]
        async with registry:
            for i in range(3 * _registry._SWEEP_SLICE + 7):
                registry.get(f"k{i}")
            await wait_all_tasks_blocked()
            clock.now += 10
            with anyio.fail_after(5):
                await emptied.wait()
            assert len(registry) == 0
        assert max(slices) == _registry._SWEEP_SLICE and sum(slices) == 3 * _registry._SWEEP_SLICE + 7


class TestEviction:
    async def test_lru_idle_actor_is_evicted(self) -> None:
        registry, _ = make_registry(max_actors=2)
        async with registry:
            a = registry.get("a")
            b = registry.get("b")
            registry.get("a")  # a becomes most recently used
            registry.get("c")
            assert "b" not in registry and "a" in registry and "c" in registry
            assert b.closed and not a.closed
            assert registry.statistics() == RegistryStatistics(live=2, created=3, passivated=0, evicted=1)

    async def test_busy_actors_are_not_evicted_cap_is_exceeded(self) -> None:
        registry, log = make_registry(max_actors=2)
        release = anyio.Event()
        async with registry, anyio.create_task_group() as tg:
            for key in ("a", "b"):
                started = anyio.Event()
                tg.start_soon(registry.ask, key, Work(1, started=started, release=release))
                await started.wait()
            assert await registry.ask("c", Work(2)) == ("c", 2)
            assert len(registry) == 3  # over the cap temporarily: nothing idle to evict
            assert registry.statistics().evicted == 0
            registry.get("d")  # now c is idle and least recently used
            assert "c" not in registry and len(registry) == 3
            release.set()
        assert sorted(log) == [("a", 1), ("b", 1), ("c", 2)]


class TestPassivationRace:
    async def test_many_asks_while_sweeping_lose_nothing(self) -> None:
        clock = FakeClock()
        registry, log = make_registry(clock, idle_timeout=0.0)  # every idle actor is passivated at once
        results: list[tuple[str, int]] = []
        done = anyio.Event()
        sweeps: list[int] = []

        async def sweeper() -> None:
            while not done.is_set():
                sweeps.append(registry.sweep())
                await checkpoint()

        async def caller(i: int) -> None:
            for round_ in range(4):
                results.append(await registry.ask(f"k{i % 50}", Work(i * 10 + round_)))
                await checkpoint()  # gaps, so actors go idle and get passivated between asks

        async with registry:
            async with anyio.create_task_group() as outer:
                outer.start_soon(sweeper)
                async with anyio.create_task_group() as tg:
                    for i in range(100):
                        tg.start_soon(caller, i)
                done.set()
        expected = sorted((f"k{i % 50}", i * 10 + r) for i in range(100) for r in range(4))
        assert sorted(results) == expected
        assert sorted(log) == expected  # each command handled exactly once
        assert sum(sweeps) > 0
        stats = registry.statistics()
        assert stats.passivated == sum(sweeps) and stats.created > 50  # keys were re-activated

    async def test_ask_retries_on_an_actor_closed_between_lookup_and_enqueue(self) -> None:
        registry, log = make_registry()
        async with registry:
            stale = registry.get("k")
            stale.close()  # as if passivated right after the lookup
            assert await registry.ask("k", Work(1)) == ("k", 1)
            assert registry.get("k") is not stale
            assert registry.statistics().created == 2
        assert log == [("k", 1)]


class TestOnDemandLoops:
    """An actor's loop task exists only while it has work: cached idle actors hold no task."""

    @staticmethod
    async def _until_no_loop(registry: ActorRegistry[Worker], keys: list[str]) -> None:
        with anyio.fail_after(5):
            while any(registry.get(key).looping for key in keys):  # noqa: ASYNC110
                await anyio.sleep(0.01)

    async def test_idle_actors_hold_no_task_and_come_back_on_the_next_command(self) -> None:
        import asyncio

        log: list[tuple[str, int]] = []
        clock = FakeClock()
        registry = ActorRegistry(lambda key: Worker(key, log, clock), clock=clock, sweep_interval=None,
                                 loop_linger=0.05)
        keys = [f"k{i}" for i in range(300)]
        async with registry:
            tasks_before = len(asyncio.all_tasks())
            async with anyio.create_task_group() as tg:
                for i, key in enumerate(keys):
                    tg.start_soon(registry.ask, key, Work(i))
            assert any(registry.get(key).looping for key in keys)  # a loop lingers for its next command
            await self._until_no_loop(registry, keys)
            assert len(asyncio.all_tasks()) == tasks_before  # 300 live actors, no task among them
            assert len(registry) == 300 and registry.statistics().created == 300
            assert await registry.ask("k7", Work(1000)) == ("k7", 1000)  # a fresh loop for the same activation
            assert registry.statistics().created == 300
        assert sorted(i for _, i in log) == [*range(300), 1000]

    @pytest.mark.parametrize("linger", [0.0, 0.001])
    async def test_commands_queued_as_the_loop_ends_keep_their_order(self, linger: float) -> None:
        """With no linger the loop ends after every burst; commands sent meanwhile start a new one, in order."""
        log: list[tuple[str, int]] = []
        clock = FakeClock()
        registry = ActorRegistry(lambda key: Worker(key, log, clock), clock=clock, sweep_interval=None,
                                 loop_linger=linger)

        async def sender(key: str, base: int) -> None:
            for i in range(40):
                if i % 3 == 0:
                    await registry.get(key).tell(Work(base + i))
                else:
                    assert await registry.ask(key, Work(base + i)) == (key, base + i)
                if i % 5 == 0:
                    await anyio.sleep(0.002)  # a pause: the loop may end here

        with anyio.fail_after(10):
            async with registry:
                async with anyio.create_task_group() as tg:
                    for n in range(6):
                        tg.start_soon(sender, f"k{n % 3}", n * 100)
                await self._until_no_loop(registry, ["k0", "k1", "k2"])
        for n in range(6):
            key = f"k{n % 3}"
            mine = [i for k, i in log if k == key and n * 100 <= i < n * 100 + 40]
            assert mine == list(range(n * 100, n * 100 + 40))  # every command once, in the order sent

    async def test_aclose_waits_only_for_actors_with_work(self) -> None:
        registry, log = make_registry(sweep_interval=None)
        started, release = anyio.Event(), anyio.Event()

        async def release_during_close() -> None:
            await wait_all_tasks_blocked()  # aclose waits for "busy" alone
            release.set()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await registry.start()
                for i in range(50):
                    await registry.ask(f"idle{i}", Work(i))
                tg.start_soon(registry.ask, "busy", Work(99, started=started, release=release))
                await started.wait()
                tg.start_soon(registry.ask, "busy", Work(100))
                await wait_all_tasks_blocked()
                tg.start_soon(release_during_close)
                await registry.aclose()
        assert log[-2:] == [("busy", 99), ("busy", 100)]
        assert len(registry) == 0

    async def test_a_served_actor_refuses_a_loop_of_its_own(self) -> None:
        worker = Worker("w", [], FakeClock())
        worker.serve(lambda actor: None, 0.1)
        with pytest.raises(ThreadmindError) as info:
            await worker.run()
        assert info.value.code == "THREADMIND_ACTOR_RUNNING"
        with pytest.raises(ThreadmindError):
            worker.serve(lambda actor: None, 0.1)


class TestLifecycle:
    async def test_aclose_drains_accepted_work_and_then_refuses_promptly(self) -> None:
        registry, log = make_registry(sweep_interval=1000.0)
        started, release = anyio.Event(), anyio.Event()
        results: list[tuple[str, int]] = []
        refused: list[ThreadmindError] = []

        async def caller(key: str, work: Work) -> None:
            results.append(await registry.ask(key, work))

        async def during_close() -> None:
            await wait_all_tasks_blocked()  # aclose is now waiting for the actors to drain
            with anyio.fail_after(5):
                try:
                    await registry.ask("a", Work(99))
                except ThreadmindError as exc:
                    refused.append(exc)
            release.set()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await registry.start()  # start/aclose nest inside the scopes around them, like a task group
                tg.start_soon(caller, "a", Work(1, started=started, release=release))
                await started.wait()
                for i in range(2, 12):
                    tg.start_soon(caller, "a" if i % 2 else "b", Work(i))
                await wait_all_tasks_blocked()
                tg.start_soon(during_close)
                await registry.aclose()
        assert [e.code for e in refused] == ["THREADMIND_CLOSED"]
        assert sorted(i for _, i in results) == list(range(1, 12))  # everything accepted was handled
        assert sorted(i for _, i in log) == list(range(1, 12))
        assert len(registry) == 0
        with pytest.raises(ThreadmindError) as info:
            registry.get("a")
        assert info.value.code == "THREADMIND_CLOSED"
        await registry.aclose()  # idempotent

    async def test_cancelled_owner_scope_stops_actors_without_hanging(self) -> None:
        registry, log = make_registry()
        started, release = anyio.Event(), anyio.Event()
        outcomes: list[object] = []
        outer = anyio.CancelScope()

        async def caller(work: Work) -> None:
            try:
                outcomes.append(await registry.ask("a", work))
            except MailboxClosed as exc:
                outcomes.append(exc)

        async def cancel_then_release() -> None:
            await wait_all_tasks_blocked()
            outer.cancel()  # cancels the closing task and, with it, the registry's actor loops
            await wait_all_tasks_blocked()
            release.set()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as callers:
                with outer:
                    await registry.start()
                    callers.start_soon(caller, Work(1, started=started, release=release))
                    await started.wait()
                    callers.start_soon(caller, Work(2))
                    await wait_all_tasks_blocked()
                    callers.start_soon(cancel_then_release)
                    await registry.aclose()
        assert outer.cancelled_caught
        assert outcomes[0] == ("a", 1)  # the running handler finished (shielded)
        assert isinstance(outcomes[1], MailboxClosed)  # the queued one was refused, not left hanging
        assert log == [("a", 1)]

    async def test_not_started_and_double_start(self) -> None:
        registry, _ = make_registry()
        with pytest.raises(ThreadmindError) as info:
            await registry.ask("a", Work(1))
        assert info.value.code == "THREADMIND_NOT_STARTED"
        async with registry:
            with pytest.raises(ThreadmindError, match="only once"):
                await registry.start()

    async def test_error_in_body_cancels_actors_without_hanging(self) -> None:
        registry, _ = make_registry()
        with anyio.fail_after(5), pytest.raises(ExceptionGroup) as info:
            async with registry:
                await registry.ask("a", Work(1))
                raise RuntimeError("body failed")
        assert info.group_contains(RuntimeError, match="body failed")


class TestTracing:
    async def test_registry_ask_span_is_child_of_caller(self, span_exporter: InMemorySpanExporter) -> None:
        registry, _ = make_registry()
        async with registry:
            with trace.get_tracer("tests").start_as_current_span("caller") as parent:
                await registry.ask("a", Work(1))
        (span,) = [s for s in span_exporter.get_finished_spans() if s.name == "threadmind.actor.Work"]
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert span.attributes is not None and span.attributes["threadmind.actor.key"] == "a"


@pytest.mark.slow
async def test_idle_threads_cost_under_2_kib_each_once_passivated(tmp_path: Any) -> None:
    """Threads touched once and then idle: after passivation nothing of their actors stays in memory."""
    import gc
    import tracemalloc

    from threadmind import Memory, Message
    from threadmind.stores import SQLiteStore

    memory = Memory(storage=SQLiteStore(tmp_path / "m.db"), idle_timeout=0.1, options={"lastMessages": 10})
    async with memory:
        for w in range(50):  # first-use caches of the process itself
            await memory.create_thread(thread_id=f"w{w}", resource_id="r")
            await memory.save_messages([Message.user("warm", thread_id=f"w{w}", resource_id="r")])
            await memory.recall(f"w{w}", resource_id="r")
        n = 400
        ids = [(f"t{t}", f"r{t % 20}", f"hello {t}") for t in range(n)]
        gc.collect()
        tracemalloc.start(1)
        try:
            before = tracemalloc.take_snapshot()
            for thread, owner, text in ids:
                await memory.create_thread(thread_id=thread, resource_id=owner)
                await memory.save_messages([Message.user(text, thread_id=thread, resource_id=owner)])
                await memory.recall(thread, resource_id=owner)
            with anyio.fail_after(10):
                system = actor_system(memory)
                while system.threads.statistics().live or system.resources.statistics().live:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            gc.collect()
            # Spans an OpenTelemetry SDK installed by another test keeps are not the threads' memory.
            spans = [tracemalloc.Filter(False, "*opentelemetry*")]
            diff = tracemalloc.take_snapshot().filter_traces(spans).compare_to(before.filter_traces(spans), "lineno")
            retained = sum(stat.size_diff for stat in diff)
            growth = diff[:5]
        finally:
            tracemalloc.stop()
        assert actor_system(memory).threads.statistics().passivated >= n
        assert retained / n < 2048, f"{retained / n:.0f} bytes per idle thread; grew most: {growth}"


async def test_a_thread_actor_makes_its_turn_lock_on_the_first_turn(tmp_path: Any) -> None:
    """Saves and recalls leave an idle thread actor without a turn lock; the first turn makes the one every later
    turn of that activation shares."""
    from threadmind import Memory, Message
    from threadmind.errors import ThreadBusy
    from threadmind.stores import SQLiteStore

    memory = Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 10})
    async with memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([Message.user("hello", thread_id="t", resource_id="r")])
        await memory.recall("t", resource_id="r")
        actor = actor_system(memory).threads.get("t")
        assert actor._turn_lock is None
        async with actor_system(memory).turn("t", "enqueue"):
            assert actor._turn_lock is not None and actor.turn_lock.value == 0
            with pytest.raises(ThreadBusy):
                async with actor_system(memory).turn("t", "reject"):
                    pass  # pragma: no cover
        assert actor.turn_lock.value == 1 and actor.idle



_IDLE_PROBE = """
import asyncio, gc, json, sys
import anyio
from threadmind import Memory, Message
from threadmind.stores import SQLiteStore
from threadmind.testing import actor_system

async def main(path, n):
    memory = Memory(storage=SQLiteStore(path), options={"lastMessages": 10})
    async with memory:
        threads = actor_system(memory).threads

        async def touch(t):
            thread, owner = f"t{t}", f"r{t % 20}"
            await memory.create_thread(thread_id=thread, resource_id=owner)
            await memory.save_messages([Message.user(f"hello {t}", thread_id=thread, resource_id=owner)])
            await memory.recall(thread, resource_id=owner)

        async def no_loops_left(keys):
            with anyio.fail_after(10):
                while any(threads.get(f"t{t}").looping for t in keys):
                    await anyio.sleep(0.02)

        for t in range(-50, 0):  # first-use caches of the process itself
            await touch(t)
        await no_loops_left(range(-50, 0))
        gc.collect()
        tracked, tasks = len(gc.get_objects()), len(asyncio.all_tasks())
        limiter = anyio.Semaphore(16)

        async def limited(t):
            async with limiter:
                await touch(t)

        async with anyio.create_task_group() as tg:
            for t in range(n):
                tg.start_soon(limited, t)
        await no_loops_left(range(n))
        gc.collect()
        print(json.dumps({"live": threads.statistics().live, "tasks_before": tasks,
                          "tasks_after": len(asyncio.all_tasks()),
                          "tracked_per_thread": (len(gc.get_objects()) - tracked) / n}))

anyio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def test_live_idle_thread_actors_hold_no_task_and_few_collector_objects(tmp_path: Any) -> None:
    """Cached thread actors of threads touched once: no task each, and few objects for every full collection
    to walk (a loop task per actor was ~30 of them; the collector's pauses grew with the live actors). In a
    process of its own: an OpenTelemetry SDK another test installed would keep every span alive here."""
    import json
    import subprocess
    import sys

    n = 400
    done = subprocess.run([sys.executable, "-c", _IDLE_PROBE, str(tmp_path / "m.db"), str(n)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout)
    assert probe["live"] == n + 50
    assert probe["tasks_after"] == probe["tasks_before"]
    assert probe["tracked_per_thread"] < 20, f"{probe['tracked_per_thread']:.1f} collector-tracked objects per thread"
