"""The ranking of hybrid recall, as pure functions: keyword scores, fusion, reply smoothing and the order of hits.

Why this ranking (measured on three LoCoMo conversations, 382 questions; ``bench/bench_recall.py``): evidence recall
at the reference defaults (top 4, messageRange 1) 0.397 with vectors alone (hash embedder), 0.672 with FTS5's bm25
alone, 0.686 with the best plain fusion of the two (min-max, keyword weight 0.8), 0.709 with this ranking, which
also hands back fewer characters (1 498 a question against 1 834 for vectors alone). Leave-one-conversation-out
tuning never beat these defaults on the conversation left out.

* **Keyword score** = BM25 with the scope's own statistics × ``coverage ** 0.5``, where coverage is the share of the
  query's idf that the message holds (the classic coordination factor: bm25 alone over-rewards a very short message
  matching one common query word; +0.02–0.03). The query keeps at most its 16 rarest words in the scope.
* **Fusion**: ``0.9 × keyword / best keyword + 0.1 × min-max(cosine)`` over pools of 100 from each side. Score
  fusion keeps bm25's large margins, which rank fusions throw away (RRF k=60: 0.57, Borda: 0.56); min-max and
  z-score sums behave alike and both need the keyword side to dominate with embedders this weak; weights 0.8–1.0
  are within ±0.01, and 0.9 lets the vectors reorder near-ties and decide alone when no word matches.
* **Reply smoothing**: ``s(m) = f(m) + max(0.5 × f(previous), 0.25 × f(next))`` in the same thread. In a dialogue
  the message holding an answer often repeats none of the question's words; its predecessor (the question) does.
  +0.07 at top 5 without context, +0.01–0.03 at the defaults, and fewer characters (the ±1 windows land on
  question-and-answer pairs). A message outside both pools can enter through its neighbour.
* **Selection**: plain score order. Skipping hits whose context windows overlap was measured and refuted (−0.02 to
  −0.05, and more characters): evidence clusters around adjacent high-ranked messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec

from ..stores import KEYWORD_TERMS, KeywordCandidate, KeywordMatches, bm25, idf

__all__ = ("DEFAULT_KEYWORD_WEIGHT", "KEYWORD_TERMS", "POOL", "Ranked", "fuse", "keyword_scores", "smoothed")

DEFAULT_KEYWORD_WEIGHT = 0.9
"""The keyword side's share of a fused score when ``keywordWeight`` is not set."""
POOL = 100
"""Candidates taken from each side before fusion."""
_COVERAGE_POWER = 0.5
_PREVIOUS, _NEXT = 0.5, 0.25


class Ranked(msgspec.Struct, kw_only=True):
    """One candidate of a ranking: its fused, smoothed ``score`` and what each side gave it."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float = 0.0
    fused: float = 0.0
    vector_score: float | None = None  # cosine (or the vector store's similarity)
    keyword_score: float | None = None  # BM25 x coverage, before normalisation


def keyword_scores(matches: KeywordMatches, limit: int = POOL) -> list[tuple[KeywordCandidate, float]]:
    """The best ``limit`` candidates by BM25 (the scope's statistics, the query's rarest :data:`KEYWORD_TERMS`
    words) times the square root of their idf coverage, best first."""
    docs = matches.docs
    present = sorted((n, i, lexeme) for i, (lexeme, n) in enumerate(matches.frequencies.items()) if n > 0)
    kept = [lexeme for _, _, lexeme in present[:KEYWORD_TERMS]]
    if not kept or not docs:
        return []
    weights = {lexeme: idf(matches.frequencies[lexeme], docs) for lexeme in kept}
    cover = {lexeme: max(0.0, math.log((docs - matches.frequencies[lexeme] + 0.5)
                                       / (matches.frequencies[lexeme] + 0.5))) for lexeme in kept}
    total = sum(cover.values())
    scored: list[tuple[KeywordCandidate, float]] = []
    for candidate in matches.candidates:
        base = bm25(candidate.counts, candidate.length, weights, matches.average_length)
        if base <= 0.0:
            continue
        coverage = sum(cover[lexeme] for lexeme in candidate.counts if lexeme in cover) / total if total else 1.0
        scored.append((candidate, base * coverage ** _COVERAGE_POWER))
    scored.sort(key=lambda item: -item[1])
    return scored[:limit]


def fuse(keyword: Sequence[tuple[KeywordCandidate, float]], vector: Sequence[tuple[str, str, str, float]],
         weight: float) -> dict[str, Ranked]:
    """``weight × keyword / best + (1 - weight) × min-max(cosine)`` for every candidate of either pool (``vector``:
    message id, thread id, resource id, similarity)."""
    out: dict[str, Ranked] = {}
    best = max((score for _, score in keyword), default=0.0)
    for candidate, score in keyword:
        out[candidate.message_id] = Ranked(message_id=candidate.message_id, thread_id=candidate.thread_id,
                                           resource_id=candidate.resource_id, keyword_score=score,
                                           fused=weight * (score / best if best > 0 else 1.0))
    if vector:
        low = min(score for *_, score in vector)
        high = max(score for *_, score in vector)
        for message_id, thread_id, resource_id, score in vector:
            part = (1.0 - weight) * ((score - low) / (high - low) if high > low else 1.0)
            entry = out.get(message_id)
            if entry is None:
                entry = out[message_id] = Ranked(message_id=message_id, thread_id=thread_id, resource_id=resource_id)
            entry.vector_score = score
            entry.fused += part
    for entry in out.values():
        entry.score = entry.fused
    return out


def smoothed(pool: Mapping[str, Ranked], neighbours: Mapping[str, tuple[str | None, str | None]]) -> list[Ranked]:
    """Every candidate of ``pool`` and each of their neighbours, scored ``f(m) + max(0.5 f(prev), 0.25 f(next))``
    and ordered best first (``neighbours``: the previous and next message ids of each candidate). Ties go to the
    higher similarity, then to the earlier candidate (keyword rank, then vector rank)."""
    before: dict[str, str] = {}
    after: dict[str, str] = {}
    joined: dict[str, Ranked] = {}
    for message_id, entry in pool.items():
        previous, following = neighbours.get(message_id, (None, None))
        if previous is not None:
            before[message_id] = previous
            after.setdefault(previous, message_id)
        if following is not None:
            after[message_id] = following
            before.setdefault(following, message_id)
        for other in (previous, following):
            if other is not None and other not in pool and other not in joined:
                joined[other] = Ranked(message_id=other, thread_id=entry.thread_id, resource_id=entry.resource_id)
    out: list[Ranked] = []
    for entry in (*pool.values(), *joined.values()):
        entry = msgspec.structs.replace(entry)
        previous_entry = pool.get(before.get(entry.message_id, ""))
        next_entry = pool.get(after.get(entry.message_id, ""))
        lift = max(_PREVIOUS * previous_entry.fused if previous_entry is not None else 0.0,
                   _NEXT * next_entry.fused if next_entry is not None else 0.0)
        entry.score = entry.fused + lift
        if entry.score > 0.0:
            out.append(entry)
    out.sort(key=lambda r: (-r.score, -(r.vector_score if r.vector_score is not None else -math.inf)))
    return out
