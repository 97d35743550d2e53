"""``Agent``: instructions, a model, tools, processors and optionally memory; ``generate`` and ``stream`` run
one turn each through the same protocol (``_run.run_turn``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ValidationError
from ..models import LanguageModel, resolve_model
from ..tools import Tool
from ._input import AgentInput, RunCall, checked_processors
from ._results import GenerateResult
from ._run import RunState, run_turn
from ._stream import AgentStream

if TYPE_CHECKING:
    from .._config import MemoryConfig
    from ..memory import Memory

__all__ = ("Agent",)

OnAbort = Literal["save", "discard"]


class Agent:
    """An agent: instructions, a model, tools, processors, and optionally memory.

    ``on_abort``: what a stream whose consumer stops early keeps (``"save"``: the input and the partial reply,
    marked ``content.metadata.aborted``; ``"discard"``: nothing).
    """

    def __init__(
        self,
        name: str,
        instructions: str,
        model: LanguageModel | str,
        *,
        memory: Memory | None = None,
        tools: Sequence[Tool] | None = None,
        input_processors: Sequence[object] = (),
        output_processors: Sequence[object] = (),
        on_abort: OnAbort = "save",
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValidationError(f"Agent `name` must be a non-empty string, got {name!r}")
        if not isinstance(instructions, str):
            raise ValidationError(f"Agent `instructions` must be a string, got {type(instructions).__name__}")
        if not isinstance(model, str) and not (isinstance(getattr(model, "model_id", None), str)
                                               and callable(getattr(model, "generate", None))):
            raise ValidationError("Agent `model` must be a LanguageModel (a `model_id` and an async `generate`) "
                                  f"or a model string such as 'openai/gpt-4o-mini', got {type(model).__name__}")
        if memory is not None:
            from ..memory import Memory

            if not isinstance(memory, Memory):
                raise ValidationError(f"Agent `memory` must be a Memory, got {type(memory).__name__}")
        if on_abort not in ("save", "discard"):
            raise ValidationError(f"Agent `on_abort` must be 'save' or 'discard', got {on_abort!r}")
        self.name = name
        self.instructions = instructions
        self.model: LanguageModel = resolve_model(model) if isinstance(model, str) else model
        self.memory = memory
        if tools is not None and (isinstance(tools, Mapping) or not isinstance(tools, Sequence)):
            raise ValidationError("Agent `tools` must be a list of Tool objects")
        self.tools: list[Tool] = list(tools or ())
        for tool in self.tools:
            if not isinstance(tool, Tool):
                raise ValidationError(f"Agent `tools` must contain Tool objects, not {type(tool).__name__}")
        self.input_processors = checked_processors(input_processors, "input_processors")
        self.output_processors = checked_processors(output_processors, "output_processors")
        self.on_abort: OnAbort = on_abort

    async def generate(
        self,
        input: AgentInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        memory_options: MemoryConfig | Mapping[str, Any] | None = None,
        max_steps: int = 5,
    ) -> GenerateResult:
        """Run one turn and return the response (``messages`` are the run's response messages).

        A cancelled ``generate`` persists nothing.

        :raises ValidationError: bad input, or memory without both ids.
        :raises ThreadBusy: ``thread_concurrency="reject"`` and another turn holds the thread.
        :raises ResourceMismatch: the thread belongs to another resource.
        :raises ModelError: the model failed (nothing is persisted).
        """
        state = RunState()
        run = run_turn(self, RunCall(input, thread_id, resource_id, memory_options, max_steps), state,
                       streaming=False, save_on_abort=False)
        try:
            async for _ in run:
                pass
        finally:
            await run.aclose()
        assert state.result is not None
        return state.result

    def stream(
        self,
        input: AgentInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        memory_options: MemoryConfig | Mapping[str, Any] | None = None,
        max_steps: int = 5,
    ) -> AgentStream:
        """Run one turn as a stream of events (see :class:`AgentStream`); the arguments are ``generate``'s.

        Nothing runs until the stream is entered (or iterated); refusals are raised then.
        """
        state = RunState()
        run = run_turn(self, RunCall(input, thread_id, resource_id, memory_options, max_steps), state,
                       streaming=True, save_on_abort=self.on_abort == "save")
        return AgentStream(run, state)
