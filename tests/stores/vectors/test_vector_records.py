"""VectorRecords: SQL and in-memory implementations agree on upsert, change log replay, moves and pending."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vector_records import (
    PendingVector,
    SQLiteVectorRecords,
    VectorRecord,
    VectorRecords,
)
from threadmind.stores._vector_records_memory import InMemoryVectorRecords


def _record(vector_id: str, message_id: str, thread_id: str = "t1", resource_id: str = "r1") -> VectorRecord:
    embedding = np.arange(4, dtype="<f4").tobytes()
    return VectorRecord(
        vector_id=vector_id, message_id=message_id, thread_id=thread_id, resource_id=resource_id, role="user",
        created_at="2025-01-01T00:00:00.000Z", embedding=embedding,
    )


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorRecords]:
    if request.param == "memory":
        yield InMemoryVectorRecords()
        return
    if request.param == "postgres":
        from threadmind.stores import PostgresStore

        async with PostgresStore(request.getfixturevalue("pg_dsn")) as pg:
            chosen_pg = pg.vector_records()
            assert isinstance(chosen_pg, VectorRecords)
            yield chosen_pg
        return
    async with SQLiteStore(tmp_path / "v.db") as store:
        chosen = store.vector_records()
        assert isinstance(chosen, SQLiteVectorRecords)
        yield chosen


def test_stores_without_sql_jobs_get_in_memory_records() -> None:
    assert isinstance(InMemoryStore().vector_records(), InMemoryVectorRecords)


class TestVectorRecords:
    async def test_upsert_replaces_a_messages_chunks(self, records: VectorRecords) -> None:
        first = await records.upsert("idx", [_record("m1#0", "m1"), _record("m1#1", "m1"), _record("m2", "m2")])
        second = await records.upsert("idx", [_record("m1", "m1")])
        assert second > first
        loaded, deleted, seq = await records.load("idx")
        assert sorted(r.vector_id for r in loaded) == ["m1", "m2"]
        assert deleted == [] and seq == second
        assert await records.message_ids_with_vectors("idx") == {"m1", "m2"}
        assert await records.message_ids_with_vectors("other") == set()

    async def test_load_since_replays_upserts_moves_and_deletes(self, records: VectorRecords) -> None:
        await records.upsert("idx", [_record("a", "a"), _record("b", "b"), _record("c", "c", thread_id="t2")])
        snapshot = (await records.load("idx"))[2]
        await records.delete_by_message_ids(None, ["a"])
        await records.move_thread("t2", "r9")
        await records.upsert("idx", [_record("d", "d")])
        changed, deleted, seq = await records.load("idx", since_seq=snapshot)
        assert {r.vector_id: r.resource_id for r in changed} == {"c": "r9", "d": "r1"}
        assert deleted == ["a"]
        # A vector deleted and re-added later is live, not deleted.
        await records.delete_by_thread("t1")
        await records.upsert("idx", [_record("b", "b")])
        changed, deleted, _ = await records.load("idx", since_seq=seq)
        assert [r.vector_id for r in changed] == ["b"] and deleted == ["d"]
        await records.prune_tombstones("idx", seq + 10)
        assert (await records.load("idx", since_seq=seq))[1] == []

    async def test_scope_records_read_one_thread_or_resource(self, records: VectorRecords) -> None:
        await records.upsert("idx", [_record("a", "a"), _record("b", "b", thread_id="t2"),
                                     _record("c", "c", thread_id="t3", resource_id="r2")])
        await records.upsert("other", [_record("x", "x")])

        async def ids(resource: str | None, thread: str | None) -> list[str]:
            found = await records.scope_records("idx", resource_id=resource, thread_id=thread)
            return sorted(r.vector_id for r in found)

        assert await ids("r1", None) == ["a", "b"]
        assert await ids(None, "t3") == ["c"]
        assert await ids("r1", "t3") == []
        assert await ids(None, None) == ["a", "b", "c"]

    async def test_pages_cover_every_row_once(self, records: VectorRecords) -> None:
        await records.upsert("idx", [_record(f"v{i}", f"v{i}") for i in range(23)])
        await records.upsert("other", [_record("x", "x")])
        seen: list[str] = []
        after = 0
        while True:
            page, after = await records.load_page("idx", after, 5)
            if not page:
                break
            assert len(page) <= 5
            seen.extend(r.vector_id for r in page)
        assert sorted(seen) == sorted(f"v{i}" for i in range(23))
        assert await records.size_hint("idx") >= 23

    async def test_sequence_reports_how_far_tombstones_were_forgotten(self, records: VectorRecords) -> None:
        first = await records.upsert("idx", [_record("a", "a")])
        deleted = await records.delete_by_message_ids(None, ["a"])
        assert await records.sequence("idx") == (deleted, 0)
        await records.prune_tombstones("idx", first)
        assert await records.sequence("idx") == (deleted, first)
        await records.prune_tombstones("idx", 0)  # never moves back
        assert (await records.sequence("idx"))[1] == first

    async def test_records_for_messages(self, records: VectorRecords) -> None:
        await records.upsert("idx", [_record("m#0", "m"), _record("m#1", "m"), _record("n", "n")])
        found = await records.records_for_messages("idx", ["m", "zzz"])
        assert [r.vector_id for r in found] == ["m#0", "m#1"]
        assert found[0].embedding == np.arange(4, dtype="<f4").tobytes()

    async def test_pending_lifecycle(self, records: VectorRecords) -> None:
        items = [PendingVector(message_id=f"m{i}", thread_id="t1", resource_id="r1") for i in range(3)]
        await records.add_pending(items, "boom")
        await records.add_pending(items[:1], "boom again")
        assert await records.pending_count() == 3
        taken = await records.take_pending(10)
        assert [p.message_id for p in taken] == ["m1", "m2", "m0"]  # least attempted first
        assert taken[-1].attempts == 2 and taken[-1].last_error == "boom again"
        await records.move_thread("t1", "r2")
        assert {p.resource_id for p in await records.take_pending(10)} == {"r2"}
        await records.clear_pending(["m1"])
        await records.upsert("idx", [_record("m2", "m2")])  # a successful upsert clears pending
        assert [p.message_id for p in await records.take_pending(10)] == ["m0"]
        await records.delete_by_thread("t1")
        assert await records.pending_count() == 0


async def test_large_batches_span_several_statements(tmp_path: Path) -> None:
    """Vector rows and pending marks are written as multi-row statements in chunks; nothing lost at the seams."""
    from threadmind.codecs import Message

    async with SQLiteStore(tmp_path / "big.db") as store:
        records = store.vector_records()
        assert isinstance(records, SQLiteVectorRecords)
        await records.ensure_tables()
        messages = [Message.user(f"text {i}", id=f"m{i}", thread_id="t1", resource_id="r1") for i in range(1203)]
        await store.execute_write(lambda conn: SQLiteVectorRecords.pending_marker(conn, messages))
        assert await records.pending_count() == 1203
        await records.upsert("idx", [_record(f"m{i}", f"m{i}") for i in range(1203)])
        assert await records.pending_count() == 0  # the upsert cleared every mark, across chunks
        loaded, _, _ = await records.load("idx")
        assert sorted(r.vector_id for r in loaded) == sorted(f"m{i}" for i in range(1203))
        assert all(r.embedding == _record("x", "x").embedding for r in loaded)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_rows_take_the_thread_and_resource_their_messages_have_when_written(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Another process may move a thread between the moment vectors are made and the moment they are written, or
    move it again while a move of its own is on its way: the rows end with the resource the thread's row has."""
    from threadmind.codecs import Message, Thread
    from threadmind.stores import PostgresStore

    store: SQLiteStore | PostgresStore = (PostgresStore(request.getfixturevalue("pg_dsn")) if kind == "postgres"
                                          else SQLiteStore(tmp_path / "v.db"))
    async with store:
        records = store.vector_records()
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [Message.user("hello", id="m1", thread_id="t1", resource_id="r1")])
        await store.update_thread_resource_id("t1", "r2")  # by another process, after m1's vectors were made
        written: list[VectorRecord] = []
        await records.upsert("idx", [_record("m1", "m1", "t1", "r1"), _record("ghost", "ghost", "t1", "r1")],
                             written=written)
        assert {r.vector_id: r.resource_id for r in written} == {"m1": "r2", "ghost": "r1"}  # ghost: no message
        loaded, _, _ = await records.load("idx")
        assert {r.vector_id: r.resource_id for r in loaded} == {"m1": "r2", "ghost": "r1"}
        moved: list[str] = []
        await records.move_thread("t1", "r3", written=moved)  # a move to r3 whose store move lost to r2's
        assert moved == ["r2"]
        loaded, _, _ = await records.load("idx")
        assert {r.resource_id for r in loaded} == {"r2"}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_write_for_stored_messages_only_and_copies_that_yield(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """``stored_only``: a message deleted since its vectors were made gets none (another process deleted it);
    ``fresh_only``: a clone's copies yield to the rows an edit of the copy wrote meanwhile."""
    from threadmind.codecs import Message, Thread
    from threadmind.stores import PostgresStore

    store: SQLiteStore | PostgresStore = (PostgresStore(request.getfixturevalue("pg_dsn")) if kind == "postgres"
                                          else SQLiteStore(tmp_path / "v.db"))
    async with store:
        records = store.vector_records()
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [Message.user(text, id=mid, thread_id="t1", resource_id="r1")
                                         for mid, text in (("m1", "kept"), ("m2", "edited"), ("m3", "copied"))])
        written: list[VectorRecord] = []
        await records.upsert("idx", [_record("m1", "m1"), _record("gone", "gone")], written=written,
                             stored_only=True)
        assert [r.vector_id for r in written] == ["m1"]
        await records.upsert("idx", [_record("m2#0", "m2"), _record("m2#1", "m2")])  # the edit's own rows
        written = []
        await records.upsert("idx", [_record("m2", "m2"), _record("m3", "m3")], written=written, fresh_only=True)
        assert [r.vector_id for r in written] == ["m3"]
        loaded, _, _ = await records.load("idx")
        assert sorted(r.vector_id for r in loaded) == ["m1", "m2#0", "m2#1", "m3"]
