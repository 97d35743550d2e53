"""A Memory's configuration: its options, its store, vector store and embedder, its token counter, its TTLs.

``Memory`` (the facade) validates arguments and delegates; the modules beside it (recall, working memory, clone, the
processor pipeline, turns, titles, observational memory) read their configuration here and reach the store and the
actors through ``door`` (``_gateway.Door``), the one door of ``memory/`` to both, which the core builds.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .._config import MemoryConfig, memory_config_from, merge_config
from ..stores import Store, check_store
from ..tokens import DefaultTokenCounter, TokenCounter
from ._gateway import Door

if TYPE_CHECKING:
    from ..embedders import Embedder
    from ..stores import VectorStore

__all__ = ("MemoryCore",)
_MERGED_CONFIGS = 256  # per-call configs remembered by their JSON (most callers pass the same few each time)
_config_json = msgspec.json.Encoder().encode


class MemoryCore:
    """The configuration of one Memory (see the module docstring); built by ``Memory.__init__`` after validation,
    with the door the rest of ``memory/`` reaches the store and the actors by."""

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
        self._merged: OrderedDict[bytes, MemoryConfig] = OrderedDict()
        #: The one door of ``memory/`` to the store and the actors (``_gateway``).
        self.door = Door(self, idle_timeout=idle_timeout, max_actors=max_actors, lease_ttl=lease_ttl)

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


def parse_options(options: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """``Memory(options=...)`` as a validated config."""
    return memory_config_from(options)


def ttl_seconds(cache_ttl: float | None) -> float:
    """``cache_ttl`` in seconds (None: trust caches until a write says otherwise)."""
    return math.inf if cache_ttl is None else float(cache_ttl)


Scope = Literal["thread", "resource"]
