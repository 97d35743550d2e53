"""Folding the keyword queue when the store goes quiet, so the next search finds nothing to fold.

A save only queues the ids of the messages whose words changed (``_fts``); a search folds the queue
before it reads, in a commit of its own. In an agent turn the recall runs before the turn's save, so without this
every turn's first search paid that commit (about 1–2 ms at ``synchronous=FULL``, and a read more). After a write
that queued ids, once no write has come through the store for :data:`FOLD_DELAY` seconds, :class:`BackgroundFold`
folds the queue on the store's third connection (the one checkpoints use): one short ``BEGIN IMMEDIATE``
transaction per :data:`FOLD_BATCH` ids, at most one fold under way per store. While writes keep coming it waits
(a timer on the event loop, no task), so a stream of saves pays nothing for it and the searches among them fold as
before. No caller waits for it; the store's group writer and other processes wait for its lock as for any writer's
(a save committed on the event loop's thread, which may not wait, goes to the writer thread instead). A fold that
fails (the lock not free within ``busy_timeout``, a full disk) is left to the next search: the queue, written with
the rows, is what makes a save findable.

The fold's transaction also reads the order of the threads its rows joined, so the blocks that take the rows keep
their neighbours, and the versions of the scopes whose blocks the store keeps (the most recently used
``WATCHED_MOST``): when nothing was written since the fold began, those at their scope's version answer their next
search from memory (after a burst of writes, the scopes searched during it included).

Its commit is not synced (``synchronous=NORMAL`` on that connection): a fold lost with the last moments before a
power cut is lost whole, queue rows included, and the queue is folded again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Protocol

import aiosqlite

from ..._lowlevel import running_loop
from .._keywords import Neighbours
from ._aiosqlite import post_to_connection_thread
from ._fts import FOLD_BATCH, THREAD_FILL, Advance, fold, scope_versions, thread_neighbours

__all__ = ("FOLD_DELAY", "BackgroundFold", "grown_threads")

_log = logging.getLogger("threadmind.store")

FOLD_DELAY = 0.02
"""Seconds without a write through the store before a background fold starts."""


class _Timer(Protocol):
    def cancel(self) -> None: ...


class BackgroundFold:
    """The debounced background fold of one store's keyword queue (event-loop side; see the module)."""

    def __init__(self, done: Callable[[list[Advance], Neighbours, int, int | None, dict[str, int]], None],
                 count: Callable[[], int]) -> None:
        # (scopes advanced, the order of the threads they grew in as of the fold's commit, the write count when
        # the fold began (-1: it failed), the store's cache epoch when it was asked for, the versions of the
        # watched scopes as of its commit), on the event loop
        self._done = done
        self._count = count  # the store's write count (writes are counted once they have committed)
        self._running = False
        self._closed = False
        # the latest ask not folded yet: the connection, the write count, the cache epoch, the scopes to watch
        self._wanted: tuple[aiosqlite.Connection, int, int | None, Callable[[], Sequence[str]]] | None = None
        self._asked_at = 0.0
        self._timer: _Timer | None = None
        #: Background folds committed, and folds that failed (left to the next search).
        self.folds = 0
        self.failures = 0

    def soon(self, connection: aiosqlite.Connection | None, writes: int, epoch: int | None,
             watched: Callable[[], Sequence[str]] = tuple) -> None:
        """Fold what the writes counted up to ``writes`` queued (they have all committed) once the store has been
        quiet for :data:`FOLD_DELAY` seconds; the fold also reads the versions of the scopes ``watched()`` names
        when it starts."""
        if connection is None or self._closed:
            return
        loop = running_loop()
        self._wanted = (connection, writes, epoch, watched)
        self._asked_at = loop.time()
        if self._timer is None and not self._running:
            self._timer = loop.call_later(FOLD_DELAY, self._when_quiet)

    def close(self) -> None:
        """No fold starts from now on (one under way ends on its own; closing the connection waits for it)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _when_quiet(self) -> None:
        self._timer = None
        if self._closed or self._wanted is None:
            return
        loop = running_loop()
        due = self._asked_at + FOLD_DELAY
        if loop.time() < due:  # a write came meanwhile: wait for the quiet after it
            self._timer = loop.call_at(due, self._when_quiet)
            return
        (connection, _, epoch, watching), self._wanted = self._wanted, None
        watched = list(watching())
        self._running = True
        count = self._count

        def job(conn: sqlite3.Connection) -> None:
            advances: list[Advance] = []
            order: Neighbours = {}
            versions: dict[str, int] = {}
            ok = False
            # Every write counted by now committed before this fold's first transaction: this fold sees it.
            writes = count()
            try:
                while True:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        taken, changed = fold(conn)
                        advances.extend(changed)
                        if taken < FOLD_BATCH:  # the last batch: the threads' order as this commit leaves it
                            order = grown_threads(conn, advances)
                            versions = scope_versions(conn, watched)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.rollback()
                        raise
                    if taken < FOLD_BATCH:
                        break
                ok = True
            except (sqlite3.Error, OSError) as exc:
                _log.debug("background keyword fold failed (the next search folds): %s", exc)
            finally:
                try:
                    loop.call_soon_threadsafe(self._ended, advances, order if ok else {}, writes if ok else -1,
                                              epoch, versions if ok else {})
                except RuntimeError:  # the loop is closed: nothing is waiting for this any more
                    pass

        try:
            post_to_connection_thread(connection, job)
        except ValueError:  # the connection is closing
            self._running = False

    def _ended(self, advances: list[Advance], order: Neighbours, writes: int, epoch: int | None,
               versions: dict[str, int]) -> None:
        self._running = False
        if writes < 0:
            self.failures += 1
        else:
            self.folds += 1
        self._done(advances, order, writes, epoch, versions)
        if self._wanted is not None and not self._closed and self._timer is None:  # asked again meanwhile
            self._timer = running_loop().call_later(FOLD_DELAY, self._when_quiet)


def grown_threads(conn: sqlite3.Connection, advances: list[Advance]) -> Neighbours:
    """(in the fold's transaction) The neighbours of every message of the threads rows joined, for threads of at
    most ``THREAD_FILL`` messages: the blocks that take the rows forget those threads' neighbours, and a search
    would read them again."""
    threads = sorted({row[1] for _, _, _, rows in advances if rows is not None for row in rows})
    small: list[str] = []
    for at in range(0, len(threads), 500):
        chunk = threads[at:at + 500]
        small.extend(thread for thread, count in conn.execute(
            "SELECT thread_id, count(*) FROM mastra_messages WHERE thread_id IN "
            f"({','.join('?' * len(chunk))}) GROUP BY thread_id", chunk) if count <= THREAD_FILL)
    return thread_neighbours(conn, small) if small else {}
