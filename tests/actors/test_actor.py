"""Actor: ordering, isolation, cancellation, closing, tracing across the mailbox hop."""

from __future__ import annotations

import gc
import inspect
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from threadmind.actors._actor import Actor, ActorStatistics
from threadmind.actors._mailbox import MailboxClosed, MailboxStatistics
from threadmind.errors import ThreadmindError


class Boom(Exception):
    """A handler failure."""


@dataclass(frozen=True)
class Op:
    """A test command: records its number, optionally waits on gates, optionally fails."""

    n: int
    fail: bool = False
    started: anyio.Event | None = None
    release: anyio.Event | None = None
    checkpoints: int = 0

    def span_attributes(self) -> dict[str, str | int]:
        return {"test.op": self.n}


@dataclass(frozen=True)
class Plain:
    """A command without span attributes."""

    value: str


class Recorder(Actor[Op | Plain]):
    """Records the order of starts and ends, so interleaving would show."""

    def __init__(self, key: str, **kwargs: Any) -> None:
        super().__init__(key, **kwargs)
        self.events: list[str] = []
        self.span_ids: list[tuple[int, int | None]] = []

    async def handle(self, command: Op | Plain) -> Any:
        current = trace.get_current_span().get_span_context()
        self.span_ids.append((current.trace_id, current.span_id))
        if isinstance(command, Plain):
            return command.value
        self.events.append(f"start {command.n}")
        if command.started is not None:
            command.started.set()
        if command.release is not None:
            await command.release.wait()
        for _ in range(command.checkpoints):
            await checkpoint()
        if command.fail:
            raise Boom(f"op {command.n} failed")
        self.events.append(f"end {command.n}")
        return command.n * 10


async def _cancel_when_blocked(scope: anyio.CancelScope) -> None:
    await wait_all_tasks_blocked()
    scope.cancel()


@asynccontextmanager
async def running(*actors: Actor[Any]) -> AsyncIterator[anyio.abc.TaskGroup]:
    """Run the actors' loops; close them (draining) on exit."""
    async with anyio.create_task_group() as tg:
        for actor in actors:
            tg.start_soon(actor.run)
        try:
            yield tg
        finally:
            for actor in actors:
                actor.close()


class TestOrdering:
    async def test_500_concurrent_asks_keep_arrival_order_and_never_interleave(self) -> None:
        actor = Recorder("k")
        sent: list[int] = []
        results: dict[int, int] = {}

        async def caller(n: int) -> None:
            sent.append(n)  # ask enqueues before its first yield, so this is the arrival order
            results[n] = await actor.ask(Op(n, checkpoints=1))

        async with running(actor):
            async with anyio.create_task_group() as tg:
                for n in range(500):
                    tg.start_soon(caller, n)
        assert len(sent) == 500
        expected: list[str] = []
        for n in sent:
            expected += [f"start {n}", f"end {n}"]
        assert actor.events == expected
        assert results == {n: n * 10 for n in range(500)}
        stats = actor.statistics()
        assert stats.processed == 500 and stats.failed == 0

    async def test_different_actors_run_concurrently(self) -> None:
        a, b = Recorder("a"), Recorder("b")
        started, release = anyio.Event(), anyio.Event()
        a_result: list[int] = []

        async def ask_a() -> None:
            a_result.append(await a.ask(Op(1, started=started, release=release)))

        async with running(a, b), anyio.create_task_group() as tg:
            tg.start_soon(ask_a)
            await started.wait()
            assert a.statistics().busy
            with anyio.fail_after(5):
                assert await b.ask(Op(2)) == 20  # A is blocked; B still answers
            assert a_result == []
            release.set()
        assert a_result == [10]


class TestFailures:
    async def test_exception_fails_only_its_caller(self) -> None:
        actor = Recorder("k")
        async with running(actor):
            assert await actor.ask(Op(1)) == 10
            with pytest.raises(Boom, match="op 2 failed"):
                await actor.ask(Op(2, fail=True))
            assert await actor.ask(Op(3)) == 30
        stats = actor.statistics()
        assert (stats.processed, stats.failed) == (3, 1)

    async def test_tell_failure_is_logged_and_actor_survives(self, caplog: pytest.LogCaptureFixture) -> None:
        actor = Recorder("k")
        with caplog.at_level(logging.ERROR, logger="threadmind.actors"):
            async with running(actor):
                await actor.tell(Op(1, fail=True))
                await actor.tell(Op(2))
                assert await actor.ask(Op(3)) == 30
        assert actor.events == ["start 1", "start 2", "end 2", "start 3", "end 3"]
        assert any("Op failed" in r.getMessage() and r.exc_info for r in caplog.records)


class TestCancellation:
    async def test_caller_cancelled_before_start_is_skipped(self) -> None:
        actor = Recorder("k")
        started, release = anyio.Event(), anyio.Event()
        async with running(actor), anyio.create_task_group() as tg:
            tg.start_soon(actor.ask, Op(1, started=started, release=release))
            await started.wait()
            with anyio.CancelScope() as scope:
                tg.start_soon(_cancel_when_blocked, scope)
                await actor.ask(Op(2))
            assert scope.cancelled_caught
            release.set()
            assert await actor.ask(Op(3)) == 30
        assert actor.events == ["start 1", "end 1", "start 3", "end 3"]
        assert actor.statistics().processed == 2

    async def test_caller_cancelled_during_handling_lets_handler_finish(self) -> None:
        actor = Recorder("k")
        started, release = anyio.Event(), anyio.Event()
        async with running(actor):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._cancel_after, started, scope)
                    await actor.ask(Op(1, started=started, release=release, checkpoints=3))
            assert scope.cancelled_caught
            assert actor.events == ["start 1"]  # the caller left; the handler is still running
            release.set()
            assert await actor.ask(Op(2)) == 20
        assert actor.events == ["start 1", "end 1", "start 2", "end 2"]

    async def test_cancelling_the_actor_scope_finishes_the_handler_and_fails_the_queue(self) -> None:
        actor = Recorder("k")
        started, release = anyio.Event(), anyio.Event()
        outcomes: dict[int, object] = {}

        async def caller(n: int, op: Op) -> None:
            try:
                outcomes[n] = await actor.ask(op)
            except MailboxClosed as exc:
                outcomes[n] = exc

        async with anyio.create_task_group() as callers:
            with anyio.CancelScope() as actor_scope:
                async with anyio.create_task_group() as loop_group:
                    loop_group.start_soon(actor.run)
                    callers.start_soon(caller, 1, Op(1, started=started, release=release))
                    await started.wait()
                    callers.start_soon(caller, 2, Op(2))
                    await wait_all_tasks_blocked()
                    actor_scope.cancel()
                    release.set()
        assert outcomes[1] == 10  # shielded: ran to completion despite the cancelled scope
        assert isinstance(outcomes[2], MailboxClosed)  # queued: refused, never hangs
        assert actor.events == ["start 1", "end 1"]
        with pytest.raises(MailboxClosed):
            await actor.ask(Op(3))

    @staticmethod
    async def _cancel_after(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()


class TestLifecycle:
    async def test_close_drains_accepted_commands_then_refuses(self) -> None:
        actor = Recorder("k", mailbox_capacity=16)
        for n in range(5):
            await actor.tell(Op(n))
        actor.close()
        with anyio.fail_after(5):
            with pytest.raises(MailboxClosed) as info:
                await actor.ask(Op(99))
            assert "'k'" in info.value.message
            await actor.run()  # returns once the five accepted commands are handled
        assert [e for e in actor.events if e.startswith("end")] == [f"end {n}" for n in range(5)]
        assert actor.closed

    async def test_full_mailbox_close_refuses_waiting_sender_and_cancel_skips(self) -> None:
        actor = Recorder("k", mailbox_capacity=1)
        started, release = anyio.Event(), anyio.Event()
        refused: list[MailboxClosed] = []

        async def refused_sender() -> None:
            try:
                await actor.ask(Op(4))
            except MailboxClosed as exc:
                refused.append(exc)

        async with running(actor), anyio.create_task_group() as tg:
            tg.start_soon(actor.ask, Op(1, started=started, release=release))
            await started.wait()
            tg.start_soon(actor.ask, Op(2))  # fills the mailbox
            await wait_all_tasks_blocked()
            with anyio.CancelScope() as scope:  # a sender waiting for room, then cancelled
                tg.start_soon(_cancel_when_blocked, scope)
                await actor.ask(Op(3))
            assert scope.cancelled_caught
            tg.start_soon(refused_sender)
            await wait_all_tasks_blocked()
            assert actor.statistics().mailbox.waiting_senders == 1
            actor.close()
            await wait_all_tasks_blocked()
            assert len(refused) == 1  # promptly, while Op 1 is still running
            release.set()
        assert actor.events == ["start 1", "end 1", "start 2", "end 2"]

    async def test_handler_raising_stop_iteration_reaches_the_caller(self) -> None:
        class Stopper(Actor[int]):
            async def handle(self, command: int) -> Any:
                raise StopIteration

        actor = Stopper("k")
        async with running(actor):
            with pytest.raises(RuntimeError, match="StopIteration"):
                await actor.ask(1)
            with pytest.raises(RuntimeError):
                await actor.ask(2)  # still alive

    async def test_idle_and_statistics(self) -> None:
        now = [100.0]
        actor = Recorder("k", mailbox_capacity=4, clock=lambda: now[0])
        assert actor.idle
        started, release = anyio.Event(), anyio.Event()
        async with running(actor), anyio.create_task_group() as tg:
            tg.start_soon(actor.ask, Op(1, started=started, release=release))
            await started.wait()
            await actor.tell(Op(2))
            assert not actor.idle
            assert actor.statistics() == ActorStatistics(
                key="k",
                mailbox=MailboxStatistics(depth=1, capacity=4, waiting_senders=0),
                processed=0,
                failed=0,
                busy=True,
                last_active=100.0,
            )
            now[0] = 150.0
            release.set()
            await actor.ask(Op(3))
            assert actor.idle
            assert actor.last_active == 150.0
            assert actor.statistics().processed == 3

    async def test_an_idle_actor_holds_neither_its_last_command_nor_an_exception(self) -> None:
        """While it waits for work an actor keeps nothing of the last command or of the empty mailbox's WouldBlock:
        an idle actor costs only itself (many of them stay live until passivation)."""
        actor = Recorder("k")
        command = Op(1)
        gone = weakref.ref(command)
        async with running(actor):
            assert await actor.ask(command) == 10
            del command
            await wait_all_tasks_blocked()  # the loop is parked in the mailbox again
            gc.collect()
            assert gone() is None
            (loop,) = [r for r in gc.get_referrers(actor)
                       if inspect.iscoroutine(r) and r.cr_code is Actor.run.__code__]
            held = [type(o).__name__ for o in gc.get_referents(loop) if isinstance(o, BaseException)]
            assert held == []

    async def test_run_twice_is_refused(self) -> None:
        actor = Recorder("k")
        async with running(actor):
            await wait_all_tasks_blocked()
            with pytest.raises(ThreadmindError, match="already running"):
                await actor.run()

    def test_handle_is_abstract(self) -> None:
        with pytest.raises(TypeError):
            Actor("k")  # type: ignore[abstract]


class TestTracing:
    async def test_actor_span_is_child_of_caller_span(self, span_exporter: InMemorySpanExporter) -> None:
        actor = Recorder("k")
        tracer = trace.get_tracer("tests")
        async with running(actor):
            with tracer.start_as_current_span("caller") as parent:
                assert await actor.ask(Op(7)) == 70
            parent_ctx = parent.get_span_context()
        spans = {s.name: s for s in span_exporter.get_finished_spans()}
        child = spans["threadmind.actor.Op"]
        assert child.kind is SpanKind.INTERNAL
        assert child.parent is not None
        assert child.context is not None
        assert child.context.trace_id == parent_ctx.trace_id
        assert child.parent.span_id == parent_ctx.span_id
        assert child.attributes is not None
        assert dict(child.attributes) == {"threadmind.actor.key": "k", "threadmind.mailbox.depth": 0, "test.op": 7}
        # the actor span is current inside the handler, so the handler's own spans nest under it
        assert actor.span_ids == [(child.context.trace_id, child.context.span_id)]

    async def test_depth_failure_status_and_tell(self, span_exporter: InMemorySpanExporter) -> None:
        actor = Recorder("k")
        tracer = trace.get_tracer("tests")
        started, release = anyio.Event(), anyio.Event()
        async with running(actor), anyio.create_task_group() as tg:
            with tracer.start_as_current_span("caller") as parent:
                tg.start_soon(actor.ask, Op(1, started=started, release=release))
                await started.wait()
                await actor.tell(Plain("queued"))
                await actor.tell(Op(2, fail=True))
            release.set()
        spans = [s for s in span_exporter.get_finished_spans() if s.name != "caller"]
        assert [s.name for s in spans] == ["threadmind.actor.Op", "threadmind.actor.Plain", "threadmind.actor.Op"]
        first, plain, failed = spans
        assert [s.attributes and s.attributes["threadmind.mailbox.depth"] for s in spans] == [0, 0, 1]
        assert first.status.status_code is StatusCode.UNSET
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.status.description is not None and "Boom" in failed.status.description
        assert [e.name for e in failed.events] == ["exception"]
        for span in spans:
            assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id

    async def test_no_caller_span_means_a_root_actor_span(self, span_exporter: InMemorySpanExporter) -> None:
        actor = Recorder("k")
        async with running(actor):
            await actor.ask(Plain("x"))
        (span,) = span_exporter.get_finished_spans()
        assert span.name == "threadmind.actor.Plain" and span.parent is None


class Echo(Actor[int]):
    async def handle(self, command: int) -> int:
        return command


async def test_back_to_back_asks_each_get_their_own_answer() -> None:
    """One caller asking again and again: every ask answers its own command, and every one is counted.
    (What a round trip costs is measured by ``python -m bench.bench_actor``.)"""
    actor = Echo("k")
    async with running(actor):
        answers = [await actor.ask(i) for i in range(1501)]
    assert answers == list(range(1501))
    assert actor.statistics().processed == 1501
