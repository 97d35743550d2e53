"""``SQLiteStore``'s keyword index in this process: searches from the scopes kept in memory (``_keyword_blocks``)
or from FTS5 (``_fts``), the folds of the keyword queue (in the background once writes pause, see
``_fold``, or before a search that needs them), and the catch-up of rows written without keywords."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import aiosqlite
import msgspec

from .._keyword_blocks import RESOURCE, THREAD, KeywordBlocks, Owner
from .._keywords import NO_MATCHES, KeywordMatches, Neighbours
from ._fold import BackgroundFold
from ._fts import (
    FOLD_BATCH,
    Advance,
    catch_up_batch,
    fold,
    keyword_backlog,
    neighbour_ids,
    scope_token,
    search_in_memory,
    search_keywords,
)

__all__ = ("CHECKED_KEPT", "WATCHED_MOST", "SQLiteKeywordIndex")

CHECKED_KEPT = 65_536
"""Scopes whose last keyword search is remembered (all forgotten past this)."""
WATCHED_MOST = 1024
"""Blocks a background fold checks at most (the most recently used)."""

Run = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


class SQLiteKeywordIndex:
    """The keyword side of one ``SQLiteStore`` (see the module docstring).

    :param read: runs a function on the store's reader connection.
    :param write: runs a function in a write transaction of the store's writer.
    :param epoch: the store's cache epoch (None while another process may write the file).
    :param writes: the file's write count in this process (writes are counted once they have committed).
    :param connection: the connection background folds commit on (None once the store is closed).
    """

    def __init__(self, *, read: Run, write: Run, epoch: Callable[[], int | None], writes: Callable[[], int],
                 connection: Callable[[], aiosqlite.Connection | None]) -> None:
        self._read = read
        self._write = write
        self._epoch = epoch
        self._writes = writes
        self._connection = connection
        self.blocks = KeywordBlocks()  # scopes searched by words, in memory (see _keyword_blocks)
        # scope token -> (cache epoch, thread writes counted, version) when its block last answered a search
        self._checked: dict[str, tuple[int, int, int]] = {}
        self._memory_hits = 0
        self._folded_at = -1  # the file's thread write count when this store's last keyword fold began
        self.background_fold = BackgroundFold(self._folded_in_background, writes)

    def close(self) -> None:
        """No more background folds; forget the scopes kept."""
        self.background_fold.close()
        self.blocks.clear()
        self._checked.clear()

    async def search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                     limit: int, neighbours_of: Sequence[str] | None = None, counts: bool = True,
                     ) -> KeywordMatches:
        """The scope's statistics and its best ``limit`` messages holding any of ``terms`` (and with
        ``neighbours_of`` the neighbours of those and of these) in one read (see ``_fts``); ids queued
        by saves that returned before this call are indexed first. Without ``counts`` the candidates scored
        from memory carry no word counts."""
        if not terms or limit <= 0:
            if neighbours_of is None:
                return NO_MATCHES
            return msgspec.structs.replace(NO_MATCHES, neighbours=await self.neighbours(neighbours_of))
        blocks = self.blocks
        others = None if neighbours_of is None else list(neighbours_of)
        current = self._current(resource_id, thread_id)
        if current is not None:
            known = search_in_memory(blocks, current[1], terms, resource_id, thread_id, limit, others, counts=counts)
            if known is not None:
                self._memory_hits += 1
                return known
        epoch, writes, checked = self._epoch(), self._writes(), self._checked

        def check(token: str, version: int) -> None:
            if epoch is not None:
                if len(checked) > CHECKED_KEPT:
                    checked.clear()
                checked[token] = (epoch, writes, version)

        def search(folded: bool) -> Callable[[sqlite3.Connection], KeywordMatches | None]:
            return lambda conn: search_keywords(conn, terms, resource_id, thread_id, limit, folded=folded,
                                                blocks=blocks, neighbours_of=others, checked=check, counts=counts)

        # Written through this file's store objects since this store last folded: ids are queued, fold first
        # (else the read finds out, and the fold comes after it).
        found: KeywordMatches | None = None if writes != self._folded_at else await self._read(search(False))
        if found is None:
            while True:
                taken, advances = await self._write(fold)
                blocks.advance_all(advances)
                if taken < FOLD_BATCH:  # it took every id queued by a save that returned before this search
                    break
            self._folded_at = writes
            found = await self._read(search(True))
        return found or NO_MATCHES

    async def created_times(self, message_ids: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                            read: Callable[[list[str]], Awaitable[dict[str, datetime]]]) -> dict[str, datetime]:
        """When each message was created: those the scope's block kept (when nothing was written since it answered
        a search), the others ``read`` and kept in the block if nothing was written meanwhile."""
        scope = self._current(resource_id, thread_id)
        found = {} if scope is None else self.blocks.kept_times(*scope, message_ids)
        missing = [mid for mid in message_ids if mid not in found]
        if missing:
            fresh = await read(missing)
            found.update(fresh)
            if scope is not None and self._current(resource_id, thread_id) == scope:
                self.blocks.remember_times(*scope, fresh)
        return found

    def _current(self, resource_id: str | None, thread_id: str | None) -> tuple[str, int, Owner] | None:
        """The scope's token, the version its block last answered a search at and its owner, while nothing was
        written through this store since and no other process has the file: the block is then the scope's (what a
        search from memory, and the creation times kept with it, rely on)."""
        if resource_id is None and thread_id is None:
            return None
        epoch = self._epoch()
        token = scope_token(resource_id, thread_id)
        stamp = self._checked.get(token)
        if epoch is None or stamp is None or stamp[0] != epoch or stamp[1] != self._writes():
            return None
        return token, stamp[2], (THREAD, thread_id) if thread_id is not None else (RESOURCE, resource_id or "")

    def fold_soon(self) -> None:
        """A write queued ids for the keyword index: fold them in the background (see ``_fold``)."""
        self.background_fold.soon(self._connection(), self._writes(), self._epoch(), self._watched)

    def _watched(self) -> list[str]:
        """The scopes whose blocks a background fold checks (their versions as of its commit): those it finds at
        their scope's version, with nothing written since it began, answer their next search from memory."""
        return self.blocks.tokens(WATCHED_MOST)

    def _folded_in_background(self, advances: list[Advance], order: Neighbours, writes: int,
                              epoch: int | None, versions: dict[str, int]) -> None:
        """A background fold committed (``writes``: the write count when it began; -1: it failed): the blocks
        take its rows and the order of the threads they grew in; when nothing was written since it began, with no
        other process on the file, a block it left at the scope's new version is the scope's, as after a search,
        and so is a searched scope's block at the version the fold read (``versions``: a fold that found the queue
        emptied by an earlier one still tells which blocks are current)."""
        blocks = self.blocks
        blocks.advance_all(advances)
        if writes < 0:
            return
        self._folded_at = max(self._folded_at, writes)
        current = epoch is not None and writes == self._writes()
        for token, _, new, _ in advances:
            if blocks.remember(token, new, order) and current and epoch is not None:
                self._checked[token] = (epoch, writes, new)
        if current and epoch is not None:
            for token, version in versions.items():
                if blocks.version_of(token) == version:
                    self._checked[token] = (epoch, writes, version)

    def cache_statistics(self) -> dict[str, int]:
        """Keyword searches answered without a trip to the database (``keyword_from_memory``: the scope unchanged
        since its last search and no other process on the file), scopes kept in memory (``keyword_kept``), read
        whole to keep (``keyword_built``) and brought up to date with messages another process added
        (``keyword_followed``), and folds of the keyword queue committed in the background
        (``keyword_folds_in_background``)."""
        return {"keyword_from_memory": self._memory_hits, "keyword_kept": len(self.blocks),
                "keyword_built": self.blocks.built, "keyword_followed": self.blocks.followed,
                "keyword_folds_in_background": self.background_fold.folds}

    async def neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        """The messages just before and after each one in its thread."""
        ids = list(message_ids)
        if not ids:
            return {}
        found: Neighbours = await self._read(lambda conn: neighbour_ids(conn, ids))
        return found

    async def backlog(self) -> int:
        """At most how many messages still lack a keyword index row (rows written by Mastra, or by a threadmind
        older than the index)."""
        count: int = await self._read(keyword_backlog)
        return count

    async def build(self, progress: Callable[[int, int], object] | None = None) -> int:
        """Index the messages that lack a keyword index row, one short write transaction per batch (the event
        loop is never held: each batch runs on the writer thread). ``progress(done, total)`` after each batch, and
        ``(total, total)`` once none is left when others indexed some meanwhile (the background fold of a save's
        queue, another process). Returns the index rows written; 0 when the index was complete."""
        total = await self.backlog()
        seen = written = 0
        while True:
            looked, made, advances = await self._write(catch_up_batch)
            self.blocks.advance_all(advances)
            if not looked:
                if progress is not None and seen < total:
                    progress(total, total)
                return written
            seen += looked
            written += made
            if progress is not None:
                progress(seen, max(total, seen))
