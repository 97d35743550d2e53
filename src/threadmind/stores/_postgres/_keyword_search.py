"""Keyword searches of ``PostgresStore`` from scopes kept in memory, checked against the server on every search.

A search of a scope of at most :data:`BLOCK_SCOPE` messages costs one short statement (:data:`VERSION_SQL`, the
scope's version) and a numpy scoring of the scope's :class:`KeywordBlock`, instead of :data:`SEARCH_SQL` reading
and ranking every keyword row of the scope (7 ms for 500 messages on the shared workload). The version is
the scope's counters in ``threadmind_keyword_versions``, which every statement writing keyword rows bumps for the
scopes it touches, in its own transaction: a block is used only when the version read now is the one it was built
at, so a change any process committed before the search began is always seen (SPEC §10). A block is built from the
scope's rows and version read in one statement (one snapshot). After this store's own save commits, the save's
statement returns the counters it bumped: when each is one above what the block held (no other write reached it),
the saved rows are appended to the block (a chat that searches, saves and searches again keeps its block). A block
also keeps the version of each of its scope's rows (``xmin``; its own saves' rows get the statement's transaction
id): when the scope's version moved and every row it knows is there unchanged, the scope only gained messages, and
the next search reads those alone (:meth:`KeywordScopes._followed`); anything else leaves the block behind, and the
next search rebuilds it.

Scopes larger than :data:`BLOCK_SCOPE` are ranked by :data:`SEARCH_SQL` (the same ranking, in SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread

from .._keyword_blocks import RESOURCE, THREAD, CountedRow, KeywordBlock, KeywordBlocks, Owner, Version
from .._keywords import KeywordMatches
from ._tsvector import (
    BLOCK_SQL,
    FOLLOW_SQL,
    NEIGHBOURS_SQL,
    ROWS_SQL,
    SEARCH_SQL,
    THREAD_ORDER_SQL,
    VERSION_SQL,
    block_rows,
    matches_from_rows,
    scope_key,
    version,
)

__all__ = ("BLOCK_SCOPE", "KeywordScopes")

BLOCK_SCOPE = 20_000
"""Messages a scope holds at most to be searched from memory."""
WHOLE_THREADS_SCOPE = 2000
"""A kept scope of at most this many messages reads the order of every thread it does not keep at its first miss of
a neighbour (one statement), so its later searches need no trip for neighbours, whatever their candidates."""
MOVING_KEPT = 65_536
"""Scopes remembered as moving at most (all forgotten past this)."""
THREAD_FILL = 2000
"""Messages of a thread a kept scope holds at most for the thread to be read whole at a miss."""
BUILD_ON_LOOP = 200
"""Rows a block is built from at most on the event loop's thread; a larger one is built on a worker thread (35 µs
a row of 30 words here, parsing and numbering: 7 ms at this size), so the loop keeps serving while it is."""


class KeywordScopes:
    """The blocks of one store's searched scopes, and the scopes found too large for one."""

    def __init__(self) -> None:
        self.blocks = KeywordBlocks()
        self._large: set[str] = set()
        #: Searches answered from a block held at the scope's version, and blocks built.
        self.hits = 0
        self.builds = 0
        #: Neighbours of messages served from the blocks.
        self.neighbour_hits = 0
        #: Kept blocks brought up to date with the messages other processes added (not read whole again).
        self.followed = 0
        #: Scopes whose version had moved at their last search (:meth:`_from_block`).
        self._moving: set[str] = set()

    async def matches(self, conn: Any, terms: Sequence[str], query: str, lexemes: list[str], *,
                      resource_id: str | None, thread_id: str | None,
                      limit: int) -> tuple[KeywordMatches, KeywordBlock | None]:
        """The scope's statistics and its best ``limit`` candidates for ``terms`` (``query``/``lexemes``: their
        ``tsquery`` literal and lexemes, for SQL), read on ``conn``; and the block that answered, at the version
        read now (None: SQL answered)."""
        owner: Owner = (THREAD, thread_id) if thread_id is not None else (RESOURCE, resource_id or "")
        key = scope_key(owner)
        if key not in self._large:
            found = await self._from_block(conn, key, owner, terms, limit, resource_id)
            # A thread asked for within a resource: messages of the thread filed under another resource are left out.
            if found is not None and (thread_id is None or resource_id is None
                                      or all(c.resource_id == resource_id for c in found[0].candidates)):
                return found
        return matches_from_rows(await conn.fetch(SEARCH_SQL, query, lexemes, resource_id, thread_id, limit),
                                 lexemes), None

    async def neighbours(self, conn: Any, block: KeywordBlock | None,
                         message_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """The neighbours of ``message_ids`` in their threads: those ``block`` (at its scope's version now) has seen
        already from memory, the others read (:data:`NEIGHBOURS_SQL`) and kept in it. Every insert or deletion in a
        thread through a store changes its scope's version, so what the block keeps is current while the block is
        used (a message another program wrote straight into the database joins at the scope's next change, as it
        joins the keyword index when the store indexes it)."""
        known = block.neighbours if block is not None else {}
        missing = [mid for mid in message_ids if mid not in known]
        epoch = block.epoch if block is not None else 0
        read: dict[str, tuple[str | None, str | None]] = {}
        threads = block.unread_threads(THREAD_FILL) if block is not None and missing and \
            len(block.ids) <= WHOLE_THREADS_SCOPE else []
        if threads:  # a small scope: every thread it does not keep, in order (its next searches need no trip)
            order = await conn.fetch(THREAD_ORDER_SQL, threads)
            for at, (thread_id, mid) in enumerate(order):
                before = order[at - 1][1] if at and order[at - 1][0] == thread_id else None
                after = order[at + 1][1] if at + 1 < len(order) and order[at + 1][0] == thread_id else None
                read[mid] = (before, after)
        rest = [mid for mid in missing if mid not in read]
        for mid, before, after in await conn.fetch(NEIGHBOURS_SQL, rest) if rest else []:
            read[mid] = (before, after)
        if block is not None and block.epoch == epoch:  # no rows joined it while the statements ran
            for mid, held in read.items():  # the block's own messages only: a change to their threads changes its
                block.remember(mid, held)  # version
            for mid in rest:
                if mid not in read:
                    block.remember(mid, None)
            self.neighbour_hits += len(message_ids) - len(missing)
        found = {mid: pair for mid in message_ids if (pair := read.get(mid) or known.get(mid)) is not None}
        return found

    async def _from_block(self, conn: Any, key: str, owner: Owner, terms: Sequence[str],
                          limit: int, resource_id: str | None = None) -> tuple[KeywordMatches, KeywordBlock] | None:
        """The block's answer at the scope's version now (built first when none holds it, or brought up to date
        when it only lacks messages added since: :meth:`_followed`; a thread's made from its resource's block when
        that one has its rows as they are: :meth:`_part`); None: too large."""
        kept = self.blocks.held(key, owner) if key in self._moving else None
        if kept is None or not isinstance(kept[1].lineage, dict):
            now = version(*await conn.fetchrow(VERSION_SQL, key))
            held = self.blocks.get(key, now, owner)
            if held is not None:
                self.hits += 1
                return held.matches(terms, limit), held
            if len(self._moving) >= MOVING_KEPT:
                self._moving.clear()
            self._moving.add(key)
        # (a scope whose version moved at its last search goes straight to the statement that reads the version
        # with the row marks: with another process writing it, one round trip less a search)
        followed = await self._followed(conn, key, owner)
        if followed is not None:
            return followed.matches(terms, limit), followed
        made = await self._part(conn, key, owner, resource_id) if owner[0] == THREAD else None
        if made is not None:
            part_version, part = made
            self.builds += 1
            found = part.matches(terms, limit)  # before it is shared with other searches
            self.blocks.put(key, part_version, part)
            return found, part
        slots, counts, records, ids, marks, _ = await conn.fetchrow(BLOCK_SQL[owner[0]], key, owner[1],
                                                                   BLOCK_SCOPE + 1)
        if len(records) > BLOCK_SCOPE:
            self._large.add(key)
            return None
        if len(records) > BUILD_ON_LOOP:  # (a resource of 20 000 messages: about 0.7 s of parsing and numbering)
            block, found = await anyio.to_thread.run_sync(_built, owner, records, terms, limit)
        else:
            block, found = _built(owner, records, terms, limit)
        block.lineage = _marks(ids, marks)
        self.builds += 1
        self.blocks.put(key, version(slots, counts), block)
        return found, block

    async def _part(self, conn: Any, key: str, owner: Owner,
                    resource_id: str | None) -> tuple[Version, KeywordBlock] | None:
        """The version of a thread's scope and its block made from a kept block of its resource (``resource_id``'s,
        else one holding some of the thread's messages) with its rows not read: the thread's version and row marks
        (:data:`FOLLOW_SQL`, instead of its rows) show that block has every row of the thread as it is now. None:
        no such block (the thread is built from its rows)."""
        resource = None if resource_id is None else scope_key((RESOURCE, resource_id))
        if not self.blocks.holds_thread(owner[1], resource):
            return None  # (no block holds the thread: no statement more than a build's)
        slots, counts, ids, now, lengths = await conn.fetchrow(FOLLOW_SQL[THREAD], key, owner[1], BLOCK_SCOPE + 1)
        marks = _marks(ids, now)
        if not marks:
            return None
        part = self.blocks.part_by_marks(owner[1], owner, marks, resource)
        worded = {mid for mid, length in zip(ids, lengths, strict=True) if length > 0}
        if part is None or set(part.ids) != worded or part.words != sum(lengths):
            return None
        part.lineage = marks
        return version(slots, counts), part

    async def _followed(self, conn: Any, key: str, owner: Owner) -> KeywordBlock | None:
        """The kept block of the scope brought up to date, if the scope only gained messages since its version (in
        any process): every row it has a mark for is still there with the same row version (``xmin``: an update,
        a move or a deletion changes or removes it), read with the scope's version in one snapshot; the rows of the
        others are read next, each at the row version that snapshot saw (else the block is built again). None:
        it is to be built again."""
        kept = self.blocks.held(key, owner)
        marks = None if kept is None else kept[1].lineage
        if kept is None or not isinstance(marks, dict):
            return None
        slots, counts, ids, now, lengths = await conn.fetchrow(FOLLOW_SQL[owner[0]], key, owner[1], BLOCK_SCOPE + 1)
        new = version(slots, counts)
        if new == kept[0]:  # unchanged since: the block answers as it is
            self._moving.discard(key)
            self.hits += 1
            return kept[1]
        current = _marks(ids, now)
        if current is None or len(current) < len(marks) or any(current.get(mid) != mark
                                                                for mid, mark in marks.items()):
            return None
        added = [mid for mid in current if mid not in marks]
        records: list[Any] = []
        pairs: dict[str, tuple[str | None, str | None]] | None = None
        if added:
            records, versions, slots_then, counts_then, around = await conn.fetchrow(ROWS_SQL, added, key)
            if len(versions) != len(added) or any(current[mid] != mark for mid, mark in versions):
                return None  # changed since the first statement's snapshot
            if version(slots_then, counts_then) == new:  # nothing else changed: their neighbours are the version's
                pairs = {mid: (before, after) for mid, before, after in around}
        lengths = lengths or []
        docs = sum(1 for length in lengths if length > 0)
        words = sum(lengths)
        if not self.blocks.catch_up(key, kept[0], new, current, block_rows(records), pairs, docs, words):
            return None
        self.followed += 1
        return self.blocks.get(key, new, owner)

    def saved(self, rows: Sequence[CountedRow], bumped: Sequence[Any], transaction: str | None = None) -> None:
        """A save committed ``rows`` and set the ``bumped`` (scope key, slot, counter) slots: a scope's block takes
        the rows when it held each of those slots one below (no other write reached them meanwhile). Its other slots
        stay as the block saw them: if another write moved one, the next search finds the versions differ.
        ``transaction``: the save's transaction id (``pg_current_xact_id``), whose low 32 bits are its rows'
        ``xmin``: the marks of the rows a block takes (without it the block no longer follows other processes)."""
        by_scope: dict[str, dict[int, int]] = {}
        for key, slot, n in bumped:
            by_scope.setdefault(key, {})[int(slot)] = int(n)
        for key, slots in by_scope.items():
            held = self.blocks.version_of(key)
            if not isinstance(held, tuple):
                continue
            counters = dict(held)
            kind, value = (RESOURCE if key.startswith("r:") else THREAD), key[2:]
            if any(counters.get(slot, 0) != n - 1 for slot, n in slots.items()):
                # Another write reached a slot meanwhile: the block stays at the version it holds, and the next
                # search brings it up to date (this save's rows included) if it can follow, else reads it again.
                kept = self.blocks.held(key, (kind, value))
                if kept is None or not isinstance(kept[1].lineage, dict):
                    self.blocks.drop(key)
                continue
            counters.update(slots)
            mine = [row for row in rows if (row[2] if kind == RESOURCE else row[1]) == value]
            # no row of the save in a scope it touched: a row left it (a message moved); the block cannot follow
            advanced = tuple(sorted(counters.items()))
            self.blocks.advance(key, held, advanced, mine or None)
            block = self.blocks.held(key, (kind, value))
            if block is not None and block[0] == advanced and isinstance(block[1].lineage, dict):
                if transaction is None:
                    block[1].lineage = None
                else:
                    mark = str(int(transaction) & 0xFFFFFFFF)
                    block[1].lineage.update((row[0], mark) for row in mine)


def _built(owner: Owner, records: Sequence[Any], terms: Sequence[str],
           limit: int) -> tuple[KeywordBlock, KeywordMatches]:
    """A scope's block from :data:`BLOCK_SQL`'s records, and its answer for ``terms`` (scored before the block is
    shared with other searches)."""
    block = KeywordBlock(owner, block_rows(records))
    return block, block.matches(terms, limit)


def _marks(ids: Sequence[str] | None, marks: Sequence[str] | None) -> dict[str, str] | None:
    """Each message's row version from :data:`BLOCK_SQL`'s or :data:`FOLLOW_SQL`'s marks (None: the scope has more
    rows than a block holds)."""
    if ids is None or marks is None:
        return {}
    if len(ids) > BLOCK_SCOPE:
        return None
    return dict(zip(ids, marks, strict=True))
