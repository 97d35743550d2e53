"""Where a step's chunks come from: the model's stream, or one ``generate`` call cut into chunks."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from ..errors import ModelError, ThreadmindError, TripWire
from ..models import LanguageModel, ModelChunk, ModelRequest, ModelResponse, stream_model
from ..tracing import operation_span

__all__ = ("model_chunks",)


def model_chunks(model: LanguageModel, request: ModelRequest, *, streaming: bool) -> AsyncGenerator[ModelChunk, None]:
    """One model step as chunks: streamed (``stream_model``), or one ``generate`` call (``Agent.generate``).

    :raises ~threadmind.errors.ModelError: the model failed (any other exception is wrapped).
    """
    return _streamed(model, request) if streaming else _generated(model, request)


async def _streamed(model: LanguageModel, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
    with operation_span("threadmind.model.stream", "chat", gen_ai__request__model=model.model_id):
        async with aclosing(stream_model(model, request)) as chunks:
            async for chunk in chunks:
                yield chunk


async def _generated(model: LanguageModel, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
    """One ``generate`` call as chunks: reasoning, text, each tool call, then the finish chunk."""
    with operation_span("threadmind.model.generate", "chat", gen_ai__request__model=model.model_id):
        try:
            response = await model.generate(request)
        except ThreadmindError as exc:
            if isinstance(exc, (ModelError, TripWire)):
                raise
            raise ModelError(f"model {model.model_id} failed: {exc.message}") from exc
        except Exception as exc:
            raise ModelError(f"model {model.model_id} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(response, ModelResponse):
        raise ModelError(f"model {model.model_id} returned {type(response).__name__}, not ModelResponse")
    if response.reasoning:
        yield ModelChunk(reasoning=response.reasoning)
    if response.text:
        yield ModelChunk(text=response.text)
    for tool_call in response.tool_calls:
        yield ModelChunk(tool_call=tool_call)
    yield ModelChunk(finish_reason=response.finish_reason, usage=response.usage)
