"""The parts of the Store contract that hold between processes: leases with fencing tokens, and atomic
read-modify-writes, on every store (in memory, SQLite, PostgreSQL directly and behind PgBouncer).

A lease's other holder is another owner in this process, or, where a store must tell processes apart (SQLite's
holds are per process; a frozen holder is one that stopped its heartbeat), a child process running
``_lease_child.py``, frozen with SIGSTOP.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from threadmind.codecs import Message, Resource, Thread
from threadmind.errors import LeaseLost, ThreadBusy, ThreadNotFound, ValidationError
from threadmind.stores import InMemoryStore, OMRecord, PostgresStore, SQLiteStore, Store
from threadmind.stores._protocol import Lease, MessageQuery, ResourceChange, ThreadChange

CHILD = Path(__file__).with_name("_lease_child.py")
TTL = 0.6


@dataclass
class Where:
    """How to open another store object (or a child process) on the same database."""

    kind: str  # memory | sqlite | postgres | pgbouncer
    target: str  # file path or DSN ("" for memory)
    shared: Store | None = None  # the memory store (another object cannot see it)

    def open(self) -> Any:
        """An async context manager giving the store object."""
        if self.kind == "memory":
            assert self.shared is not None
            return _Unclosed(self.shared)
        if self.kind == "sqlite":
            return SQLiteStore(self.target, synchronous="NORMAL")
        return PostgresStore(self.target, max_size=4, statement_cache_size=0 if self.kind == "pgbouncer" else None)


class _Unclosed:
    """The shared in-memory store as a second object: opening and closing it does nothing."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    async def __aenter__(self) -> Store:
        return self._inner

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.fixture(params=["memory", "sqlite", "postgres", "pgbouncer"])
async def where(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Where]:
    kind = request.param
    if kind == "memory":
        async with InMemoryStore() as shared:
            yield Where(kind, "", shared)
        return
    if kind == "sqlite":
        yield Where(kind, str(tmp_path / "memory.db"))
    elif kind == "postgres":
        yield Where(kind, request.getfixturevalue("pg_dsn"))
    else:
        yield Where(kind, request.getfixturevalue("pgbouncer_dsn"))


@pytest.fixture
async def store(where: Where) -> AsyncIterator[Store]:
    async with where.open() as s:
        await s.create_thread(Thread(id="t1", resource_id="r1"))
        yield s


def message(mid: str, thread: str = "t1") -> Message:
    return Message.user(f"text of {mid}", id=mid, thread_id=thread, resource_id="r1", created_at=datetime.now(UTC))


async def stored_ids(store: Store, thread: str = "t1") -> list[str]:
    page = await store.list_messages(MessageQuery(thread_id=thread, per_page=False))
    return [m.id for m in page.messages]


class Child:
    """A child process holding a lease (see ``_lease_child.py``)."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc
        assert proc.stdout is not None
        self._out = BufferedByteReceiveStream(proc.stdout)
        self.token = 0

    async def started(self) -> Child:
        self.token = int((await self.read()).split()[1])
        return self

    async def read(self) -> str:
        with anyio.fail_after(30):
            return (await self._out.receive_until(b"\n", 1 << 16)).decode().strip()

    async def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(command.encode() + b"\n")
        return await self.read()

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@asynccontextmanager
async def child_holding(where: Where, key: str, ttl: float = TTL) -> AsyncIterator[Child]:
    async with await anyio.open_process([sys.executable, str(CHILD), where.kind, where.target, key, str(ttl)],
                                        stderr=None) as proc:
        try:
            yield await Child(proc).started()
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            await proc.wait()


# -- leases ----------------------------------------------------------------------------------------------


class TestLeases:
    async def test_a_held_key_is_busy_for_another_owner_at_once(self, store: Store) -> None:
        lease = await store.acquire_lease("thread:t1", owner="a", ttl=30, wait=False)
        assert (lease.key, lease.owner) == ("thread:t1", "a")
        with pytest.raises(ThreadBusy) as info:
            await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=False)
        assert info.value.thread_id == "t1"
        other = await store.acquire_lease("thread:t2", owner="b", ttl=30, wait=False)  # another key is free
        await store.release_lease(other)
        await store.release_lease(lease)
        again = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=False)
        await store.release_lease(again)

    async def test_a_waiter_gets_the_key_once_it_is_released(self, store: Store) -> None:
        lease = await store.acquire_lease("thread:t1", owner="a", ttl=30, wait=False)
        got: list[Lease] = []

        async def waiter() -> None:
            got.append(await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.05)
            assert got == []  # still waiting while "a" holds it
            await store.release_lease(lease)
        assert got[0].owner == "b"
        await store.save_messages("t1", [message("m1")], fence=got[0])
        await store.release_lease(got[0])
        await store.release_lease(got[0])  # releasing twice is no error

    async def test_fenced_writes_of_a_held_lease_are_written(self, store: Store) -> None:
        lease = await store.acquire_lease("thread:t1", owner="a", ttl=30, wait=False)
        await store.save_messages("t1", [message("m1")], fence=lease)
        await store.save_messages_many({"t1": [message("m2")]}, fence=lease)
        await store.modify_thread("t1", lambda t: ThreadChange(title="kept"), fence=lease)
        await store.modify_resource("r1", lambda r: ResourceChange(working_memory="wm"), fence=lease)
        await store.release_lease(lease)
        assert await stored_ids(store) == ["m1", "m2"]
        assert (await store.get_thread("t1")).title == "kept"  # type: ignore[union-attr]
        assert (await store.get_resource("r1")).working_memory == "wm"  # type: ignore[union-attr]

    @pytest.mark.slow_variants("pgbouncer")  # the direct PostgreSQL variant stays in the default run
    async def test_a_frozen_holder_is_taken_over_after_ttl_and_its_writes_are_refused(
            self, where: Where, store: Store) -> None:
        if where.kind == "memory":  # every holder lives in this process: one that stops renewing
            old = await store.acquire_lease("thread:t1", owner="a", ttl=TTL, wait=False)
            new = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
            assert new.token > old.token
            await self._refused(store, old)
            await store.save_messages("t1", [message("new")], fence=new)
            assert await stored_ids(store) == ["new"]
            return
        async with child_holding(where, "thread:t1") as child:
            child.freeze()  # alive, holding the key, no longer renewing it
            new = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
            assert new.token > child.token
            child.thaw()
            assert await child.ask("save t1 from-child") == "lost"
            assert await child.ask("release") == "released"  # no error, and the taker keeps the key
            with pytest.raises(ThreadBusy):
                await store.acquire_lease("thread:t1", owner="c", ttl=30, wait=False)
            await store.save_messages("t1", [message("new")], fence=new)
            await store.release_lease(new)
        assert await stored_ids(store) == ["new"]

    async def test_a_lapsed_lease_refuses_writes_and_is_not_revived(self, store: Store) -> None:
        """Its holder stopped renewing it for longer than its ttl: refused even though nobody took it over, and
        a renewal that comes too late does not bring it back; a new lease works."""
        old = await store.acquire_lease("thread:t1", owner="a", ttl=0.1, wait=False)
        await anyio.sleep(0.3)  # wall-clock time is what a lease measures
        with pytest.raises(LeaseLost):
            await store.save_messages("t1", [message("late")], fence=old)
        await store.renew_leases("a", 30)
        with pytest.raises(LeaseLost):
            await store.modify_thread("t1", lambda t: ThreadChange(title="late"), fence=old)
        await store.release_lease(old)
        new = await store.acquire_lease("thread:t1", owner="a", ttl=30, wait=False)
        await store.save_messages("t1", [message("fresh")], fence=new)
        await store.release_lease(new)
        assert await stored_ids(store) == ["fresh"]
        assert (await store.get_thread("t1")).title == ""  # type: ignore[union-attr]

    async def _refused(self, store: Store, old: Lease) -> None:
        with pytest.raises(LeaseLost) as info:
            await store.save_messages("t1", [message("old")], fence=old)
        assert info.value.code == "THREADMIND_LEASE_LOST" and info.value.key == "thread:t1"
        with pytest.raises(LeaseLost):
            await store.save_messages_many({"t1": [message("old2")]}, fence=old)
        with pytest.raises(LeaseLost):
            await store.modify_thread("t1", lambda t: ThreadChange(title="old"), fence=old)
        with pytest.raises(LeaseLost):
            await store.modify_resource("r1", lambda r: ResourceChange(working_memory="old"), fence=old)
        assert await stored_ids(store) == []
        assert (await store.get_thread("t1")).title == ""  # type: ignore[union-attr]
        assert await store.get_resource("r1") is None

    @pytest.mark.slow
    async def test_a_renewed_lease_is_never_taken_over(self, where: Where, store: Store) -> None:
        if where.kind == "memory":
            lease = await store.acquire_lease("thread:t1", owner="a", ttl=TTL, wait=False)
            with anyio.move_on_after(3 * TTL):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True))
                    while True:
                        await store.renew_leases("a", TTL)
                        await anyio.sleep(TTL / 4)
            await store.save_messages("t1", [message("m1")], fence=lease)  # still held
            return
        async with child_holding(where, "thread:t1") as child:
            with anyio.move_on_after(3 * TTL) as waited:
                await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
            assert waited.cancelled_caught  # the child renews: never expired, never taken over
            assert await child.ask("save t1 from-child") == "saved"
            assert await child.ask("release") == "released"
            with anyio.fail_after(5):
                lease = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
            await store.release_lease(lease)
        assert await stored_ids(store) == ["from-child"]

    @pytest.mark.slow_variants("pgbouncer")  # the direct PostgreSQL variant stays in the default run
    @pytest.mark.parametrize("where", ["sqlite", "postgres", "pgbouncer"], indirect=True)
    async def test_a_dead_holder_releases_the_key(self, where: Where, store: Store) -> None:
        async with child_holding(where, "thread:t1") as child:
            child.proc.kill()
            await child.proc.wait()
            with anyio.fail_after(TTL + 5):  # SQLite: at once (the kernel drops its lock); Postgres: after ttl
                lease = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
        await store.save_messages("t1", [message("m1")], fence=lease)
        await store.release_lease(lease)


    async def test_a_dead_holder_is_replaced_within_3_seconds_whatever_its_ttl(self, where: Where,
                                                                                store: Store) -> None:
        """Its database session (SQLite: its record lock) ends with the process; a transaction-pooling PgBouncer
        keeps no session, so there only the lease's expiry frees it."""
        if where.kind in ("memory", "pgbouncer"):
            pytest.skip("no other process (memory), or no session to end with it (pgbouncer: expiry only)")
        async with child_holding(where, "thread:t1", ttl=30.0) as child:
            child.proc.kill()
            await child.proc.wait()
            with anyio.fail_after(3.0):
                lease = await store.acquire_lease("thread:t1", owner="b", ttl=30, wait=True)
        await store.save_messages("t1", [message("m1")], fence=lease)
        await store.release_lease(lease)


# -- read-modify-writes ------------------------------------------------------------------------------


class TestReadModifyWrite:
    async def test_concurrent_increments_from_two_store_objects_lose_none(self, where: Where, store: Store) -> None:
        def bump_thread(thread: Thread) -> ThreadChange:
            count = (thread.metadata or {}).get("n", 0)
            return ThreadChange(metadata={"n": count + 1})

        def bump_resource(resource: Resource | None) -> ResourceChange:
            lines = resource.working_memory.splitlines() if resource and resource.working_memory else []
            return ResourceChange(working_memory="\n".join([*lines, f"line {len(lines)}"]))

        async with where.open() as other:
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    s = store if i % 2 else other
                    tg.start_soon(lambda s=s: s.modify_thread("t1", bump_thread))  # type: ignore[misc]
                    tg.start_soon(lambda s=s: s.modify_resource("r-new", bump_resource))  # type: ignore[misc]
            thread = await other.get_thread("t1")
        assert thread is not None and thread.metadata == {"n": 40}
        resource = await store.get_resource("r-new")
        assert resource is not None and resource.working_memory == "\n".join(f"line {i}" for i in range(40))

    async def test_a_plain_update_between_is_never_lost(self, where: Where, store: Store) -> None:
        """modify_resource on a row that does not exist yet, racing plain update_resource calls on it."""
        async with where.open() as other:
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(lambda i=i: store.update_resource("r2", metadata={f"plain{i}": i}))  # type: ignore[misc]
                    tg.start_soon(lambda i=i: other.modify_resource(  # type: ignore[misc]
                        "r2", lambda r, i=i: ResourceChange(metadata={f"rmw{i}": i})))
            resource = await store.get_resource("r2")
        assert resource is not None and resource.metadata == {
            **{f"plain{i}": i for i in range(20)}, **{f"rmw{i}": i for i in range(20)}}

    async def test_change_sees_the_row_and_none_writes_nothing(self, store: Store) -> None:
        before = await store.get_thread("t1")
        seen: list[Any] = []
        assert await store.modify_thread("t1", lambda t: seen.append(t)) is None
        assert seen == [before] and await store.get_thread("t1") == before
        assert await store.modify_resource("r9", lambda r: seen.append(r)) is None
        assert seen[-1] is None and await store.get_resource("r9") is None
        made = await store.modify_resource("r9", lambda r: ResourceChange(working_memory="hi", metadata={"a": 1}))
        assert made is not None and (made.working_memory, made.metadata) == ("hi", {"a": 1})
        assert await store.get_resource("r9") == made
        changed = await store.modify_resource("r9", lambda r: ResourceChange(metadata={"b": 2}))
        assert changed is not None and (changed.working_memory, changed.metadata) == ("hi", {"a": 1, "b": 2})
        retitled = await store.modify_thread("t1", lambda t: ThreadChange(title="T", metadata={"k": [1]}))
        assert retitled is not None and (retitled.title, retitled.metadata) == ("T", {"k": [1]})
        assert await store.get_thread("t1") == retitled

    async def test_a_failing_change_writes_nothing(self, store: Store) -> None:
        def boom(_: Any) -> Any:
            raise RuntimeError("no")

        with pytest.raises(RuntimeError):
            await store.modify_thread("t1", boom)
        with pytest.raises(ValidationError, match="title"):
            await store.modify_thread("t1", lambda t: ThreadChange(title=5))  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="working_memory"):
            await store.modify_resource("r1", lambda r: ResourceChange(working_memory=5))  # type: ignore[arg-type]
        with pytest.raises(ThreadNotFound):
            await store.modify_thread("missing", lambda t: ThreadChange(title="x"))
        assert (await store.get_thread("t1")).title == ""  # type: ignore[union-attr]
        assert await store.get_resource("r1") is None

    async def test_observational_compare_and_set_lets_one_writer_win(self, where: Where, store: Store) -> None:
        now = datetime.now(UTC)

        def record(rid: str, text: str) -> OMRecord:
            return OMRecord(id=rid, lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
                            active_observations=text, created_at=now, updated_at=now)

        records = store.observational_records()
        assert await records.replace(record("first", "a"), expected=None)
        current = await records.current("thread:t1")
        assert current is not None and current.id == "first"
        won: list[bool] = []
        async with where.open() as other:
            others = other.observational_records()
            async with anyio.create_task_group() as tg:
                for i in range(8):
                    target = records if i % 2 else others
                    tg.start_soon(lambda t=target, i=i: _append(won, t.replace(  # type: ignore[misc]
                        _observed(current, f"b{i}"), expected=current)))
            assert sorted(won) == [False] * 7 + [True]
            final = await others.current("thread:t1")
        assert final is not None and final.active_observations.startswith("a\nb")
        assert not await records.replace(record("late", "z"), expected=None)  # one exists: None is stale


def _observed(base: OMRecord, text: str) -> OMRecord:
    copy = base.copy()
    copy.active_observations = f"{base.active_observations}\n{text}"
    return copy


async def _append(into: list[bool], outcome: Any) -> None:
    into.append(await outcome)

