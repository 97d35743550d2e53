"""WordLlamaEmbedder: a real embedding model that needs no network (the ``wordllama`` package, extra ``[local]``).

WordLlama (MIT) is a static word-embedding model distilled from a large language model's token embeddings; its
weights and tokenizer ship inside its wheel, so semantic recall finds by meaning offline, with no download and no
API key ("a flight to Japan" and "I want to fly to Tokyo" score 0.69, where the hash embedder sees few shared
letters). It embeds about 60 000 short texts a second on one core; a batch is embedded in a worker thread.

Vectors are L2-normalised here, not by the package: its own normalisation divides by zero for a text with no known
token (a NaN vector); such a text gets the zero vector, which the index treats as having no direction.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from ..errors import ConfigError, ValidationError
from ._protocol import Embeddings

__all__ = ("WordLlamaEmbedder",)

_DIMENSIONS = (64, 128, 256)  # the wheel ships the 256-d weights; 64 and 128 are its trained (Matryoshka) prefixes
_INSTALL = "WordLlamaEmbedder needs the wordllama package: pip install 'threadmind[local]'"


class WordLlamaEmbedder:
    """The WordLlama ``l2_supercat`` model, at ``dim`` dimensions (256, or its trained 64 and 128 prefixes), loaded
    once from the files in its wheel.

    :raises ConfigError: ``dim`` is not one of the trained sizes, or ``wordllama`` is not installed.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or dim not in _DIMENSIONS:
            raise ConfigError(f"WordLlamaEmbedder dim must be one of {', '.join(map(str, _DIMENSIONS))}, got {dim!r}")
        try:
            import wordllama  # noqa: F401
        except ImportError:
            raise ConfigError(_INSTALL, code="THREADMIND_EMBEDDER_MISSING") from None
        self._dim = dim
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return f"wordllama/l2_supercat-{self._dim}"

    @property
    def dimension(self) -> int:
        return self._dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import wordllama
                from wordllama import WordLlama

                # The weights and tokenizer are files of the wheel: never downloaded.
                self._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, dim=256,
                                             trunc_dim=None if self._dim == 256 else self._dim, disable_download=True)
            return self._model

    def _embed_now(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        # Its tokenizer takes valid Unicode only: a lone surrogate becomes U+FFFD.
        clean = [t.encode("utf-8", "replace").decode("utf-8") if not t.isascii() else t for t in texts]
        raw = np.asarray(self._load().embed(clean, norm=False), dtype=np.float32).reshape(len(texts), self._dim)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        unit = np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0)
        unit[~np.isfinite(unit).all(axis=1)] = 0.0
        return np.ascontiguousarray(unit, dtype=np.float32)

    async def embed(self, texts: list[str]) -> Embeddings:
        """Unit vectors of ``texts`` (the zero vector for a text with no known word), computed in a worker thread.

        :raises ValidationError: ``texts`` is not a list of strings.
        """
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValidationError("embed() takes a list of strings")
        if not texts:
            return Embeddings(vectors=np.zeros((0, self._dim), dtype=np.float32))
        vectors = await anyio.to_thread.run_sync(self._embed_now, texts)
        return Embeddings(vectors=vectors, usage_tokens=sum(len(t.split()) for t in texts))
