"""Reading the ``/chat/completions`` answers: a whole completion (``parse_chat_response``) and a streamed one,
event by event (``ChatStreamAssembler``), into the same :class:`ModelResponse` / :class:`ModelChunk` terms.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from .._results import Usage
from ..errors import ModelError
from ._protocol import ModelChunk, ModelResponse, ToolCall, ToolInputDelta

__all__ = ("ChatStreamAssembler", "decode_arguments", "parse_chat_response")

# --- a whole completion ---------------------------------------------------------------------------------


class _WireFunction(msgspec.Struct):
    name: str
    arguments: Any = None


class _WireToolCall(msgspec.Struct):
    function: _WireFunction
    id: str | None = None


class _WireMessage(msgspec.Struct):
    content: Any = None
    tool_calls: list[_WireToolCall] | None = None
    refusal: str | None = None
    reasoning_content: Any = None  # DeepSeek, vLLM, llama.cpp
    reasoning: Any = None  # OpenRouter, Ollama


class _WireChoice(msgspec.Struct):
    message: _WireMessage
    finish_reason: str | None = None


class _WireUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class _WireCompletion(msgspec.Struct):
    choices: list[_WireChoice]
    usage: _WireUsage | None = None


_completion_decoder = msgspec.json.Decoder(_WireCompletion)


def usage_of(wire: _WireUsage) -> Usage:
    """The billed tokens; ``tokens`` is the server's total, or input + output when it sent none."""
    total = wire.total_tokens
    if total is None:
        total = (wire.prompt_tokens or 0) + (wire.completion_tokens or 0)
    return Usage(tokens=total, input_tokens=wire.prompt_tokens, output_tokens=wire.completion_tokens)


def reasoning_of(reasoning_content: Any, reasoning: Any) -> str | None:
    """The reasoning text a compatible server sent (``reasoning_content``, else ``reasoning``), if any."""
    for value in (reasoning_content, reasoning):
        if isinstance(value, str) and value:
            return value
    return None


def decode_arguments(raw: Any) -> Any:
    """Arguments arrive as JSON text; invalid JSON is passed on as the raw string so the caller can see it."""
    if not isinstance(raw, str):
        return {} if raw is None else raw
    if not raw.strip():
        return {}
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw


def text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):  # some compatible servers answer with content parts
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(t for t in texts if isinstance(t, str)) or None
    return None


def parse_chat_response(body: bytes) -> ModelResponse:
    """A :class:`ModelResponse` from a ``/chat/completions`` body (first choice).

    :raises ~threadmind.errors.ModelError: the body is not a chat completion.
    """
    try:
        completion = _completion_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ModelError(f"the chat completion response is malformed: {exc}", code="THREADMIND_MODEL_BAD_RESPONSE") \
            from exc
    if not completion.choices:
        raise ModelError("the chat completion response has no choices", code="THREADMIND_MODEL_BAD_RESPONSE")
    choice = completion.choices[0]
    calls = [
        ToolCall(call.id or f"call_{uuid.uuid4().hex}", call.function.name, decode_arguments(call.function.arguments))
        for call in choice.message.tool_calls or ()
    ]
    text = text_of(choice.message.content)
    if text is None and not calls and choice.message.refusal:
        text = choice.message.refusal
    usage = usage_of(completion.usage) if completion.usage is not None else None
    finish = choice.finish_reason or ("tool_calls" if calls else "stop")
    reasoning = reasoning_of(choice.message.reasoning_content, choice.message.reasoning)
    return ModelResponse(text=text, tool_calls=calls, finish_reason=finish, usage=usage, reasoning=reasoning)


# --- a streamed completion -------------------------------------------------------------------------------


class _WireDeltaFunction(msgspec.Struct):
    name: str | None = None
    arguments: Any = None


class _WireDeltaToolCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _WireDeltaFunction | None = None


class _WireDelta(msgspec.Struct):
    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    refusal: Any = None
    tool_calls: list[_WireDeltaToolCall] | None = None


class _WireStreamChoice(msgspec.Struct):
    index: int = 0
    delta: _WireDelta | None = None
    finish_reason: str | None = None


class _WireStreamChunk(msgspec.Struct):
    choices: list[_WireStreamChoice] | None = None
    usage: _WireUsage | None = None
    error: Any = None


_stream_chunk_decoder = msgspec.json.Decoder(_WireStreamChunk)
_EXCERPT_CHARS = 200


def _excerpt(data: str) -> str:
    text = " ".join(data.split())
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…"


class _PendingCall:
    """A tool call whose arguments are still arriving: id and name from its first delta, arguments joined."""

    __slots__ = ("arguments", "id", "index", "name", "opened")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []
        self.opened = False


class ChatStreamAssembler:
    """Turns the ``data`` of each streamed event into :class:`ModelChunk` s (first choice only).

    Text, reasoning (``reasoning_content`` or ``reasoning``) and tool-call argument deltas (keyed by the
    call's ``index``; the first delta of a call opens it with the text so far) are passed on as they
    arrive. The complete tool calls, their arguments JSON-decoded, follow when the choice finishes (or the
    stream ends); the final chunk, with the finish reason and the usage the server sends after it, comes
    at ``[DONE]``. A refusal is the text when there is no other text and no tool call, as in
    :func:`parse_chat_response`, so a stream and a whole completion give equal responses. ``redact``
    cleans any server text quoted in an error (the API key never appears in one).
    """

    def __init__(self, *, redact: Callable[[str], str] = str) -> None:
        self._redact = redact
        self.done = False
        self.events = 0
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._calls: dict[int, _PendingCall] = {}
        self._closed_calls = False
        self._saw_text = False
        self._refusal: list[str] = []

    def feed(self, data: str) -> list[ModelChunk]:
        """The chunks one event's ``data`` yields; after ``[DONE]`` (see :attr:`done`) nothing more.

        :raises ~threadmind.errors.ModelError: the event is not a chat completion chunk, the server reported
            an error in the stream, or a tool call has no name.
        """
        if self.done or not data.strip():
            return []
        self.events += 1
        if data.strip() == "[DONE]":
            self.done = True
            return self._finish()
        try:
            wire = _stream_chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ModelError(f"the chat completion stream sent a malformed event ({exc}): "
                             f"{_excerpt(self._redact(data))}",
                             code="THREADMIND_MODEL_BAD_RESPONSE") from exc
        if wire.error is not None:
            err = wire.error
            message = err.get("message") if isinstance(err, dict) else err
            raise ModelError(f"the chat completion stream reported an error: {_excerpt(self._redact(str(message)))}",
                             code="THREADMIND_MODEL_STREAM_ERROR")
        if wire.usage is not None:
            self.usage = usage_of(wire.usage)
        chunks: list[ModelChunk] = []
        for choice in wire.choices or ():
            if choice.index != 0:
                continue
            if choice.delta is not None:
                self._delta(choice.delta, chunks)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                chunks.extend(self._close_calls())
        return chunks

    def end(self) -> list[ModelChunk]:
        """The remaining chunks when the body ended without ``[DONE]`` (allowed once the choice finished).

        :raises ~threadmind.errors.ModelError: the stream was cut off: it ended before a finish reason.
        """
        if self.done:
            return []
        if self.finish_reason is None:
            raise ModelError(
                f"the chat completion stream ended after {self.events} event(s) without a finish reason or "
                "[DONE]; the connection was closed early",
                code="THREADMIND_MODEL_STREAM_INTERRUPTED",
            )
        self.done = True
        return self._finish()

    def _delta(self, delta: _WireDelta, chunks: list[ModelChunk]) -> None:
        reasoning = reasoning_of(delta.reasoning_content, delta.reasoning)
        if reasoning:
            chunks.append(ModelChunk(reasoning=reasoning))
        text = text_of(delta.content)
        if text:
            self._saw_text = True
            chunks.append(ModelChunk(text=text))
        if isinstance(delta.refusal, str) and delta.refusal:
            self._refusal.append(delta.refusal)
        for position, wire_call in enumerate(delta.tool_calls or ()):
            index = wire_call.index if wire_call.index is not None else position
            call = self._calls.get(index)
            if call is None:
                call = self._calls[index] = _PendingCall(index)
            function = wire_call.function
            if wire_call.id and call.id is None:
                call.id = wire_call.id
            if function is not None and function.name and not call.name:
                call.name = function.name
            fragment = ""
            if function is not None and function.arguments is not None:
                args = function.arguments
                fragment = args if isinstance(args, str) else msgspec.json.encode(args).decode()
                call.arguments.append(fragment)
            if call.opened:
                if fragment:
                    chunks.append(ModelChunk(tool_input=ToolInputDelta(str(call.id), str(call.name), fragment)))
            elif call.name:
                call.opened = True
                if call.id is None:
                    call.id = f"call_{uuid.uuid4().hex}"
                chunks.append(ModelChunk(tool_input=ToolInputDelta(call.id, call.name, "".join(call.arguments))))

    def _close_calls(self) -> list[ModelChunk]:
        if self._closed_calls:
            return []
        self._closed_calls = True
        chunks = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise ModelError(f"the chat completion stream sent tool call {index} without a function name",
                                 code="THREADMIND_MODEL_BAD_RESPONSE")
            call_id = call.id or f"call_{uuid.uuid4().hex}"
            chunks.append(ModelChunk(tool_call=ToolCall(call_id, call.name, decode_arguments("".join(call.arguments)))))
        return chunks

    def _finish(self) -> list[ModelChunk]:
        chunks = self._close_calls()
        if not self._saw_text and not self._calls and self._refusal:
            chunks.append(ModelChunk(text="".join(self._refusal)))
        finish = self.finish_reason or ("tool_calls" if self._calls else "stop")
        chunks.append(ModelChunk(finish_reason=finish, usage=self.usage))
        return chunks
