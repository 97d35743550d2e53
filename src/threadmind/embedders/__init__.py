"""Embedders: the protocol, the offline hash embedder, and the OpenAI-compatible client."""

from __future__ import annotations

from ._hash import HashEmbedder as HashEmbedder
from ._openai import OpenAIEmbedder as OpenAIEmbedder
from ._protocol import Embedder as Embedder
from ._protocol import Embeddings as Embeddings
from ._resolve import resolve_embedder as resolve_embedder

__all__ = ("Embedder", "Embeddings", "HashEmbedder", "OpenAIEmbedder", "resolve_embedder")
