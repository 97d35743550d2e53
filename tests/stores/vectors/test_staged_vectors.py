"""Deferred ``add_items``: staged vectors are searchable at once and reach hnswlib at the next flush."""

from __future__ import annotations

import numpy as np
import pytest

from threadmind.stores._vectors._hnsw import BRUTE_FORCE_LIMIT, HnswIndex, IndexEntry


def _index() -> HnswIndex:
    return HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                      directory=None)


def _entries(prefix: str, n: int, thread: str = "t1", resource: str = "r1") -> list[IndexEntry]:
    return [IndexEntry(0, f"{prefix}{i}", f"{prefix}{i}", thread, resource) for i in range(n)]


def _vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)


def test_staged_vectors_are_found_exactly_before_any_add_items() -> None:
    index = _index()
    vectors = _vectors(5, 1)
    index.upsert(_entries("m", 5), vectors, seq=1, defer=True)
    assert index.staged == 5 and index.add_items_calls == 0
    hits = index.search(vectors[3], 1, resource_id=None, thread_id="t1", threshold=None)
    assert hits[0].message_id == "m3" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert index.flush() == 5 and index.staged == 0 and index.add_items_calls == 1
    assert index.search(vectors[3], 1, resource_id=None, thread_id="t1", threshold=None)[0].message_id == "m3"


def test_deleting_a_staged_vector_never_touches_hnswlib() -> None:
    index = _index()
    index.upsert(_entries("m", 3), _vectors(3, 2), seq=1, defer=True)
    index.delete_messages(["m1"], seq=2)
    assert index.staged == 2 and index.count == 2
    assert index.flush() == 2
    # a re-upsert of a flushed message replaces it (mark_deleted on the real label)
    index.upsert(_entries("m", 1), _vectors(1, 3), seq=3, defer=True)
    assert index.count == 2 and index.staged == 1


def test_ann_searches_staged_vectors_beside_hnsw() -> None:
    index = _index()
    n = BRUTE_FORCE_LIMIT + 50
    vectors = _vectors(n, 4)
    index.upsert(_entries("m", n), vectors, seq=1, defer=True)
    assert index.flush() == n
    fresh = _vectors(3, 5)
    index.upsert(_entries("new", 3), fresh, seq=2, defer=True)
    hits = index.search(fresh[1], 3, resource_id=None, thread_id=None, threshold=None)
    assert index.staged == 3  # queries never flush
    assert hits[0].message_id == "new1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    old = index.search(vectors[7], 3, resource_id=None, thread_id=None, threshold=None)
    assert old[0].message_id == "m7"
    assert index.ann_queries == 2
