"""A scripted language model: the public fake for tests and demos (like httpx's ``MockTransport``)."""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeAlias

import anyio.lowlevel

from ..errors import ConfigError, ModelError
from ._protocol import ModelChunk, ModelRequest, ModelResponse
from ._stream import collect_response

__all__ = ("ScriptStep", "ScriptedModel", "word_deltas")

_Answer: TypeAlias = "str | ModelResponse"
_Streamed: TypeAlias = "AsyncIterable[ModelChunk | str]"
ScriptStep: TypeAlias = (
    "_Answer | _Streamed | BaseException | Callable[[ModelRequest], _Answer | Awaitable[_Answer] | _Streamed]"
)

_WORD = re.compile(r"\s*\S+")


def word_deltas(text: str) -> list[str]:
    """``text`` cut into one delta per word, each word with the whitespace before it (trailing whitespace
    goes with the last word), so the deltas joined are ``text`` exactly: ``"Hello  big\\nworld"`` →
    ``["Hello", "  big", "\\nworld"]``. Whitespace-only text is one delta; empty text none."""
    deltas = _WORD.findall(text)
    rest = len(text) - sum(map(len, deltas))
    if rest:
        if deltas:
            deltas[-1] += text[-rest:]
        else:
            deltas.append(text)
    return deltas


class _RequestLog(list[ModelRequest]):
    """A list that keeps only the newest ``limit`` requests appended to it (all of them when ``None``)."""

    def __init__(self, limit: int | None) -> None:
        super().__init__()
        self.limit = limit

    def append(self, request: ModelRequest, /) -> None:
        super().append(request)
        if self.limit is not None and len(self) > self.limit:
            del self[: len(self) - self.limit]


class ScriptedModel:
    """Answers with the scripted responses in order and records every request it received.

    Each step is a ``str`` (shorthand for ``ModelResponse(text=...)``), a :class:`ModelResponse`, an exception
    instance (raised for that call), an async iterable of :class:`ModelChunk` s or ``str`` text deltas (a
    stream, e.g. an async generator that waits on an ``anyio.Event`` between chunks to pace it), or a
    callable given the request that returns (or awaits to) a str or a ModelResponse, or returns a stream
    (an async generator function). ``responses`` may be any iterable, including an endless generator; it is
    consumed lazily, one step per :meth:`generate` or :meth:`stream` call.

    :meth:`stream` sends a scripted response as its reasoning and then its text one word per delta (see
    :func:`word_deltas`; the deltas joined are the text exactly), then each tool call, then a finish chunk
    with the finish reason and usage. :meth:`generate` on a scripted stream returns the chunks joined. So
    both calls give equal responses for equal scripts.

    ``requests`` holds the newest ``max_requests`` requests (``None``: all of them), so a long-running
    server can keep a scripted model without its log growing; ``calls`` counts every call.

    :raises ~threadmind.errors.ModelError: when the script has run out.
    :raises ~threadmind.errors.ConfigError: ``max_requests`` is not ``None`` or a non-negative integer.
    """

    def __init__(self, responses: Iterable[ScriptStep], *, model_id: str = "scripted",
                 max_requests: int | None = 1000) -> None:
        if max_requests is not None and (
                isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 0):
            raise ConfigError(f"ScriptedModel: max_requests must be None or a non-negative integer, "
                              f"got {max_requests!r}")
        self._script: Iterator[ScriptStep] = iter(responses)
        self._model_id = model_id
        self._calls = 0
        self.requests: list[ModelRequest] = _RequestLog(max_requests)

    @property
    def model_id(self) -> str:
        """The id given at construction (``"scripted"`` by default)."""
        return self._model_id

    @property
    def calls(self) -> int:
        """How many times :meth:`generate` or :meth:`stream` was called."""
        return self._calls

    def _next_step(self, request: ModelRequest) -> ScriptStep:
        self._calls += 1
        self.requests.append(request)
        try:
            return next(self._script)
        except StopIteration:
            raise ModelError(
                f"ScriptedModel {self._model_id!r} ran out of responses on call {self._calls}; "
                "script more responses",
                code="THREADMIND_MODEL_SCRIPT_EXHAUSTED",
            ) from None

    @staticmethod
    async def _resolve(step: ScriptStep, request: ModelRequest) -> ModelResponse | AsyncIterable[Any]:
        if isinstance(step, BaseException):
            raise step
        answer: object = step(request) if callable(step) else step
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, AsyncIterable):
            return answer
        return _as_response(answer)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Record ``request`` and return the next scripted response (a scripted stream joined)."""
        await anyio.lowlevel.checkpoint()
        answer = await self._resolve(self._next_step(request), request)
        if isinstance(answer, ModelResponse):
            return answer
        return await collect_response(_chunks_of(answer))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
        """Record ``request`` and stream the next scripted response (see the class docstring)."""
        await anyio.lowlevel.checkpoint()
        answer = await self._resolve(self._next_step(request), request)
        if isinstance(answer, ModelResponse):
            for chunk in _response_stream(answer):
                yield chunk
            return
        chunks = _chunks_of(answer)
        finished = saw_call = False
        try:
            async for chunk in chunks:
                finished = chunk.finish_reason is not None
                saw_call = saw_call or chunk.tool_call is not None
                yield chunk
        finally:
            await chunks.aclose()
        if not finished:
            yield ModelChunk(finish_reason="tool_calls" if saw_call else "stop")

    def __repr__(self) -> str:
        return f"ScriptedModel(model_id={self._model_id!r}, calls={self._calls})"


def _response_stream(response: ModelResponse) -> Iterator[ModelChunk]:
    for delta in word_deltas(response.reasoning or ""):
        yield ModelChunk(reasoning=delta)
    for delta in word_deltas(response.text or ""):
        yield ModelChunk(text=delta)
    for call in response.tool_calls:
        yield ModelChunk(tool_call=call)
    yield ModelChunk(finish_reason=response.finish_reason, usage=response.usage)


async def _chunks_of(items: AsyncIterable[Any]) -> AsyncGenerator[ModelChunk, None]:
    """A scripted stream's items as chunks (a ``str`` is a text delta); the scripted iterator is closed after."""
    iterator = aiter(items)
    try:
        async for item in iterator:
            if isinstance(item, str):
                yield ModelChunk(text=item)
            elif isinstance(item, ModelChunk):
                yield item
            else:
                raise ModelError(
                    f"a ScriptedModel stream yielded {type(item).__name__}; yield ModelChunks or str deltas",
                    code="THREADMIND_MODEL_SCRIPT_INVALID",
                )
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


def _as_response(answer: object) -> ModelResponse:
    if isinstance(answer, str):
        return ModelResponse(text=answer)
    if isinstance(answer, ModelResponse):
        return answer
    raise ModelError(
        f"a ScriptedModel step returned {type(answer).__name__}; return a str or a ModelResponse "
        "(or a stream of ModelChunks)",
        code="THREADMIND_MODEL_SCRIPT_INVALID",
    )
