"""Write-behind vectors: a save returns once its vectors are queryable; the SQL rows follow, crash-safely."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.stores._vector_records import SQLiteVectorRecords, VectorRecord
from threadmind.stores._vectors._write_behind import CoalescingRecords
from threadmind.testing import actor_system


def _memory(path: Path) -> Memory:
    return Memory(storage=SQLiteStore(path), vector=HnswVectorStore(path.with_suffix(".vectors")),
                  embedder=HashEmbedder(dim=64), options={"semanticRecall": {"scope": "thread"}})


def _rows(path: Path, sql: str) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute(sql)]


async def test_lost_vector_write_is_repaired_at_the_next_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "m.db"
    calls = 0

    async def broken_upsert(
        self: SQLiteVectorRecords, index_name: str, records: Any, *, background: bool = False
    ) -> int:
        nonlocal calls
        calls += 1
        raise RuntimeError("disk unplugged")

    async with _memory(db) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        with monkeypatch.context() as patch:
            patch.setattr(SQLiteVectorRecords, "upsert", broken_upsert)
            messages = [Message.user(f"zebra passport number {i}", id=f"m{i}", thread_id="t1", resource_id="r1")
                        for i in range(3)]
            await memory.save_messages(messages)  # returns: the vectors are queryable in memory
            # the marks committed with the messages themselves, before any vector row is written
            assert sorted(_rows(db, "SELECT message_id FROM threadmind_vector_pending")) == ["m0", "m1", "m2"]
            found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="zebra passport")
            assert {m.id for m in found.messages} == {"m0", "m1", "m2"}
            with anyio.fail_after(5):  # the rows are written behind, within the coalescing delay
                while calls < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
        # the messages are marked as awaiting vectors, in the same transaction as the messages themselves
        assert sorted(_rows(db, "SELECT message_id FROM threadmind_vector_pending")) == ["m0", "m1", "m2"]
        assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [0]
    async with _memory(db) as memory:  # a new process: the retry at start repairs the lost rows
        with anyio.fail_after(10):
            while _rows(db, "SELECT count(*) FROM threadmind_vector_pending") != [0]:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert sorted(_rows(db, "SELECT message_id FROM threadmind_vectors")) == ["m0", "m1", "m2"]
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="zebra passport")
        assert {m.id for m in found.messages} == {"m0", "m1", "m2"}


async def test_saves_leave_no_markers_once_the_vectors_are_stored(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with _memory(db) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        for i in range(20):
            await memory.save_messages([Message.user(f"message {i}", id=f"m{i}", thread_id="t1", resource_id="r1")])
        assert await memory.reindex() == 0  # a barrier: every write-behind upsert has committed
        assert _rows(db, "SELECT count(*) FROM threadmind_vector_pending") == [0]
        assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [20]


# -- coalescing: the rows of many background upserts share one write ------------------------------------------


def _record(vector_id: str, message_id: str, value: float = 1.0) -> VectorRecord:
    return VectorRecord(vector_id=vector_id, message_id=message_id, thread_id="t1", resource_id="r1", role="user",
                        created_at="2025-01-01T00:00:00.000Z", embedding=np.full(4, value, dtype="<f4").tobytes())


class _CountingRecords(SQLiteVectorRecords):
    """Real SQL records that count upserts and can be told to fail the next one."""

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.upserts = 0
        self.fail_next = False

    async def upsert(self, index_name: str, records: Any, *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        self.upserts += 1
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("disk unplugged")
        return await super().upsert(index_name, records, background=background, written=written,
                                    stored_only=stored_only, fresh_only=fresh_only)


async def test_background_upserts_within_the_delay_share_one_write(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=1000, max_delay=0.05)
        seqs: list[int] = []

        async def _one(i: int) -> None:
            seqs.append(await records.upsert("idx", [_record(f"m{i}", f"m{i}")], background=True))

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(_one, i)
        assert inner.upserts == 1 and records.writes == 1
        assert len(set(seqs)) == 1 and len(seqs) == 20
        loaded, _, _ = await inner.load("idx")
        assert sorted(r.message_id for r in loaded) == sorted(f"m{i}" for i in range(20))


async def test_a_full_buffer_is_written_without_waiting_out_the_delay(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=4, max_delay=60.0)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for i in range(2):
                    rows = [_record(f"m{i}#{c}", f"m{i}", c) for c in range(2)]
                    tg.start_soon(lambda r=rows: records.upsert("idx", r, background=True))  # type: ignore[misc]
        assert inner.upserts == 1
        assert len((await inner.load("idx"))[0]) == 4


async def test_a_later_batch_replaces_an_earlier_batchs_rows_for_the_same_message(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=1000, max_delay=0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: records.upsert("idx", [_record("m1#0", "m1", 1.0), _record("m1#1", "m1", 2.0)],
                                                 background=True))
            await anyio.lowlevel.checkpoint()
            tg.start_soon(lambda: records.upsert("idx", [_record("m1", "m1", 3.0)], background=True))
        assert inner.upserts == 1
        loaded, _, _ = await inner.load("idx")
        assert [(r.vector_id, np.frombuffer(r.embedding, dtype="<f4")[0]) for r in loaded] == [("m1", 3.0)]


async def test_a_delete_is_never_overtaken_by_an_older_buffered_upsert(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=1000, max_delay=60.0)
        with anyio.fail_after(5):  # the delete writes the buffer first instead of waiting out the delay
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: records.upsert("idx", [_record("m1", "m1"), _record("m2", "m2")],
                                                     background=True))
                await anyio.sleep(0.01)
                await records.delete_by_message_ids(None, ["m1"])
        loaded, deleted, _ = await inner.load("idx")
        assert [r.message_id for r in loaded] == ["m2"]  # m1 stays deleted


async def test_reads_see_buffered_rows(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        records = CoalescingRecords(_CountingRecords(store), max_records=1000, max_delay=60.0)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: records.upsert("idx", [_record("m1", "m1")], background=True))
                await anyio.sleep(0.01)
                assert await records.message_ids_with_vectors("idx") == {"m1"}
                assert [r.message_id for r in (await records.load("idx"))[0]] == ["m1"]


async def test_a_failed_write_fails_its_callers_and_the_next_buffer_is_written(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=1000, max_delay=0.02)
        inner.fail_next = True
        errors: list[BaseException] = []

        async def _one(i: int) -> None:
            try:
                await records.upsert("idx", [_record(f"m{i}", f"m{i}")], background=True)
            except RuntimeError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(_one, i)
        assert len(errors) == 3 and inner.upserts == 1
        await records.upsert("idx", [_record("m9", "m9")], background=True)
        assert [r.message_id for r in (await inner.load("idx"))[0]] == ["m9"]


async def test_cancelled_callers_do_not_lose_the_buffer(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "v.db") as store:
        inner = _CountingRecords(store)
        records = CoalescingRecords(inner, max_records=1000, max_delay=0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: records.upsert("idx", [_record("m1", "m1")], background=True))  # the leader
            await anyio.lowlevel.checkpoint()
            with anyio.move_on_after(0.01):  # a later caller gives up waiting
                await records.upsert("idx", [_record("m2", "m2")], background=True)
        await records.flush()
        assert sorted(r.message_id for r in (await inner.load("idx"))[0]) == ["m1", "m2"]


async def test_concurrent_semantic_saves_share_vector_row_writes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with _memory(db) as memory:
        for t in range(20):
            await memory.create_thread(thread_id=f"t{t}", resource_id="r1")

        async def _thread(t: int) -> None:
            for k in range(10):
                await memory.save_messages([Message.user(f"note {t}-{k} about lisbon trams", id=f"m{t}-{k}",
                                                         thread_id=f"t{t}", resource_id="r1")])

        async with anyio.create_task_group() as tg:
            for t in range(20):
                tg.start_soon(_thread, t)
        assert await memory.reindex() == 0  # a barrier: every buffered row is written
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        # Never more writes than batches; how many share one depends on timing (see the unit tests above).
        assert 0 < stats.row_writes <= stats.batches
        assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [200]
        assert _rows(db, "SELECT count(*) FROM threadmind_vector_pending") == [0]


async def test_buffered_rows_never_hold_back_later_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More batches than the pipeline has slots wait in the buffer; saves go on (and a delete still writes them)."""
    import threadmind.stores._vectors._hnsw_session as index_actor

    class _Patient(CoalescingRecords):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner, max_records=10_000, max_delay=8.0)

    monkeypatch.setattr(index_actor, "CoalescingRecords", _Patient)
    db = tmp_path / "m.db"
    async with _memory(db) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        with anyio.fail_after(4):  # would wait out the 8 s delay once the pipeline's slots were taken
            for i in range(40):
                await memory.save_messages([Message.user(f"note {i}", id=f"m{i}", thread_id="t1", resource_id="r1")])
            assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [0]  # all still buffered
            await memory.delete_messages(["m0"])  # writes the buffer first, then deletes
        assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [39]
        assert _rows(db, "SELECT count(*) FROM threadmind_vector_pending") == [0]


_CRASHING_WRITER = r"""
import os, sys
from pathlib import Path
import anyio
import threadmind.stores._vectors._hnsw_session as index_actor
from threadmind import Memory, Message
from threadmind.stores._vectors._write_behind import CoalescingRecords
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore

class Patient(CoalescingRecords):
    def __init__(self, inner):
        super().__init__(inner, max_records=10_000, max_delay=60.0)

index_actor.CoalescingRecords = Patient
path = sys.argv[1]

async def main():
    memory = Memory(storage=SQLiteStore(path), vector=HnswVectorStore(Path(path).with_suffix(".vectors")),
                    embedder=HashEmbedder(dim=64), options={"semanticRecall": {"scope": "thread"}})
    await memory.start()
    await memory.create_thread(thread_id="t1", resource_id="r1")
    for i in range(5):
        await memory.save_messages([Message.user(f"zebra passport number {i}", id=f"m{i}", thread_id="t1",
                                                 resource_id="r1")])
    found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="zebra passport")
    assert len(found.messages) == 5, found.messages
    os._exit(0)  # the process dies with every vector row still in the write-behind buffer

anyio.run(main)
"""


async def test_a_crash_with_buffered_rows_is_repaired_at_the_next_start(tmp_path: Path) -> None:
    """A real process exit (no close, no flush) while rows wait in the buffer: the marks bring them back."""
    db = tmp_path / "m.db"
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(db)], capture_output=True, text=True, timeout=120))
    assert done.returncode == 0, done.stderr
    assert _rows(db, "SELECT count(*) FROM mastra_messages") == [5]  # acknowledged saves are durable
    assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [0]  # the rows died with the process
    assert sorted(_rows(db, "SELECT message_id FROM threadmind_vector_pending")) == [f"m{i}" for i in range(5)]
    async with _memory(db) as memory:  # the next start re-embeds what the marks name
        with anyio.fail_after(10):
            while _rows(db, "SELECT count(*) FROM threadmind_vector_pending") != [0]:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert sorted(_rows(db, "SELECT message_id FROM threadmind_vectors")) == [f"m{i}" for i in range(5)]
        found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="zebra passport")
        assert {m.id for m in found.messages} == {f"m{i}" for i in range(5)}


async def test_closing_writes_the_buffered_rows_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing a Memory whose last rows wait in the write-behind buffer writes them then and there, instead of
    waiting out the buffer's delay (25 ms by default: 60 s here, so a close that waited would fail the test)."""
    import threadmind.stores._vectors._hnsw_session as session

    class _Patient(CoalescingRecords):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner, max_records=10_000, max_delay=60.0)

    monkeypatch.setattr(session, "CoalescingRecords", _Patient)
    db = tmp_path / "m.db"
    memory = _memory(db)
    await memory.start()
    try:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        for i in range(3):
            await memory.save_messages([Message.user(f"zebra passport number {i}", id=f"m{i}", thread_id="t1",
                                                     resource_id="r1")])
        assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [0]  # still in the buffer
    finally:
        with anyio.fail_after(10):
            await memory.aclose()
    assert _rows(db, "SELECT count(*) FROM threadmind_vectors") == [3]
    assert _rows(db, "SELECT count(*) FROM threadmind_vector_pending") == [0]
