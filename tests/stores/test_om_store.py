"""The SQLite OM record store keeps each key's current record: fewer reads, never a stale one after a write."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

import threadmind.stores._om as om_module
from threadmind.stores import SQLiteStore
from threadmind.stores._om import OMRecord, SQLiteOMStore

T = TypeVar("T")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _record(generation: int, text: str, key: str = "thread:t1") -> OMRecord:
    return OMRecord(id=f"om-{generation}", lookup_key=key, scope="thread", resource_id="r", thread_id="t1",
                    active_observations=text, generation_count=generation, created_at=NOW, updated_at=NOW)


class CountingReads:
    """Delegates to a real SQLiteStore; counts reads and can hold one read until released."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.reads = 0
        self.hold: anyio.Event | None = None
        self.held = anyio.Event()

    async def execute_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self.reads += 1
        result = await self.store.execute_read(fn)
        if self.hold is not None:
            hold, self.hold = self.hold, None
            self.held.set()
            await hold.wait()
        return result

    async def execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.store.execute_write(fn)


async def test_the_current_record_is_read_once_and_a_write_is_seen(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "m.db") as store:
        counting = CountingReads(store)
        records = SQLiteOMStore(counting)
        await records.put(_record(0, "first"))
        reads = counting.reads
        for _ in range(5):
            current = await records.current("thread:t1")
            assert current is not None and current.active_observations == "first"
        assert counting.reads == reads + 1
        await records.put(_record(1, "second"))  # a new generation through the same store
        current = await records.current("thread:t1")
        assert current is not None and current.active_observations == "second"
        await records.delete("thread:t1")
        assert await records.current("thread:t1") is None


async def test_handed_out_records_are_copies(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "m.db") as store:
        records = SQLiteOMStore(store)
        await records.put(_record(0, "kept"))
        for _ in range(3):  # the read, then answers from the kept record
            handed = await records.current("thread:t1")
            assert handed is not None
            assert handed.active_observations == "kept" and handed.observed_message_ids == []
            handed.active_observations = "changed by a caller"
            handed.observed_message_ids.append("m1")


async def test_a_read_that_overlapped_a_write_is_not_kept(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "m.db") as store:
        counting = CountingReads(store)
        records = SQLiteOMStore(counting)
        await records.put(_record(0, "old"))
        counting.hold = release = anyio.Event()
        seen: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                seen.append(await records.current("thread:t1"))

            tg.start_soon(read)
            await counting.held.wait()  # the read has its (old) row and waits
            await records.put(_record(1, "new"))
            release.set()
        assert seen[0].active_observations == "old"  # it answered from its snapshot...
        current = await records.current("thread:t1")
        assert current is not None and current.active_observations == "new"  # ...but did not keep it


async def test_another_process_is_seen_once_the_record_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def write_elsewhere(record: OMRecord) -> None:  # another process: a plain connection nothing counts
        with contextlib.closing(sqlite3.connect(tmp_path / "m.db", isolation_level=None)) as conn:
            conn.execute(om_module._INSERT, om_module._row(record))

    async with SQLiteStore(tmp_path / "m.db") as store:
        records = SQLiteOMStore(store)
        await records.put(_record(0, "mine"))
        assert (await records.current("thread:t1")) is not None
        write_elsewhere(_record(1, "theirs"))
        stale = await records.current("thread:t1")
        assert stale is not None and stale.active_observations == "mine"  # within the TTL
        monkeypatch.setattr(om_module, "_CURRENT_TTL", 0.0)
        await records.put(_record(2, "mine again"))  # forgets, and nothing is kept from now on
        assert (await records.current("thread:t1")).active_observations == "mine again"  # type: ignore[union-attr]
        write_elsewhere(_record(3, "theirs again"))
        assert (await records.current("thread:t1")).active_observations == "theirs again"  # type: ignore[union-attr]


async def test_another_store_object_on_the_same_file_is_seen_at_once(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "m.db") as store, SQLiteStore(tmp_path / "m.db") as peer:
        records, same_store, on_peer = SQLiteOMStore(store), SQLiteOMStore(store), SQLiteOMStore(peer)
        await records.put(_record(0, "mine"))
        assert (await records.current("thread:t1")).active_observations == "mine"  # type: ignore[union-attr]
        await same_store.put(_record(1, "second object"))
        assert (await records.current("thread:t1")).active_observations == "second object"  # type: ignore[union-attr]
        await on_peer.put(_record(2, "peer store"))
        assert (await records.current("thread:t1")).active_observations == "peer store"  # type: ignore[union-attr]
        await on_peer.delete("thread:t1")
        assert await records.current("thread:t1") is None


@pytest.mark.parametrize(("column", "value"), [
    pytest.param("createdAt", "not a time", id="bad-time"),
    pytest.param("generationCount", "many", id="bad-count"),
    pytest.param("observedMessageIds", "[" * 5000 + "]" * 5000, id="too-deep"),
])
async def test_a_row_no_record_can_hold_is_a_storage_error(tmp_path: Path, column: str, value: Any) -> None:
    from threadmind.errors import StorageError

    async with SQLiteStore(tmp_path / "m.db") as store:
        records = store.observational_records()
        await records.put(_record(0, "fine"))
        await store.execute_write(lambda conn: conn.execute(
            f'UPDATE mastra_observational_memory SET "{column}" = ?', (value,)))
        with pytest.raises(StorageError, match=r"mastra_observational_memory\["):
            await SQLiteOMStore(store).current("thread:t1")
