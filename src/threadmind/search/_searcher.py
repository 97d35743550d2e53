"""The one retrieval pipeline: ``Memory.recall(vector_search_string=...)``, the ``semantic-recall`` processor,
``Memory.search`` and the CLI's ``search`` all rank through :meth:`Searcher.search`, so the same query with the
same options gives the same hits whichever door it came through.

Three modes (``semanticRecall.search``):

* ``"vector"``: the reference's semantic recall, hit for hit: the query is chunked as stored texts are, each chunk's
  top-k nearest messages are taken (above ``threshold``), in order, each message once.
* ``"keyword"``: the store's keyword index alone (no vector store, no embedder), ranked as in ``_rank``.
* ``"hybrid"`` (default): both, fused (``_rank``); ``threshold`` drops vector candidates only, never a keyword hit.
  During an embedder outage the keyword side still answers (``degraded``).

A store without a keyword index (a third party's) answers hybrid recall with its vectors alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import msgspec

from .._config import SearchMode
from ..embedders import chunk_text
from ..errors import EmbedderError
from ..stores import KeywordCandidate, KeywordSearch, Neighbours, VectorHit, query_terms
from ._rank import DEFAULT_KEYWORD_WEIGHT, Ranked, fuse, pools, smoothed

__all__ = ("SEARCH_MODES", "Found", "SearchMode", "Searcher", "VectorQuery", "as_vector_hits")

_log = logging.getLogger("threadmind.search")

SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "vector", "keyword")


class VectorQuery(Protocol):
    """The vector side: the index's nearest messages of a scope for one text."""

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None) -> list[VectorHit]: ...


class Found(msgspec.Struct, frozen=True):
    """What a search found: candidates best first (more than asked for when the ranking had them), and whether the
    vector side failed (an embedder outage) so only keyword hits came back."""

    ranked: list[Ranked]
    degraded: bool = False


class Searcher:
    """Ranks a scope's messages for a query (see the module docstring).

    :param keywords: the store, when it keeps a keyword index.
    :param vectors: the index, when there is a vector store and an embedder.
    :param max_chunk_chars: how the query is chunked for the vector side (``semanticRecall.maxChunkChars``).
    """

    def __init__(self, keywords: KeywordSearch | None, vectors: VectorQuery | None, *,
                 max_chunk_chars: int = 16384) -> None:
        self._keywords = keywords
        self._vectors = vectors
        self._max_chunk_chars = max_chunk_chars

    async def search(self, query: str, *, top_k: int, resource_id: str | None, thread_id: str | None,
                     mode: SearchMode = "hybrid", keyword_weight: float | None = None,
                     threshold: float | None = None) -> Found:
        """The scope's messages for ``query`` best first: the thread when ``thread_id`` is given, else the
        resource. At least the ``top_k`` best when the scope has them."""
        weight = 1.0 if mode == "keyword" else (DEFAULT_KEYWORD_WEIGHT if keyword_weight is None else keyword_weight)
        if mode == "vector" or weight <= 0.0 or (self._keywords is None and mode == "hybrid"):
            return await self._vector_only(query, top_k, resource_id, thread_id, threshold)
        keyword_pool, vector_pool = pools(top_k)
        vector: list[tuple[str, str, str, float]] = []
        degraded = False
        if weight < 1.0 and self._vectors is not None:
            try:
                vector = await self._nearest(query, vector_pool, resource_id, thread_id)
            except EmbedderError:
                _log.warning("embedder unavailable: recall answers with keyword hits only")
                degraded = True
            if threshold is not None:
                vector = [hit for hit in vector if hit[3] >= threshold]
        keyword: list[KeywordCandidate] = []
        neighbours: Neighbours = {}
        if self._keywords is not None:
            # One trip to the store: the keyword candidates, and the neighbours of every candidate of the pool.
            # (After the vector side, not beside it: both are CPU work on two cores, and one trip is cheaper.)
            matches = await self._keywords.keyword_search(
                query_terms(query), resource_id=resource_id, thread_id=thread_id, limit=keyword_pool,
                neighbours_of=[hit[0] for hit in vector])
            keyword, neighbours = matches.candidates[:keyword_pool], matches.neighbours
        return Found(smoothed(fuse(keyword, vector, weight), neighbours), degraded)

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
        best: dict[str, tuple[str, str, str, float]] = {}
        for chunk in chunk_text(query, self._max_chunk_chars):
            for hit in await self._vectors.query(chunk, top_k=top_k, resource_id=resource_id, thread_id=thread_id):
                old = best.get(hit.message_id)
                if old is None or hit.score > old[3]:
                    best[hit.message_id] = (hit.message_id, hit.thread_id, hit.resource_id, hit.score)
        return sorted(best.values(), key=lambda hit: -hit[3])[:top_k]

def as_vector_hits(ranked: Sequence[Ranked], top_k: int) -> list[VectorHit]:
    """The first ``top_k`` as the hits the ``semantic-recall`` processor takes (score: the fused, smoothed one)."""
    return [VectorHit(r.message_id, r.thread_id, r.resource_id, r.score) for r in ranked[:top_k]]
