"""PgVectorStore against a real PostgreSQL 18 with pgvector 0.8: Mastra's table layout, the HNSW index and its
parameters, scoped queries that never come back short, the extension check, PgBouncer, the message store's role."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import numpy as np
import pytest

try:
    import asyncpg
except ImportError:  # the pg_cluster fixture skips these tests (fails them in CI) with the install hint
    asyncpg = None

from bench._pgserver import PgCluster

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.errors import ConfigError
from threadmind.stores import PgVectorStore, PostgresStore, SQLiteStore
from threadmind.stores._protocol import Store
from threadmind.stores._vector_records import PendingVector, VectorRecord
from threadmind.stores._vectors import _pgvector_query
from threadmind.stores._vectors._contract import VectorStore
from threadmind.testing import actor_system

from ._support import exact_top_k

DIM = 8


async def _sql(dsn: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await fn(conn)
    finally:
        await conn.close()


def _record(message_id: str, thread_id: str, resource_id: str, vector: np.ndarray[Any, Any],
            vector_id: str | None = None) -> VectorRecord:
    return VectorRecord(vector_id=vector_id or message_id, message_id=message_id, thread_id=thread_id,
                        resource_id=resource_id, role="user", created_at="2025-01-01T00:00:00.000Z",
                        embedding=np.asarray(vector, dtype="<f4").tobytes())


def _vectors(n: int, seed: int = 1, dim: int = DIM) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


class _Opened:
    """A PgVectorStore opened on a message store with the index of ``dim`` dimensions selected."""

    def __init__(self, vector: PgVectorStore, store: Store) -> None:
        self.vector = vector
        self.store = store


@pytest.fixture
async def opened(pg_dsn: str, tmp_path: Path) -> AsyncIterator[_Opened]:
    async with SQLiteStore(tmp_path / "m.db") as store:
        vector = PgVectorStore(pg_dsn, build_hnsw="at_start")
        await vector.open(store, owner=object())
        try:
            await vector.use_index(f"memory_messages_{DIM}", DIM)
            yield _Opened(vector, store)
        finally:
            await vector.close()


async def _layout(dsn: str, table: str) -> dict[str, Any]:
    async def read(conn: Any) -> dict[str, Any]:
        columns = await conn.fetch(
            "SELECT column_name, data_type, udt_name, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_name = $1 ORDER BY ordinal_position", table)
        dimension = await conn.fetchval("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass($1) "
                                        "AND attname = 'embedding'", table)
        indexes = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 "
                                   "ORDER BY indexname", table)
        return {"columns": [tuple(c) for c in columns], "dimension": dimension,
                "indexes": {name: definition[definition.index(" USING ") + 1:] for name, definition in indexes}}

    result: dict[str, Any] = await _sql(dsn, read)
    return result


class TestTable:
    async def test_mastras_pgvector_layout(self, opened: _Opened, pg_dsn: str) -> None:
        layout = await _layout(pg_dsn, "memory_messages_8")
        assert layout["columns"] == [
            ("id", "integer", "int4", "NO", "nextval('memory_messages_8_id_seq'::regclass)"),
            ("vector_id", "text", "text", "NO", None),
            ("embedding", "USER-DEFINED", "vector", "YES", None),
            ("metadata", "jsonb", "jsonb", "YES", "'{}'::jsonb"),
            ("namespace", "character varying", "varchar", "NO", "'default'::character varying"),
        ]
        assert layout["dimension"] == DIM
        assert layout["indexes"] == {
            "memory_messages_8_md_12150d99_idx": "USING btree (((metadata ->> 'message_id'::text)))",
            "memory_messages_8_md_57d95f6b_idx": "USING btree (((metadata ->> 'thread_id'::text)))",
            "memory_messages_8_md_5a823b81_idx": "USING btree (((metadata ->> 'resource_id'::text)))",
            "memory_messages_8_namespace_vector_id_idx": "USING btree (namespace, vector_id)",
            "memory_messages_8_pkey": "USING btree (id)",
            "memory_messages_8_vector_idx": "USING hnsw (embedding vector_cosine_ops) WITH (m='16', "
                                            "ef_construction='64')",
        }

    async def test_rows_carry_mastras_metadata_and_raw_embeddings(self, opened: _Opened, pg_dsn: str) -> None:
        vector = np.array([3.0, 4.0, 0, 0, 0, 0, 0, 0], dtype=np.float32)  # not unit length: stored as given
        await opened.vector.write([_record("m1", "t1", "r1", vector)], staged=False)
        row = await _sql(pg_dsn, lambda c: c.fetchrow(
            "SELECT vector_id, embedding::text, metadata, namespace FROM memory_messages_8"))
        assert row[0] == "m1" and row[1] == "[3,4,0,0,0,0,0,0]" and row[3] == "default"
        assert __import__("json").loads(row[2]) == {"message_id": "m1", "thread_id": "t1", "resource_id": "r1",
                                                    "role": "user", "created_at": "2025-01-01T00:00:00.000Z"}

    async def test_1536_dimensions_use_the_plain_name_and_wrong_names_are_refused(self, opened: _Opened) -> None:
        with pytest.raises(ConfigError, match="memory_messages_16"):
            await opened.vector.use_index("memory_messages", 16)

    async def test_a_table_of_that_name_with_other_vectors_is_refused(self, pg_dsn: str, tmp_path: Path) -> None:
        await _sql(pg_dsn, lambda c: c.execute(
            "CREATE EXTENSION vector; CREATE TABLE memory_messages_8 (id serial, vector_id text, "
            "embedding vector(9), metadata jsonb, namespace varchar(255) NOT NULL DEFAULT 'default')"))
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, build_hnsw="at_start")
            await vector.open(store, owner=object())
            try:
                with pytest.raises(ConfigError, match=r"vector\(8\)"):
                    await vector.use_index("memory_messages_8", DIM)
            finally:
                await vector.close()

    async def test_hnsw_parameters_come_from_the_store_or_index_config(self, pg_dsn: str) -> None:
        memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw="at_start"),
                        embedder=HashEmbedder(dim=DIM),
                        options={"semanticRecall": {"indexConfig": {"m": 24, "efConstruction": 80}}})
        async with memory:
            await memory.create_thread(thread_id="t1", resource_id="r1")
            await memory.save_messages([Message.user("hello there", thread_id="t1", resource_id="r1")])
        layout = await _layout(pg_dsn, "memory_messages_8")
        assert layout["indexes"]["memory_messages_8_vector_idx"].endswith("WITH (m='24', ef_construction='80')")
        with pytest.raises(ConfigError, match="set it in one place"):
            Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, m=12, build_hnsw="at_start"),
                   embedder=HashEmbedder(dim=DIM), options={"semanticRecall": {"indexConfig": {"m": 24}}})

    async def test_mastras_default_ivfflat_index_is_rebuilt_as_hnsw_and_a_matching_one_kept(
            self, pg_dsn: str, tmp_path: Path) -> None:
        await _sql(pg_dsn, lambda c: c.execute(  # what PgVector.createIndex makes with no indexConfig
            "CREATE EXTENSION vector; CREATE TABLE memory_messages_8 (id SERIAL PRIMARY KEY, vector_id TEXT NOT NULL, "
            "embedding vector(8), metadata JSONB DEFAULT '{}'::jsonb, namespace VARCHAR(255) NOT NULL DEFAULT "
            "'default'); CREATE UNIQUE INDEX memory_messages_8_namespace_vector_id_idx ON memory_messages_8 "
            "(namespace, vector_id); CREATE INDEX memory_messages_8_vector_idx ON memory_messages_8 USING ivfflat "
            "(embedding vector_cosine_ops) WITH (lists = 100); INSERT INTO memory_messages_8 (vector_id, embedding, "
            "metadata) VALUES ('u-1', '[1,0,0,0,0,0,0,0]', '{\"message_id\": \"m1\", \"thread_id\": \"t1\", "
            "\"resource_id\": \"r1\"}')"))
        async with SQLiteStore(tmp_path / "m.db") as store:
            for expected_builds in (1, 0):
                vector = PgVectorStore(pg_dsn, build_hnsw="at_start")
                await vector.open(store, owner=object())
                try:
                    await vector.use_index("memory_messages_8", DIM)
                    assert vector.index_builds == expected_builds
                    hits = await vector.query(np.eye(DIM, dtype=np.float32)[0], top_k=3, resource_id="r1",
                                              thread_id=None)
                    assert [(h.message_id, h.thread_id, round(h.score, 5)) for h in hits] == [("m1", "t1", 1.0)]
                finally:
                    await vector.close()
        layout = await _layout(pg_dsn, "memory_messages_8")
        assert layout["indexes"]["memory_messages_8_vector_idx"].startswith("USING hnsw (embedding vector_cosine_ops)")
        assert "memory_messages_8_md_57d95f6b_idx" in layout["indexes"]  # the btrees Mastra lacked were added

    async def test_more_dimensions_than_hnsw_takes_are_searched_exactly(self, pg_dsn: str, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=0, build_hnsw="at_start")
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_2048", 2048)
                rows = _vectors(5, dim=2048)
                await vector.write([_record(f"m{i}", "t1", "r1", rows[i]) for i in range(5)], staged=False)
                hits = await vector.query(rows[3], top_k=2, resource_id="r1", thread_id=None)
                assert hits[0].message_id == "m3" and len(hits) == 2
                assert vector.statistics().ann_queries == 0
            finally:
                await vector.close()
        assert "memory_messages_2048_vector_idx" not in (await _layout(pg_dsn, "memory_messages_2048"))["indexes"]


class TestHnswWhenNeeded:
    async def _wait_ready(self, vector: PgVectorStore) -> None:
        with anyio.fail_after(60):
            assert await vector.wait_for_hnsw()

    async def test_the_index_is_built_in_the_background_once_a_large_scope_is_queried(
            self, pg_dsn: str, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=100, build_hnsw="when_needed", m=12, ef_construction=40)
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                assert not vector.hnsw_ready
                assert "memory_messages_8_vector_idx" not in (await _layout(pg_dsn, "memory_messages_8"))["indexes"]
                rows = _vectors(300)
                await vector.write([_record(f"m{i}", f"t{i % 3}", "small" if i < 50 else "big", rows[i])
                                    for i in range(300)], staged=False)
                small = await vector.query(rows[7], top_k=3, resource_id="small", thread_id=None)
                assert small[0].message_id == "m7" and not vector.hnsw_ready  # a small scope wants no index
                big = await vector.query(rows[70], top_k=3, resource_id="big", thread_id=None)
                assert big[0].message_id == "m70" and vector.statistics().ann_queries == 0  # exact meanwhile
                await self._wait_ready(vector)
                assert vector.index_builds == 1
                again = await vector.query(rows[70], top_k=3, resource_id="big", thread_id=None)
                assert again[0].message_id == "m70" and vector.statistics().ann_queries == 1
            finally:
                await vector.close()
        index = (await _layout(pg_dsn, "memory_messages_8"))["indexes"]["memory_messages_8_vector_idx"]
        assert index == "USING hnsw (embedding vector_cosine_ops) WITH (m='12', ef_construction='40')"

    async def test_a_build_cut_off_by_close_is_dropped_and_made_again(self, pg_dsn: str, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=10, build_hnsw="when_needed")
            await vector.open(store, owner=object())
            await vector.use_index("memory_messages_8", DIM)
            rows = _vectors(50)
            await vector.write([_record(f"m{i}", "t1", "r1", rows[i]) for i in range(50)], staged=False)
            await vector.close()
        # what a cancelled CREATE INDEX CONCURRENTLY leaves: an index that is not valid
        await _sql(pg_dsn, lambda c: c.execute(
            "CREATE INDEX memory_messages_8_vector_idx ON memory_messages_8 USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64); UPDATE pg_index SET indisvalid = false "
            "WHERE indexrelid = 'memory_messages_8_vector_idx'::regclass"))
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=10, build_hnsw="when_needed")
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                assert not vector.hnsw_ready  # the invalid one was dropped
                assert "memory_messages_8_vector_idx" not in (await _layout(pg_dsn, "memory_messages_8"))["indexes"]
                hits = await vector.query(rows[3], top_k=2, resource_id="r1", thread_id=None)
                assert hits[0].message_id == "m3"
                await self._wait_ready(vector)
            finally:
                await vector.close()
        valid = await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'memory_messages_8_vector_idx'::regclass"))
        assert valid is True

    async def test_by_default_the_hnsw_index_waits_for_a_scope_that_needs_it(self, pg_dsn: str,
                                                                             tmp_path: Path) -> None:
        """Until a scope outgrows exact search the index would serve no query, and each insert would pay for it."""
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn)
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                assert (vector.index_builds, vector.hnsw_ready) == (0, False)
            finally:
                await vector.close()
        assert await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'memory_messages_8_vector_idx'")) == 0

    async def test_at_start_a_valid_index_is_kept(self, pg_dsn: str, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "m.db") as store:
            for builds, mode in ((1, "at_start"), (0, "when_needed"), (0, "at_start")):
                vector = PgVectorStore(pg_dsn, build_hnsw=mode)  # type: ignore[arg-type]
                await vector.open(store, owner=object())
                try:
                    await vector.use_index("memory_messages_8", DIM)
                    assert (vector.index_builds, vector.hnsw_ready) == (builds, True)
                finally:
                    await vector.close()


class TestWrites:
    async def test_an_upsert_replaces_the_messages_vectors_in_one_statement(self, opened: _Opened,
                                                                            pg_dsn: str) -> None:
        rows = _vectors(4)
        await opened.vector.write([_record("m1", "t1", "r1", rows[0], "m1#0"),
                                   _record("m1", "t1", "r1", rows[1], "m1#1"), _record("m2", "t1", "r1", rows[2])],
                                  staged=False)
        # a vector Mastra wrote for m1 (its ids are uuids) goes too when m1 is indexed again
        await _sql(pg_dsn, lambda c: c.execute(
            "INSERT INTO memory_messages_8 (vector_id, embedding, metadata) VALUES ('5c0ffee0-uuid', "
            "'[1,1,1,1,1,1,1,1]', '{\"message_id\": \"m1\", \"thread_id\": \"t1\", \"resource_id\": \"r1\"}')"))
        await opened.vector.write([_record("m1", "t1", "r1", rows[3])], staged=False)
        stored = await _sql(pg_dsn, lambda c: c.fetch("SELECT vector_id FROM memory_messages_8 ORDER BY vector_id"))
        assert [r[0] for r in stored] == ["m1", "m2"]
        assert await opened.vector.message_ids_with_vectors() == {"m1", "m2"}

    async def test_upserts_commit_in_the_order_they_were_called(self, opened: _Opened, pg_dsn: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
        """The index actor calls them in batch order: a message re-saved twice must end with its second vector,
        even when the first upsert's connection is slower to come."""
        vector = opened.vector
        original = vector._write
        calls = 0

        async def slow_first(fn: Callable[[Any], Awaitable[Any]], doing: str) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                await anyio.sleep(0.05)
            return await original(fn, doing)

        monkeypatch.setattr(vector, "_write", slow_first)
        eye = np.eye(DIM, dtype=np.float32)
        async with anyio.create_task_group() as tg:
            tg.start_soon(vector.write, [_record("m1", "t1", "r1", eye[0])])
            await anyio.lowlevel.checkpoint()  # the first upsert is under way (waiting for its connection)
            tg.start_soon(vector.write, [_record("m1", "t1", "r1", eye[1])])
        stored = await _sql(pg_dsn, lambda c: c.fetchval("SELECT embedding::text FROM memory_messages_8"))
        assert stored == "[0,1,0,0,0,0,0,0]"

    async def test_writes_clear_the_message_stores_pending_marks(self, opened: _Opened) -> None:
        records = opened.store.vector_records()
        await records.add_pending([PendingVector(message_id=m, thread_id="t1", resource_id="r1") for m in ("a", "b")],
                                  "down")
        assert await opened.vector.pending_count() == 2
        await opened.vector.write([_record("a", "t1", "r1", _vectors(1)[0])], staged=False)
        assert [p.message_id for p in await opened.vector.take_pending(10)] == ["b"]
        await opened.vector.delete_messages(["b"])
        assert await opened.vector.pending_count() == 0

    async def test_on_the_message_stores_database_marks_go_in_the_upserts_statement(self, pg_dsn: str) -> None:
        async with PostgresStore(pg_dsn) as store:
            vector = PgVectorStore(pg_dsn)
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                await store.vector_records().add_pending([PendingVector(message_id="a", thread_id="t1",
                                                                        resource_id="r1")], "down")
                cleared: list[Any] = []
                records = store.vector_records()
                vector._records = records
                original = records.clear_pending

                async def spy(ids: Any) -> None:
                    cleared.append(ids)
                    await original(ids)

                records.clear_pending = spy  # type: ignore[method-assign]
                await vector.write([_record("a", "t1", "r1", _vectors(1)[0])], staged=False)
                assert cleared == [] and await vector.pending_count() == 0
            finally:
                await vector.close()

    async def test_deletes_and_moves_reach_every_dimension(self, opened: _Opened, pg_dsn: str) -> None:
        await opened.vector.write([_record("a", "t1", "r1", _vectors(1)[0]), _record("b", "t2", "r1", _vectors(1)[0])],
                                  staged=False)
        await _sql(pg_dsn, lambda c: c.execute(  # vectors of another embedder's dimension (another index)
            "CREATE TABLE memory_messages_3 (id SERIAL PRIMARY KEY, vector_id TEXT NOT NULL, embedding vector(3), "
            "metadata JSONB DEFAULT '{}'::jsonb, namespace VARCHAR(255) NOT NULL DEFAULT 'default'); "
            "INSERT INTO memory_messages_3 (vector_id, embedding, metadata) VALUES "
            "('a', '[1,0,0]', '{\"message_id\": \"a\", \"thread_id\": \"t1\", \"resource_id\": \"r1\"}'), "
            "('b', '[1,0,0]', '{\"message_id\": \"b\", \"thread_id\": \"t2\", \"resource_id\": \"r1\"}')"))
        await opened.vector.move_thread("t2", "r9")
        await opened.vector.delete_messages(["a"])
        for table in ("memory_messages_8", "memory_messages_3"):
            rows = await _sql(pg_dsn, lambda c, t=table: c.fetch(  # type: ignore[misc]
                f"SELECT metadata->>'message_id', metadata->>'resource_id' FROM {t}"))
            assert [tuple(r) for r in rows] == [("b", "r9")], table
        await opened.vector.delete_thread("t2")
        assert await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT (SELECT count(*) FROM memory_messages_8) + (SELECT count(*) FROM memory_messages_3)")) == 0

    async def test_copies_take_the_new_ids_and_scope(self, opened: _Opened, pg_dsn: str) -> None:
        rows = _vectors(3)
        await opened.vector.write([_record("a", "t1", "r1", rows[0], "a#0"), _record("a", "t1", "r1", rows[1], "a#1"),
                                   _record("b", "t1", "r1", rows[2])], staged=False)
        await opened.vector.copy_messages({"a": "a2", "b": "b2"}, thread_id="t9", resource_id="r9")
        copied = await _sql(pg_dsn, lambda c: c.fetch(
            "SELECT vector_id, metadata->>'message_id', metadata->>'thread_id', metadata->>'resource_id' "
            "FROM memory_messages_8 WHERE metadata->>'thread_id' = 't9' ORDER BY vector_id"))
        assert [tuple(r) for r in copied] == [("a2#0", "a2", "t9", "r9"), ("a2#1", "a2", "t9", "r9"),
                                              ("b2", "b2", "t9", "r9")]
        hits = await opened.vector.query(rows[2], top_k=1, resource_id="r9", thread_id=None)
        assert [h.message_id for h in hits] == ["b2"]


class TestQueries:
    async def _fill(self, opened: _Opened, n: int, scopes: Callable[[int], tuple[str, str]],
                    seed: int = 3) -> tuple[np.ndarray[Any, Any], list[tuple[str, str]]]:
        rows = _vectors(n, seed)
        owners = [scopes(i) for i in range(n)]
        await opened.vector.write([_record(f"m{i}", owners[i][0], owners[i][1], rows[i]) for i in range(n)],
                                  staged=False)
        await _sql(opened.vector.dsn, lambda c: c.execute("ANALYZE memory_messages_8"))
        return rows, owners

    @pytest.mark.parametrize("exact_limit", [pytest.param(4096, id="exact"), pytest.param(0, id="hnsw")])
    async def test_a_rare_resource_still_gets_k_hits(self, pg_dsn: str, tmp_path: Path, exact_limit: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """A resource holding 0.5 % of the rows, which a post-filtered HNSW scan leaves short."""
        monkeypatch.setattr(_pgvector_query, "MAX_SCAN_TUPLES", 200)  # give up early, as on a huge table
        if exact_limit == 0:  # make the planner order by the HNSW index (it rightly prefers the btree or a scan)
            database = pg_dsn.rsplit("/", 1)[1]
            await _sql(pg_dsn, lambda c: c.execute(f'ALTER DATABASE "{database}" SET enable_seqscan = off'))
            await _sql(pg_dsn, lambda c: c.execute(f'ALTER DATABASE "{database}" SET enable_bitmapscan = off'))
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=exact_limit, build_hnsw="at_start")
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                if exact_limit == 0:
                    await _sql(pg_dsn, lambda c: c.execute('DROP INDEX "memory_messages_8_md_5a823b81_idx"'))
                rows, owners = await self._fill(_Opened(vector, store), 2000,
                                                lambda i: (f"t{i % 40}", "rare" if i % 200 == 7 else "big"))
                members = [i for i, o in enumerate(owners) if o[1] == "rare"]
                for q in _vectors(10, seed=9):
                    before = vector.statistics().ann_queries
                    hits = await vector.query(q, top_k=10, resource_id="rare", thread_id=None)
                    assert len(hits) == 10 and {h.resource_id for h in hits} == {"rare"}
                    true = dict(exact_top_k(q, rows[members], [f"m{i}" for i in members], len(members)))
                    assert [h.score for h in hits] == pytest.approx([true[h.message_id] for h in hits], abs=1e-5)
                    if vector.statistics().ann_queries == before:  # answered exactly: the exact top 10
                        assert [h.message_id for h in hits] == list(true)[:10]
                stats = vector.statistics()
                if exact_limit == 0:  # the scans that came back short (most, at 200 tuples) were answered exactly
                    assert vector.fallbacks >= 1 and stats.ann_queries + vector.fallbacks == 10
                else:
                    assert (vector.fallbacks, stats.ann_queries, stats.brute_force_queries) == (0, 0, 10)
            finally:
                await vector.close()

    async def test_a_large_resource_is_asked_of_the_hnsw_index(self, opened: _Opened) -> None:
        opened.vector._search._exact_limit = 100  # type: ignore[union-attr]
        rows, owners = await self._fill(opened, 3000, lambda i: (f"t{i % 30}", f"r{i % 3}"))
        found = total = 0
        for q in _vectors(20, seed=11):
            hits = await opened.vector.query(q, top_k=10, resource_id="r1", thread_id=None)
            members = [i for i, o in enumerate(owners) if o[1] == "r1"]
            expected = {e[0] for e in exact_top_k(q, rows[members], [f"m{i}" for i in members], 10)}
            assert len(hits) == 10 and {h.resource_id for h in hits} == {"r1"}
            found += len(expected & {h.message_id for h in hits})
            total += 10
        stats = opened.vector.statistics()
        assert stats.ann_queries == 20 and opened.vector.fallbacks == 0
        assert found / total >= 0.95

    async def test_threads_are_exact_and_the_thread_of_a_resource_is_both(self, opened: _Opened) -> None:
        rows, owners = await self._fill(opened, 600, lambda i: (f"t{i % 6}", f"r{i % 2}"))
        q = _vectors(1, seed=5)[0]
        members = [i for i, o in enumerate(owners) if o[0] == "t3"]
        hits = await opened.vector.query(q, top_k=7, resource_id=None, thread_id="t3")
        assert [h.message_id for h in hits] == [e[0] for e in exact_top_k(q, rows[members],
                                                                            [f"m{i}" for i in members], 7)]
        assert await opened.vector.query(q, top_k=7, resource_id="r0", thread_id="t3") == []  # t3 is r1's
        assert len(await opened.vector.query(q, top_k=7, resource_id="r1", thread_id="t3")) == 7

    async def test_chunks_never_crowd_out_messages(self, opened: _Opened) -> None:
        base = _vectors(1, seed=2)[0]
        near = [_record("big", "t1", "r1", base + 0.001 * i, f"big#{i}") for i in range(30)]  # 30 chunks, one message
        far = [_record(f"m{i}", "t1", "r1", v) for i, v in enumerate(_vectors(5, seed=8))]
        await opened.vector.write(near + far, staged=False)
        for scope in ({"resource_id": "r1", "thread_id": None}, {"resource_id": None, "thread_id": "t1"}):
            hits = await opened.vector.query(base, top_k=4, **scope)
            assert hits[0].message_id == "big" and len({h.message_id for h in hits}) == len(hits) == 4

    async def test_ef_search_and_the_iterative_scan_are_set_for_the_transaction_only(
            self, opened: _Opened, monkeypatch: pytest.MonkeyPatch) -> None:
        vector = opened.vector
        vector._search._exact_limit = 0  # type: ignore[union-attr]
        vector._search._ef_search = 77  # type: ignore[union-attr]
        await self._fill(opened, 50, lambda i: ("t1", "r1"))
        statements: list[str] = []
        settings: list[Any] = []
        read = vector._read

        async def recording(fn: Callable[[Any], Awaitable[Any]], doing: str) -> Any:
            async def wrapped(conn: Any) -> Any:
                class Recorder:
                    async def execute(self, sql: str, *args: Any) -> Any:
                        statements.append(sql)
                        return await conn.execute(sql, *args)

                    async def fetch(self, sql: str, *args: Any) -> Any:
                        settings.append(await conn.fetchval("SELECT current_setting('hnsw.ef_search')"))
                        return await conn.fetch(sql, *args)

                result = await fn(Recorder())
                settings.append(await conn.fetchval("SELECT current_setting('hnsw.ef_search')"))  # after COMMIT
                return result

            return await read(wrapped, doing)

        monkeypatch.setattr(vector, "_read", recording)
        hits = await vector.query(_vectors(1)[0], top_k=5, resource_id="r1", thread_id=None)
        assert len(hits) == 5 and vector.statistics().ann_queries == 1
        assert any("SET LOCAL hnsw.ef_search = 77" in s and "hnsw.iterative_scan = relaxed_order" in s
                   for s in statements)
        # the bounded exact read first (pgvector's default), then the HNSW read inside its transaction, then after it
        assert settings == ["40", "40", "77", "40"]


class TestIndexConfig:
    """``semanticRecall.indexConfig`` as Mastra writes it shapes the pgvector index (read back from ``pg_indexes``)."""

    @pytest.mark.parametrize(("config", "expected"), [
        pytest.param({"type": "hnsw", "metric": "dotproduct", "hnsw": {"m": 16, "efConstruction": 64}},
                     "USING hnsw (embedding vector_ip_ops) WITH (m='16', ef_construction='64')",
                     id="reference-example"),
        pytest.param({"type": "hnsw"}, "USING hnsw (embedding vector_cosine_ops) WITH (m='8', ef_construction='32')",
                     id="hnsw-mastra-defaults"),
        pytest.param({"type": "hnsw", "hnsw": {"m": 12, "efConstruction": 40}},
                     "USING hnsw (embedding vector_cosine_ops) WITH (m='12', ef_construction='40')", id="hnsw"),
        pytest.param({"type": "ivfflat", "metric": "euclidean", "ivf": {"lists": 7}},
                     "USING ivfflat (embedding) WITH (lists='7')", id="ivfflat"),  # vector_l2_ops: the default
        pytest.param({"type": "ivfflat"}, "USING ivfflat (embedding vector_cosine_ops) WITH (lists='100')",
                     id="ivfflat-mastra-lists"),
        pytest.param({"type": "flat"}, None, id="flat"),
    ])
    async def test_the_index_is_built_as_configured(self, pg_dsn: str, config: dict[str, Any],
                                                    expected: str | None) -> None:
        memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw="at_start"),
                        embedder=HashEmbedder(dim=DIM), options={"semanticRecall": {"indexConfig": config}})
        async with memory:
            await memory.create_thread(thread_id="t1", resource_id="r1")
            await memory.save_messages([Message.user(f"note {i}", thread_id="t1", resource_id="r1") for i in range(5)])
            hits = await memory.search_vectors("note 3", top_k=5, resource_id="r1")
            assert len(hits) == 5  # every kind answers in full
        indexes = (await _layout(pg_dsn, "memory_messages_8"))["indexes"]
        assert indexes.get("memory_messages_8_vector_idx") == expected

    async def test_a_changed_index_config_rebuilds_the_index(self, pg_dsn: str) -> None:
        for config, expected in (({"type": "ivfflat", "ivf": {"lists": 5}}, "USING ivfflat"),
                                 ({"type": "hnsw", "hnsw": {"m": 10}}, "USING hnsw"),
                                 ({"type": "flat"}, None)):
            memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw="at_start"),
                            embedder=HashEmbedder(dim=DIM), options={"semanticRecall": {"indexConfig": config}})
            async with memory:
                await memory.create_thread(thread_id=f"t-{config['type']}", resource_id="r1")
                await memory.save_messages([Message.user("hello", thread_id=f"t-{config['type']}", resource_id="r1")])
            found = (await _layout(pg_dsn, "memory_messages_8"))["indexes"].get("memory_messages_8_vector_idx")
            assert (found or "").startswith(expected or "") and (found is None) == (expected is None)

    async def test_an_ivfflat_index_probed_once_never_shortens_a_scoped_answer(
            self, pg_dsn: str, tmp_path: Path) -> None:
        """A resource holding 0.5 % of the rows, asked of an IVFFlat index: the iterative scan and the exact
        completion keep every answer at top_k, whatever the probes."""
        database = pg_dsn.rsplit("/", 1)[1]
        await _sql(pg_dsn, lambda c: c.execute(  # make the planner order by the vector index
            f'ALTER DATABASE "{database}" SET enable_seqscan = off; '
            f'ALTER DATABASE "{database}" SET enable_bitmapscan = off'))
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=0, build_hnsw="when_needed", index_type="ivfflat", lists=16)
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                await _sql(pg_dsn, lambda c: c.execute('DROP INDEX "memory_messages_8_md_5a823b81_idx"'))
                opened = _Opened(vector, store)
                rows, owners = await TestQueries()._fill(opened, 4000,
                                                         lambda i: (f"t{i % 40}", "rare" if i % 200 == 7 else "big"))
                await vector.query(_vectors(1, seed=3)[0], top_k=10, resource_id="big", thread_id=None)
                assert await vector.wait_for_hnsw()  # built when needed, from the rows: its lists are its own
                assert vector._search is not None and vector._search.probes == 4  # round(sqrt(16))
                members = [i for i, o in enumerate(owners) if o[1] == "rare"]
                for q in _vectors(10, seed=9):
                    hits = await vector.query(q, top_k=10, resource_id="rare", thread_id=None)
                    assert len(hits) == 10 and {h.resource_id for h in hits} == {"rare"}
                    true = dict(exact_top_k(q, rows[members], [f"m{i}" for i in members], len(members)))
                    assert [h.score for h in hits] == pytest.approx([true[h.message_id] for h in hits], abs=1e-5)
                assert vector.statistics().ann_queries + vector.fallbacks >= 10
            finally:
                await vector.close()
        definition = (await _layout(pg_dsn, "memory_messages_8"))["indexes"]["memory_messages_8_vector_idx"]
        assert definition == "USING ivfflat (embedding vector_cosine_ops) WITH (lists='16')"

    def test_index_config_and_store_options_agree_or_are_refused(self, pg_dsn: str) -> None:
        with pytest.raises(ConfigError, match="set it in one place"):
            Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, index_type="flat"),
                   embedder=HashEmbedder(dim=DIM), options={"semanticRecall": {"indexConfig": {"type": "ivfflat"}}})
        with pytest.raises(ConfigError, match="set it in one place"):
            Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, lists=9),
                   embedder=HashEmbedder(dim=DIM),
                   options={"semanticRecall": {"indexConfig": {"type": "ivfflat", "ivf": {"lists": 8}}}})
        for config, field in (({"type": "annoy"}, "type"), ({"hnsw": {"m": 0}}, "hnsw.m"),
                              ({"hnsw": {"ef": 3}}, "hnsw has an unknown key 'ef'"), ({"ivf": {"lists": -2}}, "lists"),
                              ({"m": 20, "hnsw": {"m": 12}}, "disagree")):
            with pytest.raises(ConfigError, match=field):
                Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=HashEmbedder(dim=DIM),
                       options={"semanticRecall": {"indexConfig": config}})


class TestStartAndConfig:
    def test_bad_options_name_the_field(self) -> None:
        dsn = "postgresql://u@localhost/db"
        for kwargs, field in (({"m": 1}, "m"), ({"ef_construction": 0}, "ef_construction"),
                              ({"ef_search": 0}, "ef_search"), ({"exact_limit": -1}, "exact_limit"),
                              ({"metric": "manhattan"}, "metric"), ({"min_size": 3, "max_size": 2}, "min_size"),
                              ({"build_hnsw": "later"}, "build_hnsw"),
                              ({"statement_cache_size": -1}, "statement_cache_size")):
            with pytest.raises(ConfigError, match=field):
                PgVectorStore(dsn, **kwargs)
        with pytest.raises(ConfigError, match="dsn"):
            PgVectorStore("sqlite:///x.db")
        assert "secret" not in repr(PgVectorStore("postgresql://u:secret@localhost/db"))

    def test_missing_driver_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "asyncpg", None)
        with pytest.raises(ConfigError, match=r"pip install 'threadmind\[postgres\]'"):
            PgVectorStore("postgresql://u@localhost/db")

    def test_it_is_a_vector_store(self) -> None:
        assert isinstance(PgVectorStore("postgresql://u@localhost/db"), VectorStore)

    async def test_a_role_that_may_not_create_the_extension_fails_at_start_naming_it(
            self, pg_cluster: PgCluster, pg_dsn: str) -> None:
        database = pg_dsn.rsplit("/", 1)[1]
        role = f"plain_{database}"
        pg_cluster.sql(f"CREATE ROLE {role} LOGIN; GRANT ALL ON SCHEMA public TO {role}", database)
        dsn = pg_dsn.replace("postgres@", f"{role}@", 1)
        memory = Memory(storage=PostgresStore(dsn), vector=PgVectorStore(dsn), embedder=HashEmbedder(dim=DIM),
                        options={"semanticRecall": True})
        try:
            with pytest.raises(ConfigError, match="extension `vector`") as info:
                await memory.start()
            assert info.value.code == "THREADMIND_PGVECTOR_EXTENSION" and "42501" in info.value.message
            await memory.aclose()
            pg_cluster.sql("CREATE EXTENSION vector", database)  # a superuser installs it once: the role works
            async with Memory(storage=PostgresStore(dsn), vector=PgVectorStore(dsn), embedder=HashEmbedder(dim=DIM),
                              options={"semanticRecall": {"scope": "resource"}}) as again:
                await again.create_thread(thread_id="t1", resource_id="r1")
                await again.save_messages([Message.user("alpine lakes", thread_id="t1", resource_id="r1")])
                index = actor_system(again).index
                assert index is not None
                assert [h.thread_id for h in await index.query("alpine lakes", top_k=1, resource_id="r1")] == ["t1"]
        finally:
            pg_cluster.sql(f"DROP OWNED BY {role}", database)
            pg_cluster.drop_database(database)
            pg_cluster.sql(f"DROP ROLE {role}")
            pg_cluster.create_database(database)  # for the fixture's own cleanup

    async def test_an_extension_in_another_schema_works(self, pg_dsn: str, tmp_path: Path) -> None:
        await _sql(pg_dsn, lambda c: c.execute("CREATE SCHEMA ext; CREATE EXTENSION vector SCHEMA ext"))
        async with SQLiteStore(tmp_path / "m.db") as store:
            vector = PgVectorStore(pg_dsn, exact_limit=0, build_hnsw="at_start")
            await vector.open(store, owner=object())
            try:
                await vector.use_index("memory_messages_8", DIM)
                rows = _vectors(20)
                await vector.write([_record(f"m{i}", "t1", "r1", rows[i]) for i in range(20)], staged=False)
                for scope in ({"resource_id": "r1", "thread_id": None}, {"resource_id": None, "thread_id": "t1"}):
                    hits = await vector.query(rows[4], top_k=3, **scope)
                    assert hits[0].message_id == "m4" and len(hits) == 3
            finally:
                await vector.close()
        layout = await _layout(pg_dsn, "memory_messages_8")
        assert layout["indexes"]["memory_messages_8_vector_idx"].startswith(
            "USING hnsw (embedding ext.vector_cosine_ops)")

    async def test_behind_pgbouncer_in_transaction_mode(self, pgbouncer_dsn: str) -> None:
        memory = Memory(storage=PostgresStore(pgbouncer_dsn, statement_cache_size=0),
                        vector=PgVectorStore(pgbouncer_dsn, statement_cache_size=0, exact_limit=0,
                                             build_hnsw="at_start"),
                        embedder=HashEmbedder(dim=32), options={"semanticRecall": {"scope": "resource", "topK": 2}})
        rng = random.Random(4)
        async with memory:
            await memory.create_thread(thread_id="t1", resource_id="r1")
            texts = [f"note {i} about the {rng.choice(['harbour', 'glacier', 'orchard'])} {i}" for i in range(30)]
            await memory.save_messages([Message.user(t, id=f"m{i}", thread_id="t1", resource_id="r1")
                                        for i, t in enumerate(texts)])
            index = actor_system(memory).index
            assert index is not None
            for _ in range(5):  # every query's settings stay in its own transaction, whichever backend serves it
                hits = await index.query(texts[7], top_k=2, resource_id="r1")
                assert hits[0].message_id == "m7" and len(hits) == 2
            assert index.statistics().ann_queries == 5


async def test_on_the_messages_database_rows_take_the_resource_their_thread_has_when_written(pg_dsn: str) -> None:
    """Another process may move a thread between the moment vectors are made and the moment they are written, or
    move it again while a move of its own is on its way: the rows end in the resource the thread's row has."""
    from threadmind.codecs import Thread

    async with PostgresStore(pg_dsn) as store:
        vector = PgVectorStore(pg_dsn)
        await vector.open(store, owner=object())
        try:
            await vector.use_index(f"memory_messages_{DIM}", DIM)
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            await store.save_messages("t1", [Message.user("hello", id="m1", thread_id="t1", resource_id="r1")])
            await store.update_thread_resource_id("t1", "r2")  # by another process, after m1's vector was made
            unit = np.zeros(DIM, dtype=np.float32)
            unit[0] = 1.0
            embedding = vector.prepare(unit[None, :])[0].tobytes()
            stale = VectorRecord(vector_id="m1", message_id="m1", thread_id="t1", resource_id="r1", role="user",
                                 created_at="2025-01-01T00:00:00.000Z", embedding=embedding)
            await vector.write([stale], staged=False)
            found = await vector.query(unit, top_k=1, resource_id="r2", thread_id=None)
            assert [h.message_id for h in found] == ["m1"]
            assert await vector.query(unit, top_k=1, resource_id="r1", thread_id=None) == []
            await vector.move_thread("t1", "r3")  # a move whose store move lost to r2's
            assert [h.resource_id for h in await vector.query(unit, top_k=1, resource_id="r2", thread_id=None)] == \
                ["r2"]
            gone = msgspec.structs.replace(stale, vector_id="m9", message_id="m9")  # deleted by another meanwhile
            await vector.write([gone], staged=False)
            rows = await _sql(pg_dsn, lambda conn: conn.fetchval(
                f"SELECT count(*) FROM memory_messages_{DIM} WHERE metadata->>'message_id' = 'm9'"))
            assert rows == 0
            assert {h.message_id for h in await vector.query(unit, top_k=5, resource_id="r2", thread_id=None)} == \
                {"m1"}
        finally:
            await vector.close()
