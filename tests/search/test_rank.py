"""The hybrid ranking (``threadmind.search._rank.ranked``) over random pools: a recall that asks for the first few
gets exactly the first few of the whole ranking, and the whole ranking follows the documented scores and order."""

from __future__ import annotations

import random

import pytest

from threadmind.search._rank import ranked
from threadmind.stores import KeywordCandidate


def _pools(rng: random.Random) -> tuple[list[KeywordCandidate], list[tuple[str, str, str, float]],
                                         dict[str, tuple[str | None, str | None]], dict[str, float]]:
    """Keyword and vector pools over one thread of 60 messages (scores with ties), the neighbours of every message,
    and a date lift for a few keyword candidates."""
    ids = [f"m{i}" for i in range(60)]
    neighbours = {mid: (ids[i - 1] if i else None, ids[i + 1] if i + 1 < len(ids) else None)
                  for i, mid in enumerate(ids)}
    keyword = sorted((KeywordCandidate(mid, "t", "r", 5, {}, float(rng.choice([0.5, 1.0, 1.5, 2.0, 3.25])))
                      for mid in rng.sample(ids, rng.randint(0, 24))), key=lambda c: -c.score)
    vector = sorted(((mid, "t", "r", rng.choice([0.1, 0.3, 0.3, 0.7, 0.9]))
                     for mid in rng.sample(ids, rng.randint(0, 8))), key=lambda hit: -hit[3])
    lift = {c.message_id: 0.75 for c in keyword if rng.random() < 0.2}
    return keyword, vector, neighbours, lift


@pytest.mark.parametrize("seed", range(3))
def test_the_first_few_are_the_first_few_of_the_whole_ranking(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        keyword, vector, neighbours, lift = _pools(rng)
        weight = rng.choice([0.0, 0.5, 0.9, 1.0])
        whole = ranked(keyword, vector, weight, neighbours, lift=lift)
        for limit in (1, 4, 10, 200):
            assert ranked(keyword, vector, weight, neighbours, lift=lift, limit=limit) == whole[:limit]


def test_scores_follow_fusion_and_smoothing() -> None:
    """f = 0.9 x keyword / best + 0.1 x min-max(cosine); s = f + max(0.5 f(previous), 0.25 f(next)); best first,
    ties to the higher similarity, then to the earlier candidate; a neighbour outside both pools by its gain alone."""
    neighbours = {"a": (None, "b"), "b": ("a", "c"), "c": ("b", "d"), "d": ("c", None)}
    keyword = [KeywordCandidate("b", "t", "r", 3, {}, 2.0), KeywordCandidate("d", "t", "r", 3, {}, 1.0)]
    vector = [("d", "t", "r", 0.8), ("a", "t", "r", 0.2)]
    hits = {h.message_id: h for h in ranked(keyword, vector, 0.9, neighbours)}
    fused = {"a": 0.0, "b": 0.9, "d": 0.45 + 0.1}
    assert hits["b"].score == pytest.approx(fused["b"] + max(0.5 * fused["a"], 0.25 * 0.0))
    assert hits["d"].score == pytest.approx(fused["d"])  # its previous (c) is outside the pools
    assert hits["c"].score == pytest.approx(max(0.5 * fused["b"], 0.25 * fused["d"]))
    assert hits["c"].vector_score is None and hits["c"].keyword_score is None
    assert (hits["d"].vector_score, hits["d"].keyword_score) == (0.8, 1.0)
    assert "a" in hits and hits["a"].score == pytest.approx(0.25 * fused["b"])  # a's own min-max part is 0
    order = [h.message_id for h in ranked(keyword, vector, 0.9, neighbours)]
    assert order == ["b", "d", "c", "a"]


def test_ties_go_to_the_higher_similarity_then_to_the_earlier_candidate() -> None:
    alone: dict[str, tuple[str | None, str | None]] = {}
    keyword = [KeywordCandidate(mid, "t", "r", 3, {}, 1.0) for mid in ("k1", "k2", "k3")]
    # weight 1: every keyword candidate fuses to 1.0 and the vector side adds nothing
    vector = [("k3", "t", "r", 0.9), ("v1", "t", "r", 0.5), ("k2", "t", "r", 0.5)]
    order = [h.message_id for h in ranked(keyword, vector, 1.0, alone)]
    assert order == ["k3", "k2", "k1"]  # k3 and k2 by similarity; k1, with none, last among the tied
    assert [h.message_id for h in ranked(keyword, vector, 1.0, alone, limit=2)] == ["k3", "k2"]
