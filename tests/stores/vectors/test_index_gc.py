"""The index's per-vector bookkeeping adds no object the garbage collector tracks: at a million messages one
container per message is a million objects every full collection walks, on the event loop."""

from __future__ import annotations

import gc

import numpy as np

from threadmind.stores._vectors._hnsw import HnswIndex, IndexEntry


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


def test_scope_maps_add_no_tracked_object_per_thread_resource_or_staged_row() -> None:
    """A set per thread and per resource (100 000 and 10 000 at a million messages) and the set of staged rows
    were walked element by element at every full collection; rows are kept in int-only dicts the collector
    does not track."""
    index = _index()
    vectors = np.random.default_rng(3).normal(size=(3000, 8)).astype(np.float32)
    gc.collect()
    before = len(gc.get_objects())
    entries = [IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 2}", f"r{i // 20}") for i in range(3000)]
    index.upsert(entries, vectors)  # staged: not flushed, so the staged rows are kept too
    del entries
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 100, grown  # 1 500 threads, 150 resources, 3 000 staged rows: no container each
    assert index.staged == 3000
    hits = index.search(vectors[7], 2, resource_id="r0", thread_id="t3", threshold=None)
    assert hits[0].message_id == "m7" and {h.message_id for h in hits} == {"m6", "m7"}
    index.move_thread("t3", "r9")
    assert {h.message_id for h in index.search(vectors[7], 2, resource_id="r9", thread_id="t3", threshold=None)} \
        == {"m6", "m7"}
    index.delete_thread("t3")
    assert not index.search(vectors[7], 2, resource_id="r9", thread_id="t3", threshold=None)
    index.flush()
    assert index.staged == 0 and index.count == 2998


def _walked_by_a_full_collection() -> int:
    """References a full collection follows now: those of every tracked object."""
    gc.collect()
    return sum(len(gc.get_referents(o)) for o in gc.get_objects())


def test_a_full_collection_walks_nothing_per_vector() -> None:
    """A tracked container of one element per vector (the row -> entry list was one) costs every full collection
    a visit per vector: ~50 ms at a million here, on the event loop. 4 000 vectors in 400 threads."""
    index = _index()
    vectors = np.random.default_rng(4).normal(size=(4000, 8)).astype(np.float32)
    before = _walked_by_a_full_collection()
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 10}", f"r{i // 100}") for i in range(4000)], vectors)
    index.flush()
    walked = _walked_by_a_full_collection() - before
    assert 0 <= walked < 1000, walked  # a visit per thread and per resource map (440), none per vector
    assert index.count == 4000 and index.search(vectors[5], 1, resource_id="r0", thread_id=None,
                                                threshold=None)[0].message_id == "m5"
