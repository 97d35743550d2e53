"""Streaming any language model: ``stream_model`` (a model without ``stream`` streams as one chunk) and
``collect_response`` (the chunks joined back into the :class:`ModelResponse` ``generate`` would return)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from .._results import Usage
from ..errors import ModelError, ThreadmindError, TripWire
from ._protocol import LanguageModel, ModelChunk, ModelRequest, ModelResponse, ToolCall

__all__ = ("collect_response", "response_chunks", "stream_model")


def response_chunks(response: ModelResponse) -> Iterator[ModelChunk]:
    """``response`` as a stream: its reasoning, its text, each tool call, then the finish chunk with the usage."""
    if response.reasoning:
        yield ModelChunk(reasoning=response.reasoning)
    if response.text:
        yield ModelChunk(text=response.text)
    for call in response.tool_calls:
        yield ModelChunk(tool_call=call)
    yield ModelChunk(finish_reason=response.finish_reason, usage=response.usage)


def _model_name(model: LanguageModel) -> str:
    try:
        return str(model.model_id)
    except Exception:  # a broken model_id must not hide the model's own error
        return type(model).__name__


def _as_model_error(model: LanguageModel, exc: Exception, doing: str) -> Exception:
    """A model's failure as the caller sees it: ``ModelError`` and ``TripWire`` as raised, anything else
    as a ``ModelError`` naming the model (raise it ``from exc`` to keep the cause)."""
    if isinstance(exc, (ModelError, TripWire)):
        return exc
    detail = exc.message if isinstance(exc, ThreadmindError) else f"{type(exc).__name__}: {exc}"
    return ModelError(f"model {_model_name(model)} failed{doing}: {detail}")


async def stream_model(model: LanguageModel, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
    """Stream one step of ``model``: its own ``stream`` when it has one, else ``generate`` as one chunk.

    The model's chunks pass through unchanged; the last one always carries ``finish_reason`` (a stream
    that ends without one gets a finish chunk: ``"tool_calls"`` after a tool call, else ``"stop"``). Close
    the iterator when stopping early (``async with contextlib.aclosing(stream_model(...)) as chunks:``) so
    the model's stream (an HTTP response, say) is closed at once rather than whenever it is collected.

    :raises ~threadmind.errors.ModelError: the model raised (any exception other than ``ModelError`` and
        ``TripWire`` is wrapped, with the original as ``__cause__``), yielded something that is not a
        :class:`ModelChunk`, or yielded a chunk after its finish chunk.
    """
    stream = getattr(model, "stream", None)
    if not callable(stream):
        try:
            response = await model.generate(request)
        except Exception as exc:
            error = _as_model_error(model, exc, "")
            if error is exc:
                raise
            raise error from exc
        if not isinstance(response, ModelResponse):
            raise ModelError(f"model {_model_name(model)} returned {type(response).__name__}, not ModelResponse")
        for chunk in response_chunks(response):
            yield chunk
        return
    try:
        source: Any = stream(request)
        if inspect.isawaitable(source):
            source = await source
        iterator: AsyncIterator[Any] = aiter(source)
    except Exception as exc:
        error = _as_model_error(model, exc, " to start its stream")
        if error is exc:
            raise
        raise error from exc
    finished = False
    saw_call = False
    try:
        while True:
            try:
                chunk = await anext(iterator)
            except StopAsyncIteration:
                break
            except Exception as exc:
                error = _as_model_error(model, exc, " while streaming")
                if error is exc:
                    raise
                raise error from exc
            if not isinstance(chunk, ModelChunk):
                raise ModelError(
                    f"model {_model_name(model)} streamed a {type(chunk).__name__}; a stream yields ModelChunks",
                    code="THREADMIND_MODEL_BAD_RESPONSE",
                )
            if finished:
                raise ModelError(
                    f"model {_model_name(model)} streamed a chunk after its finish chunk "
                    f"(finish_reason is set on the last chunk only)",
                    code="THREADMIND_MODEL_BAD_RESPONSE",
                )
            finished = chunk.finish_reason is not None
            saw_call = saw_call or chunk.tool_call is not None
            yield chunk
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
    if not finished:
        yield ModelChunk(finish_reason="tool_calls" if saw_call else "stop")


class _Collector:
    """Joins chunks into a response; what was received so far is readable at any point."""

    __slots__ = ("finish_reason", "reasoning", "text", "tool_calls", "usage")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def add(self, chunk: ModelChunk) -> None:
        if not isinstance(chunk, ModelChunk):
            raise ModelError(f"collect_response got a {type(chunk).__name__}, not a ModelChunk",
                             code="THREADMIND_MODEL_BAD_RESPONSE")
        if chunk.text:
            self.text.append(chunk.text)
        if chunk.reasoning:
            self.reasoning.append(chunk.reasoning)
        if chunk.tool_call is not None:
            self.tool_calls.append(chunk.tool_call)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage

    def response(self) -> ModelResponse:
        finish = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        return ModelResponse(text="".join(self.text) or None, tool_calls=list(self.tool_calls), finish_reason=finish,
                             usage=self.usage, reasoning="".join(self.reasoning) or None)


async def collect_response(chunks: AsyncIterable[ModelChunk] | Iterable[ModelChunk]) -> ModelResponse:
    """The :class:`ModelResponse` the chunks add up to: text and reasoning deltas joined (``None`` when
    empty), tool calls in order, the last ``finish_reason`` and ``usage``. ``tool_input`` deltas are
    previews of the complete ``tool_call`` chunks and add nothing. An async generator is closed afterwards.

    For any model, ``await collect_response(stream_model(model, request))`` equals what
    ``model.generate(request)`` returns (an empty text and ``None`` both collect to ``None``).

    :raises ~threadmind.errors.ModelError: an item is not a :class:`ModelChunk`; whatever the iterator raises
        propagates.
    """
    collector = _Collector()
    if isinstance(chunks, AsyncIterable):
        try:
            async for chunk in chunks:
                collector.add(chunk)
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
    else:
        for chunk in chunks:
            collector.add(chunk)
    return collector.response()
