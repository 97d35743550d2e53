"""One hnswlib index plus the maps that make exact scoped search possible. Not thread-safe by design.

Its maps change only on the event loop (staging an upsert, deleting, moving, exact search); hnswlib itself
is called from one worker thread at a time (adding while querying fails spuriously and resizing while
querying crashes), fed with copies: ``take_flush`` (loop) hands deletions and staged vectors to
``apply_flush`` / ``knn`` (thread) and ``finish_flush`` (loop) forgets what hnswlib now holds.

Every vector is held once: hnswlib keeps its own copy, and vectors not yet added to hnswlib (staged, or being
added) are kept beside it until it has them. Exact search reads a scope's vectors from those two places
(``get_items`` only reads element data, safe beside a running ``add_items``; a resize takes ``_resize_lock``)
and keeps recently searched scopes contiguous (:mod:`._scope_blocks`).

Labels: hnswlib label reuse interacts badly with ``replace_deleted`` (a reused label can end up mapped to two
slots), so every added vector gets a fresh label and a replaced vector is deleted and re-added. Maps are by
*row*, a dense slot that is reused, with label → row and row → entry maps.

Scoped search (2-core box, 384 dims): a scope of at most :data:`BRUTE_FORCE_LIMIT` vectors is scored exactly
with numpy (a 1 000-row scope ~0.1 ms), exact and faster than HNSW with a Python filter. Larger scopes ask
HNSW for ``k × 2 / (scope fraction)`` candidates, post-filter them, and fall back to exact search when too few
survive or the over-fetch would exceed :data:`MAX_ANN_FETCH`. No hit outside the scope is ever returned.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Mapping, Sequence
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

import hnswlib  # type: ignore[import-untyped]
import msgspec
import numpy as np
import numpy.typing as npt

from .._vector_records import VectorRecord
from ._hnsw_entries import IndexBusy, IndexEntry, SnapshotView, decode_records
from ._parted import MAX_BATCH, IntParts, StrParts
from ._scope_blocks import ScopeBlocks, ScopeKey, SearchHit, merge, scope_key, scores, top_messages
from ._scope_rows import RowsByScope, RowSet

__all__ = ("BRUTE_FORCE_LIMIT", "MAX_ANN_FETCH", "SCOPE_CACHE_BYTES", "HnswIndex")

Metric = Literal["cosine", "euclidean", "dotproduct"]
SPACES: dict[str, str] = {"cosine": "cosine", "euclidean": "l2", "dotproduct": "ip"}

#: Scopes up to this many vectors are scored exactly with numpy instead of HNSW.
BRUTE_FORCE_LIMIT = 4096
#: Beyond this many HNSW candidates, brute force over the scope is cheaper than over-fetching.
MAX_ANN_FETCH = 2048
#: Default bytes of gathered scope blocks kept for exact search.
SCOPE_CACHE_BYTES = 32 << 20
#: Staged vectors handed to hnswlib per ``take_flush`` (about half a second of one core at 384 dims).
FLUSH_CHUNK = 1024
_MIN_CAPACITY = 1024

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class _FlushPlan:
    """Work for hnswlib taken from the loop-side state: labels to mark deleted, vectors to add."""

    __slots__ = ("labels", "marks", "vectors")

    def __init__(self, marks: list[int], labels: list[int], vectors: F32) -> None:
        self.marks = marks
        self.labels = labels
        self.vectors = vectors


class HnswIndex:
    """See the module docstring."""

    def __init__(
        self, *, name: str, dim: int, metric: Metric, m: int, ef_construction: int, ef_search: int,
        directory: Path | None = None, scope_cache_bytes: int = SCOPE_CACHE_BYTES, capacity: int = _MIN_CAPACITY,
    ) -> None:
        self.name = name
        self.dim = dim
        self.metric = metric
        self.space = SPACES[metric]
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.directory = directory
        #: Every change with a sequence number up to this one is reflected (own writes and replays).
        self.applied_seq = 0
        self.snapshot_seq: int | None = None
        self.add_items_calls = 0
        self.ann_queries = 0
        self.brute_force_queries = 0
        self.ann_vector_copies = 0  # vectors exact search copied out of hnswlib (get_items)
        self.max_staged = 0
        self.added_since_snapshot = 0
        self._ahead: set[int] = set()  # own sequence numbers that arrived before a smaller one
        self._resize_lock = threading.Lock()
        self._index: Any = hnswlib.Index(space=self.space, dim=self.dim)
        self._index.init_index(
            max_elements=max(_MIN_CAPACITY, capacity), M=m, ef_construction=ef_construction,
            allow_replace_deleted=True,
        )
        self._index.set_ef(ef_search)
        self._deleted_slots = 0
        self._next_label = 0
        # Vectors hnswlib does not hold yet, by label: staged (not taken) or being added (taken, not finished).
        self._waiting: IntParts[F32] = IntParts()
        self._staged: IntParts[int] = IntParts()  # label -> row, not taken yet (oldest first: labels only grow)
        # label -> ``applied_seq`` when it was staged, in label order, while hnswlib lacks it: every change up to
        # the first mark is in hnswlib (or deleted), so a snapshot saved now reflects that sequence.
        self._stage_marks: IntParts[int] = IntParts()
        # rows whose vector hnswlib does not hold (staged or being added)
        self._unindexed_rows: IntParts[None] = IntParts()
        self._to_mark: list[int] = []  # labels removed from the maps, still live in hnswlib
        # Row -> entry (None: a free row). A dict of untracked values is not tracked: a list of a million entries
        # was walked at every full collection (~50 ms each at a million vectors here). The per-vector maps are kept
        # in parts (see _parted): grown as single dicts, they rehashed a million entries on the same insert.
        self._entries: IntParts[IndexEntry | None] = IntParts()
        self._next_row = 0
        self._free_rows: list[int] = []
        self._row_of_vector: StrParts[int] = StrParts()
        self._row_of_label: IntParts[int] = IntParts()
        # A message's row, or its rows when it has several chunks: one list per message would be a million objects
        # the garbage collector walks at a million messages (~0.9 s per full collection).
        self._rows_of_message: StrParts[int | list[int]] = StrParts()
        self._rows_of_thread = RowsByScope()
        self._rows_of_resource = RowsByScope()
        self._names: dict[str, str] = {}  # one string object per thread and resource id
        self.blocks = ScopeBlocks(scope_cache_bytes)

    # state ---------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Live vectors."""
        return len(self._row_of_vector)

    @property
    def staged(self) -> int:
        """Vectors searchable exactly but not yet added to hnswlib."""
        return len(self._unindexed_rows)

    @property
    def untaken(self) -> int:
        """Staged vectors the graph builder has not taken yet."""
        return len(self._staged)

    @property
    def marks(self) -> int:
        """Deletions not yet applied to hnswlib."""
        return len(self._to_mark)

    def save_graph(self, path: str) -> None:
        """Write the hnswlib graph to ``path`` (the snapshot writer's child process; holds the GIL throughout)."""
        self._index.save_index(path)

    @property
    def dirty(self) -> bool:
        """True when hnswlib or the maps changed since the last snapshot."""
        return self.snapshot_seq != self.applied_seq or self.added_since_snapshot > 0

    def message_count(self) -> int:
        """Messages with at least one live vector."""
        return len(self._rows_of_message)

    def has_message(self, message_id: str) -> bool:
        """Whether the message has a live vector."""
        return message_id in self._rows_of_message

    def note_seq(self, seq: int) -> None:
        """An own write got ``seq``: advance ``applied_seq`` while the sequence has no gap (a gap is another
        process's change, applied by a catch-up)."""
        if seq <= self.applied_seq:
            return
        self._ahead.add(seq)
        while self.applied_seq + 1 in self._ahead:
            self.applied_seq += 1
            self._ahead.discard(self.applied_seq)
        if len(self._ahead) > 4096:  # a gap nobody caught up with: keep the memory bounded
            self._ahead = {s for s in self._ahead if s > self.applied_seq}

    def caught_up(self, seq: int) -> None:
        """Every change up to ``seq`` is now reflected (after a replay)."""
        self.applied_seq = max(self.applied_seq, seq)
        while self.applied_seq + 1 in self._ahead:
            self.applied_seq += 1
        self._ahead = {s for s in self._ahead if s > self.applied_seq}

    def prepare(self, vectors: F32) -> F32:
        """Rows as scored: unit length for cosine (as hnswlib stores them), raw otherwise."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.metric == "cosine":
            norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
            vectors = vectors / (norms + np.float32(1e-30))
        return vectors

    def ann_bytes(self) -> int:
        """hnswlib's allocation, computed from its layout (per slot: vector, level-0 links, label, lock, level
        pointer; per element: upper-level links at 1/(M-1) expected levels, a label-map node) rather than by
        asking hnswlib, whose size walk must not run while a worker thread inserts."""
        index = self._index
        slots, elements = int(index.max_elements), int(index.element_count)
        per_slot = self.dim * 4 + (2 * self.m + 1) * 4 + 8 + 40 + 8 + 4
        per_element = (self.m + 1) * 4 / max(1, self.m - 1) + 48
        return slots * per_slot + int(elements * per_element)

    def memory_bytes(self) -> int:
        """hnswlib's share plus the vectors waiting for it and the cached scope blocks."""
        return self.ann_bytes() + len(self._waiting) * (self.dim * 4 + 112) + self.blocks.nbytes

    # rows ----------------------------------------------------------------------------------------
    def _name(self, value: str) -> str:
        return self._names.setdefault(value, value)

    def _take_row(self) -> int:
        if self._free_rows:
            return self._free_rows.pop()
        row = self._next_row
        self._next_row += 1
        self._entries[row] = None
        return row

    def _link(self, row: int, entry: IndexEntry, vector: F32 | None) -> None:
        if vector is not None:
            self.blocks.grow(row, vector, entry.thread_id, entry.resource_id)
        self._entries[row] = entry
        self._row_of_vector[entry.vector_id] = row
        self._row_of_label[entry.label] = row
        rows = self._rows_of_message.get(entry.message_id)
        if rows is None:
            self._rows_of_message[entry.message_id] = row
        elif isinstance(rows, int):
            self._rows_of_message[entry.message_id] = [rows, row]
        else:
            rows.append(row)
        self._rows_of_thread.of(entry.thread_id)[row] = None
        self._rows_of_resource.of(entry.resource_id)[row] = None

    def _remove_row(self, row: int) -> None:
        entry = self._entries[row]
        assert entry is not None
        self.blocks.drop(entry.thread_id, entry.resource_id)
        label = entry.label
        if self._staged.pop(label, None) is not None:  # a staged vector never reached hnswlib
            self._waiting.pop(label, None)
            self._stage_marks.pop(label, None)
            self._unindexed_rows.pop(row, None)
        else:
            if self._waiting.pop(label, None) is not None:  # being added now: delete it once added
                self._unindexed_rows.pop(row, None)
                self._stage_marks.pop(label, None)
            self._to_mark.append(label)  # hnswlib hears of it at the next flush (worker thread)
        self._entries[row] = None
        self._free_rows.append(row)
        del self._row_of_vector[entry.vector_id]
        del self._row_of_label[label]
        rows = self._rows_of_message[entry.message_id]
        if isinstance(rows, int):
            del self._rows_of_message[entry.message_id]
        else:
            rows.remove(row)
            if len(rows) == 1:
                self._rows_of_message[entry.message_id] = rows[0]
        self._rows_of_thread.discard(entry.thread_id, row)
        self._rows_of_resource.discard(entry.resource_id, row)

    def _remove_message(self, message_id: str) -> None:
        rows = self._rows_of_message.get(message_id)
        for row in [rows] if isinstance(rows, int) else list(rows or ()):
            self._remove_row(row)

    def _stage(self, entries: list[IndexEntry], vectors: F32) -> None:
        """Give rows fresh labels and make them searchable exactly; hnswlib gets them at a flush."""
        first = self._next_label
        self._next_label += len(entries)
        for label, (entry, vector) in enumerate(zip(entries, vectors, strict=True), first):
            row = self._take_row()
            vector = vector.copy()  # its own memory: the batch's matrix is freed with the batch
            entry.label = label
            entry.vector_id = entry.message_id if entry.vector_id == entry.message_id else entry.vector_id
            entry.thread_id, entry.resource_id = self._name(entry.thread_id), self._name(entry.resource_id)
            self._link(row, entry, vector)
            self._waiting[label] = vector
            self._staged[label] = row
            self._stage_marks[label] = self.applied_seq
            self._unindexed_rows[row] = None
        self.max_staged = max(self.max_staged, len(self._unindexed_rows))

    # mutations (each records the SQL sequence it reflects) ----------------------------------------
    def upsert(
        self, entries: list[IndexEntry], vectors: F32, seq: int = 0, defer: bool = True, *, prepared: bool = False
    ) -> None:
        """Replace every vector of the entries' messages with these (staged: exact at once, HNSW at a flush;
        ``defer`` False flushes at once, for callers that own the index outright).

        ``prepared``: the rows came from :meth:`prepare` already.
        """
        for message_id in {e.message_id for e in entries}:
            self._remove_message(message_id)
        if entries:
            self._stage(entries, vectors if prepared else self.prepare(vectors))
        self.note_seq(seq)
        if not defer:
            self.flush()

    def upsert_records(self, records: Sequence[VectorRecord], seq: int = 0) -> None:
        """:meth:`upsert` from stored records (replay, clone)."""
        entries, vectors = decode_records(records, self.dim)
        self.upsert(entries, vectors, seq)

    def delete_messages(self, message_ids: Sequence[str], seq: int = 0) -> None:
        """Drop every vector of these messages."""
        for message_id in message_ids:
            self._remove_message(message_id)
        self.note_seq(seq)

    def delete_thread(self, thread_id: str, seq: int = 0) -> None:
        """Drop every vector of the thread."""
        for row in list(self._rows_of_thread.get(thread_id) or ()):
            self._remove_row(row)
        self.note_seq(seq)

    def move_thread(self, thread_id: str, resource_id: str, seq: int = 0) -> None:
        """Re-scope the thread's vectors to ``resource_id``."""
        rows = self._rows_of_thread.get(thread_id) or {}
        if rows:
            self.blocks.drop(thread_id, resource_id)
        resource_id = self._name(resource_id)
        for row in rows:
            entry = self._entries[row]
            assert entry is not None
            if entry.resource_id == resource_id:
                continue
            self.blocks.drop(thread_id, entry.resource_id)
            self._rows_of_resource.discard(entry.resource_id, row)
            self._entries[row] = msgspec.structs.replace(entry, resource_id=resource_id)  # snapshots share entries
            self._rows_of_resource.of(resource_id)[row] = None
        self.note_seq(seq)

    def drop_vectors(self, vector_ids: Sequence[str]) -> None:
        """Remove these vectors (deleted in SQL after what this index reflects)."""
        for vector_id in vector_ids:
            row = self._row_of_vector.get(vector_id)
            if row is not None:
                self._remove_row(row)

    def replay(self, records: Sequence[VectorRecord], deleted: Sequence[str], seq: int) -> None:
        """Apply stored changes made after what this index reflects: deletions, then upserts and moves."""
        self.drop_vectors(deleted)
        if records:
            self.upsert_records(records)
        self.caught_up(seq)

    def add_now(self, records: Sequence[VectorRecord]) -> None:
        """(worker thread, index not shared yet) Add records straight to hnswlib, replacing older versions of
        the same vectors: a rebuild's pages, or the tail a snapshot lacks.

        They count towards the next snapshot like flushed vectors: a start that added a long tail saves one soon
        after going live, so the next start does not add the same tail again."""
        if not records:
            return
        entries, vectors = decode_records(records, self.dim)
        vectors = self.prepare(vectors)
        first = self._next_label
        self._next_label += len(entries)
        labels = list(range(first, first + len(entries)))
        self._add_items(vectors, labels, threads=-1)
        self.added_since_snapshot += len(entries)
        for label, entry in zip(labels, entries, strict=True):
            entry.label = label
            if entry.vector_id == entry.message_id:
                entry.vector_id = entry.message_id
            entry.thread_id, entry.resource_id = self._name(entry.thread_id), self._name(entry.resource_id)
            old = self._row_of_vector.get(entry.vector_id)
            if old is not None:  # a page boundary moved under a concurrent change: keep the newer copy
                self._remove_row(old)
            self._link(self._take_row(), entry, None)

    def link_loaded(self, entries: Sequence[IndexEntry]) -> None:
        """(worker thread, index not shared yet) The maps of a loaded snapshot's entries, row ``i`` for
        ``entries[i]``, a slice of :data:`MAX_BATCH` entries at a time: the per-vector maps updated in bulk, the
        thread and resource row sets in one pass (linking a million entries one by one, as a write does, took
        5.1–5.9 s here; this, 3.5–3.9 s). Slices keep each bulk step's hold on the GIL short."""
        for start in range(0, len(entries), MAX_BATCH):
            self._link_slice(entries[start:start + MAX_BATCH], start)
        self._next_row = len(entries)

    def _link_slice(self, entries: Sequence[IndexEntry], first_row: int) -> None:
        intern = self._names.setdefault
        by_thread, by_resource = self._rows_of_thread, self._rows_of_resource
        by_message = self._rows_of_message
        for row, entry in enumerate(entries, start=first_row):
            if not entry.vector_id:
                entry.vector_id = entry.message_id
            thread_id = entry.thread_id = intern(entry.thread_id, entry.thread_id)
            resource_id = entry.resource_id = intern(entry.resource_id, entry.resource_id)
            by_thread.of(thread_id)[row] = None
            by_resource.of(resource_id)[row] = None
        rows_in_order = range(first_row, first_row + len(entries))
        self._entries.update(rows_in_order, entries)
        self._row_of_vector.update(list(map(attrgetter("vector_id"), entries)), rows_in_order)
        self._row_of_label.update(list(map(attrgetter("label"), entries)), rows_in_order)
        message_ids = list(map(attrgetter("message_id"), entries))
        last_row = dict(zip(message_ids, rows_in_order, strict=True))
        if len(last_row) == len(message_ids) and not any(map(by_message.__contains__, message_ids)):
            by_message.update(message_ids, rows_in_order)
            return
        for row, message_id in zip(rows_in_order, message_ids, strict=True):  # messages of several chunks
            rows_of = by_message.get(message_id)
            if rows_of is None:
                by_message[message_id] = row
            elif isinstance(rows_of, int):
                by_message[message_id] = [rows_of, row]
            else:
                rows_of.append(row)

    # hnswlib work --------------------------------------------------------------------------------
    def take_flush(self, limit: int = FLUSH_CHUNK) -> _FlushPlan:
        """(event loop) What hnswlib has not seen yet: deletions, then up to ``limit`` staged vectors."""
        labels = list(islice(self._staged, limit))  # not a copy of every staged label per chunk
        plan = _FlushPlan(self._to_mark, labels, np.zeros((0, self.dim), dtype=np.float32))
        if labels:
            plan.vectors = np.stack([self._waiting[label] for label in labels])
            for label in labels:
                del self._staged[label]
        self._to_mark = []
        return plan

    def apply_flush(self, plan: _FlushPlan) -> int:
        """(worker thread, the index's only hnswlib user) Mark deletions, then add the taken vectors."""
        for label in plan.marks:
            try:
                self._index.mark_deleted(label)
            except RuntimeError:  # already gone; nothing to delete
                continue
            self._deleted_slots += 1
        if plan.labels:  # background work: one core, the other stays with the event loop and SQLite
            self._add_items(plan.vectors, plan.labels, threads=1)
        return len(plan.labels)

    def finish_flush(self, plan: _FlushPlan) -> None:
        """(event loop) hnswlib holds the plan's vectors now: stop keeping copies of them."""
        for label in plan.labels:
            self._stage_marks.pop(label, None)
            if self._waiting.pop(label, None) is not None:
                row = self._row_of_label.get(label)
                if row is not None:
                    self._unindexed_rows.pop(row, None)
        self.added_since_snapshot += len(plan.labels) + len(plan.marks)

    def flush(self) -> int:
        """Every staged vector into hnswlib at once, for callers that own the index outright (tests, tools)."""
        added = 0
        while self._staged or self._to_mark:
            plan = self.take_flush(limit=1 << 30)
            added += self.apply_flush(plan)
            self.finish_flush(plan)
        return added

    def _add_items(self, prepared: F32, labels: list[int], *, threads: int) -> None:
        n = len(labels)
        slots_needed = self._index.element_count + max(0, n - self._deleted_slots)
        if slots_needed > self._index.max_elements:
            # A resize copies the whole index: grow by a quarter, not double, to keep the transient copy small.
            with self._resize_lock:
                self._index.resize_index(max(slots_needed, self._index.max_elements * 5 // 4))
        self._deleted_slots = max(0, self._deleted_slots - n)
        self._index.add_items(prepared, np.asarray(labels, dtype=np.int64), num_threads=threads, replace_deleted=True)
        self.add_items_calls += 1

    def knn(self, query: F32, fetch: int) -> tuple[list[int], list[float]] | None:
        """(worker thread) The ``fetch`` nearest labels and distances in hnswlib; None if unreachable."""
        self._index.set_ef(max(self.ef_search, fetch))
        try:
            labels, distances = self._index.knn_query(query, k=fetch, num_threads=1)
        except RuntimeError:  # fewer than `fetch` results reachable
            return None
        self.ann_queries += 1
        return labels[0].tolist(), distances[0].tolist()

    # search --------------------------------------------------------------------------------------
    def scope_rows(self, resource_id: str | None, thread_id: str | None) -> tuple[RowSet | None, int]:
        """(event loop) The rows in scope (None = every row) and how many."""
        scope: RowSet | None
        if thread_id is not None:
            scope = self._rows_of_thread.get(thread_id) or {}
            if resource_id is not None:
                entries = self._entries
                scope = {r: None for r in scope if (e := entries[r]) is not None and e.resource_id == resource_id}
        elif resource_id is not None:
            scope = self._rows_of_resource.get(resource_id) or {}
        else:
            scope = None
        return scope, self.count if scope is None else len(scope)

    scope_key = staticmethod(scope_key)
    merge = staticmethod(merge)

    def ann_fetch(self, k: int, size: int) -> int | None:
        """How many HNSW candidates a scope of ``size`` needs, or None when brute force is the better plan."""
        if size <= BRUTE_FORCE_LIMIT:
            return None
        live = self.count - len(self._unindexed_rows)  # what hnswlib holds
        if live < k:
            return None
        fetch = min(live, max(2 * k, math.ceil(2 * k * live / size)))
        return None if fetch > MAX_ANN_FETCH else fetch

    def staged_in(self, scope: Collection[int] | None) -> set[int]:
        """(event loop) Rows of the scope that hnswlib does not hold yet (searched exactly beside it)."""
        unindexed = self._unindexed_rows
        if scope is None:
            return set(unindexed)
        small, large = (scope, unindexed) if len(scope) < len(unindexed) else (unindexed, scope)
        return {row for row in small if row in large}

    def ann_hits(
        self, candidates: tuple[list[int], list[float]], k: int, scope: Collection[int] | None, size: int
    ) -> list[SearchHit] | None:
        """(event loop) Scope-filter HNSW candidates; None when too few survive (brute force decides)."""
        hits: dict[str, SearchHit] = {}
        seen_in_scope = 0
        for label, distance in zip(*candidates, strict=True):
            row = self._row_of_label.get(int(label))
            if row is None or (scope is not None and row not in scope):
                continue  # deleted since, or outside the scope
            seen_in_scope += 1
            message_id, hit = self._hit(row, self._distance_score(float(distance)))
            if message_id not in hits:
                hits[message_id] = hit
                if len(hits) == k:
                    break
        if len(hits) < k and seen_in_scope < size:
            return None
        return sorted(hits.values(), key=lambda h: -h.score)

    def gather_reads(self, scope: Collection[int] | None, key: ScopeKey | None) -> int:
        """(event loop) How many of the scope's vectors an exact search would copy out of hnswlib now: 0 when its
        block is cached, or when the scope is larger than :data:`BRUTE_FORCE_LIMIT` (not worth reading whole)."""
        size = self.count if scope is None else len(scope)
        if size > BRUTE_FORCE_LIMIT or (key is not None and self.blocks.get(key, size, touch=False) is not None):
            return 0
        waiting, entries = self._waiting, self._entries
        members = self._row_of_vector.values() if scope is None else scope
        return sum(1 for row in members if (e := entries[row]) is not None and e.label not in waiting)

    def exact(
        self, query: F32, k: int, scope: Collection[int] | None, key: ScopeKey | None = None,
        stored: Mapping[str, bytes] | None = None,
    ) -> list[SearchHit]:
        """(event loop) Exact top ``k`` messages over the scope's rows; ``key`` names a cacheable scope.

        The size is taken here, not from the caller: a scope set read before an ``await`` may have changed since
        (a re-upsert empties a resource's set and files its rows under a new one). ``stored`` maps vector ids to
        their stored (raw) embeddings, known to equal what hnswlib holds: those are taken from it instead of
        being copied out of hnswlib, whose ``get_items`` costs ~35 µs per 384-d vector.

        :raises IndexBusy: hnswlib is being resized (read the scope elsewhere).
        """
        size = self.count if scope is None else len(scope)
        if size == 0 or k < 1:
            return []
        cached = self.blocks.get(key, size) if key is not None else None
        if cached is None:
            members = self._row_of_vector.values() if scope is None else scope
            rows = np.fromiter(members, dtype=np.int64, count=size)
            rows.sort()
            block = self._gather(rows.tolist(), stored)
            if key is not None:
                self.blocks.put(key, rows, block)
        else:
            rows, block = cached
        self.brute_force_queries += 1
        return top_messages(scores(self.metric, block, self._as_query(query)), rows, k, self._hit)

    def _gather(self, rows: list[int], stored: Mapping[str, bytes] | None = None) -> F32:
        """The vectors of ``rows``: waiting ones from our copies, then from ``stored``, the rest from hnswlib."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        labels: list[int] = []
        positions: list[int] = []
        blobs: list[bytes] = []
        blob_positions: list[int] = []
        waiting = self._waiting
        entries = self._entries
        width = self.dim * 4
        for position, row in enumerate(rows):
            entry = entries[row]
            assert entry is not None
            vector = waiting.get(entry.label)
            if vector is not None:
                out[position] = vector
                continue
            blob = stored.get(entry.vector_id) if stored is not None else None
            if blob is not None and len(blob) == width:
                blobs.append(blob)
                blob_positions.append(position)
            else:
                labels.append(entry.label)
                positions.append(position)
        if blobs:
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self.dim)
            out[blob_positions] = self.prepare(matrix)
        if labels:
            if not self._resize_lock.acquire(blocking=False):
                raise IndexBusy
            try:
                out[positions] = self._index.get_items(labels, return_type="numpy")
                self.ann_vector_copies += len(labels)
            finally:
                self._resize_lock.release()
        return out

    def _as_query(self, query: F32) -> F32:
        return np.ascontiguousarray(query, dtype=np.float32).reshape(self.dim)

    def search(
        self, query: F32, k: int, *, resource_id: str | None, thread_id: str | None, threshold: float | None
    ) -> list[SearchHit]:
        """Top ``k`` messages in scope by their best chunk, best first; for callers that own the index outright."""
        scope, size = self.scope_rows(resource_id, thread_id)
        if size == 0 or k < 1:
            return []
        query = self._as_query(query)
        hits = None
        fetch = self.ann_fetch(k, size)
        if fetch is not None:
            staged = self.staged_in(scope)
            candidates = self.knn(query, fetch)
            hits = self.ann_hits(candidates, k, scope, size - len(staged)) if candidates is not None else None
            if hits is not None and staged:
                hits = merge(hits, self.exact(query, k, staged), k)
        if hits is None:
            hits = self.exact(query, k, scope, scope_key(resource_id, thread_id))
        if threshold is not None:
            hits = [h for h in hits if h.score >= threshold]
        return hits

    def _hit(self, row: int, score: float) -> tuple[str, SearchHit]:
        entry = self._entries[row]
        assert entry is not None
        return entry.message_id, SearchHit(entry.message_id, entry.thread_id, entry.resource_id, score)

    def _distance_score(self, distance: float) -> float:
        if self.space == "l2":
            return 1.0 / (1.0 + math.sqrt(max(distance, 0.0)))
        return 1.0 - distance

    # snapshots (see _hnsw_snapshot) ----------------------------------------------------------------
    def snapshot_view(self, *, shared: bool = False) -> SnapshotView:
        """(event loop) What a snapshot saved now holds: the entries (shared, never changed in place), the
        rows to leave out (hnswlib lacks them), the sequence it reflects and the next label.

        ``shared``: the live maps rather than copies, for a writer that reads them in a forked child. The child's
        memory is this process's at the fork, which is taken with no hnswlib change running: the maps and hnswlib
        agree then, and hold every change up to the sequence (later ones are replayed again at load, harmlessly).
        Copying them held the event loop at every snapshot (a million entries, 600 000 staged rows).
        """
        seq = next(iter(self._stage_marks.values()), self.applied_seq)
        if shared:
            return self._entries, self._unindexed_rows, seq, self._next_label
        return self._entries.copy(), set(self._unindexed_rows), seq, self._next_label

    def reserve(self, capacity: int) -> None:
        """(index not shared yet) Room for ``capacity`` vectors in hnswlib now, so adding them never resizes."""
        if capacity > self._index.max_elements:
            self._index.resize_index(capacity)

    def adopt_loaded(self, index: Any, entries: Sequence[IndexEntry], next_label: int, seq: int) -> None:
        """(worker thread, index not shared yet) Take a loaded hnswlib index and its entries, linked already
        (:meth:`link_loaded`)."""
        self._index = index
        self._index.set_ef(self.ef_search)  # hnswlib resets ef to 10 on load
        live = self._row_of_label
        stale = [label for label in index.get_ids_list() if label not in live] if len(live) < index.element_count \
            else []
        for label in stale:  # deleted after the snapshot's flush: not in its entries
            try:
                index.mark_deleted(label)
            except RuntimeError:
                pass
        self._deleted_slots = int(index.element_count) - len(entries)
        self._next_label = next_label
        self.applied_seq = self.snapshot_seq = seq
