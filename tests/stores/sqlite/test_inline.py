"""A lone caller's short save at synchronous NORMAL or OFF commits on the event loop's thread (no thread hops); it
never waits there for a lock, never does with another process on the file, and is as durable as any other."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from threadmind import Memory
from threadmind.codecs import Message, Thread
from threadmind.errors import ThreadNotFound
from threadmind.stores import SQLiteStore
from threadmind.stores._sqlite._group_commit import _AUTOCHECKPOINT, _FRAMES_MARGIN, _FRAMES_PER_ROW
from threadmind.stores._sqlite._wal_index import WalIndex

BASE = datetime(2025, 1, 1, tzinfo=UTC)


def say(mid: str, i: int, thread: str = "t1") -> Message:
    return Message.user(f"message {i}", id=mid, thread_id=thread, resource_id="r1",
                        created_at=BASE + timedelta(seconds=i))


async def saved_inline(store: SQLiteStore, count: int, first: int = 0) -> int:
    before = store.statistics().inline_commits
    for i in range(first, first + count):
        await store.save_messages("t1", [say(f"m{i}", i)])
    return store.statistics().inline_commits - before


@pytest.mark.parametrize("synchronous", ["NORMAL", "OFF"])
async def test_a_lone_callers_saves_commit_on_the_loop(tmp_path: Path, synchronous: str) -> None:
    async with SQLiteStore(tmp_path / "m.db", synchronous=synchronous) as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        assert await saved_inline(store, 20) == 20
        with pytest.raises(ThreadNotFound):  # a refused save fails as before and leaves nothing
            await store.save_messages("ghost", [say("g", 99, "ghost")])
        big = [say(f"b{i}", 100 + i) for i in range(40)]  # more than a short save: the writer thread takes it
        before = store.statistics().inline_commits
        await store.save_messages("t1", big)
        assert store.statistics().inline_commits == before
        stored = await store.get_messages_by_id([f"m{i}" for i in range(20)] + ["g", "b0", "b39"])
        assert {m.id for m in stored} == {f"m{i}" for i in range(20)} | {"b0", "b39"}


async def test_at_full_every_commit_waits_for_the_disk_on_the_writer_thread(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "m.db") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        assert await saved_inline(store, 10) == 0


async def test_saves_under_way_at_once_commit_as_groups_on_the_writer_thread(tmp_path: Path) -> None:
    """A save that starts while another is under way (both past validation, waiting to commit) is grouped on the
    writer thread; saves that never overlap (a save yields nowhere before its commit when its thread's actor is
    idle) commit one by one on the loop. Either way every message is stored."""
    store = SQLiteStore(tmp_path / "m.db", synchronous="NORMAL")
    async with Memory(storage=store) as memory:
        for t in range(8):
            await memory.create_thread(thread_id=f"t{t}", resource_id="r1")

        async def saves(t: int) -> None:
            for i in range(20):
                await memory.save_messages([say(f"t{t}-{i}", i, f"t{t}")])

        async with anyio.create_task_group() as group:
            for t in range(8):
                group.start_soon(saves, t)
        assert len(await store.get_messages_by_id([f"t{t}-{i}" for t in range(8) for i in range(20)])) == 160
        job = [say("x", 0, "t0")]
        before = store.statistics()
        store._group.saving = 1  # another save under way
        try:
            await store.save_messages("t0", job)
        finally:
            store._group.saving = 0
        assert store.statistics().inline_commits == before.inline_commits  # it went to the writer thread
        # 170 commits left the WAL somewhere in its 1 000 frames: a save near SQLite's own checkpoint leaves the loop
        # by design (see the test below), and the WAL restarts at that checkpoint.
        index = WalIndex(str(tmp_path / "m.db"))
        try:
            for i in range(40):
                frames, inline = index.frames(), store.statistics().inline_commits
                assert frames is not None
                await store.save_messages("t0", [say(f"y{i}", 1 + i, "t0")])
                if frames + _FRAMES_PER_ROW + _FRAMES_MARGIN < _AUTOCHECKPOINT:
                    assert store.statistics().inline_commits == inline + 1  # a lone one: on the loop
                    break
                assert store.statistics().inline_commits == inline  # near the checkpoint: the writer thread's
            else:
                pytest.fail("the WAL never left the checkpoint's neighbourhood")
        finally:
            index.close()


async def test_a_lock_held_elsewhere_is_waited_for_off_the_loop(tmp_path: Path) -> None:
    """Another connection (here a plain sqlite3 one, as another program's would be) holds the write lock: the save
    waits for it on the writer thread while the event loop keeps running, then commits."""
    path = tmp_path / "m.db"
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await saved_inline(store, 2)
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        gaps: list[float] = []
        done = anyio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await anyio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async def release_later() -> None:
            await anyio.sleep(0.3)
            other.execute("COMMIT")

        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            group.start_soon(release_later)
            started = time.perf_counter()
            assert await saved_inline(store, 1, first=2) == 0  # it could not commit at once on the loop
            waited = time.perf_counter() - started
            done.set()
        other.close()
        assert waited >= 0.25  # it did wait for the lock
        assert max(gaps) < 0.1  # and the loop ran meanwhile
        assert await saved_inline(store, 3, first=3) == 3  # the lock is free again: back on the loop
        assert len(await store.get_messages_by_id([f"m{i}" for i in range(6)])) == 6


_HOLD_OPEN = """
import sys, anyio
from threadmind.stores import SQLiteStore
from threadmind.stores._sqlite._wal_index import WalIndex

async def main() -> None:
    async with SQLiteStore(sys.argv[1], synchronous="NORMAL"):
        print("open", flush=True)
        sys.stdin.readline()

anyio.run(main)
"""


async def test_with_another_process_on_the_file_saves_take_the_writer_thread(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        assert await saved_inline(store, 3) == 3
        async with await anyio.open_process([sys.executable, "-c", _HOLD_OPEN, str(path)],
                                            stderr=subprocess.DEVNULL) as other:
            assert other.stdout is not None and other.stdin is not None
            with anyio.fail_after(20):
                assert (await other.stdout.receive()).startswith(b"open")
            assert await saved_inline(store, 3, first=3) == 0  # its lock would be waited for: never on the loop
            await other.stdin.send(b"bye\n")
            await other.wait()
        assert await saved_inline(store, 3, first=6) == 3  # alone again


async def test_the_commit_that_may_start_sqlites_own_checkpoint_takes_the_writer_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite checkpoints the WAL in the COMMIT that takes it past 1 000 frames, syncing the file (up to 5 ms here):
    such a commit must not be on the loop. Saves near that mark go to the writer thread, and none on the loop
    ever finds the WAL past it. (The background copy is off here: one that happens to copy every frame between two
    saves lets the next restart the WAL before it nears the mark, which this test needs it to reach.)"""
    from threadmind.stores._sqlite import _group_commit

    monkeypatch.setattr(_group_commit, "_CHECK_EVERY", 1 << 40)
    path = tmp_path / "m.db"
    frames_seen: list[int] = []
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        index = WalIndex(str(path))
        threaded = 0
        for i in range(600):  # ~3 000 frames: SQLite's own checkpoint comes round several times
            frames = index.frames()
            assert frames is not None
            frames_seen.append(frames)
            before = store.statistics().inline_commits
            await store.save_messages("t1", [say(f"m{i}", i), say(f"n{i}", i)])
            if store.statistics().inline_commits == before:
                threaded += 1
            else:
                assert frames + 48 < 1000  # committed on the loop only when far from the mark
        index.close()
    assert max(frames_seen) >= 900 and threaded >= 3  # the mark was approached, and those commits left the loop
    assert threaded < 200


async def test_a_save_near_the_mark_rewinds_the_wal_so_the_next_ones_commit_on_the_loop(tmp_path: Path) -> None:
    """The save that leaves the loop near the mark checkpoints before it begins: with every frame copied back, its
    own first write restarts the WAL, so a lone caller pays one trip to the writer thread per WAL cycle instead of
    one per save until SQLite's own checkpoint comes round (about seven a cycle for saves of two messages)."""
    path = tmp_path / "m.db"
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        index = WalIndex(str(path))
        threaded = restarts = 0
        frames = index.frames()
        for i in range(600):
            before = store.statistics().inline_commits
            await store.save_messages("t1", [say(f"m{i}", i), say(f"n{i}", i)])
            threaded += store.statistics().inline_commits == before
            now = index.frames()
            assert frames is not None and now is not None
            restarts += now < frames
            frames = now
        index.close()
        assert len(await store.get_messages_by_id([f"n{i}" for i in range(600)])) == 600
    assert restarts >= 3
    assert threaded <= restarts + 3  # (the first saves leave the loop too, before the WAL has a wal-index to read)


def test_the_rewind_waits_for_a_background_copy_under_way(tmp_path: Path) -> None:
    """SQLite refuses a second checkpoint at once (SQLITE_BUSY, no busy handler), so a rewind that ran during the
    background copy did nothing and every save until the next rewind left the loop too (CI, under load: 16 saves
    on the writer thread for 4 rewinds). The rewind waits for the copy's lock, then copies every frame back."""
    from threadmind.stores._sqlite._group_commit import checkpoint_first

    path = str(tmp_path / "m.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t (x)")
    for i in range(50):
        writer.execute("INSERT INTO t VALUES (?)", (i,))
    copying = threading.Lock()
    copying.acquire()  # a background copy under way
    done = threading.Event()

    def rewind() -> None:
        checkpoint_first(writer, copying)
        done.set()

    worker = threading.Thread(target=rewind)
    worker.start()
    assert not done.wait(0.2)  # it waits for the copy rather than giving up
    copying.release()
    assert done.wait(5)
    worker.join()
    index = WalIndex(path)
    before = index.frames()
    writer.execute("INSERT INTO t VALUES (-1)")
    after = index.frames()
    index.close()
    writer.close()
    assert before is not None and after is not None and after < before  # every frame was copied back


async def test_the_background_copy_keeps_its_pace_while_a_lone_callers_saves_never_yield(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saves that commit on the loop need not hand it a turn; the WAL's background copy (every 16 commits, on the
    checkpointer's thread) must not wait for one either, or the commit that rewinds the WAL copies it all while
    its caller waits."""
    from threadmind.stores._sqlite import _group_commit

    copies: list[int] = []
    real = _group_commit.checkpoint_if_large

    def counted(conn: sqlite3.Connection, wal: str, copying: threading.Lock) -> None:
        copies.append(1)
        real(conn, wal, copying)

    monkeypatch.setattr(_group_commit, "checkpoint_if_large", counted)
    async with SQLiteStore(tmp_path / "m.db", synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        for i in range(480):
            await store.save_messages("t1", [say(f"m{i}", i)])
            if i % 16 == 15:
                # the checkpointer thread runs meanwhile, the loop does not: blocking it is the point here
                time.sleep(0.002)  # noqa: ASYNC251
        assert store.statistics().inline_commits >= 440
    assert len(copies) >= 20  # 480 commits: 30 due


async def test_a_caller_saving_in_a_loop_still_leaves_the_event_loop_turns(tmp_path: Path) -> None:
    """A save that commits on the loop's thread suspends nowhere; a caller saving in a loop (an import, a replay)
    still hands the loop a turn every few saves, so the process's other tasks (a server's requests) keep running."""
    async with SQLiteStore(tmp_path / "m.db", synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        turns = 0
        saving = True

        async def other_task() -> None:
            nonlocal turns
            while saving:
                await anyio.lowlevel.checkpoint()
                turns += 1

        async with anyio.create_task_group() as group:
            group.start_soon(other_task)
            await anyio.lowlevel.checkpoint()
            inline, before = store.statistics().inline_commits, turns
            for i in range(160):
                await store.save_messages("t1", [say(f"m{i}", i)])
            inline, during = store.statistics().inline_commits - inline, turns - before
            saving = False
    assert inline >= 150  # (the saves still committed on the loop)
    assert during >= 160 // 8 - 2


_TRUNCATED = """
import os, struct, sys
from threadmind.stores._sqlite._wal_index import WalIndex

path = sys.argv[1]
with open(path + "-shm", "wb") as shm:
    shm.write(bytes(16) + struct.pack("=I", 7) + bytes(12))
index = WalIndex(path)
print(index.frames())
os.truncate(path + "-shm", 3)  # as SQLite resets it when a process's first connection finds no other process
print(index.frames())
index.close()
"""


def test_the_wal_index_read_survives_sqlite_resetting_the_file(tmp_path: Path) -> None:
    """SQLite truncates the ``-shm`` file to reset it; a read of it through a memory map past the new end would kill
    the process with SIGBUS (one of two processes writing one file died so). The read comes back empty instead."""
    done = subprocess.run([sys.executable, "-c", _TRUNCATED, str(tmp_path / "m.db")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "None"]


_DMS_HOLDER = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 128, 1, 0)  # SQLite's unix VFS: the -shm's "dead man switch" byte
kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, probe))
print("free" if kind == fcntl.F_UNLCK else pid)
"""


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
async def test_reading_the_wal_index_keeps_sqlites_locks_on_it(tmp_path: Path, synchronous: str) -> None:
    """SQLite's locks on the -shm file are the process's POSIX locks, dropped when the process closes any descriptor
    of the file. The wal-index is read after saves of every kind; this process must still hold the lock that tells
    another process opening the file that the wal-index is in use (else that process resets it under us)."""
    path = tmp_path / "m.db"

    def holder() -> str:
        done = subprocess.run([sys.executable, "-c", _DMS_HOLDER, f"{path}-shm"], capture_output=True, text=True,
                              timeout=60, check=True)
        return done.stdout.strip()

    async with SQLiteStore(path, synchronous=synchronous) as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        assert holder() == str(os.getpid())
        for i in range(300):  # past the WAL's auto-checkpoint mark: its index was read, and it was rewound
            await store.save_messages("t1", [say(f"m{i}", i), say(f"n{i}", i)])
        assert holder() == str(os.getpid())
        async with SQLiteStore(path, synchronous=synchronous) as second:  # a second store of the process, closed
            await second.save_messages("t1", [say("x", 999)])
        assert holder() == str(os.getpid())
        await store.save_messages("t1", [say("y", 1000)])
    assert len(os.listdir(tmp_path)) >= 1


_SAVER = """
import sys, anyio
from datetime import UTC, datetime, timedelta
from threadmind.codecs import Message
from threadmind.stores import SQLiteStore

async def main() -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with SQLiteStore(sys.argv[1], synchronous="NORMAL") as store:
        for i in range(int(sys.argv[2])):
            await store.save_messages("t2", [Message.user(f"child {i}", id=f"c{i}", thread_id="t2", resource_id="r1",
                                                          created_at=base + timedelta(seconds=i))])

anyio.run(main)
"""


async def test_two_processes_saving_at_normal_keep_every_save_and_a_whole_file(tmp_path: Path) -> None:
    """At NORMAL a process that saved alone (on the loop) and then shares the file with a second process saving at
    the same time: both keep every save, each reads the other's, and SQLite finds the file whole."""
    path = tmp_path / "m.db"
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.create_thread(Thread(id="t2", resource_id="r1"))
        assert await saved_inline(store, 50) == 50
        async with await anyio.open_process([sys.executable, "-c", _SAVER, str(path), "400"],
                                            stdout=subprocess.DEVNULL) as child:
            for i in range(50, 450):
                await store.save_messages("t1", [say(f"m{i}", i)])
            with anyio.fail_after(60):
                code = await child.wait()
            assert child.stderr is not None
            assert code == 0, (await child.stderr.receive(65536)).decode() if code else ""
        assert len(await store.get_messages_by_id([f"m{i}" for i in range(450)])) == 450
        assert len(await store.get_messages_by_id([f"c{i}" for i in range(400)])) == 400
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
