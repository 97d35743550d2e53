"""Per-key write counters, so an actor can tell that its cache missed a write.

Thread actors cache a thread's row and newest messages, resource actors a resource's row. Writes through the
actor keep those caches exact, but code can also write through the store object directly
(``memory.storage.save_messages(...)``, a ``MessageHistory`` built on the store). Every store write to a
thread's row or messages bumps the thread's counter, every resource write the resource's, once per call,
success or not; an actor that sees a count it did not cause re-reads.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ("WriteCounts",)


class WriteCounts:
    """A write counter per key (0 for a key never written through this store object)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def get(self, key: str) -> int:
        """How many write calls touched ``key`` so far."""
        return self._counts.get(key, 0)

    def bump(self, keys: Iterable[str]) -> None:
        """Count one write call for each of ``keys``."""
        counts = self._counts
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
