"""One agent turn on a thread: the protocol every runner (``generate``, ``stream``) follows.

``Memory.turn(...)`` is the seam: ``async with memory.turn(thread_id, resource_id, ...) as turn`` takes the
thread per ``thread_concurrency`` (``enqueue`` waits for the turn before it, ``reject`` raises ``ThreadBusy``),
makes sure the thread exists and belongs to the resource, merges the per-call options once, and builds the
memory's processors and tools for the run. The runner then runs ``turn.input_processors`` before its own,
the model/tool loop, its own output processors and ``turn.output_processors`` (which persist the turn), and
calls ``turn.finish(model, message_list)`` for the work that follows a turn (the title; the Observer's
fallback model). Leaving the block gives the thread back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig
from ..codecs import Thread
from ..errors import EmbedderError, MessageIdTaken
from ..processors import MemoryAccess, MessageList, RequestContext
from ..tools import Tool
from ._recall_tool import recall_tool
from ._threads import ensure_thread
from ._titles import TITLE_INSTRUCTIONS, generate_title
from ._working_memory import working_memory_tool

if TYPE_CHECKING:
    from ..models import LanguageModel
    from ._core import MemoryCore
    from ._pipeline import Pipeline

__all__ = ("Turn", "open_turn")

_log = logging.getLogger("threadmind.memory")


class _Skipped:
    """Stands in for a memory processor to leave out of one run (memory skips ids already configured)."""

    def __init__(self, processor_id: str) -> None:
        self.id = processor_id


_NO_SEMANTIC_RECALL = _Skipped("semantic-recall")


class Turn:
    """What a runner gets for one turn (see the module docstring). Built by ``Memory.turn``."""

    def __init__(self, core: MemoryCore, thread: Thread, resource_id: str, config: MemoryConfig,
                 input_processors: list[object], output_processors: list[object], tools: dict[str, Tool],
                 stored_input: frozenset[str] = frozenset()) -> None:
        self._core = core
        self._stored_input = stored_input
        self.thread = thread
        self.resource_id = resource_id
        #: The memory's options with the per-call ones merged over them.
        self.config = config
        #: Memory's input processors, to run before the runner's own.
        self.input_processors = input_processors
        #: Memory's output processors, to run after the runner's own (they persist the turn).
        self.output_processors = output_processors
        #: Memory's tools for this run (``updateWorkingMemory`` when working memory is writable).
        self.tools = tools

    def order_input(self, message_list: MessageList) -> None:
        """Date the turn's new input now that the turn holds the thread: after everything stored in it, whatever
        time a client sent (SPEC §11). An input message already stored in this thread (a client's echo) keeps its
        stored time."""
        stored = self._stored_input
        message_list.date_now(m.id for m in message_list.get_input() if m.id not in stored)

    def context(self) -> RequestContext:
        """A fresh request context for the run's processors."""
        return RequestContext(thread=self.thread, resource_id=self.resource_id, memory_config=self.config)

    def finish(self, model: LanguageModel, message_list: MessageList) -> None:
        """After a turn that ran to its end: note the Observer's fallback model and start the title in the
        background (``aclose()`` waits for it)."""
        title = self._title_job(model, message_list)
        if title is not None:
            job, args = title
            self._core.door.spawn(job, *args)

    async def finish_with_title(self, model: LanguageModel, message_list: MessageList) -> str | None:
        """As :meth:`finish`, but generate the title now and return it (None: no new title) — for a stream that
        sends the title before it finishes (``generateTitle.emitEvent``)."""
        title = self._title_job(model, message_list)
        if title is None:
            return None
        job, args = title
        result: str | None = await job(*args)
        return result

    def _title_job(self, model: LanguageModel, message_list: MessageList) -> tuple[
            Callable[..., Coroutine[Any, Any, str | None]], tuple[Any, ...]] | None:
        core, config, thread_id = self._core, self.config, self.thread.id
        engine = core.door.observational
        if engine is not None and config.observational_memory_config is not None:
            engine.note_agent_model(thread_id, self.resource_id, model)
        title = config.generate_title_config
        if title is None or config.read_only or self.thread.title:
            return None
        own = [m for m in message_list.get_all() if m.thread_id in (None, thread_id)]
        if len(own) < title.min_messages or not any(m.role == "user" for m in own):
            return None
        title_model = title.model or model
        if isinstance(title_model, str):
            from ..models import resolve_model

            title_model = resolve_model(title_model)
        return generate_title, (core, title_model, thread_id, own, title.instructions or TITLE_INSTRUCTIONS)


@asynccontextmanager
async def open_turn(
    core: MemoryCore,
    pipeline: Pipeline,
    thread_id: str,
    resource_id: str,
    memory_options: MemoryConfig | Mapping[str, Any] | None,
    input_processors: Sequence[object],
    output_processors: Sequence[object],
    input_ids: Sequence[str] = (),
) -> AsyncIterator[Turn]:
    """Hold the thread for one turn and prepare it (``Memory.turn``)."""
    config = core.call_config(memory_options)
    stored_input: frozenset[str] = frozenset()

    async def admit() -> None:  # before a missing thread is created: a refused request leaves nothing
        nonlocal stored_input
        stored_input = await _stored_input(pipeline.access, thread_id, input_ids)

    async with core.door.turn(thread_id, config.thread_concurrency):
        thread = await ensure_thread(core, thread_id, resource_id, admit if input_ids else None)
        inputs, outputs = await _processors(core, pipeline, config, input_processors, output_processors)
        tools: dict[str, Tool] = {}
        for tool in (working_memory_tool(core, config), recall_tool(config)):
            if tool is not None:
                tools[tool.name] = tool
        yield Turn(core, thread, resource_id, config, inputs, outputs, tools, stored_input)


async def _stored_input(access: MemoryAccess, thread_id: str, input_ids: Sequence[str]) -> frozenset[str]:
    """The input ids already stored in ``thread_id`` (a client's echo of its history).

    :raises MessageIdTaken: an id belongs to another thread (its public message does not name that thread).
    """
    stored: set[str] = set()
    for message in await access.get_messages_by_id(list(dict.fromkeys(input_ids))):
        if message.thread_id != thread_id:
            raise MessageIdTaken(message.id, message.thread_id or "", thread_id)
        stored.add(message.id)
    return frozenset(stored)


async def _processors(
    core: MemoryCore, pipeline: Pipeline, config: MemoryConfig, configured_inputs: Sequence[object],
    configured_outputs: Sequence[object],
) -> tuple[list[object], list[object]]:
    """Memory's processors for the run. Without the embedder's dimension no index can be chosen: the probe is
    retried, and if the embedder is still unreachable the turn goes on without semantic recall (SPEC §9: an
    embedder outage never fails the whole turn; ``reindex()`` embeds what it saved once the embedder is back).
    """
    try:
        return (pipeline.input_processors(configured_inputs, config),
                pipeline.output_processors(configured_outputs, config))
    except EmbedderError:
        try:
            await core.door.ensure_index_name()
        except EmbedderError:
            _log.warning("embedder unreachable and its dimension unknown: this turn runs without semantic recall")
            return (pipeline.input_processors([*configured_inputs, _NO_SEMANTIC_RECALL], config),
                    pipeline.output_processors([*configured_outputs, _NO_SEMANTIC_RECALL], config))
        return (pipeline.input_processors(configured_inputs, config),
                pipeline.output_processors(configured_outputs, config))

