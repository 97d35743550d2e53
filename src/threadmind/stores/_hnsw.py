"""HnswVectorStore: the hnswlib index that serves semantic recall, as a validated on-disk cache of SQL vectors.

Only the index actor touches an index. Its maps and brute-force matrix change only on the event loop
(staging an upsert, deleting, moving, exact search); hnswlib itself is called only from one worker thread
at a time (adding while querying fails spuriously and resizing while querying crashes), fed with copies:
``take_flush`` (loop) hands deletions and staged vectors to ``apply_flush`` / ``knn`` (thread). The SQL records are
the source of truth; the files under ``path`` are a snapshot that is checked against a sha256 manifest
before hnswlib ever reads them, and rebuilt from SQL when missing, truncated or corrupt.

Labels: hnswlib label reuse interacts badly with ``replace_deleted`` (a reused label can end up mapped to
two slots), so every added vector gets a fresh label and a replaced vector is deleted and re-added. The
brute-force matrix is indexed by *row*, a dense slot that is reused, with label → row and row → entry maps.

Scoped search (measured on a 2-core box, 384 dims, see the index actor's report): a scope of at most
:data:`BRUTE_FORCE_LIMIT` vectors is scored exactly with numpy over its rows (a 1 000-row scope ~0.1 ms),
which is both exact and faster than HNSW with a Python filter. Larger scopes ask HNSW for
``k × 2 / (scope fraction)`` candidates, post-filter them, and fall back to brute force when too few
survive or the over-fetch would exceed :data:`MAX_ANN_FETCH`. No hit outside the scope is ever returned.

A scope's rows are scattered over the matrix, and gathering them costs more than scoring them (500 rows of
384 floats from a cold matrix: ~0.3 ms gathered, ~0.03 ms scored). So exact search keeps the gathered block
of each recently searched thread, resource or whole index (at most ``scope_cache_bytes`` in all, 32 MiB by
default, least recently used first out). A new vector is appended to the blocks of its scopes (an agent writes and then
searches the same scope every turn); removing or moving a vector drops its scopes' blocks.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import hnswlib  # type: ignore[import-untyped]
import msgspec
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ._vector_records import VectorRecord

__all__ = ("BRUTE_FORCE_LIMIT", "MAX_ANN_FETCH", "HnswVectorStore", "Metric")

Metric = Literal["cosine", "euclidean", "dotproduct"]
_SPACES: dict[str, str] = {"cosine": "cosine", "euclidean": "l2", "dotproduct": "ip"}

#: Scopes up to this many vectors are scored exactly with numpy instead of HNSW.
BRUTE_FORCE_LIMIT = 4096
#: Beyond this many HNSW candidates, brute force over the scope is cheaper than over-fetching.
MAX_ANN_FETCH = 2048
#: Default bytes of gathered scope blocks kept for exact search (see the module docstring); one block may
#: take at most a quarter of it. ``HnswVectorStore(scope_cache_bytes=...)`` sets it per store.
SCOPE_CACHE_BYTES = 32 << 20
_MIN_CAPACITY = 1024
_SNAPSHOT_VERSION = 1
_HASH_BLOCK = 1 << 20

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class _ScopeBlock:
    """A scope's rows and a copy of their vectors, contiguous, with room to append (capacity doubles)."""

    __slots__ = ("rows", "size", "vectors")

    def __init__(self, rows: I64, vectors: F32) -> None:
        self.rows = rows
        self.vectors = vectors
        self.size = len(rows)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.vectors.nbytes)

    def view(self) -> tuple[I64, F32]:
        return self.rows[: self.size], self.vectors[: self.size]

    def append(self, row: int, vector: F32) -> int:
        """Add one row; returns the bytes the block grew by."""
        grown = 0
        if self.size == len(self.rows):
            capacity = max(8, 2 * self.size)
            rows = np.empty(capacity, dtype=np.int64)
            vectors = np.empty((capacity, self.vectors.shape[1]), dtype=np.float32)
            rows[: self.size] = self.rows[: self.size]
            vectors[: self.size] = self.vectors[: self.size]
            grown = int(rows.nbytes + vectors.nbytes) - self.nbytes
            self.rows, self.vectors = rows, vectors
        self.rows[self.size] = row
        self.vectors[self.size] = vector
        self.size += 1
        return grown


ScopeKey = tuple[str, str]
_ALL: ScopeKey = ("*", "")


class HnswVectorStore:
    """Configuration and on-disk home of the hnswlib message index; pass it to ``Memory(vector=...)``.

    ``path`` is a directory that holds the snapshot files (nothing is written outside it); None keeps the
    index in memory only, rebuilt from the SQL records at each start.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        metric: Metric = "cosine",
        m: int = 16,
        ef_construction: int = 64,
        ef_search: int = 64,
        scope_cache_bytes: int = SCOPE_CACHE_BYTES,
    ) -> None:
        if metric not in _SPACES:
            raise ConfigError(f"metric must be one of 'cosine', 'euclidean', 'dotproduct', not {metric!r}")
        for name, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}")
        if isinstance(scope_cache_bytes, bool) or not isinstance(scope_cache_bytes, int) or scope_cache_bytes < 0:
            raise ConfigError(f"`scope_cache_bytes` must be a non-negative integer, got {scope_cache_bytes!r}")
        self._path = Path(path) if path is not None else None
        self._metric: Metric = metric
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._scope_cache_bytes = scope_cache_bytes
        self._owner: object | None = None

    @property
    def path(self) -> Path | None:
        """The snapshot directory, or None for memory only."""
        return self._path

    @property
    def metric(self) -> Metric:
        """``cosine``, ``euclidean`` or ``dotproduct`` (hnswlib ``cosine``, ``l2``, ``ip``)."""
        return self._metric

    @property
    def m(self) -> int:
        """HNSW graph degree."""
        return self._m

    @property
    def ef_construction(self) -> int:
        """HNSW build-time candidate list size."""
        return self._ef_construction

    @property
    def ef_search(self) -> int:
        """HNSW query-time candidate list size (set again after every load)."""
        return self._ef_search

    @property
    def scope_cache_bytes(self) -> int:
        """Budget for the contiguous per-scope copies that exact search keeps (0 turns the cache off)."""
        return self._scope_cache_bytes

    def __repr__(self) -> str:
        return (
            f"HnswVectorStore({str(self._path) if self._path else None!r}, metric={self._metric!r}, m={self._m}, "
            f"ef_construction={self._ef_construction}, ef_search={self._ef_search}, "
            f"scope_cache_bytes={self._scope_cache_bytes})"
        )

    # Internals for Memory and the index actor ----------------------------------------------------
    def adopt(self, metric: Metric, m: int, ef_construction: int, ef_search: int) -> None:
        """(Memory) Take ``semanticRecall.indexConfig``'s values for the parameters this store left at their
        defaults; one given differently on both sides raises ``ConfigError``."""
        self._metric = _adopted("metric", metric, self._metric, "cosine")
        self._m = _adopted("m", m, self._m, 16)
        self._ef_construction = _adopted("ef_construction", ef_construction, self._ef_construction, 64)
        self._ef_search = _adopted("ef_search", ef_search, self._ef_search, 64)

    def _claim(self, owner: object) -> None:
        """Make ``owner`` the only actor using this store: an hnswlib index must have one owner."""
        if self._owner is not None and self._owner is not owner:
            raise ConfigError("this HnswVectorStore is already used by another running Memory; give each its own")
        self._owner = owner

    def _release(self, owner: object) -> None:
        if self._owner is owner:
            self._owner = None

    def _open_index(self, name: str, dim: int) -> _HnswIndex:
        """A fresh, empty in-memory index object; call ``load_snapshot`` or ``rebuild`` next."""
        return _HnswIndex(
            name=name,
            dim=dim,
            metric=self._metric,
            m=self._m,
            ef_construction=self._ef_construction,
            ef_search=self._ef_search,
            directory=self._path,
            scope_cache_bytes=self._scope_cache_bytes,
        )


_P = TypeVar("_P")


def _adopted(name: str, wanted: _P, ours: _P, default: _P) -> _P:
    if wanted == default or wanted == ours:
        return ours
    if ours != default:
        raise ConfigError(f"semanticRecall.indexConfig sets {name}={wanted!r} but the HnswVectorStore was given "
                          f"{name}={ours!r}; set it in one place")
    return wanted


class SearchHit(msgspec.Struct, frozen=True):
    """One message found by :meth:`_HnswIndex.search` (best chunk's score)."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float


class _Entry(msgspec.Struct):
    """What a row of the index stands for."""

    label: int
    vector_id: str
    message_id: str
    thread_id: str
    resource_id: str


class _Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """The checksum sidecar written last: a snapshot is valid only if every field matches."""

    version: int
    name: str
    dim: int
    space: str
    m: int
    ef_construction: int
    count: int
    max_seq: int
    next_label: int
    hnsw_sha256: str
    entries_sha256: str


_ENTRIES_TYPE = list[tuple[int, str, str, str, str]]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _fsync_replace(tmp: Path, final: Path) -> None:
    """fsync ``tmp`` and atomically rename it over ``final``."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    _fsync_replace(tmp, path)


def decode_records(records: Sequence[VectorRecord], dim: int) -> tuple[list[_Entry], F32]:
    """Entries (label 0 until added) and the float32 matrix of ``records``."""
    matrix = np.frombuffer(b"".join(r.embedding for r in records), dtype="<f4").astype(np.float32)
    if matrix.size != len(records) * dim:
        raise ValueError(f"stored embeddings do not all have {dim} dimensions")
    entries = [_Entry(0, r.vector_id, r.message_id, r.thread_id, r.resource_id) for r in records]
    return entries, matrix.reshape(len(records), dim)


class _FlushPlan:
    """Work for hnswlib taken from the loop-side state: labels to mark deleted, vectors to add."""

    __slots__ = ("labels", "marks", "vectors")

    def __init__(self, marks: list[int], labels: npt.NDArray[np.int64], vectors: F32) -> None:
        self.marks = marks
        self.labels = labels
        self.vectors = vectors


class _HnswIndex:
    """One hnswlib index plus the maps that make exact scoped search possible. Not thread-safe by design."""

    def __init__(
        self, *, name: str, dim: int, metric: Metric, m: int, ef_construction: int, ef_search: int,
        directory: Path | None, scope_cache_bytes: int = SCOPE_CACHE_BYTES,
    ) -> None:
        self.name = name
        self.dim = dim
        self.metric = metric
        self.space = _SPACES[metric]
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.directory = directory
        self.scope_cache_bytes = scope_cache_bytes
        self.applied_seq = 0
        self.snapshot_seq: int | None = None
        self.add_items_calls = 0
        self.ann_queries = 0
        self.brute_force_queries = 0
        self._reset(_MIN_CAPACITY)

    # state ---------------------------------------------------------------------------------------
    def _reset(self, capacity: int) -> None:
        self._index: Any = hnswlib.Index(space=self.space, dim=self.dim)
        self._index.init_index(
            max_elements=capacity, M=self.m, ef_construction=self.ef_construction, allow_replace_deleted=True
        )
        self._index.set_ef(self.ef_search)
        self._deleted_slots = 0
        self._next_label = 0
        # Rows whose vectors are searchable exactly (matrix + scope maps) but not yet in hnswlib: an upsert
        # returns after staging; ``flush`` adds them with one ``add_items`` off the caller's path.
        self._staged: dict[int, int] = {}  # label -> row
        self._staged_rows: set[int] = set()
        self._to_mark: list[int] = []  # labels removed from the maps, still live in hnswlib
        self._entries: list[_Entry | None] = []
        self._free_rows: list[int] = []
        self._matrix: F32 = np.zeros((capacity, self.dim), dtype=np.float32)
        self._row_of_vector: dict[str, int] = {}
        self._row_of_label: dict[int, int] = {}
        self._rows_of_message: dict[str, list[int]] = {}
        self._rows_of_thread: dict[str, set[int]] = {}
        self._rows_of_resource: dict[str, set[int]] = {}
        self._blocks: OrderedDict[ScopeKey, _ScopeBlock] = OrderedDict()  # scope -> its rows and vectors
        self._block_bytes = 0

    @property
    def count(self) -> int:
        """Live vectors."""
        return len(self._row_of_vector)

    @property
    def dirty(self) -> bool:
        """True when the in-memory state is newer than the last snapshot."""
        return self.snapshot_seq != self.applied_seq

    def message_count(self) -> int:
        """Messages with at least one live vector."""
        return len(self._rows_of_message)

    def has_message(self, message_id: str) -> bool:
        """Whether the message has a live vector."""
        return message_id in self._rows_of_message

    def prepare(self, vectors: F32) -> F32:
        """Rows as stored in the matrix: unit length for cosine (as hnswlib stores them), raw otherwise.

        :meth:`upsert` does this itself unless told ``prepared=True``, so a caller can do the numeric work
        early (the index actor does it while the vectors' messages commit).
        """
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.metric == "cosine":
            norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
            vectors = vectors / (norms + np.float32(1e-30))
        return vectors

    def _add(self, entries: list[_Entry], vectors: F32, *, defer: bool = False, prepared: bool = False) -> None:
        """Give rows fresh labels and make them searchable; ``add_items`` now, or at ``flush`` when deferred."""
        n = len(entries)
        if n == 0:
            return
        # Plain ints for the bookkeeping: indexing numpy arrays element by element costs more than the work.
        first = self._next_label
        self._next_label += n
        rows = [self._take_row() for _ in range(n)]
        if not prepared:
            vectors = self.prepare(vectors)
        prepared_rows = vectors
        self._ensure_matrix(max(rows) + 1)
        self._matrix[rows] = prepared_rows
        for label, (row, entry) in enumerate(zip(rows, entries, strict=True), first):
            entry.label = label
            self._link(row, entry)
        if defer:
            self._staged.update(zip(range(first, first + n), rows, strict=True))
            self._staged_rows.update(rows)
            return
        self._add_items(prepared_rows, np.arange(first, first + n, dtype=np.int64))

    def _add_items(self, prepared: F32, labels: npt.NDArray[np.int64], *, threads: int = -1) -> None:
        n = len(labels)
        slots_needed = self._index.element_count + max(0, n - self._deleted_slots)
        if slots_needed > self._index.max_elements:
            self._index.resize_index(max(slots_needed, 2 * self._index.max_elements))
        self._deleted_slots = max(0, self._deleted_slots - n)
        self._index.add_items(prepared, labels, num_threads=threads, replace_deleted=True)
        self.add_items_calls += 1

    @property
    def staged(self) -> int:
        """Vectors searchable exactly but not yet added to hnswlib."""
        return len(self._staged)

    def memory_bytes(self) -> int:
        """Estimated bytes held: hnswlib's allocation plus the exact-search matrix and cached scope blocks.

        Computed from hnswlib's layout (per slot: vector, level-0 links, label, lock, level pointer; per
        element: upper-level links, expected 1/(M-1) levels, and a label-map node) rather than by asking
        hnswlib, whose size walk must not run while a worker thread inserts.
        """
        index = self._index
        slots, elements = int(index.max_elements), int(index.element_count)
        per_slot = self.dim * 4 + (2 * self.m + 1) * 4 + 8 + 40 + 8 + 4
        per_element = (self.m + 1) * 4 / max(1, self.m - 1) + 48
        return slots * per_slot + int(elements * per_element) + int(self._matrix.nbytes) + self._block_bytes

    @property
    def marks(self) -> int:
        """Deletions not yet applied to hnswlib."""
        return len(self._to_mark)

    def take_flush(self) -> _FlushPlan:
        """(event loop) What hnswlib has not seen yet: deletions, then staged vectors (copied)."""
        plan = _FlushPlan(self._to_mark, np.zeros(0, dtype=np.int64), np.zeros((0, self.dim), dtype=np.float32))
        if self._staged:
            plan.labels = np.fromiter(self._staged.keys(), dtype=np.int64, count=len(self._staged))
            rows = np.fromiter(self._staged.values(), dtype=np.int64, count=len(self._staged))
            plan.vectors = np.ascontiguousarray(self._matrix[rows])
        self._to_mark = []
        self._staged = {}
        self._staged_rows = set()
        return plan

    def apply_flush(self, plan: _FlushPlan) -> int:
        """(worker thread, the index's only hnswlib user) Mark deletions, then add staged vectors."""
        for label in plan.marks:
            try:
                self._index.mark_deleted(label)
            except RuntimeError:  # already gone (a rebuild in between); nothing to delete
                continue
            self._deleted_slots += 1
        if len(plan.labels):  # background work: one core, the other stays with the event loop and SQLite
            self._add_items(plan.vectors, plan.labels, threads=1)
        return len(plan.labels)

    def flush(self) -> int:
        """Both halves at once, for callers that own the index outright (start, close, tests)."""
        return self.apply_flush(self.take_flush())

    def _take_row(self) -> int:
        if self._free_rows:
            return self._free_rows.pop()
        self._entries.append(None)
        return len(self._entries) - 1

    def _ensure_matrix(self, rows: int) -> None:
        if rows > self._matrix.shape[0]:
            grown = np.zeros((max(rows, 2 * self._matrix.shape[0]), self.dim), dtype=np.float32)
            grown[: self._matrix.shape[0]] = self._matrix
            self._matrix = grown

    def _drop_blocks(self, thread_id: str, resource_id: str) -> None:
        """Forget the cached blocks of the scopes a row leaves (or that a move changes)."""
        blocks = self._blocks
        if not blocks:
            return
        for key in (("t", thread_id), ("r", resource_id), _ALL):
            block = blocks.pop(key, None)
            if block is not None:
                self._block_bytes -= block.nbytes

    def _grow_blocks(self, row: int, entry: _Entry) -> None:
        """Append a new row (its vector already in the matrix) to the cached blocks of its scopes."""
        blocks = self._blocks
        if not blocks:
            return
        for key in (("t", entry.thread_id), ("r", entry.resource_id), _ALL):
            block = blocks.get(key)
            if block is not None:
                self._block_bytes += block.append(row, self._matrix[row])
        self._trim_blocks()

    def _trim_blocks(self) -> None:
        while self._block_bytes > self.scope_cache_bytes and self._blocks:
            _, evicted = self._blocks.popitem(last=False)
            self._block_bytes -= evicted.nbytes

    def _link(self, row: int, entry: _Entry) -> None:
        self._grow_blocks(row, entry)
        self._entries[row] = entry
        self._row_of_vector[entry.vector_id] = row
        self._row_of_label[entry.label] = row
        self._rows_of_message.setdefault(entry.message_id, []).append(row)
        self._rows_of_thread.setdefault(entry.thread_id, set()).add(row)
        self._rows_of_resource.setdefault(entry.resource_id, set()).add(row)

    def _remove_row(self, row: int) -> None:
        entry = self._entries[row]
        assert entry is not None
        self._drop_blocks(entry.thread_id, entry.resource_id)
        if self._staged.pop(entry.label, None) is not None:  # a staged vector never reached hnswlib
            self._staged_rows.discard(row)
        else:
            self._to_mark.append(entry.label)  # hnswlib hears of it at the next flush (worker thread)
        self._entries[row] = None
        self._free_rows.append(row)
        del self._row_of_vector[entry.vector_id]
        del self._row_of_label[entry.label]
        rows = self._rows_of_message[entry.message_id]
        rows.remove(row)
        if not rows:
            del self._rows_of_message[entry.message_id]
        for scope, key in ((self._rows_of_thread, entry.thread_id), (self._rows_of_resource, entry.resource_id)):
            members = scope[key]
            members.discard(row)
            if not members:
                del scope[key]

    def _remove_message(self, message_id: str) -> None:
        for row in list(self._rows_of_message.get(message_id, ())):
            self._remove_row(row)

    # mutations (each records the SQL sequence it reflects) ----------------------------------------
    def upsert(
        self, entries: list[_Entry], vectors: F32, seq: int, defer: bool = False, *, prepared: bool = False
    ) -> None:
        """Replace every vector of the entries' messages with these (one ``add_items`` call, or staged).

        ``prepared``: the rows came from :meth:`prepare` already.
        """
        for message_id in {e.message_id for e in entries}:
            self._remove_message(message_id)
        self._add(entries, vectors, defer=defer, prepared=prepared)
        self.applied_seq = max(self.applied_seq, seq)

    def upsert_records(self, records: Sequence[VectorRecord], seq: int, *, defer: bool = False) -> None:
        """:meth:`upsert` from stored records (replay, clone)."""
        entries, vectors = decode_records(records, self.dim)
        self.upsert(entries, vectors, seq, defer)

    def delete_messages(self, message_ids: Sequence[str], seq: int) -> None:
        """Drop every vector of these messages."""
        for message_id in message_ids:
            self._remove_message(message_id)
        self.applied_seq = max(self.applied_seq, seq)

    def delete_thread(self, thread_id: str, seq: int) -> None:
        """Drop every vector of the thread."""
        for row in list(self._rows_of_thread.get(thread_id, ())):
            self._remove_row(row)
        self.applied_seq = max(self.applied_seq, seq)

    def move_thread(self, thread_id: str, resource_id: str, seq: int) -> None:
        """Re-scope the thread's vectors to ``resource_id``."""
        rows = self._rows_of_thread.get(thread_id, set())
        if rows:
            self._drop_blocks(thread_id, resource_id)
        for row in rows:
            entry = self._entries[row]
            assert entry is not None
            if entry.resource_id == resource_id:
                continue
            self._drop_blocks(thread_id, entry.resource_id)
            old = self._rows_of_resource[entry.resource_id]
            old.discard(row)
            if not old:
                del self._rows_of_resource[entry.resource_id]
            entry.resource_id = resource_id
            self._rows_of_resource.setdefault(resource_id, set()).add(row)
        self.applied_seq = max(self.applied_seq, seq)

    def replay(self, records: Sequence[VectorRecord], deleted: Sequence[str], seq: int) -> None:
        """Apply SQL changes made after the loaded snapshot: deletions, then upserts and moves."""
        for vector_id in deleted:
            row = self._row_of_vector.get(vector_id)
            if row is not None:
                self._remove_row(row)
        if records:
            self.upsert_records(records, seq)
        self.applied_seq = seq

    def rebuild(self, records: Sequence[VectorRecord], seq: int) -> None:
        """Start over from the SQL records (the source of truth)."""
        self._reset(max(_MIN_CAPACITY, math.ceil(len(records) * 1.25)))
        if records:
            entries, vectors = decode_records(records, self.dim)
            self._add(entries, vectors)
        self.applied_seq = seq
        self.snapshot_seq = None

    # search --------------------------------------------------------------------------------------
    def scope_rows(self, resource_id: str | None, thread_id: str | None) -> tuple[set[int] | None, int]:
        """(event loop) The rows in scope (None = every row) and how many."""
        scope: set[int] | None
        if thread_id is not None:
            scope = self._rows_of_thread.get(thread_id, set())
            if resource_id is not None:
                scope = {r for r in scope if (e := self._entries[r]) is not None and e.resource_id == resource_id}
        elif resource_id is not None:
            scope = self._rows_of_resource.get(resource_id, set())
        else:
            scope = None
        return scope, self.count if scope is None else len(scope)

    @staticmethod
    def scope_key(resource_id: str | None, thread_id: str | None) -> ScopeKey | None:
        """The cache key of a scope, or None for a thread filtered by resource (computed per query)."""
        if thread_id is not None:
            return ("t", thread_id) if resource_id is None else None
        return ("r", resource_id) if resource_id is not None else _ALL

    def ann_fetch(self, k: int, size: int) -> int | None:
        """How many HNSW candidates a scope of ``size`` needs, or None when brute force is the better plan."""
        if size <= BRUTE_FORCE_LIMIT:
            return None
        live = self.count - len(self._staged)  # what hnswlib holds
        if live < k:
            return None
        fetch = min(live, max(2 * k, math.ceil(2 * k * live / size)))
        return None if fetch > MAX_ANN_FETCH else fetch

    def staged_in(self, scope: set[int] | None) -> set[int]:
        """(event loop) Rows of the scope that hnswlib does not hold yet (searched exactly beside it)."""
        if scope is None:
            return set(self._staged_rows)
        small, large = (scope, self._staged_rows) if len(scope) < len(self._staged_rows) else (self._staged_rows, scope)
        return {row for row in small if row in large}

    def knn(self, query: F32, fetch: int) -> tuple[list[int], list[float]] | None:
        """(worker thread) The ``fetch`` nearest labels and distances in hnswlib; None if unreachable."""
        self._index.set_ef(max(self.ef_search, fetch))
        try:
            labels, distances = self._index.knn_query(query, k=fetch, num_threads=1)
        except RuntimeError:  # fewer than `fetch` results reachable
            return None
        self.ann_queries += 1
        return labels[0].tolist(), distances[0].tolist()

    def ann_hits(
        self, candidates: tuple[list[int], list[float]], k: int, scope: set[int] | None, size: int
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

    def merge(self, a: list[SearchHit], b: list[SearchHit], k: int) -> list[SearchHit]:
        """Best ``k`` messages of two hit lists (best score per message)."""
        best: dict[str, SearchHit] = {}
        for hit in (*a, *b):
            old = best.get(hit.message_id)
            if old is None or hit.score > old.score:
                best[hit.message_id] = hit
        return sorted(best.values(), key=lambda h: -h.score)[:k]

    def exact(
        self, query: F32, k: int, scope: set[int] | None, size: int, key: ScopeKey | None = None
    ) -> list[SearchHit]:
        """(event loop) Exact top ``k`` messages over the scope's rows; ``key`` names a cacheable scope."""
        if size == 0 or k < 1:
            return []
        rows, block = self._block(scope, size, key)
        return self._brute_force(self._as_query(query), k, rows, block)

    def _block(self, scope: set[int] | None, size: int, key: ScopeKey | None) -> tuple[I64, F32]:
        """The scope's rows and their vectors, from the cache or gathered now (rows sorted) and cached."""
        blocks = self._blocks
        if key is not None:
            cached = blocks.get(key)
            if cached is not None and cached.size == size:
                blocks.move_to_end(key)
                return cached.view()
        members = self._row_of_vector.values() if scope is None else scope
        rows = np.fromiter(members, dtype=np.int64, count=size)
        rows.sort()
        vectors: F32 = self._matrix[rows]
        if key is not None and vectors.nbytes <= self.scope_cache_bytes // 4:
            old = blocks.pop(key, None)
            if old is not None:
                self._block_bytes -= old.nbytes
            block = blocks[key] = _ScopeBlock(rows, vectors)
            self._block_bytes += block.nbytes
            self._trim_blocks()
        return rows, vectors

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
                hits = self.merge(hits, self.exact(query, k, staged, len(staged)), k)
        if hits is None:
            hits = self.exact(query, k, scope, size, self.scope_key(resource_id, thread_id))
        if threshold is not None:
            hits = [h for h in hits if h.score >= threshold]
        return hits

    def _hit(self, row: int, score: float) -> tuple[str, SearchHit]:
        entry = self._entries[row]
        assert entry is not None
        return entry.message_id, SearchHit(entry.message_id, entry.thread_id, entry.resource_id, score)

    def _scores(self, sub: F32, query: F32) -> F32:
        if self.metric == "cosine":  # one vector: a dot product is ~10x cheaper than np.linalg.norm
            norm = math.sqrt(float(np.dot(query, query)))
            scores: F32 = sub @ (query / np.float32(norm + 1e-30))
        elif self.metric == "dotproduct":
            scores = sub @ query
        else:
            scores = (1.0 / (1.0 + np.sqrt(((sub - query) ** 2).sum(axis=1)))).astype(np.float32)
        return scores

    def _brute_force(self, query: F32, k: int, rows: I64, block: F32) -> list[SearchHit]:
        self.brute_force_queries += 1
        scores = self._scores(block, query)
        n = len(rows)
        take = min(n, 4 * k)
        while True:
            if take < n:
                top = np.argpartition(-scores, take - 1)[:take]
                order = top[np.argsort(-scores[top], kind="stable")]
            else:
                order = np.argsort(-scores, kind="stable")
            hits: dict[str, SearchHit] = {}
            # Plain ints and floats once: numpy scalar conversions cost ~0.1 µs each, twice per candidate.
            for row, score in zip(rows[order].tolist(), scores[order].tolist(), strict=True):
                message_id, hit = self._hit(row, score)
                if message_id not in hits:
                    hits[message_id] = hit
                    if len(hits) == k:
                        return list(hits.values())
            if take >= n:
                return list(hits.values())
            take = min(n, take * 4)

    def _distance_score(self, distance: float) -> float:
        if self.space == "l2":
            return 1.0 / (1.0 + math.sqrt(max(distance, 0.0)))
        return 1.0 - distance

    # snapshot ------------------------------------------------------------------------------------
    def _files(self) -> tuple[Path, Path, Path]:
        assert self.directory is not None
        base = self.directory / self.name
        return base.with_suffix(".hnsw"), base.with_suffix(".entries"), base.with_suffix(".manifest.json")

    def save_snapshot(self) -> bool:
        """Write index, entries, then the manifest (each to a temp file, fsync, rename); False without a path."""
        if self.directory is None:
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        self.flush()
        hnsw_path, entries_path, manifest_path = self._files()
        hnsw_tmp = hnsw_path.with_name(hnsw_path.name + ".tmp")
        self._index.save_index(str(hnsw_tmp))
        _fsync_replace(hnsw_tmp, hnsw_path)
        entries: _ENTRIES_TYPE = [
            (e.label, e.vector_id, e.message_id, e.thread_id, e.resource_id) for e in self._entries if e is not None
        ]
        entries_bytes = msgspec.msgpack.encode(entries)
        _write_atomic(entries_path, entries_bytes)
        manifest = _Manifest(
            version=_SNAPSHOT_VERSION, name=self.name, dim=self.dim, space=self.space, m=self.m,
            ef_construction=self.ef_construction, count=len(entries), max_seq=self.applied_seq,
            next_label=self._next_label, hnsw_sha256=_sha256(hnsw_path),
            entries_sha256=hashlib.sha256(entries_bytes).hexdigest(),
        )
        _write_atomic(manifest_path, msgspec.json.encode(manifest))
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.snapshot_seq = self.applied_seq
        return True

    def load_snapshot(self) -> str | None:
        """Load the snapshot if it is intact; returns None on success, else why it was not usable."""
        if self.directory is None:
            return "no path"
        hnsw_path, entries_path, manifest_path = self._files()
        try:
            manifest = msgspec.json.decode(manifest_path.read_bytes(), type=_Manifest)
        except FileNotFoundError:
            return "missing"
        except (OSError, msgspec.DecodeError) as exc:
            return f"unreadable manifest: {exc}"
        expected = (_SNAPSHOT_VERSION, self.name, self.dim, self.space, self.m, self.ef_construction)
        found = (manifest.version, manifest.name, manifest.dim, manifest.space, manifest.m, manifest.ef_construction)
        if found != expected:
            return f"built with other settings {found}"
        try:
            if _sha256(hnsw_path) != manifest.hnsw_sha256:
                return "index checksum mismatch"
            entries_bytes = entries_path.read_bytes()
            if hashlib.sha256(entries_bytes).hexdigest() != manifest.entries_sha256:
                return "entries checksum mismatch"
            entries = msgspec.msgpack.decode(entries_bytes, type=_ENTRIES_TYPE)
            if len(entries) != manifest.count:
                return "entry count mismatch"
            index: Any = hnswlib.Index(space=self.space, dim=self.dim)
            index.load_index(str(hnsw_path), max_elements=0, allow_replace_deleted=True)
            labels = np.fromiter((e[0] for e in entries), dtype=np.int64, count=len(entries))
            vectors = (
                np.asarray(index.get_items(labels), dtype=np.float32)
                if len(entries)
                else np.zeros((0, self.dim), dtype=np.float32)
            )
        except (OSError, RuntimeError, ValueError, msgspec.DecodeError) as exc:
            return f"unreadable snapshot: {exc}"
        self._reset(_MIN_CAPACITY)
        self._index = index
        self._index.set_ef(self.ef_search)  # hnswlib resets ef to 10 on load
        self._deleted_slots = index.element_count - len(entries)
        self._next_label = manifest.next_label
        self._ensure_matrix(len(entries))
        self._matrix[: len(entries)] = vectors
        for row, (label, vector_id, message_id, thread_id, resource_id) in enumerate(entries):
            self._entries.append(None)
            self._link(row, _Entry(label, vector_id, message_id, thread_id, resource_id))
        self.applied_seq = self.snapshot_seq = manifest.max_seq
        return None
