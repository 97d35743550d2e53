"""Benchmark of the shared workload (bench/WORKLOAD.md phases a–d) against raw baselines.

Run: ``python -m bench.bench_memory [--threads 200 --turns 25 --queries 500] [--phases abcde] [--repeat 3]``.
Phase e (not in the default phases): a save, a pause of 0.1 s and a recall, 200 times, as agent turns go.
Phase f (not in the default phases): phase d's recalls by vectors alone and by the hybrid ranking alternating query
by query, twice, in one process: the ratio of the two modes at one machine moment (``--embedder wordllama``: with a
model that embeds in a worker thread, where hybrid recall scores the words during the wait).
Prints one JSON document: messages/s, latency percentiles, peak RSS, database size, and ratios to plain
aiosqlite and plain hnswlib doing the same physical work (each baseline runs in its own process).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import numpy as np

from threadmind import Memory, Message
from threadmind.embedders import Embedder, HashEmbedder, WordLlamaEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.testing import actor_system
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload

from ._scoped_queries import alternating_recalls, scoped_queries


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.sort(np.asarray(samples, dtype=np.float64)) * 1000.0
    if arr.size == 0:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0}
    return {f"p{q}_ms": round(float(np.percentile(arr, q)), 4) for q in (50, 95, 99)}


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _rss_now_mb() -> float:
    """Current resident set size (Linux /proc; 0.0 elsewhere): what the index build adds to the process."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


def _db_size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def _timed(fn: Callable[[], Awaitable[Any]], out: list[float]) -> None:
    started = time.perf_counter()
    await fn()
    out.append(time.perf_counter() - started)


SEARCH = {"mode": "hybrid"}  # semanticRecall.search of the semantic phases (--search)
SYNCHRONOUS = {"level": "FULL"}  # the store's and the baselines' synchronous level (--synchronous)
EMBEDDER = {"name": "hash"}  # the semantic phases' embedder (--embedder)


def _embedder() -> Embedder:
    """The workload's 384-d hash embedder, or WordLlama (a real model, embedding in a worker thread)."""
    if EMBEDDER["name"] == "wordllama":
        return WordLlamaEmbedder()
    return HashEmbedder(dim=384)


def _memory(path: str, semantic: bool) -> Memory:
    options: dict[str, Any] = {"lastMessages": 10}
    if semantic:
        options["semanticRecall"] = {"topK": 4, "messageRange": 1, "scope": "resource", "search": SEARCH["mode"]}
    return Memory(
        storage=SQLiteStore(path, synchronous=SYNCHRONOUS["level"]),
        vector=HnswVectorStore(path + ".vectors") if semantic else None,
        embedder=_embedder() if semantic else None,
        options=options,
    )


async def _create_threads(memory: Memory, workload: Workload) -> None:
    for t in range(workload.threads):
        await memory.create_thread(thread_id=workload.thread_id(t), resource_id=workload.resource_id(t),
                                   title=workload.thread_title(t))


async def _save_all(memory: Memory, turns: dict[int, list[list[Message]]], concurrency: int,
                    latencies: list[float]) -> float:
    """Save every turn; ``concurrency`` threads in flight, sequential within a thread. Returns seconds."""
    limiter = anyio.Semaphore(concurrency)

    async def _thread(t: int) -> None:
        async with limiter:
            for batch in turns[t]:
                await _timed(lambda b=batch: memory.save_messages(b), latencies)  # type: ignore[misc]

    started = time.perf_counter()
    if concurrency == 1:
        for t in turns:
            for batch in turns[t]:
                await _timed(lambda b=batch: memory.save_messages(b), latencies)  # type: ignore[misc]
    else:
        async with anyio.create_task_group() as tg:
            for t in turns:
                tg.start_soon(_thread, t)
    return time.perf_counter() - started


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput, with every run's throughput beside it (this machine varies ±30 %)."""
    ordered = sorted(runs, key=lambda run: run["msgs_per_s"])
    chosen = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        chosen["runs_msgs_per_s"] = [run["msgs_per_s"] for run in runs]
    return chosen


async def _phase_save(workload: Workload, turns: dict[int, list[list[Message]]], workdir: str,
                      semantic: bool, concurrency: int, name: str) -> dict[str, Any]:
    path = os.path.join(workdir, f"{name}.db")
    latencies: list[float] = []
    async with _memory(path, semantic) as memory:
        await _create_threads(memory, workload)
        elapsed = await _save_all(memory, turns, concurrency, latencies)
    count = workload.message_count
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed),
            **_pcts(latencies), "db_bytes": _db_size(path)}


async def _phase_recall(workload: Workload, turns: dict[int, list[list[Message]]], workdir: str,
                        calls: int) -> dict[str, Any]:
    path = os.path.join(workdir, "recall.db")
    async with _memory(path, False) as memory:
        await _create_threads(memory, workload)
        await _save_all(memory, turns, 16, [])
        for t in range(min(workload.threads, 50)):  # warm up actors and page cache
            await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
        latencies: list[float] = []
        for i in range(calls):
            t = i % workload.threads
            started = time.perf_counter()
            result = await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
            latencies.append(time.perf_counter() - started)
            assert len(result.messages) == min(10, 2 * workload.turns)
    return {"calls": calls, **_pcts(latencies)}


async def _phase_semantic(workload: Workload, turns: dict[int, list[list[Message]]], workdir: str,
                          run_queries: bool, name: str, run_turns: bool = False,
                          run_alternating: bool = False) -> dict[str, Any]:
    path = os.path.join(workdir, f"{name}.db")
    latencies: list[float] = []
    out: dict[str, Any] = {}
    async with _memory(path, True) as memory:
        await _create_threads(memory, workload)
        elapsed = await _save_all(memory, turns, 16, latencies)
        count = workload.message_count
        out["save"] = {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed),
                       **_pcts(latencies), "db_bytes": _db_size(path)}
        out["index_build"] = await _build_index(memory)
        if run_queries:
            out["query"] = await _queries(memory, workload)
        if run_turns:
            out["turns"] = await _turns(memory, workload)
        if run_alternating:
            out["alternating"] = {
                scope: [{"vector": _pcts(run["vector"]), "hybrid": _pcts(run["hybrid"]),
                         "ratio_p50": round(statistics.median(run["hybrid"]) / statistics.median(run["vector"]), 2)}
                        for run in runs]
                for scope, runs in (await alternating_recalls(memory, workload)).items()}
    return out


async def _turns(memory: Memory, workload: Workload, count: int = 200, pause: float = 0.1) -> dict[str, Any]:
    """Phase e, a conversation's rhythm: save a user message into a thread, pause (the model's turn, the user
    typing), then recall for the next message (resource scope, top 4, range 1), ``count`` times over threads
    spread across the workload. The recall is what an agent turn pays before its model call."""
    queries = list(workload.iter_queries(STREAM_RESOURCE_QUERIES))
    saves: list[float] = []
    recalls: list[float] = []
    start = datetime.now(UTC)
    for i in range(count):
        t = (i * 7919) % workload.threads
        thread_id, resource_id = workload.thread_id(t), workload.resource_id(t)
        said = Message.user(queries[i % len(queries)].text, id=f"turn-{i}", thread_id=thread_id,
                            resource_id=resource_id, created_at=start + timedelta(seconds=i))
        await _timed(lambda m=said: memory.save_messages([m]), saves)  # type: ignore[misc]
        await anyio.sleep(pause)
        text = queries[(i * 31 + 7) % len(queries)].text
        await _timed(lambda th=thread_id, r=resource_id, q=text: memory.recall(  # type: ignore[misc]
            th, resource_id=r, per_page=0, vector_search_string=q), recalls)
    return {"turns": count, "pause_s": pause, "save": _pcts(saves), "recall": _pcts(recalls)}


async def _build_index(memory: Memory) -> dict[str, Any]:
    """Insert the vectors the saves staged into HNSW now, timed (threadmind otherwise waits for a quiet index).

    Saves make vectors exactly searchable at once and leave HNSW insertion for later, so the build is its
    own figure, and the queries of phase (d) then run against the finished index.
    """
    index = actor_system(memory).index
    assert index is not None
    rss_before = _rss_now_mb()
    started = time.perf_counter()
    inserted = await index.flush()
    seconds = time.perf_counter() - started
    stats = index.statistics()
    return {"vectors": stats.vectors, "inserted": inserted, "seconds": round(seconds, 3),
            "vectors_per_s": round(inserted / seconds) if inserted and seconds > 0 else None,
            "estimated_mb": round(stats.memory_bytes / 1e6, 1),
            "rss_growth_mb": round(_rss_now_mb() - rss_before, 1)}


async def _queries(memory: Memory, workload: Workload) -> dict[str, Any]:
    return {scope: {"queries": r["queries"], "index_query": _pcts(r["index_latencies"]),
                    "recall_with_window": _pcts(r["recall_latencies"]), "recall_at_10": r["recall_at_10"]}
            for scope, r in (await scoped_queries(memory, workload)).items()}


_RAW_SQLITE = r"""
import asyncio, json, os, sys, time, aiosqlite
sys.path.insert(0, os.getcwd())
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload
from threadmind.codecs._json import encode_content
from threadmind.codecs._time import to_iso
wl = Workload(threads=int(sys.argv[2]), turns=int(sys.argv[3]))
rows = [(m.id, m.thread_id, encode_content(m.content).decode(), m.role, "v2", to_iso(m.created_at), m.resource_id)
        for t in range(wl.threads) for k in range(wl.turns) for m in wl.messages_for_turn(t, k)]
SCHEMA = ('CREATE TABLE mastra_messages (id TEXT NOT NULL PRIMARY KEY, thread_id TEXT NOT NULL, content TEXT NOT NULL,'
          ' role TEXT NOT NULL, type TEXT NOT NULL, "createdAt" TEXT NOT NULL, "resourceId" TEXT)')
INSERT = 'INSERT INTO mastra_messages VALUES (?,?,?,?,?,?,?)'
async def main():
    out = {}
    for mode in ("one_transaction", "commit_per_save"):
        path = os.path.join(sys.argv[1], mode + ".db")
        async with aiosqlite.connect(path, isolation_level=None) as db:
            await db.execute("PRAGMA journal_mode=WAL"); await db.execute("PRAGMA synchronous=" + sys.argv[4])
            await db.execute(SCHEMA)
            started = time.perf_counter()
            if mode == "one_transaction":
                await db.execute("BEGIN IMMEDIATE"); await db.executemany(INSERT, rows); await db.execute("COMMIT")
            else:
                for i in range(0, len(rows), 2):
                    await db.execute("BEGIN IMMEDIATE")
                    await db.executemany(INSERT, rows[i:i+2])
                    await db.execute("COMMIT")
            elapsed = time.perf_counter() - started
        out[mode] = {"msgs_per_s": round(len(rows) / elapsed), "seconds": round(elapsed, 3)}
    print(json.dumps(out))
asyncio.run(main())
"""

_RAW_CEILING = r"""
# The physical ceiling: plain sqlite3 on the calling thread (no event loop, no thread hops, no validation), the
# same file schema (Mastra's tables + threadmind's vector tables), the same statements a save issues, at the same
# synchronous level.
import json, os, sqlite3, sys, time
import numpy as np
sys.path.insert(0, os.getcwd())
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload
from threadmind.embedders import Embedder, HashEmbedder, WordLlamaEmbedder
from threadmind.codecs._json import encode_content
from threadmind.codecs._time import to_iso
from threadmind.stores._sqlite._schema import create_schema
from threadmind.stores._vector_records import _SCHEMA as VECTOR_SCHEMA
wl = Workload(threads=int(sys.argv[2]), turns=int(sys.argv[3]))
turns = {t: [[(m.id, m.thread_id, encode_content(m.content).decode(), m.role, "v2", to_iso(m.created_at),
               m.resource_id) for m in wl.messages_for_turn(t, k)] for k in range(wl.turns)] for t in range(wl.threads)}
texts = {row[0]: m.text for t in range(wl.threads) for k in range(wl.turns)
         for row, m in zip(turns[t][k], wl.messages_for_turn(t, k))}
vectors = dict(zip(texts, HashEmbedder(dim=384).embed_sync(list(texts.values())).vectors.astype("<f4")))
UPSERT = ('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") VALUES {} '
          'ON CONFLICT(id) DO UPDATE SET thread_id = excluded.thread_id, content = excluded.content, '
          'role = excluded.role, type = excluded.type, "resourceId" = excluded."resourceId"')
VEC = ("INSERT INTO threadmind_vectors (index_name, vector_id, message_id, thread_id, resource_id, role, created_at, "
       "embedding, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
def open_db(name):
    conn = sqlite3.connect(os.path.join(sys.argv[1], name), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL"); conn.execute("PRAGMA synchronous=" + sys.argv[4])
    conn.execute("BEGIN"); create_schema(conn)
    for statement in VECTOR_SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.executemany('INSERT INTO mastra_threads VALUES (?, ?, ?, NULL, ?, ?)',
                     [(wl.thread_id(t), wl.resource_id(t), "t", "2025-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z")
                      for t in range(wl.threads)])
    conn.execute("COMMIT")
    return conn
def commit(conn, saves, semantic, seq):
    rows = [row for save in saves for row in save]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany('UPDATE mastra_threads SET "updatedAt" = ? WHERE id = ?',
                     [("2026-01-01T00:00:00.000Z", save[0][1]) for save in saves])
    conn.execute(UPSERT.format(",".join(["(?,?,?,?,?,?,?)"] * len(rows))), [v for row in rows for v in row])
    if semantic:
        conn.executemany(VEC, [("memory_messages_384", r[0], r[0], r[1], r[6], r[3], r[5], vectors[r[0]].tobytes(), seq)
                               for r in rows])
    conn.execute("COMMIT")
def run(name, group, semantic):
    conn = open_db(name)
    order = ([[turns[t][k]] for t in range(wl.threads) for k in range(wl.turns)] if group == 1 else
             [[turns[t][k] for t in range(base, min(base + group, wl.threads))]
              for base in range(0, wl.threads, group) for k in range(wl.turns)])
    started = time.perf_counter()
    for seq, saves in enumerate(order, 1):
        commit(conn, saves, semantic, seq)
    elapsed = time.perf_counter() - started
    conn.close()
    messages = sum(len(save) for saves in order for save in saves)
    return {"msgs_per_s": round(messages / elapsed), "commits": len(order)}
print(json.dumps({"sequential_commit_per_save": run("ceiling-seq.db", 1, False),
                  "group_of_16_saves_per_commit": run("ceiling-c16.db", 16, False),
                  "semantic_group_of_16_saves_per_commit": run("ceiling-semantic.db", 16, True)}))
"""

_RAW_HNSW = r"""
import json, sys, time, os
import numpy as np, hnswlib
sys.path.insert(0, os.getcwd())
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload
from threadmind.embedders import Embedder, HashEmbedder, WordLlamaEmbedder
wl = Workload(threads=int(sys.argv[1]), turns=int(sys.argv[2]))
emb = HashEmbedder(dim=384)
texts = [m.text for t in range(wl.threads) for k in range(wl.turns) for m in wl.messages_for_turn(t, k)]
vecs = emb.embed_sync(texts).vectors
queries = emb.embed_sync([wl.query_text(2, q) for q in range(wl.queries)]).vectors
index = hnswlib.Index(space="cosine", dim=384); index.init_index(max_elements=len(vecs), M=16, ef_construction=64)
started = time.perf_counter(); index.add_items(vecs, np.arange(len(vecs))); add = time.perf_counter() - started
index.set_ef(64)
lat = []
for q in queries:
    s = time.perf_counter(); index.knn_query(q, k=10); lat.append(time.perf_counter() - s)
lat = np.sort(np.array(lat)) * 1000
print(json.dumps({"add_items_vectors_per_s": round(len(vecs) / add),
                  "knn_query_p50_ms": round(float(np.percentile(lat, 50)), 4),
                  "knn_query_p99_ms": round(float(np.percentile(lat, 99)), 4)}))
"""


def _run_baseline(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=False,
                          cwd=os.getcwd())
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    workload = Workload(threads=args.threads, turns=args.turns, queries=args.queries)
    turns = {t: [workload.messages_for_turn(t, k) for k in range(workload.turns)] for t in range(workload.threads)}
    report: dict[str, Any] = {
        "workload": {"threads": workload.threads, "resources": workload.resources, "turns": workload.turns,
                     "messages": workload.message_count, "queries": workload.queries},
        "synchronous": SYNCHRONOUS["level"],
    }
    with tempfile.TemporaryDirectory(prefix="threadmind-bench-") as workdir:
        if "a" in args.phases:
            report["a_save_sequential"] = _median_run(
                [await _phase_save(workload, turns, workdir, False, 1, f"seq-{i}") for i in range(args.repeat)])
            report["a_save_concurrency_16"] = _median_run(
                [await _phase_save(workload, turns, workdir, False, 16, f"c16-{i}") for i in range(args.repeat)])
        if "b" in args.phases:
            report["b_recall_last_10"] = await _phase_recall(workload, turns, workdir, args.recalls)
        if any(phase in args.phases for phase in "cdef"):
            earlier = [(await _phase_semantic(workload, turns, workdir, False, f"semantic-{i}"))["save"]
                       for i in range(args.repeat - 1)]
            semantic = await _phase_semantic(workload, turns, workdir, "d" in args.phases, "semantic",
                                             "e" in args.phases, "f" in args.phases)
            report["c_save_semantic_concurrency_16"] = _median_run([*earlier, semantic["save"]])
            report["c_index_build"] = semantic["index_build"]
            if "query" in semantic:
                report["d_semantic_query"] = semantic["query"]
            if "turns" in semantic:
                report["e_save_pause_recall"] = semantic["turns"]
            if "alternating" in semantic:
                report["f_vector_and_hybrid_alternating"] = semantic["alternating"]
        report["peak_rss_mb"] = _rss_mb()
        if not args.no_baselines:
            raw = _run_baseline(_RAW_SQLITE, workdir, str(workload.threads), str(workload.turns),
                                SYNCHRONOUS["level"])
            report["baseline_aiosqlite"] = raw
            if "a_save_concurrency_16" in report and "one_transaction" in raw:
                report["ratio_c16_to_raw_one_transaction"] = round(
                    report["a_save_concurrency_16"]["msgs_per_s"] / raw["one_transaction"]["msgs_per_s"], 3)
            if "a_save_sequential" in report and "commit_per_save" in raw:
                report["ratio_sequential_to_raw_commit_per_save"] = round(
                    report["a_save_sequential"]["msgs_per_s"] / raw["commit_per_save"]["msgs_per_s"], 3)
            ceiling = _run_baseline(_RAW_CEILING, workdir, str(workload.threads), str(workload.turns),
                                    SYNCHRONOUS["level"])
            report["ceiling_plain_sqlite3_same_schema"] = ceiling
            pairs = (("a_save_sequential", "sequential_commit_per_save", "ratio_sequential_to_ceiling"),
                     ("a_save_concurrency_16", "group_of_16_saves_per_commit", "ratio_c16_to_ceiling"),
                     ("c_save_semantic_concurrency_16", "semantic_group_of_16_saves_per_commit",
                      "ratio_semantic_to_ceiling"))
            for ours, theirs, key in pairs:
                if ours in report and theirs in ceiling:
                    report[key] = round(report[ours]["msgs_per_s"] / ceiling[theirs]["msgs_per_s"], 3)
            if "c" in args.phases or "d" in args.phases:
                report["baseline_hnswlib"] = _run_baseline(_RAW_HNSW, str(workload.threads), str(workload.turns))
    import aiosqlite
    import hnswlib  # type: ignore[import-untyped]  # noqa: F401
    import msgspec

    report["versions"] = {"python": sys.version.split()[0], "aiosqlite": aiosqlite.__version__,
                          "msgspec": msgspec.__version__, "numpy": np.__version__}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--recalls", type=int, default=1000)
    parser.add_argument("--phases", default="abcd")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each save phase this many times on fresh files and report the median run")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL", "OFF"), default="FULL",
                        help="SQLite synchronous level of the store and the raw baselines (default FULL)")
    parser.add_argument("--search", choices=("hybrid", "vector", "keyword"), default="hybrid",
                        help="semanticRecall.search of the semantic phases (c, d, e)")
    parser.add_argument("--embedder", choices=("hash", "wordllama"), default="hash",
                        help="the semantic phases' embedder: the workload's hash embedder (on the event loop) or "
                             "WordLlama (extra [local]; in a worker thread); phase d's recall@10 needs hash")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.embedder != "hash" and "d" in args.phases:
        parser.error("phase d scores recall@10 against the hash embedder's vectors: --embedder hash")
    EMBEDDER["name"] = args.embedder
    SEARCH["mode"] = args.search
    SYNCHRONOUS["level"] = args.synchronous
    report = anyio.run(_main, args)
    report["search"] = args.search
    report["embedder"] = args.embedder
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
