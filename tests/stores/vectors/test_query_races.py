"""A query that awaits between reading its scope and searching it sees the rows as they are after the await."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from threadmind.stores import HnswVectorStore, InMemoryStore
from threadmind.stores._vector_records import VectorRecord
from threadmind.stores._vectors._hnsw import HnswIndex, IndexEntry


def _vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)


def _records(vectors: np.ndarray) -> list[VectorRecord]:
    return [VectorRecord(vector_id=f"m{i}", message_id=f"m{i}", thread_id="t1", resource_id="r1", role="user",
                         created_at="2026-01-01T00:00:00.000Z", embedding=v.astype("<f4").tobytes())
            for i, v in enumerate(vectors)]


def test_exact_counts_the_scope_it_is_given_not_the_one_read_before() -> None:
    index = HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                       directory=None)
    vectors = _vectors(5, 7)
    entries = [IndexEntry(0, f"m{i}", f"m{i}", "t1", "r1") for i in range(5)]
    index.upsert(entries, vectors, seq=1)
    before, size = index.scope_rows("r1", None)
    assert size == 5
    index.upsert(entries, vectors, seq=2)  # a re-upsert empties the resource's set and files the rows anew
    assert before is not None and len(before) == 0
    assert index.exact(vectors[2], 3, before) == []  # an orphaned set is empty, not an error
    now, _ = index.scope_rows("r1", None)
    assert [h.message_id for h in index.exact(vectors[2], 1, now)] == ["m2"]


@pytest.mark.parametrize("scope", ["resource", "thread"])
async def test_a_query_racing_a_reupsert_of_its_scope_still_finds_k_hits(scope: str) -> None:
    store = InMemoryStore()
    vector = HnswVectorStore(None)
    await store.open()
    owner = object()
    await vector.open(store, owner=owner)
    try:
        await vector.use_index("memory_messages_8", 8)
        vectors = vector.prepare(_vectors(20, 3))
        records = _records(vectors)
        await vector.write(records, staged=False)
        resource_id, thread_id = ("r1", None) if scope == "resource" else (None, "t1")
        for round_ in range(10):
            found: list[list[str]] = []

            async def ask(found: list[list[str]] = found, round_: int = round_) -> None:
                hits = await vector.query(vectors[round_], top_k=4, resource_id=resource_id, thread_id=thread_id)
                found.append([h.message_id for h in hits])

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await anyio.lowlevel.checkpoint()  # the query has read its scope and yielded
                assert vector.stage(records, vectors)  # the same messages again, as another writer's upsert
            assert len(found[0]) == 4 and found[0][0] == f"m{round_}"
    finally:
        await vector.close()
        await store.aclose()
