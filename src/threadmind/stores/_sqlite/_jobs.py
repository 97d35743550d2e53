"""What ``SQLiteStore`` runs on its connections: each function builds the job (a write, run in a group-commit
transaction on the writer thread) or the read (run on the reader thread) of one store call, from arguments the
store has validated. Nothing here touches the event loop."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from ...codecs import Message, Resource, Thread
from ...codecs._time import to_iso, utc_now
from ...errors import MessageIdTaken, ThreadNotFound, ValidationError
from .._protocol import MessagePage, MessageQuery, ResourceChange, ThreadChange, UnsetType
from .._query import (
    MessageUpdate,
    ThreadListArgs,
    apply_update,
    assemble,
    check_resource_args,
    encode_content_text,
    encode_metadata,
    messages_has_more,
    sql_scalar,
    updated_thread,
    validate_message_query,
)
from ._fts import delete_keywords_of_ids, delete_keywords_of_thread, enqueue, enqueue_thread
from ._rows import (
    EXISTS_CODE,
    MSG_COLS,
    RESOURCE_ROW,
    THREAD_COLS,
    Row,
    SortKey,
    bump,
    chunks,
    existing,
    fetch_thread_row,
    include_rows,
    keyed,
    placeholders,
    resource_from_row,
    row_time,
    save_rows,
    thread_from_row,
    upsert,
    write_resource,
)

__all__ = ("created_reader", "delete_message_rows", "delete_thread_rows", "file_stats", "insert_thread",
           "message_reader", "messages_by_id", "modify_resource_row", "modify_thread_row", "move_thread", "save_one",
           "save_parts", "thread_list_reader", "update_message_rows", "update_thread_row", "upsert_resource")

# -- threads ---------------------------------------------------------------------------------------------------


def insert_thread(stored: Thread, meta: str | None, rows: Sequence[Row] = ()) -> Callable[[sqlite3.Connection], Thread]:
    """A new thread (``ValidationError`` if its id exists) and, atomically with it, these message rows (whose ids
    must be new: ``MessageIdTaken``)."""

    def job(conn: sqlite3.Connection) -> Thread:
        if conn.execute("SELECT 1 FROM mastra_threads WHERE id = ?", (stored.id,)).fetchone():
            raise ValidationError(f"Thread with id {stored.id} already exists", code=EXISTS_CODE)
        for mid, other, _ in existing(conn, [row[0] for row in rows]):
            raise MessageIdTaken(mid, other)
        conn.execute(
            f"INSERT INTO mastra_threads ({THREAD_COLS}) VALUES (?,?,?,?,?,?)",
            (stored.id, stored.resource_id, stored.title, meta, to_iso(stored.created_at),
             to_iso(stored.updated_at)),
        )
        if rows:
            upsert(conn, rows)
            enqueue(conn, (row[0] for row in rows))
        return stored

    return job


def thread_list_reader(resource_id: str | None, args: ThreadListArgs,
                       ) -> Callable[[sqlite3.Connection], tuple[int, list[Row]]]:
    """The total and the page of threads of ``list_threads`` (filtered by owner and scalar metadata equality)."""
    where: list[str] = []
    params: list[Any] = []
    if resource_id is not None:
        where.append('"resourceId" = ?')
        params.append(resource_id)
    for key, value in args.metadata:
        expr = ("json_extract(CASE WHEN typeof(metadata) = 'blob' THEN tm_json(metadata) ELSE metadata END, ?)")
        params.append(f"$.{key}")
        if value is None:
            where.append(f"{expr} IS NULL")
        else:
            where.append(f"{expr} = ?")
            params.append(sql_scalar(value))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    order = "DESC" if args.descending else "ASC"
    sql = (f'SELECT {THREAD_COLS} FROM mastra_threads{clause} ORDER BY "{args.order_column}" {order}, '
           f"rowid {order} LIMIT ? OFFSET ?")

    def read(conn: sqlite3.Connection) -> tuple[int, list[Row]]:
        total = conn.execute(f"SELECT COUNT(*) FROM mastra_threads{clause}", params).fetchone()[0]
        limit = -1 if args.limit is None else args.limit
        return total, conn.execute(sql, [*params, limit, args.offset]).fetchall()

    return read


def update_thread_row(thread_id: str, title: str | None,
                      metadata: Mapping[str, Any] | None) -> Callable[[sqlite3.Connection], Thread]:
    """Set the title (when given), shallow-merge metadata, bump ``updatedAt`` (``ThreadNotFound``)."""

    def job(conn: sqlite3.Connection) -> Thread:
        row = fetch_thread_row(conn, thread_id)
        if row is None:
            raise ThreadNotFound(thread_id, code="MASTRA_STORAGE_LIBSQL_UPDATE_THREAD_NOT_FOUND",
                                 message=f"Thread {thread_id} not found")
        old = thread_from_row(row)
        updated = updated_thread(old, title, metadata)
        meta = row[3] if metadata is None else encode_metadata(updated.metadata, "metadata")
        conn.execute('UPDATE mastra_threads SET title = ?, metadata = ?, "updatedAt" = ? WHERE id = ?',
                     (updated.title, meta, to_iso(updated.updated_at), thread_id))
        return updated

    return job


def delete_thread_rows(thread_id: str) -> Callable[[sqlite3.Connection], None]:
    """The thread, its messages and their keyword rows."""

    def job(conn: sqlite3.Connection) -> None:
        delete_keywords_of_thread(conn, thread_id)
        conn.execute("DELETE FROM mastra_messages WHERE thread_id = ?", (thread_id,))
        conn.execute("DELETE FROM mastra_threads WHERE id = ?", (thread_id,))

    return job


def move_thread(thread_id: str, resource_id: str) -> Callable[[sqlite3.Connection], Thread]:
    """The thread and all its messages filed under ``resource_id`` (their words indexed again: their scope moved)."""

    def job(conn: sqlite3.Connection) -> Thread:
        row = fetch_thread_row(conn, thread_id)
        if row is None:
            raise ThreadNotFound(thread_id, code="MASTRA_STORAGE_LIBSQL_UPDATE_THREAD_RESOURCE_ID_FAILED")
        now = utc_now()
        conn.execute('UPDATE mastra_threads SET "resourceId" = ?, "updatedAt" = ? WHERE id = ?',
                     (resource_id, to_iso(now), thread_id))
        conn.execute('UPDATE mastra_messages SET "resourceId" = ? WHERE thread_id = ?', (resource_id, thread_id))
        enqueue_thread(conn, thread_id)
        return msgspec.structs.replace(thread_from_row(row), resource_id=resource_id, updated_at=now)

    return job


def modify_thread_row(thread_id: str, change: Callable[[Thread], ThreadChange | None],
                      fenced: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], Thread | None]:
    """Read the thread and write what ``change`` makes of it (None: nothing to write), after the fence check."""

    def job(conn: sqlite3.Connection) -> Thread | None:
        fenced(conn)
        row = fetch_thread_row(conn, thread_id)
        if row is None:
            raise ThreadNotFound(thread_id, message=f"Thread {thread_id} not found")
        old = thread_from_row(row)
        wanted = change(old)
        if wanted is None:
            return None
        if wanted.title is not None and not isinstance(wanted.title, str):
            raise ValidationError("title must be a string or None")
        updated = updated_thread(old, wanted.title, wanted.metadata)
        meta = row[3] if wanted.metadata is None else encode_metadata(updated.metadata, "metadata")
        conn.execute('UPDATE mastra_threads SET title = ?, metadata = ?, "updatedAt" = ? WHERE id = ?',
                     (updated.title, meta, to_iso(updated.updated_at), thread_id))
        return updated

    return job


# -- messages --------------------------------------------------------------------------------------------------


def message_reader(query: MessageQuery) -> Callable[[sqlite3.Connection], MessagePage]:
    """Validate ``query`` and build the function that reads its page (reference §5.3: include windows and
    filters)."""
    flt = validate_message_query(query)
    where = [f"thread_id IN ({placeholders(len(flt.thread_ids))})"]
    params: list[Any] = list(flt.thread_ids)
    if flt.resource_id is not None:
        where.append('"resourceId" = ?')
        params.append(flt.resource_id)
    if flt.start is not None:
        where.append('"createdAt" > ?' if flt.start_exclusive else '"createdAt" >= ?')
        params.append(to_iso(flt.start))
    if flt.end is not None:
        where.append('"createdAt" < ?' if flt.end_exclusive else '"createdAt" <= ?')
        params.append(to_iso(flt.end))
    for key, value in flt.metadata:
        path = f"$.metadata.{key}"
        kind = "(CASE WHEN json_valid(content) THEN json_type(content, ?) END)"
        extract = "(CASE WHEN json_valid(content) THEN json_extract(content, ?) END)"
        if value is None or isinstance(value, bool):
            where.append(f"{kind} = ?")
            params.extend((path, "null" if value is None else ("true" if value else "false")))
        elif isinstance(value, str):
            where.append(f"{kind} = 'text' AND {extract} = ?")
            params.extend((path, path, value))
        else:
            where.append(f"{kind} IN ('integer', 'real') AND {extract} = ?")
            params.extend((path, path, value))
    clause = " AND ".join(where)
    order = "DESC" if flt.descending else "ASC"

    def read(conn: sqlite3.Connection) -> MessagePage:
        if flt.limit == 0:
            page: list[tuple[SortKey, Message]] = []
            total = 0
        else:
            select = (f'SELECT {MSG_COLS} FROM mastra_messages WHERE {clause} ORDER BY "createdAt" {order}, '
                      f"rowid {order} LIMIT ? OFFSET ?")
            limit = -1 if flt.limit is None else flt.limit
            if query.include_total:
                total = conn.execute(f"SELECT COUNT(*) FROM mastra_messages WHERE {clause}", params).fetchone()[0]
                rows = conn.execute(select, [*params, limit, flt.offset]).fetchall()
            else:  # no COUNT(*) (a scan of the thread): one row past the page says whether more follow
                rows = conn.execute(select, [*params, limit + 1 if limit >= 0 else -1, flt.offset]).fetchall()
                more = 0 <= limit < len(rows)
                if more:
                    rows.pop()
                total = flt.offset + len(rows) + (1 if more else 0)
            page = keyed(rows)
        extra = include_rows(conn, flt)
        messages = assemble(page, extra, flt.descending)
        return MessagePage(messages=messages, total=total, page=query.page, per_page=query.per_page,
                           has_more=messages_has_more(flt, len(page), total, messages))

    return read


def messages_by_id(wanted: Sequence[str]) -> Callable[[sqlite3.Connection], list[Message]]:
    """Messages with these ids in any thread, ascending by (created_at, sequence)."""

    def read(conn: sqlite3.Connection) -> list[Message]:
        rows: list[Row] = []
        for chunk in chunks(list(wanted)):
            rows.extend(conn.execute(
                f"SELECT {MSG_COLS} FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})", chunk))
        return assemble(keyed(rows), (), False)

    return read


def created_reader(wanted: Sequence[str]) -> Callable[[sqlite3.Connection], dict[str, datetime]]:
    """When each of these messages was created (unknown ids left out): their times alone, no content decoded."""

    def read(conn: sqlite3.Connection) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        for chunk in chunks(list(wanted)):
            for mid, created in conn.execute(
                    f'SELECT id, "createdAt" FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})', chunk):
                out[mid] = row_time(created, f"message {mid!r} createdAt")
        return out

    return read


def update_message_rows(parsed: Sequence[MessageUpdate],
                        touched: list[str]) -> Callable[[sqlite3.Connection], list[Message]]:
    """Partial updates by id (content merged one level, content.metadata merged); the threads they touch are
    bumped and added to ``touched``."""
    ids = list(dict.fromkeys(u.id for u in parsed))

    def job(conn: sqlite3.Connection) -> list[Message]:
        current: dict[str, tuple[SortKey, Message]] = {}
        for chunk in chunks(ids):
            for key, message in keyed(conn.execute(
                    f"SELECT {MSG_COLS} FROM mastra_messages WHERE id IN ({placeholders(len(chunk))})", chunk)):
                current[message.id] = (key, message)
        for update in parsed:
            if update.id not in current:
                raise ValidationError(f"message {update.id!r} not found; update_messages needs existing ids")
            key, old = current[update.id]
            current[update.id] = (key, apply_update(old, update))
        conn.executemany(
            'UPDATE mastra_messages SET content = ?, role = ?, type = ?, "createdAt" = ?, "resourceId" = ? '
            "WHERE id = ?",
            [(encode_content_text(m.content), m.role, m.type or "v2", to_iso(m.created_at), m.resource_id,
              m.id) for _, m in current.values()],
        )
        enqueue(conn, current)
        threads = {m.thread_id for _, m in current.values() if m.thread_id}
        touched.extend(threads)
        bump(conn, threads, to_iso(utc_now()))
        return assemble((((to_iso(m.created_at), key[1]), m) for key, m in current.values()), (), False)

    return job


def delete_message_rows(wanted: Sequence[str], touched: list[str]) -> Callable[[sqlite3.Connection], set[str]]:
    """Delete messages by id (and their keyword rows); returns their threads, bumped and added to ``touched``."""

    def job(conn: sqlite3.Connection) -> set[str]:
        threads: set[str] = set()
        for chunk in chunks(list(wanted)):
            marks = placeholders(len(chunk))
            threads.update(r[0] for r in conn.execute(
                f"SELECT DISTINCT thread_id FROM mastra_messages WHERE id IN ({marks})", chunk))
            delete_keywords_of_ids(conn, chunk)
            conn.execute(f"DELETE FROM mastra_messages WHERE id IN ({marks})", chunk)
        touched.extend(threads)
        bump(conn, threads, to_iso(utc_now()))
        return threads

    return job


def save_parts(parts: Sequence[tuple[str, Sequence[Row], Sequence[Message]]],
               fenced: Callable[[sqlite3.Connection], None],
               after: Callable[[sqlite3.Connection, Sequence[Message]], None] | None,
               ) -> Callable[[sqlite3.Connection], list[dict[str, str]]]:
    """Each thread's rows saved (``save_rows``: per part, the re-saved ids whose stored ``createdAt`` was kept) and
    queued for the keyword index, after the fence check; ``after`` sees every message (the vector layer's marks)."""

    def job(conn: sqlite3.Connection) -> list[dict[str, str]]:
        fenced(conn)
        now = to_iso(utc_now())
        kept = [save_rows(conn, thread_id, rows, messages, now) for thread_id, rows, messages in parts]
        enqueue(conn, (row[0] for _, rows, _ in parts for row in rows))
        if after is not None:
            after(conn, [m for _, _, messages in parts for m in messages])
        return kept

    return job


def save_one(thread_id: str, rows: Sequence[Row], messages: Sequence[Message],
             fenced: Callable[[sqlite3.Connection], None],
             after: Callable[[sqlite3.Connection, Sequence[Message]], None] | None,
             ) -> Callable[[sqlite3.Connection], dict[str, str]]:
    """:func:`save_parts` of one thread: what a ``save_messages`` job returns when a group of saves runs it alone
    (in bulk, ``run_saves`` returns the same for it)."""
    job = save_parts([(thread_id, rows, messages)], fenced, after)
    return lambda conn: job(conn)[0]


def file_stats(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the memory tables, resources in use and the file's size in bytes."""

    def scalar(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    return {
        "threads": scalar("SELECT COUNT(*) FROM mastra_threads"),
        "messages": scalar("SELECT COUNT(*) FROM mastra_messages"),
        "resources": scalar('SELECT COUNT(*) FROM (SELECT "resourceId" FROM mastra_threads '
                            "UNION SELECT id FROM mastra_resources)"),
        "working_memories": scalar("SELECT COUNT(*) FROM mastra_resources"),
        "file_bytes": scalar("PRAGMA page_count") * scalar("PRAGMA page_size"),
    }


# -- resources -------------------------------------------------------------------------------------------------


def upsert_resource(resource_id: str, working_memory: str | None | UnsetType,
                    metadata: Mapping[str, Any] | None) -> Callable[[sqlite3.Connection], Resource]:
    """Create the row if missing (metadata ``{}``), else set the given fields (metadata shallow-merged)."""

    def job(conn: sqlite3.Connection) -> Resource:
        row = conn.execute(RESOURCE_ROW, (resource_id,)).fetchone()
        old = None if row is None else resource_from_row(row)
        return write_resource(conn, resource_id, row, old, working_memory, metadata)

    return job


def modify_resource_row(resource_id: str, change: Callable[[Resource | None], ResourceChange | None],
                        fenced: Callable[[sqlite3.Connection], None],
                        ) -> Callable[[sqlite3.Connection], Resource | None]:
    """Read the resource (None when missing) and write what ``change`` makes of it, after the fence check."""

    def job(conn: sqlite3.Connection) -> Resource | None:
        fenced(conn)
        row = conn.execute(RESOURCE_ROW, (resource_id,)).fetchone()
        old = None if row is None else resource_from_row(row)
        wanted = change(old)
        if wanted is None:
            return None
        check_resource_args(resource_id, wanted.working_memory, wanted.metadata)
        return write_resource(conn, resource_id, row, old, wanted.working_memory, wanted.metadata)

    return job
