"""The group-commit writer of ``SQLiteStore``.

**Group commit.** Every write is a *job*: a sync function ``fn(conn) -> T`` run on the writer's thread.
Jobs queue up; one writer at a time takes everything queued (up to ``max_batch``) and runs the whole group
in one hop to aiosqlite's thread: ``BEGIN IMMEDIATE``, per job ``SAVEPOINT``/``RELEASE`` (a failing job is
rolled back to its savepoint and fails alone), one ``COMMIT``. The writer role is taken by a waiting caller
(leader/follower) rather than a background task: a store may be opened lazily from any task, and a
long-lived task group entered there would be bound to that task's cancel scopes. The commit hop runs
shielded from cancellation; a caller cancelled while its job is still queued removes it (nothing written),
once the job is in a group it commits fully and only the result is dropped.

**A lone caller's short save** at ``synchronous`` NORMAL or OFF (whose WAL commits do not wait for the disk) commits
on the event loop's thread instead: no other save under way, no other process on the file, the write lock free at
once (the writer connection does not wait for it there: a busy lock sends the save to the writer thread, where
waiting blocks nothing), and the WAL far from SQLite's own checkpoint (read from the wal-index; the commit that may
start it goes to the writer thread). It skips two thread hops: sequential saves at NORMAL 5 500 -> 8 800
messages/s here, with the same transaction, the same durability and the same failure semantics. At FULL every
commit waits for the disk, so it stays on the writer thread.

A ``save_messages`` job: ``UPDATE mastra_threads ... RETURNING "resourceId"`` (existence, owner and the
``updatedAt`` bump at once); one multi-row upsert whose ``DO UPDATE ... WHERE`` skips ids owned by another thread
and whose ``RETURNING`` gives the stored ``createdAt`` of re-saved ids; the ids queued for the keyword index. A
skipped id fails the job and its savepoint (or, alone in its group, its transaction) undoes the bump. Consecutive
saves in a group run as bulk statements (``run_saves``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import aiosqlite
import anyio
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext

from ..._lowlevel import Reply, new_reply
from ...codecs import Message
from ...codecs._time import to_iso, utc_now
from ...errors import MessageIdTaken, StorageError, ThreadmindError, ThreadNotFound
from ...tracing import ATTR_DB_SYSTEM, get_tracer, tracing_enabled
from .._query import check_owner
from .._statistics import StoreStatistics
from ._aiosqlite import (
    in_connection_thread,
    post_to_connection_thread,
)
from ._fts import enqueue
from ._peers import Peers
from ._rows import (
    Row,
    bump,
    chunks,
    existing,
    placeholders,
    upsert,
)
from ._wal_index import WalIndex

__all__ = (
    "StoreStatistics",
    "GroupWriter",
    "Job",
    "SaveHook",
    "SaveSpec",
    "checkpoint_if_large",
    "fail_all",
    "read_tx",
    "run_group",
    "run_inline",
    "run_one",
    "run_saves",
    "run_single",
    "translate",
)

T = TypeVar("T")

_CHECK_EVERY = 16  # commits between WAL size checks
_WAL_CHECKPOINT_BYTES = 1 << 20  # pre-copy once the WAL holds this much (auto-checkpoint is at ~4 MB)
_LINGER = 0.0005  # seconds a leader may wait for the callers of the previous group (see _gather)
_INLINE_ROWS = 32  # messages a save may hold to commit on the event loop's thread
# Commits in a row on the event loop's thread before the leader hands the loop a turn (a save that commits there
# suspends nowhere: a caller saving in a loop would otherwise hold it for as long as it saves).
_INLINE_TURN = 8
_AUTOCHECKPOINT = 1000  # SQLite's wal_autocheckpoint (frames), which the store leaves at its default
_FRAMES_PER_ROW, _FRAMES_MARGIN = 8, 32  # pages a save may write: per message (rows, indexes, queue) and besides

SaveHook = Callable[[sqlite3.Connection, Sequence[Message]], None]

class SaveSpec:
    """A ``save_messages`` job as data, so consecutive saves in a group run as bulk statements."""

    __slots__ = ("after", "fence", "messages", "resources", "rows", "thread_id")

    def __init__(self, thread_id: str, rows: list[Row], messages: Sequence[Message], after: SaveHook | None,
                 fence: Callable[[sqlite3.Connection], None]) -> None:
        self.thread_id = thread_id
        self.rows = rows
        self.messages = messages
        self.resources = {m.resource_id for m in messages}
        self.after = after
        self.fence = fence  # the lease check of this save (run inside the transaction, before anything else)


class Job:
    """One queued write: the function, its outcome, and the event its caller waits on."""

    __slots__ = ("bulk", "done", "error", "fn", "link", "started", "value", "wake")

    def __init__(
        self, fn: Callable[[sqlite3.Connection], Any], link: SpanContext | None, bulk: SaveSpec | None = None
    ) -> None:
        self.fn = fn
        self.bulk = bulk
        self.link = link
        self.started = False
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        # Set while the caller is parked; a plain asyncio future (like the actors' replies): an anyio Event
        # costs a backend lookup per creation, twice per save on the hot path.
        self.wake: Reply[None] | None = None

    def rouse(self) -> None:
        """Wake the parked caller (to collect its result, or to take over as the writer)."""
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)


def translate(exc: BaseException) -> BaseException:
    """sqlite3 errors become ``StorageError`` (cause chained); everything else passes through."""
    if isinstance(exc, sqlite3.Error):
        err = StorageError(f"SQLite error: {exc}")
        err.__cause__ = exc
        return err
    return exc


def fail_all(jobs: Iterable[Job], message: str, cause: BaseException | None) -> None:
    for job in jobs:
        err = StorageError(message)
        err.__cause__ = cause
        job.error = err
        job.value = None


def run_one(conn: sqlite3.Connection, jobs: list[Job], index: int) -> bool:
    """Run one job in its own savepoint; False when SQLite aborted the whole transaction."""
    job = jobs[index]
    try:
        conn.execute("SAVEPOINT j")
        job.value = job.fn(conn)
        conn.execute("RELEASE j")
    except Exception as exc:
        job.error = translate(exc)
        job.value = None
        try:
            conn.execute("ROLLBACK TO j")
            conn.execute("RELEASE j")
        except sqlite3.Error:
            pass
        if not conn.in_transaction:  # SQLite aborted the whole transaction (disk full, I/O error ...)
            fail_all(jobs[:index] + jobs[index + 1:], f"the write transaction was aborted: {exc}", exc)
            return False
    except BaseException:
        conn.rollback()
        raise
    return True


def run_saves(conn: sqlite3.Connection, run: list[Job]) -> bool:
    """Consecutive save jobs as bulk statements: one owner lookup, one id lookup, one upsert, one bump.

    Few statements matter beyond SQLite's own cost: sqlite3 releases the GIL around every step and must win
    it back afterwards, which under load means waiting for the busy event loop; a multi-row statement is one
    step where ``executemany`` is one per row.

    Each job is validated on its own (thread exists, owner, no id of another thread — including ids claimed
    by an earlier job of the run), so a bad batch fails alone. Returns False (nothing written) when a
    statement fails; the caller then runs the jobs one by one in savepoints.
    """
    conn.execute("SAVEPOINT bulk")
    try:
        thread_ids = list(dict.fromkeys(job.bulk.thread_id for job in run if job.bulk is not None))
        owners: dict[str, str] = {}
        for chunk in chunks(thread_ids):
            owners.update(conn.execute(
                f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({placeholders(len(chunk))})', chunk))
        all_ids = list(dict.fromkeys(row[0] for job in run if job.bulk is not None for row in job.bulk.rows))
        known: dict[str, tuple[str, str]] = {mid: (tid, created) for mid, tid, created in existing(conn, all_ids)}
        rows: list[Row] = []
        touched: list[str] = []
        hooks: list[SaveSpec] = []
        for job in run:
            spec = job.bulk
            assert spec is not None
            try:
                spec.fence(conn)
                owner = owners.get(spec.thread_id)
                if owner is None:
                    raise ThreadNotFound(spec.thread_id)
                if spec.resources != {owner}:
                    check_owner(spec.thread_id, owner, spec.messages)
                local: dict[str, tuple[str, str]] = {}
                kept: dict[str, str] = {}
                for row in spec.rows:
                    mid = row[0]
                    prior = local.get(mid) or known.get(mid)
                    if prior is not None and prior[0] != spec.thread_id:
                        raise MessageIdTaken(mid, prior[0], spec.thread_id)
                    if prior is None:
                        local[mid] = (spec.thread_id, row[5])
                    elif prior[1] != row[5]:
                        kept[mid] = prior[1]
            except ThreadmindError as exc:
                job.error = exc
                job.value = None
                continue
            known.update(local)
            rows.extend(spec.rows)
            touched.append(spec.thread_id)
            if spec.after is not None:
                hooks.append(spec)
            job.value = kept
        if rows:
            upsert(conn, rows)
            enqueue(conn, (row[0] for row in rows))
            bump(conn, dict.fromkeys(touched), to_iso(utc_now()))
        by_hook: dict[SaveHook, list[Message]] = {}
        for spec in hooks:  # one call per distinct hook, with every message of the run
            assert spec.after is not None
            by_hook.setdefault(spec.after, []).extend(spec.messages)
        for hook, messages in by_hook.items():
            hook(conn, messages)
        conn.execute("RELEASE bulk")
    except sqlite3.Error:
        conn.execute("ROLLBACK TO bulk")
        conn.execute("RELEASE bulk")
        for job in run:
            job.error = None
            job.value = None
        return False
    return True


def run_single(conn: sqlite3.Connection, job: Job) -> None:
    """A group of one (every save of a lone caller): the transaction itself is the job's atomic unit.

    Two statements fewer than a savepoint per job; on failure the whole transaction rolls back, which for a
    single job is exactly what its savepoint would have undone.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        fail_all([job], f"could not start a write transaction: {exc}", exc)
        return
    _run_begun(conn, job)


def run_inline(conn: sqlite3.Connection, job: Job) -> bool:
    """:func:`run_single` on the event loop's thread, for a short job when nothing waits: False, with nothing
    done, when the write lock is not free at once (another connection holds it; the caller then takes the
    writer thread, where waiting for it blocks nothing). ``conn``'s busy timeout must be 0."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    _run_begun(conn, job)
    return True


def _run_begun(conn: sqlite3.Connection, job: Job) -> None:
    try:
        job.value = job.fn(conn)
    except Exception as exc:
        job.error = translate(exc)
        job.value = None
        if conn.in_transaction:
            conn.rollback()
        return
    except BaseException:
        conn.rollback()
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.rollback()
        fail_all([job], f"commit failed, nothing in this group was written: {exc}", exc)


def run_group(conn: sqlite3.Connection, jobs: list[Job]) -> None:
    """One transaction for the whole group; runs of saves in bulk, other jobs in savepoints; one COMMIT."""
    if len(jobs) == 1:
        run_single(conn, jobs[0])
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        fail_all(jobs, f"could not start a write transaction: {exc}", exc)
        return
    index = 0
    while index < len(jobs):
        end = index
        while end < len(jobs) and jobs[end].bulk is not None:
            end += 1
        if end - index > 1 and run_saves(conn, jobs[index:end]):
            index = end
            continue
        for position in range(index, max(end, index + 1)):
            if not run_one(conn, jobs, position):
                return
        index = max(end, index + 1)
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.rollback()
        fail_all(jobs, f"commit failed, nothing in this group was written: {exc}", exc)


def checkpoint_first(conn: sqlite3.Connection, copying: threading.Lock) -> None:
    """(writer thread, outside a transaction) A PASSIVE checkpoint before a group whose commit could take the WAL
    past ``wal_autocheckpoint``. With every frame copied back and no commit since, the group's transaction reads
    from the database file alone, so its first write rewinds the WAL: the saves after it commit on the event
    loop's thread again at once, instead of each waiting for the writer thread until SQLite's own checkpoint in
    some COMMIT rewinds it. A checkpoint that fails only leaves that to SQLite.

    ``copying`` is held by the background copy (:func:`checkpoint_if_large`) while it runs: SQLite answers a
    second checkpoint with SQLITE_BUSY at once, never waiting, so without the wait here a copy under way turned
    the rewind into a no-op and every save until the next one left the loop too (3 such of 6 rewinds in a run
    under CPU and disk load). The wait is the rest of a copy this checkpoint would otherwise redo."""
    with copying:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass


def checkpoint_if_large(conn: sqlite3.Connection, wal: str, copying: threading.Lock) -> None:
    """(checkpointer thread) A PASSIVE checkpoint when the WAL has grown past the threshold, holding ``copying``
    (see :func:`checkpoint_first`)."""
    try:
        size = os.path.getsize(wal)
    except OSError:
        return
    if size >= _WAL_CHECKPOINT_BYTES:
        with copying:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def read_tx(fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    """Wrap a read in one read transaction so multi-statement reads see one snapshot."""

    def run(conn: sqlite3.Connection) -> T:
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    return run



class GroupWriter:
    """The writer of one ``SQLiteStore``: jobs queue up, one caller at a time commits them (see the module).

    :param path: the database file (its WAL is watched, see :meth:`_inline`).
    :param max_batch: most jobs committed in one group transaction.
    :param synchronous: the writer connection's ``synchronous`` level.
    :param busy_timeout_ms: how long the writer waits for another connection's lock.
    """

    def __init__(self, path: str, *, max_batch: int, synchronous: str, busy_timeout_ms: int) -> None:
        self._path = path
        self._max_batch = max_batch
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: aiosqlite.Connection | None = None
        self._checkpointer: aiosqlite.Connection | None = None
        self._peers: Peers | None = None
        self._queue: deque[Job] = deque()
        self._writing = False
        self._commits = 0
        self._jobs = 0
        self._largest = 0
        self._last_group = 1
        self._arrival = anyio.Event()
        self._checkpointing = False
        self._copying = threading.Lock()  # held by a checkpoint on a thread (see checkpoint_first)
        self._checked_at = 0
        self._wal_index = WalIndex(path)  # how full the WAL is (see _inline)
        self._waits_for_locks = True  # the writer connection's busy_timeout is busy_timeout_ms (not 0)
        self._inline_commits = 0
        self._inline_streak = 0  # commits on the loop since one that suspended (see _INLINE_TURN)
        #: ``save_messages`` calls under way (a lone caller's save may commit on the loop, see :meth:`_inline`).
        self.saving = 0

    def attach(self, writer: aiosqlite.Connection, checkpointer: aiosqlite.Connection, peers: Peers) -> None:
        """The store opened: commit on ``writer``, checkpoint on ``checkpointer``, ``peers`` on the file."""
        self._writer, self._checkpointer, self._peers = writer, checkpointer, peers

    def detach(self) -> None:
        """The store closed its connections (after a last job, see ``SQLiteStore.aclose``)."""
        self._writer = self._checkpointer = None
        self._wal_index.close()

    def counters(self) -> tuple[int, int, int, int, int]:
        """Group commits, jobs, largest group, jobs queued now, commits made on the event loop's thread."""
        return self._commits, self._jobs, self._largest, len(self._queue), self._inline_commits

    async def submit(
        self, fn: Callable[[sqlite3.Connection], T], bulk: SaveSpec | None = None, defer: float = 0.0
    ) -> T:
        """Run ``fn`` in the next group's transaction and return what it returns (its error raised here alone).
        ``bulk``: a save, committed with the group's other saves as bulk statements. ``defer``: background work
        waits up to this long for a write to carry it."""
        link: SpanContext | None = None
        if tracing_enabled():
            context = trace.get_current_span().get_span_context()
            link = context if context.is_valid else None
        job = Job(fn, link, bulk)
        self._queue.append(job)
        self._arrival.set()
        led = False
        try:
            if defer and not self._writing:
                # Background work: let the next write lead and carry this job in its group (it rouses us).
                job.wake = new_reply()
                with anyio.move_on_after(defer):
                    await job.wake
            while not job.done:
                if not self._writing:
                    led = True
                    await self._lead(job)
                    continue
                job.wake = new_reply()
                await job.wake
        except BaseException:
            if not job.started:
                try:
                    self._queue.remove(job)
                except ValueError:  # pragma: no cover - an unstarted job is always queued
                    pass
            if not self._writing and self._queue:
                self._queue[0].rouse()  # hand the writer role on
            raise
        self._maybe_checkpoint()
        if led and self._inline_streak >= _INLINE_TURN:
            self._inline_streak = 0
            await anyio.lowlevel.cancel_shielded_checkpoint()  # a turn for the loop's other work; committed is kept
        if led:
            # A leader cancelled while it wrote (shielded) still gets the cancellation (its job committed).
            # A parked caller needs no check: its wait above was the cancellation point.
            await anyio.lowlevel.checkpoint_if_cancelled()
        if job.error is not None:
            raise job.error
        result: T = job.value
        return result

    def _maybe_checkpoint(self) -> None:
        """Every ``_CHECK_EVERY`` commits, check the WAL and checkpoint it (PASSIVE) when large, in the background.

        This runs on a third connection; PASSIVE never blocks writers. It copies most frames ahead of time, so
        the writer's own auto-checkpoint (which must stay: only it can let the WAL restart under a steady
        stream of writes) finds little left to copy in its COMMIT. No caller waits for it: when one did, every
        16th save paid the hop and one in ~60 the copy (median 1.7 ms, up to 7 ms, in the agent benchmark).
        Closing the store waits for it, as the connection's close is queued behind it. The checkpointer thread
        clears ``_checkpointing`` itself (a flag only read here): a lone caller whose saves commit on this thread
        may not hand the event loop a turn for a hundred saves, and a flag cleared by a callback on the loop left
        the WAL uncopied that long, so the COMMIT that rewound it copied most of it while its caller waited.
        """
        checkpointer = self._checkpointer
        if checkpointer is None or self._checkpointing or self._commits - self._checked_at < _CHECK_EVERY:
            return
        self._checked_at = self._commits
        self._checkpointing = True
        wal = self._path + "-wal"

        def job(conn: sqlite3.Connection) -> None:
            try:
                checkpoint_if_large(conn, wal, self._copying)
            except (sqlite3.Error, OSError):  # a skipped checkpoint only lets the WAL grow a little
                pass
            finally:
                self._checkpointing = False

        try:
            post_to_connection_thread(checkpointer, job)
        except ValueError:  # the connection is closing
            self._checkpointing = False

    async def _lead(self, own: Job) -> None:
        """Act as the writer: commit groups from the queue until ``own`` is done, then hand over."""
        self._writing = True
        try:
            with anyio.CancelScope(shield=True):
                while not own.done and self._queue:
                    await self._gather()
                    batch = [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]
                    self._last_group = max(len(batch), self._last_group - 1)  # jumps up, decays slowly
                    for job in batch:
                        job.started = True
                    await self._commit(batch)
                    for job in batch:
                        job.done = True
                        job.rouse()
        finally:
            self._writing = False
            if self._queue:
                self._queue[0].rouse()

    async def _gather(self) -> None:
        """Under concurrency, give the callers of the last group a moment to queue their next job.

        A caller whose job is committing cannot queue its next one, so without this the groups alternate
        between halves of the callers. Only when the last group had several jobs (never for one caller),
        and at most ``_LINGER`` seconds: a fraction of the fsync it saves.
        """
        target = min(self._last_group, self._max_batch)
        if target <= 1 or len(self._queue) >= target:
            return
        deadline = anyio.current_time() + _LINGER
        while len(self._queue) < target:
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return
            self._arrival = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._arrival.wait()

    async def _commit(self, batch: list[Job]) -> None:
        if not tracing_enabled():  # no SDK: not even a no-op span on the hot path
            await self._write_group(batch)
        else:
            links = [Link(job.link) for job in batch if job.link is not None]
            with get_tracer().start_as_current_span(
                "threadmind.store.group_commit", links=links,
                attributes={ATTR_DB_SYSTEM: "sqlite", "threadmind.store.group_size": len(batch)},
            ):
                await self._write_group(batch)
        self._commits += 1
        self._jobs += len(batch)
        self._largest = max(self._largest, len(batch))

    async def _write_group(self, batch: list[Job]) -> None:
        writer = self._writer
        try:
            if writer is None:
                raise StorageError(f"SQLiteStore({self._path!r}) is closed")
            raw = self._inline_connection(writer) if self._inline(batch) else None
            if raw is not None and run_inline(raw, batch[0]):
                self._inline_commits += 1
                self._inline_streak += 1
                return
            self._inline_streak = 0
            rewind = self._rewinds(batch)

            def job(conn: sqlite3.Connection) -> None:
                if rewind:
                    checkpoint_first(conn, self._copying)
                run_group(self._waiting_connection(conn), batch)

            await in_connection_thread(writer, job)
        except Exception as exc:
            fail_all(batch, f"the write group failed: {exc}", exc)

    def _inline(self, batch: list[Job]) -> bool:
        """Whether this group may commit on the event loop's thread: one short save of a lone caller (saves under
        way at once are committed in groups on the writer thread: 19 000 against 15 000 messages/s with 16 in
        flight at NORMAL), at a ``synchronous`` level
        whose commit does not wait for the disk (NORMAL, OFF: WAL commits are not synced), no other process on
        the file (its lock would be waited for), and the WAL far enough from ``wal_autocheckpoint`` that this
        commit cannot start SQLite's own checkpoint (which syncs: up to 5 ms measured; the commit that may is left
        to the writer thread). A save of a lone caller then skips two thread hops (about 70 µs of its 90 here)."""
        if len(batch) != 1 or self._synchronous == "FULL" or self.saving > 1:
            return False
        spec = batch[0].bulk
        if spec is None or len(spec.rows) > _INLINE_ROWS:
            return False
        peers = self._peers
        if peers is None or not peers.alone():
            return False
        frames = self._frames_after(batch)
        return frames is not None and frames < _AUTOCHECKPOINT

    def _rewinds(self, batch: list[Job]) -> bool:
        """Whether ``batch``, leaving the loop, should checkpoint first (see :func:`checkpoint_first`): only where
        saves commit on the loop, the one place the rewind pays (not at FULL, no other process on the file);
        elsewhere SQLite's own checkpoint rewinds the WAL in the COMMIT that takes it past the mark."""
        if self._synchronous == "FULL":
            return False
        peers = self._peers
        if peers is None or not peers.alone():
            return False
        frames = self._frames_after(batch)
        return frames is not None and frames >= _AUTOCHECKPOINT

    def _frames_after(self, batch: list[Job]) -> int | None:
        """At most how many frames the WAL holds once ``batch`` commits (None: its wal-index cannot be read)."""
        frames = self._wal_index.frames()
        if frames is None:
            return None
        return frames + _FRAMES_PER_ROW * sum(len(job.bulk.rows) if job.bulk else 1 for job in batch) + _FRAMES_MARGIN

    def _inline_connection(self, writer: aiosqlite.Connection) -> sqlite3.Connection | None:
        """The writer's sqlite3 connection, set not to wait for locks (a wait would hold the event loop); None
        when it is closing."""
        raw: sqlite3.Connection | None = writer._connection  # the writer thread is idle: this leader is its user
        if raw is None:
            return None
        if self._waits_for_locks:
            raw.execute("PRAGMA busy_timeout = 0")
            self._waits_for_locks = False
        return raw

    def _waiting_connection(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """(writer thread) ``conn`` set to wait ``busy_timeout_ms`` for another connection's lock."""
        if not self._waits_for_locks:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            self._waits_for_locks = True
        return conn
