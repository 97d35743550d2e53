"""The ranking of hybrid recall, as pure functions: fusion, reply smoothing and the order of hits (the keyword score
itself is ``threadmind.stores.keyword_ranking``, which every store computes for its candidates).

Why this ranking (measured on three LoCoMo conversations, 382 questions; ``bench/bench_recall.py``): evidence recall
at the reference defaults (top 4, messageRange 1) 0.397 with vectors alone (hash embedder), 0.672 with FTS5's bm25
alone, 0.686 with the best plain fusion of the two (min-max, keyword weight 0.8), 0.746 with this ranking (0.746
with WordLlama too; 0.711 / 0.720 without the date lift and with vector pools twice as deep), which also hands back
fewer characters (1 490 a question against 1 832 for vectors alone).
Leave-one-conversation-out tuning never beat these defaults on the conversation left out.

* **Keyword score** = BM25 with the scope's own statistics × ``coverage ** 0.5``, where coverage is the share of the
  query's idf that the message holds (the classic coordination factor: bm25 alone over-rewards a very short message
  matching one common query word; +0.02–0.03). The query keeps at most its 16 rarest words in the scope.
* **Fusion**: ``0.9 × keyword / best keyword + 0.1 × min-max(cosine)`` over pools of 24 keyword candidates (4 a
  hit beyond 6 hits) and as many vector candidates as hits are asked for (at least 4): the vector side is the very
  query vector-only recall asks. Keyword pools of 16–100 were within ±0.005, 12 lost 0.01–0.02; 24 score as 32 do
  with both embedders, for a quarter less work a query, and 16 lose 0.003–0.008. Vector pools of twice the hits
  score alike (hash / WordLlama: top 4, range 1 0.739 / 0.746 against 0.746 / 0.746; top 5 0.649 / 0.656 against
  0.654 / 0.653; top 10 0.729 / 0.722 against 0.727 / 0.721) for 0.02–0.03 ms more a query.
  Score fusion keeps bm25's large margins, which rank fusions throw away (RRF k=60: 0.57, Borda: 0.56); min-max and
  z-score sums behave alike and both need the keyword side to dominate with embedders this weak; weights 0.8–1.0 are
  within ±0.01, and 0.9 lets the vectors reorder near-ties and decide alone when no word matches.
* **Reply smoothing**: ``s(m) = f(m) + max(0.5 × f(previous), 0.25 × f(next))`` in the same thread. In a dialogue
  the message holding an answer often repeats none of the question's words; its predecessor (the question) does.
  +0.07 at top 5 without context, +0.01–0.03 at the defaults, and fewer characters (the ±1 windows land on
  question-and-answer pairs). A message outside both pools can enter through its neighbour.
* **Dates**: a keyword candidate created within a day of a date the query names (``"on 13 October, 2023"``,
  ``"in May 2023"``; see ``_dates``) gains half the best keyword score before fusion, taken from a keyword pool
  twice as deep (whose creation times are read: 0.4 ms a query on SQLite; four times as deep ranks the same for
  0.6 ms). The words of such a question match the talk around the event; its date picks the day it was told. 31
  of the 382 questions name a date: +0.028 at the defaults (0.711 -> 0.739), +0.013 at top 5 without context,
  each conversation gaining; a quarter to half the best score are alike, the whole best score loses 0.01, the day
  alone (no day either side) 0.003.
* **Selection**: plain score order. Skipping hits whose context windows overlap was measured and refuted (−0.02 to
  −0.05, and more characters): evidence clusters around adjacent high-ranked messages.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

from ..stores import KeywordCandidate

__all__ = ("DATE_LIFT", "DATE_POOL", "DEFAULT_KEYWORD_WEIGHT", "KEYWORD_POOL", "VECTOR_POOL", "Ranked", "lifted",
           "pools", "ranked")

DEFAULT_KEYWORD_WEIGHT = 0.9
"""The keyword side's share of a fused score when ``keywordWeight`` is not set."""
KEYWORD_POOL = 24
"""Keyword candidates taken before fusion for up to 6 hits (4 a hit beyond that)."""
VECTOR_POOL = 4
"""Vector candidates taken before fusion for up to 4 hits (one a hit beyond that)."""
DATE_LIFT = 0.5
"""What a keyword candidate created on a date the query names gains, as a share of the best keyword score."""
DATE_POOL = 2
"""How many times deeper the keyword pool is read when the query names a date (the lift reorders it)."""
_PREVIOUS, _NEXT = 0.5, 0.25


class Ranked(msgspec.Struct, kw_only=True, gc=False):
    """One candidate of a ranking: its fused, smoothed ``score`` and what each side gave it (not tracked by the
    garbage collector: its fields can hold no cycle)."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float = 0.0
    fused: float = 0.0
    vector_score: float | None = None  # cosine (or the vector store's similarity)
    keyword_score: float | None = None  # BM25 x coverage, before normalisation


def pools(top_k: int) -> tuple[int, int]:
    """How many candidates each side (keyword, vector) hands the fusion for ``top_k`` hits."""
    return max(KEYWORD_POOL, 4 * top_k), max(VECTOR_POOL, top_k)


def lifted(keyword: Sequence[KeywordCandidate], dated: Collection[str],
           pool: int) -> tuple[list[KeywordCandidate], dict[str, float]]:
    """The best ``pool`` of ``keyword`` (best first) once those in ``dated`` (created on a date the query names)
    gained :data:`DATE_LIFT` of the best score, and what each gained (the lift :func:`ranked` adds)."""
    if not keyword or not dated:
        return list(keyword[:pool]), {}
    gain = DATE_LIFT * keyword[0].score
    lift = {c.message_id: gain for c in keyword if c.message_id in dated}
    order = sorted(range(len(keyword)), key=lambda at: -(keyword[at].score + lift.get(keyword[at].message_id, 0.0)))
    return [keyword[at] for at in order[:pool]], lift


def ranked(keyword: Sequence[KeywordCandidate], vector: Sequence[tuple[str, str, str, float]], weight: float,
           neighbours: Mapping[str, tuple[str | None, str | None]], *, lift: Mapping[str, float] | None = None,
           limit: int | None = None) -> list[Ranked]:
    """The hybrid ranking of both pools, best first: the ``limit`` best (None: every one scored above 0).

    **Fusion**: ``f(m) = weight × keyword / best + (1 - weight) × min-max(cosine)`` for every candidate of either pool
    (``keyword``: scored candidates, best first, each score plus its ``lift`` (:func:`lifted`); ``vector``: message
    id, thread id, resource id, similarity, best first). **Smoothing**: each candidate and each of its neighbours
    (``neighbours``: the previous and next message ids of each candidate) scores ``f(m) + max(0.5 f(prev), 0.25
    f(next))``. Ties go to the higher similarity, then to the earlier candidate (keyword rank, then vector rank);
    ``keyword_score`` stays the store's score. Only the hits handed back become :class:`Ranked` (a recall asks for
    4 of about 70 scored)."""
    # message id -> [fused score, similarity, keyword score, thread id, resource id]
    pool: dict[str, list[Any]] = {}
    lift = lift or {}
    if keyword:
        best = keyword[0].score + lift.get(keyword[0].message_id, 0.0)
        for candidate in keyword:
            score = candidate.score + lift.get(candidate.message_id, 0.0)
            pool[candidate.message_id] = [weight * (score / best if best > 0 else 1.0), None, candidate.score,
                                          candidate.thread_id, candidate.resource_id]
    if vector:
        high, low = vector[0][3], vector[-1][3]
        for message_id, thread_id, resource_id, similarity in vector:
            part = (1.0 - weight) * ((similarity - low) / (high - low) if high > low else 1.0)
            entry = pool.get(message_id)
            if entry is None:
                pool[message_id] = [part, similarity, None, thread_id, resource_id]
            else:
                entry[0] += part
                entry[1] = similarity
    gained: dict[str, float] = {}  # what each message gains from its neighbours
    named: dict[str, list[Any]] = {}  # neighbours outside the pool -> the candidate that named them first
    get = gained.get
    name = named.setdefault  # the first candidate to name a neighbour keeps it
    for message_id, entry in pool.items():
        pair = neighbours.get(message_id)
        if pair is None:
            continue
        previous, following = pair
        fused = entry[0]
        if following is not None:  # entry is following's previous
            gain = fused * _PREVIOUS
            if gain > get(following, 0.0):
                gained[following] = gain
            if following not in pool:
                name(following, entry)
        if previous is not None:  # ... and previous's next
            gain = fused * _NEXT
            if gain > get(previous, 0.0):
                gained[previous] = gain
            if previous not in pool:
                name(previous, entry)
    scores = [entry[0] + get(message_id, 0.0) for message_id, entry in pool.items()]
    # With a limit, a message below the limit-th best score of the pool is never handed back (a neighbour outside the
    # pool loses its ties too: see the order below), so only those that can be are ordered.
    low = 0.0  # the pool's candidates kept score above 0 and at least this; the neighbours outside, above it
    if limit is not None:
        positive = sorted([score for score in scores if score > 0.0], reverse=True)
        if len(positive) >= limit:
            low = positive[limit - 1] if limit > 0 else math.inf
    # (-score, -similarity, position, id, entry, in the pool): positions differ, so the rest is never compared
    ordered: list[tuple[Any, ...]] = []
    add = ordered.append
    inf = math.inf
    for position, ((message_id, entry), score) in enumerate(zip(pool.items(), scores, strict=True)):
        if score > 0.0 and score >= low:
            similarity = entry[1]
            add((-score, inf if similarity is None else -similarity, position, message_id, entry, True))
    position = len(pool)
    for other, source in named.items():  # outside both pools: its neighbour's gain alone, no similarity
        score = get(other, 0.0)
        if score > low:
            add((-score, inf, position, other, source, False))
        position += 1
    ordered.sort()
    best_first = ordered if limit is None else ordered[:limit]
    out: list[Ranked] = []
    for item in best_first:
        entry = item[4]
        if item[5]:
            out.append(Ranked(message_id=item[3], thread_id=entry[3], resource_id=entry[4], score=-item[0],
                              fused=entry[0], vector_score=entry[1], keyword_score=entry[2]))
        else:
            out.append(Ranked(message_id=item[3], thread_id=entry[3], resource_id=entry[4], score=-item[0]))
    return out

