"""Scoped top-k queries of :class:`~threadmind.stores.PgVectorStore`: exact where that is fast, HNSW where the scope
is large, and never a short answer.

A post-filtered HNSW scan returns fewer rows than asked for when the scope is a small part of the table, so:

* **Thread scope**: exact. The btree on ``metadata->>'thread_id'`` finds the thread's rows, their distances are
  computed and sorted (a subquery fence keeps the planner from ordering by the HNSW index instead).
* **Resource scope** (and no scope): exact over the btree while the scope holds at most ``exact_limit`` rows: a
  bounded read counts them on the way, and a scope found larger is remembered (per process, for a while) and
  asked of the HNSW index with an iterative scan (``hnsw.iterative_scan = relaxed_order``, ``hnsw.ef_search``
  and ``hnsw.max_scan_tuples`` set transaction-locally, so behind PgBouncer too). An iterative scan that still
  comes back with fewer than ``top_k`` messages is answered exactly instead. While the table has no valid HNSW
  index (it is built when first needed, or past pgvector's dimension limit) large scopes are answered exactly too,
  and ``on_large`` is told.

One hit per message (its best chunk), best first; fetching twice ``top_k`` rows leaves room for chunks, and an
exact answer fetches more when chunks still crowd out messages. Scores follow Mastra: cosine ``1 - d``,
euclidean ``1 / (1 + d)``, dot product ``-d`` (``d`` the pgvector distance).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from ._contract import VectorHit
from ._pgvector_table import Layout, namespace_is

__all__ = ("MAX_SCAN_TUPLES", "ScopedSearch")

T = TypeVar("T")
Runner = Callable[[Callable[[Any], Awaitable[T]]], Awaitable[T]]

#: Heap tuples an iterative HNSW scan may visit before it gives up (pgvector's default is 20 000); an answer it
#: leaves short is completed exactly.
MAX_SCAN_TUPLES = 50_000
#: How long a scope found larger than ``exact_limit`` goes to the HNSW index without being counted again.
LARGE_SCOPE_TTL = 300.0
_LARGE_SCOPES_KEPT = 4096
_COLUMNS = "v.metadata->>'message_id', v.metadata->>'thread_id', v.metadata->>'resource_id', c.d"


def _where(resource_id: str | None, thread_id: str | None, first: int) -> tuple[str, list[str]]:
    """The scope's filter (parameters numbered from ``first``) and its parameters."""
    parts, params = [namespace_is()], []
    for field, value in (("thread_id", thread_id), ("resource_id", resource_id)):
        if value is not None:
            params.append(value)
            parts.append(f"metadata->>'{field}' = ${first + len(params) - 1}")
    return " AND ".join(parts), params


class ScopedSearch:
    """The query plans of one table (see the module docstring); counts which plan answered."""

    def __init__(self, layout: Layout, *, exact_limit: int, ef_search: int | None, m: int, ann_ready: bool,
                 on_large: Callable[[], None] | None = None, probes: int | None = None) -> None:
        self._t = layout
        #: Whether a valid vector index serves the table (set once a background build finished).
        self.ann_ready = ann_ready
        #: ``ivfflat.probes`` when the index is IVFFlat (None: HNSW).
        self.probes = probes
        self._on_large = on_large
        self._exact_limit = exact_limit
        self._ef_search = ef_search
        self._m = m
        self._large: OrderedDict[tuple[str | None, str | None], float] = OrderedDict()
        self._score = _SCORES[layout.metric]
        self.exact_queries = 0
        self.ann_queries = 0
        #: Iterative scans that came back short and were answered exactly.
        self.fallbacks = 0

    def ef_search(self, fetch: int, top_k: int) -> int:
        """``hnsw.ef_search`` for one query: the configured value, else Mastra's ``max(fetch, m * top_k)``; at most
        1 000 (pgvector's limit) and never below what is fetched."""
        wanted = self._ef_search if self._ef_search is not None else self._m * top_k
        return max(1, min(1000, max(wanted, fetch)))

    # plans ---------------------------------------------------------------------------------------
    def _exact_sql(self, where: str) -> str:
        t = self._t
        return (f"WITH c AS MATERIALIZED (SELECT id, d FROM (SELECT id, embedding {t.operator} $1::{t.vector_type} "
                f"AS d FROM {t.table} WHERE {where} OFFSET 0) s ORDER BY d LIMIT $2) "
                f"SELECT {_COLUMNS} FROM c JOIN {t.table} v ON v.id = c.id ORDER BY c.d, v.id")

    def _bounded_sql(self, where: str, limit_param: int) -> str:
        t = self._t
        return (f"WITH s AS MATERIALIZED (SELECT id, embedding {t.operator} $1::{t.vector_type} AS d FROM {t.table} "
                f"WHERE {where} LIMIT ${limit_param}), c AS (SELECT id, d FROM s ORDER BY d LIMIT $2) "
                f"SELECT (SELECT count(*) FROM s), {_COLUMNS} FROM c JOIN {t.table} v ON v.id = c.id "
                "ORDER BY c.d, v.id")

    def _ann_sql(self, where: str) -> str:
        t = self._t
        distance = f"embedding {t.operator} $1::{t.vector_type}"
        return (f"WITH c AS MATERIALIZED (SELECT id, {distance} AS d FROM {t.table} WHERE {where} "
                f"ORDER BY {distance} LIMIT $2) "
                f"SELECT {_COLUMNS} FROM c JOIN {t.table} v ON v.id = c.id ORDER BY c.d, v.id")

    # answering -----------------------------------------------------------------------------------
    async def query(self, run: Runner[Any], vector: bytes, top_k: int, resource_id: str | None,
                    thread_id: str | None) -> list[VectorHit]:
        """The ``top_k`` messages nearest ``vector`` in the scope, best first."""
        fetch = 2 * top_k
        where, params = _where(resource_id, thread_id, 3)
        if thread_id is not None or not self._t.ann:
            return await self._exact(run, vector, top_k, fetch, where, params)
        key = (resource_id, thread_id)
        if not self._known_large(key):
            rows = await run(_fetch(self._bounded_sql(where, 3 + len(params)), vector, fetch, *params,
                                    self._exact_limit + 1))
            if not rows or int(rows[0][0]) <= self._exact_limit:
                hits = self._hits([row[1:] for row in rows], top_k)
                if len(hits) >= top_k or len(rows) < fetch:
                    self.exact_queries += 1
                    return hits
                return await self._exact(run, vector, top_k, 4 * fetch, where, params)
            self._note_large(key)
        if not self.ann_ready:
            if self._on_large is not None:
                self._on_large()
            return await self._exact(run, vector, top_k, fetch, where, params)
        hits = self._hits(await run(self._ann(vector, top_k, fetch, where, params)), top_k)
        if len(hits) >= top_k:
            self.ann_queries += 1
            return hits
        self.fallbacks += 1
        return await self._exact(run, vector, top_k, fetch, where, params)

    async def _exact(self, run: Runner[Any], vector: bytes, top_k: int, fetch: int, where: str,
                     params: list[str]) -> list[VectorHit]:
        sql = self._exact_sql(where)
        while True:
            rows = await run(_fetch(sql, vector, fetch, *params))
            hits = self._hits(rows, top_k)
            if len(hits) >= top_k or len(rows) < fetch:
                self.exact_queries += 1
                return hits
            fetch *= 4  # a few messages' many chunks took the rows: look further

    def _ann(self, vector: bytes, top_k: int, fetch: int, where: str,
             params: list[str]) -> Callable[[Any], Awaitable[list[Any]]]:
        sql = self._ann_sql(where)
        if self.probes is not None:  # IVFFlat: more lists visited as needed, up to all of them
            begin = (f"BEGIN READ ONLY; SET LOCAL ivfflat.probes = {int(self.probes)}; "
                     "SET LOCAL ivfflat.iterative_scan = relaxed_order")
        else:
            begin = (f"BEGIN READ ONLY; SET LOCAL hnsw.ef_search = {self.ef_search(fetch, top_k)}; "
                     "SET LOCAL hnsw.iterative_scan = relaxed_order; "
                     f"SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")

        async def read(conn: Any) -> list[Any]:
            await conn.execute(begin)
            try:
                rows: list[Any] = await conn.fetch(sql, vector, fetch, *params)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    try:
                        await conn.execute("ROLLBACK")
                    except Exception:  # a broken connection: the server rolls back, the pool discards it
                        pass
                raise
            await conn.execute("COMMIT")
            return rows

        return read

    def _hits(self, rows: list[Any], top_k: int) -> list[VectorHit]:
        """The best row of each message (rows come nearest first), at most ``top_k``."""
        hits: dict[str, VectorHit] = {}
        for message_id, thread_id, resource_id, distance in rows:
            if message_id is not None and message_id not in hits:
                hits[message_id] = VectorHit(message_id, thread_id or "", resource_id or "",
                                             self._score(float(distance)))
                if len(hits) == top_k:
                    break
        return list(hits.values())

    # large scopes --------------------------------------------------------------------------------
    def _known_large(self, key: tuple[str | None, str | None]) -> bool:
        seen = self._large.get(key)
        if seen is None:
            return False
        if time.monotonic() - seen > LARGE_SCOPE_TTL:
            del self._large[key]
            return False
        return True

    def _note_large(self, key: tuple[str | None, str | None]) -> None:
        self._large[key] = time.monotonic()
        self._large.move_to_end(key)
        while len(self._large) > _LARGE_SCOPES_KEPT:
            self._large.popitem(last=False)


def _fetch(sql: str, *args: Any) -> Callable[[Any], Awaitable[list[Any]]]:
    async def read(conn: Any) -> list[Any]:
        rows: list[Any] = await conn.fetch(sql, *args)
        return rows

    return read


def _cosine(d: float) -> float:
    return 1.0 - d


def _euclidean(d: float) -> float:
    return 1.0 / (1.0 + d)


def _dot(d: float) -> float:
    return -d


_SCORES: dict[str, Callable[[float], float]] = {"cosine": _cosine, "euclidean": _euclidean, "dotproduct": _dot}
