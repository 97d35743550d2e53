"""PostgresStore on a real PostgreSQL 18: Mastra's schema, concurrent opening, PgBouncer-safe statements, errors,
several writers at once, the pending-vector marks, and the vector and observational-memory records."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import numpy as np
import pytest

try:
    import asyncpg
except ImportError:  # the pg_cluster fixture skips these tests (fails them in CI) with the install hint
    asyncpg = None

from threadmind.codecs import Message, Thread
from threadmind.errors import ConfigError, ResourceMismatch, StorageError, ValidationError
from threadmind.stores import PostgresStore
from threadmind.stores._om import OMRecord
from threadmind.stores._postgres import _lease_rows as _postgres_leases
from threadmind.stores._postgres._pool import IDLE_IN_TRANSACTION, transaction
from threadmind.stores._postgres._schema import SCHEMA_VERSION
from threadmind.stores._protocol import STORE_METHODS, Include, MessageQuery, Store
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vector_records import PendingVector, SQLiteVectorRecords, VectorRecord, VectorRecords

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

# Mastra's four tables as @mastra/pg 1.27.1 creates them (read from a database its init() set up).
MASTRA_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "mastra_threads": [
        ("id", "text", "NO"), ("resourceId", "text", "NO"), ("title", "text", "NO"), ("metadata", "jsonb", "YES"),
        ("createdAt", "timestamp without time zone", "NO"), ("updatedAt", "timestamp without time zone", "NO"),
        ("createdAtZ", "timestamp with time zone", "YES"), ("updatedAtZ", "timestamp with time zone", "YES"),
    ],
    "mastra_messages": [
        ("id", "text", "NO"), ("thread_id", "text", "NO"), ("content", "text", "NO"), ("role", "text", "NO"),
        ("type", "text", "NO"), ("createdAt", "timestamp without time zone", "NO"), ("resourceId", "text", "YES"),
        ("createdAtZ", "timestamp with time zone", "YES"),
    ],
    "mastra_resources": [
        ("id", "text", "NO"), ("workingMemory", "text", "YES"), ("metadata", "jsonb", "YES"),
        ("createdAt", "timestamp without time zone", "NO"), ("updatedAt", "timestamp without time zone", "NO"),
        ("createdAtZ", "timestamp with time zone", "YES"), ("updatedAtZ", "timestamp with time zone", "YES"),
    ],
}
MASTRA_OM_COLUMNS = (
    'id text NO, lookupKey text NO, scope text NO, resourceId text YES, threadId text YES, activeObservations text '
    'NO, activeObservationsPendingUpdate text YES, originType text NO, config text NO, generationCount integer NO, '
    'lastObservedAt timestamp YES, lastReflectionAt timestamp YES, pendingMessageTokens integer NO, '
    'totalTokensObserved integer NO, observationTokenCount integer NO, isObserving boolean NO, isReflecting boolean '
    'NO, observedMessageIds jsonb YES, observedTimezone text YES, bufferedObservations text YES, '
    'bufferedObservationTokens integer YES, bufferedMessageIds jsonb YES, bufferedReflection text YES, '
    'bufferedReflectionTokens integer YES, bufferedReflectionInputTokens integer YES, reflectedObservationLineCount '
    'integer YES, bufferedObservationChunks jsonb YES, isBufferingObservation boolean NO, isBufferingReflection '
    'boolean NO, lastBufferedAtTokens integer NO, lastBufferedAtTime timestamp YES, metadata jsonb YES, createdAt '
    'timestamp NO, updatedAt timestamp NO, lastObservedAtZ timestamptz YES, lastReflectionAtZ timestamptz YES, '
    'lastBufferedAtTimeZ timestamptz YES, createdAtZ timestamptz YES, updatedAtZ timestamptz YES'
)
MASTRA_INDEXES = {
    "idx_om_lookup_key": 'ON public.mastra_observational_memory USING btree ("lookupKey")',
    "mastra_messages_pkey": "ON public.mastra_messages USING btree (id)",
    "mastra_messages_thread_id_createdat_idx": 'ON public.mastra_messages USING btree (thread_id, "createdAt" DESC)',
    "mastra_observational_memory_pkey": "ON public.mastra_observational_memory USING btree (id)",
    "mastra_resources_pkey": "ON public.mastra_resources USING btree (id)",
    "mastra_threads_pkey": "ON public.mastra_threads USING btree (id)",
    "mastra_threads_resourceid_createdat_idx": 'ON public.mastra_threads USING btree ("resourceId", "createdAt" DESC)',
}


def msg(i: int, thread: str = "t1", resource: str = "r1", *, at: datetime | None = None, **fields: Any) -> Message:
    return Message.user(f"message {i}", id=f"{thread}-m{i:04d}", thread_id=thread, resource_id=resource,
                        created_at=at or BASE + timedelta(seconds=i), **fields)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_dsn, max_size=4) as s:
        yield s


async def _sql(dsn: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await fn(conn)
    finally:
        await conn.close()


class TestSchema:
    async def test_mastras_tables_exactly(self, store: PostgresStore, pg_dsn: str) -> None:
        columns = await _sql(pg_dsn, lambda c: c.fetch(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name LIKE 'mastra%' ORDER BY table_name, ordinal_position"))
        by_table: dict[str, list[tuple[str, str, str]]] = {}
        for row in columns:
            by_table.setdefault(row[0], []).append((row[1], row[2], row[3]))
            assert (row[4] == "now()") == row[1].endswith("Z"), row  # only the …Z twins have a default
        for table, expected in MASTRA_COLUMNS.items():
            assert by_table.pop(table) == expected, table
        short = {"timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz"}
        om = ", ".join(f"{n} {short.get(t, t)} {null}" for n, t, null in by_table.pop("mastra_observational_memory"))
        assert om == MASTRA_OM_COLUMNS
        assert by_table == {}
        indexes = await _sql(pg_dsn, lambda c: c.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'mastra%' ORDER BY indexname"))
        assert {name: definition[definition.index(" ON ") + 1:] for name, definition in indexes} == MASTRA_INDEXES

    async def test_own_tables_are_prefixed_and_versioned(self, store: PostgresStore, pg_dsn: str) -> None:
        tables = await _sql(pg_dsn, lambda c: c.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"))
        names = [row[0] for row in tables]
        assert all(name.startswith(("mastra_", "threadmind_")) for name in names), names
        assert {"threadmind_meta", "threadmind_message_seq", "threadmind_thread_seq", "threadmind_vectors",
                "threadmind_vector_tombstones", "threadmind_vector_seq", "threadmind_vector_pending"} <= set(names)
        version = await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT value FROM threadmind_meta WHERE key = 'schema_version'"))
        assert version == str(SCHEMA_VERSION)

    async def test_a_newer_schema_is_refused(self, pg_dsn: str) -> None:
        async with PostgresStore(pg_dsn):
            pass
        await _sql(pg_dsn, lambda c: c.execute("UPDATE threadmind_meta SET value = '99' WHERE key = 'schema_version'"))
        with pytest.raises(StorageError, match="schema_version 99"):
            await PostgresStore(pg_dsn).open()

    async def test_a_version_2_database_is_upgraded_keeping_its_vectors(self, pg_dsn: str) -> None:
        async with PostgresStore(pg_dsn) as store:
            await store.vector_records().upsert("idx", [_vector("a", "a"), _vector("b", "b", "t2", "r2")])

        async def downgrade(conn: Any) -> None:  # the tables as version 2 made them
            await conn.execute("DROP TABLE threadmind_vector_pruned; DROP INDEX threadmind_vectors_resource; "
                               "DROP INDEX threadmind_vectors_pos; ALTER TABLE threadmind_vectors DROP COLUMN pos; "
                               "ALTER TABLE threadmind_leases DROP COLUMN presence; "
                               "DROP SEQUENCE threadmind_presence_keys; "
                               "UPDATE threadmind_meta SET value = '2' WHERE key = 'schema_version'")

        await _sql(pg_dsn, downgrade)
        async with PostgresStore(pg_dsn) as store:
            records = store.vector_records()
            page, after = await records.load_page("idx", 0, 10)
            assert sorted(r.vector_id for r in page) == ["a", "b"] and after >= 2
            assert [r.vector_id for r in await records.scope_records("idx", resource_id="r2", thread_id=None)] == ["b"]
            await records.prune_tombstones("idx", 1)
            assert (await records.sequence("idx"))[1] == 1
            lease = await store.acquire_lease("thread:t1", owner="o", ttl=5, wait=False)  # names its presence
            await store.release_lease(lease)
        version = await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT value FROM threadmind_meta WHERE key = 'schema_version'"))
        assert version == str(SCHEMA_VERSION) == "6"

    async def test_a_version_5_database_gets_the_include_windows_function(self, pg_dsn: str) -> None:
        """A database threadmind 5 made (no ``threadmind_include_windows``) is upgraded at open, and its windows are
        read through the function (with and without a resource)."""
        async with PostgresStore(pg_dsn) as store:
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            await store.save_messages("t1", [Message.user(f"m{i}", id=f"m{i}", thread_id="t1", resource_id="r1",
                                                          created_at=datetime(2025, 1, 1, tzinfo=UTC)
                                                          + timedelta(seconds=i // 2)) for i in range(9)])
        await _sql(pg_dsn, lambda c: c.execute(
            "DROP FUNCTION threadmind_include_windows; "
            "UPDATE threadmind_meta SET value = '5' WHERE key = 'schema_version'"))
        async with PostgresStore(pg_dsn) as store:
            for resource in ("r1", None):
                window = Include(id="m4", with_previous_messages=2, with_next_messages=3)
                page = await store.list_messages(MessageQuery(thread_id="t1", resource_id=resource, per_page=0,
                                                              include=[window]))
                assert [m.id for m in page.messages] == ["m2", "m3", "m4", "m5", "m6", "m7"]
        assert await _sql(pg_dsn, lambda c: c.fetchval(
            "SELECT value FROM threadmind_meta WHERE key = 'schema_version'")) == str(SCHEMA_VERSION)

    async def test_many_stores_open_an_empty_database_at_once(self, pg_dsn: str) -> None:
        stores = [PostgresStore(pg_dsn, min_size=1, max_size=1) for _ in range(8)]
        try:
            async with anyio.create_task_group() as tg:
                for s in stores:
                    tg.start_soon(s.open)
            await stores[0].create_thread(Thread(id="t", resource_id="r"))
            assert [(await s.get_thread("t")) is not None for s in stores] == [True] * 8
        finally:
            for s in stores:
                await s.aclose()
        rows = await _sql(pg_dsn, lambda c: c.fetch("SELECT key, value FROM threadmind_meta"))
        assert [tuple(r) for r in rows] == [("schema_version", str(SCHEMA_VERSION))]

    def test_processes_open_an_empty_database_at_once(self, pg_dsn: str) -> None:
        script = ("import anyio, sys\nfrom threadmind.stores import PostgresStore\n"
                  "async def main():\n    async with PostgresStore(sys.argv[1]) as s:\n"
                  "        print((await s.stats())['threads'])\nanyio.run(main)\n")
        procs = [subprocess.Popen([sys.executable, "-c", script, pg_dsn], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [proc.communicate(timeout=60) for proc in procs]
        assert [proc.returncode for proc in procs] == [0] * 4, [err for _, err in results]
        assert [out.strip() for out, _ in results] == ["0"] * 4


class TestPgBouncerSafety:
    @pytest.mark.parametrize("cache", [0, None])
    async def test_no_session_state_is_left_behind(self, pg_dsn: str, cache: int | None) -> None:
        async with PostgresStore(pg_dsn, min_size=1, max_size=1, statement_cache_size=cache) as s:
            await s.create_thread(Thread(id="t1", resource_id="r1"))
            for round_ in range(3):
                await s.save_messages("t1", [msg(round_ * 2), msg(round_ * 2 + 1)], mark_pending=True)
                page = await s.list_messages(MessageQuery(thread_id="t1", per_page=2, direction="DESC"))
                assert [m.id for m in page.messages] == [f"t1-m{round_ * 2 + 1:04d}", f"t1-m{round_ * 2:04d}"]
                await s.update_resource("r1", metadata={f"k{round_}": round_})
                await s.get_thread_with_tail("t1", 3)
            prepared = await s.run_read(lambda c: c.fetchval("SELECT count(*) FROM pg_prepared_statements"), "t")
            advisory = await s.run_read(lambda c: c.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"), "t")
            assert advisory == 0
            if cache == 0:
                assert prepared == 0  # no named statements: every statement is parsed unnamed, as PgBouncer needs
            else:
                assert prepared > 0
            assert (await s.get_resource("r1")).metadata == {"k0": 0, "k1": 1, "k2": 2}  # type: ignore[union-attr]


class TestBehindPgBouncer:
    """Transaction pooling with two server connections: client sessions share backends between statements."""

    async def test_several_stores_and_the_side_tables_work(self, pgbouncer_dsn: str, tmp_path: Path) -> None:
        async with PostgresStore(pgbouncer_dsn, statement_cache_size=0) as a, \
                PostgresStore(pgbouncer_dsn, statement_cache_size=0) as b:
            await a.create_thread(Thread(id="t1", resource_id="r1"))
            async with anyio.create_task_group() as tg:
                for i in range(30):
                    s = a if i % 2 else b
                    tg.start_soon(lambda s=s, i=i: s.save_messages("t1", [msg(i, at=BASE)], mark_pending=True))  # type: ignore[misc]
                    tg.start_soon(lambda s=s, i=i: s.update_resource("r1", metadata={f"k{i}": i}))  # type: ignore[misc]
            page = await b.list_messages(MessageQuery(thread_id="t1", per_page=False))
            assert len(page.messages) == 30
            assert [m.id for m in (await a.list_messages(MessageQuery(thread_id="t1", per_page=False))).messages] \
                == [m.id for m in page.messages]
            assert (await a.get_resource("r1")).metadata == {f"k{i}": i for i in range(30)}  # type: ignore[union-attr]
            assert await a.vector_records().pending_count() == 30
            async with SQLiteStore(tmp_path / "v.db") as lite:
                expected = await _vector_scenario(SQLiteVectorRecords(lite))
            await a.vector_records().clear_pending([m.id for m in page.messages])
            assert await _vector_scenario(b.vector_records()) == expected


class TestErrors:
    def test_bad_options(self) -> None:
        for kwargs, field in (({"min_size": -1}, "min_size"), ({"max_size": 0}, "max_size"),
                              ({"min_size": 5, "max_size": 2}, "min_size"), ({"statement_cache_size": -1},
                                                                               "statement_cache_size")):
            with pytest.raises(ConfigError, match=field):
                PostgresStore("postgresql://u@localhost/db", **kwargs)
        with pytest.raises(ConfigError, match="dsn"):
            PostgresStore("sqlite:///x.db")

    def test_missing_driver_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "asyncpg", None)
        with pytest.raises(ConfigError, match=r"pip install 'threadmind\[postgres\]'"):
            PostgresStore("postgresql://u@localhost/db")

    def test_importing_threadmind_does_not_import_asyncpg(self) -> None:
        done = subprocess.run([sys.executable, "-c", "import sys, threadmind, threadmind.stores; "
                               "print('asyncpg' in sys.modules)"], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "False"

    async def test_unreachable_server(self, pg_cluster: Any) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        s = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/nope")
        with pytest.raises(StorageError) as info:
            await s.get_thread("t")
        assert isinstance(info.value.__cause__, OSError)
        await s.aclose()

    async def test_driver_errors_become_storage_errors(self, store: PostgresStore, pg_dsn: str) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await _sql(pg_dsn, lambda c: c.execute("ALTER TABLE threadmind_message_seq RENAME TO gone"))
        with pytest.raises(StorageError, match="42P01") as info:
            await store.list_messages(MessageQuery(thread_id="t1"))
        assert isinstance(info.value.__cause__, asyncpg.UndefinedTableError)
        with pytest.raises(StorageError):
            await store.save_messages("t1", [msg(1)])

    async def test_text_postgres_cannot_hold_is_refused_naming_the_field(self, store: PostgresStore) -> None:
        with pytest.raises(ValidationError, match="thread.title"):
            await store.create_thread(Thread(id="t1", resource_id="r1", title="a\x00b"))
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        with pytest.raises(ValidationError, match="metadata"):
            await store.update_thread("t1", metadata={"k": "a\x00"})
        assert (await store.update_thread("t1", metadata={"k": "a\\u0000 is text"})).metadata == {
            "k": "a\\u0000 is text"}
        with pytest.raises(ValidationError, match="working_memory"):
            await store.update_resource("r1", working_memory="\x00")

    def test_every_method_takes_the_protocols_parameters(self) -> None:
        for name in STORE_METHODS:
            ours = inspect.signature(getattr(PostgresStore, name)).parameters
            contract = inspect.signature(getattr(Store, name)).parameters
            assert list(ours) == list(contract), name
            assert [p.kind for p in ours.values()] == [p.kind for p in contract.values()], name

    async def test_closed_store(self, pg_dsn: str) -> None:
        s = PostgresStore(pg_dsn)
        await s.open()
        await s.aclose()
        for call in (s.get_thread("t"), s.save_messages("t", []), s.open()):
            with pytest.raises(StorageError, match="closed"):
                await call

    async def test_a_read_cancelled_mid_statement_leaves_every_connection_usable(self, pg_dsn: str) -> None:
        """A connection whose operation ended cleanly is kept for the next one; one whose read was cancelled goes
        back through asyncpg (which cancels the statement), so no later operation meets it mid-statement."""
        async with PostgresStore(pg_dsn, min_size=1, max_size=2) as store:
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            for _ in range(3):
                with anyio.move_on_after(0.2) as scope:
                    await store.run_read(lambda conn: conn.execute("SELECT pg_sleep(5)"), "sleep")
                assert scope.cancelled_caught
                with anyio.fail_after(2):
                    assert await store.get_thread("t1") is not None
            with anyio.fail_after(5):  # more operations at once than connections: they wait, none hangs
                async with anyio.create_task_group() as tg:
                    for i in range(12):
                        tg.start_soon(store.save_messages, "t1", [msg(i)])
            assert len((await store.list_messages(MessageQuery(thread_id="t1", per_page=False))).messages) == 12

    async def test_reads_and_writes_survive_killed_connections(self, store: PostgresStore, pg_dsn: str) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [msg(1)])
        kill = ("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE datname = "
                "current_database() AND pid <> pg_backend_pid()")
        assert await _sql(pg_dsn, lambda c: c.fetchval(kill)) >= 1
        assert [m.id for m in (await store.list_messages(MessageQuery(thread_id="t1"))).messages] == ["t1-m0001"]
        assert await _sql(pg_dsn, lambda c: c.fetchval(kill)) >= 1
        await store.save_messages("t1", [msg(2)])  # the pool replaced the connection the server closed
        assert len((await store.list_messages(MessageQuery(thread_id="t1"))).messages) == 2


class TestLeaseWakeUps:
    async def test_a_release_wakes_a_waiter_through_listen_notify(self, store: PostgresStore,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        """With polling pushed out to 60 s, only the NOTIFY of the release can wake the waiter in time."""
        monkeypatch.setattr(_postgres_leases, "_FIRST_BACKOFF", 60.0)
        held = await store.acquire_lease("thread:t1", owner="a", ttl=60, wait=False)
        got: list[Any] = []

        async def waiter() -> None:
            got.append(await store.acquire_lease("thread:t1", owner="b", ttl=60, wait=True))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                listening = 0
                while not listening:  # each look is a round trip to the server: no sleep needed
                    listening = await store.run_read(lambda conn: conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"), "probe")
                # The waiter subscribed before its first look; let that look happen (in either order the
                # waiter gets the lease: a release before the look is seen by the look itself).
                await anyio.sleep(0.05)
                await store.release_lease(held)
        assert [lease.owner for lease in got] == ["b"]

    async def test_behind_pgbouncer_waiters_poll(self, pgbouncer_dsn: str) -> None:
        async with PostgresStore(pgbouncer_dsn, statement_cache_size=0) as store:
            held = await store.acquire_lease("thread:t1", owner="a", ttl=60, wait=False)
            got: list[Any] = []

            async def waiter() -> None:
                got.append(await store.acquire_lease("thread:t1", owner="b", ttl=60, wait=True))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    await anyio.sleep(0.05)
                    await store.release_lease(held)
            assert [lease.owner for lease in got] == ["b"]


class TestSeveralWriters:
    async def test_a_client_frozen_inside_a_transaction_is_ended_by_the_server(self, store: PostgresStore) -> None:
        """The store's transactions carry a server-side idle limit, so a frozen client cannot keep row locks."""

        async def inside(conn: Any) -> tuple[str, str]:
            async with transaction(conn):
                return (await conn.fetchval("SHOW idle_in_transaction_session_timeout"),
                        await conn.fetchval("SELECT current_setting('transaction_isolation')"))

        assert await store.run_write(inside, "probe") == (IDLE_IN_TRANSACTION, "read committed")
        outside = await store.run_read(lambda conn: conn.fetchval("SHOW idle_in_transaction_session_timeout"), "probe")
        assert outside == "0"  # transaction-scoped: nothing stays on the (pooled) session

    async def test_concurrent_merges_from_two_stores_lose_nothing(self, pg_dsn: str) -> None:
        async with PostgresStore(pg_dsn) as a, PostgresStore(pg_dsn) as b:
            await a.create_thread(Thread(id="t1", resource_id="r1"))
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    s = a if i % 2 else b
                    tg.start_soon(lambda s=s, i=i: s.update_resource("r1", metadata={f"k{i}": i}))  # type: ignore[misc]
                    tg.start_soon(lambda s=s, i=i: s.update_thread("t1", metadata={f"k{i}": i}))  # type: ignore[misc]
            resource = await a.get_resource("r1")
            thread = await b.get_thread("t1")
        assert resource is not None and resource.metadata == {f"k{i}": i for i in range(40)}
        assert thread is not None and thread.metadata == {f"k{i}": i for i in range(40)}

    async def test_concurrent_saves_to_one_thread_keep_one_order(self, pg_dsn: str) -> None:
        async with PostgresStore(pg_dsn) as a, PostgresStore(pg_dsn) as b:
            await a.create_thread(Thread(id="t1", resource_id="r1"))
            async with anyio.create_task_group() as tg:
                for i in range(60):
                    s = a if i % 2 else b
                    tg.start_soon(lambda s=s, i=i: s.save_messages("t1", [msg(i, at=BASE)]))  # type: ignore[misc]
            one = [m.id for m in (await a.list_messages(MessageQuery(thread_id="t1", per_page=False))).messages]
            other = [m.id for m in (await b.list_messages(MessageQuery(thread_id="t1", per_page=False))).messages]
            assert len(one) == 60 and one == other
            desc = await b.list_messages(MessageQuery(thread_id="t1", per_page=False, direction="DESC"))
            assert [m.id for m in desc.messages] == one[::-1]

    async def test_an_id_claimed_by_another_thread_while_a_save_waits(self, store: PostgresStore,
                                                                      pg_dsn: str) -> None:
        """The save's snapshot misses a claim committed while it waited for the thread lock: the statement
        aborts itself and the re-run refuses the batch with nothing written."""
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.create_thread(Thread(id="t2", resource_id="r1"))
        holder = await asyncpg.connect(pg_dsn)
        outcome: list[BaseException] = []
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("SELECT 1 FROM mastra_threads WHERE id = 't1' FOR UPDATE")

            async def save() -> None:
                try:
                    await store.save_messages("t1", [msg(1), Message.user("x", id="claimed", thread_id="t1",
                                                                          resource_id="r1", created_at=BASE)])
                except BaseException as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(save)
                with anyio.fail_after(10):  # each poll is a round trip to the server: no sleep needed
                    waiting = 0
                    while not waiting:
                        waiting = await holder.fetchval(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND datname = current_database()")
                await holder.execute(
                    "INSERT INTO mastra_messages (id, thread_id, content, role, type, \"createdAt\", \"resourceId\") "
                    "VALUES ('claimed', 't2', '{}', 'user', 'v2', now(), 'r1')")
                await tx.commit()
        finally:
            await holder.close()
        assert len(outcome) == 1 and isinstance(outcome[0], ValidationError) and "claimed" in str(outcome[0])
        assert await store.get_messages_by_id(["t1-m0001"]) == []
        assert [m.thread_id for m in await store.get_messages_by_id(["claimed"])] == ["t2"]


class TestMastraRows:
    async def test_rows_mastra_wrote_sort_by_id_on_ties_and_read_z_first(self, store: PostgresStore,
                                                                         pg_dsn: str) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        plain = datetime(2025, 3, 1, 9, 0)

        async def write(conn: Any) -> None:  # as @mastra/pg writes: no sequence row; one row without its …Z twin
            for mid in ("c", "a", "b"):
                await conn.execute(
                    'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "createdAtZ", '
                    '"resourceId") VALUES ($1, \'t1\', $2, \'user\', \'v2\', $3, $4, \'r1\')',
                    mid, '{"format":2,"parts":[{"type":"text","text":"hi"}]}', plain, plain.replace(tzinfo=UTC))
            await conn.execute(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "createdAtZ", '
                '"resourceId") VALUES (\'z\', \'t1\', \'plain text\', \'user\', \'v2\', $1, NULL, \'r1\')',
                plain - timedelta(minutes=1))

        await _sql(pg_dsn, write)
        await store.save_messages("t1", [Message.user("mine", id="0", thread_id="t1", resource_id="r1",
                                                      created_at=BASE)])
        page = await store.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert [m.id for m in page.messages] == ["z", "a", "b", "c", "0"]  # Mastra's by id, then ours
        assert page.messages[0].created_at == BASE - timedelta(minutes=1) and page.messages[0].text == "plain text"
        assert all(m.created_at.tzinfo is UTC for m in page.messages)


def _vector(vector_id: str, message_id: str, thread_id: str = "t1", resource_id: str = "r1") -> VectorRecord:
    return VectorRecord(vector_id=vector_id, message_id=message_id, thread_id=thread_id, resource_id=resource_id,
                        role="user", created_at="2025-01-01T00:00:00.000Z",
                        embedding=np.arange(4, dtype="<f4").tobytes() + vector_id.encode())


async def _vector_scenario(records: VectorRecords) -> list[Any]:
    """Every VectorRecords operation; the results (sequence numbers included) must not depend on the backend."""
    out: list[Any] = []
    out.append(await records.upsert("idx", [_vector("m1#0", "m1"), _vector("m1#1", "m1"), _vector("m2", "m2"),
                                            _vector("c", "c", "t2"), _vector("m2", "m2")]))
    snapshot = (await records.load("idx"))[2]
    out.append(await records.upsert("idx", [_vector("m1", "m1")], background=True))
    out.append(await records.upsert("other", [_vector("m1", "m1")]))
    out.append(await records.delete_by_message_ids("idx", ["m2"]))
    out.append(await records.move_thread("t2", "r9"))
    loaded, deleted, seq = await records.load("idx", since_seq=snapshot)
    out.append(([(r.vector_id, r.resource_id, r.embedding) for r in sorted(loaded, key=lambda r: r.vector_id)],
                sorted(deleted), seq))
    out.append(sorted(r.vector_id for r in await records.records_for_messages("idx", ["m1", "c", "zz"])))
    out.append(sorted(await records.message_ids_with_vectors("idx")))
    out.append(await records.delete_by_message_ids(None, ["m1"]))
    out.append(sorted(await records.message_ids_with_vectors("other")))
    out.append(await records.delete_by_thread("t2"))
    out.append(sorted((await records.load("idx", since_seq=seq))[1]))
    await records.prune_tombstones("idx", 10**6)
    out.append((await records.load("idx", since_seq=seq))[1])
    stamp = time.time()
    await records.add_pending([PendingVector(message_id="p1", thread_id="t1", resource_id="r1"),
                               PendingVector(message_id="p2", thread_id="t2", resource_id="r1")], "boom")
    await records.add_pending([PendingVector(message_id="p1", thread_id="t1", resource_id="r1")], "again")
    out.append([(p.message_id, p.attempts, p.last_error) for p in await records.take_pending(10, before=stamp)])
    out.append(await records.pending_count())
    await records.move_thread("t2", "r5")
    out.append([(p.message_id, p.resource_id) for p in await records.take_pending(10)])
    await records.upsert("idx", [_vector("p2", "p2", "t2", "r5")])
    await records.clear_pending(["zz"])
    out.append([p.message_id for p in await records.take_pending(10)])
    await records.delete_by_thread("t1")
    out.append(await records.pending_count())
    # the reads a rebuild, a restart and a query from SQL make
    await records.upsert("idx", [_vector(f"s{i}", f"s{i}", f"t{i % 3}", f"r{i % 2}") for i in range(7)])
    out.append(sorted(r.vector_id for r in await records.scope_records("idx", resource_id="r1", thread_id=None)))
    out.append(sorted(r.vector_id for r in await records.scope_records("idx", resource_id=None, thread_id="t2")))
    out.append(sorted(r.vector_id for r in await records.scope_records("idx", resource_id="r0", thread_id="t2")))
    out.append(sorted(r.vector_id for r in await records.scope_records("idx", resource_id=None, thread_id=None)))
    paged: list[list[str]] = []
    after = 0
    while True:
        page, after = await records.load_page("idx", after, 3)
        if not page:
            break
        paged.append([r.vector_id for r in page])
    out.append(paged)
    out.append(await records.size_hint("idx") >= 8)
    since = (await records.sequence("idx"))[0]
    await records.upsert("idx", [_vector("s1", "s1", "t1", "r1")])
    await records.move_thread("t0", "r7")
    await records.delete_by_message_ids("idx", ["s2"])
    changes: list[list[tuple[str, str]]] = []
    position = (since, 0)
    while True:
        page, position = await records.load_changes("idx", since, position, 2)
        if not page:
            break
        changes.append([(r.vector_id, r.resource_id) for r in page])
    out.append(changes)
    current = (await records.sequence("idx"))[0]
    out.append(await records.load_changes("idx", since, (since, 0), 10, until_seq=since + 1) != ([], (since, 0)))
    out.append(sorted(await records.deleted_since("idx", since)))
    out.append((current, await records.sequence("idx")))
    await records.prune_tombstones("other", current - 1)
    await records.prune_tombstones("other", 1)  # never moves back
    out.append(await records.sequence("other"))
    return out


class TestSideTables:
    async def test_vector_records_behave_as_sqlites(self, store: PostgresStore, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "v.db") as lite:
            expected = await _vector_scenario(SQLiteVectorRecords(lite))
        records = store.vector_records()
        assert isinstance(records, VectorRecords)
        assert await _vector_scenario(records) == expected

    async def test_mark_pending_commits_with_the_save(self, store: PostgresStore) -> None:
        records = store.vector_records()
        await records.ensure_tables()
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.create_thread(Thread(id="t2", resource_id="r1"))
        before = time.time() - 1
        await store.save_messages("t1", [msg(1), msg(2)], mark_pending=True)
        await store.save_messages_many({"t2": [msg(1, "t2")]}, mark_pending=True)
        await store.save_messages("t1", [msg(3)])
        with pytest.raises(ResourceMismatch):  # a refused save marks nothing
            await store.save_messages_many({"t1": [msg(4)], "t2": [msg(4, "t2", "other")]}, mark_pending=True)
        assert await records.pending_count(before=before) == 0  # fresh in-flight marks are not failures yet
        marks = await records.take_pending(10)
        assert sorted((p.message_id, p.thread_id, p.attempts) for p in marks) == [
            ("t1-m0001", "t1", 0), ("t1-m0002", "t1", 0), ("t2-m0001", "t2", 0)]
        await records.upsert("idx", [_vector("t1-m0001", "t1-m0001")])  # the vectors arrived: the mark goes
        assert sorted(p.message_id for p in await records.take_pending(10)) == ["t1-m0002", "t2-m0001"]

    async def test_observational_records_behave_as_sqlites(self, store: PostgresStore, tmp_path: Path) -> None:
        async def scenario(records: Any) -> list[Any]:
            made = datetime(2026, 1, 1, 12, 0, 0, 123000, tzinfo=UTC)
            first = OMRecord(id="om-0", lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
                             config={"observation": {"messageTokens": 30}}, created_at=made, updated_at=made)
            second = OMRecord(id="om-1", lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
                              active_observations="- 🟢 likes tea", origin_type="reflection", generation_count=1,
                              last_observed_at=made, last_reflection_at=made, pending_message_tokens=3,
                              total_tokens_observed=40, observation_token_count=12, is_observing=True,
                              observed_message_ids=["m1", "m2"], observed_timezone="Europe/Berlin",
                              metadata={"k": [1, {"x": None}]}, created_at=made + timedelta(seconds=1),
                              updated_at=made + timedelta(seconds=2))
            out: list[Any] = [await records.current("thread:t1")]
            await records.put(first)
            out.append(await records.current("thread:t1"))
            await records.put(second)
            out.append(await records.current("thread:t1"))
            await records.put(msgspec.structs.replace(second, is_observing=False, active_observations="edited"))
            out.append(await records.current("thread:t1"))
            out.append(await records.history("thread:t1"))
            await records.delete("thread:t1")
            out.append((await records.current("thread:t1"), await records.history("thread:t1")))
            return out

        async with SQLiteStore(tmp_path / "om.db") as lite:
            expected = await scenario(lite.observational_records())
        assert await scenario(store.observational_records()) == expected
        assert expected[3].active_observations == "edited" and len(expected[4]) == 2

    async def test_observational_cache_sees_writes_through_another_store_object(self, store: PostgresStore,
                                                                                pg_dsn: str) -> None:
        made = datetime(2026, 1, 1, tzinfo=UTC)
        reader = store.observational_records(ttl=60.0)
        assert await reader.current("thread:t1") is None
        async with PostgresStore(pg_dsn) as other:
            await other.observational_records().put(OMRecord(
                id="om-0", lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
                created_at=made, updated_at=made))
        got = await reader.current("thread:t1")
        assert got is not None and got.id == "om-0"


@pytest.mark.slow
def test_the_cluster_is_stopped_when_pytest_dies(tmp_path: Path) -> None:
    """A session killed with SIGKILL leaves no server behind (the watchdog stops it)."""
    repo = Path(__file__).resolve().parents[3]
    script = ("import sys, time\nsys.path.insert(0, sys.argv[1])\nfrom bench._pgserver import PgCluster\n"
              "c = PgCluster().start()\nprint(c.data_dir, flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(repo)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        data_dir = Path(proc.stdout.readline().strip())
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)  # running
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # another process's exit: nothing here to wait on but its traces
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            if not data_dir.parent.exists():
                break
        time.sleep(0.05)
    else:
        pytest.fail("the postmaster or its folder outlived its session")


class _Failure(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(sqlstate or "no state")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "read", "write"),
    [
        (_Failure("40001"), True, True),  # serialization failure: rolled back, nothing applied
        (_Failure("40P01"), True, True),  # deadlock: rolled back
        (_Failure("57P03"), True, True),  # the server refuses connections for now: nothing ran
        (_Failure("53300"), True, True),  # too many connections: nothing ran
        (_Failure("08006"), True, False),  # the connection broke: a write may have been applied
        (_Failure("57P01"), True, False),  # admin shutdown mid-statement
        (_Failure("23505"), False, False),  # a real error is never retried
        (_Failure("TM001"), False, False),
        (ConnectionResetError(), True, False),
        (TimeoutError(), True, False),
    ],
)
def test_retries_only_where_safe(error: BaseException, read: bool, write: bool) -> None:
    from threadmind.stores._postgres._pool import _transient

    assert (_transient(error, write=False), _transient(error, write=True)) == (read, write)
