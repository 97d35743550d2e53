"""Leases of a SQLite file, on the database side: taking over from a frozen holder, and fencing writes.

The usual hold is a lock on the file beside the database (``_sqlite_peers``): token 0, no row, nothing
written. Only when a holder stops renewing (its process froze) does a waiter take the key over here, in a
write transaction: a row with the new owner and a token one higher. Every fenced write checks the row inside
its own transaction, so a takeover (which needs the write lock too) can never land between the check and the
write. These functions run on the store's writer thread, inside a job's transaction.
"""

from __future__ import annotations

import sqlite3
import time

from ..errors import LeaseLost
from ._protocol import Lease

__all__ = ("active_owner", "check_fence", "release_row", "renew_rows", "take_over")

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
