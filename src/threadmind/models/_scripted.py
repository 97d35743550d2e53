"""A scripted language model: the public fake for tests and demos (like httpx's ``MockTransport``)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeAlias

import anyio.lowlevel

from ..errors import ModelError
from ._protocol import ModelRequest, ModelResponse

__all__ = ("ScriptStep", "ScriptedModel")

_Answer: TypeAlias = "str | ModelResponse"
ScriptStep: TypeAlias = "_Answer | BaseException | Callable[[ModelRequest], _Answer | Awaitable[_Answer]]"


class ScriptedModel:
    """Answers with the scripted responses in order and records every request it received.

    Each step is a ``str`` (shorthand for ``ModelResponse(text=...)``), a :class:`ModelResponse`, an exception
    instance (raised for that call), or a callable given the request that returns (or awaits to) either of the
    first two. ``responses`` may be any iterable, including an endless generator; it is consumed lazily.

    :raises ~threadmind.errors.ModelError: when the script has run out.
    """

    def __init__(self, responses: Iterable[ScriptStep], *, model_id: str = "scripted") -> None:
        self._script: Iterator[ScriptStep] = iter(responses)
        self._model_id = model_id
        self.requests: list[ModelRequest] = []

    @property
    def model_id(self) -> str:
        """The id given at construction (``"scripted"`` by default)."""
        return self._model_id

    @property
    def calls(self) -> int:
        """How many times :meth:`generate` was called."""
        return len(self.requests)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Record ``request`` and return the next scripted response."""
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        try:
            step = next(self._script)
        except StopIteration:
            raise ModelError(
                f"ScriptedModel {self._model_id!r} ran out of responses on call {len(self.requests)}; "
                "script more responses",
                code="THREADMIND_MODEL_SCRIPT_EXHAUSTED",
            ) from None
        if isinstance(step, BaseException):
            raise step
        answer: object = step(request) if callable(step) else step
        if inspect.isawaitable(answer):
            answer = await answer
        return _as_response(answer)

    def __repr__(self) -> str:
        return f"ScriptedModel(model_id={self._model_id!r}, calls={len(self.requests)})"


def _as_response(answer: object) -> ModelResponse:
    if isinstance(answer, str):
        return ModelResponse(text=answer)
    if isinstance(answer, ModelResponse):
        return answer
    raise ModelError(
        f"a ScriptedModel step returned {type(answer).__name__}; return a str or a ModelResponse",
        code="THREADMIND_MODEL_SCRIPT_INVALID",
    )
