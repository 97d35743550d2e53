"""Snapshots are written by a forked child process: hnswlib's ``save_index`` holds the GIL for its whole
duration (seconds at a million vectors), which in the serving process would stall the event loop as long."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.actors._index_actor import IndexActor
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors import _hnsw_session, _hnsw_snapshot
from threadmind.stores._vectors._hnsw import HnswVectorStore

from ._support import FlakyEmbedder, make_message, persist

pytestmark = pytest.mark.skipif(not _hnsw_snapshot.FORKED_SNAPSHOTS, reason="snapshots are forked on Linux only")


@pytest.fixture(autouse=True)
def _forked_at_a_tests_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexes of a few thousand vectors are saved by a thread (see the last test): these tests' indexes of
    tens are "large" here, so that a child writes them."""
    monkeypatch.setattr(_hnsw_session, "THREAD_SNAPSHOT_MAX", 0)


@asynccontextmanager
async def _running(store: SQLiteStore, vec: Path) -> AsyncIterator[IndexActor]:
    async with IndexActor(store=store, vector=HnswVectorStore(vec), embedder=FlakyEmbedder(), retry_interval=None) \
            as actor:
        yield actor


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "m.db") as store:
        yield store


async def _indexed_and_saved(store: SQLiteStore, vec: Path) -> list[Any]:
    """120 messages stored, indexed and saved in one snapshot by a start that then closes."""
    messages = _messages(120)
    await persist(store, messages)
    async with _running(store, vec) as actor:
        await actor.upsert_messages(messages)
        assert await actor.persist()
        assert actor.statistics().store.snapshot_saves == 1
    return messages


async def _starts_from_the_snapshot(store: SQLiteStore, vec: Path, messages: list[Any]) -> None:
    """The next start loads the whole index from the snapshot (no rebuild) and finds a message by its text."""
    async with _running(store, vec) as actor:
        hits = await actor.query(messages[77].text, top_k=1, thread_id="t1")
        assert [h.message_id for h in hits] == ["m77"]
        stats = actor.statistics().store
        assert (stats.snapshot_loads, stats.rebuilds, stats.vectors) == (1, 0, len(messages))


def _messages(n: int) -> list[Any]:
    return [make_message(f"m{i}", "t1", "r1", f"note {i} about trams in lisbon", i) for i in range(n)]


async def test_the_snapshot_is_written_by_another_process_and_loads(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers = tmp_path / "writers"
    save = _hnsw_snapshot.save_snapshot

    def _save(index: Any, view: Any) -> bool:  # runs in the child: it inherits this patch
        with writers.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return save(index, view)

    monkeypatch.setattr(_hnsw_snapshot, "save_snapshot", _save)
    messages = await _indexed_and_saved(store, tmp_path / "vec")
    pids = {int(line) for line in writers.read_text().split()}
    assert pids and os.getpid() not in pids
    await _starts_from_the_snapshot(store, tmp_path / "vec", messages)


async def test_a_close_during_a_background_save_kills_the_writer_and_keeps_no_half_snapshot(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = tmp_path / "started"

    def _stuck(index: Any, view: Any) -> bool:  # the child: as slow as a huge index on a slow disk
        partial = started.with_suffix(".tmp")
        partial.write_text(str(os.getpid()))
        partial.rename(started)  # whole, or not there at all
        time.sleep(60)
        return True

    monkeypatch.setattr(_hnsw_snapshot, "save_snapshot", _stuck)
    monkeypatch.setattr(_hnsw_session, "SNAPSHOT_EVERY", 10)  # the flusher saves in the background soon
    monkeypatch.setattr(_hnsw_session, "SNAPSHOT_AT_CLOSE_MAX", 0)  # and close does not save
    messages = _messages(60)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        with anyio.fail_after(20):
            while not started.exists():  # noqa: ASYNC110 - the child reports through the file
                await anyio.sleep(0.02)
        pid = int(started.read_text())
        assert actor.statistics().store.snapshot_saving  # what a deployment watches before stopping
        closing = time.perf_counter()
    assert time.perf_counter() - closing < 10
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped, not left running
    vec = tmp_path / "vec"
    assert not vec.exists() or not any(p.name.endswith(".manifest.json") for p in vec.iterdir())
    async with _running(store, tmp_path / "vec") as actor:
        assert [h.message_id for h in await actor.query(messages[5].text, top_k=1, thread_id="t1")] == ["m5"]
        assert actor.statistics().store.vectors == 60
        assert not actor.statistics().store.snapshot_saving


async def test_a_failed_writer_is_an_error_of_that_save_only(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def _broken(index: Any, view: Any) -> bool:
        raise OSError("disk full")

    messages = _messages(30)
    await persist(store, messages)
    async with _running(store, tmp_path / "vec") as actor:
        await actor.upsert_messages(messages)
        with monkeypatch.context() as patch:
            patch.setattr(_hnsw_snapshot, "save_snapshot", _broken)
            with pytest.raises(OSError, match="exited with status 1"):
                await actor.persist()
        assert await actor.persist()  # the next one writes it
        hits = await actor.query(messages[3].text, top_k=1, thread_id="t1")
        assert [h.message_id for h in hits] == ["m3"]


async def test_a_small_index_is_saved_by_a_thread_of_this_process(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork costs more than writing a small index (hnswlib holds the GIL a few milliseconds): no child then."""
    monkeypatch.setattr(_hnsw_session, "THREAD_SNAPSHOT_MAX", 4_096)
    writers: list[int] = []
    save = _hnsw_session.save_snapshot  # type: ignore[attr-defined]

    def _save(index: Any, view: Any) -> bool:
        writers.append(os.getpid())
        return bool(save(index, view))

    def _no_fork(index: Any, view: Any) -> int:
        raise AssertionError("a small index was forked")

    monkeypatch.setattr(_hnsw_session, "save_snapshot", _save)
    monkeypatch.setattr(_hnsw_session, "fork_snapshot", _no_fork)
    messages = await _indexed_and_saved(store, tmp_path / "vec")
    assert writers == [os.getpid()]
    await _starts_from_the_snapshot(store, tmp_path / "vec", messages)
