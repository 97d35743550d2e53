"""EmbeddingCache: a small LRU of embeddings keyed by (model id, text), so repeated texts skip the embedder."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError

__all__ = ("EmbeddingCache",)


class EmbeddingCache:
    """LRU map (model_id, text) → float32 vector; used only from the event loop, so it takes no locks.

    Vectors are kept as their bytes: storing is one copy with no array allocation, and a hit is a read-only
    float32 view of them, so nobody can change a cached vector in place.
    """

    __slots__ = ("_entries", "_max_entries", "hits", "misses")

    def __init__(self, max_entries: int = 1000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ConfigError("cache_size must be a non-negative integer; pass 0 to disable the cache")
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def max_entries(self) -> int:
        """The capacity; the least recently used entry goes first when it is exceeded."""
        return self._max_entries

    def get(self, model_id: str, text: str) -> npt.NDArray[np.float32] | None:
        """The cached vector (marked most recently used), or None."""
        key = (model_id, text)
        raw = self._entries.get(key)
        if raw is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return np.frombuffer(raw, dtype=np.float32)

    def put(self, model_id: str, text: str, vector: npt.NDArray[np.float32]) -> None:
        """Store a float32 copy of ``vector`` and evict beyond capacity."""
        if self._max_entries == 0:
            return
        key = (model_id, text)
        entries = self._entries
        entries[key] = vector.astype(np.float32, copy=False).tobytes()
        entries.move_to_end(key)
        while len(entries) > self._max_entries:
            entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
