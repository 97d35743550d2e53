"""SQLiteStore specifics: group commit, failure isolation, cancellation, payload extremes, lifecycle."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind.codecs import Message, Thread
from threadmind.errors import ConfigError, StorageError, ThreadNotFound, ValidationError
from threadmind.stores._protocol import MessageQuery
from threadmind.stores._sqlite import SQLiteStore

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "memory.db") as s:
        yield s


def msg(i: int, thread: str = "t1", text: str | None = None, **fields: Any) -> Message:
    fields.setdefault("created_at", BASE + timedelta(milliseconds=i))
    return Message.user(text or f"message {i}", id=f"{thread}-m{i:05d}", thread_id=thread, resource_id="r1",
                        **fields)


def worker_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


class _Gate:
    """A write job that parks the writer thread until released, to line other jobs up into one group."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def job(self, conn: sqlite3.Connection) -> str:
        self.entered.set()
        self.release.wait(10)
        return "gate"

    async def wait_entered(self) -> None:
        await anyio.to_thread.run_sync(self.entered.wait, 10)


class TestGroupCommit:
    async def test_500_concurrent_saves_share_few_commits(self, store: SQLiteStore) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(500):
                tg.start_soon(store.create_thread, Thread(id=f"t{i}", resource_id="r1"))
        before = store.statistics()
        async with anyio.create_task_group() as tg:
            for i in range(500):
                tg.start_soon(store.save_messages, f"t{i}", [msg(1, f"t{i}"), msg(2, f"t{i}")])
        after = store.statistics()
        jobs, commits = after.jobs - before.jobs, after.commits - before.commits
        assert jobs == 500
        assert commits * 10 <= jobs  # grouped: at most one commit per 10 jobs
        assert after.largest_group > 10 and after.queued == 0
        assert (await store.stats())["messages"] == 1000
        page = await store.list_messages(MessageQuery(thread_id="t499", per_page=False))
        assert [m.id for m in page.messages] == ["t499-m00001", "t499-m00002"]

    async def test_a_deferred_job_rides_in_the_next_group(self, store: SQLiteStore) -> None:
        """A background write waits for the next write and commits with it: one commit for both, in order."""
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.execute_write(lambda c: c.execute("CREATE TABLE side (v INTEGER)"))
        before = store.statistics()
        seen: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: store.execute_write(lambda c: c.execute("INSERT INTO side VALUES (1)"), defer=5.0))
            await wait_all_tasks_blocked()
            assert store.statistics().queued == 1  # deferred: no commit of its own yet
            seen.extend(await store.execute_write(
                lambda c: [row[0] for row in c.execute("SELECT v FROM side")]))  # queued after it: sees its row
        after = store.statistics()
        assert seen == [1]
        assert (after.commits - before.commits, after.jobs - before.jobs) == (1, 2)

    async def test_a_deferred_job_alone_commits_after_its_deferral(self, store: SQLiteStore) -> None:
        before = store.statistics()
        with anyio.fail_after(5):
            await store.execute_write(lambda c: c.execute("CREATE TABLE side (v INTEGER)"), defer=0.01)
        assert store.statistics().commits == before.commits + 1
        for bad in (-1.0, float("nan"), float("inf"), 61.0):
            with pytest.raises(ValidationError, match="defer"):
                await store.execute_write(lambda c: None, defer=bad)

    async def test_a_cancelled_deferred_job_never_runs_and_the_writer_goes_on(self, store: SQLiteStore) -> None:
        ran: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: store.execute_write(lambda c: ran.append(1), defer=60.0))
            await wait_all_tasks_blocked()
            assert store.statistics().queued == 1
            tg.cancel_scope.cancel()
        assert store.statistics().queued == 0 and ran == []
        with anyio.fail_after(5):
            assert await store.execute_write(lambda c: c.execute("SELECT 7").fetchone()) == (7,)
        assert ran == []

    async def test_a_deferred_job_is_not_held_while_a_group_is_being_written(self, store: SQLiteStore) -> None:
        """With a writer busy, a background job simply queues: it joins the very next group."""
        gate = threading.Event()
        done = anyio.Event()

        async def background() -> None:
            await store.execute_write(lambda c: c.execute("CREATE TABLE side (v INTEGER)"), defer=60.0)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: store.execute_write(lambda c: gate.wait(5)))
            await wait_all_tasks_blocked()
            tg.start_soon(background)
            await wait_all_tasks_blocked()
            gate.set()
            with anyio.fail_after(5):  # not 60 s: it was queued behind a running group, so it went next
                await done.wait()

    async def test_failing_job_fails_alone(self, store: SQLiteStore) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        gate = _Gate()
        outcomes: dict[str, Any] = {}

        async def run(name: str, fn: Callable[[], Any]) -> None:
            try:
                outcomes[name] = await fn()
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                outcomes[name] = exc

        def boom(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO threadmind_meta (key, value) VALUES ('half', 'written')")
            raise RuntimeError("job failed")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "gate", lambda: store.execute_write(gate.job))
            await gate.wait_entered()
            before = store.statistics().commits
            tg.start_soon(run, "ok1", lambda: store.save_messages("t1", [msg(1)]))
            tg.start_soon(run, "boom", lambda: store.execute_write(boom))
            tg.start_soon(run, "sql", lambda: store.execute_write(lambda c: c.execute("SELECT * FROM nope")))
            tg.start_soon(run, "missing", lambda: store.save_messages("ghost", [msg(1, "ghost")]))
            tg.start_soon(run, "ok2", lambda: store.save_messages("t1", [msg(2)]))
            await wait_all_tasks_blocked()
            gate.release.set()
        stats = store.statistics()
        assert stats.commits == before + 2 and stats.largest_group == 5  # the gate's group, then all five in one
        assert isinstance(outcomes["boom"], RuntimeError)
        assert isinstance(outcomes["sql"], StorageError) and isinstance(outcomes["sql"].__cause__, sqlite3.Error)
        assert isinstance(outcomes["missing"], ThreadNotFound)
        assert [m.id for m in outcomes["ok1"] + outcomes["ok2"]] == ["t1-m00001", "t1-m00002"]
        page = await store.list_messages(MessageQuery(thread_id="t1"))
        assert [m.id for m in page.messages] == ["t1-m00001", "t1-m00002"]
        half = await store.execute_read(lambda c: c.execute("SELECT value FROM threadmind_meta WHERE key='half'")
                                        .fetchone())
        assert half is None  # the failed job's own statement was rolled back to its savepoint

    async def test_lone_failing_job_rolls_back_and_the_writer_goes_on(self, store: SQLiteStore) -> None:
        # A group of one runs without a savepoint: the transaction itself must undo the job's partial writes.
        def half_then_fail(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO threadmind_meta (key, value) VALUES ('half', '1')")
            raise ValueError("boom after one row")

        with pytest.raises(ValueError, match="boom after one row"):
            await store.execute_write(half_then_fail)
        with pytest.raises(StorageError, match="no such table"):
            await store.execute_write(lambda c: c.execute("INSERT INTO nope VALUES (1)"))
        await store.execute_write(lambda c: c.execute("INSERT INTO threadmind_meta (key, value) VALUES ('after', '2')"))
        rows = await store.execute_read(lambda c: c.execute(
            "SELECT key FROM threadmind_meta WHERE key IN ('half', 'after') ORDER BY key").fetchall())
        assert rows == [("after",)]
        assert store.statistics().largest_group == 1  # each ran as a group of one (the path under test)
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        with pytest.raises(ThreadNotFound):
            await store.save_messages("missing", [msg(1, thread="missing")])
        saved = await store.save_messages("t1", [msg(2)])
        assert [m.id for m in saved] == ["t1-m00002"]

    async def test_cancelled_queued_job_is_dropped(self, store: SQLiteStore) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        gate = _Gate()
        results: list[Any] = []

        async def victim(scope_ready: anyio.Event, holder: list[anyio.CancelScope]) -> None:
            with anyio.CancelScope() as scope:
                holder.append(scope)
                scope_ready.set()
                results.append(await store.save_messages("t1", [msg(9)]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(store.execute_write, gate.job)
            await gate.wait_entered()
            ready, holder = anyio.Event(), list[anyio.CancelScope]()
            tg.start_soon(victim, ready, holder)
            await ready.wait()
            await wait_all_tasks_blocked()
            assert store.statistics().queued == 1
            holder[0].cancel()
            await wait_all_tasks_blocked()
            assert store.statistics().queued == 0  # removed before any group took it
            gate.release.set()
        assert results == []
        assert await store.get_messages_by_id(["t1-m00009"]) == []

    async def test_cancelled_running_job_commits_fully(self, store: SQLiteStore) -> None:
        entered, release = threading.Event(), threading.Event()
        results: list[Any] = []

        def two_rows(conn: sqlite3.Connection) -> str:
            conn.execute("INSERT INTO threadmind_meta (key, value) VALUES ('first', '1')")
            entered.set()
            release.wait(10)
            conn.execute("INSERT INTO threadmind_meta (key, value) VALUES ('second', '2')")
            return "done"

        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def caller() -> None:
                    results.append(await store.execute_write(two_rows))

                tg.start_soon(caller)
                await anyio.to_thread.run_sync(entered.wait, 10)
                scope.cancel()
                release.set()
        assert scope.cancelled_caught and results == []  # the caller saw the cancellation ...
        rows = await store.execute_read(lambda c: c.execute(
            "SELECT key FROM threadmind_meta WHERE key IN ('first', 'second') ORDER BY key").fetchall())
        assert rows == [("first",), ("second",)]  # ... and the job committed entirely

    async def test_group_commit_span_links_callers(self, store: SQLiteStore,
                                                   span_exporter: InMemorySpanExporter) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        gate = _Gate()
        tracer = trace.get_tracer("test")
        contexts = []

        async def caller(i: int) -> None:
            with tracer.start_as_current_span(f"caller-{i}") as span:
                contexts.append(span.get_span_context())
                await store.save_messages("t1", [msg(i)])

        async with anyio.create_task_group() as tg:
            tg.start_soon(store.execute_write, gate.job)
            await gate.wait_entered()
            for i in range(3):
                tg.start_soon(caller, i)
            await wait_all_tasks_blocked()
            span_exporter.clear()
            gate.release.set()
        groups = [s for s in span_exporter.get_finished_spans() if s.name == "threadmind.store.group_commit"]
        linked = {link.context.span_id for group in groups for link in group.links}
        assert {c.span_id for c in contexts} <= linked
        assert any(g.attributes and g.attributes.get("db.system.name") == "sqlite" for g in groups)


class TestPayloads:
    async def test_extreme_content_roundtrips(self, store: SQLiteStore) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1", title="עברית 🚀", metadata={"nul": "a\x00b"}))
        texts = ["x" * (10 * 1024 * 1024), "nul \x00 inside \x00", "emoji 🚀👩‍👩‍👧 astral 𝄞",
                 "RTL: שלום עולם مرحبا بالعالم", 'quotes " and \\ backslash \n\t']
        saved = await store.save_messages("t1", [msg(i, text=t) for i, t in enumerate(texts)])
        got = await store.get_messages_by_id([m.id for m in saved])
        assert [m.text for m in got] == texts and got == saved
        thread = await store.get_thread("t1")
        assert thread is not None and thread.title == "עברית 🚀" and thread.metadata == {"nul": "a\x00b"}

    async def test_ten_thousand_messages_in_one_batch(self, store: SQLiteStore) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        batch = [msg(i) for i in range(10_000)]
        saved = await store.save_messages("t1", batch)
        assert len(saved) == 10_000
        page = await store.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert [m.id for m in page.messages] == [m.id for m in batch]
        assert store.statistics().jobs >= 2

    async def test_non_json_content_reads_as_text(self, store: SQLiteStore) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.execute_write(lambda c: c.executemany(
            'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
            "VALUES (?, 't1', ?, 'user', 'v2', '2025-03-01T09:00:00.000Z', 'r1')",
            [("plain", "just some text {"), ("jsonstr", '"a json string"')]))
        got = {m.id: m for m in await store.get_messages_by_id(["plain", "jsonstr"])}
        assert got["plain"].text == "just some text {" and got["plain"].content.parts[0].text == "just some text {"  # type: ignore[union-attr]
        assert got["jsonstr"].text == "a json string"
        page = await store.list_messages(MessageQuery(thread_id="t1", metadata={"k": 1}))
        assert page.messages == []  # a metadata filter skips rows whose content is not JSON


class TestLifecycle:
    async def test_aclose_leaves_no_threads(self, tmp_path: Path) -> None:
        before = worker_threads()
        store = SQLiteStore(tmp_path / "x.db")
        await store.create_thread(Thread(id="t1", resource_id="r1"))  # opens on first use
        assert len(worker_threads() - before) == 3  # writer, reader and checkpointer connections
        async with anyio.create_task_group() as tg:  # concurrent closes: both return once it is closed
            tg.start_soon(store.aclose)
            tg.start_soon(store.aclose)
        assert worker_threads() - before == set()
        with anyio.fail_after(5):
            with pytest.raises(StorageError):
                await store.get_thread("t1")
            with pytest.raises(StorageError):
                await store.execute_write(lambda c: None)
            with pytest.raises(StorageError):
                await store.open()

    async def test_aclose_drains_queued_writes(self, tmp_path: Path) -> None:
        store = SQLiteStore(tmp_path / "x.db")
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        gate = _Gate()
        saved: list[str] = []

        async def save(i: int) -> None:
            saved.extend(m.id for m in await store.save_messages("t1", [msg(i)]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(store.execute_write, gate.job)
            await gate.wait_entered()
            for i in range(10):
                tg.start_soon(save, i)
            await wait_all_tasks_blocked()
            tg.start_soon(store.aclose)
            await wait_all_tasks_blocked()
            gate.release.set()
        assert sorted(saved) == [f"t1-m{i:05d}" for i in range(10)]
        async with SQLiteStore(tmp_path / "x.db") as reopened:
            assert (await reopened.stats())["messages"] == 10

    async def test_data_survives_reopen(self, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "x.db", synchronous="NORMAL") as store:
            await store.create_thread(Thread(id="t1", resource_id="r1", metadata={"a": [1, 2]}))
            await store.save_messages("t1", [msg(1, created_at=BASE), msg(2, created_at=BASE)])
        async with SQLiteStore(tmp_path / "x.db") as store:
            assert (await store.get_thread("t1")).metadata == {"a": [1, 2]}  # type: ignore[union-attr]
            page = await store.list_messages(MessageQuery(thread_id="t1"))
            assert [m.id for m in page.messages] == ["t1-m00001", "t1-m00002"]
            version = await store.execute_read(lambda c: c.execute(
                "SELECT value FROM threadmind_meta WHERE key = 'schema_version'").fetchone())
            assert version == ("1",)

    async def test_the_writer_keeps_savepoint_journals_in_memory(self, store: SQLiteStore) -> None:
        """Each job's SAVEPOINT sub-journal must not spill to a temp file (2 = MEMORY)."""
        assert await store.execute_write(lambda c: c.execute("PRAGMA temp_store").fetchone()) == (2,)

    async def test_newer_schema_is_refused(self, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "x.db") as store:
            await store.execute_write(lambda c: c.execute(
                "UPDATE threadmind_meta SET value = '99' WHERE key = 'schema_version'"))
        before = worker_threads()
        with pytest.raises(StorageError, match="schema_version 99"):
            await SQLiteStore(tmp_path / "x.db").open()
        assert worker_threads() - before == set()

    @pytest.mark.parametrize("kwargs", [{"synchronous": "SOMETIMES"}, {"max_batch": 0}, {"busy_timeout_ms": -1}])
    def test_bad_options(self, tmp_path: Path, kwargs: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            SQLiteStore(tmp_path / "x.db", **kwargs)
        with pytest.raises(ConfigError):
            SQLiteStore(":memory:")


class TestCheckpoints:
    async def test_the_wal_is_checkpointed_outside_the_commit_path(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import threadmind.stores._sqlite._group_commit as sqlite_module

        monkeypatch.setattr(sqlite_module, "_CHECK_EVERY", 4)
        monkeypatch.setattr(sqlite_module, "_WAL_CHECKPOINT_BYTES", 32 << 10)
        path = tmp_path / "x.db"
        async with SQLiteStore(path) as store:
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            start = path.stat().st_size
            for i in range(60):
                message = Message.user("x" * 2000, id=f"m{i}", thread_id="t1", resource_id="r1")
                await store.save_messages("t1", [message])
            # far below the auto-checkpoint size: the pages reached the main file through the checkpointer
            assert path.stat().st_size > start + 60 * 2000
            page = await store.list_messages(MessageQuery(thread_id="t1", per_page=False))
            assert len(page.messages) == 60

    async def test_no_save_waits_for_a_checkpoint_and_close_waits_for_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import threadmind.stores._sqlite._group_commit as sqlite_module

        entered, release = threading.Event(), threading.Event()
        finished: list[bool] = []
        posted: list[object] = []
        original, original_post = sqlite_module.checkpoint_if_large, sqlite_module.post_to_connection_thread  # type: ignore[attr-defined]

        def slow_checkpoint(conn: Any, wal: str, copying: threading.Lock) -> None:
            entered.set()
            release.wait(10)
            original(conn, wal, copying)
            finished.append(True)

        def counting_post(conn: Any, fn: Any) -> None:
            posted.append(fn)
            original_post(conn, fn)

        monkeypatch.setattr(sqlite_module, "_CHECK_EVERY", 2)
        monkeypatch.setattr(sqlite_module, "checkpoint_if_large", slow_checkpoint)
        monkeypatch.setattr(sqlite_module, "post_to_connection_thread", counting_post)
        store = SQLiteStore(tmp_path / "x.db")
        async with store:
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            for i in range(8):  # checks are due every 2 commits; the first stays blocked in the checkpointer
                with anyio.fail_after(5):
                    await store.save_messages("t1", [Message.user(f"m{i}", id=f"m{i}", thread_id="t1",
                                                                  resource_id="r1")])
            assert entered.is_set() and not finished  # the saves went on while it was blocked
            assert len(posted) == 1  # and no second check piled up behind it
            release.set()
        assert len(finished) == len(posted)  # aclose waited for every checkpoint it had queued
        async with SQLiteStore(tmp_path / "x.db") as again:
            assert len((await again.list_messages(MessageQuery(thread_id="t1", per_page=False))).messages) == 8


async def test_a_failed_open_leaves_no_worker_thread(tmp_path: Path) -> None:
    """aiosqlite queues its worker's stop on a failed connect without waiting; the store waits for it, so
    the thread can never report to an event loop that has closed meanwhile (a traceback at process exit)."""
    import threading

    from threadmind.errors import StorageError

    before = set(threading.enumerate())
    (tmp_path / "a-folder.db").mkdir()  # a path SQLite cannot open as a database file
    for _ in range(5):
        store = SQLiteStore(tmp_path / "a-folder.db")
        with pytest.raises(StorageError, match="cannot open"):
            await store.open()
        workers = [t for t in threading.enumerate()
                   if t not in before and t.is_alive() and "_connection_worker_thread" in t.name]
        assert workers == []  # aiosqlite's worker (default name "Thread-N (_connection_worker_thread)")


def test_a_path_in_a_missing_folder_is_refused_at_construction(tmp_path: Path) -> None:
    from threadmind.errors import ConfigError

    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(ConfigError, match="does not exist") as info:
        SQLiteStore(missing)
    assert str(missing.parent) in info.value.message
    assert not missing.parent.exists()
