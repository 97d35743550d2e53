"""Opening ``SQLiteStore``'s connections: the pragmas of its writer and reader, the switch of a new file to WAL
(which SQLite's busy handler does not cover) and the schema, created in the writer's first transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from ...errors import StorageError
from ._rows import tm_json
from ._schema import create_schema

__all__ = ("PAGE_CACHE_KIB", "setup_reader", "setup_writer", "switch_to_wal")

#: Each connection's page cache, at most (SQLite's default is 2 MiB). A semantic save inserts into five
#: B-trees keyed by random ids; past a few hundred thousand messages they outgrow 2 MiB and every insert
#: misses: 64 MiB made semantic saves into a million-message file 1 520 -> 1 750 msgs/s here.
PAGE_CACHE_KIB = 65_536


def switch_to_wal(
    conn: sqlite3.Connection, timeout_ms: int, *, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """``PRAGMA journal_mode = WAL``, tried again while the file is locked, for up to ``timeout_ms``; the mode.

    Switching a file to WAL takes SQLite's exclusive lock without its busy handler, so when several processes
    open one new file at once, one of them can get "database is locked" at once, whatever ``busy_timeout`` says.
    Runs on the connection's own thread (the sleeps block that thread only).
    """
    deadline = clock() + timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or clock() >= deadline:
                raise
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 2, 0.05)


def setup_writer(conn: sqlite3.Connection, path: str, synchronous: str, busy_timeout_ms: int) -> None:
    """(the writer's thread) Pragmas, WAL, and the schema's missing tables."""
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
    mode = switch_to_wal(conn, busy_timeout_ms)
    if mode.lower() != "wal":
        raise StorageError(f"could not switch {path!r} to WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    # Every job runs inside a SAVEPOINT, so SQLite keeps a sub-journal of the pages each one changes; past
    # 64 KiB it spills to a temp file (~270 KB per semantic group commit). In memory it costs no syscalls:
    # the vector write job of a semantic group measured 1.25-1.50 -> 0.96-1.18 ms.
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.create_function("tm_json", 1, tm_json, deterministic=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        create_schema(conn)
    except BaseException:
        conn.rollback()
        raise
    conn.execute("COMMIT")


def setup_reader(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """(the reader's thread) Pragmas of a connection that only reads."""
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
    conn.execute("PRAGMA query_only = ON")
    conn.create_function("tm_json", 1, tm_json, deterministic=True)
