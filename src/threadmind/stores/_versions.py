"""Per-thread write counters, so a thread actor can tell that its cache missed a write.

Thread actors cache a thread's row and newest messages. Writes through the actor keep those caches exact, but
code can also write through the store object directly (``memory.storage.save_messages(...)``, a
``MessageHistory`` built on the store). Every store write to a thread's row or messages bumps the thread's
counter here, once per call, success or not; an actor that sees a count it did not cause re-reads.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ("ThreadVersions",)


class ThreadVersions:
    """A write counter per thread id (0 for a thread never written through this store object)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def get(self, thread_id: str) -> int:
        """How many write calls touched ``thread_id`` so far."""
        return self._counts.get(thread_id, 0)

    def bump(self, thread_ids: Iterable[str]) -> None:
        """Count one write call for each of ``thread_ids``."""
        counts = self._counts
        for thread_id in thread_ids:
            counts[thread_id] = counts.get(thread_id, 0) + 1
