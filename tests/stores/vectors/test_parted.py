"""The index's per-vector maps grow a part at a time: no insert rehashes every vector's entry at once (at a million
vectors four such dicts outgrew their tables on the same insert and held the event loop 270–380 ms)."""

from __future__ import annotations

import gc
from itertools import islice
from typing import Any

import msgspec
import numpy as np
import pytest

from threadmind.stores._vectors import _hnsw_snapshot
from threadmind.stores._vectors._hnsw import HnswIndex, IndexEntry
from threadmind.stores._vectors._parted import MAX_BATCH, PART_BITS, STR_PARTS, IntParts, StrParts


def _dicts(value: Any) -> list[dict[Any, Any]]:
    """Every dict an object holds directly, or inside the parts of a parted map."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, (IntParts, StrParts)):
        return [part for part in value._parts if isinstance(part, dict)]
    return []


def test_an_index_of_150_000_vectors_holds_no_dict_of_more_than_one_part() -> None:
    index = HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                      directory=None)
    n = 150_000
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 10}", f"r{i // 100}") for i in range(n)],
                 np.ones((n, 8), dtype=np.float32))  # staged: the staged vectors' maps hold them all too
    assert index.count == n == index.staged and index.message_count() == n and index.has_message("m149999")
    sizes = [len(d) for name in dir(index) if name.startswith("_") and not name.startswith("__")
             for d in _dicts(getattr(index, name, None))]
    assert sum(sizes) >= 8 * n  # rows, labels, vector ids, message ids; staged vectors, labels, marks, rows
    assert max(sizes) <= 1 << PART_BITS
    vectors = np.random.default_rng(4).normal(size=(1, 8)).astype(np.float32)
    index.upsert([IndexEntry(0, "m7", "m7", "t0", "rx")], vectors)  # replaces m7
    index.delete_messages(["m8"])
    assert index.count == n - 1 == index.staged and not index.has_message("m8")
    hits = index.search(vectors[0], 1, resource_id="rx", thread_id=None, threshold=None)
    assert [h.message_id for h in hits] == ["m7"]
    index.delete_thread("t1")
    assert index.count == n - 11 == index.staged


@pytest.mark.parametrize("keys", [[0, 1, 65_535, 65_536, 200_001], [f"id-{i}" for i in range(500)]])
def test_parted_maps_read_and_write_as_a_dict_does(keys: list[Any]) -> None:
    parts: Any = IntParts() if isinstance(keys[0], int) else StrParts()
    plain: dict[Any, int] = {}
    for i, key in enumerate(keys):
        parts[key] = plain[key] = i
    parts[keys[0]] = plain[keys[0]] = -1  # overwrite
    del parts[keys[1]], plain[keys[1]]
    assert len(parts) == len(plain) and bool(parts)
    assert sorted(parts, key=str) == sorted(plain, key=str)
    assert sorted(parts.items(), key=str) == sorted(plain.items(), key=str)
    assert sorted(parts.values()) == sorted(plain.values())
    for key in keys:
        assert (key in parts) is (key in plain) and parts.get(key) == plain.get(key)
    with pytest.raises(KeyError):
        parts[keys[1]]
    with pytest.raises(KeyError):
        del parts[keys[1]]
    missing = 10**9 if isinstance(keys[0], int) else "nope"
    assert parts.get(missing) is None and parts.get(missing, 7) == 7 and missing not in parts
    with pytest.raises(KeyError):
        parts[missing]
    if isinstance(parts, IntParts):
        assert parts.get(-1) is None and -1 not in parts and "0" not in parts
        copied = parts.copy()
        copied[keys[2]] = 99
        assert parts[keys[2]] == 2 and copied[keys[2]] == 99  # the copy's parts are its own
    else:
        assert max(len(part) for part in parts._parts) < len(plain) // (STR_PARTS // 8)  # spread, not one dict


def test_parts_of_untracked_values_are_untracked_by_the_collector() -> None:
    entries: IntParts[IndexEntry | None] = IntParts()
    ids: StrParts[int] = StrParts()
    for row in range(70_000):
        entries[row] = IndexEntry(row, f"m{row}", f"m{row}", "t", "r")
        ids[f"m{row}"] = row
    gc.collect()
    assert not any(gc.is_tracked(part) for part in [*entries._parts, *ids._parts])


def test_the_rows_of_each_scope_are_out_of_the_collectors_sight() -> None:
    index = HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                      directory=None)
    n = 3_000
    index.upsert([IndexEntry(0, f"m{i}", f"m{i}", f"t{i // 10}", f"r{i // 100}") for i in range(n)],
                 np.ones((n, 8), dtype=np.float32))
    index.move_thread("t0", "r-new")
    index.delete_thread("t1")
    gc.collect()
    for by_scope in (index._rows_of_thread, index._rows_of_resource):
        assert not gc.is_tracked(by_scope._held) and not gc.get_referents(*by_scope._held.values())
    assert len(index._rows_of_thread) == n // 10 - 1 and "t1" not in set(index._rows_of_thread)
    assert index.scope_rows("r-new", None)[1] == 10 and index.scope_rows("r0", None)[1] == 80
    assert index.scope_rows(None, "t2")[1] == 10 and index.scope_rows(None, "t1") == ({}, 0)


def test_an_int_map_of_growing_keys_keeps_key_order_and_no_trail_of_emptied_parts() -> None:
    """Labels only grow and the flusher takes the oldest staged ones first: iteration is in key order, and the
    parts the oldest keys emptied are dropped (an emptied dict keeps its table)."""
    labels: IntParts[int] = IntParts()
    for label in range(300_000):
        labels[label] = label
    assert list(islice(labels, 3)) == [0, 1, 2] and len(labels._parts) == 5
    for label in range(200_000):
        assert labels.pop(label) == label
    assert len(labels) == 100_000 and next(iter(labels)) == 200_000 and next(labels.values()) == 200_000
    assert len(labels._parts) == 2  # parts 0-2 went with their keys
    assert labels.pop(5) is None and labels.pop(5, -1) == -1 and labels.get(5) is None and 5 not in labels
    labels[7] = 7  # a key below the first part: parts are added in front
    assert labels[7] == 7 and list(islice(labels, 2)) == [7, 200_000] and len(labels) == 100_001
    labels[-3] = -3
    assert labels[-3] == -3 and next(iter(labels)) == -3
    del labels[-3], labels[7]
    assert len(labels) == 100_000 and next(iter(labels)) == 200_000
    for label in range(200_000, 300_000):
        del labels[label]
    assert not labels and len(labels) == 0 and labels._parts == []
    labels[1] = 1
    assert list(labels.items()) == [(1, 1)]


@pytest.mark.parametrize("keys", [
    list(range(65_536)),  # a part's worth of rows
    [5, 70_000, 70_001, 3, 140_000, 4],  # parts out of order: set one by one
    [1, 2, 1, 65_536, 2],  # repeated keys: the last value wins, as when set one by one
    [f"id-{i % 900}" for i in range(1_000)],
])
def test_updating_a_map_in_bulk_sets_what_setting_each_key_sets(keys: list[Any]) -> None:
    values: list[Any] = [[i, i] if i % 5 == 0 else i for i in range(len(keys))]  # lists too: rows of chunks
    bulk: Any = IntParts() if isinstance(keys[0], int) else StrParts()
    one_by_one: Any = IntParts() if isinstance(keys[0], int) else StrParts()
    for parts in (bulk, one_by_one):  # onto a map that holds keys already, some of them replaced
        parts[keys[0]] = parts[keys[-1] * 3 if isinstance(keys[0], int) else "other"] = "before"
    bulk.update(keys, values)
    for key, value in zip(keys, values, strict=True):
        one_by_one[key] = value
    assert len(bulk) == len(one_by_one) == len(set(keys)) + 1
    assert sorted(bulk.items(), key=str) == sorted(one_by_one.items(), key=str)
    assert all(bulk[key] == one_by_one[key] and key in bulk for key in set(keys))  # each in the part it hashes to
    if isinstance(bulk, IntParts):
        assert list(bulk) == list(one_by_one)  # part by part in key order
        bulk[keys[-1] + 3] = -1  # still grows as a map set one by one does
        assert bulk[keys[-1] + 3] == -1 and len(bulk) == len(set(keys)) + 2


def test_a_bulk_update_takes_a_bounded_batch_and_a_value_per_key() -> None:
    """Each step of an update is one C call holding the GIL: batches are bounded so a worker thread linking a
    million entries never holds the event loop long."""
    with pytest.raises(ValueError, match="at most 65536 pairs"):
        IntParts[int]().update(range(MAX_BATCH + 1), range(MAX_BATCH + 1))
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        StrParts[int]().update(["a", "b"], [1])
    empty: StrParts[int] = StrParts()
    empty.update([], [])
    assert not empty and len(empty) == 0


@pytest.mark.parametrize("shuffled_labels", [False, True])
def test_a_loaded_snapshot_links_its_entries_as_writing_them_one_by_one_does(shuffled_labels: bool) -> None:
    """Linking a snapshot fills the maps in bulk, a slice at a time; what they hold must be what linking each entry
    gives: messages of several chunks (one across two slices), ids stored empty (vector id = message id), rows and
    labels over several parts."""
    n = 70_000
    labels = np.arange(n) * 2
    if shuffled_labels:
        np.random.default_rng(5).shuffle(labels)

    def entries() -> list[IndexEntry]:
        out = []
        for row in range(n):
            message = f"m{row // 3}" if row % 7 < 3 else f"m-{row}"  # runs of three chunks of one message
            vector_id = "" if row % 11 == 0 and message == f"m-{row}" else f"v{row}"
            out.append(IndexEntry(int(labels[row]), vector_id, message, f"t{row // 10}", f"r{row // 100}"))
        return out

    def index() -> HnswIndex:
        return HnswIndex(name="memory_messages_8", dim=8, metric="cosine", m=8, ef_construction=32, ef_search=32,
                         directory=None)

    bulk, reference = index(), index()
    bulk.link_loaded(entries())
    for row, entry in enumerate(entries()):  # what a write does, entry by entry
        entry.vector_id = entry.vector_id or entry.message_id
        entry.thread_id, entry.resource_id = reference._name(entry.thread_id), reference._name(entry.resource_id)
        reference._entries[row] = None
        reference._link(row, entry, None)
    reference._next_row = n
    for name in ("_entries", "_row_of_vector", "_row_of_label", "_rows_of_message"):
        assert sorted(getattr(bulk, name).items(), key=str) == sorted(getattr(reference, name).items(), key=str), name
    assert bulk._rows_of_thread == reference._rows_of_thread and bulk._rows_of_resource == reference._rows_of_resource
    assert bulk._next_row == n and bulk.count == n and bulk.message_count() == reference.message_count()
    first, tenth = bulk._entries[0], bulk._entries[9]
    assert first is not None and tenth is not None and first.thread_id is tenth.thread_id  # one string per thread
    assert bulk._rows_of_message["m21845"] == [65_535, 65_536]  # its chunks on both sides of a slice's end
    assert bulk.has_message("m-3") and bulk.scope_rows("r1", None)[1] == 100
    bulk.delete_messages(["m0"])  # a message of three chunks leaves as a whole
    assert not bulk.has_message("m0") and bulk.count == n - 3


@pytest.mark.parametrize("n", [0, 3, 70_000])
def test_a_snapshots_entries_decode_in_batches_as_the_whole_array_does(n: int) -> None:
    """msgspec holds the GIL for a whole decode (0.4-0.5 s for a million entries): a load decodes the entries a
    batch at a time, from the same file."""
    entries = [IndexEntry(i * 2, "" if i % 3 else f"v{i}", f"m{i}", f"t{i // 10}", f"r{i // 100}") for i in range(n)]
    data = msgspec.msgpack.encode(entries)
    assert _hnsw_snapshot._decode_entries(data) == msgspec.msgpack.decode(data, type=list[IndexEntry]) == entries
    with pytest.raises(msgspec.DecodeError):
        _hnsw_snapshot._decode_entries(data[:-1] if n else b"\x01")
