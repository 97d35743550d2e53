"""The one retrieval pipeline: ``Memory.recall(vector_search_string=...)``, the ``semantic-recall`` processor,
``Memory.search`` and the CLI's ``search`` all rank through :meth:`Searcher.search`, so the same query with the
same options gives the same hits whichever door it came through.

Three modes (``semanticRecall.search``):

* ``"vector"``: the reference's semantic recall, hit for hit: the query is chunked as stored texts are, each chunk's
  top-k nearest messages are taken (above ``threshold``), in order, each message once.
* ``"keyword"``: the store's keyword index alone (no vector store, no embedder), ranked as in ``_rank``.
* ``"hybrid"`` (default): both, fused (``_rank``); ``threshold`` drops vector candidates only, never a keyword hit.
  During an embedder outage the keyword side still answers (``degraded``).

In ``"keyword"`` and ``"hybrid"``, a query that names a date (``_dates``) lifts the keyword candidates created within
a day of it (``_rank``): their times are read from the store, for such queries only.

A store without a keyword index (a third party's) answers hybrid recall with its vectors alone.

**Filters** (``semanticRecall.filter``, Mastra's metadata conditions): every mode ranks as without one, over
pools widened fourfold at a time (up to :data:`MAX_FILTERED_POOL` hits' worth) until ``top_k`` of the ranked
messages match or the scope has no more; a message matches when its metadata does: its thread's metadata as it is
now, then ``message_id``, ``thread_id``, ``resource_id``, ``role``, ``content`` and ``created_at`` (what Mastra
stores with a vector). Messages that do not match never come back, neighbours lifted by reply smoothing included.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import date
from typing import Protocol, runtime_checkable

import anyio
import msgspec

from .._config import SearchMode
from .._metadata_filter import MetadataFilter
from ..codecs import Message, Thread
from ..codecs._time import to_iso, utc_now
from ..embedders._chunking import chunk_text, message_text
from ..errors import EmbedderError
from ..stores import KeywordCandidate, KeywordMatches, KeywordSearch, Store, VectorHit
from ..stores._keywords import NO_MATCHES, CreatedTimes, query_terms
from ._dates import NamedDate, named_dates, utc_day
from ._rank import DATE_POOL, DEFAULT_KEYWORD_WEIGHT, Ranked, lifted, pools, ranked

__all__ = ("MAX_FILTERED_POOL", "SEARCH_MODES", "Found", "KeywordSearchBeside", "SearchMode", "Searcher", "VectorQuery",
           "as_vector_hits", "metadata_of")

_log = logging.getLogger("threadmind.search")

SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "vector", "keyword")
MAX_FILTERED_POOL = 4096
"""The most hits a filtered search ranks before it stops widening (a filter that matches almost nothing in a large
scope returns what it found by then)."""


class VectorQuery(Protocol):
    """The vector side: the index's nearest messages of a scope for one text."""

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None) -> list[VectorHit]: ...


@runtime_checkable
class KeywordSearchBeside(Protocol):
    """A keyword index that waits on a database server (``PostgresStore``): its search runs beside the vector query
    and reads the neighbours of both sides' candidates once the vector hits are known."""

    async def keyword_search_beside(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                                    limit: int,
                                    neighbours_of: Callable[[], Awaitable[Sequence[str]]]) -> KeywordMatches: ...


class Found(msgspec.Struct, frozen=True):
    """What a search found: candidates best first (more than asked for when the ranking had them and the caller set
    no depth), and whether the vector side failed (an embedder outage) so only keyword hits came back."""

    ranked: list[Ranked]
    degraded: bool = False


class Searcher:
    """Ranks a scope's messages for a query (see the module docstring).

    The two sides run one after the other, in one trip to the store, where both are this process's CPU (SQLite,
    memory); beside each other where the keyword search waits on a server (:class:`KeywordSearchBeside`), whose
    two queries then overlap there, the neighbours of both sides' candidates read once the vector hits are known.

    :param keywords: the store, when it keeps a keyword index.
    :param vectors: the index, when there is a vector store and an embedder.
    :param max_chunk_chars: how the query is chunked for the vector side (``semanticRecall.maxChunkChars``).
    """

    def __init__(self, keywords: KeywordSearch | None, vectors: VectorQuery | None, *,
                 max_chunk_chars: int = 16384, store: Store | None = None) -> None:
        self._keywords = keywords
        self._vectors = vectors
        self._max_chunk_chars = max_chunk_chars
        self._store = store  # messages and threads, for filters
        self._beside = keywords if isinstance(keywords, KeywordSearchBeside) else None
        self._times = store if isinstance(store, CreatedTimes) else None

    async def search(self, query: str, *, top_k: int, resource_id: str | None, thread_id: str | None,
                     mode: SearchMode = "hybrid", keyword_weight: float | None = None,
                     threshold: float | None = None, metadata_filter: MetadataFilter | None = None,
                     depth: int | None = None) -> Found:
        """The scope's messages for ``query`` best first: the thread when ``thread_id`` is given, else the
        resource. At least the ``top_k`` best when the scope has them (those matching ``metadata_filter``); with
        ``depth``, at most that many of a hybrid or keyword ranking (a caller taking the first ``top_k`` alone
        says so, and the rest is never made)."""
        if metadata_filter is not None:
            return await self._filtered(query, top_k, resource_id, thread_id, mode, keyword_weight, threshold,
                                        metadata_filter)
        return await self._search(query, top_k, resource_id, thread_id, mode, keyword_weight, threshold,
                                  max(depth, top_k) if depth is not None else None)

    async def _filtered(self, query: str, top_k: int, resource_id: str | None, thread_id: str | None,
                        mode: SearchMode, keyword_weight: float | None, threshold: float | None,
                        metadata_filter: MetadataFilter) -> Found:
        """The search over pools widened until ``top_k`` of its messages match (see the module docstring)."""
        if self._store is None:
            raise ValueError("a filtered search needs the message store")  # pragma: no cover - Memory gives one
        width = top_k
        known: dict[str, bool] = {}
        while True:
            found = await self._search(query, width, resource_id, thread_id, mode, keyword_weight, threshold)
            await self._judge([r for r in found.ranked if r.message_id not in known], metadata_filter, known)
            kept = [r for r in found.ranked if known.get(r.message_id)]
            if len(kept) >= top_k or len(found.ranked) < width or width >= MAX_FILTERED_POOL:
                return Found(kept, found.degraded)
            width *= 4

    async def _judge(self, ranked: Sequence[Ranked], metadata_filter: MetadataFilter, known: dict[str, bool]) -> None:
        """Whether each of ``ranked`` matches, into ``known`` (a message gone meanwhile does not)."""
        if not ranked:
            return
        assert self._store is not None
        messages = {m.id: m for m in await self._store.get_messages_by_id([r.message_id for r in ranked])}
        threads: dict[str, Thread | None] = {}
        for message in messages.values():
            if message.thread_id and message.thread_id not in threads:
                threads[message.thread_id] = await self._store.get_thread(message.thread_id)
        for entry in ranked:
            found = messages.get(entry.message_id)
            known[entry.message_id] = found is not None and metadata_filter.matches(
                metadata_of(found, threads.get(found.thread_id or "")))

    async def _search(self, query: str, top_k: int, resource_id: str | None, thread_id: str | None,
                      mode: SearchMode, keyword_weight: float | None, threshold: float | None,
                      depth: int | None = None) -> Found:
        weight = 1.0 if mode == "keyword" else (DEFAULT_KEYWORD_WEIGHT if keyword_weight is None else keyword_weight)
        if mode == "vector" or weight <= 0.0 or (self._keywords is None and mode == "hybrid"):
            return await self._vector_only(query, top_k, resource_id, thread_id, threshold)
        keyword_pool, vector_pool = pools(top_k)
        dates = named_dates(query, utc_now) if self._store is not None else ()
        keyword_limit = keyword_pool * DATE_POOL if dates else keyword_pool  # the date lift reorders a deeper pool
        wants_vectors = weight < 1.0 and self._vectors is not None
        keywords = self._keywords
        if keywords is None:
            vector, degraded = await self._vector_pool(query, vector_pool, resource_id, thread_id, threshold,
                                                       wants_vectors)
            return Found(ranked([], vector, weight, {}, limit=depth), degraded)
        terms = query_terms(query)
        if self._beside is not None and wants_vectors:  # both sides at once on the server (the class docstring)
            matches, vector, degraded = await self._beside_search(
                self._beside, terms, keyword_limit, query, vector_pool, resource_id, thread_id, threshold)
        else:
            # One trip to the store: the keyword candidates, and the neighbours of every candidate of the pool.
            # (After the vector side, not beside it: both are CPU work on two cores, and one trip is cheaper.)
            vector, degraded = await self._vector_pool(query, vector_pool, resource_id, thread_id, threshold,
                                                       wants_vectors)
            matches = await keywords.keyword_search(terms, resource_id=resource_id, thread_id=thread_id,
                                                    limit=keyword_limit, neighbours_of=[hit[0] for hit in vector],
                                                    counts=False)  # the ranking reads their scores alone
        candidates, lift = (await self._dated(matches.candidates, dates, keyword_pool, resource_id, thread_id) if dates
                            else (matches.candidates[:keyword_pool], None))
        return Found(ranked(candidates, vector, weight, matches.neighbours, lift=lift, limit=depth), degraded)

    async def _vector_pool(self, query: str, pool: int, resource_id: str | None, thread_id: str | None,
                           threshold: float | None, wanted: bool) -> tuple[list[tuple[str, str, str, float]], bool]:
        """The vector side's candidates above ``threshold`` (none when not ``wanted``), and whether the embedder
        failed (then none: the keyword side answers alone)."""
        if not wanted:
            return [], False
        try:
            vector = await self._nearest(query, pool, resource_id, thread_id)
        except EmbedderError:
            _log.warning("embedder unavailable: recall answers with keyword hits only")
            return [], True
        if threshold is not None:
            vector = [hit for hit in vector if hit[3] >= threshold]
        return vector, False

    async def _beside_search(self, beside: KeywordSearchBeside, terms: Sequence[str], keyword_limit: int, query: str,
                             vector_pool: int, resource_id: str | None, thread_id: str | None,
                             threshold: float | None,
                             ) -> tuple[KeywordMatches, list[tuple[str, str, str, float]], bool]:
        """Both sides at once: the keyword search waits on the server while the vector query runs, and reads the
        neighbours of both sides' candidates once the vector hits are known. A failure of either side is raised as
        itself."""
        matches = NO_MATCHES
        vector: list[tuple[str, str, str, float]] = []
        degraded = False
        vector_done = anyio.Event()
        errors: list[Exception] = []

        async def vector_side() -> None:
            nonlocal vector, degraded
            try:
                vector, degraded = await self._vector_pool(query, vector_pool, resource_id, thread_id, threshold,
                                                           True)
            finally:
                vector_done.set()

        async def vector_ids() -> list[str]:
            await vector_done.wait()
            return [hit[0] for hit in vector]

        async def keyword_side() -> None:
            nonlocal matches
            matches = await beside.keyword_search_beside(terms, resource_id=resource_id, thread_id=thread_id,
                                                         limit=keyword_limit, neighbours_of=vector_ids)

        async def guarded(side: Callable[[], Awaitable[None]]) -> None:
            try:
                await side()
            except Exception as exc:  # raised as itself below, not in a group
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(guarded, vector_side)
            await guarded(keyword_side)
        if errors:
            raise errors[0]
        return matches, vector, degraded

    async def _dated(self, candidates: Sequence[KeywordCandidate], dates: Sequence[NamedDate], pool: int,
                     resource_id: str | None, thread_id: str | None) -> tuple[list[KeywordCandidate], dict[str, float]]:
        """The keyword pool once the candidates created on a date the query names are lifted (``_rank.lifted``)."""
        if not candidates:
            return [], {}
        assert self._store is not None
        ids = [c.message_id for c in candidates]
        if self._times is not None:  # their times alone
            times = await self._times.created_times(ids, resource_id=resource_id, thread_id=thread_id)
        else:
            times = {m.id: m.created_at for m in await self._store.get_messages_by_id(ids)}
        verdicts: dict[date, bool] = {}  # a pool's messages share few days: each day is judged once
        dated: set[str] = set()
        for mid, at in times.items():
            day = utc_day(at)
            verdict = verdicts.get(day)
            if verdict is None:
                verdict = verdicts[day] = any(named.holds_day(day) for named in dates)
            if verdict:
                dated.add(mid)
        return lifted(candidates, dated, pool)

    async def _vector_only(self, query: str, top_k: int, resource_id: str | None, thread_id: str | None,
                           threshold: float | None) -> Found:
        """Each chunk's top-k above ``threshold``, in order, each message once (the reference's recall)."""
        if self._vectors is None:
            return Found([])
        found: dict[str, Ranked] = {}
        try:
            for chunk in chunk_text(query, self._max_chunk_chars):
                for hit in await self._vectors.query(chunk, top_k=top_k, resource_id=resource_id,
                                                     thread_id=thread_id, threshold=threshold):
                    found.setdefault(hit.message_id, Ranked(message_id=hit.message_id, thread_id=hit.thread_id,
                                                            resource_id=hit.resource_id, score=hit.score,
                                                            fused=hit.score, vector_score=hit.score))
        except EmbedderError:
            return Found([], degraded=True)
        return Found(list(found.values()))

    async def _nearest(self, query: str, top_k: int, resource_id: str | None,
                       thread_id: str | None) -> list[tuple[str, str, str, float]]:
        """The vector pool: the best similarity of each message over the query's chunks, best first."""
        assert self._vectors is not None
        chunks = chunk_text(query, self._max_chunk_chars)
        if len(chunks) == 1:  # the index's hits: best first, one a message
            return [(hit.message_id, hit.thread_id, hit.resource_id, hit.score) for hit in await self._vectors.query(
                chunks[0], top_k=top_k, resource_id=resource_id, thread_id=thread_id)]
        best: dict[str, tuple[str, str, str, float]] = {}
        for chunk in chunks:
            for hit in await self._vectors.query(chunk, top_k=top_k, resource_id=resource_id, thread_id=thread_id):
                old = best.get(hit.message_id)
                if old is None or hit.score > old[3]:
                    best[hit.message_id] = (hit.message_id, hit.thread_id, hit.resource_id, hit.score)
        return sorted(best.values(), key=lambda hit: -hit[3])[:top_k]

def metadata_of(message: Message, thread: Thread | None) -> dict[str, object]:
    """A message's metadata as ``@mastra/memory`` stores it with the message's vectors: its thread's metadata, then
    its ids, role, text and time (the thread's metadata as it is now)."""
    return {**(thread.metadata if thread is not None and thread.metadata else {}), "message_id": message.id,
            "thread_id": message.thread_id, "resource_id": message.resource_id, "role": message.role,
            "content": message_text(message), "created_at": to_iso(message.created_at)}


def as_vector_hits(ranked: Sequence[Ranked], top_k: int) -> list[VectorHit]:
    """The first ``top_k`` as the hits the ``semantic-recall`` processor takes (score: the fused, smoothed one)."""
    return [VectorHit(r.message_id, r.thread_id, r.resource_id, r.score) for r in ranked[:top_k]]
