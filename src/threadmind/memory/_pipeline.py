"""The memory's processors for a run, in the reference order (§3.0), skipping ids the caller configured.

Input: ``memory-input-filter``, ``working-memory``, ``message-history`` (or ``observational-memory``),
``semantic-recall``, ``memory-token-limiter``, ``working-memory-state`` (in place of ``working-memory`` with
``useStateSignals``). Output: ``semantic-recall``, ``message-history`` (or
``observational-memory``). Every processor gets the Memory's ``ActorAccess``, so its reads and the turn's save
go through the thread's actor; the token limiter's boundary is a read-modify-write of the thread's metadata
run by the actor too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig, ObservationalMemoryConfig
from .._history_window import BOUNDARY_KEY, Boundary
from ..actors._system import current_fence
from ..actors._thread_actor import PatchThreadMetadata
from ..codecs import Thread
from ..errors import ConfigError, EmbedderError
from ..processors import (
    MemoryInputFilter,
    MemoryTokenLimiter,
    MessageHistory,
    ObservationalMemory,
    SemanticRecall,
    WorkingMemory,
    WorkingMemoryState,
)
from ..processors._working_memory_text import template_for
from ..tracing import operation_span
from ._gateway import STORAGE_MISSING, ActorAccess, RoutedIndex
from ._validation import configured_ids

if TYPE_CHECKING:
    from ._core import MemoryCore

__all__ = ("Pipeline",)


class Pipeline:
    """Builds a Memory's processors (one per Memory; holds its processor access and index handle)."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core
        self.access = ActorAccess(core.door)
        self._index = RoutedIndex(core.door)

    def input_processors(self, configured: Sequence[object], config: MemoryConfig) -> list[object]:
        """The memory's input processors in the reference order, skipping ids already ``configured``."""
        core = self._core
        taken = configured_ids(configured)
        history_on = config.history_enabled
        om = config.observational_memory_config
        access = self.access
        out: list[object] = []
        if core.storage is None and (history_on or config.working_memory.enabled):
            code = "MESSAGE_HISTORY_MISSING_STORAGE_ADAPTER" if history_on else "WORKING_MEMORY_MISSING_STORAGE_ADAPTER"
            raise ConfigError(STORAGE_MISSING, code=code)
        if ("message-history" in taken or om is not None or history_on) and "memory-input-filter" not in taken:
            out.append(MemoryInputFilter(access, retain_full_input=config.retain_full_input))
        if config.working_memory.enabled and not config.working_memory.state_signals \
                and "working-memory" not in taken:
            wm = config.working_memory
            out.append(WorkingMemory(access, wm.template, wm.scope, config.read_only or not wm.managed_by_agent,
                                     schema=wm.schema,
                                     template_provider=lambda c: template_for(c.working_memory)))
        if history_on and om is None and "message-history" not in taken:
            out.append(MessageHistory(access, config.max_messages, config.message_history, token_counter=core.tokens))
        if config.semantic_recall_config is not None and "semantic-recall" not in taken:
            out.append(self._semantic(config))
        history = config.message_history
        if history_on and history is not None and om is None and "memory-token-limiter" not in taken:
            out.append(MemoryTokenLimiter(history.max_tokens, history.remove_tokens, token_counter=core.tokens,
                                          on_trim=self._write_boundary))
        if om is not None and "observational-memory" not in taken:
            out.append(self._observational(om))
        wm = config.working_memory
        if wm.enabled and wm.state_signals and WorkingMemoryState.id not in taken:
            out.append(WorkingMemoryState(access, wm.scope, lambda c: template_for(c.working_memory),
                                          self._write_state_tracking))
        return out

    def output_processors(self, configured: Sequence[object], config: MemoryConfig) -> list[object]:
        """The memory's output processors: ``semantic-recall`` then ``message-history``."""
        taken = configured_ids(configured)
        out: list[object] = []
        if config.semantic_recall_config is not None and "semantic-recall" not in taken:
            out.append(self._semantic(config))
        if config.history_enabled and config.observational_memory_config is None and "message-history" not in taken:
            out.append(MessageHistory(self.access, config.max_messages, config.message_history,
                                      token_counter=self._core.tokens))
        om = config.observational_memory_config
        if om is not None and "observational-memory" not in taken:
            out.append(self._observational(om))
        return out

    def _semantic(self, config: MemoryConfig) -> SemanticRecall:
        core = self._core
        recall = config.semantic_recall_config
        assert recall is not None
        keyword_only = recall.search == "keyword"
        if core.vector is None and not keyword_only:
            raise ConfigError("semantic recall needs a vector store", code="SEMANTIC_RECALL_MISSING_VECTOR_ADAPTER")
        if core.embedder is None and not keyword_only:
            raise ConfigError("semantic recall needs an embedder", code="SEMANTIC_RECALL_MISSING_EMBEDDER")
        name = core.door.declared_index_name()
        if name is None and core.door.index is not None:
            raise EmbedderError(
                "Failed to determine the embedder's output dimension. Semantic recall cannot safely select a "
                "vector index until the embedder returns a usable embedding. Check that the embedder is "
                "reachable and correctly configured.",
                code="MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED",
            )
        return SemanticRecall(self.access, self._index, top_k=recall.top_k, message_range=recall.message_range,
                              scope=recall.scope, threshold=recall.threshold, index_name=name,
                              search=recall.search, keyword_weight=recall.keyword_weight,
                              metadata_filter=recall.metadata_filter())

    def _observational(self, om: ObservationalMemoryConfig) -> ObservationalMemory:
        """The ``observational-memory`` processor; its engine (records, in-flight observations) lives per memory."""
        core = self._core
        if core.storage is None:
            raise ConfigError(STORAGE_MISSING, code="THREADMIND_STORAGE_MISSING")
        return ObservationalMemory(self.access, core.door.observational_engine(), om)

    async def _write_state_tracking(self, thread_id: str,
                                    change: Callable[[Mapping[str, Any] | None], Mapping[str, Any]]) -> None:
        """Record a state signal's tracking in the thread's metadata, read and written by its actor."""
        await self._core.door.ask(thread_id, PatchThreadMetadata(
            lambda thread: change(thread.metadata), "state_signal", current_fence(thread_id)))

    async def _write_boundary(self, thread_id: str, advance: Callable[[Thread], Boundary | None]) -> Thread | None:
        """Serialized read-modify-write of the token-limiter boundary in thread metadata."""
        def patch(thread: Thread) -> Mapping[str, Any] | None:
            boundary = advance(thread)
            return None if boundary is None else {BOUNDARY_KEY: boundary.to_metadata()}

        with operation_span("threadmind.memory.advance_boundary", "update_memory", thread_id=thread_id):
            updated: Thread | None = await self._core.door.ask(
                thread_id, PatchThreadMetadata(patch, "advance_boundary", current_fence(thread_id)))
        return updated
