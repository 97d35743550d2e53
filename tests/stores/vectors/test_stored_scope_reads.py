"""Exact search over a scope whose block is not cached reads the scope's stored rows, not hnswlib's copies.

hnswlib's ``get_items`` costs ~35 µs per 384-d vector, so a cache miss on a 100-vector resource cost ~3.5 ms;
the stored rows cost one read. A row whose write has not returned yet may be older in storage than in the
index: that one still comes from the index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from threadmind.stores import HnswVectorStore, InMemoryStore, SQLiteStore
from threadmind.stores._vector_records import VectorRecord

DIM = 16


def _records(vectors: np.ndarray, resource: str, first: int = 0) -> list[VectorRecord]:
    return [VectorRecord(vector_id=f"m{i}", message_id=f"m{i}", thread_id=f"{resource}-t{i % 3}", resource_id=resource,
                         role="user", created_at="2026-01-01T00:00:00.000Z", embedding=v.astype("<f4").tobytes())
            for i, v in enumerate(vectors, first)]


def _exact(vectors: np.ndarray, query: np.ndarray, k: int) -> list[str]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    order = np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")[:k]
    return [f"m{i}" for i in order]


async def test_a_cache_miss_reads_the_stored_rows_and_copies_nothing_out_of_hnswlib(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.open()
    vector = HnswVectorStore(None, scope_cache_bytes=0)  # no cached blocks: every search is a miss
    await vector.open(store, owner=object())
    try:
        await vector.use_index("memory_messages_16", DIM)
        raw = np.random.default_rng(5).normal(size=(60, DIM)).astype(np.float32)
        await vector.write(_records(raw, "r1"), staged=False)
        await vector.write(_records(np.random.default_rng(6).normal(size=(40, DIM)).astype(np.float32), "r2", 60),
                           staged=False)
        await vector.flush()  # every vector is in hnswlib now, none is waiting beside it
        for q in range(5):
            query = raw[q * 7] + np.float32(0.01)
            hits = await vector.query(query, top_k=5, resource_id="r1", thread_id=None)
            assert [h.message_id for h in hits] == _exact(raw, query, 5)
            assert all(h.resource_id == "r1" for h in hits)
            thread_hits = await vector.query(query, top_k=3, resource_id=None, thread_id="r1-t1")
            members = [i for i in range(60) if i % 3 == 1]
            expected = [f"m{members[int(j[1:])]}" for j in _exact(raw[members], query, 3)]
            assert [h.message_id for h in thread_hits] == expected
        stats = vector.statistics()
        assert stats.stored_scope_reads == 10
        assert stats.ann_vector_copies == 0
    finally:
        await vector.close()
        await store.aclose()


async def test_a_row_whose_write_has_not_returned_is_taken_from_the_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.open()
    vector = HnswVectorStore(None, scope_cache_bytes=0)
    await vector.open(store, owner=object())
    try:
        await vector.use_index("memory_messages_16", DIM)
        rng = np.random.default_rng(9)
        old = rng.normal(size=(20, DIM)).astype(np.float32)
        await vector.write(_records(old, "r1"), staged=False)
        await vector.flush()
        new = old.copy()
        new[4] = -old[4]  # m4 re-embedded: its stored row still holds the old vector until the write returns
        records = _records(new, "r1")
        assert vector.stage(records[4:5], vector.prepare(new[4:5]))
        await vector.flush()  # in hnswlib already, its row not written yet
        hits = await vector.query(new[4], top_k=1, resource_id="r1", thread_id=None)
        assert [h.message_id for h in hits] == ["m4"] and hits[0].score > 0.999
        assert vector.statistics().ann_vector_copies == 1  # just the unsettled one
        await vector.write(records[4:5], staged=True)  # stored now: the next miss reads it from the row
        hits = await vector.query(new[4], top_k=1, resource_id="r1", thread_id=None)
        assert [h.message_id for h in hits] == ["m4"] and hits[0].score > 0.999
        assert vector.statistics().ann_vector_copies == 1
    finally:
        await vector.close()
        await store.aclose()


async def test_records_kept_in_memory_are_not_read_per_search() -> None:
    store = InMemoryStore()
    await store.open()
    vector = HnswVectorStore(None, scope_cache_bytes=0)
    await vector.open(store, owner=object())
    try:
        await vector.use_index("memory_messages_16", DIM)
        raw = np.random.default_rng(2).normal(size=(30, DIM)).astype(np.float32)
        await vector.write(_records(raw, "r1"), staged=False)
        await vector.flush()
        hits = await vector.query(raw[3], top_k=2, resource_id="r1", thread_id=None)
        assert hits[0].message_id == "m3"
        assert vector.statistics().stored_scope_reads == 0
    finally:
        await vector.close()
        await store.aclose()
