"""Leases of ``PostgresStore``: rows in ``threadmind_leases``, timed by the database clock, woken by NOTIFY.

A lease is a row (``key``, ``owner``, ``token``, ``expires_at``). Taking it is one upsert that succeeds only where
no row exists or the row's ``expires_at`` has passed; every take draws a new token from the
``threadmind_lease_tokens`` sequence, so a takeover always holds a higher token than the holder it replaced.
Expiry is computed by the server (``clock_timestamp()``), never by a client, so hosts with skewed clocks agree on
who holds what. Renewing extends every unexpired row an owner holds; releasing deletes the row and sends
``NOTIFY threadmind_lease, '<key>'`` in the same statement.

Lease statements commit without waiting for the disk (``synchronous_commit`` off for their own transaction, a
tenth of a durable commit's time): after a server crash a lease row may be back in an earlier state, and a fenced
write then refuses whoever the row no longer names; a token drawn again after a crash fences no one else, as a
fence matches owner and token.

**Fencing.** A fenced write first reads its lease row ``FOR SHARE`` inside its own transaction (or statement) and
refuses to write (``LeaseLost``) unless the row still carries its owner and token and has not expired. The share
lock is held until that write commits, so a takeover (which must lock the row to change it) cannot land between
the check and the commit.

**A holder whose process is gone.** Each process keeps one more connection of its own (outside the pool), its
*presence*: it draws a key from the ``threadmind_presence_keys`` sequence and holds the session advisory lock on it,
and every lease it takes names that key. A session ends with its process (a killed process's sockets close; a host
that vanished is noticed by the TCP keepalives the presence session sets, about two seconds), and PostgreSQL drops
its advisory locks with it, so a take also succeeds where the holder's key is no longer locked: a dead holder is
replaced at the next look of a waiter (half a second at most), whatever ``lease_ttl``. A process that is alive but
frozen keeps its session, and is replaced only once its lease expires. Behind a transaction-pooling PgBouncer a
session lock cannot be kept: leases there name no presence and end by expiry only.

**Waiting.** A waiter listens on a dedicated connection outside the pool (``LISTEN`` is session state, which a
pooled or PgBouncer connection cannot keep) and sleeps until a release of its key is announced, never past the
holder's expiry, and at most a backoff step (the poll that covers a missed notification). Behind a
transaction-pooling PgBouncer (``statement_cache_size=0``) nothing listens: waiters poll with backoff.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from ...errors import LeaseLost
from .._leases import busy_error
from .._protocol import Lease

__all__ = ("FENCE_SQL", "LeaseListener", "PgLeases", "Presence", "check_fence", "lease_lost")

_log = logging.getLogger("threadmind.stores")

CHANNEL = "threadmind_lease"
_FIRST_BACKOFF = 0.002
_POLL_CAP = 0.05  # the longest sleep between two looks when nothing listens
_LISTEN_CAP = 0.5  # the longest sleep when a release wakes the waiter (the poll behind a lost notification)
_RECONNECT_AFTER = 5.0  # seconds before a failed listener connection is tried again

_TAKE = """
WITH take AS (
  INSERT INTO threadmind_leases AS l (key, owner, token, expires_at, presence)
  VALUES ($1, $2, nextval('threadmind_lease_tokens'), clock_timestamp() + $3 * interval '1 second', $4)
  ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at,
                                  presence = EXCLUDED.presence
  WHERE l.expires_at <= clock_timestamp()
     OR (l.presence IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM pg_locks k
           WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
             AND k.classid = (l.presence >> 32)::oid AND k.objid = (l.presence & 4294967295)::oid))
  RETURNING l.token
)
SELECT (SELECT token FROM take),
       (SELECT GREATEST(0, extract(epoch FROM h.expires_at - clock_timestamp()))::float8
        FROM threadmind_leases h WHERE h.key = $1),
       set_config('synchronous_commit', 'off', true)
"""
_RELEASE = (
    "WITH d AS (DELETE FROM threadmind_leases WHERE key = $1 AND owner = $2 AND token = $3 RETURNING key) "
    f"SELECT pg_notify('{CHANNEL}', d.key), set_config('synchronous_commit', 'off', true) FROM d"
)
_RENEW = ("WITH r AS (UPDATE threadmind_leases SET expires_at = clock_timestamp() + $2 * interval '1 second' "
          "WHERE owner = $1 AND key = ANY($3::text[]) AND expires_at > clock_timestamp()) "
          "SELECT set_config('synchronous_commit', 'off', true)")
#: Whether a lease is still held, read with a share lock that a takeover must wait for ($1 key, $2 owner, $3 token).
FENCE_SQL = ("SELECT l.owner = $2 AND l.token = $3 AND l.expires_at > clock_timestamp() "
             "FROM threadmind_leases l WHERE l.key = $1 FOR SHARE")


def lease_lost(key: str) -> LeaseLost:
    """The error of a write whose lease was lost."""
    return LeaseLost(key, "its holder stopped renewing it and it expired or was taken over")


async def check_fence(conn: Any, fence: Lease | None) -> None:
    """(inside a transaction) Refuse with ``LeaseLost`` unless ``fence`` is still held; None: unfenced."""
    if fence is not None and not await conn.fetchval(FENCE_SQL, fence.key, fence.owner, fence.token):
        raise lease_lost(fence.key)


class LeaseListener:
    """``LISTEN threadmind_lease`` on a connection of its own, opened on the first wait; wakes waiters by key.

    :param connect: opens a new asyncpg connection (outside the pool).
    """

    def __init__(self, connect: Callable[[], Awaitable[Any]]) -> None:
        self._connect = connect
        self._conn: Any = None
        self._lock = anyio.Lock()
        self._failed_at = -math.inf
        self._closed = False
        self._waiters: dict[str, set[anyio.Event]] = {}

    async def subscribe(self, key: str) -> anyio.Event | None:
        """An event set when a release of ``key`` is announced, or None when nothing listens (then poll)."""
        if not await self._listening():
            return None
        event = anyio.Event()
        self._waiters.setdefault(key, set()).add(event)
        return event

    def unsubscribe(self, key: str, event: anyio.Event | None) -> None:
        if event is None:
            return
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._waiters[key]

    async def _listening(self) -> bool:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return True
        if self._closed or time.monotonic() - self._failed_at < _RECONNECT_AFTER:
            return False
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return True
            conn = None
            try:
                with anyio.fail_after(5.0):
                    conn = await self._connect()
                    await conn.add_listener(CHANNEL, self._notified)
            except BaseException as exc:
                if conn is not None:
                    conn.terminate()
                if not isinstance(exc, Exception):
                    raise
                _log.warning("cannot LISTEN for lease releases; waiters poll instead", exc_info=True)
                self._failed_at = time.monotonic()
                return False
            if self._closed:  # the store closed meanwhile
                conn.terminate()
                return False
            self._conn = conn
            return True

    def _notified(self, _conn: Any, _pid: int, _channel: str, key: str) -> None:
        for event in self._waiters.pop(key, ()):
            event.set()

    async def aclose(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
        self._waiters.clear()
        if conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5.0) as scope:
                await conn.close()
            if scope.cancelled_caught:
                conn.terminate()


class Presence:
    """This process's presence in the database (see the module docstring): a connection of its own holding the
    session advisory lock on a key drawn for it, opened on the first lease. None when it cannot be had (leases then
    end by expiry only); opened again, with a new key, if its connection was lost.

    :param connect: opens a new asyncpg connection (outside the pool).
    """

    def __init__(self, connect: Callable[[], Awaitable[Any]]) -> None:
        self._connect = connect
        self._conn: Any = None
        self._key: int | None = None
        self._lock = anyio.Lock()
        self._failed_at = -math.inf
        self._closed = False

    async def key(self) -> int | None:
        """The key this process's leases name, or None (no presence session)."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return self._key
        if self._closed or time.monotonic() - self._failed_at < _RECONNECT_AFTER:
            return None
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._key
            conn = None
            try:
                with anyio.fail_after(5.0):
                    conn = await self._connect()
                    # A vanished host is noticed by the server in about two seconds (on TCP; ignored on sockets).
                    await conn.execute("SET tcp_keepalives_idle = 1; SET tcp_keepalives_interval = 1; "
                                       "SET tcp_keepalives_count = 2")
                    key = int(await conn.fetchval("SELECT nextval('threadmind_presence_keys')"))
                    await conn.execute("SELECT pg_advisory_lock($1)", key)
            except BaseException as exc:
                if conn is not None:
                    conn.terminate()
                if not isinstance(exc, Exception):
                    raise
                _log.warning("cannot open the presence session; a lease of this process that it cannot give back "
                             "ends by expiry only", exc_info=True)
                self._failed_at = time.monotonic()
                return None
            if self._closed:
                conn.terminate()
                return None
            self._conn, self._key = conn, key
            return key

    async def aclose(self) -> None:
        """End the session (its lock goes with it)."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5.0) as scope:
                await conn.close()
            if scope.cancelled_caught:
                conn.terminate()


class PgLeases:
    """The lease operations of one ``PostgresStore``; remembers what each owner holds, so the heartbeat renews
    exactly those rows (a row whose release failed is left to expire instead of being renewed forever).

    :param run_write: runs ``fn(conn)`` as one write on a pooled connection (the store's ``run_write``).
    :param listener: wakes waiters on releases; None polls.
    :param presence: this process's presence session; None: leases end by expiry only.
    """

    def __init__(self, run_write: Callable[[Callable[[Any], Awaitable[Any]], str], Awaitable[Any]],
                 listener: LeaseListener | None, presence: Presence | None = None) -> None:
        self._write = run_write
        self._listener = listener
        self._presence = presence
        self._held: dict[str, dict[str, int]] = {}  # owner -> {key: token}

    async def acquire(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        delay = _FIRST_BACKOFF
        cap = _POLL_CAP
        while True:
            event = await self._listener.subscribe(key) if wait and self._listener is not None else None
            try:
                token, remaining = await self._take(key, owner, ttl)
                if token is not None:
                    self._held.setdefault(owner, {})[key] = token
                    return Lease(key=key, owner=owner, token=token, acquired_at=time.time())
                if not wait:
                    raise busy_error(key)
                if event is not None:
                    cap = _LISTEN_CAP
                # Never sleep past the holder's expiry (then it is taken over), nor longer than one backoff step.
                timeout = delay if remaining is None else min(delay, remaining + 0.001)
                if event is None:
                    await anyio.sleep(timeout)
                else:
                    with anyio.move_on_after(timeout):
                        await event.wait()
            finally:
                if self._listener is not None:
                    self._listener.unsubscribe(key, event)
            delay = min(cap, delay * 2)

    async def _take(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        """One attempt: (the new token, None), or (None, seconds until the holder's lease expires)."""
        taken: list[int] = []
        presence = await self._presence.key() if self._presence is not None else None

        async def run(conn: Any) -> tuple[int | None, float | None]:
            row = await conn.fetchrow(_TAKE, key, owner, float(ttl), presence)
            if row[0] is not None:
                taken.append(int(row[0]))
                return int(row[0]), None
            return None, None if row[1] is None else float(row[1])

        try:
            result: tuple[int | None, float | None] = await self._write(run, "acquire_lease")
        except BaseException:
            if taken:  # taken, but the caller was cancelled meanwhile: give it straight back
                with anyio.CancelScope(shield=True):
                    await self.release(Lease(key=key, owner=owner, token=taken[0], acquired_at=time.time()))
            raise
        return result

    async def release(self, lease: Lease) -> None:
        held = self._held.get(lease.owner)
        if held is not None and held.get(lease.key) == lease.token:
            del held[lease.key]
            if not held:
                del self._held[lease.owner]
        await self._write(lambda conn: conn.execute(_RELEASE, lease.key, lease.owner, lease.token), "release_lease")

    async def renew(self, owner: str, ttl: float) -> None:
        keys = list(self._held.get(owner, ()))
        if not keys:
            await anyio.lowlevel.checkpoint()
            return
        await self._write(lambda conn: conn.execute(_RENEW, owner, float(ttl), keys), "renew_leases")
