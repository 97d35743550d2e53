"""DDL for ``PostgresStore``: Mastra's ``@mastra/pg`` memory tables verbatim, plus threadmind's own tables.

The four ``mastra_*`` tables are what ``@mastra/pg`` 1.27 creates (read from a database its ``init()`` set up):
column names, order, types, ``NOT NULL``, the ``…Z`` ``timestamptz`` twin of every timestamp column (default
``now()``), primary keys and the three indexes, all ``IF NOT EXISTS``, so a database Mastra created opens unchanged
and Mastra opens one threadmind created without altering it. Mastra's tables are never altered; threadmind-only
data lives in ``threadmind_*`` tables:

* ``threadmind_meta``: ``schema_version``;
* ``threadmind_message_seq`` / ``threadmind_thread_seq``: an insertion sequence per message / thread id, so equal
  timestamps keep their save order (Mastra's tables have none; its own rows sort by id on ties, as Mastra does);
* ``threadmind_vectors``, ``…_vector_tombstones``, ``…_vector_seq``, ``…_vector_pruned``, ``…_vector_pending``: the
  vector records (the same tables and semantics as the SQLite store's, embeddings as ``bytea``; an identity column
  ``pos`` plays the part of SQLite's rowid: a row's storage position, kept by an upsert);
* ``threadmind_leases`` and the ``threadmind_lease_tokens`` and ``threadmind_presence_keys`` sequences: who holds
  which thread for a turn, and whether that holder's process is still connected (see ``_lease_rows``);
* ``threadmind_fail(text)``: raises, so one statement can abort itself when a check made inside it fails;
* ``threadmind_include_windows(...)``: the include windows of ``list_messages``, whose plan each connection keeps
  (see ``_queries``).

**Migrations** are idempotent and race-free: a fast unlocked read of the version first; when it is missing or
old, one transaction takes a transaction-scoped advisory lock (never a session lock, which would leak across
PgBouncer's transaction pooling), re-reads the version, runs the DDL and records the version.
"""

from __future__ import annotations

from typing import Any

from ...errors import StorageError
from ._queries import INCLUDE_WINDOWS_DDL

__all__ = ("MASTRA_DDL", "SCHEMA_VERSION", "THREADMIND_DDL", "migrate")

SCHEMA_VERSION = 6
"""Version of threadmind's own tables; stored in ``threadmind_meta`` under ``schema_version``."""

_LOCK_KEY = "threadmind.schema"  # hashed with hashtextextended into a 64-bit advisory key
FAIL_SQLSTATE = "TM001"  # raised by threadmind_fail()


def _ts(*names: str) -> str:
    return ",\n".join(f'  "{name}Z" TIMESTAMPTZ DEFAULT NOW()' for name in names)


MASTRA_DDL: tuple[str, ...] = (
    'CREATE TABLE IF NOT EXISTS mastra_threads (\n'
    '  "id" TEXT PRIMARY KEY NOT NULL,\n'
    '  "resourceId" TEXT NOT NULL,\n'
    '  "title" TEXT NOT NULL,\n'
    '  "metadata" JSONB,\n'
    '  "createdAt" TIMESTAMP NOT NULL,\n'
    '  "updatedAt" TIMESTAMP NOT NULL,\n'
    f'{_ts("createdAt", "updatedAt")}\n'
    ')',
    'CREATE TABLE IF NOT EXISTS mastra_messages (\n'
    '  "id" TEXT PRIMARY KEY NOT NULL,\n'
    '  "thread_id" TEXT NOT NULL,\n'
    '  "content" TEXT NOT NULL,\n'
    '  "role" TEXT NOT NULL,\n'
    '  "type" TEXT NOT NULL,\n'
    '  "createdAt" TIMESTAMP NOT NULL,\n'
    '  "resourceId" TEXT,\n'
    f'{_ts("createdAt")}\n'
    ')',
    'CREATE TABLE IF NOT EXISTS mastra_resources (\n'
    '  "id" TEXT PRIMARY KEY NOT NULL,\n'
    '  "workingMemory" TEXT,\n'
    '  "metadata" JSONB,\n'
    '  "createdAt" TIMESTAMP NOT NULL,\n'
    '  "updatedAt" TIMESTAMP NOT NULL,\n'
    f'{_ts("createdAt", "updatedAt")}\n'
    ')',
    'CREATE TABLE IF NOT EXISTS mastra_observational_memory (\n'
    '  "id" TEXT PRIMARY KEY NOT NULL,\n'
    '  "lookupKey" TEXT NOT NULL,\n'
    '  "scope" TEXT NOT NULL,\n'
    '  "resourceId" TEXT,\n'
    '  "threadId" TEXT,\n'
    '  "activeObservations" TEXT NOT NULL,\n'
    '  "activeObservationsPendingUpdate" TEXT,\n'
    '  "originType" TEXT NOT NULL,\n'
    '  "config" TEXT NOT NULL,\n'
    '  "generationCount" INTEGER NOT NULL,\n'
    '  "lastObservedAt" TIMESTAMP,\n'
    '  "lastReflectionAt" TIMESTAMP,\n'
    '  "pendingMessageTokens" INTEGER NOT NULL,\n'
    '  "totalTokensObserved" INTEGER NOT NULL,\n'
    '  "observationTokenCount" INTEGER NOT NULL,\n'
    '  "isObserving" BOOLEAN NOT NULL,\n'
    '  "isReflecting" BOOLEAN NOT NULL,\n'
    '  "observedMessageIds" JSONB,\n'
    '  "observedTimezone" TEXT,\n'
    '  "bufferedObservations" TEXT,\n'
    '  "bufferedObservationTokens" INTEGER,\n'
    '  "bufferedMessageIds" JSONB,\n'
    '  "bufferedReflection" TEXT,\n'
    '  "bufferedReflectionTokens" INTEGER,\n'
    '  "bufferedReflectionInputTokens" INTEGER,\n'
    '  "reflectedObservationLineCount" INTEGER,\n'
    '  "bufferedObservationChunks" JSONB,\n'
    '  "isBufferingObservation" BOOLEAN NOT NULL,\n'
    '  "isBufferingReflection" BOOLEAN NOT NULL,\n'
    '  "lastBufferedAtTokens" INTEGER NOT NULL,\n'
    '  "lastBufferedAtTime" TIMESTAMP,\n'
    '  "metadata" JSONB,\n'
    '  "createdAt" TIMESTAMP NOT NULL,\n'
    '  "updatedAt" TIMESTAMP NOT NULL,\n'
    f'{_ts("lastObservedAt", "lastReflectionAt", "lastBufferedAtTime", "createdAt", "updatedAt")}\n'
    ')',
    'CREATE INDEX IF NOT EXISTS idx_om_lookup_key ON mastra_observational_memory ("lookupKey")',
    'CREATE INDEX IF NOT EXISTS mastra_threads_resourceid_createdat_idx ON mastra_threads ("resourceId", '
    '"createdAt" DESC)',
    'CREATE INDEX IF NOT EXISTS mastra_messages_thread_id_createdat_idx ON mastra_messages (thread_id, '
    '"createdAt" DESC)',
)

THREADMIND_DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS threadmind_meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS threadmind_message_seq (\n"
    "  message_id TEXT PRIMARY KEY,\n"
    "  seq BIGINT GENERATED ALWAYS AS IDENTITY NOT NULL\n"
    ")",
    "CREATE TABLE IF NOT EXISTS threadmind_thread_seq (\n"
    "  thread_id TEXT PRIMARY KEY,\n"
    "  seq BIGINT GENERATED ALWAYS AS IDENTITY NOT NULL\n"
    ")",
    "CREATE TABLE IF NOT EXISTS threadmind_vectors (\n"
    "  index_name TEXT NOT NULL,\n"
    "  vector_id TEXT NOT NULL,\n"
    "  message_id TEXT NOT NULL,\n"
    "  thread_id TEXT NOT NULL,\n"
    "  resource_id TEXT NOT NULL,\n"
    "  role TEXT NOT NULL,\n"
    "  created_at TEXT NOT NULL,\n"
    "  embedding BYTEA NOT NULL,\n"
    "  seq BIGINT NOT NULL,\n"
    "  pos BIGINT GENERATED ALWAYS AS IDENTITY,\n"
    "  PRIMARY KEY (index_name, vector_id)\n"
    ")",
    # version 2 databases: their rows get positions in storage order
    "ALTER TABLE threadmind_vectors ADD COLUMN IF NOT EXISTS pos BIGINT GENERATED ALWAYS AS IDENTITY",
    "CREATE INDEX IF NOT EXISTS threadmind_vectors_message ON threadmind_vectors (message_id)",
    "CREATE INDEX IF NOT EXISTS threadmind_vectors_thread ON threadmind_vectors (thread_id)",
    "CREATE INDEX IF NOT EXISTS threadmind_vectors_resource ON threadmind_vectors (resource_id)",
    "CREATE INDEX IF NOT EXISTS threadmind_vectors_seq ON threadmind_vectors (index_name, seq)",
    "CREATE INDEX IF NOT EXISTS threadmind_vectors_pos ON threadmind_vectors (index_name, pos)",
    "CREATE TABLE IF NOT EXISTS threadmind_vector_tombstones (\n"
    "  index_name TEXT NOT NULL,\n"
    "  vector_id TEXT NOT NULL,\n"
    "  seq BIGINT NOT NULL,\n"
    "  PRIMARY KEY (index_name, vector_id)\n"
    ")",
    "CREATE INDEX IF NOT EXISTS threadmind_vector_tombstones_seq ON threadmind_vector_tombstones (index_name, seq)",
    "CREATE TABLE IF NOT EXISTS threadmind_vector_seq (\n"
    "  id INTEGER PRIMARY KEY CHECK (id = 0),\n"
    "  seq BIGINT NOT NULL\n"
    ")",
    "INSERT INTO threadmind_vector_seq (id, seq) VALUES (0, 0) ON CONFLICT (id) DO NOTHING",
    "CREATE TABLE IF NOT EXISTS threadmind_vector_pruned (\n"
    "  index_name TEXT PRIMARY KEY,\n"
    "  seq BIGINT NOT NULL\n"
    ")",
    "CREATE TABLE IF NOT EXISTS threadmind_vector_pending (\n"
    "  message_id TEXT PRIMARY KEY,\n"
    "  thread_id TEXT NOT NULL,\n"
    "  resource_id TEXT NOT NULL,\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  last_error TEXT,\n"
    "  created_at DOUBLE PRECISION NOT NULL,\n"
    "  updated_at DOUBLE PRECISION NOT NULL\n"
    ")",
    "CREATE SEQUENCE IF NOT EXISTS threadmind_lease_tokens",
    "CREATE TABLE IF NOT EXISTS threadmind_leases (\n"
    "  key TEXT PRIMARY KEY,\n"
    "  owner TEXT NOT NULL,\n"
    "  token BIGINT NOT NULL,\n"
    "  expires_at TIMESTAMPTZ NOT NULL\n"
    ")",
    # version 3 databases: a lease names its holder's presence (see _lease_rows)
    "ALTER TABLE threadmind_leases ADD COLUMN IF NOT EXISTS presence BIGINT",
    "CREATE SEQUENCE IF NOT EXISTS threadmind_presence_keys",
    # version 3 databases: the keyword index (see _tsvector); messages written before it are indexed by
    # PostgresStore.build_keyword_index
    "CREATE TABLE IF NOT EXISTS threadmind_keywords (\n"
    "  message_id TEXT PRIMARY KEY,\n"
    "  thread_id TEXT NOT NULL,\n"
    "  resource_id TEXT NOT NULL,\n"
    "  len INTEGER NOT NULL,\n"
    "  tsv TSVECTOR NOT NULL\n"
    ")",
    "CREATE INDEX IF NOT EXISTS threadmind_keywords_tsv ON threadmind_keywords USING gin (tsv)",
    "CREATE INDEX IF NOT EXISTS threadmind_keywords_resource ON threadmind_keywords (resource_id)",
    "CREATE INDEX IF NOT EXISTS threadmind_keywords_thread ON threadmind_keywords (thread_id)",
    # version 5: each keyword scope's version (the sum of its slots' counters), bumped by every keyword write in its
    # statement, so a process may trust the scope's rows it keeps in memory while the version stays (see
    # _tsvector)
    "CREATE TABLE IF NOT EXISTS threadmind_keyword_versions (\n"
    "  scope TEXT NOT NULL,\n"
    "  slot INTEGER NOT NULL,\n"
    "  n BIGINT NOT NULL,\n"
    "  PRIMARY KEY (scope, slot)\n"
    ")",
    "CREATE OR REPLACE FUNCTION threadmind_fail(message TEXT) RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$\n"
    f"BEGIN RAISE EXCEPTION '%', message USING ERRCODE = '{FAIL_SQLSTATE}'; END\n"
    "$$",
    # version 6: list_messages' include windows as a function that keeps its plan (see _queries)
    INCLUDE_WINDOWS_DDL,
)

_READ_VERSION = "SELECT value FROM threadmind_meta WHERE key = 'schema_version'"
_UNDEFINED_TABLE = "42P01"
# Another process (e.g. Mastra, which takes no lock of ours) created the same object at the same moment.
_CREATE_RACES = frozenset({"42P07", "42710", "23505"})


def _check(stored: Any) -> int:
    try:
        version = int(stored)
    except (TypeError, ValueError):
        raise StorageError(f"threadmind_meta.schema_version is not an integer: {stored!r}") from None
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"the database has threadmind schema_version {version}, newer than the supported {SCHEMA_VERSION}; "
            "upgrade threadmind to open it"
        )
    return version


async def _current(conn: Any) -> int | None:
    """The stored schema version, or None when threadmind's tables do not exist yet (one round trip)."""
    try:
        value = await conn.fetchval(_READ_VERSION)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == _UNDEFINED_TABLE:
            return None
        raise
    return None if value is None else _check(value)


async def migrate(conn: Any) -> None:
    """Create or upgrade the schema on ``conn`` (an asyncpg connection); idempotent, safe under concurrency.

    :raises StorageError: the database holds a newer threadmind schema.
    """
    if await _current(conn) == SCHEMA_VERSION:
        return
    for attempt in range(3):
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", _LOCK_KEY)
                if await _current_locked(conn) == SCHEMA_VERSION:
                    return
                for statement in (*MASTRA_DDL, *THREADMIND_DDL):
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO threadmind_meta (key, value) VALUES ('schema_version', $1) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", str(SCHEMA_VERSION))
            return
        except Exception as exc:
            if getattr(exc, "sqlstate", None) not in _CREATE_RACES or attempt == 2:
                raise


async def _current_locked(conn: Any) -> int | None:
    """The version read inside the migration transaction; a missing table must not abort that transaction."""
    exists = await conn.fetchval("SELECT to_regclass('threadmind_meta') IS NOT NULL")
    if not exists:
        return None
    value = await conn.fetchval(_READ_VERSION)
    return None if value is None else _check(value)
