"""SQLite rows of Mastra's memory tables: how messages, threads and resources are read, written and bulk-saved.

Functions that run on the writer or reader thread, inside a job's transaction (see ``_group_commit``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from ...codecs import Message, MessageContent, Resource, Thread, encode_json
from ...codecs._json import content_from_text, decode_content
from ...codecs._jsonb import decode_jsonb
from ...codecs._time import from_iso, to_iso
from ...errors import InvalidMessage, MessageIdTaken, StorageError, ThreadNotFound, ValidationError
from .._protocol import UnsetType
from .._query import MessageFilter, check_owner, encode_content_text, encode_metadata, updated_resource

__all__ = (
    "CHUNK",
    "EXISTS_CODE",
    "MSG_COLS",
    "RESOURCE_ROW",
    "Row",
    "SortKey",
    "THREAD_COLS",
    "UPSERT_HEAD",
    "UPSERT_TAIL",
    "bump",
    "chunks",
    "content_from_blob",
    "content_from_column",
    "decode_metadata",
    "existing",
    "fetch_thread_row",
    "include_rows",
    "keyed",
    "message_from_row",
    "message_row",
    "page_after",
    "placeholders",
    "resource_from_row",
    "row_time",
    "save_rows",
    "thread_from_row",
    "tm_json",
    "unfenced",
    "upsert",
    "upsert_returning",
    "write_resource",
)

T = TypeVar("T")

CHUNK = 500  # rows per multi-row statement: 7 × 500 parameters, far below SQLite's 32 766 limit
MSG_COLS = 'id, content, role, type, "createdAt", thread_id, "resourceId", rowid'
THREAD_COLS = 'id, "resourceId", title, metadata, "createdAt", "updatedAt"'
UPSERT_HEAD = (
    'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") VALUES '
)
UPSERT_TAIL = (
    ' ON CONFLICT(id) DO UPDATE SET thread_id = excluded.thread_id, content = excluded.content, '
    'role = excluded.role, type = excluded.type, "resourceId" = excluded."resourceId"'
)
_json_any = msgspec.json.Decoder()
EXISTS_CODE = "THREADMIND_THREAD_EXISTS"




Row = tuple[Any, ...]
SortKey = tuple[str, int]

def tm_json(value: Any) -> Any:
    """SQL ``tm_json(x)``: JSON text for a JSONB blob, the value itself otherwise (deterministic)."""
    if isinstance(value, bytes):
        return msgspec.json.encode(decode_jsonb(value)).decode()
    return value


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def decode_metadata(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, (str, bytes)):
        raise StorageError(f"{where} metadata is not JSON text or a JSONB blob (a {type(value).__name__})")
    try:
        decoded = decode_jsonb(value, f"{where} metadata") if isinstance(value, bytes) else _json_any.decode(value)
    except (ValueError, msgspec.DecodeError, RecursionError) as exc:
        raise StorageError(f"{where} metadata is not valid JSON/JSONB: {exc}") from exc
    if decoded is not None and not isinstance(decoded, dict):
        raise StorageError(f"{where} metadata is not a JSON object")
    return decoded


def row_time(value: Any, where: str) -> datetime:
    """A stored ISO-8601 time column; ``StorageError`` naming the row and column when it is not one."""
    try:
        return from_iso(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StorageError(f"{where} is not an ISO-8601 time: {value!r}") from exc


def thread_from_row(row: Row) -> Thread:
    where = f"thread {row[0]!r}"
    return Thread(row[0], row[1], row[2], decode_metadata(row[3], where),
                  row_time(row[4], f"{where} createdAt"), row_time(row[5], f"{where} updatedAt"))


def content_from_blob(message_id: str, raw: bytes) -> MessageContent:
    """A ``content`` blob: JSONB (SQLite's binary JSON), else JSON text stored as a blob."""
    try:
        value = decode_jsonb(raw, f"message {message_id!r} content")
    except ValidationError:
        return content_from_column(message_id, raw.decode("utf-8", "replace"))  # what a JavaScript reader sees
    if isinstance(value, str):
        return content_from_text(value)
    try:
        return decode_content(encode_json(value))
    except InvalidMessage as exc:
        raise StorageError(f"message {message_id!r} has invalid content: {exc.message}") from exc


def content_from_column(message_id: str, raw: Any) -> MessageContent:
    """The ``content`` column: JSON text as Mastra writes it, a JSONB blob, or plain text (reference §5.2)."""
    if isinstance(raw, bytes):
        return content_from_blob(message_id, raw)
    if not isinstance(raw, str):
        raise StorageError(f"message {message_id!r} has no content text (a {type(raw).__name__})")
    try:
        return decode_content(raw)
    except InvalidMessage as exc:
        try:
            value = _json_any.decode(raw)
        except (msgspec.DecodeError, RecursionError, UnicodeError):  # not JSON: a plain-text message
            return content_from_text(raw)
        if isinstance(value, str):
            return content_from_text(value)
        raise StorageError(f"message {message_id!r} has invalid content: {exc.message}") from exc


def message_from_row(row: Row) -> Message:
    mid, content, role, mtype, created, thread_id, resource_id = row[:7]
    return Message(mid, role, content_from_column(mid, content), row_time(created, f"message {mid!r} createdAt"),
                   thread_id, resource_id, None if mtype == "v2" else mtype)


def keyed(rows: Iterable[Row]) -> list[tuple[SortKey, Message]]:
    return [((row[4], row[7]), message_from_row(row)) for row in rows]


def fetch_thread_row(conn: sqlite3.Connection, thread_id: str) -> Row | None:
    row: Row | None = conn.execute(f"SELECT {THREAD_COLS} FROM mastra_threads WHERE id = ?", (thread_id,)).fetchone()
    return row


def upsert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    for chunk in chunks(rows):
        params = [value for row in chunk for value in row]
        conn.execute(UPSERT_HEAD + ",".join(["(?,?,?,?,?,?,?)"] * len(chunk)) + UPSERT_TAIL, params)


def upsert_returning(conn: sqlite3.Connection, rows: Sequence[Row], thread_id: str) -> list[tuple[str, str]]:
    """Upsert rows of ``thread_id``; rows whose id belongs to another thread are left alone (not returned)."""
    out: list[tuple[str, str]] = []
    for chunk in chunks(rows):
        params = [value for row in chunk for value in row]
        out.extend(conn.execute(
            UPSERT_HEAD + ",".join(["(?,?,?,?,?,?,?)"] * len(chunk)) + UPSERT_TAIL
            + ' WHERE mastra_messages.thread_id = excluded.thread_id RETURNING id, "createdAt"', params).fetchall())
    return out


def existing(conn: sqlite3.Connection, ids: Sequence[str]) -> list[Row]:
    found: list[Row] = []
    for chunk in chunks(ids):
        found.extend(conn.execute(
            f'SELECT id, thread_id, "createdAt" FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})',
            chunk,
        ))
    return found


def bump(conn: sqlite3.Connection, thread_ids: Iterable[str], now: str) -> None:
    # One statement rather than executemany: every executed row is a GIL round trip for this thread, and
    # under load the event loop holds the GIL, so each round trip can wait (see run_saves).
    for chunk in chunks(list(thread_ids)):
        conn.execute(f'UPDATE mastra_threads SET "updatedAt" = ? WHERE id IN ({placeholders(len(chunk))})',
                     (now, *chunk))


def save_rows(
    conn: sqlite3.Connection, thread_id: str, rows: Sequence[Row], messages: Sequence[Message], now: str
) -> dict[str, str]:
    """(writer) One thread's part of a save: check and upsert its rows, bump the thread; raises to roll back.

    Returns the re-saved ids whose stored ``createdAt`` was kept (differs from the one written).
    """
    # Existence check, owner lookup and the updatedAt bump in one statement (undone by the savepoint or
    # transaction if a later check fails). fetchall: a RETURNING statement must run to completion before
    # RELEASE/COMMIT.
    found = conn.execute('UPDATE mastra_threads SET "updatedAt" = ? WHERE id = ? RETURNING "resourceId"',
                         (now, thread_id)).fetchall()
    if not found:
        raise ThreadNotFound(thread_id)
    check_owner(thread_id, found[0][0], messages)
    stored = upsert_returning(conn, rows, thread_id)
    if len(stored) != len(rows):  # an id of another thread was skipped by the upsert's WHERE
        for mid, other, _ in existing(conn, [row[0] for row in rows]):
            if other != thread_id:
                raise MessageIdTaken(mid, other, thread_id)
    # Only re-saved ids come back with a createdAt other than the one we wrote.
    written = {row[0]: row[5] for row in rows}
    return {mid: created for mid, created in stored if created != written[mid]}


def unfenced(conn: sqlite3.Connection) -> None:
    """The fence check of an unfenced write: nothing to check."""


def message_row(message: Message) -> Row:
    return (message.id, message.thread_id, encode_content_text(message.content), message.role,
            message.type or "v2", to_iso(message.created_at), message.resource_id)



RESOURCE_ROW = 'SELECT id, "workingMemory", metadata, "createdAt", "updatedAt" FROM mastra_resources WHERE id = ?'


def write_resource(conn: sqlite3.Connection, resource_id: str, row: Row | None, old: Resource | None,
                    working_memory: str | None | UnsetType, metadata: Mapping[str, Any] | None) -> Resource:
    """Upsert the resource row with the given fields (metadata shallow-merged over ``old``'s)."""
    new = updated_resource(resource_id, old, working_memory, metadata)
    meta = row[2] if row is not None and metadata is None else encode_metadata(new.metadata, "metadata")
    conn.execute(
        'INSERT INTO mastra_resources (id, "workingMemory", metadata, "createdAt", "updatedAt") '
        'VALUES (?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "workingMemory" = excluded."workingMemory", '
        'metadata = excluded.metadata, "updatedAt" = excluded."updatedAt"',
        (resource_id, new.working_memory, meta, to_iso(new.created_at), to_iso(new.updated_at)),
    )
    return new


def resource_from_row(row: Row) -> Resource:
    where = f"resource {row[0]!r}"
    return Resource(row[0], row[1], decode_metadata(row[2], where), row_time(row[3], f"{where} createdAt"),
                    row_time(row[4], f"{where} updatedAt"))


def page_after(thread_id: str, after: SortKey) -> Callable[[sqlite3.Connection], list[Row]]:
    """A read of the next chunk of a thread's messages after ``after`` (keyset paging for export)."""

    def read(conn: sqlite3.Connection) -> list[Row]:
        return conn.execute(
            f'SELECT {MSG_COLS} FROM mastra_messages WHERE thread_id = ? AND ("createdAt", rowid) > (?, ?) '
            f'ORDER BY "createdAt", rowid LIMIT {CHUNK}', (thread_id, *after)).fetchall()

    return read


def include_rows(conn: sqlite3.Connection, flt: MessageFilter) -> list[tuple[SortKey, Message]]:
    """Context windows: each target plus up to N rows before / M rows after it in its own thread."""
    out: list[Row] = []
    resource = ' AND "resourceId" = ?' if flt.resource_id is not None else ""
    extra: tuple[Any, ...] = (flt.resource_id,) if flt.resource_id is not None else ()
    for inc in flt.include:
        target = conn.execute(f"SELECT {MSG_COLS} FROM mastra_messages WHERE id = ?{resource}",
                              (inc.id, *extra)).fetchone()
        if target is None:
            continue
        out.append(target)
        thread_id, created, rowid = target[5], target[4], target[7]
        if inc.with_previous_messages:
            out.extend(conn.execute(
                f'SELECT {MSG_COLS} FROM mastra_messages WHERE thread_id = ?{resource} AND '
                '("createdAt", rowid) < (?, ?) ORDER BY "createdAt" DESC, rowid DESC LIMIT ?',
                (thread_id, *extra, created, rowid, inc.with_previous_messages)))
        if inc.with_next_messages:
            out.extend(conn.execute(
                f'SELECT {MSG_COLS} FROM mastra_messages WHERE thread_id = ?{resource} AND '
                '("createdAt", rowid) > (?, ?) ORDER BY "createdAt" ASC, rowid ASC LIMIT ?',
                (thread_id, *extra, created, rowid, inc.with_next_messages)))
    return keyed(out)
