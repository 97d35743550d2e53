"""What the parts of a Memory share: its options, its store, its actor system, its index and its counters.

``Memory`` (the facade) validates arguments and delegates; the modules beside it (recall, working memory,
clone, the processor pipeline, turns, titles, observational memory) each take this core and use only its
public attributes, so no part reaches into another's private state.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .._config import MemoryConfig, SemanticRecallConfig, memory_config_from, merge_config
from ..actors import ActorSystem
from ..errors import ConfigError, EmbeddingDimensionMismatch, ThreadmindError
from ..search._searcher import Searcher
from ..stores import Store, check_store
from ..stores._keywords import supports_keywords
from ..tokens import DefaultTokenCounter, TokenCounter
from ._gateway import StoreDoor

if TYPE_CHECKING:
    from ..actors._index_actor import IndexActor
    from ..embedders import Embedder
    from ..stores import VectorStore
    from ._observational import ObservationalMemoryEngine

__all__ = ("STORAGE_MISSING", "MemoryCore")

_log = logging.getLogger("threadmind.memory")

STORAGE_MISSING = (
    "Memory requires a storage provider to function. Add a storage configuration to Memory "
    "(for example storage=SQLiteStore('memory.db'))."
)
_MERGED_CONFIGS = 256  # per-call configs remembered by their JSON (most callers pass the same few each time)
_config_json = msgspec.json.Encoder().encode


class MemoryCore:
    """The state of one Memory (see the module docstring); built by ``Memory.__init__`` after validation."""

    def __init__(
        self,
        *,
        storage: Store | None,
        vector: VectorStore | None,
        embedder: Embedder | None,
        embedding_dimension: int | None,
        options: MemoryConfig,
        idle_timeout: float,
        token_counter: TokenCounter | None,
        max_actors: int,
        cache_ttl: float,
        lease_ttl: float = 30.0,
    ) -> None:
        self.options = options
        self.storage = check_store(storage) if storage is not None else None
        self.vector = vector
        self.embedder = embedder
        self.embedding_dimension = embedding_dimension
        self.tokens: TokenCounter = token_counter or DefaultTokenCounter()
        self.cache_ttl = cache_ttl
        self.index_name: str | None = None
        self._merged: OrderedDict[bytes, MemoryConfig] = OrderedDict()
        self._om: ObservationalMemoryEngine | None = None
        self.system: ActorSystem | None = None
        self._door: StoreDoor | None = None
        self._searcher: Searcher | None = None
        if self.storage is not None:
            self.system = ActorSystem(self.storage, cache_ttl=cache_ttl, idle_timeout=idle_timeout,
                                      max_actors=max_actors, lease_ttl=lease_ttl, index=self._make_index(),
                                      on_start=self._on_start)

    # the store and the actors --------------------------------------------------------------------
    def store(self) -> Store:
        """The configured store; ``ConfigError`` when there is none."""
        if self.storage is None:
            raise ConfigError(STORAGE_MISSING, code="THREADMIND_STORAGE_MISSING")
        return self.storage

    def actors(self) -> ActorSystem:
        """The running actor system (``ConfigError`` without a store; ``ThreadmindError`` when not running)."""
        self.store()
        assert self.system is not None
        self.system.check_running()
        return self.system

    @property
    def door(self) -> StoreDoor:
        """The one door of ``memory/`` to the store (``_gateway``)."""
        if self._door is None:
            self._door = StoreDoor(self)
        return self._door

    @property
    def index(self) -> IndexActor | None:
        """The index actor, when semantic recall has a vector store and an embedder."""
        return self.system.index if self.system is not None else None

    def running_index(self) -> IndexActor | None:
        """The index actor of the running actor system (None without semantic recall); raises as :meth:`actors`."""
        return self.actors().index

    def searcher(self) -> Searcher:
        """The retrieval pipeline over this memory's store (its keyword index, when it keeps one) and its index
        actor (when there is a vector store and an embedder), made once (both are fixed when the Memory is
        built); raises as :meth:`actors`."""
        index = self.actors().index
        if self._searcher is None:
            store = self.store()
            recall = self.options.semantic_recall_config or SemanticRecallConfig()
            self._searcher = Searcher(store if supports_keywords(store) else None, index,
                                      max_chunk_chars=recall.max_chunk_chars, store=store)
        return self._searcher

    def _make_index(self) -> IndexActor | None:
        if self.vector is None or self.embedder is None or self.storage is None:
            return None
        from ..actors._index_actor import IndexActor

        recall = self.options.semantic_recall_config or SemanticRecallConfig()
        return IndexActor(store=self.storage, vector=self.vector, embedder=self.embedder,
                          embedding_dimension=self.embedding_dimension, max_chunk_chars=recall.max_chunk_chars)

    async def _on_start(self) -> None:
        """Learn the index name now (so ``get_input_processors()`` stays synchronous) and bring a Mastra file's
        vectors over once."""
        index = self.index
        if index is None:
            return
        try:
            await index.dimension()
            self.index_name = await index.index_name()
        except ThreadmindError:
            _log.warning("embedder dimension probe failed at start; will retry on first use")
        if self.index_name is not None:
            from ..stores._interop import import_mastra_vectors

            try:
                await import_mastra_vectors(self.store(), index_names=[self.index_name])
            except ThreadmindError:
                _log.warning("could not import Mastra vectors into %s", self.index_name, exc_info=True)

    async def ensure_index_name(self) -> None:
        """Retry a failed embedder-dimension probe (raises its error); no-op once the index name is known."""
        index = self.index
        if index is not None and self.index_name is None:
            await index.dimension()
            self.index_name = await index.index_name()

    def declared_index_name(self) -> str | None:
        """The index name from what is known or declared (None: the embedder must be probed first).

        :raises EmbeddingDimensionMismatch: ``embedding_dimension`` contradicts the embedder's declared one.
        """
        if self.index_name is not None:
            return self.index_name
        if self.embedder is None:
            return None
        dim = self.embedder.dimension
        if dim is None:
            return None
        if self.embedding_dimension is not None and dim != self.embedding_dimension:
            raise EmbeddingDimensionMismatch(self.embedding_dimension, dim)
        return "memory_messages" if dim == 1536 else f"memory_messages_{dim}"

    # options -------------------------------------------------------------------------------------
    def call_config(self, memory_config: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
        """The instance options with a per-call ``memory_config`` merged over them (merged dicts are remembered)."""
        if memory_config is None or memory_config is self.options:
            return self.options
        if type(memory_config) is not dict:
            return merge_config(self.options, memory_config)
        try:  # the same per-call dict comes with every turn: merge it once (configs are frozen)
            key = _config_json(memory_config)
        except (TypeError, msgspec.EncodeError):  # holds a value JSON cannot express (a schema class, a model)
            return merge_config(self.options, memory_config)
        merged = self._merged.get(key)
        if merged is None:
            merged = self._merged[key] = merge_config(self.options, memory_config)
            if len(self._merged) > _MERGED_CONFIGS:
                self._merged.popitem(last=False)
        else:
            self._merged.move_to_end(key)
        return merged

    # observational memory ------------------------------------------------------------------------
    @property
    def observational(self) -> ObservationalMemoryEngine | None:
        """The observational-memory engine, once anything has needed it."""
        return self._om

    def observational_engine(self) -> ObservationalMemoryEngine:
        """The observational-memory engine (made on first use: records, in-flight observations)."""
        if self._om is None:
            from ._observational import ObservationalMemoryEngine

            self._om = ObservationalMemoryEngine(self)
        return self._om


def parse_options(options: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """``Memory(options=...)`` as a validated config."""
    return memory_config_from(options)


def ttl_seconds(cache_ttl: float | None) -> float:
    """``cache_ttl`` in seconds (None: trust caches until a write says otherwise)."""
    return math.inf if cache_ttl is None else float(cache_ttl)


Scope = Literal["thread", "resource"]
