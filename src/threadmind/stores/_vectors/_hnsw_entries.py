"""What a row of the HNSW index stands for (:class:`IndexEntry`), stored vector records decoded into entries and a
matrix, a snapshot's view, and the exception a search meets while hnswlib is being resized."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from .._vector_records import VectorRecord
from ._parted import IntParts

__all__ = ("IndexBusy", "IndexEntry", "SnapshotView", "decode_records")

F32 = npt.NDArray[np.float32]


class IndexBusy(Exception):
    """hnswlib is being resized this moment: read the scope from the stored rows instead."""


class IndexEntry(msgspec.Struct, array_like=True, gc=False):
    """What a row of the index stands for (replaced, never changed, once linked).

    Strings and ints only, so never part of a cycle: untracked by the garbage collector (``gc=False``), which lets
    the dicts holding a million of them stay untracked too."""

    label: int
    vector_id: str
    message_id: str
    thread_id: str
    resource_id: str


#: What a snapshot saved now holds (see :meth:`HnswIndex.snapshot_view`).
SnapshotView = tuple["IntParts[IndexEntry | None]", Collection[int], int, int]


def decode_records(records: Sequence[VectorRecord], dim: int) -> tuple[list[IndexEntry], F32]:
    """Entries (label 0 until added) and the float32 matrix of ``records``."""
    matrix = np.frombuffer(b"".join(r.embedding for r in records), dtype="<f4").astype(np.float32)
    if matrix.size != len(records) * dim:
        raise ValueError(f"stored embeddings do not all have {dim} dimensions")
    entries = [IndexEntry(0, r.vector_id, r.message_id, r.thread_id, r.resource_id) for r in records]
    return entries, matrix.reshape(len(records), dim)
