"""``PostgresStore``'s keyword index: searches answered from the scope's rows kept in memory while the server
confirms their version, else by SQL (``_keyword_search``), the neighbours of hits, and the catch-up of
messages written without keyword rows (by Mastra, or by a threadmind older than the index)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from .._keywords import NO_MATCHES, KeywordMatches, Neighbours
from ._keyword_search import KeywordScopes
from ._pool import transaction
from ._rows import message_from_row
from ._tsvector import CATCH_UP_SQL, NEIGHBOURS_SQL, UPSERT_SQL, keyword_rows, tsquery_literal

__all__ = ("PostgresKeywordIndex",)

CATCH_UP_BATCH = 500
"""Messages indexed per transaction when a database written without keyword rows catches up."""


class PostgresKeywordIndex:
    """The keyword side of one ``PostgresStore``: ``read`` and ``write`` run a function on a pooled connection
    (the store's, with its error translation), ``idle`` is the store's checkpoint for calls with nothing to do."""

    def __init__(self, read: Callable[[Callable[[Any], Awaitable[Any]], str], Awaitable[Any]],
                 write: Callable[[Callable[[Any], Awaitable[Any]], str], Awaitable[Any]],
                 idle: Callable[[], Awaitable[None]]) -> None:
        self._read = read
        self._write = write
        self._idle = idle
        self.scopes = KeywordScopes()

    async def search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                     limit: int, neighbours_of: Sequence[str] | None = None,
                     later: Callable[[], Awaitable[Sequence[str]]] | None = None) -> KeywordMatches:
        """The scope's statistics and its best ``limit`` messages holding any of ``terms``: from the scope's rows
        kept in memory while its version is unchanged, else by SQL (see ``_keyword_search``); with
        ``neighbours_of``, the neighbours of those and of these (those the scope's block has not kept yet in one
        more statement on the same connection), and of those ``later()`` gives once the candidates are known (then
        the neighbours are read on a connection taken again: none is held while ``later()`` runs)."""
        query, lexemes = tsquery_literal(terms)
        searching = bool(lexemes) and limit > 0 and (resource_id is not None or thread_id is not None)
        if not searching and neighbours_of is None:
            await self._idle()
            return NO_MATCHES
        others = [] if neighbours_of is None else list(neighbours_of)
        scopes = self.scopes

        async def candidates(conn: Any) -> tuple[KeywordMatches, Any]:
            if not searching:
                return NO_MATCHES, None
            return await scopes.matches(conn, terms, query, lexemes, resource_id=resource_id, thread_id=thread_id,
                                        limit=limit)

        async def read(conn: Any) -> KeywordMatches:
            found, block = await candidates(conn)
            if neighbours_of is None:
                return found
            ids = list(dict.fromkeys([candidate.message_id for candidate in found.candidates] + others))
            return msgspec.structs.replace(found, neighbours=await scopes.neighbours(conn, block, ids))

        if later is None:
            matches: KeywordMatches = await self._read(read, "keyword_search")
            return matches
        found: KeywordMatches
        found, block = await self._read(candidates, "keyword_search")
        ids = list(dict.fromkeys([candidate.message_id for candidate in found.candidates] + others
                                 + list(await later())))
        neighbours: Neighbours = await self._read(lambda conn: scopes.neighbours(conn, block, ids), "keyword_search")
        return msgspec.structs.replace(found, neighbours=neighbours)

    async def neighbours(self, message_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """The messages just before and after each one in its thread, in one statement."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            await self._idle()
            return {}
        rows = await self._read(lambda conn: conn.fetch(NEIGHBOURS_SQL, ids), "neighbours")
        return {mid: (before, after) for mid, before, after in rows}

    def cache_statistics(self) -> dict[str, int]:
        """Keyword searches answered from memory, scopes read to keep, brought up to date with messages other
        processes added (``keyword_followed``) and kept now, neighbours from memory."""
        scopes = self.scopes
        return {"keyword_from_memory": scopes.hits, "keyword_built": scopes.builds, "keyword_followed": scopes.followed,
                "keyword_kept": len(scopes.blocks), "neighbours_from_memory": scopes.neighbour_hits}

    async def backlog(self) -> int:
        """How many messages have no keyword row yet."""
        count: int = await self._read(lambda conn: conn.fetchval(
            "SELECT count(*) FROM mastra_messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM threadmind_keywords k WHERE k.message_id = m.id)"), "keyword_backlog")
        return count

    async def build(self, progress: Callable[[int, int], object] | None = None) -> int:
        """Index the messages that have no keyword row, :data:`CATCH_UP_BATCH` per transaction (one process's
        batch at a time); ``progress(done, total)`` after each batch, and ``(total, total)`` once none is left when
        another process indexed some meanwhile. Returns the rows written (0: the index was complete)."""
        total = await self.backlog()
        written = 0
        while True:
            async def batch(conn: Any) -> int:
                async with transaction(conn):
                    # One batch at a time across processes: each reads what the others' batches left, so
                    # processes opening one database at once index each message once.
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                       "threadmind.keywords.catch_up")
                    rows = await conn.fetch(CATCH_UP_SQL, CATCH_UP_BATCH)
                    if rows:
                        await conn.execute(UPSERT_SQL, *keyword_rows(
                            [(message_from_row(row), row[7] or "") for row in rows]))
                    return len(rows)

            made: int = await self._write(batch, "build_keyword_index")
            if not made:
                if progress is not None and written < total:
                    progress(total, total)
                return written
            written += made
            if progress is not None:
                progress(written, max(total, written))
