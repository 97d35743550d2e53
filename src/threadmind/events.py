"""What a streamed agent run emits: one frozen record per AI SDK UI message stream chunk.

Each event is a msgspec ``Struct`` tagged by ``type`` with the chunk name of the ``ai`` package's
``UIMessageChunk`` (checked against ``ai`` 7.0.173, ``src/ui-message-stream/ui-message-chunks.ts``).
Attributes are snake_case; ``msgspec.json.encode(event)`` writes the chunk's camelCase JSON with the
optional fields that are ``None`` left out, which is what :func:`threadmind.ui.ui_message_stream` sends.

``finish_reason`` on :class:`FinishEvent` is the agent's (``stop``, ``tool-calls``, ``length``,
``content-filter``, ``error``, ``tripwire``, ``aborted`` ...); the UI stream maps it onto the AI SDK's set.
A tripwire is emitted as ``ErrorEvent(error_text=reason)`` then ``FinishEvent(finish_reason="tripwire")``.
A consumer that stops early receives nothing more (``Agent.stream`` aborts the run); ``AbortEvent(reason)``
is the chunk for an event source that reports a stop to a consumer still reading.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Protocol, TypeAlias, Union, runtime_checkable

import msgspec

__all__ = (
    "DATA_PART_EVENTS",
    "AbortEvent",
    "DataPart",
    "ErrorEvent",
    "EventStream",
    "FinishEvent",
    "FinishStepEvent",
    "OMActivationEvent",
    "OMBufferingStartEvent",
    "OMObservationEndEvent",
    "OMObservationFailedEvent",
    "OMObservationStartEvent",
    "OMStatusEvent",
    "ReasoningDeltaEvent",
    "ReasoningEndEvent",
    "ReasoningStartEvent",
    "StartEvent",
    "StartStepEvent",
    "StreamEvent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThreadTitleEvent",
    "ToolInputAvailableEvent",
    "ToolInputDeltaEvent",
    "ToolInputStartEvent",
    "ToolOutputAvailableEvent",
    "ToolOutputErrorEvent",
)


class _Event(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type"):
    """Base of every stream event; the ``type`` tag is the AI SDK chunk name."""

    @property
    def type(self) -> str:
        """The chunk name, e.g. ``text-delta``."""
        return str(type(self).__struct_config__.tag)


class StartEvent(_Event, frozen=True, tag="start"):
    """The run started; ``message_id`` is the id under which the assistant message is stored."""

    message_id: str | None = None


class StartStepEvent(_Event, frozen=True, tag="start-step"):
    """A model step (one model call) begins."""


class FinishStepEvent(_Event, frozen=True, tag="finish-step"):
    """A model step ended."""


class TextStartEvent(_Event, frozen=True, tag="text-start"):
    """A text part with this ``id`` begins."""

    id: str


class TextDeltaEvent(_Event, frozen=True, tag="text-delta"):
    """More text for the text part ``id``."""

    id: str
    delta: str


class TextEndEvent(_Event, frozen=True, tag="text-end"):
    """The text part ``id`` is complete."""

    id: str


class ReasoningStartEvent(_Event, frozen=True, tag="reasoning-start"):
    """A reasoning part with this ``id`` begins."""

    id: str


class ReasoningDeltaEvent(_Event, frozen=True, tag="reasoning-delta"):
    """More reasoning text for the part ``id``."""

    id: str
    delta: str


class ReasoningEndEvent(_Event, frozen=True, tag="reasoning-end"):
    """The reasoning part ``id`` is complete."""

    id: str


class ToolInputStartEvent(_Event, frozen=True, tag="tool-input-start"):
    """The model started writing the arguments of a tool call."""

    tool_call_id: str
    tool_name: str


class ToolInputDeltaEvent(_Event, frozen=True, tag="tool-input-delta"):
    """More of a tool call's argument JSON, as the model streams it."""

    tool_call_id: str
    input_text_delta: str


class ToolInputAvailableEvent(_Event, frozen=True, tag="tool-input-available"):
    """A complete tool call (for a client tool, the run then ends with ``tool-calls``)."""

    tool_call_id: str
    tool_name: str
    input: Any


class ToolOutputAvailableEvent(_Event, frozen=True, tag="tool-output-available"):
    """A server tool returned ``output``."""

    tool_call_id: str
    output: Any


class ToolOutputErrorEvent(_Event, frozen=True, tag="tool-output-error"):
    """A server tool raised; ``error_text`` is what the model is told."""

    tool_call_id: str
    error_text: str


class FinishEvent(_Event, frozen=True, tag="finish", omit_defaults=False):
    """The run finished, for the agent's ``finish_reason``."""

    finish_reason: str = "stop"


class ErrorEvent(_Event, frozen=True, tag="error"):
    """The run failed or was stopped by a tripwire; ``error_text`` says why."""

    error_text: str


class AbortEvent(_Event, frozen=True, tag="abort"):
    """The consumer stopped the run early."""

    reason: str | None = None


class ThreadTitleEvent(_Event, frozen=True, tag="data-thread-title", omit_defaults=False):
    """The thread's generated title (``generateTitle.emitEvent``): ``data = {"threadId", "title"}``, transient."""

    data: dict[str, Any]
    transient: bool = True

    @classmethod
    def of(cls, thread_id: str, title: str) -> ThreadTitleEvent:
        """The event announcing ``title`` for ``thread_id``."""
        return cls(data={"threadId": thread_id, "title": title})

    @property
    def thread_id(self) -> str | None:
        """``data["threadId"]``."""
        value = self.data.get("threadId")
        return value if isinstance(value, str) else None

    @property
    def title(self) -> str | None:
        """``data["title"]``."""
        value = self.data.get("title")
        return value if isinstance(value, str) else None


class _DataPart(_Event, frozen=True, omit_defaults=False):
    """A transient ``data-*`` part a memory processor wrote for the stream's consumer (Mastra's ``writer.custom``):
    ``data`` as Mastra shapes it; ``useChat`` hands it to ``onData`` and keeps it out of the message."""

    data: dict[str, Any]
    transient: bool = True


class OMStatusEvent(_DataPart, frozen=True, tag="data-om-status"):
    """Observational memory's windows before a model call: unobserved message tokens and observation tokens
    against their thresholds (``data.windows.active``), and what is buffered (``data.windows.buffered``)."""


class OMObservationStartEvent(_DataPart, frozen=True, tag="data-om-observation-start"):
    """The turn waits for an observation (past ``blockAfter``): its ``cycleId``, tokens to observe, record, thread."""


class OMObservationEndEvent(_DataPart, frozen=True, tag="data-om-observation-end"):
    """The observation the turn waited for ended: the tokens observed, the observations' size and text."""


class OMObservationFailedEvent(_DataPart, frozen=True, tag="data-om-observation-failed"):
    """The observation the turn waited for failed (the turn goes on with the raw history): ``data.error``."""


class OMActivationEvent(_DataPart, frozen=True, tag="data-om-activation"):
    """Observations computed ahead became active at the threshold, with no model call on the turn."""


class OMBufferingStartEvent(_DataPart, frozen=True, tag="data-om-buffering-start"):
    """The turn started computing observations ahead, in the background (``observation.bufferTokens``): its
    ``cycleId`` (the chunk's), the tokens to buffer, record and thread; the chunk shows in the next turn's status."""


DataPart: TypeAlias = Union[OMStatusEvent, OMObservationStartEvent, OMObservationEndEvent,
                            OMObservationFailedEvent, OMActivationEvent, OMBufferingStartEvent]
DATA_PART_EVENTS: dict[str, type[DataPart]] = {
    "data-om-status": OMStatusEvent,
    "data-om-observation-start": OMObservationStartEvent,
    "data-om-observation-end": OMObservationEndEvent,
    "data-om-observation-failed": OMObservationFailedEvent,
    "data-om-activation": OMActivationEvent,
    "data-om-buffering-start": OMBufferingStartEvent,
}
"""The data parts processors may write (``RequestContext.write_data``), by chunk type."""


StreamEvent: TypeAlias = Union[
    StartEvent,
    StartStepEvent,
    TextStartEvent,
    TextDeltaEvent,
    TextEndEvent,
    ReasoningStartEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ToolInputStartEvent,
    ToolInputDeltaEvent,
    ToolInputAvailableEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    FinishStepEvent,
    FinishEvent,
    ErrorEvent,
    AbortEvent,
    ThreadTitleEvent,
    OMStatusEvent,
    OMObservationStartEvent,
    OMObservationEndEvent,
    OMObservationFailedEvent,
    OMActivationEvent,
    OMBufferingStartEvent,
]


@runtime_checkable
class EventStream(Protocol):
    """An async context manager that is also an async iterable of :data:`StreamEvent` (``AgentStream`` is one).

    Leaving the context before the last event (an exception, a cancellation, ``aclose``) stops the run.
    """

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...
