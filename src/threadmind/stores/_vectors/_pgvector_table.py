"""The pgvector side of :class:`~threadmind.stores.PgVectorStore`: the extension, the vector type's binary codec,
and the table of one index, laid out exactly as ``@mastra/pg``'s ``PgVector.createIndex`` lays it out.

For the index ``memory_messages_<dim>`` (``memory_messages`` at 1536 dimensions)::

    CREATE TABLE "memory_messages_384" (id SERIAL PRIMARY KEY, vector_id TEXT NOT NULL, embedding vector(384),
        metadata JSONB DEFAULT '{}'::jsonb, namespace VARCHAR(255) NOT NULL DEFAULT 'default')
    UNIQUE INDEX "memory_messages_384_namespace_vector_id_idx" (namespace, vector_id)
    INDEX "memory_messages_384_md_57d95f6b_idx" ((metadata->>'thread_id'))    -- Mastra's metadataIndexes names
    INDEX "memory_messages_384_md_5a823b81_idx" ((metadata->>'resource_id'))
    INDEX "memory_messages_384_md_12150d99_idx" ((metadata->>'message_id'))   -- replacing a message's vectors
    INDEX "memory_messages_384_vector_idx" USING hnsw (embedding vector_cosine_ops) WITH (m, ef_construction)

so a table Mastra made opens unchanged (its missing indexes are added; an ``<index>_vector_idx`` that is not a
valid HNSW index of this metric and these parameters, e.g. the ivfflat index Mastra builds by default, is rebuilt
as one) and Mastra opens threadmind's table as its own (with a default ``indexConfig`` it keeps the existing
index). Setup runs in one transaction under a transaction-scoped advisory lock per table, so processes may set up
the same table at once. HNSW indexes vectors of at most 2 000 dimensions; a larger index is searched exactly.

Built at setup, the HNSW index is maintained by every insert (about 1 ms of server time per 384-d row at m=16,
ef_construction=64 on the project's machine, against 0.03 ms for the rest of the row). Built when needed, setup
leaves it out and :func:`build_concurrently` makes it (``CREATE INDEX CONCURRENTLY``: writes go on meanwhile) the
first time a scope too large to search exactly is met.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, NamedTuple

import msgspec

from ...errors import ConfigError, StorageError
from .._vector_rows import vector_codec

__all__ = ("HNSW_MAX_DIMENSIONS", "NAMESPACE", "IndexSpec", "Layout", "MetricOps", "build_concurrently",
           "ensure_extension", "ivfflat_lists", "layout", "message_tables", "metric_ops", "namespace_is", "quote",
           "set_up_table",
           "table_name", "vector_codec")

Metric = Literal["cosine", "euclidean", "dotproduct"]
EXTENSION = "vector"
HNSW_MAX_DIMENSIONS = 2000
NAMESPACE = "default"


def namespace_is(alias: str | None = None) -> str:
    """The rows of :data:`NAMESPACE` (``alias``: the table's), written so that the planner never reads the
    ``(namespace, vector_id)`` index for it: every row has that namespace, and statistics taken while the table was
    small (it grows from empty) make a bitmap of the whole index look cheap beside the index that finds the rows
    (0.39 ms of a 0.87 ms scoped query over 8 000 rows, 0.42 ms of a 2-vector save's statement)."""
    column = "namespace" if alias is None else f"{alias}.namespace"
    return f"COALESCE({column}, '') = '{NAMESPACE}'"
#: ``xxh32(field).toString(16)``: the suffix ``@mastra/pg`` gives the btree of each field in ``metadataIndexes``.
_FIELD_HASH = {"thread_id": "57d95f6b", "resource_id": "5a823b81", "message_id": "12150d99"}
_INDEX_NAME = re.compile(r"^memory_messages(?:_(\d+))?$")
_CREATE_RACES = frozenset({"42P07", "42710", "23505"})  # another session created the same object meanwhile
_REFUSED = frozenset({"42501", "0A000", "58P01", "42704"})  # no privilege; not available on the server


class MetricOps(msgspec.Struct, frozen=True):
    """How one metric is indexed and searched (as Mastra's PgVector does)."""

    opclass: str
    operator: str


_OPS: dict[str, MetricOps] = {
    "cosine": MetricOps("vector_cosine_ops", "<=>"),
    "euclidean": MetricOps("vector_l2_ops", "<->"),
    "dotproduct": MetricOps("vector_ip_ops", "<#>"),
}


def metric_ops(metric: str) -> MetricOps:
    return _OPS[metric]


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class Layout(msgspec.Struct, frozen=True, kw_only=True):
    """SQL names of one index's table, qualified for the schema the extension lives in."""

    name: str
    dimension: int
    metric: str
    #: The vector type as SQL writes it (schema-qualified outside ``public``/``pg_catalog``).
    vector_type: str
    #: The distance operator, e.g. ``<=>`` or ``OPERATOR("ext".<=>)``.
    operator: str
    #: Whether an HNSW index serves this table (dimensions within pgvector's limit).
    ann: bool

    @property
    def table(self) -> str:
        return quote(self.name)

    @property
    def hnsw_index(self) -> str:
        return f"{self.name}_vector_idx"

    def field_index(self, field: str) -> str:
        suffix = _FIELD_HASH[field]
        return f"{self.name[:55 - len(suffix)]}_md_{suffix}_idx"


def table_name(index_name: str, dimension: int) -> str:
    """``index_name`` checked to be the name Mastra gives the index of ``dimension``."""
    expected = "memory_messages" if dimension == 1536 else f"memory_messages_{dimension}"
    if not _INDEX_NAME.match(index_name) or index_name != expected:
        raise ConfigError(f"the vector index of {dimension} dimensions is named {expected!r}, not {index_name!r}")
    return index_name


def layout(name: str, dimension: int, metric: str, schema: str) -> Layout:
    ops = metric_ops(metric)
    qualified = schema not in ("public", "pg_catalog")
    return Layout(
        name=name, dimension=dimension, metric=metric,
        vector_type=f"{quote(schema)}.vector" if qualified else "vector",
        operator=f"OPERATOR({quote(schema)}.{ops.operator})" if qualified else ops.operator,
        ann=dimension <= HNSW_MAX_DIMENSIONS,
    )


# ------------------------------------------------------------------------------------------ extension

_FIND_EXTENSION = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                   "WHERE e.extname = 'vector'")


async def ensure_extension(conn: Any) -> str:
    """``CREATE EXTENSION IF NOT EXISTS vector``; the schema the extension lives in.

    :raises ConfigError: the role may not create the extension, or the server does not have it; the message names
        the extension and what to run.
    """
    for attempt in range(3):
        try:
            await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
            break
        except Exception as exc:
            state = getattr(exc, "sqlstate", None)
            if state in _CREATE_RACES and attempt < 2:
                continue
            if state in _REFUSED:
                database = await conn.fetchval("SELECT current_database()")
                raise ConfigError(
                    f"PgVectorStore needs the PostgreSQL extension `{EXTENSION}` (pgvector) in database "
                    f"{database!r}, and `CREATE EXTENSION IF NOT EXISTS {EXTENSION}` failed: {exc} (SQLSTATE "
                    f"{state}). Install pgvector on the server and have a superuser run `CREATE EXTENSION "
                    f"{EXTENSION};` in that database once",
                    code="THREADMIND_PGVECTOR_EXTENSION") from exc
            raise
    schema = await conn.fetchval(_FIND_EXTENSION)
    if schema is None:  # pragma: no cover - the statement above succeeded
        raise StorageError(f"the extension `{EXTENSION}` is missing right after CREATE EXTENSION")
    return str(schema)


# ------------------------------------------------------------------------------------------ table

def _create_table(t: Layout) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {t.table} (\n"
            "  id SERIAL PRIMARY KEY,\n"
            "  vector_id TEXT NOT NULL,\n"
            f"  embedding {t.vector_type}({t.dimension}),\n"
            "  metadata JSONB DEFAULT '{}'::jsonb,\n"
            f"  namespace VARCHAR(255) NOT NULL DEFAULT '{NAMESPACE}'\n"
            ")")


def _table_statements(t: Layout) -> list[str]:
    return [
        # tables of Mastra versions before namespaces get the column and key Mastra itself would add
        f"ALTER TABLE {t.table} ADD COLUMN IF NOT EXISTS namespace VARCHAR(255) NOT NULL DEFAULT '{NAMESPACE}'",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {quote(t.name + '_namespace_vector_id_idx')} ON {t.table} "
        "(namespace, vector_id)",
        *(f"CREATE INDEX IF NOT EXISTS {quote(t.field_index(field))} ON {t.table} ((metadata->>'{field}'))"
          for field in ("thread_id", "resource_id", "message_id")),
    ]


_DESCRIBE = """
SELECT t.typname, a.atttypmod FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1) AND a.attname = 'embedding' AND a.attnum > 0 AND NOT a.attisdropped
"""
_HNSW_STATE = """
SELECT am.amname, opc.opcname, c.reloptions, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam JOIN pg_opclass opc ON opc.oid = i.indclass[0]
WHERE i.indexrelid = to_regclass($1) AND i.indrelid = to_regclass($2)
"""


def _options(reloptions: Any) -> dict[str, str]:
    return dict(str(option).split("=", 1) for option in (reloptions or ()) if "=" in str(option))


class IndexSpec(NamedTuple):
    """The vector index a table should have (``semanticRecall.indexConfig``): ``hnsw`` with ``m`` and
    ``ef_construction``, ``ivfflat`` with ``lists`` (None: ``@mastra/pg``'s count from the rows when built, and any
    count will do in an index found), or ``flat`` (none: every query exact)."""

    kind: Literal["hnsw", "ivfflat", "flat"] = "hnsw"
    m: int = 16
    ef_construction: int = 64
    lists: int | None = None


async def set_up_table(conn: Any, t: Layout, spec: IndexSpec, *, build: bool) -> tuple[bool, bool]:
    """Create or adopt the table of ``t`` and its indexes (one transaction, an advisory lock per table).

    ``build``: make the vector index now if it is missing (else leave that to :func:`build_concurrently`). An index
    of that name that is not a valid index as ``spec`` says is dropped either way. Returns (whether a valid vector
    index serves the table, whether this call built it).

    :raises ConfigError: a table of that name holds vectors of another type or dimension.
    """
    for attempt in range(3):
        try:
            return await _set_up(conn, t, spec, build=build)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) not in _CREATE_RACES or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _matches(state: Any, t: Layout, spec: IndexSpec) -> bool:
    """Whether an index state row (see ``_HNSW_STATE``) is a valid index of this metric as ``spec`` says."""
    options = _options(state[2])
    if state[0] != spec.kind or state[1] != metric_ops(t.metric).opclass or not bool(state[3]):
        return False
    if spec.kind == "hnsw":
        return options.get("m") == str(spec.m) and options.get("ef_construction") == str(spec.ef_construction)
    return spec.lists is None or options.get("lists") == str(spec.lists)


async def _create_index(conn: Any, t: Layout, spec: IndexSpec, *, concurrently: bool = False) -> None:
    head = f"CREATE INDEX {'CONCURRENTLY IF NOT EXISTS ' if concurrently else ''}{quote(t.hnsw_index)} ON {t.table}"
    if spec.kind == "hnsw":
        await conn.execute(f"{head} USING hnsw (embedding {_opclass(t)}) "
                           f"WITH (m = {int(spec.m)}, ef_construction = {int(spec.ef_construction)})")
        return
    lists = spec.lists if spec.lists is not None else ivfflat_lists(int(await conn.fetchval(
        f"SELECT count(*) FROM {t.table}")))
    await conn.execute(f"{head} USING ivfflat (embedding {_opclass(t)}) WITH (lists = {int(lists)})")


def ivfflat_lists(rows: int) -> int:
    """``@mastra/pg``'s lists for an IVFFlat index over ``rows`` rows: ``max(100, min(4000, 2 * sqrt(rows)))``."""
    return max(100, min(4000, math.floor(math.sqrt(rows) * 2)))


async def _set_up(conn: Any, t: Layout, spec: IndexSpec, *, build: bool) -> tuple[bool, bool]:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"threadmind.pgvector:{t.name}")
        await conn.execute(_create_table(t))
        found = await conn.fetchrow(_DESCRIBE, t.table)
        if found is None or found[0] != "vector" or int(found[1]) != t.dimension:
            kind = "no embedding column" if found is None else f"embedding {found[0]}({found[1]})"
            raise ConfigError(f"the table {t.name!r} has {kind}, not vector({t.dimension}): it is not the "
                              f"vector index of {t.dimension} dimensions; drop or rename it")
        for statement in _table_statements(t):
            await conn.execute(statement)
        if not t.ann:
            return False, False
        state = await conn.fetchrow(_HNSW_STATE, quote(t.hnsw_index), t.table)
        if state is not None:
            if _matches(state, t, spec):
                return True, False
            if not bool(state[3]) and await _being_built(conn, t):
                return False, False  # another process is building it right now
            await conn.execute(f"DROP INDEX {quote(t.hnsw_index)}")
        if not build or spec.kind == "flat":
            return False, False
        await _create_index(conn, t, spec)
        return True, True


async def _being_built(conn: Any, t: Layout) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index "
                                    "WHERE index_relid = to_regclass($1))", quote(t.hnsw_index)))


async def build_concurrently(conn: Any, t: Layout, spec: IndexSpec) -> tuple[bool, bool]:
    """Make the vector index without blocking writes (``CREATE INDEX CONCURRENTLY``, in autocommit). Returns
    (whether a valid one serves the table afterwards, whether this call built it); not ready while another process
    is still building it. A build that failed or was cancelled leaves an invalid index, dropped here before trying
    again."""
    if spec.kind == "flat":
        return False, False
    state = await conn.fetchrow(_HNSW_STATE, quote(t.hnsw_index), t.table)
    if state is not None:
        if _matches(state, t, spec):
            return True, False
        if await _being_built(conn, t):
            return False, False
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(t.hnsw_index)}")
    await _create_index(conn, t, spec, concurrently=True)
    state = await conn.fetchrow(_HNSW_STATE, quote(t.hnsw_index), t.table)
    ready = state is not None and _matches(state, t, spec)
    return ready, ready


def _opclass(t: Layout) -> str:
    opclass = metric_ops(t.metric).opclass
    if t.vector_type == "vector":
        return opclass
    return t.vector_type.rsplit(".", 1)[0] + "." + opclass


_MASTRA_TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type ty ON ty.oid = a.atttypid AND ty.typname IN ('vector', 'halfvec')
WHERE c.relkind IN ('r', 'p') AND n.nspname = ANY(current_schemas(false))
  AND c.relname ~ '^memory_messages(_[0-9]+)?$'
  AND EXISTS (SELECT 1 FROM pg_attribute m WHERE m.attrelid = c.oid AND m.attname = 'metadata' AND NOT m.attisdropped)
ORDER BY c.relname
"""


async def message_tables(conn: Any) -> list[str]:
    """Every Mastra message vector table the connection's search path sees (one per embedding dimension)."""
    return [str(row[0]) for row in await conn.fetch(_MASTRA_TABLES)]
