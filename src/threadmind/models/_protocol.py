"""The language-model protocol: what a model sees (``ModelRequest``) and what it answers (``ModelResponse``)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from .._results import Usage
from ..codecs import Message

__all__ = ("LanguageModel", "ModelRequest", "ModelResponse", "ToolCall", "ToolSpec")


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
    """One model step: optional text, the tool calls asked for, why it stopped, and the tokens billed."""

    text: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage | None = None


@runtime_checkable
class LanguageModel(Protocol):
    """A chat model: one async call from a :class:`ModelRequest` to a :class:`ModelResponse`."""

    @property
    def model_id(self) -> str:
        """A stable name for the model (e.g. ``openai/gpt-4o-mini``)."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Run one model step.

        :raises ~threadmind.errors.ModelError: the model failed or could not be reached.
        """
        ...
