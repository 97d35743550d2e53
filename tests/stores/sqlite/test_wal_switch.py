"""Switching a file to WAL waits out another connection's lock (SQLite does not run its busy handler there)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from threadmind.stores._sqlite._open import switch_to_wal


def _locked_for(path: Path, seconds: float) -> threading.Thread:
    """Hold an exclusive lock on ``path`` (a rollback-journal file) for ``seconds``, from another connection."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        time.sleep(seconds)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def _new_file(tmp_path: Path) -> Path:
    path = tmp_path / "new.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    return path


def test_a_lock_held_for_a_while_is_waited_out(tmp_path: Path) -> None:
    path = _new_file(tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 0")  # only the retries wait: what SQLite does while it switches
    holder = _locked_for(path, 0.2)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            conn.execute("PRAGMA journal_mode = WAL")  # what an open met without the retries
        started = time.monotonic()
        assert switch_to_wal(conn, 5000) == "wal"
        assert time.monotonic() - started >= 0.1
    finally:
        holder.join()
        conn.close()


def test_a_lock_held_past_the_timeout_fails_with_sqlites_error(tmp_path: Path) -> None:
    path = _new_file(tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 0")
    holder = _locked_for(path, 0.6)
    try:
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            switch_to_wal(conn, 150)
        assert 0.14 <= time.monotonic() - started < 0.5
    finally:
        holder.join()
        conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    assert switch_to_wal(conn, 0) == "wal"  # free again: the first try needs no time at all
    conn.close()


def test_other_errors_are_not_retried() -> None:
    slept: list[float] = []

    class Broken:
        def execute(self, sql: str) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        switch_to_wal(Broken(), 5000, sleep=slept.append)  # type: ignore[arg-type]
    assert slept == []
