"""Index snapshots on disk: an hnswlib file, its entries and a checksum manifest, shared safely by processes.

A snapshot is a cache of the SQL vector rows as of one change sequence, so a restart replays only what
changed since. Files are written to temporary names, fsynced and renamed; the manifest, written last, holds
the sha256 of the other two, and a snapshot whose files do not match it is not used (the index is rebuilt
from SQL). Processes that share a snapshot path take a lock file around it: exclusive to write (a process
that finds it taken skips its save), shared to read, so no reader ever sees half of a writer's files.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hnswlib  # type: ignore[import-untyped]
import msgspec

from ._hnsw_entries import IndexEntry, SnapshotView
from ._hnsw_index import HnswIndex

__all__ = ("FORKED_SNAPSHOTS", "fork_snapshot", "load_snapshot", "manifest_count", "reap_snapshot", "save_snapshot",
           "stop_snapshot")

#: Where ``fork`` is safe to use for it, a snapshot is written by a child process from a copy-on-write image of
#: the index: hnswlib's ``save_index`` holds the GIL throughout (~3 ms per MB here, seconds at a million
#: vectors), which in this process would stall the event loop for as long.
FORKED_SNAPSHOTS = sys.platform == "linux" and hasattr(os, "fork")

_SKIPPED = 3  # the child's exit status when another process holds the snapshot lock

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


def save_snapshot(index: HnswIndex, view: SnapshotView) -> bool:
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
            for row, e in all_entries.items() if e is not None and row not in unindexed
        ]
        hnsw_tmp = hnsw_path.with_name(hnsw_path.name + ".tmp")
        index.save_graph(str(hnsw_tmp))
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


def fork_snapshot(index: HnswIndex, view: SnapshotView) -> int:
    """(worker thread, the index's only hnswlib user) Start a child process that writes ``index`` as ``view``
    describes it (see :func:`save_snapshot`) and exits; returns its pid for :func:`reap_snapshot`.

    The child closes every descriptor it inherited first (it opens the files it writes by path, and must not
    keep another lock's descriptor open), turns the collector off (nothing may close a reused descriptor) and
    leaves with ``os._exit``: it runs none of this process's cleanup.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork() with other threads running
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            gc.disable()
            os.nice(10)  # background work: serving keeps the CPU it needs
            limit = os.sysconf("SC_OPEN_MAX")
            os.closerange(3, limit if limit > 0 else 65536)
            code = 0 if save_snapshot(index, view) else _SKIPPED
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return pid


def reap_snapshot(pid: int) -> bool:
    """(worker thread) Wait for the child writing a snapshot: True when written, False when another process
    held the snapshot lock. :raises OSError: the child failed (nothing it wrote is used)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError as exc:  # reaped by stop_snapshot meanwhile
        raise OSError("the snapshot writer was stopped") from exc
    code = os.waitstatus_to_exitcode(status)
    if code == _SKIPPED:
        return False
    if code != 0:
        raise OSError(f"the process writing the vector index snapshot exited with status {code}")
    return True


def stop_snapshot(pid: int) -> None:
    """Kill the child writing a snapshot and reap it (its temporary files are never renamed into place)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


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
        # The graph file's checksum (hashlib releases the GIL) is taken in a thread of its own while the entries
        # are decoded and linked (Python, holding it): at a million vectors 2.2 s and 3.9 s here, one after the
        # other before. The graph is read only once its checksum matched: hnswlib trusts the file it loads.
        graph_sha256 = _Checksum(hnsw_path)
        try:
            entries_bytes = entries_path.read_bytes()
            if hashlib.sha256(entries_bytes).hexdigest() != manifest.entries_sha256:
                return "entries checksum mismatch"
            entries = _decode_entries(entries_bytes)
            del entries_bytes
            if len(entries) != manifest.count:
                return "entry count mismatch"
            index.link_loaded(entries)
            if graph_sha256.result() != manifest.hnsw_sha256:
                return "index checksum mismatch"
            loaded: Any = hnswlib.Index(space=index.space, dim=index.dim)
            loaded.load_index(str(hnsw_path), max_elements=capacity, allow_replace_deleted=True)
        except (OSError, RuntimeError, ValueError, msgspec.DecodeError) as exc:
            return f"unreadable snapshot: {exc}"
        finally:
            graph_sha256.join()  # never left running, whatever ended the load
    index.adopt_loaded(loaded, entries, manifest.next_label, manifest.max_seq)
    return None


_ENTRIES = msgspec.msgpack.Decoder(list[IndexEntry])
#: Entries decoded per call: msgspec holds the GIL for a whole decode (a million entries, 0.4–0.5 s here).
_DECODE_BATCH = 1 << 16


def _decode_entries(data: bytes) -> list[IndexEntry]:
    """A snapshot's entries (one msgpack array), decoded a batch at a time: the array is first split into its
    encoded elements (a million in 0.08 s), then each batch is decoded as an array of its own (~40 ms each)."""
    elements = msgspec.msgpack.decode(data, type=list[msgspec.Raw])
    entries: list[IndexEntry] = []
    for start in range(0, len(elements), _DECODE_BATCH):
        batch = elements[start:start + _DECODE_BATCH]
        entries.extend(_ENTRIES.decode(b"\xdd" + len(batch).to_bytes(4, "big") + b"".join(batch)))  # array 32
    return entries


class _Checksum:
    """The sha256 of a file, taken in a daemon thread of its own (a load abandoned at exit does not wait)."""

    def __init__(self, path: Path) -> None:
        self._digest: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), name="threadmind snapshot checksum",
                                        daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            self._digest = _sha256(path)
        except OSError as exc:
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> str:
        """The hex digest; :raises OSError: the file could not be read."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._digest is not None
        return self._digest
