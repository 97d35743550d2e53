"""An idle actor runs a store-bound command in its caller's task: same order, same shielding, no round trip."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind import Memory, Message
from threadmind.actors._actor import Actor
from threadmind.actors._registry import ActorRegistry
from threadmind.actors._thread_actor import Exclusive, SaveMessages, ThreadActor
from threadmind.stores import SQLiteStore
from threadmind.testing import actor_system


class Boom(Exception):
    """A handler failure."""


@dataclass(frozen=True)
class Step:
    """A command: a name, optional gates, optionally failing; ``inline`` says whether it may run inline."""

    name: str
    inline: bool = True
    started: anyio.Event | None = None
    release: anyio.Event | None = None
    fail: bool = False


class Log(Actor[Step]):
    """Records starts, ends and the task each handler ran in."""

    def __init__(self, key: str, events: list[str], tasks: dict[str, asyncio.Task[Any] | None]) -> None:
        super().__init__(key)
        self.events = events
        self.tasks = tasks

    def runs_inline(self, command: Step) -> bool:
        return command.inline

    async def handle(self, command: Step) -> Any:
        self.tasks[command.name] = asyncio.current_task()
        self.events.append(f"start {command.name}")
        if command.started is not None:
            command.started.set()
        if command.release is not None:
            await command.release.wait()
        await checkpoint()
        if command.fail:
            raise Boom(command.name)
        self.events.append(f"end {command.name}")
        return command.name


def _registry(idle_timeout: float = 300.0) -> tuple[ActorRegistry[Log], list[str], dict[str, asyncio.Task[Any] | None]]:
    events: list[str] = []
    tasks: dict[str, asyncio.Task[Any] | None] = {}
    registry = ActorRegistry(lambda key: Log(key, events, tasks), idle_timeout=idle_timeout, sweep_interval=None)
    return registry, events, tasks


async def _start_blocked(registry: ActorRegistry[Log], tg: anyio.abc.TaskGroup) -> anyio.Event:
    """Start command "a" in a task of ``tg`` (inline: the actor is idle) and wait until it blocks."""
    started, release = anyio.Event(), anyio.Event()
    tg.start_soon(registry.ask, "k", Step("a", started=started, release=release))
    await started.wait()
    return release


async def test_an_idle_actor_runs_the_command_in_the_callers_task() -> None:
    registry, events, tasks = _registry()
    async with registry:
        assert await registry.ask("k", Step("warm")) == "warm"  # creates the actor
        assert await registry.ask("k", Step("a")) == "a"
        assert await registry.ask("k", Step("mailbox", inline=False)) == "mailbox"
        actor = registry.get("k")
        stats = actor.statistics()
    assert tasks["a"] is asyncio.current_task()
    assert tasks["mailbox"] is not asyncio.current_task()  # runs_inline said no: the actor's own task
    assert events == ["start warm", "end warm", "start a", "end a", "start mailbox", "end mailbox"]
    assert stats.processed == 3 and stats.failed == 0 and not stats.busy


async def test_a_new_actors_first_command_runs_in_the_callers_task_too() -> None:
    # A first read of a thread not cached (or a save to one evicted) would otherwise start a loop task for it.
    registry, events, tasks = _registry()
    async with registry:
        assert await registry.ask("new", Step("first")) == "first"
        assert await registry.ask("other", Step("mailbox", inline=False)) == "mailbox"
        stats = registry.get("new").statistics()
    assert tasks["first"] is asyncio.current_task()
    assert tasks["mailbox"] is not asyncio.current_task()
    assert events == ["start first", "end first", "start mailbox", "end mailbox"]
    assert stats.processed == 1 and not stats.busy


async def test_a_command_for_a_new_actor_busy_with_its_first_queues_behind_it() -> None:
    registry, events, tasks = _registry()
    started, release = anyio.Event(), anyio.Event()
    async with registry:
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.ask, "new", Step("first", started=started, release=release))
            await started.wait()
            assert not registry.get("new").idle
            tg.start_soon(registry.ask, "new", Step("second"))
            await wait_all_tasks_blocked()
            assert events == ["start first"]
            release.set()
    assert events == ["start first", "end first", "start second", "end second"]
    assert tasks["second"] is not tasks["first"]


async def test_commands_arriving_meanwhile_run_after_it_in_arrival_order() -> None:
    registry, events, _ = _registry()
    started, release = anyio.Event(), anyio.Event()
    async with registry:
        await registry.ask("k", Step("warm"))

        async def first_then_third() -> None:
            await registry.ask("k", Step("first", started=started, release=release))
            # The loop has taken "second" while "first" ran; the actor is handed over still busy, so this
            # ask queues behind it instead of running inline ahead of it.
            await registry.ask("k", Step("third"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_then_third)
            await started.wait()
            assert not registry.get("k").idle
            tg.start_soon(registry.ask, "k", Step("second"))
            await wait_all_tasks_blocked()
            release.set()
    assert events == ["start warm", "end warm", "start first", "end first", "start second", "end second",
                      "start third", "end third"]


async def test_a_cancelled_caller_leaves_once_its_command_has_finished() -> None:
    registry, events, _ = _registry()
    started, release = anyio.Event(), anyio.Event()
    async with registry:
        await registry.ask("k", Step("warm"))
        scope = anyio.CancelScope()
        still_running: list[bool] = []

        async def cancel_then_release() -> None:
            await started.wait()
            scope.cancel()
            await wait_all_tasks_blocked()
            still_running.append(events[-1] == "start a")  # the caller stayed: its command still runs
            release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_then_release)
            with scope:
                await registry.ask("k", Step("a", started=started, release=release))
                pytest.fail("the cancelled caller must not get the result")  # pragma: no cover
        assert scope.cancelled_caught and still_running == [True]
        assert events[-1] == "end a"
        assert registry.get("k").idle
        assert await registry.ask("k", Step("b")) == "b"


async def test_a_skipped_command_after_the_hand_over_leaves_the_actor_idle() -> None:
    registry, events, tasks = _registry()
    async with registry:
        await registry.ask("k", Step("warm"))
        async with anyio.create_task_group() as tg:
            release = await _start_blocked(registry, tg)
            with anyio.CancelScope() as waiting:
                tg.start_soon(lambda: _cancel_soon(waiting))
                await registry.ask("k", Step("skipped"))
            assert waiting.cancelled_caught
            release.set()
        actor = registry.get("k")
        await wait_all_tasks_blocked()
        assert actor.idle
        assert await registry.ask("k", Step("b")) == "b"
    assert "start skipped" not in events
    assert tasks["b"] is asyncio.current_task()  # idle again, so inline again


async def _cancel_soon(scope: anyio.CancelScope) -> None:
    await wait_all_tasks_blocked()
    scope.cancel()


async def test_a_failure_reaches_the_caller_and_the_actor_carries_on() -> None:
    registry, _, _ = _registry()
    async with registry:
        await registry.ask("k", Step("warm"))
        with pytest.raises(Boom, match="bad"):
            await registry.ask("k", Step("bad", fail=True))
        assert await registry.ask("k", Step("good")) == "good"
        stats = registry.get("k").statistics()
    assert stats.failed == 1 and stats.processed == 3 and not stats.busy


async def test_an_actor_running_a_command_inline_is_not_passivated() -> None:
    registry, _, _ = _registry(idle_timeout=0.0)
    async with registry:
        await registry.ask("k", Step("warm"))
        async with anyio.create_task_group() as tg:
            release = await _start_blocked(registry, tg)
            assert registry.sweep() == 0 and "k" in registry
            release.set()
        assert registry.sweep() == 1


async def test_traced_commands_keep_the_mailbox_hop(span_exporter: InMemorySpanExporter) -> None:
    registry, _, tasks = _registry()
    async with registry:
        await registry.ask("k", Step("warm"))
        await registry.ask("k", Step("a"))
    assert tasks["a"] is not asyncio.current_task()
    assert [s.name for s in span_exporter.get_finished_spans()].count("threadmind.actor.Step") == 2


async def test_thread_saves_run_inline_and_exclusive_work_through_the_mailbox(tmp_path: Path) -> None:
    seen: dict[str, asyncio.Task[Any] | None] = {}
    original = ThreadActor.handle

    async def spy(self: ThreadActor, command: Any) -> Any:
        seen[type(command).__name__] = asyncio.current_task()
        return await original(self, command)

    async with Memory(storage=SQLiteStore(tmp_path / "m.db")) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        threads = actor_system(memory).threads
        assert threads is not None
        actor = threads.get("t")
        actor.handle = spy.__get__(actor)  # type: ignore[method-assign]
        message = Message.user("hello", thread_id="t", resource_id="r")
        await threads.ask("t", SaveMessages([message]))

        async def work() -> int:
            return 7

        assert await threads.ask("t", Exclusive(work)) == 7
        assert [m.id for m in (await memory.recall("t")).messages] == [message.id]
    assert seen["SaveMessages"] is asyncio.current_task()
    assert seen["Exclusive"] is not asyncio.current_task()
