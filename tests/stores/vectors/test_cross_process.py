"""Several OS processes on one database: each HnswVectorStore index catches up from the SQL rows (one SQLite file,
or one PostgreSQL database); with PgVectorStore the database is the index."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, PgVectorStore, PostgresStore, SQLiteStore
from threadmind.testing import actor_system

_WRITER = r"""
import sys
import anyio
import pytest
from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, PgVectorStore, PostgresStore, SQLiteStore
from threadmind.testing import actor_system

db, vectors, thread, count, persist = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"

async def main():
    storage = PostgresStore(db) if db.startswith("postgresql://") else SQLiteStore(db)
    vector = PgVectorStore(db) if vectors == "pgvector" else HnswVectorStore(vectors)
    memory = Memory(storage=storage, vector=vector, embedder=HashEmbedder(dim=32),
                    options={"semanticRecall": {"scope": "resource"}})
    async with memory:
        if await memory.get_thread_by_id(thread) is None:
            await memory.create_thread(thread_id=thread, resource_id="r1")
        for i in range(count):
            text = f"{thread} note {i} about the {thread} harbour"
            await memory.save_messages([Message.user(text, id=f"{thread}-{i}", thread_id=thread, resource_id="r1")])
            if persist and i % 25 == 24:
                await actor_system(memory).index.persist()  # snapshots written while the other process writes its own

anyio.run(main)
"""


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _WRITER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


async def _wait(process: subprocess.Popen[str]) -> None:
    _, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=120))
    assert process.returncode == 0, err


def _memory(db: Path, vectors: Path) -> Memory:
    return Memory(storage=SQLiteStore(db), vector=HnswVectorStore(vectors), embedder=HashEmbedder(dim=32),
                  options={"semanticRecall": {"scope": "resource", "topK": 3, "messageRange": 0}})


async def test_another_process_save_is_found_by_the_next_query(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with _memory(db, tmp_path / "b.vectors") as memory:  # B: running, its index loaded, before A writes
        await memory.create_thread(thread_id="tb", resource_id="r1")
        first = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="tanker harbour")
        assert first.messages == []
        await _wait(_run(str(db), str(tmp_path / "a.vectors"), "ta", "3", "0"))  # A: its own snapshot path
        found = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 1 harbour")
        assert "ta-1" in {m.id for m in found.messages}
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert stats.store.catch_ups >= 1 and stats.vectors == 3
        before = stats.store.catch_ups
        await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 2 harbour")
        assert actor_system(memory).index.statistics().store.catch_ups == before  # type: ignore[union-attr]  # nothing new


async def test_another_process_save_is_found_by_the_next_query_on_postgres(tmp_path: Path, pg_dsn: str) -> None:
    """Over PostgresStore each query reads the vector change sequence first and replays what others committed."""
    memory = Memory(storage=PostgresStore(pg_dsn), vector=HnswVectorStore(tmp_path / "b.vectors"),
                    embedder=HashEmbedder(dim=32),
                    options={"semanticRecall": {"scope": "resource", "topK": 3, "messageRange": 0}})
    async with memory:
        await memory.create_thread(thread_id="tb", resource_id="r1")
        await memory.save_messages([Message.user("tb note about the tb harbour", id="tb-0", thread_id="tb",
                                                 resource_id="r1")])
        first = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 1 harbour")
        assert {m.id for m in first.messages} == {"tb-0"}
        await _wait(_run(pg_dsn, str(tmp_path / "a.vectors"), "ta", "3", "0"))
        found = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 1 harbour")
        assert "ta-1" in {m.id for m in found.messages}
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert stats.store.catch_ups == 1 and stats.vectors == 4
        await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 2 harbour")
        assert actor_system(memory).index.statistics().store.catch_ups == 1  # type: ignore[union-attr]
        await memory.delete_messages(["ta-1"])  # and a delete made here is not replayed back
        again = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 1 harbour")
        assert "ta-1" not in {m.id for m in again.messages}


async def test_with_pgvector_another_process_save_is_found_at_the_next_query(pg_dsn: str) -> None:
    memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=HashEmbedder(dim=32),
                    options={"semanticRecall": {"scope": "resource", "topK": 3, "messageRange": 0}})
    async with memory:
        await memory.create_thread(thread_id="tb", resource_id="r1")
        first = await memory.recall("tb", resource_id="r1", per_page=0, vector_search_string="ta note 1 harbour")
        assert first.messages == []
        writers = [_run(pg_dsn, "pgvector", thread, "20", "0") for thread in ("ta", "tc")]  # two at once
        for writer in writers:
            await _wait(writer)
        for thread in ("ta", "tc"):
            found = await memory.recall("tb", resource_id="r1", per_page=0,
                                        vector_search_string=f"{thread} note 13 about the {thread} harbour")
            assert f"{thread}-13" in {m.id for m in found.messages}
        index = actor_system(memory).index
        assert index is not None
        assert len(await index.vector_store.message_ids_with_vectors()) == 40
        assert await index.vector_store.pending_count() == 0  # each writer's marks went with its vectors


async def test_processes_sharing_one_snapshot_path_never_corrupt_it(tmp_path: Path) -> None:
    db, vectors = tmp_path / "m.db", tmp_path / "shared.vectors"
    async with _memory(db, vectors) as memory:  # the tables and both threads exist before the writers start
        await memory.create_thread(thread_id="ta", resource_id="r1")
        await memory.create_thread(thread_id="tb", resource_id="r1")
    writers = [_run(str(db), str(vectors), thread, "150", "1") for thread in ("ta", "tb")]
    for writer in writers:
        await _wait(writer)
    async with _memory(db, vectors) as memory:
        found = await memory.recall("ta", resource_id="r1", per_page=0,
                                    vector_search_string="tb note 77 about the tb harbour")
        assert "tb-77" in {m.id for m in found.messages}
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert (stats.snapshot_loads, stats.rebuilds, stats.vectors) == (1, 0, 300)  # the snapshot validated
    assert not list(vectors.glob("*.tmp"))


async def test_a_query_reads_no_sql_while_no_other_connection_wrote(tmp_path: Path) -> None:
    """The catch-up check is the database's change counter: nothing changed elsewhere, nothing is read."""
    import sqlite3

    from threadmind.codecs import Message

    db = tmp_path / "m.db"
    async with _memory(db, tmp_path / "v") as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([Message.user("harbour cranes at dawn", thread_id="t1", resource_id="r1")])
        index = actor_system(memory).index
        assert index is not None
        session = index.vector_store._session  # type: ignore[attr-defined]
        reads = 0
        sequence = session.records.sequence

        async def _counted(name: str) -> tuple[int, int]:
            nonlocal reads
            reads += 1
            return await sequence(name)  # type: ignore[no-any-return]

        session.records.sequence = _counted
        await index.flush()
        await index.query("harbour", top_k=2, thread_id="t1")  # the first look after our own writes
        reads = 0
        for _ in range(10):
            assert [h.thread_id for h in await index.query("harbour", top_k=2, thread_id="t1")] == ["t1"]
        assert reads == 0
        # another connection (as another process would) commits a vector row: the next query catches up
        await index.flush()  # our own rows are written
        other = sqlite3.connect(db)
        try:
            row = other.execute("SELECT * FROM threadmind_vectors").fetchone()
            other.execute("UPDATE threadmind_vector_seq SET seq = seq + 1")
            other.execute("INSERT INTO threadmind_vectors VALUES (?, 'copy', 'copy', 't1', 'r1', 'user', ?, ?, "
                          "(SELECT seq FROM threadmind_vector_seq))", (row[0], row[6], row[7]))
            other.commit()
        finally:
            other.close()
        hits = await index.query("harbour cranes at dawn", top_k=2, thread_id="t1")
        assert reads == 1 and "copy" in {h.message_id for h in hits}


async def test_two_memories_on_one_file_in_one_process_read_each_others_saves_at_once(tmp_path: Path) -> None:
    """A second ``Memory`` on the file in this process has its own index, as another process would: a save made
    through one is found by the other's very next query (its vectors are not answered from memory before their
    rows commit), and an update through the other replaces the vector the first one answers with."""
    from threadmind.codecs import Message

    db = tmp_path / "m.db"
    async with _memory(db, tmp_path / "a") as one, _memory(db, tmp_path / "b") as two:
        await one.create_thread(thread_id="t1", resource_id="r1")
        for i in range(5):
            await one.save_messages([Message.user(f"tanker {i} in the harbour", id=f"m{i}", thread_id="t1",
                                                  resource_id="r1")])
            hits = await two.search_vectors(f"tanker {i} in the harbour", top_k=1, resource_id="r1")
            assert [h.message_id for h in hits] == [f"m{i}"] and hits[0].score == pytest.approx(1.0, abs=1e-5)
        await two.update_messages([{"id": "m0", "content": {"content": "violin lessons on tuesday"}}])
        hits = await one.search_vectors("violin lessons on tuesday", top_k=1, resource_id="r1")
        assert [h.message_id for h in hits] == ["m0"] and hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_an_index_whose_own_writes_came_after_anothers_drops_what_the_other_deleted(tmp_path: Path) -> None:
    """The first change on the file is the other object's, so this index's own write leaves it at sequence 0 (a
    gap it has not replayed); the other then deletes that message: the next query's catch-up, a load from 0,
    drops it too."""
    from threadmind.codecs import Message

    db = tmp_path / "m.db"
    async with _memory(db, tmp_path / "a") as one, _memory(db, tmp_path / "b") as two:
        for memory in (one, two):
            await memory.load_index()  # as a server does before taking traffic: both indexes at sequence 0
        await two.create_thread(thread_id="t1", resource_id="r1")
        await two.save_messages([Message.user("violin lessons", id="m0", thread_id="t1", resource_id="r1")])
        await one.save_messages([Message.user("harbour tankers", id="m1", thread_id="t1", resource_id="r1")])
        await two.delete_messages(["m1"])
        hits = await one.search_vectors("harbour tankers", top_k=5, resource_id="r1")
        assert [h.message_id for h in hits] == ["m0"]
