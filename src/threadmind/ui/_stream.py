"""Stream events as the AI SDK UI message stream: server-sent events, one JSON chunk each, then ``[DONE]``.

The wire format is the ``ai`` package's (7.0.173): ``UIMessageChunk`` in
``src/ui-message-stream/ui-message-chunks.ts``, framing by ``JsonToSseTransformStream`` (``data: {json}\\n\\n``,
then ``data: [DONE]\\n\\n``) and the headers of ``UI_MESSAGE_STREAM_HEADERS``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from ..errors import ThreadmindError
from ..events import (
    ErrorEvent,
    EventStream,
    FinishEvent,
    StreamEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    _Event,
)

__all__ = ("AI_SDK_FINISH_REASONS", "MEMORY_TOOLS", "UI_MESSAGE_STREAM_HEADERS", "ui_finish_reason",
           "ui_message_stream")

MEMORY_TOOLS: frozenset[str] = frozenset({"updateWorkingMemory", "setWorkingMemory"})
"""The tools memory gives an agent: their calls carry the whole working-memory document (what the model remembers
of the user), which a front end need not see (``ui_message_stream(..., hide_tools=MEMORY_TOOLS)``)."""

UI_MESSAGE_STREAM_HEADERS: Mapping[str, str] = MappingProxyType({
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
})
"""The response headers of ``createUIMessageStreamResponse`` (``ai`` 7.0.173)."""

AI_SDK_FINISH_REASONS = frozenset({"stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"})
"""``FinishReason`` of ``ai`` 7.0.173: the only values the client's chunk schema accepts for ``finishReason``."""

# The agent's own reasons, and provider spellings a model may pass through, onto the AI SDK's values.
_FINISH_ALIASES: Mapping[str, str] = MappingProxyType({
    "tripwire": "other",  # the reason went out as an `error` chunk just before
    "aborted": "other",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "tool_use": "tool-calls",
    "content_filter": "content-filter",
    "max_tokens": "length",
    "end_turn": "stop",
    "stop_sequence": "stop",
})

_DONE = b"data: [DONE]\n\n"
_encoder = msgspec.json.Encoder()


class _WireFinish(msgspec.Struct, tag_field="type", tag="finish", rename="camel"):
    finish_reason: str


def ui_finish_reason(reason: str | None) -> str:
    """The AI SDK ``finishReason`` for one of the agent's (``tripwire`` → ``other``; unknown → ``other``)."""
    if reason is None:
        return "other"
    if reason in AI_SDK_FINISH_REASONS:
        return reason
    return _FINISH_ALIASES.get(reason, "other")


def _frame(value: Any) -> bytes:
    return b"data: " + _encoder.encode(value) + b"\n\n"


def _sse(event: StreamEvent) -> bytes:
    if isinstance(event, FinishEvent):
        return _frame(_WireFinish(ui_finish_reason(event.finish_reason)))
    if not isinstance(event, _Event):
        raise TypeError(f"an event stream yielded {type(event).__name__}, not a threadmind.events event")
    return _frame(event)


def _error_text(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:  # a task group's single failure
        exc = exc.exceptions[0]
    text = exc.public_message if isinstance(exc, ThreadmindError) else str(exc)
    return text or type(exc).__name__


async def _close(events: AsyncIterator[StreamEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


class _Hidden:
    """Which events belong to a hidden tool's calls (output events name only the call, so the calls are noted)."""

    __slots__ = ("calls", "tools")

    def __init__(self, tools: Collection[str]) -> None:
        self.tools = frozenset(tools)
        self.calls: set[str] = set()

    def __call__(self, event: StreamEvent) -> bool:
        if isinstance(event, (ToolInputStartEvent, ToolInputAvailableEvent)) and event.tool_name in self.tools:
            self.calls.add(event.tool_call_id)
            return True
        if isinstance(event, (ToolInputDeltaEvent, ToolOutputAvailableEvent, ToolOutputErrorEvent)):
            return event.tool_call_id in self.calls
        return False


async def ui_message_stream(stream: EventStream, *, hide_tools: Collection[str] = ()) -> AsyncGenerator[bytes, None]:
    """The server-sent-event bytes of the AI SDK UI message stream for ``stream`` (an ``AgentStream``).

    Every tool call is streamed to the client (its input and output), memory's own included: the working-memory
    tool's input is the whole document memory keeps of the user. ``hide_tools`` (``MEMORY_TOOLS``, or any tool
    names) leaves those calls out of the stream; the run and what is stored are the same.

    Enters ``stream`` itself and yields ``data: {json}\\n\\n`` per event (camelCase fields, absent optional
    fields left out, ``finishReason`` mapped onto the AI SDK's values: a tripwire finishes with ``other``),
    then ``data: [DONE]\\n\\n``.

    An error raised while *entering* the stream (a busy thread, a thread of another resource, bad input)
    propagates before any byte is produced, so a server that primes the generator (``await anext(body)``)
    can still answer with an HTTP status. An error raised once the stream is open becomes an ``error`` chunk
    carrying the error's text (a threadmind error's ``public_message``, which names no other resource's ids or
    threads; no traceback), then ``finish`` with ``error`` (unless one was sent) and
    ``[DONE]``. Closing this generator early (``aclose``, cancellation: an HTTP client that went away)
    closes the stream's iterator and exits the stream with that exception, which stops the run; a server should
    therefore iterate it under ``contextlib.aclosing`` in the task that started it.

    :raises TypeError: ``stream`` is not an async context manager and async iterable.
    """
    if not isinstance(stream, EventStream):
        raise TypeError(f"ui_message_stream() needs an event stream (such as AgentStream), got {type(stream).__name__}")
    finished = False
    entered = False
    hidden = _Hidden(hide_tools) if hide_tools else None
    try:
        async with stream:
            entered = True
            events = stream.__aiter__()
            done = False
            try:
                async for event in events:
                    if hidden is not None and hidden(event):
                        continue
                    chunk = _sse(event)
                    finished = finished or isinstance(event, FinishEvent)
                    yield chunk
                done = True
            finally:
                if not done:
                    await _close(events)
    except Exception as exc:
        if not entered:
            raise
        yield _frame(ErrorEvent(error_text=_error_text(exc)))
        if not finished:
            yield _frame(_WireFinish("error"))
    yield _DONE
