"""The index's per-vector bookkeeping adds no object the garbage collector tracks: at a million messages one
container per message is a million objects every full collection walks, on the event loop."""

from __future__ import annotations

import gc

import numpy as np

from threadmind.stores._hnsw import HnswIndex, IndexEntry


def _index() -> HnswIndex:
    return HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                     directory=None)


def test_single_chunk_messages_add_no_tracked_object_per_message() -> None:
    index = _index()
    vectors = np.random.default_rng(1).normal(size=(2000, 8)).astype(np.float32)
    gc.collect()
    before = len(gc.get_objects())
    entries = [IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 100}", "r1") for i in range(2000)]
    index.upsert(entries, vectors)
    index.flush()
    del entries
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 200, grown  # 20 thread sets and the maps themselves, not 2 000 lists
    assert index.message_count() == 2000 and index.has_message("m1999")


def test_messages_of_several_chunks_keep_every_row_and_lose_them_together() -> None:
    index = _index()
    vectors = np.random.default_rng(2).normal(size=(6, 8)).astype(np.float32)
    entries = [IndexEntry(0, f"m0#{i}", "m0", "t1", "r1") for i in range(3)] + \
              [IndexEntry(0, "m1", "m1", "t1", "r1")] + [IndexEntry(0, f"m2#{i}", "m2", "t1", "r1") for i in range(2)]
    index.upsert(entries, vectors)
    hits = index.search(vectors[2], 3, resource_id="r1", thread_id=None, threshold=None)
    assert hits[0].message_id == "m0" and len({h.message_id for h in hits}) == 3
    index.upsert([IndexEntry(0, "m2", "m2", "t1", "r1")], vectors[5:6])  # two chunks become one
    index.delete_messages(["m0"])
    assert index.count == 2 and index.message_count() == 2 and not index.has_message("m0")
    assert {h.message_id for h in index.search(vectors[0], 5, resource_id="r1", thread_id=None, threshold=None)} \
        == {"m1", "m2"}
