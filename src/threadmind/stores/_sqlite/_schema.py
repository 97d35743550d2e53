"""DDL for the SQLite store: Mastra's libsql memory tables verbatim, plus threadmind's own meta table.

The three ``mastra_*`` tables, their column names/order/types and the two message indexes are exactly what
@mastra/libsql creates (reference §5.1), all ``IF NOT EXISTS`` so an existing Mastra database opens
unchanged. Mastra's tables are never altered; threadmind-only data lives in ``threadmind_*`` tables.
"""

from __future__ import annotations

import sqlite3

from ...errors import StorageError
from ._fts import KEYWORD_DDL, SCOPE_COLUMNS, fts5_available

__all__ = ("SCHEMA_VERSION", "create_schema")

SCHEMA_VERSION = 1
"""Version of threadmind's own tables; stored in ``threadmind_meta`` under ``schema_version``."""

_DDL = (
    'CREATE TABLE IF NOT EXISTS mastra_threads (\n'
    '  "id" TEXT NOT NULL PRIMARY KEY,\n'
    '  "resourceId" TEXT NOT NULL,\n'
    '  "title" TEXT NOT NULL,\n'
    '  "metadata" TEXT,\n'
    '  "createdAt" TEXT NOT NULL,\n'
    '  "updatedAt" TEXT NOT NULL\n'
    ')',
    'CREATE TABLE IF NOT EXISTS mastra_messages (\n'
    '  "id" TEXT NOT NULL PRIMARY KEY,\n'
    '  "thread_id" TEXT NOT NULL,\n'
    '  "content" TEXT NOT NULL,\n'
    '  "role" TEXT NOT NULL,\n'
    '  "type" TEXT NOT NULL,\n'
    '  "createdAt" TEXT NOT NULL,\n'
    '  "resourceId" TEXT\n'
    ')',
    'CREATE TABLE IF NOT EXISTS mastra_resources (\n'
    '  "id" TEXT NOT NULL PRIMARY KEY,\n'
    '  "workingMemory" TEXT,\n'
    '  "metadata" TEXT,\n'
    '  "createdAt" TEXT NOT NULL,\n'
    '  "updatedAt" TEXT NOT NULL\n'
    ')',
    'CREATE INDEX IF NOT EXISTS idx_messages_thread_created_at ON mastra_messages (thread_id, "createdAt")',
    'CREATE INDEX IF NOT EXISTS idx_messages_thread_resource_created_at '
    'ON mastra_messages (thread_id, "resourceId", "createdAt")',
    "CREATE TABLE IF NOT EXISTS threadmind_meta (key TEXT PRIMARY KEY, value TEXT)",
    # Leases taken over from a frozen holder (the usual hold is a lock on the file beside the database; see
    # _peers). A write fenced by a lease checks this row in its own transaction.
    "CREATE TABLE IF NOT EXISTS threadmind_leases (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "pid INTEGER NOT NULL, token INTEGER NOT NULL, taken_at REAL NOT NULL, expires_at REAL NOT NULL, "
    "released INTEGER NOT NULL DEFAULT 0)",
)



def create_schema(conn: sqlite3.Connection) -> None:
    """Create missing tables and indexes and record the schema version (runs inside a write transaction).

    :raises StorageError: the file was written by a newer threadmind schema, or this SQLite lacks FTS5 (the
        keyword index needs it; every mainstream build of Python's sqlite3 has it).
    """
    for statement in _DDL:
        conn.execute(statement)
    if not fts5_available(conn):
        raise StorageError(f"this SQLite ({sqlite3.sqlite_version}) was built without FTS5, which threadmind's "
                           "keyword index needs; use a Python whose sqlite3 has it")
    for statement in KEYWORD_DDL:
        conn.execute(statement)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(threadmind_keyword_scopes)")}
    for column in SCOPE_COLUMNS:  # (a file made before the column: added in place, every row at 0)
        if column not in columns:
            conn.execute(f"ALTER TABLE threadmind_keyword_scopes ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    row = conn.execute("SELECT value FROM threadmind_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT INTO threadmind_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return
    try:
        stored = int(row[0])
    except (TypeError, ValueError):
        raise StorageError(f"threadmind_meta.schema_version is not an integer: {row[0]!r}") from None
    if stored > SCHEMA_VERSION:
        raise StorageError(
            f"the database has threadmind schema_version {stored}, newer than the supported {SCHEMA_VERSION}; "
            "upgrade threadmind to open it"
        )
