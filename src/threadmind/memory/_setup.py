"""The checks ``Memory(...)`` runs before it builds anything: its runtime keywords, and the parts semantic recall needs
(the vector store as a ``VectorStore``, the embedder resolved from a model string, the index parameters adopted)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from .._config import MemoryConfig
from ..errors import ConfigError
from ..stores._keywords import supports_keywords
from ..stores._vectors._contract import as_vector_store

if TYPE_CHECKING:
    from ..embedders import Embedder
    from ..stores import Store, VectorStore

__all__ = ("check_runtime", "recall_parts")

_log = logging.getLogger("threadmind.memory")


def check_runtime(*, cache_ttl: object, idle_timeout: object, max_actors: object, lease_ttl: object) -> None:
    """``ConfigError`` naming the first runtime keyword out of its range."""
    if cache_ttl is not None and (isinstance(cache_ttl, bool) or not isinstance(cache_ttl, (int, float))
                                  or not cache_ttl >= 0):
        raise ConfigError(f"cache_ttl must be None or a number of seconds >= 0, got {cache_ttl!r}")
    if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float)) or not idle_timeout >= 0:
        raise ConfigError(f"idle_timeout must be a number of seconds >= 0, got {idle_timeout!r}")
    if isinstance(max_actors, bool) or not isinstance(max_actors, int) or max_actors < 1:
        raise ConfigError(f"max_actors must be an integer >= 1, got {max_actors!r}")
    if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, (int, float)) or not 0 < lease_ttl < 1e9:
        raise ConfigError(f"lease_ttl must be a number of seconds > 0, got {lease_ttl!r}")


def recall_parts(parsed: MemoryConfig, storage: Store | None, vector: VectorStore | Literal[False] | None,
                 embedder: Embedder | str | None,
                 embedding_dimension: int | None) -> tuple[VectorStore | None, Embedder | None]:
    """The vector store and the embedder semantic recall runs with, checked against the options (``ConfigError``
    naming what is missing); the index parameters of ``semanticRecall.indexConfig`` adopted by the store."""
    if embedding_dimension is not None and (
        isinstance(embedding_dimension, bool) or not isinstance(embedding_dimension, int) or embedding_dimension < 1
    ):
        raise ConfigError("embedding_dimension must be a positive integer")
    if isinstance(embedder, str):
        from ..embedders._resolve import resolve_embedder

        embedder = resolve_embedder(embedder)
    vector_store = as_vector_store(vector) if vector else None  # ConfigError naming what is missing
    recall = parsed.semantic_recall_config
    if recall is not None and recall.search == "keyword":
        if storage is not None and not supports_keywords(storage):
            raise ConfigError(f"semanticRecall.search 'keyword' needs a store with a keyword index; "
                              f"{type(storage).__name__} has none (SQLiteStore, PostgresStore and InMemoryStore "
                              "have one)", code="THREADMIND_CONFIG_KEYWORDS")
    elif recall is not None:
        if vector_store is None:
            raise ConfigError("Semantic recall requires a vector store to be configured (or "
                              "semanticRecall.search: 'keyword', which needs none).",
                              code="THREADMIND_CONFIG_VECTOR")
        if embedder is None:
            raise ConfigError("Semantic recall requires an embedder to be configured (or "
                              "semanticRecall.search: 'keyword', which needs none).",
                              code="THREADMIND_CONFIG_EMBEDDER")
        if recall.search == "hybrid" and storage is not None and not supports_keywords(storage):
            _log.warning("%s keeps no keyword index: hybrid recall ranks by vectors only", type(storage).__name__)
    if recall is not None and vector_store is not None:
        # The HNSW parameters come from the vector store, or from semanticRecall.indexConfig where the store was
        # left at its defaults (per-call configs cannot rebuild the index).
        wanted = recall.index_config
        vector_store.adopt(wanted.metric, wanted.hnsw_m, wanted.hnsw_ef_construction, wanted.ef_search)
        adopt_index = getattr(vector_store, "adopt_index", None)  # the index kind, where the store has a choice
        if callable(adopt_index):
            adopt_index(wanted.type, wanted.lists)
    return vector_store, embedder
