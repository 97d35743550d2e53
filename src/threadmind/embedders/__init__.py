"""Embedders: the protocol, the offline hash embedder, the offline WordLlama model (extra ``[local]``), the
OpenAI-compatible client, and how message text is chunked for them (and the embedding cache the index actor
keeps)."""

from __future__ import annotations

from ._cache import EmbeddingCache as EmbeddingCache
from ._chunking import chunk_text as chunk_text
from ._chunking import is_blank as is_blank
from ._chunking import message_text as message_text
from ._hash import HashEmbedder as HashEmbedder
from ._openai import OpenAIEmbedder as OpenAIEmbedder
from ._protocol import Embedder as Embedder
from ._protocol import Embeddings as Embeddings
from ._resolve import resolve_embedder as resolve_embedder
from ._wordllama import WordLlamaEmbedder as WordLlamaEmbedder

__all__ = (
    "Embedder",
    "EmbeddingCache",
    "Embeddings",
    "HashEmbedder",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
    "chunk_text",
    "is_blank",
    "message_text",
    "resolve_embedder",
)
