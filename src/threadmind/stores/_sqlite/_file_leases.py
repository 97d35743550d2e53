"""Leases of a SQLite file, on the database side: taking over from a frozen holder, and fencing writes.

The usual hold is a lock on the file beside the database (``_peers``): token 0, no row, nothing
written. Only when a holder stops renewing (its process froze) does a waiter take the key over here, in a
write transaction: a row with the new owner and a token one higher. Every fenced write checks the row inside
its own transaction, so a takeover (which needs the write lock too) can never land between the check and the
write. These functions run on the store's writer thread, inside a job's transaction; ``FileLeases`` is the
store's side on the event loop (acquire, wait, take over, release, renew).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from ...errors import LeaseLost, StorageError
from .._leases import busy_error, wait_backoff
from .._protocol import Lease
from ._peers import Peers
from ._rows import unfenced

__all__ = ("LEASE_POLL_CAP", "FileLeases", "active_owner", "check_fence", "release_row", "renew_rows", "take_over")

_ROW = "SELECT owner, token, taken_at, expires_at, released FROM threadmind_leases WHERE key = ?"


def check_fence(conn: sqlite3.Connection, fence: Lease | None) -> None:
    """Refuse (``LeaseLost``) a write whose lease was taken over; None means unfenced."""
    if fence is None:
        return
    row = conn.execute(_ROW, (fence.key,)).fetchone()
    if fence.token == 0:  # held by the lock: lost only to a takeover made after it was acquired
        if row is not None and row[0] != fence.owner and row[2] >= fence.acquired_at:
            raise LeaseLost(fence.key, "its holder stopped renewing it and it was taken over")
        return
    if row is None or row[0] != fence.owner or row[1] != fence.token or row[4] or row[3] <= time.time():
        raise LeaseLost(fence.key, "its holder stopped renewing it and it was taken over")


def active_owner(conn: sqlite3.Connection, key: str) -> str | None:
    """The owner of a takeover row still in force (not released, not expired), or None."""
    row = conn.execute(_ROW, (key,)).fetchone()
    if row is None or row[4] or row[3] <= time.time():
        return None
    return str(row[0])


def take_over(conn: sqlite3.Connection, key: str, owner: str, pid: int, ttl: float) -> Lease | None:
    """Take ``key`` over for ``owner``; None when another takeover of it is still in force."""
    current = active_owner(conn, key)
    if current is not None and current != owner:
        return None
    row = conn.execute("SELECT token FROM threadmind_leases WHERE key = ?", (key,)).fetchone()
    token = (int(row[0]) if row is not None else 0) + 1
    now = time.time()
    conn.execute(
        "INSERT INTO threadmind_leases (key, owner, pid, token, taken_at, expires_at, released) "
        "VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, pid = excluded.pid, "
        "token = excluded.token, taken_at = excluded.taken_at, expires_at = excluded.expires_at, released = 0",
        (key, owner, pid, token, now, now + ttl),
    )
    return Lease(key=key, owner=owner, token=token, acquired_at=now)


def release_row(conn: sqlite3.Connection, lease: Lease) -> None:
    """Give a taken-over lease back (the row stays, so its token keeps counting up)."""
    conn.execute("UPDATE threadmind_leases SET released = 1 WHERE key = ? AND owner = ? AND token = ?",
                 (lease.key, lease.owner, lease.token))


def renew_rows(conn: sqlite3.Connection, owner: str, ttl: float) -> None:
    """Extend every taken-over lease of ``owner`` still in force."""
    now = time.time()
    conn.execute("UPDATE threadmind_leases SET expires_at = ? WHERE owner = ? AND released = 0 AND expires_at > ?",
                 (now + ttl, owner, now))


LEASE_POLL_CAP = 0.002
"""Longest sleep of a lease waiter between two looks (two syscalls each: cheap)."""

Run = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


class FileLeases:
    """The leases of one ``SQLiteStore``: a lock beside the file while the holder renews it (``_peers``),
    a takeover row here once it stops.

    :param peers: the processes on the file (None until the store opens).
    :param read: runs a function on the store's reader connection.
    :param write: runs a function in a write transaction of the store's writer.
    """

    def __init__(self, peers: Callable[[], Peers | None], *, read: Run, write: Run) -> None:
        self._peers = peers
        self._read = read
        self._write = write
        self._row_leases = 0  # leases held through a takeover row (they need renewing)

    async def acquire(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        """Hold ``key`` against every process on this file (a lock beside it; see ``_peers``).

        A holder that died releases it at once; one that is frozen (its heartbeat no longer vouches for its holds:
        its last renewal plus its ``ttl`` has passed) is taken over through the database, and its later fenced
        writes are refused.
        """
        peers = self._peers()
        assert peers is not None
        delay = 0.001
        checked_at = 0.0
        waiting = False
        try:
            while True:
                holder = peers.try_hold(key, owner)
                if holder is None:
                    return await self._held(key, owner, ttl, wait)
                if not wait:
                    await anyio.lowlevel.checkpoint()
                    raise busy_error(key)
                if not waiting:
                    peers.wait_begin(key)
                    waiting = True
                now = time.time()
                if holder > 0 and now - checked_at >= min(0.25, ttl / 4):
                    checked_at = now
                    until = peers.alive_until(holder)
                    if until is not None and now > until:  # the holder is alive but frozen: take over
                        lease = await self._take_over(key, owner, ttl)
                        if lease is not None:
                            return lease
                await anyio.sleep(delay)
                delay = min(LEASE_POLL_CAP, delay * 2)
        finally:
            if waiting:
                peers.wait_end(key)

    async def _held(self, key: str, owner: str, ttl: float, wait: bool) -> Lease:
        """The lock on ``key`` is ours: vouch for it, and wait for a takeover of a frozen holder still in force."""
        peers = self._peers()
        assert peers is not None
        try:
            peers.beat(ttl, lazy=True)  # vouch for the new hold at once (not only at the next heartbeat)
            if peers.takeovers() and await self._row_owner(key) not in (None, owner):
                if not wait:
                    raise busy_error(key)
                delay = 0.001
                while await self._row_owner(key) not in (None, owner):
                    delay = await wait_backoff(delay)
        except BaseException:
            peers.release(key, owner)
            raise
        return Lease(key=key, owner=owner, token=0, acquired_at=time.time())

    async def _take_over(self, key: str, owner: str, ttl: float) -> Lease | None:
        """Take ``key`` over from a frozen holder through a row (None: another takeover is in force, or the
        database is locked by the frozen holder itself; the caller looks again later)."""
        peers = self._peers()
        assert peers is not None
        peers.note_takeover()  # before the row exists: a fenced write that sees no takeover yet precedes it
        taken: list[Lease] = []

        def job(conn: sqlite3.Connection) -> Lease | None:
            lease = take_over(conn, key, owner, os.getpid(), ttl)
            if lease is not None:
                taken.append(lease)
            return lease

        try:
            lease: Lease | None = await self._write(job)
        except StorageError:
            return None
        except BaseException:
            if taken:  # committed, but the caller was cancelled meanwhile: give it straight back
                self._row_leases += 1
                with anyio.CancelScope(shield=True):
                    await self.release(taken[0])
            raise
        if lease is not None:
            self._row_leases += 1
        return lease

    def fence_check(self, fence: Lease | None) -> Callable[[sqlite3.Connection], None]:
        """The in-transaction check of a write fenced by ``fence``: ``LeaseLost`` when it lapsed (this process did
        not renew it in time) or was taken over.

        The takeover check is free until some process on the file has begun a takeover: the counter is raised
        before a takeover row is written, and the check runs holding the write lock, so a count of 0 then means no
        takeover can commit before this write does.
        """
        if fence is None:
            return unfenced

        def check(conn: sqlite3.Connection) -> None:
            peers = self._peers()
            if peers is not None and fence.token == 0 and peers.lapsed(fence.acquired_at):
                raise LeaseLost(fence.key, "its holder stopped renewing it for longer than its ttl")
            if peers is None or peers.takeovers():
                check_fence(conn, fence)

        return check

    async def _row_owner(self, key: str) -> str | None:
        owner: str | None = await self._read(lambda conn: active_owner(conn, key))
        return owner

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` back (the lock, or the takeover row)."""
        if lease.token == 0:
            peers = self._peers()
            if peers is not None:
                peers.release(lease.key, lease.owner)
            return  # no checkpoint: it ends every turn, which has checkpointed plenty
        self._row_leases = max(0, self._row_leases - 1)
        with anyio.CancelScope(shield=True):
            await self._write(lambda conn: release_row(conn, lease))

    async def renew(self, owner: str, ttl: float) -> None:
        """The heartbeat: this process is alive (its locks stand ``ttl`` more), and so do its takeover rows."""
        peers = self._peers()
        if peers is not None:
            peers.beat(ttl)
        if self._row_leases:
            await self._write(lambda conn: renew_rows(conn, owner, ttl))
        else:
            await anyio.lowlevel.checkpoint()
