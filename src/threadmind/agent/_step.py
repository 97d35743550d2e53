"""One model step as it streams: the events its chunks become, and the message parts it has produced so far.

A step is a sequence of pieces in the order the model wrote them: text and reasoning segments (each announced
by a start event, grown by deltas, closed by an end event) and tool calls (a call may first stream its
arguments, ``tool-input-start``/``tool-input-delta``, and is complete at ``tool-input-available``; a server
tool's outcome follows once it ran). :meth:`StepOutput.parts` turns what is there into stored parts, also
for a step cut short (see there).
"""

from __future__ import annotations

import time

from .._results import Usage
from ..codecs import Part, ReasoningPart, StepStartPart, TextPart, ToolInvocation, ToolInvocationPart
from ..events import (
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    StreamEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputStartEvent,
)
from ..models import ToolCall, ToolInputDelta
from ..tools import Tool

__all__ = ("ABORTED_TOOL_TEXT", "REASONING", "TEXT", "StepOutput", "now_ms")

TEXT = "text"
REASONING = "reasoning"

ABORTED_TOOL_TEXT = "The run was stopped before this tool returned."
"""The error a server tool call keeps when the run is aborted after the call was complete but before its result."""


def now_ms() -> int:
    """Now in epoch milliseconds (what a part's ``createdAt`` holds)."""
    return time.time_ns() // 1_000_000


class _Segment:
    """A text or reasoning part being written."""

    __slots__ = ("deltas", "id", "kind")

    def __init__(self, kind: str, part_id: str) -> None:
        self.kind = kind
        self.id = part_id
        self.deltas: list[str] = []


class ToolCallState:
    """A tool call of the step: ``call`` is None while its arguments stream; ``invocation`` is its outcome."""

    __slots__ = ("call", "created_at", "invocation", "tool_call_id", "tool_name")

    def __init__(self, tool_call_id: str, tool_name: str) -> None:
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.call: ToolCall | None = None
        self.invocation: ToolInvocation | None = None
        self.created_at: int | None = None


class StepOutput:
    """What one model step has produced so far (see the module docstring)."""

    __slots__ = ("_counter", "_pieces", "calls", "finish_reason", "open", "stamp", "usage")

    def __init__(self, counter: list[int]) -> None:
        self._counter = counter  # shared by the run's steps: part ids are unique within the stream
        self._pieces: list[_Segment | ToolCallState] = []
        self.open: _Segment | None = None
        self.calls: dict[str, ToolCallState] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        #: When the model finished the step (epoch ms): the ``createdAt`` of its parts.
        self.stamp: int | None = None

    # --- chunks → events ------------------------------------------------------------------------------------

    def switch(self, kind: str) -> tuple[StreamEvent, ...]:
        """Close the open segment (if any) and open a ``kind`` segment: the end and start events."""
        self._counter[0] += 1
        segment = _Segment(kind, f"{kind}-{self._counter[0]}")
        self._pieces.append(segment)
        start: StreamEvent = TextStartEvent(id=segment.id) if kind == TEXT else ReasoningStartEvent(id=segment.id)
        closed = self.close()
        self.open = segment
        return (*closed, start)

    def add(self, delta: str) -> StreamEvent:
        """Append ``delta`` to the open segment: its delta event."""
        segment = self.open
        assert segment is not None
        segment.deltas.append(delta)
        if segment.kind == TEXT:
            return TextDeltaEvent(id=segment.id, delta=delta)
        return ReasoningDeltaEvent(id=segment.id, delta=delta)

    def close(self) -> tuple[StreamEvent, ...]:
        """Close the open segment: its end event (nothing when none is open)."""
        segment = self.open
        if segment is None:
            return ()
        self.open = None
        return (TextEndEvent(id=segment.id) if segment.kind == TEXT else ReasoningEndEvent(id=segment.id),)

    def tool_input(self, delta: ToolInputDelta) -> tuple[StreamEvent, ...]:
        """A piece of a call's arguments: ``tool-input-start`` for a new call, then the delta."""
        events: list[StreamEvent] = [*self.close()]
        state = self.calls.get(delta.tool_call_id)
        if state is None:
            state = self._new_call(delta.tool_call_id, delta.tool_name)
            events.append(ToolInputStartEvent(tool_call_id=delta.tool_call_id, tool_name=delta.tool_name))
        if delta.delta and state.call is None:
            events.append(ToolInputDeltaEvent(tool_call_id=delta.tool_call_id, input_text_delta=delta.delta))
        return tuple(events)

    def tool_call(self, call: ToolCall) -> tuple[StreamEvent, ...]:
        """A complete call: ``tool-input-available``."""
        closed = self.close()
        state = self.calls.get(call.tool_call_id)
        if state is None or state.call is not None:
            state = self._new_call(call.tool_call_id, call.tool_name)
        state.call = call
        return (*closed, ToolInputAvailableEvent(tool_call_id=call.tool_call_id, tool_name=call.tool_name,
                                                 input=call.args))

    def _new_call(self, tool_call_id: str, tool_name: str) -> ToolCallState:
        state = ToolCallState(tool_call_id, tool_name)
        self.calls[tool_call_id] = state
        self._pieces.append(state)
        return state

    # --- what the step produced -----------------------------------------------------------------------------

    def complete_calls(self) -> list[ToolCallState]:
        """The calls whose arguments are complete, in the order the model made them."""
        return [p for p in self._pieces if isinstance(p, ToolCallState) and p.call is not None]

    @property
    def text(self) -> str:
        """The step's text (its text segments joined)."""
        return "".join(d for p in self._pieces if isinstance(p, _Segment) and p.kind == TEXT for d in p.deltas)

    def parts(self, tools: dict[str, Tool], *, aborted: bool = False) -> list[Part]:
        """The step's parts as stored: a ``step-start``, then text, reasoning and tool parts in order; nothing
        when the step produced nothing.

        Cut short (``aborted``), a step keeps what it wrote: the partial text and reasoning, every call with its
        outcome, a client tool's complete call in state ``call`` (a later request may still answer it), and a
        server tool's complete call that had not returned in state ``output-error`` with
        :data:`ABORTED_TOOL_TEXT` (never a bare ``call``, which would look like a client tool awaiting its
        result). A call whose arguments were still streaming is left out, as the reference's history step drops
        ``partial-call`` parts.
        """
        stamp = self.stamp or now_ms()
        out: list[Part] = []
        for piece in self._pieces:
            if isinstance(piece, _Segment):
                value = "".join(piece.deltas)
                if not value:
                    continue
                if piece.kind == TEXT:
                    out.append(TextPart(text=value, created_at=stamp))
                else:
                    out.append(ReasoningPart(reasoning=value, details=[{"type": "text", "text": value}],
                                             created_at=stamp))
                continue
            invocation = piece.invocation
            if invocation is None:
                if piece.call is None:
                    continue  # still being written
                invocation = _unfinished(piece.call, tools) if aborted else ToolInvocation(
                    state="call", tool_call_id=piece.tool_call_id, tool_name=piece.tool_name, args=piece.call.args)
            out.append(ToolInvocationPart(tool_invocation=invocation, created_at=piece.created_at or stamp))
        if not out:
            return []
        return [StepStartPart(created_at=stamp), *out]


def _unfinished(call: ToolCall, tools: dict[str, Tool]) -> ToolInvocation:
    tool = tools.get(call.tool_name)
    if tool is not None and tool.execute is None:
        return ToolInvocation(state="call", tool_call_id=call.tool_call_id, tool_name=call.tool_name, args=call.args)
    return ToolInvocation(state="output-error", tool_call_id=call.tool_call_id, tool_name=call.tool_name,
                          args=call.args, error_text=ABORTED_TOOL_TEXT)
