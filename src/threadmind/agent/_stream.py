"""``AgentStream``: one streamed run, as an async iterator of events and an async context manager."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable
from types import TracebackType
from typing import TypeVar

from opentelemetry import context as otel_context

from ..events import StreamEvent
from ..tracing import tracing_enabled
from ._results import GenerateResult
from ._run import RunState

__all__ = ("AgentStream",)

T = TypeVar("T")


class AgentStream:
    """One ``Agent.stream`` run: iterate it for its :data:`~threadmind.events.StreamEvent` s, then
    ``await stream.result()`` for the :class:`GenerateResult` that ``generate`` would have returned.

    ::

        async with agent.stream("Hi", thread_id=t, resource_id=r) as stream:
            async for event in stream:
                ...
        result = await stream.result()

    Entering the stream starts the run up to its first event (the thread is taken, the input processors run),
    so a refusal is raised by ``async with`` before any event: ``ValidationError``, ``ThreadBusy``,
    ``ResourceMismatch``, ``ThreadNotFound``. Iterating without ``async with`` enters on the first event; such a
    stream must be iterated to its end or closed with :meth:`aclose`.

    The run is driven by the consumer: it advances only when the next event is asked for, so a slow consumer
    slows the model's stream and nothing is buffered. Leaving the ``async with`` block before the ``finish``
    event (``break``, an exception, a cancellation, :meth:`aclose`: an HTTP client that went away) aborts the
    run: the model's stream is closed at once and, with ``Agent(on_abort="save")`` (the default), the input and
    the partial reply are persisted with ``content.metadata.aborted = true`` (``"discard"``: nothing is);
    ``result()`` then has ``finish_reason="aborted"``. A run's own failure (a ``ModelError``) is raised by the
    iteration and by ``result()``; nothing is persisted. Iterate, enter and close a stream in one task.

    The span of the run (``threadmind.agent.stream``) is a child of the span current when ``stream()`` was
    called, and every span of the run (model, tools, memory, the save and the title) is under it; between
    events the consumer's own tracing context is left as it was.
    """

    __slots__ = ("_closed", "_error", "_otel", "_pending", "_run", "_started", "_state")

    def __init__(self, run: AsyncGenerator[StreamEvent, None], state: RunState) -> None:
        self._run = run
        self._state = state
        self._otel = otel_context.get_current() if tracing_enabled() else None
        self._pending: StreamEvent | None = None
        self._started = False
        self._closed = False
        self._error: Exception | None = None

    async def _resume(self, step: Awaitable[T]) -> T:
        """Advance the run in its own tracing context (kept across events), not the consumer's."""
        context = self._otel
        if context is None:
            return await step
        token = otel_context.attach(context)
        try:
            return await step
        finally:
            self._otel = otel_context.get_current()
            otel_context.detach(token)

    async def _start(self) -> None:
        self._started = True
        try:
            self._pending = await self._resume(self._run.__anext__())
        except StopAsyncIteration:
            self._closed = True
        except BaseException as exc:
            self._closed = True
            if isinstance(exc, Exception):
                self._error = exc
            raise

    async def __aenter__(self) -> AgentStream:
        if self._started:
            raise RuntimeError("an AgentStream can be entered once")
        await self._start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AgentStream:
        return self

    async def __anext__(self) -> StreamEvent:
        pending = self._pending
        if pending is not None:
            self._pending = None
            return pending
        if not self._started:
            await self._start()
            return await self.__anext__()
        if self._closed:
            raise StopAsyncIteration
        try:
            if self._otel is None:
                return await self._run.__anext__()
            return await self._resume(self._run.__anext__())
        except BaseException as exc:  # the end, a failure, or a cancellation: the run is over
            self._closed = True
            if isinstance(exc, Exception) and not isinstance(exc, StopAsyncIteration):
                self._error = exc
            raise

    async def aclose(self) -> None:
        """Stop the run if it has not finished (an abort, see the class docstring). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending = None
        await self._resume(self._run.aclose())

    async def result(self) -> GenerateResult:
        """The run's :class:`GenerateResult`, once it ended (the remaining events are consumed first).

        :raises ~threadmind.errors.ModelError: the run failed (as does any error the run raised).
        """
        if not self._closed:
            async for _ in self:
                pass
        if self._error is not None:
            raise self._error
        result = self._state.result
        if result is None:
            return GenerateResult(text="", messages=[], finish_reason="aborted")
        return result
