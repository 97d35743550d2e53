"""HashEmbedder: the deterministic signed character-trigram hashing embedder of ``bench/WORKLOAD.md`` §7.

It needs no model files and no network, so it is the default for tests and the demo. The algorithm matches
the local embedder that wrote the Mastra 1.71 fixture (at dimension 16), so its vectors interoperate.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, ValidationError
from ._protocol import Embeddings

__all__ = ("HashEmbedder",)

_FNV_OFFSET = np.uint32(2166136261)
_FNV_PRIME = np.uint32(16777619)

#: Batches larger than this are embedded in a worker thread so the event loop stays free.
_THREAD_THRESHOLD = 64
#: Texts hashed per numpy pass; larger passes fall out of the CPU cache and get slower per text.
_CHUNK = 64


def _utf16_length(text: str) -> int:
    """Length in UTF-16 code units (JavaScript's ``text.length``)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _usage_tokens(texts: list[str]) -> int:
    """Sum of ``ceil(len(text) / 4)`` with ``len`` in UTF-16 code units."""
    return sum((_utf16_length(t) + 3) // 4 for t in texts)


def _chunk_counts(texts: list[str], dim: int) -> npt.NDArray[np.float64]:
    """Signed bucket counts of one chunk of texts: one concatenated code-unit array, FNV-1a over every window.

    Each window adds +1.0 or -1.0 (weights of one float64 ``bincount``); sums of small integers are exact in
    float64, so the counts equal an integer tally. Few, large numpy operations: each one costs microseconds
    of dispatch, and on a busy event loop each long one may hand the GIL to another thread.
    """
    n = len(texts)
    encoded = [t.lower().encode("utf-16-le", "surrogatepass") for t in texts]
    units = np.frombuffer(b"".join(encoded), dtype="<u2").astype(np.uint32)
    if units.size < 3:
        return np.zeros((n, dim), dtype=np.float64)
    h = units[:-2] ^ _FNV_OFFSET  # in-place uint32 arithmetic wraps mod 2^32
    h *= _FNV_PRIME
    h ^= units[1:-1]
    h *= _FNV_PRIME
    h ^= units[2:]
    h *= _FNV_PRIME
    slots = (h % np.uint32(dim)).astype(np.intp)
    h >>= 30
    h &= 2  # 2 when h >= 2^31
    weights = 1.0 - h  # float64: -1.0 for those, else +1.0
    if n > 1:
        lengths = [len(e) >> 1 for e in encoded]
        slots += np.repeat(np.arange(0, n * dim, dim, dtype=np.intp), lengths)[:-2]
        # Windows that start in the last two code units of a text cross into the next one: they count nothing.
        ends = np.cumsum(lengths[:-1])
        crossing = np.concatenate((ends - 2, ends - 1))
        weights[crossing[(crossing >= 0) & (crossing < weights.size)]] = 0.0
    counts = np.bincount(slots, weights, minlength=n * dim).reshape(n, dim)
    return counts.astype(np.float64, copy=False)  # weighted: float64 already (the stubs say intp)


def _normalise(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Rows divided (in place) by their Euclidean norm in float64; an all-zero row becomes e0."""
    # Components are small integers, so the float64 sum of squares is exact in any summation order.
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    if not norms.all():
        zero = norms == 0.0
        norms[zero] = 1.0
        matrix[zero, 0] = 1.0
    matrix /= norms[:, None]
    return matrix


def _embed_batch(texts: list[str], dim: int) -> npt.NDArray[np.float32]:
    """The float32 embedding matrix of ``texts``, computed in chunks so the working set stays in cache."""
    n = len(texts)
    if n <= _CHUNK:
        return _normalise(_chunk_counts(texts, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for i in range(0, n, _CHUNK):
        out[i:i + _CHUNK] = _normalise(_chunk_counts(texts[i:i + _CHUNK], dim))
    return out


class HashEmbedder:
    """Signed feature hashing of lower-cased UTF-16 character trigrams (FNV-1a-32), L2-normalised.

    Deterministic and offline: the test and demo default, and a stand-in for a real model in benchmarks.
    """

    __slots__ = ("_dim",)

    def __init__(self, dim: int = 384) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"`dim` must be an integer >= 1, got {dim!r}")
        self._dim = dim

    @property
    def model_id(self) -> str:
        """``hash-trigram-fnv1a-<dim>``."""
        return f"hash-trigram-fnv1a-{self._dim}"

    @property
    def dimension(self) -> int:
        """The vector length given at construction."""
        return self._dim

    def embed_sync(self, texts: list[str]) -> Embeddings:
        """Embed on the calling thread (for worker threads and scripts; async callers use :meth:`embed`)."""
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValidationError(f"`texts[{i}]` must be a str, got {type(text).__name__}")
        return Embeddings(vectors=_embed_batch(texts, self._dim), usage_tokens=_usage_tokens(texts))

    async def embed(self, texts: list[str]) -> Embeddings:
        """Embed a batch; batches of more than 64 texts run in a worker thread."""
        if len(texts) > _THREAD_THRESHOLD:
            return await anyio.to_thread.run_sync(self.embed_sync, list(texts))
        await anyio.lowlevel.checkpoint()
        return self.embed_sync(texts)

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self._dim})"
