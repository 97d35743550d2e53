"""Index snapshots on disk: an hnswlib file, its entries and a checksum manifest, shared safely by processes.

A snapshot is a cache of the SQL vector rows as of one change sequence, so a restart replays only what
changed since. Files are written to temporary names, fsynced and renamed; the manifest, written last, holds
the sha256 of the other two, and a snapshot whose files do not match it is not used (the index is rebuilt
from SQL). Processes that share a snapshot path take a lock file around it: exclusive to write (a process
that finds it taken skips its save), shared to read, so no reader ever sees half of a writer's files.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hnswlib  # type: ignore[import-untyped]
import msgspec

from ._hnsw_index import HnswIndex, IndexEntry

__all__ = ("load_snapshot", "manifest_count", "save_snapshot")

_VERSION = 2
_HASH_BLOCK = 1 << 20


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


def _files(directory: Path, name: str) -> tuple[Path, Path, Path, Path]:
    base = directory / name
    return (base.with_suffix(".hnsw"), base.with_suffix(".entries"), base.with_suffix(".manifest.json"),
            base.with_suffix(".lock"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _fsync_replace(tmp: Path, final: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)


@contextmanager
def _locked(path: Path, *, exclusive: bool) -> Iterator[bool]:
    """Hold the lock file (``exclusive``: without waiting; yields False when another process has it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX | fcntl.LOCK_NB) if exclusive else fcntl.LOCK_SH)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def manifest_count(directory: Path | None, name: str) -> int | None:
    """The vector count a snapshot's manifest claims (unchecked), or None without one."""
    if directory is None:
        return None
    try:
        return msgspec.json.decode(_files(directory, name)[2].read_bytes(), type=_Manifest).count
    except (OSError, msgspec.DecodeError):
        return None


def save_snapshot(index: HnswIndex, view: tuple[list[IndexEntry | None], set[int], int, int]) -> bool:
    """(worker thread, the index's only hnswlib user) Write ``index`` as ``view`` (from
    :meth:`HnswIndex.snapshot_view`) describes it; False when another process is writing this snapshot."""
    directory = index.directory
    assert directory is not None
    directory.mkdir(parents=True, exist_ok=True)
    hnsw_path, entries_path, manifest_path, lock_path = _files(directory, index.name)
    all_entries, unindexed, seq, next_label = view
    with _locked(lock_path, exclusive=True) as mine:
        if not mine:
            return False
        entries = [
            e if e.vector_id != e.message_id else IndexEntry(e.label, "", e.message_id, e.thread_id, e.resource_id)
            for row, e in enumerate(all_entries) if e is not None and row not in unindexed
        ]
        hnsw_tmp = hnsw_path.with_name(hnsw_path.name + ".tmp")
        index._index.save_index(str(hnsw_tmp))
        hnsw_sha = _sha256(hnsw_tmp)
        _fsync_replace(hnsw_tmp, hnsw_path)
        entries_bytes = msgspec.msgpack.encode(entries)
        entries_tmp = entries_path.with_name(entries_path.name + ".tmp")
        entries_tmp.write_bytes(entries_bytes)
        _fsync_replace(entries_tmp, entries_path)
        manifest = _Manifest(
            version=_VERSION, name=index.name, dim=index.dim, space=index.space, m=index.m,
            ef_construction=index.ef_construction, count=len(entries), max_seq=seq, next_label=next_label,
            hnsw_sha256=hnsw_sha, entries_sha256=hashlib.sha256(entries_bytes).hexdigest(),
        )
        manifest_tmp = manifest_path.with_name(manifest_path.name + ".tmp")
        manifest_tmp.write_bytes(msgspec.json.encode(manifest))
        _fsync_replace(manifest_tmp, manifest_path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


def load_snapshot(index: HnswIndex, capacity: int = 0) -> str | None:
    """(worker thread, index not shared yet) Fill the fresh ``index`` from its snapshot if intact; None on
    success, else why it was not usable. No vector is copied out of hnswlib. ``capacity``: room to allocate at
    once (for the rows a replay will add), so that hnswlib never has to grow by copying itself."""
    if index.directory is None:
        return "no path"
    hnsw_path, entries_path, manifest_path, lock_path = _files(index.directory, index.name)
    if not manifest_path.exists():
        return "missing"
    with _locked(lock_path, exclusive=False):
        try:
            manifest = msgspec.json.decode(manifest_path.read_bytes(), type=_Manifest)
        except FileNotFoundError:
            return "missing"
        except (OSError, msgspec.DecodeError) as exc:
            return f"unreadable manifest: {exc}"
        expected = (_VERSION, index.name, index.dim, index.space, index.m, index.ef_construction)
        found = (manifest.version, manifest.name, manifest.dim, manifest.space, manifest.m, manifest.ef_construction)
        if found != expected:
            return f"built with other settings {found}"
        try:
            if _sha256(hnsw_path) != manifest.hnsw_sha256:
                return "index checksum mismatch"
            entries_bytes = entries_path.read_bytes()
            if hashlib.sha256(entries_bytes).hexdigest() != manifest.entries_sha256:
                return "entries checksum mismatch"
            entries = msgspec.msgpack.decode(entries_bytes, type=list[IndexEntry])
            del entries_bytes
            if len(entries) != manifest.count:
                return "entry count mismatch"
            loaded: Any = hnswlib.Index(space=index.space, dim=index.dim)
            loaded.load_index(str(hnsw_path), max_elements=capacity, allow_replace_deleted=True)
        except (OSError, RuntimeError, ValueError, msgspec.DecodeError) as exc:
            return f"unreadable snapshot: {exc}"
    index.adopt_loaded(loaded, entries, manifest.next_label, manifest.max_seq)
    return None
