"""The language-model protocols: what a model sees (``ModelRequest``), what it answers (``ModelResponse``), and
the pieces a streaming model yields (``ModelChunk``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

import msgspec

from .._results import Usage
from ..codecs import Message

__all__ = (
    "LanguageModel",
    "ModelChunk",
    "ModelRequest",
    "ModelResponse",
    "StreamingLanguageModel",
    "ToolCall",
    "ToolInputDelta",
    "ToolSpec",
)


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model: its name, a description and a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any]


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call the model asked for; ``args`` is the decoded JSON (or the raw string if it was not JSON)."""

    tool_call_id: str
    tool_name: str
    args: Any


class ModelRequest(msgspec.Struct, frozen=True):
    """Exactly what the model sees after all input processors: system texts, conversation and tools."""

    system: list[str] = msgspec.field(default_factory=list)
    messages: list[Message] = msgspec.field(default_factory=list)
    tools: list[ToolSpec] = msgspec.field(default_factory=list)


class ModelResponse(msgspec.Struct, frozen=True):
    """One model step: optional text, the tool calls asked for, why it stopped, the tokens billed, and the
    model's reasoning when it shows it (``reasoning_content`` on OpenAI-compatible servers)."""

    text: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage | None = None
    reasoning: str | None = None


class ToolInputDelta(msgspec.Struct, frozen=True):
    """A piece of a tool call's JSON arguments as the model writes them.

    The first delta for a ``tool_call_id`` opens the call (its ``delta`` may be empty); the following ones
    append to its argument text; the :class:`ModelChunk` carrying the complete ``tool_call`` with the same id
    closes it.
    """

    tool_call_id: str
    tool_name: str
    delta: str


class ModelChunk(msgspec.Struct, frozen=True):
    """One piece of a streamed model step.

    A chunk carries a ``text`` and/or ``reasoning`` delta, or one complete ``tool_call``, or (``tool_input``)
    a piece of the arguments of a call still being written (see :class:`ToolInputDelta`). The last chunk of a
    step carries ``finish_reason`` and ``usage``. Joining the deltas of a step gives its
    :class:`ModelResponse` (:func:`~threadmind.models.collect_response`).
    """

    text: str = ""
    reasoning: str = ""
    tool_call: ToolCall | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_input: ToolInputDelta | None = None


@runtime_checkable
class LanguageModel(Protocol):
    """A chat model: one async call from a :class:`ModelRequest` to a :class:`ModelResponse`.

    A model may also stream (:class:`StreamingLanguageModel`); one that does not is streamed as one chunk
    by :func:`~threadmind.models.stream_model`.
    """

    @property
    def model_id(self) -> str:
        """A stable name for the model (e.g. ``openai/gpt-4o-mini``)."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Run one model step.

        :raises ~threadmind.errors.ModelError: the model failed or could not be reached.
        """
        ...


@runtime_checkable
class StreamingLanguageModel(LanguageModel, Protocol):
    """A :class:`LanguageModel` that can also stream a step as :class:`ModelChunk` s.

    ``stream`` is usually an async generator method. Its chunks joined must equal what ``generate`` returns
    for the same request; the last chunk carries ``finish_reason`` and ``usage``. Closing the iterator
    (``aclose``) must stop the underlying call promptly.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Run one model step, yielding its pieces as they arrive.

        :raises ~threadmind.errors.ModelError: the model failed or could not be reached.
        """
        ...
