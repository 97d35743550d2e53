"""What a message store's writer reports of its group commit (``SQLiteStore.statistics()``,
``PostgresStore.statistics()``)."""

from __future__ import annotations

import msgspec

__all__ = ("StoreStatistics",)


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the writer: committed groups (``SQLiteStore``: of which on the event loop's thread), the
    writes they carried, the largest group and the writes waiting now. ``PostgresStore`` counts its save
    statements and the saves they carried."""

    commits: int
    jobs: int
    largest_group: int
    queued: int
    inline_commits: int = 0
