"""PgVectorStore: message vectors in PostgreSQL with pgvector, in the table Mastra's ``PgVector`` uses.

The database is the index: every vector is a row of ``memory_messages_<dim>`` (``memory_messages`` at 1536
dimensions; layout in :mod:`._pgvector_table`), searched by the server (:mod:`._pgvector_query`), so a vector one
process commits is found by every process's next query, with nothing to load, snapshot or catch up. Mastra
(``@mastra/pg``'s ``PgVector`` under ``@mastra/memory``) reads the vectors threadmind writes and the other way
round: each row's ``metadata`` holds Mastra's keys (``message_id``, ``thread_id``, ``resource_id``, ``role``,
``created_at``; the message text and the thread's metadata, which Mastra also copies there, are not), and
recall reads the message ids from it.

The message store may be any store: PostgreSQL (the same database or another), SQLite, in memory. The vectors'
source of truth is the pgvector table; what the message store keeps is the pending marks (its
``vector_records()``): a save marks its messages in its own transaction, and the index actor's upsert clears
the marks once the vectors are committed (in the same statement when the message store is a
``PostgresStore`` on the same DSN; else right after it: a crash in between only embeds those messages again).
Vectors are searchable once written (``stage`` returns False), so the index actor's batch waits for its one
multi-row ``INSERT … ON CONFLICT`` statement before answering its callers. On the message store's own database a
``Memory.save_messages`` skips the batch: its vectors, embedded first, go in the save's statement
(:meth:`PgVectorStore.rows_for_save`, ``PostgresStore.save_messages_with_vectors``), so they commit with the
messages and no mark is needed.

The HNSW index costs every insert far more than the row itself (see :mod:`._pgvector_table`) and serves only
resource scopes larger than ``exact_limit`` (smaller scopes and threads are searched exactly, see
:mod:`._pgvector_query`). ``build_hnsw="at_start"`` makes it with the table; ``"when_needed"`` leaves it out
until a query first meets such a scope, then builds it in the background (``CREATE INDEX CONCURRENTLY``) while
those scopes are answered exactly; it is the default, as most deployments' resources stay small.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
import numpy as np

from ...errors import ConfigError
from .._postgres import PostgresStore
from .._postgres._pool import PgPool, check_connection, check_int, import_asyncpg, masked, storage_error
from .._protocol import SaveHook, Store
from .._vector_records import PendingVector, VectorRecord, VectorRecords
from .._vector_rows import VectorRows
from ._contract import F32, Metric, VectorHit, VectorStoreStatistics
from ._pgvector_query import ScopedSearch
from ._pgvector_table import (
    NAMESPACE,
    IndexSpec,
    Layout,
    build_concurrently,
    ensure_extension,
    ivfflat_lists,
    layout,
    message_tables,
    namespace_is,
    quote,
    set_up_table,
    table_name,
    vector_codec,
)

__all__ = ("PgVectorStore",)

_log = logging.getLogger("threadmind.index")
T = TypeVar("T")
_METRICS = ("cosine", "euclidean", "dotproduct")
_BUILDS = ("at_start", "when_needed")
_KINDS = ("hnsw", "ivfflat", "flat")
IndexKind = Literal["hnsw", "ivfflat", "flat"]
#: Seconds between two attempts at building the HNSW index when needed (one failed, or another process builds it).
BUILD_RETRY = 30.0
_meta = msgspec.json.Encoder()


def _adopted(name: str, wanted: Any, ours: Any, default: Any, config_default: Any) -> Any:
    if wanted == config_default or wanted == ours:
        return ours
    if ours != default:
        raise ConfigError(f"semanticRecall.indexConfig sets {name}={wanted!r} but the PgVectorStore was given "
                          f"{name}={ours!r}; set it in one place")
    return wanted


class PgVectorStore:
    """Message vectors in a PostgreSQL database with pgvector; pass it to ``Memory(vector=...)``.

    :param dsn: ``postgresql://user:password@host:port/database`` (the same database as a ``PostgresStore``, or
        another).
    :param m: HNSW graph degree of the index built on the table.
    :param ef_construction: HNSW build-time candidate list size.
    :param ef_search: ``hnsw.ef_search`` of each HNSW query (set transaction-locally); None: Mastra's choice,
        ``max(2 * top_k, m * top_k)``, at most 1 000.
    :param metric: ``cosine``, ``euclidean`` or ``dotproduct`` (the index's operator class).
    :param exact_limit: resource scopes of at most this many vectors are searched exactly (faster than HNSW there,
        and exact); larger ones by an iterative HNSW scan. Thread scopes are always searched exactly.
    :param build_hnsw: ``"when_needed"`` (default): the vector index is made in the background the first time a
        scope larger than ``exact_limit`` is queried (until then it would serve no query, and inserts are several
        times cheaper without it); ``"at_start"``: made with the table and kept up by every insert.
    :param index_type: the vector index, as ``semanticRecall.indexConfig.type`` names it: ``"hnsw"`` (default; ``m``,
        ``ef_construction``), ``"ivfflat"`` (``lists``; queried with ``ivfflat.probes`` = √lists and an iterative
        scan, and a short answer completed exactly) or ``"flat"`` (no index: every query exact).
    :param lists: IVFFlat's lists; None: ``@mastra/pg``'s ``max(100, min(4000, 2 * sqrt(rows)))`` when built.
    :param min_size: connections the pool keeps open.
    :param max_size: most connections the pool opens.
    :param statement_cache_size: asyncpg's prepared statements per connection; ``0`` behind PgBouncer in
        transaction mode. None keeps asyncpg's default.
    :raises ConfigError: a bad option, or asyncpg is not installed (``pip install 'threadmind[postgres]'``).
    """

    def __init__(self, dsn: str, *, m: int = 16, ef_construction: int = 64, ef_search: int | None = None,
                 metric: Metric = "cosine", exact_limit: int = 10_000,
                 build_hnsw: Literal["at_start", "when_needed"] = "when_needed", min_size: int = 1, max_size: int = 10,
                 statement_cache_size: int | None = None, index_type: IndexKind = "hnsw",
                 lists: int | None = None) -> None:
        check_connection(dsn, min_size, max_size, statement_cache_size)
        if metric not in _METRICS:
            raise ConfigError(f"metric must be one of 'cosine', 'euclidean', 'dotproduct', not {metric!r}")
        check_int(m, "m", 2)
        check_int(ef_construction, "ef_construction", 1)
        if ef_search is not None:
            check_int(ef_search, "ef_search", 1)
        check_int(exact_limit, "exact_limit", 0)
        if build_hnsw not in _BUILDS:
            raise ConfigError(f"build_hnsw must be 'at_start' or 'when_needed', not {build_hnsw!r}")
        if index_type not in _KINDS:
            raise ConfigError(f"index_type must be 'hnsw', 'ivfflat' or 'flat', not {index_type!r}")
        if lists is not None:
            check_int(lists, "lists", 1)
        import_asyncpg()  # ConfigError with the pip command now, not at start
        self._dsn = dsn
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._metric: Metric = metric
        self._exact_limit = exact_limit
        self._build_hnsw = build_hnsw
        self._index_type: IndexKind = index_type
        self._lists = lists
        self._min_size = min_size
        self._max_size = max_size
        self._statement_cache_size = statement_cache_size
        self._owner: object | None = None
        self._pool: PgPool | None = None
        self._records: VectorRecords | None = None
        self._schema = "public"
        self._same_database = False
        self._layout: Layout | None = None
        self._search: ScopedSearch | None = None
        #: HNSW indexes this store built (or rebuilt from another kind of index).
        self.index_builds = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        self._building = False
        self._built = anyio.Event()  # set when the build in flight ends
        self._next_build = 0.0
        # Upserts commit in the order they were called (FIFO, taken before the call first suspends): the index
        # actor calls them in batch order, so a message re-saved twice ends with the vector of the text stored last.
        self._write_order = anyio.Lock()

    def __repr__(self) -> str:
        return (f"PgVectorStore({masked(self._dsn)!r}, metric={self._metric!r}, m={self._m}, "
                f"ef_construction={self._ef_construction}, ef_search={self._ef_search})")

    @property
    def dsn(self) -> str:
        return self._dsn

    @property
    def metric(self) -> Metric:
        return self._metric

    @property
    def m(self) -> int:
        return self._m

    @property
    def ef_construction(self) -> int:
        return self._ef_construction

    @property
    def ef_search(self) -> int | None:
        return self._ef_search

    # configuration -------------------------------------------------------------------------------
    def adopt(self, metric: Metric, m: int, ef_construction: int, ef_search: int) -> None:
        """(Memory) Take ``semanticRecall.indexConfig``'s values for the parameters this store left at their
        defaults; one given differently on both sides raises ``ConfigError``."""
        self._metric = _adopted("metric", metric, self._metric, "cosine", "cosine")
        self._m = _adopted("m", m, self._m, 16, 16)
        self._ef_construction = _adopted("ef_construction", ef_construction, self._ef_construction, 64, 64)
        self._ef_search = _adopted("ef_search", ef_search, self._ef_search, None, 64)

    def adopt_index(self, kind: IndexKind | None, lists: int | None) -> None:
        """(Memory) Take ``semanticRecall.indexConfig``'s ``type`` and ``ivf.lists`` where this store was left at its
        defaults; one given differently on both sides raises ``ConfigError``."""
        if kind is not None:
            self._index_type = _adopted("index_type", kind, self._index_type, "hnsw", None)
        if lists is not None:
            self._lists = _adopted("lists", lists, self._lists, None, None)

    @property
    def index_spec(self) -> IndexSpec:
        """The vector index this store keeps on its table (see ``index_type``)."""
        return IndexSpec(self._index_type, self._m, self._ef_construction, self._lists)

    # lifecycle -----------------------------------------------------------------------------------
    async def open(self, store: Store, *, owner: object) -> None:
        """Make sure the pgvector extension exists (creating it if allowed) and open the pool.

        :raises ConfigError: another running Memory uses this store, or the extension cannot be had (the
            message names it).
        :raises StorageError: the server cannot be reached.
        """
        if self._owner is not None and self._owner is not owner:
            raise ConfigError("this PgVectorStore is already used by another running Memory; give each its own")
        self._owner = owner
        try:
            self._schema = await self._extension()
            pool = PgPool(self._dsn, min_size=self._min_size, max_size=self._max_size,
                          statement_cache_size=self._statement_cache_size, setup=None, init=self._init_connection)
            await pool.open(repr(self))
            self._pool = pool
            self._records = store.vector_records()
            self._same_database = isinstance(store, PostgresStore) and getattr(store, "_dsn", None) == self._dsn \
                and bool(await self._read(lambda conn: conn.fetchval(
                    "SELECT to_regclass('threadmind_vector_pending') IS NOT NULL"), "vector open"))
            task_group = anyio.create_task_group()
            await task_group.__aenter__()
            self._task_group = task_group
        except BaseException:
            await self._close_pool()
            self._owner = None
            raise

    async def _extension(self) -> str:
        asyncpg = import_asyncpg()
        try:
            options: dict[str, Any] = {"server_settings": {"application_name": "threadmind"}}
            if self._statement_cache_size is not None:
                options["statement_cache_size"] = self._statement_cache_size
            conn = await asyncpg.connect(self._dsn, **options)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise storage_error(exc, f"open of {self!r}") from exc
        try:
            return await ensure_extension(conn)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise storage_error(exc, "CREATE EXTENSION vector") from exc
        finally:
            await conn.close()

    async def _init_connection(self, conn: Any) -> None:
        await vector_codec(conn, self._schema)

    async def close(self) -> None:
        """Stop a background index build (the next one starts afresh) and close the pool (every write was committed
        before its caller was answered)."""
        task_group, self._task_group = self._task_group, None
        try:
            if task_group is not None:
                task_group.cancel_scope.cancel()
                await task_group.__aexit__(None, None, None)
        finally:
            try:
                await self._close_pool()
            finally:
                self._owner = None
                self._layout = self._search = None

    async def _close_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _live(self) -> PgPool:
        if self._pool is None:
            raise ConfigError("the vector store is not open", code="THREADMIND_INDEX_CLOSED")
        return self._pool

    def _table(self) -> Layout:
        if self._layout is None:
            raise ConfigError("no vector index is selected yet", code="THREADMIND_INDEX_CLOSED")
        return self._layout

    def _message_store(self) -> VectorRecords:
        if self._records is None:
            raise ConfigError("the vector store is not open", code="THREADMIND_INDEX_CLOSED")
        return self._records

    async def _read(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        return await self._live().read(fn, repr(self), doing)

    async def _write(self, fn: Callable[[Any], Awaitable[T]], doing: str) -> T:
        return await self._live().write(fn, repr(self), doing)

    def pending_marker(self) -> SaveHook | None:
        """None: the message store writes the pending marks in its own save (``mark_pending``)."""
        return None

    # the index -----------------------------------------------------------------------------------
    async def wait_loaded(self) -> int:
        """Nothing to load (the table serves once :meth:`use_index` returned): the rows of the index's table."""
        layout = self._layout
        if layout is None:
            await anyio.lowlevel.checkpoint()
            return 0
        count = await self._read(lambda conn: conn.fetchval(f"SELECT count(*) FROM {layout.table}"), "vector count")
        return int(count)

    async def use_index(self, name: str, dimension: int) -> None:
        """Create (or adopt Mastra's) table of the index and its indexes; idempotent.

        :raises ConfigError: a table of that name holds vectors of another kind.
        """
        if self._layout is not None and self._layout.name == name:
            await anyio.lowlevel.checkpoint()
            return
        t = layout(table_name(name, dimension), dimension, self._metric, self._schema)
        spec = self.index_spec
        ready, built = await self._write(
            lambda conn: set_up_table(conn, t, spec, build=self._build_hnsw == "at_start"), "vector index setup")
        self.index_builds += int(built)
        if not t.ann:
            _log.info("%s: %d dimensions exceed HNSW's limit; its scopes are searched exactly", name, dimension)
        self._layout = t
        self._search = ScopedSearch(t, exact_limit=self._exact_limit, ef_search=self._ef_search, m=self._m,
                                    ann_ready=ready, on_large=None if spec.kind == "flat" else self._hnsw_wanted,
                                    probes=await self._probes(t, spec) if spec.kind == "ivfflat" else None)

    async def _probes(self, t: Layout, spec: IndexSpec) -> int:
        """``ivfflat.probes`` for the table's IVFFlat index: √lists (its lists as built, read back), at least 1."""
        lists = spec.lists
        if lists is None:
            options = await self._read(lambda conn: conn.fetchval(
                "SELECT reloptions FROM pg_class WHERE oid = to_regclass($1)", quote(t.hnsw_index)), "vector index")
            found = dict(str(o).split("=", 1) for o in (options or ()) if "=" in str(o)).get("lists")
            lists = int(found) if found is not None else ivfflat_lists(0)
        return max(1, round(math.sqrt(lists)))

    @property
    def hnsw_ready(self) -> bool:
        """Whether a valid HNSW index serves the index in use."""
        return self._search is not None and self._search.ann_ready

    def _hnsw_wanted(self) -> None:
        """(a query met a scope too large to search exactly, and no HNSW index serves it) Build one, in the
        background, unless a build runs or one was tried lately."""
        if self._building or time.monotonic() < self._next_build or self._task_group is None:
            return
        self._building = True
        self._built = anyio.Event()
        self._task_group.start_soon(self._build_in_background, name="threadmind.pgvector.build")

    async def wait_for_hnsw(self) -> bool:
        """Wait for the background HNSW build in flight, if any; whether a valid HNSW index serves the index now."""
        if self._building:
            await self._built.wait()
        else:
            await anyio.lowlevel.checkpoint()
        return self.hnsw_ready

    async def _build_in_background(self) -> None:
        t, search = self._layout, self._search
        try:
            if t is None or search is None:
                return
            # a read: cancellable (a close cancels the statement; the invalid index it leaves is dropped next time)
            spec = self.index_spec
            ready, built = await self._read(lambda conn: build_concurrently(conn, t, spec), "vector index build")
            self.index_builds += int(built)
            if ready and search is self._search:
                if spec.kind == "ivfflat":
                    search.probes = await self._probes(t, spec)
                search.ann_ready = True
        except Exception:
            _log.exception("building the HNSW index of %s failed; its large scopes are searched exactly",
                           t.name if t else "?")
        finally:
            self._building = False
            self._next_build = time.monotonic() + BUILD_RETRY
            self._built.set()

    @property
    def index_name(self) -> str | None:
        return self._layout.name if self._layout is not None else None

    def prepare(self, vectors: F32) -> F32:
        """Rows as stored: the embedder's own values (pgvector normalises for cosine itself, as Mastra stores)."""
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def has_message(self, message_id: str) -> bool:
        return True  # not known without a query; deleting nothing is harmless

    @property
    def rows_go_with_saves(self) -> bool:
        """Whether the message store is a ``PostgresStore`` of this database (see :meth:`rows_for_save`)."""
        return self._same_database

    def rows_for_save(self, records: Sequence[VectorRecord]) -> VectorRows | None:
        """The records as the message save's statement writes them (see :class:`RowsForSave`), when the message
        store is a ``PostgresStore`` of this database and the index's table is set up; else None."""
        if not self._same_database or self._layout is None or self._pool is None or not records:
            return None
        t = self._layout
        return VectorRows(table=t.table, vector_type=t.vector_type, namespace=NAMESPACE, schema=self._schema,
                          vector_ids=[r.vector_id for r in records], message_ids=[r.message_id for r in records],
                          metadata=[_meta.encode(_metadata(r, created=False)).decode() for r in records],
                          embeddings=[r.embedding for r in records])

    def stage(self, records: Sequence[VectorRecord], rows: F32) -> bool:
        return False  # searchable once written: the database is the index

    async def write(self, records: Sequence[VectorRecord], *, background: bool = False, staged: bool = True) -> None:
        """One multi-row upsert replacing the records' messages' vectors; then their pending marks are cleared."""
        t = self._table()
        latest = list({r.vector_id: r for r in records}.values())  # a statement may touch a row once
        if not latest:
            await anyio.lowlevel.checkpoint()
            return
        message_ids = list(dict.fromkeys(r.message_id for r in latest))
        same = self._same_database
        # On the messages' database a stored message's rows take its thread and resource as they are now (its row
        # locked against a move until this commits): another process may have moved it since its vectors were made.
        pending = ("pend AS (DELETE FROM threadmind_vector_pending WHERE message_id = ANY($4::text[])), "
                   "live AS (SELECT m.id, m.thread_id, coalesce(nullif(m.\"resourceId\", ''), th.\"resourceId\", '') "
                   "AS resource_id FROM mastra_messages m LEFT JOIN mastra_threads th ON th.id = m.thread_id "
                   "WHERE m.id = ANY($4::text[]) FOR SHARE OF m), " if same else "")
        metadata = ("rec.metadata || jsonb_build_object('thread_id', live.thread_id, 'resource_id', live.resource_id)"
                    if same else "rec.metadata")
        # ... and a message deleted meanwhile (by another process) gets none.
        source = "rec JOIN live ON live.id = rec.metadata->>'message_id'" if same else "rec"
        sql = (f"WITH rec AS (SELECT * FROM unnest($1::text[], $2::{t.vector_type}[], $3::jsonb[]) "
               "AS r(vector_id, embedding, metadata)), "
               f"gone AS (DELETE FROM {t.table} v WHERE {namespace_is('v')} "
               "AND v.metadata->>'message_id' = ANY($4::text[]) AND NOT (v.vector_id = ANY($1::text[]))), "
               f"{pending}"
               f"ins AS (INSERT INTO {t.table} (vector_id, embedding, metadata, namespace) "
               f"SELECT rec.vector_id, rec.embedding, {metadata}, '{NAMESPACE}' FROM {source} "
               "ON CONFLICT (namespace, vector_id) DO UPDATE SET embedding = EXCLUDED.embedding, "
               "metadata = EXCLUDED.metadata RETURNING 1) SELECT count(*) FROM ins")
        args = ([r.vector_id for r in latest], [r.embedding for r in latest],
                [_meta.encode(_metadata(r)).decode() for r in latest], message_ids)
        async with self._write_order:
            await self._write(lambda conn: conn.fetchval(sql, *args), "vector upsert")
        if not self._same_database:
            await self._message_store().clear_pending(message_ids)

    async def query(
        self, vector: F32, *, top_k: int, resource_id: str | None, thread_id: str | None
    ) -> list[VectorHit]:
        t = self._table()
        search = self._search
        assert search is not None
        raw = np.ascontiguousarray(vector, dtype="<f4").reshape(-1)
        if raw.size != t.dimension:
            raise ConfigError(f"the query vector has {raw.size} dimensions; the index {t.name!r} holds {t.dimension}")

        async def run(fn: Callable[[Any], Awaitable[Any]]) -> Any:
            return await self._read(fn, "vector query")

        return await search.query(run, raw.tobytes(), top_k, resource_id, thread_id)

    # deletes, moves, copies ------------------------------------------------------------------------
    async def _in_every_index(self, where: str, *args: Any, doing: str, update: str | None = None) -> None:
        """Run a DELETE (or, with ``update``, an UPDATE setting it) over every message vector table."""

        async def run(conn: Any) -> None:
            for name in await message_tables(conn):
                table = quote(name)
                if update is None:
                    await conn.execute(f"DELETE FROM {table} WHERE {where}", *args)
                else:
                    await conn.execute(f"UPDATE {table} SET {update} WHERE {where}", *args)

        await self._write(run, doing)

    async def delete_messages(self, message_ids: Sequence[str]) -> None:
        ids = list(message_ids)
        await self._in_every_index("metadata->>'message_id' = ANY($1::text[])", ids, doing="vector delete")
        await self._message_store().delete_by_message_ids(None, ids)

    async def delete_thread(self, thread_id: str) -> None:
        await self._in_every_index("metadata->>'thread_id' = $1", thread_id, doing="vector delete")
        await self._message_store().delete_by_thread(thread_id)

    async def move_thread(self, thread_id: str, resource_id: str) -> None:
        # On the messages' database: the thread's resource as stored when this runs (its row locked against another
        # move until then), so two processes moving one thread at once end with the resource its row has.
        owner = ("coalesce((SELECT nullif(th.\"resourceId\", '') FROM mastra_threads th WHERE th.id = $1 FOR SHARE), "
                 "$2::text)" if self._same_database else "$2::text")
        await self._in_every_index("metadata->>'thread_id' = $1", thread_id, resource_id, doing="vector move",
                                   update=f"metadata = jsonb_set(metadata, '{{resource_id}}', to_jsonb({owner}))")
        await self._message_store().move_thread(thread_id, resource_id)

    async def copy_messages(self, id_map: Mapping[str, str], *, thread_id: str, resource_id: str) -> None:
        """Copy the messages' vectors in SQL (no embedding, nothing read back): ``old`` → ``new``, ``old#i`` →
        ``new#i``; a vector id of another form (Mastra's uuids) becomes ``new#<row id>``."""
        t = self._table()
        old, new = list(id_map), list(id_map.values())
        sql = (f"INSERT INTO {t.table} (vector_id, embedding, metadata, namespace) "
               "SELECT CASE WHEN v.vector_id = m.old THEN m.new "
               "WHEN starts_with(v.vector_id, m.old || '#') THEN m.new || substr(v.vector_id, length(m.old) + 1) "
               "ELSE m.new || '#' || v.id END, v.embedding, "
               "v.metadata || jsonb_build_object('message_id', m.new, 'thread_id', $3::text, 'resource_id', $4::text), "
               f"v.namespace FROM {t.table} v JOIN unnest($1::text[], $2::text[]) AS m(old, new) "
               f"ON v.metadata->>'message_id' = m.old WHERE {namespace_is('v')} "
               # a copy that has rows of its own already (an edit of it, written meanwhile) keeps them
               f"AND NOT EXISTS (SELECT 1 FROM {t.table} o WHERE {namespace_is('o')} "
               "AND o.metadata->>'message_id' = m.new) "
               "ON CONFLICT (namespace, vector_id) DO UPDATE SET embedding = EXCLUDED.embedding, "
               "metadata = EXCLUDED.metadata")
        await self._write(lambda conn: conn.execute(sql, old, new, thread_id, resource_id), "vector copy")
        await self._message_store().clear_pending(new)

    # nothing to keep in step: the database is the index -------------------------------------------
    async def catch_up(self) -> int:
        await anyio.lowlevel.checkpoint()
        return 0

    async def barrier(self) -> None:
        await anyio.lowlevel.checkpoint()

    async def flush(self) -> int:
        await anyio.lowlevel.checkpoint()
        return 0

    async def persist(self) -> bool:
        await anyio.lowlevel.checkpoint()
        return False

    # pending marks live with the messages ----------------------------------------------------------
    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        await self._message_store().add_pending(items, error)

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        return await self._message_store().take_pending(limit, before)

    async def clear_pending(self, message_ids: Sequence[str]) -> None:
        await self._message_store().clear_pending(message_ids)

    async def pending_count(self, before: float | None = None) -> int:
        return await self._message_store().pending_count(before)

    async def message_ids_with_vectors(self) -> set[str]:
        t = self._table()
        rows = await self._read(lambda conn: conn.fetch(
            f"SELECT DISTINCT metadata->>'message_id' FROM {t.table} WHERE namespace = '{NAMESPACE}' "
            "AND metadata ? 'message_id'"), "vector read")
        return {str(row[0]) for row in rows}

    @property
    def fallbacks(self) -> int:
        """Iterative HNSW scans that came back with fewer than ``top_k`` messages and were answered exactly."""
        return self._search.fallbacks if self._search is not None else 0

    def statistics(self) -> VectorStoreStatistics:
        """Queries answered exactly and by the HNSW index (``vectors`` is not tracked: the table is shared)."""
        search = self._search
        if search is None:
            return VectorStoreStatistics()
        return VectorStoreStatistics(brute_force_queries=search.exact_queries, ann_queries=search.ann_queries,
                                     sql_queries=search.exact_queries + search.ann_queries)


def _metadata(record: VectorRecord, *, created: bool = True) -> dict[str, str]:
    """The keys ``@mastra/memory`` writes (and reads ``message_id`` and ``thread_id`` back from); ``created``: with
    ``created_at`` (a save's statement adds it from the stored message)."""
    meta = {"message_id": record.message_id, "thread_id": record.thread_id, "resource_id": record.resource_id,
            "role": record.role}
    if created:
        meta["created_at"] = record.created_at
    return meta
