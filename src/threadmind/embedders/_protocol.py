"""The embedder protocol: a model id, an optional known dimension, and one async batch call."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = ("Embedder", "Embeddings")


class Embeddings(msgspec.Struct, frozen=True, kw_only=True):
    """``vectors`` is a float32 array of shape (len(texts), dimension); ``usage_tokens`` is billed input."""

    vectors: npt.NDArray[np.float32]
    usage_tokens: int = 0


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. ``dimension`` may be None until the first call reveals it."""

    @property
    def model_id(self) -> str:
        """A stable name for the model (used in cache keys)."""
        ...

    @property
    def dimension(self) -> int | None:
        """Vector length, when known in advance."""
        ...

    async def embed(self, texts: list[str]) -> Embeddings:
        """Embed a batch; the i-th row belongs to the i-th text."""
        ...
