"""Embedders: the protocol, the offline hash embedder, the offline WordLlama model (extra ``[local]``), the
OpenAI-compatible client, and how message text is chunked for them (and the embedding cache the index actor
keeps)."""

from __future__ import annotations

from .._public import present_as
from ._hash import HashEmbedder as HashEmbedder
from ._openai import OpenAIEmbedder as OpenAIEmbedder
from ._protocol import Embedder as Embedder
from ._protocol import Embeddings as Embeddings
from ._wordllama import WordLlamaEmbedder as WordLlamaEmbedder

__all__ = (
    "Embedder",
    "Embeddings",
    "HashEmbedder",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
)

present_as(globals(), __name__)
