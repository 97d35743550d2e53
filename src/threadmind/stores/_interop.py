"""One-time import of Mastra's libsql message vectors into threadmind's own vector records.

A database written by Mastra (``LibSQLStore`` + ``LibSQLVector`` on one file) keeps its message vectors in
``memory_messages`` / ``memory_messages_<dim>`` tables (``vector_id``, ``embedding F32_BLOB(dim)``, JSON
``metadata``). threadmind keeps vectors in ``threadmind_vectors`` instead, so when its own index is still
empty the rows are copied over once (Mastra's tables are only read, never changed). Scope comes from the
message rows (the source of truth), not from the vector metadata; vectors of deleted messages are skipped.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import sqlite3
import struct
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from ._vector_records import SQLExecutor, SQLiteVectorRecords, VectorRecord

__all__ = ("MastraVectorTable", "import_mastra_vectors", "mastra_vector_tables", "vector_tables_in")

T = TypeVar("T")
_log = logging.getLogger("threadmind.interop")

_TABLE_NAME = re.compile(r"^memory_messages(?:_(\d+))?$")
_F32_BLOB = re.compile(r"F32_BLOB\s*\(\s*(\d+)\s*\)", re.IGNORECASE)
_MARKER = "mastra_vectors_imported:{}"
_IN_CHUNK = 500
_json = msgspec.json.Decoder()


class MastraVectorTable(msgspec.Struct, frozen=True):
    """A Mastra message vector table found in the database: its name (= index name) and dimension."""

    name: str
    dimension: int


def vector_tables_in(conn: sqlite3.Connection) -> list[MastraVectorTable]:
    found: list[MastraVectorTable] = []
    for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory_messages%' ORDER BY name"
    ):
        named = _TABLE_NAME.match(str(name))
        blob = _F32_BLOB.search(str(sql or ""))
        if named is None or blob is None:
            continue
        dimension = int(blob.group(1))
        # Mastra names the index after the dimension; a table whose name disagrees is not one of its indexes.
        expected = "memory_messages" if dimension == 1536 else f"memory_messages_{dimension}"
        if dimension >= 1 and name == expected:
            found.append(MastraVectorTable(str(name), dimension))
    return found


async def mastra_vector_tables(store: object) -> list[MastraVectorTable]:
    """The Mastra message vector tables in a SQL store's database (none for other stores)."""
    if not isinstance(store, SQLExecutor):
        return []
    return await store.execute_read(vector_tables_in)


def _valid_embedding(raw: object, dimension: int) -> bytes | None:
    if not isinstance(raw, (bytes, memoryview)) or len(raw) != 4 * dimension:
        return None
    data = bytes(raw)
    if not all(math.isfinite(v) for v in struct.unpack(f"<{dimension}f", data)):
        return None
    return data


def _read_table(conn: sqlite3.Connection, table: MastraVectorTable) -> tuple[bool, list[VectorRecord], int]:
    """(already imported or index not empty, records to import, rows skipped) for one table."""
    marker = conn.execute("SELECT value FROM threadmind_meta WHERE key = ?", (_MARKER.format(table.name),)).fetchone()
    if marker is not None:
        return True, [], 0
    has_ours = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'threadmind_vectors'"
    ).fetchone()
    if has_ours and conn.execute(
        "SELECT 1 FROM threadmind_vectors WHERE index_name = ? LIMIT 1", (table.name,)
    ).fetchone():
        return True, [], 0
    # NOT INDEXED: a SQLite without libsql must not plan through the (empty to it) DiskANN index.
    rows = conn.execute(
        f'SELECT vector_id, embedding, metadata FROM "{table.name}" NOT INDEXED ORDER BY rowid'
    ).fetchall()
    by_message: dict[str, list[bytes]] = {}
    skipped = 0
    for _vector_id, embedding, metadata in rows:
        data = _valid_embedding(embedding, table.dimension)
        try:
            meta: Any = _json.decode(metadata) if isinstance(metadata, (str, bytes)) else None
        except msgspec.DecodeError:
            meta = None
        message_id = meta.get("message_id") if isinstance(meta, dict) else None
        if data is None or not isinstance(message_id, str) or not message_id:
            skipped += 1
            continue
        by_message.setdefault(message_id, []).append(data)
    ids = list(by_message)
    scope: dict[str, tuple[str, str, str, str]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        part = ids[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(part))
        for message_id, thread_id, resource_id, role, created_at in conn.execute(
            'SELECT m.id, m.thread_id, COALESCE(m."resourceId", t."resourceId"), m.role, m."createdAt" '
            f'FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.id IN ({marks})',
            part,
        ):
            if resource_id:
                scope[str(message_id)] = (str(thread_id), str(resource_id), str(role), str(created_at))
    records: list[VectorRecord] = []
    for message_id, embeddings in by_message.items():
        if message_id not in scope:  # the message was deleted (or never stored): nothing to recall
            skipped += len(embeddings)
            continue
        thread_id, resource_id, role, created_at = scope[message_id]
        single = len(embeddings) == 1
        for i, data in enumerate(embeddings):
            records.append(VectorRecord(
                vector_id=message_id if single else f"{message_id}#{i}",
                message_id=message_id,
                thread_id=thread_id,
                resource_id=resource_id,
                role=role,
                created_at=created_at,
                embedding=data,
            ))
    return False, records, skipped


async def import_mastra_vectors(store: object, *, index_names: Sequence[str] | None = None) -> int:
    """Copy Mastra's message vectors into threadmind's vector records; returns how many were imported.

    Runs once per index (a marker in ``threadmind_meta`` records it) and only while threadmind's index of
    the same name (so the same dimension) is empty. ``index_names`` limits the import to those indexes.
    Stores without SQL jobs (``InMemoryStore``) have nothing to import.
    """
    if not isinstance(store, SQLExecutor):
        return 0
    tables = await store.execute_read(vector_tables_in)
    if index_names is not None:
        tables = [t for t in tables if t.name in set(index_names)]
    if not tables:
        return 0
    records_store = SQLiteVectorRecords(store)
    total = 0
    for table in tables:
        done, records, skipped = await store.execute_read(functools.partial(_read_table, table=table))
        if done:
            continue
        if records:
            await records_store.upsert(table.name, records)
        count = len(records)

        def _mark(conn: sqlite3.Connection, name: str = table.name, n: int = count) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO threadmind_meta (key, value) VALUES (?, ?)", (_MARKER.format(name), str(n))
            )

        await store.execute_write(_mark)
        if count or skipped:
            _log.info("imported %d Mastra vectors from %s (%d skipped)", count, table.name, skipped)
        total += count
    return total
