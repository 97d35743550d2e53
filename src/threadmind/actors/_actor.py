"""The actor base class: one mailbox, one loop, commands handled one at a time in arrival order.

A caller's ``ask`` puts a small envelope (command, reply future, OTel context, depth) in the mailbox and
awaits the reply. The loop runs each handler shielded from cancellation, so an operation that started
always finishes; a caller cancelled before its command started has it skipped. Each handled command
gets a span that is a child of the caller's span, across the mailbox hop.

Two shortcuts skip the round trip while the actor is idle and no OpenTelemetry SDK is installed (the
registry takes them): ``answer_now`` for cached reads, and ``run_now``, which runs a command the actor
marks ``runs_inline`` in the caller's task with the actor busy, so the order is the mailbox's.

An actor's loop runs either for the actor's whole life (:meth:`Actor.run`), or on demand (:meth:`Actor.serve`,
what a registry uses): a task is started when a command is queued and ends once the mailbox has stayed empty
for ``linger`` seconds, so an idle actor holds no task, coroutine or timer, only its own state. Thousands of
cached but idle actors then cost the garbage collector and ``aclose()`` next to nothing.
"""

from __future__ import annotations

import abc
import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import msgspec
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._lowlevel import Reply, new_reply
from ..errors import ThreadmindError
from ..tracing import tracing_enabled
from ._mailbox import Mailbox, MailboxClosed, MailboxStatistics

__all__ = ("NOT_NOW", "Actor", "ActorStatistics", "Refused")

C = TypeVar("C")

_LOG = logging.getLogger("threadmind.actors")

#: What :meth:`Actor.answer_now` returns when the command must go through the mailbox.
NOT_NOW: Any = object()

# After this many commands taken without waiting, the loop yields once so a busy actor whose handlers
# never await cannot starve the event loop (and so cancellation of the actor's own scope gets through).
_YIELD_EVERY = 32


class ActorStatistics(msgspec.Struct, frozen=True):
    """A snapshot of an actor.

    ``processed`` counts commands that ran to completion, successful or not; ``failed`` those whose
    handler raised. Commands skipped because their caller was cancelled count in neither.
    """

    key: str
    mailbox: MailboxStatistics
    processed: int
    failed: int
    busy: bool
    last_active: float


class _Envelope:
    """One mailbox entry: the command, where the reply goes (None for ``tell``), and the caller's context."""

    __slots__ = ("command", "context", "depth", "reply")

    def __init__(
        self, command: Any, reply: Reply[Any] | None, context: otel_context.Context, depth: int
    ) -> None:
        self.command = command
        self.reply = reply
        self.context = context
        self.depth = depth


class Refused(Exception):
    """Raised by ``Actor._ask(..., retryable=True)`` when the mailbox refused the command (never escapes)."""


def _abandon(reply: Reply[Any]) -> None:
    # The caller is leaving (cancelled or failed): a pending reply is cancelled so the actor skips the
    # command if it has not started, and a finished one is marked retrieved so asyncio does not log it.
    if not reply.done():
        reply.cancel()
    elif not reply.cancelled():
        reply.exception()


class Actor(abc.ABC, Generic[C]):
    """Base class for actors. Subclasses implement ``async def handle(self, command: C) -> Any``.

    Run the loop with :meth:`run` in a task group (an :class:`ActorRegistry` does this); talk to the actor
    with :meth:`ask` (awaits the reply) or :meth:`tell` (fire and forget).
    """

    key: str
    #: Span attributes that carry the actor's key under the names operators search by (a thread actor's
    #: spans have ``threadmind.thread.id`` and ``gen_ai.conversation.id``).
    key_attributes: tuple[str, ...] = ()

    def __init__(
        self, key: str, *, mailbox_capacity: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.key = key
        self._mailbox: Mailbox[_Envelope] = Mailbox(mailbox_capacity)
        self._clock = clock
        self._processed = 0
        self._failed = 0
        self._busy = False
        self._running = False
        # A command running in its caller's task (``run_now``), and the loop's future if it waits for it.
        self._inline = False
        self._inline_waiter: Reply[None] | None = None
        self._last_active = clock()
        # On demand (``serve``): starts a loop task for this actor; None while the loop is run by ``run``.
        self._spawn: Callable[[Actor[Any]], None] | None = None
        self._linger = 0.0
        # (provider, tracer): looked up at call time, re-fetched when the global provider changes.
        self._tracer_cache: tuple[object, trace.Tracer] | None = None

    @abc.abstractmethod
    async def handle(self, command: C) -> Any:
        """Handle one command; the return value (or exception) goes to the ``ask`` caller."""

    # -- callers -----------------------------------------------------------------------------------

    async def ask(self, command: C) -> Any:
        """Enqueue ``command`` and await the handler's result; the handler's exception is re-raised here.

        If the caller is cancelled before the command starts, the actor skips it; once started it runs to
        completion and the result is dropped.

        :raises MailboxClosed: the actor is closed.
        """
        return await self._ask(command, False)

    async def tell(self, command: C) -> None:
        """Enqueue ``command`` without waiting for it; a failure is logged and never stops the actor.

        :raises MailboxClosed: the actor is closed.
        """
        mailbox = self._mailbox
        envelope = _Envelope(command, None, otel_context.get_current(), len(mailbox))
        try:
            await mailbox.put(envelope)
        except MailboxClosed:
            raise MailboxClosed(f"actor {self.key!r} is closed and accepts no more commands") from None
        self._ensure_loop()
        self._last_active = self._clock()

    async def _ask(self, command: C, retryable: bool) -> Any:
        # ``retryable``: the registry wants to know when the command was refused (never started), so it
        # can retry on a fresh activation; it gets ``Refused`` instead of ``MailboxClosed`` then.
        mailbox = self._mailbox
        reply: Reply[Any] = new_reply()
        envelope = _Envelope(command, reply, otel_context.get_current(), len(mailbox))
        try:
            try:
                mailbox.put_nowait(envelope)  # no yield between lookup and enqueue: no passivation race
            except anyio.WouldBlock:
                self._ensure_loop()  # full: a loop is running (or claimed) already; this is a no-op then
                await mailbox.put(envelope)
            self._ensure_loop()
        except MailboxClosed:
            reply.cancel()
            if retryable:
                raise Refused from None
            await checkpoint()  # even a refusal is a checkpoint (the registry retries without one)
            raise MailboxClosed(f"actor {self.key!r} is closed and accepts no more commands") from None
        except BaseException:
            _abandon(reply)
            raise
        self._last_active = self._clock()
        try:
            return await reply
        except BaseException:
            _abandon(reply)
            raise

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Accept no further commands; :meth:`run` returns once what was accepted is handled."""
        self._mailbox.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the loop ended)."""
        return self._mailbox.closed

    @property
    def idle(self) -> bool:
        """True when the mailbox is empty and no command is being handled."""
        # Senders only wait for room while items are queued, so an empty mailbox has no waiting senders.
        return not self._busy and not len(self._mailbox)

    @property
    def last_active(self) -> float:
        """When (per the clock) a command was last accepted or finished."""
        return self._last_active

    def answer_now(self, command: C) -> Any:
        """The answer to a read that needs no I/O and no waiting, or :data:`NOT_NOW` (the default).

        Asked only while nothing is queued or running, so it is exactly what :meth:`handle` would return
        now; it must not change the actor's state. Saves the mailbox round trip of cached reads.
        """
        return NOT_NOW

    def try_answer_now(self, command: C) -> Any:
        """(registry) :meth:`answer_now` when the mailbox is empty and no command runs, else :data:`NOT_NOW`."""
        if self._busy or len(self._mailbox) or self._mailbox.closed:
            return NOT_NOW
        try:
            result = self.answer_now(command)
        except Exception:
            self._failed += 1
            self._processed += 1
            raise
        if result is not NOT_NOW:
            self._processed += 1
            self._last_active = self._clock()
        return result

    def runs_inline(self, command: C) -> bool:
        """Whether an idle actor may run ``command`` in its caller's task (False by default).

        Say yes only for short, store-bound commands: the caller stays until such a command ends even if it
        is cancelled meanwhile (the command is shielded either way; through the mailbox the caller could
        leave at once). Saves the two task switches of the mailbox round trip.
        """
        return False

    def can_run_now(self, command: C) -> bool:
        """(registry) Whether :meth:`run_now` may take ``command``: idle, open, and :meth:`runs_inline`."""
        return not (self._busy or len(self._mailbox) or self._mailbox.closed) and self.runs_inline(command)

    async def run_now(self, command: C) -> Any:
        """(registry) Handle ``command`` in the caller's task; only after :meth:`can_run_now` said yes.

        The same order as the mailbox: nothing was queued or running, and whatever arrives meanwhile waits
        (the actor is busy) and runs after it. Shielded like every handler; a caller cancelled meanwhile
        gets the cancellation once the command has finished, and the result is dropped.
        """
        self._busy = self._inline = True
        try:
            with anyio.CancelScope(shield=True):
                result = await self.handle(command)
        except Exception:
            self._failed += 1
            raise
        finally:
            self._processed += 1
            self._inline = False
            waiter = self._inline_waiter
            if waiter is not None:  # the loop took a command meanwhile: hand it the actor, still busy
                self._inline_waiter = None
                waiter.set_result(None)
            else:
                self._busy = False
            self._last_active = self._clock()
        await checkpoint_if_cancelled()
        return result

    def statistics(self) -> ActorStatistics:
        """A frozen snapshot of the mailbox and counters."""
        return ActorStatistics(
            key=self.key,
            mailbox=self._mailbox.statistics(),
            processed=self._processed,
            failed=self._failed,
            busy=self._busy,
            last_active=self._last_active,
        )

    async def run(self) -> None:
        """Handle commands until the actor is closed and its mailbox drained.

        If the loop is stopped another way (its scope cancelled), the mailbox is closed and every command
        still queued fails with :class:`MailboxClosed`, so no caller hangs.

        :raises ThreadmindError: the loop is already running, or the actor is served on demand.
        """
        if self._running or self._spawn is not None:
            raise ThreadmindError(f"actor {self.key!r} is already running", code="THREADMIND_ACTOR_RUNNING")
        self._running = True
        await self._consume(None)

    def serve(self, spawn: Callable[[Actor[Any]], None], linger: float) -> None:
        """(registry) Run the loop on demand: ``spawn(actor)`` must start a task awaiting :meth:`drain`.

        It is called, synchronously, when a command is queued and no loop is running; that loop ends once the
        mailbox has been empty for ``linger`` seconds (or the actor is closed and drained).
        """
        if self._running or self._spawn is not None:
            raise ThreadmindError(f"actor {self.key!r} is already running", code="THREADMIND_ACTOR_RUNNING")
        self._spawn = spawn
        self._linger = linger

    async def drain(self) -> None:
        """(registry) The on-demand loop that ``spawn`` starts: handles commands until none came for ``linger``."""
        await self._consume(self._linger)

    @property
    def looping(self) -> bool:
        """Whether a loop task is running (or, on demand, has been asked for and not yet ended)."""
        return self._running

    def _ensure_loop(self) -> None:
        # Claimed before the task starts, so a second command queued meanwhile asks for no second loop.
        spawn = self._spawn
        if spawn is not None and not self._running:
            self._running = True
            spawn(self)

    async def _consume(self, linger: float | None) -> None:
        mailbox = self._mailbox
        streak = 0
        idle_exit = False
        try:
            # One scope for the loop's life, shielded only while a handler runs: toggling ``shield`` costs
            # far less than entering a fresh shielded scope per command (~10 µs of a ~30 µs round trip).
            with anyio.CancelScope() as scope:
                while True:
                    if streak >= _YIELD_EVERY:
                        await checkpoint()
                        streak = 0
                    elif len(mailbox):
                        # Stop taking queued commands once our own scope is cancelled (no yield otherwise).
                        await checkpoint_if_cancelled()
                    envelope: _Envelope | None
                    try:
                        envelope = mailbox.get_nowait()
                        streak += 1
                    except anyio.WouldBlock:
                        envelope = None  # wait outside the handler: an idle actor keeps no exception alive
                    if envelope is None:
                        streak = 0
                        if linger is None:
                            envelope = await mailbox.get()
                        else:
                            with anyio.move_on_after(linger):
                                envelope = await mailbox.get()
                            if envelope is None:
                                if len(mailbox) or mailbox.closed:
                                    continue  # came as the wait ended: take it (or end) on the next pass
                                # Empty and open: end without a yield, so a command queued from now on
                                # finds no loop and asks for a new one.
                                idle_exit = True
                                return
                    await self._process(envelope, scope)
                    envelope = None  # nor the last command, its reply or its caller's context
        except anyio.EndOfStream:
            return
        finally:
            self._running = False
            if not idle_exit:
                self._fail_queued()

    def _fail_queued(self) -> None:
        # Reached on every exit; after a normal drain there is nothing left.
        mailbox = self._mailbox
        mailbox.close()
        while len(mailbox):
            reply = mailbox.get_nowait().reply
            if reply is not None and not reply.done():
                reply.set_exception(MailboxClosed(f"actor {self.key!r} stopped before handling this command"))

    def _tracer(self) -> trace.Tracer:
        provider = trace.get_tracer_provider()
        cache = self._tracer_cache
        if cache is None or cache[0] is not provider:
            cache = self._tracer_cache = (provider, provider.get_tracer("threadmind"))
        return cache[1]

    async def _wait_inline(self, scope: anyio.CancelScope) -> None:
        # A command runs in its caller's task (run_now): it started first, so it finishes first. Shielded,
        # as the command itself is; the actor stays busy across the hand-over, so no other caller slips in.
        waiter = self._inline_waiter = new_reply()
        scope.shield = True
        try:
            await waiter
        finally:
            scope.shield = False

    async def _process(self, envelope: _Envelope, scope: anyio.CancelScope) -> None:
        if self._inline:
            await self._wait_inline(scope)
        reply = envelope.reply
        if reply is not None and reply.done():
            self._busy = False  # busy only if handed over from run_now
            return  # the caller was cancelled before we started: skip
        command = envelope.command
        parent = envelope.context
        self._busy = True
        span: trace.Span | None = None
        token: contextvars.Token[otel_context.Context] | None = None
        try:
            if not tracing_enabled():  # no SDK installed: skip the no-op span and the context switch
                scope.shield = True
                try:
                    result = await self.handle(command)
                finally:
                    scope.shield = False
                if reply is not None and not reply.done():
                    reply.set_result(result)
                return
            attributes: dict[str, str | int] = {
                "threadmind.actor.key": self.key,
                "threadmind.mailbox.depth": envelope.depth,
            }
            for name in self.key_attributes:
                attributes[name] = self.key
            extra = getattr(command, "span_attributes", None)
            if extra is not None:
                attributes.update(extra())
            span = self._tracer().start_span(
                f"threadmind.actor.{type(command).__name__}",
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
            )
            token = otel_context.attach(trace.set_span_in_context(span, parent))
            scope.shield = True  # a started command always runs to completion
            try:
                result = await self.handle(command)
            finally:
                scope.shield = False
        except Exception as exc:
            self._failed += 1
            if span is not None and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            if reply is None:
                _LOG.error("actor %r: %s failed", self.key, type(command).__name__, exc_info=exc)
            elif not reply.done():
                if isinstance(exc, StopIteration):  # a future refuses StopIteration
                    wrapped = RuntimeError(f"{type(command).__name__} handler raised StopIteration")
                    wrapped.__cause__ = exc
                    exc = wrapped
                reply.set_exception(exc)
        except BaseException as exc:
            if reply is not None and not reply.done():
                stopped = ThreadmindError(
                    f"actor {self.key!r} stopped while handling {type(command).__name__}",
                    code="THREADMIND_ACTOR_STOPPED",
                )
                stopped.__cause__ = exc
                reply.set_exception(stopped)
            raise
        else:
            if reply is not None and not reply.done():
                reply.set_result(result)
        finally:
            if token is not None:
                otel_context.detach(token)
            if span is not None:
                span.end()
            self._processed += 1
            self._busy = False
            self._last_active = self._clock()
