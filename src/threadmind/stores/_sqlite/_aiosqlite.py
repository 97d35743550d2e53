"""The one place that touches aiosqlite's private API: running a function on a connection's worker thread,
connecting and closing without leaving a worker behind.

aiosqlite has no public "run a callable in the connection thread"; these helpers use its queue the way its own
``execute`` does, so an aiosqlite change touches this module only.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import aiosqlite
import anyio

T = TypeVar("T")

__all__ = (
    "call_with_raw",
    "close_connection",
    "connect",
    "in_connection_thread",
    "post_to_connection_thread",
)


async def in_connection_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn(raw sqlite3 connection)`` on the connection's worker thread in one hop.

    aiosqlite has no public "run a callable in the connection thread"; ``Connection._execute(fn, *args)``
    queues ``fn(*args)`` on that thread (the same path its own ``execute`` uses). Kept in this one place so an
    aiosqlite change touches one line.
    """
    result: T = await conn._execute(call_with_raw, conn, fn)  # type: ignore[no-untyped-call]
    return result


async def connect(path: str, **kwargs: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect``, except that a failed connect leaves no worker thread behind.

    On failure aiosqlite queues its worker thread's stop without waiting for it; if the event loop closed
    before the thread ran it, the thread would report to a closed loop (a traceback after the error at exit).
    """
    conn = aiosqlite.connect(path, **kwargs)
    try:
        return await conn
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(conn._thread.join, 5.0)
        raise


async def close_connection(conn: aiosqlite.Connection) -> None:
    """Close an aiosqlite connection and wait until its worker thread has really exited.

    ``close()`` resolves from inside the worker just before the thread leaves its loop; joining it (off the
    event loop) makes "no aiosqlite thread left after aclose()" a guarantee rather than a race.
    """
    worker = conn._thread
    await conn.close()
    if worker.is_alive():
        await anyio.to_thread.run_sync(worker.join, 5.0)


def post_to_connection_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], None]) -> None:
    """Queue ``fn(raw sqlite3 connection)`` on the connection's worker thread and return at once.

    The other use of aiosqlite's queue (see :func:`in_connection_thread`): an entry without a future, which
    its worker runs in queue order and whose outcome it drops, so ``fn`` handles its own errors. A later
    ``close()`` is queued behind it and so waits for it.

    :raises ValueError: the connection is closed.
    """
    if not conn._running or conn._connection is None:
        raise ValueError("Connection closed")
    conn._tx.put_nowait((None, functools.partial(call_with_raw, conn, fn)))


def call_with_raw(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    return fn(conn._conn)

