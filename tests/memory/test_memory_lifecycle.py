"""Durability under SIGKILL, and shutdown: no worker threads left, prompt errors after close, clean exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import anyio
import pytest

from threadmind import Memory
from threadmind.errors import StorageError, ThreadmindError
from threadmind.stores import InMemoryStore, SQLiteStore
from threadmind.testing import actor_system

from ._support import StoreFactory, all_ids, msg

_WORKLOAD = """
import sys, anyio
from datetime import UTC, datetime, timedelta
from threadmind import Memory, Message
from threadmind.stores import SQLiteStore

async def main() -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with Memory(storage=SQLiteStore(sys.argv[1], synchronous=sys.argv[2])) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.create_thread(resource_id="r1", thread_id="t2")
        print("ready", flush=True)
        batch = 0
        while True:
            size = 1 + batch % 9
            messages = [
                Message.user(f"batch {batch} part {j} " + "x" * (batch % 50), id=f"b{batch:06d}-{j}",
                             thread_id=f"t{1 + batch % 2}", resource_id="r1",
                             created_at=base + timedelta(milliseconds=batch))
                for j in range(size)
            ]
            await memory.save_messages(messages)
            print(f"ack {batch} {size}", flush=True)
            batch += 1

anyio.run(main)
"""

_OPEN_SAVE_CLOSE = """
import sys, anyio
from threadmind import Memory, Message
from threadmind.stores import SQLiteStore

async def main() -> None:
    async with Memory(storage=SQLiteStore(sys.argv[1])) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([Message.user("hello", thread_id="t1", resource_id="r1")])
    print("closed", flush=True)

anyio.run(main)
"""


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
            and not t.name.startswith("AnyIO worker")]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])  # NORMAL: a lone caller's saves commit on the loop
async def test_sigkill_keeps_every_acknowledged_batch(tmp_path: Path, synchronous: str) -> None:
    db = tmp_path / "killed.db"
    acked: dict[int, int] = {}
    async with await anyio.open_process([sys.executable, "-c", _WORKLOAD, str(db), synchronous],
                                        stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        buffer = b""
        with anyio.fail_after(30):
            while len(acked) < 120:
                chunk = await proc.stdout.receive()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    parts = line.decode().split()
                    if parts and parts[0] == "ack":
                        acked[int(parts[1])] = int(parts[2])
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the next batch is in flight
        await proc.wait()
        async for chunk in proc.stdout:  # acknowledgements already in the pipe count too
            buffer += chunk
        for line in buffer.split(b"\n"):
            parts = line.decode().split()
            if len(parts) == 3 and parts[0] == "ack":
                acked[int(parts[1])] = int(parts[2])
    assert proc.returncode == -signal.SIGKILL
    async with Memory(storage=SQLiteStore(db)) as memory:
        stored = set(await all_ids(memory, "t1")) | set(await all_ids(memory, "t2"))
    batches: dict[int, set[str]] = {}
    for mid in stored:
        batches.setdefault(int(mid[1:7]), set()).add(mid)
    for batch, size in acked.items():
        assert batches.get(batch) == {f"b{batch:06d}-{j}" for j in range(size)}, f"acknowledged batch {batch} lost"
    for batch, ids in batches.items():
        size = 1 + batch % 9
        assert ids == {f"b{batch:06d}-{j}" for j in range(size)}, f"batch {batch} half-present"
    assert max(batches) <= max(acked) + 1  # at most the one in-flight batch beyond the last acknowledgement


async def test_subprocess_open_save_close_exits_promptly(tmp_path: Path) -> None:
    db = tmp_path / "exit.db"
    with anyio.fail_after(20):
        result = await anyio.run_process([sys.executable, "-c", _OPEN_SAVE_CLOSE, str(db)], check=False)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "closed"
    async with Memory(storage=SQLiteStore(db)) as memory:
        assert len((await memory.recall("t1")).messages) == 1


async def test_aclose_leaves_no_worker_threads(tmp_path: Path) -> None:
    before = set(_worker_threads())
    memory = Memory(storage=SQLiteStore(tmp_path / "threads.db"))
    await memory.start()
    await memory.create_thread(resource_id="r1", thread_id="t1")
    await memory.save_messages([msg("a")])
    assert set(_worker_threads()) - before  # aiosqlite's connection threads exist while open
    await memory.aclose()
    await memory.aclose()  # idempotent
    left = [t for t in _worker_threads() if t not in before]
    for thread in left:  # a connection thread may still be finishing its last join
        thread.join(timeout=2)
    assert not [t for t in left if t.is_alive()]


@pytest.mark.parametrize("call", [
    pytest.param(lambda m: m.recall("t1"), id="recall"),
    pytest.param(lambda m: m.save_messages([msg("z")]), id="save"),
    pytest.param(lambda m: m.create_thread(resource_id="r1"), id="create"),
    pytest.param(lambda m: m.get_thread_by_id("t1"), id="get"),
    pytest.param(lambda m: m.list_threads(), id="list"),
    pytest.param(lambda m: m.delete_messages(["a"]), id="delete"),
    pytest.param(lambda m: m.update_messages([{"id": "a", "content": {"content": "x"}}]), id="update"),
    pytest.param(lambda m: m.update_messages([]), id="update-nothing"),
    pytest.param(lambda m: m.delete_messages([]), id="delete-nothing"),
    pytest.param(lambda m: m.clone_thread("t1"), id="clone"),
    pytest.param(lambda m: m.reindex(), id="reindex"),
    pytest.param(lambda m: m.start(), id="restart"),
])
async def test_operations_after_close_raise_promptly(make_store: StoreFactory, call: object) -> None:
    memory = Memory(storage=make_store())
    async with memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a")])
    with anyio.fail_after(2), pytest.raises(ThreadmindError) as info:
        await call(memory)  # type: ignore[operator]
    assert info.value.code == "THREADMIND_CLOSED"


async def test_close_waits_for_inflight_saves(tmp_path: Path) -> None:
    """Saves accepted before aclose() are committed; none is half-written."""
    db = tmp_path / "drain.db"
    memory = Memory(storage=SQLiteStore(db))
    outcomes: list[str] = []

    async def _save(i: int) -> None:
        try:
            await memory.save_messages([msg(f"d{i:03d}-{j}", ms=i) for j in range(4)])
            outcomes.append("ok")
        except ThreadmindError:
            outcomes.append("refused")

    async with anyio.create_task_group() as tg:  # start() and aclose() run in the same scope, as required
        await memory.start()
        await memory.create_thread(resource_id="r1", thread_id="t1")
        for i in range(100):
            tg.start_soon(_save, i)
        await anyio.wait_all_tasks_blocked()
        await memory.aclose()
    async with Memory(storage=SQLiteStore(db)) as again:
        ids = await all_ids(again, "t1")
    assert outcomes == ["ok"] * 100  # every save queued before aclose() was drained, none dropped
    assert len(ids) == 400
    for i in range(100):
        assert sum(1 for x in ids if x.startswith(f"d{i:03d}-")) in (0, 4)


async def test_start_is_idempotent_and_context_manager_reusable_store() -> None:
    store = InMemoryStore()
    memory = Memory(storage=store)
    await memory.start()
    await memory.start()
    await memory.create_thread(resource_id="r1", thread_id="t1")
    await memory.aclose()
    with pytest.raises(ThreadmindError):
        await memory.start()


class TestStartAndCloseFromAnyTask:
    """Servers start and stop memory from handlers: under timeouts and from other tasks (the actor system
    lives in a task the Memory owns)."""

    async def _reopened_ids(self, db: Path) -> list[str]:
        async with Memory(storage=SQLiteStore(db)) as again:
            return [m.id for m in (await again.recall("t1", per_page=False)).messages]

    async def test_aclose_under_a_timeout(self, tmp_path: Path) -> None:
        import asyncio

        for way in ("fail_after", "move_on_after", "wait_for"):
            db = tmp_path / f"{way}.db"
            memory = Memory(storage=SQLiteStore(db))
            await memory.start()
            await memory.create_thread(resource_id="r1", thread_id="t1")
            await memory.save_messages([msg("a")])
            if way == "fail_after":
                with anyio.fail_after(10):
                    await memory.aclose()
            elif way == "move_on_after":
                with anyio.move_on_after(10):
                    await memory.aclose()
            else:
                await asyncio.wait_for(memory.aclose(), 10)
            await anyio.lowlevel.checkpoint()  # the calling task is not left cancelled
            assert await self._reopened_ids(db) == ["a"]

    async def test_start_in_one_task_and_close_in_another(self, tmp_path: Path) -> None:
        memory = Memory(storage=SQLiteStore(tmp_path / "m.db"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.start)
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a")])
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.aclose)
        with pytest.raises(ThreadmindError) as info:
            await memory.recall("t1")
        assert info.value.code == "THREADMIND_CLOSED"
        assert await self._reopened_ids(tmp_path / "m.db") == ["a"]

    async def test_a_failed_start_can_be_retried(self, tmp_path: Path) -> None:
        (tmp_path / "m.db").mkdir()  # a folder where the database file should be: SQLite cannot open it
        memory = Memory(storage=SQLiteStore(tmp_path / "m.db"))
        for _ in range(2):
            with anyio.fail_after(5), pytest.raises(StorageError, match="cannot open"):
                await memory.start()
        (tmp_path / "m.db").rmdir()
        async with memory:  # the path is free now: a fresh attempt succeeds
            await memory.create_thread(resource_id="r1", thread_id="t1")

    @pytest.mark.slow
    async def test_the_cap_comes_back_after_a_burst_and_idle_actors_are_passivated(self, tmp_path: Path) -> None:
        # idle_timeout 1 s: the registries sweep every 0.25 s (a quarter of it)
        async with Memory(storage=SQLiteStore(tmp_path / "m.db"), idle_timeout=1.0, max_actors=4) as memory:
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(partial(memory.create_thread, resource_id="r1", thread_id=f"p{i}"))
            threads = actor_system(memory).threads
            assert threads is not None
            await anyio.sleep(0.6)  # a sweep or two: none idle for 1 s yet, but the cap is back
            stats = threads.statistics()
            assert stats.live == 4 and stats.evicted >= 46 and stats.passivated == 0, stats
            await anyio.sleep(1.2)  # idle for over 1 s: passivated
            assert threads.statistics().live == 0
            await memory.save_messages([msg("a", "p7")])  # a passivated thread comes back intact
            assert await all_ids(memory, "p7") == ["a"]
