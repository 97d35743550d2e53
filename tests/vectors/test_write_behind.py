"""Write-behind vectors: a save returns once its vectors are queryable; the SQL rows follow, crash-safely."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.stores._vector_records import SQLiteVectorRecords


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
            found = await memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="zebra passport")
            assert {m.id for m in found.messages} == {"m0", "m1", "m2"}
            assert calls >= 1
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
