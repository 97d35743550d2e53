"""Cached scope blocks for exact search: every change to a scope's rows must be visible to the next search."""

from __future__ import annotations

import random

import numpy as np
import pytest

from threadmind.errors import ConfigError
from threadmind.stores._vectors._hnsw import HnswIndex, HnswVectorStore, IndexEntry

DIM = 16


def _index() -> HnswIndex:
    return HnswIndex(name="memory_messages_16", dim=DIM, metric="cosine", m=8, ef_construction=32, ef_search=32,
                      directory=None)


def _unit(rng: np.random.Generator, n: int = 1) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)  # type: ignore[no-any-return]


def _top(index: HnswIndex, query: np.ndarray, *, resource: str | None = None, thread: str | None = None,
         k: int = 3) -> list[str]:
    return [h.message_id for h in index.search(query, k, resource_id=resource, thread_id=thread, threshold=None)]


def test_a_new_vector_in_a_searched_resource_is_found_next_time() -> None:
    rng = np.random.default_rng(1)
    index = _index()
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", "t1", "r1") for i in range(20)], _unit(rng, 20), seq=1, defer=True)
    query = _unit(rng)[0]
    before = _top(index, query, resource="r1")  # caches r1's block
    index.upsert([IndexEntry(0, "new", "new", "t1", "r1")], query[None, :], seq=2, defer=True)
    assert _top(index, query, resource="r1")[0] == "new"
    assert _top(index, query, thread="t1")[0] == "new"
    index.delete_messages(["new"], seq=3)
    assert _top(index, query, resource="r1") == before


def test_a_new_vector_is_appended_to_the_cached_blocks_of_its_scopes() -> None:
    """An agent writes then searches the same scope each turn: the block grows instead of being rebuilt."""
    rng = np.random.default_rng(7)
    index = _index()
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", "t1", "r1") for i in range(6)], _unit(rng, 6), seq=1, defer=True)
    query = _unit(rng)[0]
    _top(index, query, resource="r1")
    block = index.blocks._blocks[("r", "r1")]
    for turn in range(20):
        vector = _unit(rng)
        index.upsert([IndexEntry(0, f"n{turn}", f"n{turn}", "t1", "r1")], vector, seq=2 + turn, defer=turn % 2 == 0)
        assert _top(index, vector[0], resource="r1", k=1) == [f"n{turn}"]
        assert _top(index, vector[0], thread="t1", k=1) == [f"n{turn}"]
    assert index.blocks._blocks[("r", "r1")] is block and block.size == 26


def test_a_replaced_vector_is_scored_anew_though_the_scope_keeps_its_size() -> None:
    rng = np.random.default_rng(6)
    index = _index()
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", "t1", "r1") for i in range(8)], _unit(rng, 8), seq=1, defer=True)
    query = _unit(rng)[0]
    _top(index, query, resource="r1")  # caches the block of r1
    _top(index, query)  # and of the whole index
    index.upsert([IndexEntry(0, "m5", "m5", "t1", "r1")], query[None, :], seq=2, defer=True)
    assert _top(index, query, resource="r1", k=1) == ["m5"]
    assert _top(index, query, k=1) == ["m5"]


def test_a_moved_thread_leaves_the_old_resource_block_and_joins_the_new_one() -> None:
    rng = np.random.default_rng(2)
    index = _index()
    index.upsert([IndexEntry(0, f"a{i}", f"a{i}", "ta", "r1") for i in range(10)], _unit(rng, 10), seq=1, defer=True)
    moving = _unit(rng, 5)
    index.upsert([IndexEntry(0, f"b{i}", f"b{i}", "tb", "r2") for i in range(5)], moving, seq=2, defer=True)
    assert _top(index, moving[0], resource="r2")[0] == "b0"
    assert "b0" not in _top(index, moving[0], resource="r1")  # both resources' blocks are cached now
    index.move_thread("tb", "r1", seq=3)
    assert _top(index, moving[0], resource="r1")[0] == "b0"
    assert _top(index, moving[0], resource="r2") == []


def test_a_reused_row_is_scored_with_its_new_vector() -> None:
    rng = np.random.default_rng(3)
    index = _index()
    first = _unit(rng, 4)
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", "t1", "r1") for i in range(4)], first, seq=1, defer=True)
    assert _top(index, first[2], resource="r1", k=1) == ["m2"]
    index.delete_messages(["m2"], seq=2)  # frees its row
    other = _unit(rng)
    index.upsert([IndexEntry(0, "x", "x", "t2", "r2")], other, seq=3, defer=True)  # takes the freed row
    assert _top(index, other[0], resource="r2", k=1) == ["x"]
    assert "m2" not in _top(index, first[2], resource="r1", k=4)
    assert "x" not in _top(index, other[0], resource="r1", k=4)


def test_the_block_cache_stays_within_its_byte_budget() -> None:
    rng = np.random.default_rng(4)
    budget = 4 * 50 * (DIM * 4 + 8)  # four blocks of 50 rows (vectors and row numbers)
    index = HnswVectorStore(scope_cache_bytes=budget).open_index("memory_messages_16", DIM)
    vectors = _unit(rng, 50 * 12)
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 50}", f"r{i // 50}") for i in range(600)], vectors, seq=1,
                 defer=True)
    for r in range(12):
        assert _top(index, vectors[r * 50 + 7], resource=f"r{r}", k=1) == [f"m{r * 50 + 7}"]
        assert index.memory_bytes() > 0
        assert index.blocks.nbytes <= budget
    assert len(index.blocks._blocks) == 4


def test_a_zero_budget_caches_nothing_and_still_finds_everything() -> None:
    rng = np.random.default_rng(8)
    index = HnswVectorStore(scope_cache_bytes=0).open_index("memory_messages_16", DIM)
    vectors = _unit(rng, 30)
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", "t1", f"r{i % 2}") for i in range(30)], vectors, seq=1, defer=True)
    for i in range(30):
        assert _top(index, vectors[i], resource=f"r{i % 2}", k=1) == [f"m{i}"]
    assert not index.blocks._blocks and index.blocks.nbytes == 0
    with pytest.raises(ConfigError, match="scope_cache_bytes"):
        HnswVectorStore(scope_cache_bytes=-1)


def test_exact_search_matches_a_fresh_oracle_through_random_changes() -> None:
    """Upserts, deletes and moves interleaved with searches in every scope kind, checked against numpy."""
    rng = np.random.default_rng(5)
    pick = random.Random(5)
    index = _index()
    live: dict[str, tuple[str, str, np.ndarray]] = {}  # message -> (thread, resource, vector)
    owner = {f"t{t}": f"r{t % 3}" for t in range(6)}
    for step in range(400):
        op = pick.random()
        if op < 0.5 or len(live) < 5:
            mid = f"m{pick.randrange(60)}"
            thread = pick.choice(sorted(owner))
            if mid in live:
                thread = live[mid][0]  # a message never changes thread
            vector = _unit(rng)
            index.upsert([IndexEntry(0, mid, mid, thread, owner[thread])], vector, seq=step, defer=pick.random() < 0.5)
            live[mid] = (thread, owner[thread], vector[0])
        elif op < 0.65:
            mid = pick.choice(sorted(live))
            index.delete_messages([mid], seq=step)
            del live[mid]
        elif op < 0.72:
            thread = pick.choice(sorted(owner))
            owner[thread] = f"r{pick.randrange(3)}"
            index.move_thread(thread, owner[thread], seq=step)
            live = {m: (t, owner[t] if t == thread else r, v) for m, (t, r, v) in live.items()}
        else:
            query = _unit(rng)[0]
            kind = pick.choice(["resource", "thread", "all"])
            key = pick.choice(sorted(owner))
            scope = {m: v for m, (t, r, v) in live.items()
                     if kind == "all" or (kind == "thread" and t == key) or (kind == "resource" and r == owner[key])}
            got = _top(index, query, k=4, resource=owner[key] if kind == "resource" else None,
                       thread=key if kind == "thread" else None)
            expected = sorted(scope, key=lambda m: -float(scope[m] @ query))[:4]
            assert got == expected, (step, kind)


def test_rows_prepared_early_score_like_rows_prepared_at_upsert() -> None:
    """The index actor normalises a batch while its saves commit and then upserts it with ``prepared=True``."""
    rng = np.random.default_rng(11)
    raw = (rng.normal(size=(12, DIM)) * rng.uniform(0.1, 9.0, size=(12, 1))).astype(np.float32)  # not unit
    late, early = _index(), _index()
    entries = [IndexEntry(0, f"m{i}", f"m{i}", f"t{i % 3}", "r1") for i in range(12)]
    late.upsert([IndexEntry(0, e.vector_id, e.message_id, e.thread_id, e.resource_id) for e in entries], raw, seq=1,
                defer=True)
    early.upsert(entries, early.prepare(raw), seq=1, defer=True, prepared=True)
    for query in _unit(rng, 5):
        got_late = late.search(query, 5, resource_id="r1", thread_id=None, threshold=None)
        got_early = early.search(query, 5, resource_id="r1", thread_id=None, threshold=None)
        assert [h.message_id for h in got_early] == [h.message_id for h in got_late]
        assert [h.score for h in got_early] == [h.score for h in got_late]
    assert early.flush() == late.flush() == 12  # and HNSW gets the same rows
    query = _unit(rng)[0]
    assert _top(early, query, k=4) == _top(late, query, k=4)
