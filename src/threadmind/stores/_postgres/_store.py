"""``PostgresStore``: Mastra's ``@mastra/pg`` memory schema on asyncpg, for many processes on many machines.

One database serves Mastra and threadmind (see ``_schema``); encodings and reads follow ``@mastra/pg``
(see ``_rows``). Every query is parameterised. Each write call is one statement in autocommit where one
statement can do all of it (saves, thread and resource updates with their merges done by the server, deletes of
messages), else one short transaction that first locks the thread row (thread deletes and moves, clones, message
updates), so no read-modify-write loses a concurrent update from another process. ``modify_thread`` and
``modify_resource`` read the row ``FOR UPDATE`` and write what the caller's change makes of it in the same
transaction. Ordering is (``"createdAt"``, insertion sequence, id) everywhere.

Leases (an agent turn's hold on its thread) are rows timed by the server's clock, and fenced writes check theirs
inside their own statement or transaction (see ``_lease_rows``). Other hosts may write at any time, so
``thread_version`` and ``resource_version`` change on every call: the actors read through instead of trusting
their caches. The store itself keeps what it can confirm in the same round trip: a thread's newest messages with
the thread row's version (``get_thread_with_tail``), and searched keyword scopes with their version counters
(``_keyword_search``).

``vector_records()`` and ``observational_records()`` give the vector records and the observational-memory records
kept in the same database.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio.lowlevel
import msgspec

from ...codecs import Message, Resource, Thread
from ...codecs._time import utc_now
from ...errors import MessageIdTaken, StorageError, ThreadNotFound, ValidationError
from .._keywords import KeywordMatches
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
    apply_update,
    assemble,
    check_owner,
    check_resource_args,
    encode_content_text,
    encode_metadata,
    parse_updates,
    saved,
    validate_delete_ids,
    validate_thread_list,
)
from .._statistics import StoreStatistics
from .._vector_rows import VectorRows, vector_codec
from .._versions import FileCounts, counts_for_file
from ._keyword_index import PostgresKeywordIndex
from ._lease_rows import LeaseListener, PgLeases, Presence, check_fence, lease_lost
from ._pool import PgPool, check_connection, import_asyncpg, masked, storage_error, transaction
from ._queries import MessageReads
from ._rows import (
    MSG_COLS,
    MSG_FROM,
    RESOURCE_COLS,
    THREAD_COLS,
    THREAD_SEQ,
    Params,
    as_naive,
    check_text,
    from_columns,
    keyed,
    message_from_row,
    metadata_param,
    resource_from_row,
    thread_filter,
    thread_from_row,
)
from ._save import DIAGNOSE_SQL, SAVE_SQL, Part, kept, parts_of, refusal, save_params, save_sql
from ._save_groups import SAVE_STATEMENTS, SaveGroups
from ._schema import FAIL_SQLSTATE
from ._statements import (
    CHUNK,
    CREATE_RESOURCE,
    CREATE_THREAD,
    DELETE_MESSAGES,
    INSERT_MESSAGES,
    MODIFY_RESOURCE,
    STATS_KEYS,
    STATS_SQL,
    UPDATE_MESSAGES,
    UPDATE_RESOURCE,
    UPDATE_THREAD,
    check_lease_args,
    columns,
    page_after,
    resource_params,
    thread_params,
)
from ._tsvector import (
    DELETE_IDS_SQL,
    DELETE_THREAD_SQL,
    MOVE_THREAD_SQL,
    UPSERT_SQL,
    keyword_rows,
)

if TYPE_CHECKING:
    from ._om_records import PostgresOMStore
    from ._vectors import PostgresVectorRecords

#: Threads whose last thread-with-tail answer a store keeps (validated by the thread row's version at each read).
TAILS_KEPT = 4096
_THREAD_VERSION = "SELECT xmin::text FROM mastra_threads WHERE id = $1"

__all__ = ("PostgresStore",)

T = TypeVar("T")
_EXISTS_CODE = "THREADMIND_THREAD_EXISTS"
_LIBSQL = "MASTRA_STORAGE_LIBSQL_"

class PostgresStore:
    """Durable threads, messages and resources in PostgreSQL (Mastra's ``@mastra/pg`` schema).

    :param dsn: ``postgresql://user:password@host:port/database``.
    :param min_size: connections the pool keeps open.
    :param max_size: most connections the pool opens.
    :param statement_cache_size: asyncpg's prepared statements per connection; ``0`` behind PgBouncer in
        transaction mode (lease waiters then poll instead of listening for releases). None keeps asyncpg's
        default.
    :raises ConfigError: a bad option, or asyncpg is not installed (``pip install 'threadmind[postgres]'``).
    """

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10,
                 statement_cache_size: int | None = None) -> None:
        check_connection(dsn, min_size, max_size, statement_cache_size)
        self._dsn = dsn
        self._pool = PgPool(dsn, min_size=min_size, max_size=max_size, statement_cache_size=statement_cache_size)
        self._file_counts = counts_for_file(dsn)  # shared by the process's store objects on it
        self._versions = self._file_counts.threads
        self._resource_versions = self._file_counts.resources
        self._volatile = 0  # counts down: every version handed out is new (other hosts may have written)
        self._keywords = PostgresKeywordIndex(self._read, self._write, self._idle)
        self._groups = SaveGroups(self._save_parts, min(SAVE_STATEMENTS, max_size))  # concurrent saves share
        # (thread, size) -> the last get_thread_with_tail answer and its thread row's version, newest used last
        self._tails: OrderedDict[tuple[str, int], tuple[str, Thread | None, MessagePage]] = OrderedDict()
        self._tail_hits = 0
        # Behind a transaction pooler (statement_cache_size=0, e.g. PgBouncer) a LISTEN would not stay on its
        # session: lease waiters poll there.
        self._listener = LeaseListener(self._pool.connect) if statement_cache_size != 0 else None
        # Likewise a session advisory lock: there, a dead holder's lease ends by expiry only.
        self._presence = Presence(self._pool.connect) if statement_cache_size != 0 else None
        self._leases = PgLeases(self.run_write, self._listener, self._presence)

    def __repr__(self) -> str:
        return f"PostgresStore({masked(self._dsn)!r}, state={self._pool.state})"

    # -- lifecycle -----------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool and create or validate the schema; idempotent.

        :raises StorageError: the store is closed, the server cannot be reached, or the schema is newer.
        """
        await self._pool.open(repr(self))

    async def aclose(self) -> None:
        """Close every connection; idempotent. Later calls raise ``StorageError``."""
        if self._listener is not None:
            await self._listener.aclose()
        if self._presence is not None:
            await self._presence.aclose()
        await self._pool.close()

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def _read(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        return await self._pool.read(fn, repr(self), doing)

    async def _write(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        return await self._pool.write(fn, repr(self), doing)

    async def _counted(self, fn: Callable[[Any], Awaitable[T]], doing: str, keys: Iterable[str],
                       resources: bool = False) -> T:
        """A write counted once for each of ``keys`` (read after it ran), whether it succeeded or not."""
        try:
            return await self._write(fn, doing)
        finally:
            (self._resource_versions if resources else self._versions).bump(keys)

    async def _idle(self) -> None:
        """For calls with nothing to do: still fail on a closed store, and yield once."""
        if self._pool.closed:
            raise StorageError(f"{self!r} is closed")
        await anyio.lowlevel.checkpoint()

    # -- counters --------------------------------------------------------------------------------------

    @property
    def write_counts(self) -> FileCounts:
        """The write counters of this database, shared by every store object on the same DSN in this process."""
        return self._file_counts

    def thread_version(self, thread_id: str) -> int:
        """A new value on every call: processes on other hosts may write the database at any time, so nothing
        read from it is trusted for later (every read by the actors goes to the server)."""
        self._volatile -= 1
        return self._volatile

    def resource_version(self, resource_id: str) -> int:
        """As :meth:`thread_version` (a new value on every call)."""
        self._volatile -= 1
        return self._volatile

    # -- side tables -----------------------------------------------------------------------------------

    # -- keyword index -------------------------------------------------------------------------------------

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int, neighbours_of: Sequence[str] | None = None,
                             counts: bool = True) -> KeywordMatches:
        """See :meth:`PostgresKeywordIndex.search` (its candidates always carry their counts)."""
        return await self._keywords.search(terms, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                           neighbours_of=neighbours_of)

    async def keyword_search_beside(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                                    limit: int,
                                    neighbours_of: Callable[[], Awaitable[Sequence[str]]]) -> KeywordMatches:
        """:meth:`keyword_search` run beside another query (hybrid recall's vector side): the scope's version and
        candidates first, then the neighbours of the candidates and of the ids ``neighbours_of()`` gives (the other
        query's hits, awaited once the candidates are known) in one more statement on the same connection."""
        return await self._keywords.search(terms, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                           neighbours_of=[], later=neighbours_of)

    async def neighbours(self, message_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """The messages just before and after each one in its thread, in one statement."""
        return await self._keywords.neighbours(message_ids)

    def statistics(self) -> StoreStatistics:
        """The group commit of saves (:mod:`._save_groups`): save statements sent, the saves they carried, the
        largest group and the saves waiting now (as ``SQLiteStore.statistics()`` reports its writer)."""
        return self._groups.statistics()

    def cache_statistics(self) -> dict[str, int]:
        """What this store answered from memory after the server confirmed it current: keyword searches
        (``keyword_from_memory``; scopes read to keep: ``keyword_built``, kept now: ``keyword_kept``), messages'
        neighbours (``neighbours_from_memory``) and thread-with-tail reads (``tails_from_memory``)."""
        return {**self._keywords.cache_statistics(), "tails_from_memory": self._tail_hits}

    async def keyword_backlog(self) -> int:
        """How many messages have no keyword row yet (written by Mastra, or by a threadmind older than the index)."""
        return await self._keywords.backlog()

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        """See :meth:`PostgresKeywordIndex.build`."""
        return await self._keywords.build(progress)

    def vector_records(self) -> PostgresVectorRecords:
        """The vector records (``VectorRecords``) in this database's ``threadmind_vector*`` tables."""
        from ._vectors import PostgresVectorRecords

        return PostgresVectorRecords(self)

    def observational_records(self, *, ttl: float | None = None) -> PostgresOMStore:
        """Observational-memory records (``ObservationalMemoryStore``) in ``mastra_observational_memory``.

        ``ttl`` is accepted and unused: other hosts write the same table, so records are always read from the
        server.
        """
        from ._om_records import PostgresOMStore

        return PostgresOMStore(self, ttl)

    async def run_read(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        """Run ``fn(conn)`` on a pooled asyncpg connection as a read (retried on transient failures)."""
        return await self._read(fn, doing)

    async def run_write(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        """Run ``fn(conn)`` as a write (shielded; retried only when provably not applied)."""
        return await self._write(fn, doing)

    # -- threads -----------------------------------------------------------------------------------------

    async def create_thread(self, thread: Thread) -> Thread:
        """Insert a new thread; ``ValidationError`` if the id exists."""
        stored, params = thread_params(thread)

        async def run(conn: Any) -> None:
            if not await conn.fetchval(CREATE_THREAD, *params):
                raise ValidationError(f"Thread with id {stored.id} already exists", code=_EXISTS_CODE)

        await self._counted(run, "create_thread", (stored.id,))
        return stored

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread or None."""
        row = await self._read(lambda conn: conn.fetchrow(
            f"SELECT {THREAD_COLS} FROM mastra_threads t WHERE t.id = $1", thread_id), "get_thread")
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
        params = Params()
        where: list[str] = []
        if resource_id is not None:
            where.append(f't."resourceId" = {params.add(resource_id)}')
        where.extend(thread_filter(args.metadata, params))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        d = "DESC" if args.descending else "ASC"
        col = args.order_column
        count = f"SELECT count(*) FROM mastra_threads t{clause}"
        sql = (f"SELECT {THREAD_COLS}, ({count}) FROM mastra_threads t{clause} "
               f'ORDER BY COALESCE(t."{col}Z", t."{col}") {d}, {THREAD_SEQ} {d}, t.id {d} '
               f"LIMIT {params.add(args.limit)} OFFSET {params.add(args.offset)}")

        async def run(conn: Any) -> tuple[int, list[Any]]:
            rows = await conn.fetch(sql, *params.values)
            if rows:
                return int(rows[0][8]), rows
            total = 0 if args.offset == 0 else int(await conn.fetchval(count, *params.values[:-2]))
            return total, []

        total, rows = await self._read(run, "list_threads")
        threads = [thread_from_row(row) for row in rows]
        has_more = args.limit is not None and args.offset + args.limit < total
        return ThreadPage(threads=threads, total=total, page=page, per_page=per_page, has_more=has_more)

    async def update_thread(self, thread_id: str, *, title: str | None = None,
                            metadata: Mapping[str, Any] | None = None) -> Thread:
        """Set the title (when given), shallow-merge metadata, bump ``updated_at``; ``ThreadNotFound``."""
        if title is not None and not isinstance(title, str):
            raise ValidationError("title must be a string or None")
        check_text(title, "title")
        patch = metadata_param(encode_metadata(metadata, "metadata"), "metadata")
        now = utc_now()

        async def run(conn: Any) -> Thread:
            row = await conn.fetchrow(UPDATE_THREAD, thread_id, title, patch is not None, patch or "{}",
                                      as_naive(now), now)
            if row is None:
                raise ThreadNotFound(thread_id, code=f"{_LIBSQL}UPDATE_THREAD_NOT_FOUND",
                                     message=f"Thread {thread_id} not found")
            return thread_from_row(row)

        return await self._counted(run, "update_thread", (thread_id,))

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread and its messages in one transaction (no error when missing)."""

        async def run(conn: Any) -> None:
            async with transaction(conn):
                # Lock first: a save waiting on (or holding) the row then either lands before this deletes its
                # messages (a later statement sees it) or finds no thread.
                await conn.execute("SELECT 1 FROM mastra_threads WHERE id = $1 FOR UPDATE", thread_id)
                await conn.execute(
                    "WITH d AS (DELETE FROM mastra_messages WHERE thread_id = $1 RETURNING id) "
                    "DELETE FROM threadmind_message_seq WHERE message_id IN (SELECT id FROM d)", thread_id)
                await conn.execute(DELETE_THREAD_SQL, thread_id)
                await conn.execute(
                    "WITH d AS (DELETE FROM mastra_threads WHERE id = $1) "
                    "DELETE FROM threadmind_thread_seq WHERE thread_id = $1", thread_id)

        await self._counted(run, "delete_thread", (thread_id,))

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        """Move a thread and all its messages to another resource in one transaction."""
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise ValidationError("resource_id must be a non-empty string")
        check_text(resource_id, "resource_id")
        now = utc_now()

        async def run(conn: Any) -> Thread:
            async with transaction(conn):
                row = await conn.fetchrow(f"SELECT {THREAD_COLS} FROM mastra_threads t WHERE t.id = $1 FOR UPDATE",
                                          thread_id)
                if row is None:
                    raise ThreadNotFound(thread_id, code=f"{_LIBSQL}UPDATE_THREAD_RESOURCE_ID_FAILED")
                await conn.execute(
                    'WITH t AS (UPDATE mastra_threads SET "resourceId" = $2, "updatedAt" = $3, "updatedAtZ" = $4 '
                    'WHERE id = $1) UPDATE mastra_messages SET "resourceId" = $2 WHERE thread_id = $1',
                    thread_id, resource_id, as_naive(now), now)
                await conn.execute(MOVE_THREAD_SQL, thread_id, resource_id)
            return msgspec.structs.replace(thread_from_row(row), resource_id=resource_id, updated_at=now)

        return await self._counted(run, "update_thread_resource_id", (thread_id,))

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        """Insert a new thread and its messages atomically (used by clone)."""
        stored, params = thread_params(thread)
        parts = parts_of({thread.id: messages})
        for part in parts:
            check_owner(thread.id, thread.resource_id, part.messages)
        rows = [row for part in parts for row in part.rows.values()]

        async def run(conn: Any) -> None:
            async with transaction(conn):
                if not await conn.fetchval(CREATE_THREAD, *params):
                    raise ValidationError(f"Thread with id {stored.id} already exists", code=_EXISTS_CODE)
                if not rows:
                    return
                for mid, other in await conn.fetch(
                        "SELECT id, thread_id FROM mastra_messages WHERE id = ANY($1::text[])", [r[0] for r in rows]):
                    raise MessageIdTaken(mid, other)
                await conn.execute(INSERT_MESSAGES, *columns(rows))
                await conn.execute(UPSERT_SQL, *keyword_rows(
                    [(m, m.resource_id or stored.resource_id) for part in parts for m in part.messages]))

        await self._counted(run, "create_thread_with_messages", (stored.id,))
        return stored

    # -- messages ----------------------------------------------------------------------------------------

    async def save_messages(self, thread_id: str, messages: Sequence[Message], *, mark_pending: bool = False,
                            fence: Lease | None = None) -> list[Message]:
        """Upsert messages of one thread atomically, in order (see the ``Store`` protocol).

        ``mark_pending``: also record the messages as awaiting vectors (``threadmind_vector_pending``) in the same
        statement. ``fence``: refused with ``LeaseLost`` (nothing written) once that lease was lost.
        """
        stored = await self.save_messages_many({thread_id: messages}, mark_pending=mark_pending, fence=fence)
        return stored[thread_id]

    async def save_messages_many(self, by_thread: Mapping[str, Sequence[Message]], *, mark_pending: bool = False,
                                 fence: Lease | None = None) -> dict[str, list[Message]]:
        """Upsert the messages of several threads in one statement: every thread's part, or none of them."""
        return await self._save(by_thread, mark_pending, fence, None)

    async def save_messages_with_vectors(self, by_thread: Mapping[str, Sequence[Message]], vectors: VectorRows, *,
                                         mark_pending: bool = False,
                                         fence: Lease | None = None) -> dict[str, list[Message]]:
        """:meth:`save_messages_many`, and in the same statement new vectors of (some of) the messages, replacing
        their old ones in a ``PgVectorStore`` table of this database and clearing their pending marks."""
        return await self._save(by_thread, mark_pending, fence, vectors)

    async def _save(self, by_thread: Mapping[str, Sequence[Message]], mark_pending: bool, fence: Lease | None,
                    vectors: VectorRows | None) -> dict[str, list[Message]]:
        """Validate, then save through the group commit (:mod:`._save_groups`)."""
        parts = parts_of(by_thread)
        if not parts:
            await self._idle()
            return {thread_id: [] for thread_id in by_thread}
        stored = await self._groups.save(parts, bool(mark_pending), fence, vectors)
        return {thread_id: stored.get(thread_id, []) for thread_id in by_thread}

    async def _save_parts(self, parts: Sequence[Part], mark_pending: bool, fences: Sequence[Lease],
                          vectors: VectorRows | None = None) -> dict[str, list[Message]]:
        """One statement saving ``parts`` (every one or none), each lease of ``fences`` checked in it."""
        params, entries = save_params(parts, utc_now(), mark_pending, fences)
        sql = SAVE_SQL
        if vectors is not None:
            sql = save_sql(vectors.table, vectors.vector_type, vectors.namespace)
            params.extend(vectors.params())
        ids = [mid for part in parts for mid in part.rows]

        async def fetch(conn: Any) -> Any:
            try:
                return await conn.fetchrow(sql, *params)
            except import_asyncpg().DataError:
                if vectors is None:
                    raise
                # A connection's first save with vectors: the driver encodes them in binary once told how (it
                # encodes the arguments before sending anything, so nothing ran).
                await vector_codec(conn, vectors.schema)
                return await conn.fetchrow(sql, *params)

        async def run(conn: Any) -> Any:
            for _ in range(3):
                try:
                    return await fetch(conn)
                except Exception as exc:
                    if getattr(exc, "sqlstate", None) != FAIL_SQLSTATE:
                        raise
                    if fences and "lease lost" in str(exc):
                        raise lease_lost(fences[0].key) from None  # (a group's saves run again alone then)
                    failed = exc  # the statement aborted itself: nothing of it was applied
                why = refusal(parts, await conn.fetchrow(DIAGNOSE_SQL, params[8], ids))
                if why is not None:
                    raise why
            raise storage_error(failed, "save_messages")  # refused three times, each time for no lasting reason

        row = await self._counted(run, "save_messages", [part.thread_id for part in parts])
        written, bumped = row[1], row[2]
        self._keywords.scopes.saved(entries, bumped, row[3])  # committed: blocks of the scopes may take the new rows
        kept_at = kept(parts, written)
        return {part.thread_id: saved(part.messages, kept_at[part.thread_id]) for part in parts}

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Page through messages (reference §5.3), with include windows and filters."""
        reads = MessageReads(query)
        return await self._read(reads.page, "list_messages")

    async def get_thread_with_tail(self, thread_id: str, size: int) -> tuple[Thread | None, MessagePage]:
        """The thread row and its newest ``size`` messages (newest first), in one statement (one snapshot).

        The last answer per thread is kept with the thread row's version (``xmin``; every write to a thread's
        messages, in any process, threadmind's or Mastra's, updates that row in its transaction): while the
        version read by the smallest statement there is (0.09 ms on a local socket, against 0.27 ms for the
        combined statement asked to return only an unchanged version) is unchanged, the kept answer serves
        (nothing to decode); otherwise the thread and its messages are read in one statement.
        """
        reads = MessageReads(MessageQuery(thread_id=thread_id, per_page=size, direction="DESC"))
        key = (thread_id, size)
        kept = self._tails.get(key)
        if kept is not None:
            now = await self._read(lambda conn: conn.fetchval(_THREAD_VERSION, thread_id), "get_thread_with_tail")
            if now is not None and now == kept[0]:
                self._tail_hits += 1
                self._tails.move_to_end(key)
                return kept[1], msgspec.structs.replace(kept[2], messages=list(kept[2].messages))
        version, thread, page = await self._read(lambda conn: reads.with_thread(conn, None), "get_thread_with_tail")
        if version is None:
            self._tails.pop(key, None)
        else:
            self._tails[key] = (version, thread, msgspec.structs.replace(page, messages=list(page.messages)))
            self._tails.move_to_end(key)
            if len(self._tails) > TAILS_KEPT:
                self._tails.popitem(last=False)
        return thread, page

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by (created_at, sequence); unknown ids skipped."""
        wanted = list(dict.fromkeys(i for i in ids if isinstance(i, str)))
        if not wanted:
            await self._idle()
            return []
        rows = await self._read(lambda conn: conn.fetch(
            f"SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.id = ANY($1::text[])", wanted), "get_messages_by_id")
        return assemble(keyed(rows), (), False)

    async def created_times(self, message_ids: Sequence[str], *, resource_id: str | None = None,
                            thread_id: str | None = None) -> dict[str, datetime]:
        """When each message was created (unknown ids left out), read without the messages' content (the scope is
        not needed: one statement)."""
        wanted = list(dict.fromkeys(i for i in message_ids if isinstance(i, str)))
        if not wanted:
            await self._idle()
            return {}
        rows = await self._read(lambda conn: conn.fetch(
            f'SELECT m.id, m."createdAtZ", m."createdAt" FROM {MSG_FROM} WHERE m.id = ANY($1::text[])', wanted),
            "created_times")
        return {row[0]: from_columns(row[1], row[2]) for row in rows}

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged one level, content.metadata merged); bumps the threads."""
        parsed = parse_updates(updates)
        if not parsed:
            await self._idle()
            return []
        ids = list(dict.fromkeys(u.id for u in parsed))
        touched: list[str] = []
        now = utc_now()

        async def run(conn: Any) -> list[Message]:
            async with transaction(conn):
                current = {row[0]: (row, message_from_row(row)) for row in await conn.fetch(
                    f"SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.id = ANY($1::text[]) FOR UPDATE OF m", ids)}
                changed: dict[str, tuple[Any, Message]] = {}
                for update in parsed:
                    if update.id not in current:
                        raise ValidationError(f"message {update.id!r} not found; update_messages needs existing ids")
                    row, old = changed.get(update.id) or current[update.id]
                    changed[update.id] = (row, apply_update(old, update))
                new = [m for _, m in changed.values()]
                for i, m in enumerate(new):
                    for value, field in ((m.resource_id, "resource_id"), (m.type, "type")):
                        check_text(value, f"updates[{i}].{field}")
                # the threads the messages are in and were in: each row's version moves (cached tails re-read)
                threads = sorted({m.thread_id for m in new if m.thread_id} | {row[6] for row, _ in changed.values()})
                touched.extend(threads)
                await conn.execute(
                    UPDATE_MESSAGES, [m.id for m in new], [encode_content_text(m.content) for m in new],
                    [m.role for m in new], [m.type or "v2" for m in new], [as_naive(m.created_at) for m in new],
                    [m.created_at for m in new], [m.resource_id for m in new], as_naive(now), now, threads)
                await conn.execute(UPSERT_SQL, *keyword_rows([(m, m.resource_id or row[7] or "")
                                                              for row, m in changed.values()]))
            return assemble((((as_naive(m.created_at), row[8], m.id), m) for row, m in changed.values()), (), False)

        return await self._counted(run, "update_messages", touched)

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        """Delete messages by id; return the affected thread ids (their ``updated_at`` bumped)."""
        wanted = validate_delete_ids(ids)
        if not wanted:
            await self._idle()
            return set()
        now = utc_now()
        touched: list[str] = []

        async def run(conn: Any) -> set[str]:
            async with transaction(conn):
                threads = {row[0] for row in await conn.fetch(DELETE_MESSAGES, wanted, as_naive(now), now)}
                await conn.execute(DELETE_IDS_SQL, wanted)
            touched.extend(threads)
            return threads

        return await self._counted(run, "delete_messages", touched)

    # -- resources ---------------------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row or None."""
        row = await self._read(lambda conn: conn.fetchrow(
            f"SELECT {RESOURCE_COLS} FROM mastra_resources r WHERE r.id = $1", resource_id), "get_resource")
        return None if row is None else resource_from_row(row)

    async def update_resource(self, resource_id: str, *, working_memory: str | None | UnsetType = UNSET,
                              metadata: Mapping[str, Any] | None = None) -> Resource:
        """Create the row if missing (metadata ``{}``), else set the given fields (metadata shallow-merged).

        One upsert: the server merges the metadata, so concurrent updates from any process never lose a key.
        """
        check_resource_args(resource_id, working_memory, metadata)
        check_text(resource_id, "resource_id")
        memory = None if isinstance(working_memory, UnsetType) else working_memory
        check_text(memory, "working_memory")
        patch = metadata_param(encode_metadata(dict(metadata or {}), "metadata"), "metadata")
        now = utc_now()

        async def run(conn: Any) -> Resource:
            row = await conn.fetchrow(UPDATE_RESOURCE, resource_id, memory, patch, as_naive(now), now,
                                      not isinstance(working_memory, UnsetType), metadata is not None)
            return resource_from_row(row)

        return await self._counted(run, "update_resource", (resource_id,), resources=True)

    # -- read-modify-writes and leases --------------------------------------------------------------------

    async def modify_thread(
        self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *, fence: Lease | None = None
    ) -> Thread | None:
        """Read the thread ``FOR UPDATE`` and write what ``change`` makes of it, in one transaction (no write by
        any process comes between); ``fence`` is checked first, in the same transaction."""
        check_text(thread_id, "thread_id")

        async def run(conn: Any) -> Thread | None:
            async with transaction(conn):
                await check_fence(conn, fence)
                row = await conn.fetchrow(f"SELECT {THREAD_COLS} FROM mastra_threads t WHERE t.id = $1 FOR UPDATE",
                                          thread_id)
                if row is None:
                    raise ThreadNotFound(thread_id, message=f"Thread {thread_id} not found")
                wanted = change(thread_from_row(row))
                if wanted is None:
                    return None
                if wanted.title is not None and not isinstance(wanted.title, str):
                    raise ValidationError("title must be a string or None")
                check_text(wanted.title, "title")
                patch = metadata_param(encode_metadata(wanted.metadata, "metadata"), "metadata")
                now = utc_now()
                updated = await conn.fetchrow(UPDATE_THREAD, thread_id, wanted.title, patch is not None,
                                              patch or "{}", as_naive(now), now)
                return thread_from_row(updated)

        return await self._counted(run, "modify_thread", (thread_id,))

    async def modify_resource(
        self, resource_id: str, change: Callable[[Resource | None], ResourceChange | None], *,
        fence: Lease | None = None,
    ) -> Resource | None:
        """Read the resource ``FOR UPDATE`` (None when missing) and write what ``change`` makes of it, in one
        transaction. A missing row is read under a transaction-scoped advisory lock on its id, and created with
        ``ON CONFLICT DO NOTHING``: when another writer created it meanwhile, the row is read again and
        ``change`` runs once more on it."""
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise ValidationError("resource_id must be a non-empty string")
        check_text(resource_id, "resource_id")
        select = f"SELECT {RESOURCE_COLS} FROM mastra_resources r WHERE r.id = $1 FOR UPDATE"

        async def run(conn: Any) -> Resource | None:
            async with transaction(conn):
                await check_fence(conn, fence)
                locked = False
                while True:
                    row = await conn.fetchrow(select, resource_id)
                    if row is None and not locked:
                        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                           f"threadmind.resource:{resource_id}")
                        locked = True
                        continue
                    old = None if row is None else resource_from_row(row)
                    wanted = change(old)
                    if wanted is None:
                        return None
                    check_resource_args(resource_id, wanted.working_memory, wanted.metadata)
                    params = resource_params(resource_id, wanted)
                    if row is not None:
                        new = await conn.fetchrow(MODIFY_RESOURCE, *params)
                    else:
                        new = await conn.fetchrow(CREATE_RESOURCE, *params[:5])
                    if new is not None:
                        return resource_from_row(new)
                    # created by a writer that takes no lock of ours (update_resource): read it again

        return await self._counted(run, "modify_resource", (resource_id,), resources=True)

    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        """Hold ``key`` for ``owner`` against every process on this database (a row in ``threadmind_leases``
        expiring ``ttl`` seconds from now by the server's clock; see ``_lease_rows``).

        :raises ThreadBusy: ``wait=False`` and another holder's lease has not expired.
        """
        check_lease_args(key, owner, ttl)
        return await self._leases.acquire(key, owner=owner, ttl=ttl, wait=wait)

    async def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` back and wake the waiters on its key (no error when it was lost meanwhile)."""
        await self._leases.release(lease)

    async def renew_leases(self, owner: str, ttl: float) -> None:
        """Extend every lease ``owner`` holds through this store object by ``ttl`` seconds (the heartbeat)."""
        await self._leases.renew(owner, ttl)

    # -- CLI helpers -------------------------------------------------------------------------------------

    async def stats(self) -> dict[str, int]:
        """Row counts of the memory tables, ``resources`` in use (owning a thread or a working memory) and the
        database's size in bytes (``file_bytes``)."""
        row = await self._read(lambda conn: conn.fetchrow(STATS_SQL), "stats")
        return dict(zip(STATS_KEYS, map(int, row), strict=True))

    async def iter_messages(self, thread_ids: Sequence[str] | None = None) -> AsyncIterator[Message]:
        """Every message of the given threads (default: all threads by creation), ascending per thread."""
        if thread_ids is None:
            order = f'COALESCE(t."createdAtZ", t."createdAt"), {THREAD_SEQ}, t.id'
            rows = await self._read(lambda conn: conn.fetch(f"SELECT t.id FROM mastra_threads t ORDER BY {order}"),
                                    "iter_messages")
            ids = [row[0] for row in rows]
        else:
            ids = list(thread_ids)
        for thread_id in ids:
            after: tuple[Any, ...] | None = None
            while True:
                chunk = await self._read(page_after(thread_id, after), "iter_messages")
                for row in chunk:
                    yield message_from_row(row)
                if len(chunk) < CHUNK:
                    break
                last = chunk[-1]
                after = (last[4], last[8], last[0])
