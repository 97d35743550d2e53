"""``SQLiteStore``: Mastra's libsql memory schema on aiosqlite, with group commit.

Layout and encodings are Mastra's (reference §5): dates as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` text, message content
as compact JSON text, metadata written as JSON text and read from JSON text or Mastra's JSONB blobs.

**Ordering.** Messages sort by (``createdAt``, ``rowid``). ``mastra_messages`` has a TEXT primary key, so it
is a rowid table and ``rowid`` is the insertion order: a new row gets a rowid above every existing one, and
the upsert ``ON CONFLICT(id) DO UPDATE`` updates the row in place, keeping both its rowid and its
``createdAt``. So equal timestamps never reorder, across saves and across reopenings of a Mastra file
(which wrote its rows the same way); no column is added to Mastra's table.

**Connections.** WAL mode; one writer connection (autocommit, explicit ``BEGIN IMMEDIATE``) and one reader
connection, so reads proceed while a write commits. A write's result is delivered only after COMMIT, so a
later read always sees it (read-your-writes).

**Group commit** and the short saves committed on the event loop's thread: see ``_group_commit``.

``execute_write`` and ``execute_read`` are public extension points: the vector layer keeps its own
``threadmind_*`` tables in the same file through them.
"""

from __future__ import annotations

import enum
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar

import aiosqlite
import anyio

from ...codecs import Message, Resource, Thread
from ...errors import (
    ConfigError,
    StorageError,
    ValidationError,
)
from ...tracing import ATTR_DB_SYSTEM, get_tracer, tracing_enabled
from .._keywords import KeywordMatches, Neighbours
from .._om import ObservationalMemoryStore, SQLiteOMStore
from .._protocol import (
    UNSET,
    Lease,
    MessagePage,
    MessageQuery,
    ResourceChange,
    ThreadChange,
    ThreadPage,
    UnsetType,
)
from .._query import (
    check_owner,
    check_resource_args,
    encode_metadata,
    parse_updates,
    saved,
    stored_thread,
    validate_delete_ids,
    validate_messages,
    validate_thread,
    validate_thread_list,
)
from .._vector_records import SQLiteVectorRecords
from .._versions import FileCounts, WriteCounts, counts_for_file
from ._aiosqlite import (
    close_connection,
    connect,
    in_connection_thread,
)
from ._file_leases import FileLeases
from ._group_commit import (
    GroupWriter,
    SaveHook,
    SaveSpec,
    StoreStatistics,
    read_tx,
)
from ._jobs import (
    created_reader,
    delete_message_rows,
    delete_thread_rows,
    file_stats,
    insert_thread,
    message_reader,
    messages_by_id,
    modify_resource_row,
    modify_thread_row,
    move_thread,
    save_one,
    save_parts,
    thread_list_reader,
    update_message_rows,
    update_thread_row,
    upsert_resource,
)
from ._keyword_index import SQLiteKeywordIndex
from ._open import setup_reader, setup_writer
from ._peers import Peers, peers_for
from ._rows import (
    CHUNK,
    SortKey,
    fetch_thread_row,
    message_from_row,
    message_row,
    page_after,
    resource_from_row,
    row_time,
    thread_from_row,
)

__all__ = ("SQLiteStore",)

T = TypeVar("T")

_SYNC_MODES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


# -- the store ----------------------------------------------------------------------------------------


class SQLiteStore:
    """Durable threads, messages and resources in one SQLite file (Mastra-compatible schema).

    :param path: database file; created if missing. An existing Mastra ``memory.db`` opens unchanged.
    :param synchronous: SQLite ``synchronous`` pragma (``FULL`` default: every commit is durable).
    :param busy_timeout_ms: how long a statement waits for another process's lock (and how long opening keeps
        trying to switch a new file to WAL, see :func:`switch_to_wal`).
    :param max_batch: most write jobs committed in one group transaction.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 5000,
        max_batch: int = 256,
    ) -> None:
        self._path = os.fspath(path)
        # Write counts per thread and resource (see ``_versions``); shared with every store object on the same
        # file once open.
        self._file_counts = FileCounts()
        self._versions = self._file_counts.threads
        self._resource_versions = self._file_counts.resources
        if self._path == ":memory:" or not self._path:
            raise ConfigError("SQLiteStore needs a file path (use InMemoryStore for an ephemeral store)")
        folder = os.path.dirname(os.path.abspath(self._path))
        if not os.path.isdir(folder):
            raise ConfigError(f"SQLiteStore({self._path!r}): the folder {folder!r} does not exist; create it first "
                              "(the database file itself is created when missing)")

        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNC_MODES:
            raise ConfigError(f"synchronous must be one of {sorted(_SYNC_MODES)}, got {synchronous!r}")
        if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
            raise ConfigError(f"busy_timeout_ms must be a non-negative integer, got {busy_timeout_ms!r}")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ConfigError(f"max_batch must be a positive integer, got {max_batch!r}")
        self._synchronous = synchronous.upper()
        self._busy_timeout_ms = busy_timeout_ms
        self._state = _State.NEW
        self._open_lock = anyio.Lock()
        self._closed = anyio.Event()
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._checkpointer: aiosqlite.Connection | None = None
        self._group = GroupWriter(self._path, max_batch=max_batch, synchronous=self._synchronous,
                                  busy_timeout_ms=busy_timeout_ms)
        self._vector_records: SQLiteVectorRecords | None = None
        # The keyword index's side in this process: searched scopes kept in memory, background folds.
        self._keywords = SQLiteKeywordIndex(
            read=self.execute_read, write=self.execute_write, epoch=self.cache_epoch,
            writes=lambda: self._versions.total, connection=lambda: self._checkpointer)
        self._peers: Peers | None = None
        self._volatile = 0  # counts down: the versions handed out while another process may be writing
        self._leases = FileLeases(lambda: self._peers, read=self.execute_read, write=self.execute_write)

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r}, state={self._state.value})"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def statistics(self) -> StoreStatistics:
        """Writer counters (group commits, jobs, largest group, queued now)."""
        commits, jobs, largest, queued, inline = self._group.counters()
        return StoreStatistics(commits=commits, jobs=jobs, largest_group=largest, queued=queued,
                               inline_commits=inline)

    # -- lifecycle -----------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open both connections, switch to WAL and create missing tables; idempotent.

        :raises StorageError: the store is closed, or the file cannot be opened.
        """
        if self._opened():
            await anyio.lowlevel.checkpoint()
            return
        async with self._open_lock:
            if self._opened():
                return
            if self._state is not _State.NEW:
                raise StorageError(f"{self!r} is closed")
            writer = reader = checkpointer = None
            try:
                # check_same_thread off: a short save may commit on the event loop's thread while the writer's is
                # idle (see _group_commit); the group-commit leader is the connection's one user at any time.
                writer = await connect(self._path, isolation_level=None, cached_statements=256,
                                       check_same_thread=False)
                await in_connection_thread(writer, lambda conn: setup_writer(conn, self._path, self._synchronous,
                                                                        self._busy_timeout_ms))
                reader = await connect(self._path, isolation_level=None, cached_statements=256)
                await in_connection_thread(reader, lambda conn: setup_reader(conn, self._busy_timeout_ms))
                checkpointer = await connect(self._path, isolation_level=None)
                await checkpointer.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
                # background keyword folds commit here unsynced (see _fold); checkpoints still sync
                if self._synchronous != "OFF":
                    await checkpointer.execute("PRAGMA synchronous = NORMAL")
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    for conn in (checkpointer, reader, writer):
                        if conn is not None:
                            await close_connection(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"cannot open {self._path!r}: {exc}") from exc
                raise
            info = os.stat(self._path)
            identity = (info.st_dev, info.st_ino)
            try:
                peers = peers_for(self._path, identity)
                peers.attach()
            except OSError as exc:
                with anyio.CancelScope(shield=True):
                    for conn in (checkpointer, reader, writer):
                        await close_connection(conn)
                raise StorageError(f"cannot open the lock file beside {self._path!r}: {exc}") from exc
            self._peers = peers
            self._file_counts = counts_for_file(identity)
            self._versions, self._resource_versions = self._file_counts.threads, self._file_counts.resources
            self._writer, self._reader, self._checkpointer = writer, reader, checkpointer
            self._group.attach(writer, checkpointer, peers)
            self._state = _State.OPEN

    def _opened(self) -> bool:
        return self._state is _State.OPEN

    async def aclose(self) -> None:
        """Run every queued write, then close both connections (their threads end); idempotent."""
        with anyio.CancelScope(shield=True):
            async with self._open_lock:
                if self._state is _State.CLOSING:  # another task is closing: wait for it to finish
                    closing = True
                elif self._state is not _State.OPEN:
                    self._state = _State.CLOSED
                    return
                else:
                    closing = False
                    self._state = _State.CLOSING
            if closing:
                await self._closed.wait()
                return
            try:
                # A no-op job queued last: when it has run, everything queued before it has committed.
                with get_tracer().start_as_current_span("threadmind.store.close",
                                                        attributes={ATTR_DB_SYSTEM: "sqlite"}):
                    await self._group.submit(lambda conn: None)

            finally:
                self._state = _State.CLOSED
                self._keywords.close()
                for conn in (self._checkpointer, self._reader, self._writer):
                    if conn is not None:
                        await close_connection(conn)
                self._reader = self._writer = self._checkpointer = None
                self._group.detach()
                if self._peers is not None:
                    self._peers.detach()
                self._closed.set()

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _ready(self) -> None:
        if self._state is _State.OPEN:
            return
        if self._state is _State.NEW:
            await self.open()
            return
        raise StorageError(f"{self!r} is closed")

    async def _idle_checkpoint(self) -> None:
        """For calls with nothing to do: still fail on a closed store and yield once (trio's rule)."""
        await self._ready()
        await anyio.lowlevel.checkpoint()

    # -- the two extension points ----------------------------------------------------------------------

    async def execute_write(self, fn: Callable[[sqlite3.Connection], T], *, defer: float = 0.0) -> T:
        """Run ``fn(conn)`` as one job of a group transaction on the writer connection; return its result.

        ``fn`` runs in its own SAVEPOINT: if it raises, its changes are rolled back and the exception (sqlite3
        errors as ``StorageError``) reaches this caller only. The result is delivered after COMMIT. ``fn`` must
        not commit, roll back or open its own transaction.

        ``defer`` is for background writes that no caller is waiting on (write-behind): when no group is being
        written, the job waits up to ``defer`` seconds for another write to share its commit instead of paying
        a commit of its own (at most 60 s). It still commits in queue order.
        """
        if not 0.0 <= defer <= 60.0:  # also refuses NaN
            raise ValidationError(f"`defer` must be between 0 and 60 seconds, got {defer!r}")
        await self._ready()
        return await self._group.submit(fn, defer=defer)

    async def _write_counted(self, fn: Callable[[sqlite3.Connection], T], counts: WriteCounts,
                             keys: Iterable[str]) -> T:
        """``execute_write(fn)``, then one write counted for each of ``keys`` (read once ``fn`` has run, so a
        job may fill them in), whether it succeeded or not: a thread or resource actor re-reads either way."""
        try:
            return await self.execute_write(fn)
        finally:
            counts.bump(keys)

    async def execute_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the reader connection inside one read transaction (one consistent snapshot)."""
        await self._ready()
        reader = self._reader
        if reader is None:  # pragma: no cover - _ready guarantees an open reader
            raise StorageError(f"{self!r} is closed")
        try:
            if not tracing_enabled():  # no SDK: not even a no-op span on the hot path
                return await in_connection_thread(reader, read_tx(fn))
            with get_tracer().start_as_current_span("threadmind.store.read", attributes={ATTR_DB_SYSTEM: "sqlite"}):
                return await in_connection_thread(reader, read_tx(fn))
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite error: {exc}") from exc
        except ValueError as exc:
            if self._state is not _State.OPEN:
                raise StorageError(f"{self!r} is closed") from exc
            raise

    # -- threads -----------------------------------------------------------------------------------------

    async def create_thread(self, thread: Thread) -> Thread:
        """Insert a new thread; ``ValidationError`` if the id exists."""
        validate_thread(thread)
        stored, meta = stored_thread(thread)
        return await self._write_counted(insert_thread(stored, meta), self._versions, (stored.id,))

    @property
    def write_counts(self) -> FileCounts:
        """The write counters of this store's file, shared by every store object on it in this process once
        open (see ``_versions``)."""
        return self._file_counts

    def read_elsewhere(self) -> bool:
        """Whether another store object may read this file now: one of another process, or another of this
        process (a second ``Memory`` on the file), each with its own caches and vector index."""
        peers = self._peers
        return peers is not None and (peers.in_process() > 1 or not peers.alone())

    def cache_epoch(self) -> int | None:
        """None while another process may write this file; else a number that changes whenever this process
        starts trusting its caches again (what was kept before another process came and went is stale)."""
        peers = self._peers
        if peers is None:
            return 0
        return peers.epoch if peers.alone() else None

    def thread_version(self, thread_id: str) -> int:
        """How many write calls through this store object, or another on the same file in this process, touched
        the thread (see ``_versions``); a new value on every call while another process may be writing."""
        peers = self._peers
        if peers is not None and not peers.alone():
            self._volatile -= 1
            return self._volatile
        return self._versions.get(thread_id) + self._epoch_offset()

    def resource_version(self, resource_id: str) -> int:
        """As :meth:`thread_version`, for a resource."""
        peers = self._peers
        if peers is not None and not peers.alone():
            self._volatile -= 1
            return self._volatile
        return self._resource_versions.get(resource_id) + self._epoch_offset()

    def _epoch_offset(self) -> int:
        """Moves every version once each time this process is alone again after sharing the file, so caches
        built while others could write are dropped (0 until then)."""
        peers = self._peers
        return max(0, peers.epoch - 1) << 40 if peers is not None else 0

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread or None."""
        row = await self.execute_read(lambda conn: fetch_thread_row(conn, thread_id))
        return None if row is None else thread_from_row(row)

    async def list_threads(
        self,
        *,
        resource_id: str | None = None,
        page: int = 0,
        per_page: int | bool = 100,
        order_by: Literal["created_at", "updated_at"] = "created_at",
        direction: Literal["ASC", "DESC"] = "DESC",
        metadata: Mapping[str, Any] | None = None,
    ) -> ThreadPage:
        """Threads filtered by owner and scalar metadata equality (reference §5.3)."""
        args = validate_thread_list(page, per_page, order_by, direction, metadata)
        total, rows = await self.execute_read(thread_list_reader(resource_id, args))
        threads = [thread_from_row(row) for row in rows]
        has_more = args.limit is not None and args.offset + args.limit < total
        return ThreadPage(threads=threads, total=total, page=page, per_page=per_page, has_more=has_more)

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Set the title (when given), shallow-merge metadata, bump ``updated_at``; ``ThreadNotFound``."""
        if title is not None and not isinstance(title, str):
            raise ValidationError("title must be a string or None")
        encode_metadata(metadata, "metadata")  # validate before queuing
        return await self._write_counted(update_thread_row(thread_id, title, metadata), self._versions, (thread_id,))

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread and its messages in one transaction (no error when missing)."""
        await self._write_counted(delete_thread_rows(thread_id), self._versions, (thread_id,))

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        """Move a thread and all its messages to another resource in one transaction."""
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise ValidationError("resource_id must be a non-empty string")
        moved = await self._write_counted(move_thread(thread_id, resource_id), self._versions, (thread_id,))
        self._keywords.fold_soon()
        return moved

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        """Insert a new thread and its messages atomically (used by clone)."""
        validate_thread(thread)
        messages = validate_messages(thread.id, messages)
        check_owner(thread.id, thread.resource_id, messages)
        stored, meta = stored_thread(thread)
        job = insert_thread(stored, meta, [message_row(m) for m in messages])
        created = await self._write_counted(job, self._versions, (stored.id,))
        self._keywords.fold_soon()
        return created

    # -- messages ----------------------------------------------------------------------------------------

    async def save_messages(
        self, thread_id: str, messages: Sequence[Message], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> list[Message]:
        """Upsert messages of one thread atomically, in order (see the ``Store`` protocol).

        ``mark_pending``: the vector layer's pending marks are written inside the same transaction. ``fence``: the
        save checks the lease in its transaction (see :meth:`FileLeases.fence_check`).
        """
        messages = validate_messages(thread_id, messages)
        if not messages:
            await self._idle_checkpoint()
            return []
        self._group.saving += 1
        try:
            return await self._save(thread_id, messages, mark_pending, fence)
        finally:
            self._group.saving -= 1

    async def _save(self, thread_id: str, messages: list[Message], mark_pending: bool,
                    fence: Lease | None) -> list[Message]:
        rows = [message_row(m) for m in messages]
        after = await self._pending_hook(mark_pending)
        fenced = self._leases.fence_check(fence)
        await self._ready()
        try:
            kept = await self._group.submit(save_one(thread_id, rows, messages, fenced, after),
                                            SaveSpec(thread_id, rows, messages, after, fenced))
        finally:
            self._versions.bump((thread_id,))
        self._keywords.fold_soon()
        return saved(messages, {mid: row_time(created, f"message {mid!r} createdAt")
                                  for mid, created in kept.items()})

    async def save_messages_many(
        self, by_thread: Mapping[str, Sequence[Message]], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> dict[str, list[Message]]:
        """Upsert the messages of several threads in one transaction: every thread's part, or none of them.

        Each part is checked as :meth:`save_messages` checks its batch; the first refusal (or any SQLite
        error) rolls back every part. ``mark_pending`` marks them all as awaiting vectors in the same
        transaction.
        """
        checked = {thread_id: validate_messages(thread_id, messages) for thread_id, messages in by_thread.items()}
        parts = [(thread_id, [message_row(m) for m in messages], messages)
                 for thread_id, messages in checked.items() if messages]
        if not parts:
            await self._idle_checkpoint()
            return {thread_id: [] for thread_id in by_thread}
        after = await self._pending_hook(mark_pending)
        fenced = self._leases.fence_check(fence)

        kept_per_part = await self._write_counted(save_parts(parts, fenced, after), self._versions,
                                                  [thread_id for thread_id, _, _ in parts])
        self._keywords.fold_soon()
        stored = {thread_id: saved(messages, {mid: row_time(created, f"message {mid!r} createdAt")
                                                for mid, created in kept.items()})
                  for (thread_id, _, messages), kept in zip(parts, kept_per_part, strict=True)}
        return {thread_id: stored.get(thread_id, []) for thread_id in by_thread}

    async def _pending_hook(self, mark_pending: bool) -> SaveHook | None:
        """The in-transaction hook that writes pending vector marks (its tables made first), or None."""
        if not mark_pending:
            return None
        await self.vector_records().ensure_tables()
        return SQLiteVectorRecords.pending_marker

    # -- keyword index -------------------------------------------------------------------------------------

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int, neighbours_of: Sequence[str] | None = None,
                             counts: bool = True) -> KeywordMatches:
        """See :meth:`SQLiteKeywordIndex.search`."""
        return await self._keywords.search(terms, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                          neighbours_of=neighbours_of, counts=counts)

    def cache_statistics(self) -> dict[str, int]:
        """See :meth:`SQLiteKeywordIndex.cache_statistics`."""
        return self._keywords.cache_statistics()

    async def neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        """The messages just before and after each one in its thread."""
        return await self._keywords.neighbours(message_ids)

    async def keyword_backlog(self) -> int:
        """At most how many messages still lack a keyword index row (rows written by Mastra, or by a threadmind
        older than the index)."""
        return await self._keywords.backlog()

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        """See :meth:`SQLiteKeywordIndex.build`."""
        return await self._keywords.build(progress)

    def vector_records(self) -> SQLiteVectorRecords:
        """The vector rows of this file (``threadmind_vectors`` and friends), written on its writer thread."""
        if self._vector_records is None:
            self._vector_records = SQLiteVectorRecords(self)
        return self._vector_records

    def observational_records(self, *, ttl: float | None = None) -> ObservationalMemoryStore:
        """Observational-memory records in Mastra's ``mastra_observational_memory`` table of this file."""
        return SQLiteOMStore(self, ttl)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Page through messages (reference §5.3), with include windows and filters."""
        return await self.execute_read(message_reader(query))

    async def get_thread_with_tail(self, thread_id: str, size: int) -> tuple[Thread | None, MessagePage]:
        """The thread row and its newest ``size`` messages (newest first) in one read transaction.

        What a thread actor needs when both its cached row and its tail have expired: one hop to the reader
        thread instead of two, and one snapshot.
        """
        read_page = message_reader(MessageQuery(thread_id=thread_id, per_page=size, direction="DESC"))

        def read(conn: sqlite3.Connection) -> tuple[Thread | None, MessagePage]:
            row = fetch_thread_row(conn, thread_id)
            return (None if row is None else thread_from_row(row)), read_page(conn)

        return await self.execute_read(read)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by (created_at, sequence); unknown ids skipped."""
        wanted = list(dict.fromkeys(i for i in ids if isinstance(i, str)))
        if not wanted:
            await self._idle_checkpoint()
            return []
        return await self.execute_read(messages_by_id(wanted))

    async def created_times(self, message_ids: Sequence[str], *, resource_id: str | None = None,
                            thread_id: str | None = None) -> dict[str, datetime]:
        """When each message was created (unknown ids left out), read without the messages' content; those of a
        scope searched by words (``resource_id``, ``thread_id``) are kept with its words while it is unchanged."""
        wanted = list(dict.fromkeys(i for i in message_ids if isinstance(i, str)))
        if not wanted:
            await self._idle_checkpoint()
            return {}

        async def read(ids: list[str]) -> dict[str, datetime]:
            found: dict[str, datetime] = await self.execute_read(created_reader(ids))
            return found

        return await self._keywords.created_times(wanted, resource_id=resource_id, thread_id=thread_id, read=read)

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged one level, content.metadata merged); bumps the threads."""
        parsed = parse_updates(updates)
        if not parsed:
            await self._idle_checkpoint()
            return []
        touched: list[str] = []  # filled by the job (in the writer thread) before it returns
        updated = await self._write_counted(update_message_rows(parsed, touched), self._versions, touched)
        self._keywords.fold_soon()
        return updated

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        """Delete messages by id; return the affected thread ids (their ``updated_at`` bumped)."""
        wanted = validate_delete_ids(ids)
        if not wanted:
            await self._idle_checkpoint()
            return set()
        touched: list[str] = []  # filled by the job (in the writer thread) before it returns
        return await self._write_counted(delete_message_rows(wanted, touched), self._versions, touched)

    # -- resources ---------------------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row or None."""
        row = await self.execute_read(lambda conn: conn.execute(
            'SELECT id, "workingMemory", metadata, "createdAt", "updatedAt" FROM mastra_resources WHERE id = ?',
            (resource_id,)).fetchone())
        return None if row is None else resource_from_row(row)

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None | UnsetType = UNSET,
        metadata: Mapping[str, Any] | None = None,
    ) -> Resource:
        """Create the row if missing (metadata ``{}``), else set the given fields (metadata shallow-merged)."""
        check_resource_args(resource_id, working_memory, metadata)
        job = upsert_resource(resource_id, working_memory, metadata)
        return await self._write_counted(job, self._resource_versions, (resource_id,))

    # -- read-modify-writes and leases --------------------------------------------------------------------

    async def modify_thread(
        self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *, fence: Lease | None = None
    ) -> Thread | None:
        """Read the thread and write what ``change`` makes of it in one write transaction (``change`` runs on the
        writer thread, under SQLite's write lock: no process can write between the read and the write)."""
        job = modify_thread_row(thread_id, change, self._leases.fence_check(fence))
        return await self._write_counted(job, self._versions, (thread_id,))

    async def modify_resource(
        self, resource_id: str, change: Callable[[Resource | None], ResourceChange | None], *,
        fence: Lease | None = None,
    ) -> Resource | None:
        """Read the resource (None when missing) and write what ``change`` makes of it, in one write
        transaction."""
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise ValidationError("resource_id must be a non-empty string")
        job = modify_resource_row(resource_id, change, self._leases.fence_check(fence))
        return await self._write_counted(job, self._resource_versions, (resource_id,))

    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        """See :meth:`FileLeases.acquire`."""
        await self._ready()
        return await self._leases.acquire(key, owner=owner, ttl=ttl, wait=wait)

    async def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` back (the lock, or the takeover row)."""
        await self._leases.release(lease)

    async def renew_leases(self, owner: str, ttl: float) -> None:
        """The heartbeat: this process is alive (its locks stand ``ttl`` more), and so do its takeover rows."""
        await self._leases.renew(owner, ttl)

    # -- CLI helpers -------------------------------------------------------------------------------------


    async def stats(self) -> dict[str, int]:
        """Row counts of the memory tables, ``resources`` in use (owning a thread or a working memory) and the
        database size in bytes (pages × page size)."""
        return await self.execute_read(file_stats)

    async def iter_messages(self, thread_ids: Sequence[str] | None = None) -> AsyncIterator[Message]:
        """Every message of the given threads (default: all threads by creation), ascending per thread."""
        if thread_ids is None:
            ids: list[str] = await self.execute_read(lambda conn: [r[0] for r in conn.execute(
                'SELECT id FROM mastra_threads ORDER BY "createdAt", rowid')])
        else:
            ids = list(thread_ids)
        for thread_id in ids:
            after: SortKey = ("", -1)
            while True:
                rows = await self.execute_read(page_after(thread_id, after))
                for row in rows:
                    yield message_from_row(row)
                if len(rows) < CHUNK:
                    break
                after = (rows[-1][4], rows[-1][7])

