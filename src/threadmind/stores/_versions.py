"""Per-key write counters, so an actor can tell that its cache missed a write.

Thread actors cache a thread's row and newest messages, resource actors a resource's row. Writes through the
actor keep those caches exact, but code can also write through the store object directly
(``memory.storage.save_messages(...)``, a ``MessageHistory`` built on the store). Every store write to a
thread's row or messages bumps the thread's counter, every resource write the resource's, once per call,
success or not; an actor that sees a count it did not cause re-reads.

Store objects on the same database file within one process share their counters (:func:`counts_for_file`),
so a write through one reaches the caches built on another at once. Another process's writes are not
counted here; the actors' cache lifetime bounds how long they may go unseen.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

__all__ = ("FileCounts", "WriteCounts", "counts_for_file")


class WriteCounts:
    """A write counter per key (0 for a key never written through this store object or its file's peers)."""

    __slots__ = ("_counts", "_lock", "total")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()  # stores on one file may run on different event loops (threads)
        #: Write calls counted for any key: unchanged means nothing was written through this file's store objects.
        self.total = 0

    def get(self, key: str) -> int:
        """How many write calls touched ``key`` so far."""
        return self._counts.get(key, 0)

    def bump(self, keys: Iterable[str]) -> None:
        """Count one write call for each of ``keys``."""
        counts = self._counts
        with self._lock:
            self.total += 1
            for key in keys:
                counts[key] = counts.get(key, 0) + 1


class FileCounts:
    """The write counters of one database file: per thread, per resource, per observational-memory key."""

    __slots__ = ("__weakref__", "records", "resources", "threads")

    def __init__(self) -> None:
        self.threads = WriteCounts()
        self.resources = WriteCounts()
        self.records = WriteCounts()


# (st_dev, st_ino) of an open database file -> its counters, while some store object on it holds them.
_BY_FILE: weakref.WeakValueDictionary[tuple[int, int] | str, FileCounts] = weakref.WeakValueDictionary()
_BY_FILE_LOCK = threading.Lock()


def counts_for_file(identity: tuple[int, int] | str) -> FileCounts:
    """The counters every store object on one database shares in this process: a SQLite file by its ``identity``
    (device, inode), a PostgreSQL database by its DSN."""
    with _BY_FILE_LOCK:
        counts = _BY_FILE.get(identity)
        if counts is None:
            counts = _BY_FILE[identity] = FileCounts()
        return counts
