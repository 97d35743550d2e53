"""``list_messages`` and ``get_thread_with_tail`` for ``PostgresStore``: one validated query, its SQL, its page.

A page is one statement: the rows plus the total as a scalar subquery (``COUNT(*)`` runs only when the caller wants
a total; without it the page reads one row past its end to tell whether more follow). Include windows are one
more call for any number of windows, of ``threadmind_include_windows`` (:data:`INCLUDE_WINDOWS_DDL`): each target
found by id (within the resource when one is given) and its ``N`` previous / ``M`` next rows of its own thread by
keyset on (``"createdAt"``, sequence, id), through ``LATERAL`` subqueries the ``(thread_id, "createdAt")`` index
serves from the target on, in a plan kept per connection. The thread-with-tail read is one statement
returning the thread row's version, the row, the newest page and the count together (one snapshot), or only the
version when the caller already holds that one.
"""

from __future__ import annotations

from typing import Any

from ...codecs import Thread
from .._protocol import MessagePage, MessageQuery
from .._query import assemble, messages_has_more, validate_message_query
from ._rows import (
    MSG_COLS,
    MSG_FROM,
    MSG_KEY,
    MSG_SEQ,
    THREAD_COLS,
    Params,
    content_filter,
    keyed,
    order_by,
)
from ._rows import thread_from_row as _thread

__all__ = ("INCLUDE_WINDOWS_DDL", "MessageReads")

# The include windows of a page, as the body of ``threadmind_include_windows`` (below): each target found by id
# (within ``p_resource`` unless it is NULL) and its ``prev`` / ``next`` nearest rows of its own thread by keyset. A
# side's rows are the target's ties (its "createdAt", before or after it by the whole key) and the ``prev``
# (``next``) rows nearest to it by "createdAt" alone, with their own ties: each side reads the "createdAt" of its
# N-th nearest row by the (thread_id, "createdAt") index first (a scan of N rows) and sorts only the rows between
# that and the target by the whole key, instead of every row of the thread on that side (which a plan for threads
# of 50 messages did: 1.2 ms of server time for four windows, the sequence looked up for each row).
_IN_RESOURCE = ' AND (p_resource IS NULL OR {alias}."resourceId" = p_resource)'
_WINDOWS = f"""
WITH inc AS (SELECT * FROM unnest(p_ids, p_prev, p_next) AS x(id, prev, next)),
tgt AS (
  SELECT inc.prev, inc.next, m.id, m.thread_id, m."createdAt" AS c, {MSG_SEQ} AS q
  FROM inc JOIN mastra_messages m ON m.id = inc.id{_IN_RESOURCE.format(alias="m")}
)
SELECT w.* FROM tgt CROSS JOIN LATERAL (
  (SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.id = tgt.id)
  UNION ALL
  (SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.thread_id = tgt.thread_id{_IN_RESOURCE.format(alias="m")}
     AND m."createdAt" <= tgt.c AND m."createdAt" >= COALESCE((
       SELECT p."createdAt" FROM mastra_messages p WHERE p.thread_id = tgt.thread_id{_IN_RESOURCE.format(alias="p")}
         AND p."createdAt" < tgt.c ORDER BY p."createdAt" DESC OFFSET GREATEST(tgt.prev - 1, 0) LIMIT 1),
       '-infinity'::timestamp)
     AND {MSG_KEY} < (tgt.c, tgt.q, tgt.id COLLATE "C")
     ORDER BY {order_by(True)} LIMIT tgt.prev)
  UNION ALL
  (SELECT {MSG_COLS} FROM {MSG_FROM} WHERE m.thread_id = tgt.thread_id{_IN_RESOURCE.format(alias="m")}
     AND m."createdAt" >= tgt.c AND m."createdAt" <= COALESCE((
       SELECT n."createdAt" FROM mastra_messages n WHERE n.thread_id = tgt.thread_id{_IN_RESOURCE.format(alias="n")}
         AND n."createdAt" > tgt.c ORDER BY n."createdAt" OFFSET GREATEST(tgt.next - 1, 0) LIMIT 1),
       'infinity'::timestamp)
     AND {MSG_KEY} > (tgt.c, tgt.q, tgt.id COLLATE "C")
     ORDER BY {order_by(False)} LIMIT tgt.next)
) w"""
INCLUDE_WINDOWS_DDL = (
    "CREATE OR REPLACE FUNCTION threadmind_include_windows(p_ids TEXT[], p_prev BIGINT[], p_next BIGINT[], "
    "p_resource TEXT) RETURNS TABLE (w_id TEXT, w_content TEXT, w_role TEXT, w_type TEXT, w_created TIMESTAMP, "
    "w_created_z TIMESTAMPTZ, w_thread_id TEXT, w_resource_id TEXT, w_seq BIGINT) "
    "LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $fn$\n"
    f"#variable_conflict use_column\nBEGIN RETURN QUERY {_WINDOWS};\nEND\n$fn$"
)
"""The include windows as a function whose statement keeps one generic plan per connection (its body is part of
the schema: a change to it needs a new ``SCHEMA_VERSION``). Sent as a statement, PostgreSQL planned it again at most
calls (custom plans, which know the targets' count, looked cheaper than a generic one): 0.6-0.8 ms of planning a
call. Four windows (2026-12-06, the 2-core VM, threads of 50 to 5 000 messages, with and without other resources'
threads around them): 0.53-0.74 ms a call, against 0.44-1.34 ms for the statement whose sides sorted every earlier
(later) row of the thread and 1.2-1.5 ms for the narrowed statement planned each time; a resource recall's window
read on the shared workload 0.96-1.04 ms through ``list_messages``, against 1.44-1.84 ms."""
_INCLUDES = "SELECT * FROM threadmind_include_windows($1::text[], $2::bigint[], $3::bigint[], $4::text)"


class MessageReads:
    """The statements of one ``MessageQuery`` (validated on construction: errors before any connection)."""

    def __init__(self, query: MessageQuery) -> None:
        self.query = query
        flt = self.flt = validate_message_query(query)
        # One thread (nearly every call) as `=`: a generic plan then estimates one thread's rows, not ANY's guess.
        single = len(flt.thread_ids) == 1
        params = Params(flt.thread_ids[0] if single else flt.thread_ids)
        where = ["m.thread_id = $1::text" if single else "m.thread_id = ANY($1::text[])"]
        if flt.resource_id is not None:
            where.append(f'm."resourceId" = {params.add(flt.resource_id)}')
        if flt.start is not None:
            op = ">" if flt.start_exclusive else ">="
            where.append(f'COALESCE(m."createdAtZ", m."createdAt") {op} {params.add(flt.start)}::timestamptz')
        if flt.end is not None:
            op = "<" if flt.end_exclusive else "<="
            where.append(f'COALESCE(m."createdAtZ", m."createdAt") {op} {params.add(flt.end)}::timestamptz')
        where.extend(content_filter(flt.metadata, params))
        self._where = " AND ".join(where)
        self._params = params.values

    def _count_sql(self) -> str:
        return f"SELECT count(*) FROM mastra_messages m WHERE {self._where}"

    def _page_sql(self, limit_at: int, counted: bool) -> str:
        total = f", ({self._count_sql()})" if counted else ""
        order = order_by(self.flt.descending)
        return (f"SELECT {MSG_COLS}{total} FROM {MSG_FROM} WHERE {self._where} ORDER BY {order} "
                f"LIMIT ${limit_at} OFFSET ${limit_at + 1}")

    async def _rows(self, conn: Any) -> tuple[list[Any], int]:
        """The page's rows and the total (through this page, +1 when more follow, without ``include_total``)."""
        flt = self.flt
        if flt.limit == 0:
            return [], 0
        at = len(self._params) + 1
        if not self.query.include_total:
            peek = None if flt.limit is None else flt.limit + 1
            rows = list(await conn.fetch(self._page_sql(at, False), *self._params, peek, flt.offset))
            more = flt.limit is not None and len(rows) > flt.limit
            if more:
                rows.pop()
            return rows, flt.offset + len(rows) + (1 if more else 0)
        rows = list(await conn.fetch(self._page_sql(at, True), *self._params, flt.limit, flt.offset))
        if rows:
            return rows, int(rows[0][9])
        if flt.offset == 0:
            return [], 0
        return [], int(await conn.fetchval(self._count_sql(), *self._params))

    async def _includes(self, conn: Any) -> list[Any]:
        flt = self.flt
        if not flt.include:
            return []
        args: list[Any] = [[i.id for i in flt.include], [i.with_previous_messages for i in flt.include],
                           [i.with_next_messages for i in flt.include]]
        return list(await conn.fetch(_INCLUDES, *args, flt.resource_id))

    def _assemble(self, rows: list[Any], extra: list[Any], total: int) -> MessagePage:
        flt = self.flt
        page = keyed(rows)
        messages = assemble(page, keyed(extra), flt.descending)
        return MessagePage(messages=messages, total=total, page=self.query.page, per_page=self.query.per_page,
                           has_more=messages_has_more(flt, len(page), total, messages))

    async def page(self, conn: Any) -> MessagePage:
        """The page (reference §5.3 semantics) on ``conn``."""
        rows, total = await self._rows(conn)
        return self._assemble(rows, await self._includes(conn), total)

    async def with_thread(self, conn: Any, known: str | None = None) -> tuple[str | None, Thread | None, MessagePage]:
        """(for a single-thread DESC query without filters) The thread row's version (its ``xmin``), the row, the
        page and the count at once; when the version is ``known``, only the version (row and page None/empty):
        every write to a thread's messages, threadmind's or Mastra's, updates the thread row in its transaction."""
        flt = self.flt
        fresh = "t.xmin::text IS NULL OR t.xmin::text IS DISTINCT FROM $4::text"
        row = await conn.fetchrow(
            f"SELECT t.xmin::text, CASE WHEN t.id IS NOT NULL AND ({fresh}) THEN ROW({THREAD_COLS}) END, "
            f"CASE WHEN {fresh} THEN (SELECT count(*) FROM mastra_messages m WHERE m.thread_id = $1) END, "
            f"CASE WHEN {fresh} THEN ARRAY(SELECT ROW({MSG_COLS}) FROM {MSG_FROM} WHERE m.thread_id = $1 "
            f"ORDER BY {order_by(True)} LIMIT $2 OFFSET $3) END "
            "FROM (VALUES (1)) AS one LEFT JOIN mastra_threads t ON t.id = $1",
            flt.thread_ids[0], flt.limit, flt.offset, known)
        version = row[0]
        if version is not None and version == known:
            return version, None, MessagePage(messages=[], total=0, page=0, per_page=0, has_more=False)
        thread = None if row[1] is None else _thread(row[1])
        total = int(row[2])
        rows = list(row[3]) if flt.limit != 0 else []
        return version, thread, self._assemble(rows, [], total if flt.limit != 0 else 0)
