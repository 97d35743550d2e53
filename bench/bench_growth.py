"""Lifecycle costs as a deployment grows: one database grown to 10k, 100k and 1M messages (384-d vectors).

Each size adds threads of 10 messages (5 turns) under resources of 10 threads, so 1M messages are 100 000
threads over 10 000 resources. Per size, in fresh processes (so RSS is per process):

- ``write``: save the new threads' turns (16 saves in flight, semantic recall on, HashEmbedder 384-d), then
  recall and semantic-query latency, recall@10 against exact search, steady-state RSS with hnswlib's share,
  the most staged vectors (the not-yet-inserted tail), and ``aclose()`` time;
- ``restart``: start to the first correct semantic query, to full ANN speed (loaded, nothing staged), the peak
  RSS of the restarted process, and semantic-query latency after it;
- ``cli``: ``threadmind stats / threads / show / search`` wall time, process start included.

Prints JSON: every figure per size and the ratios to the first size's. ``--max`` stops early (quick runs).
Usage: ``python -m bench.bench_growth [--max 100000] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec
import numpy as np

from threadmind import Memory
from threadmind.codecs import Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload, gen_text

SIZES = (10_000, 100_000, 1_000_000)
TURNS = 5  # 10 messages per thread
THREADS_PER_RESOURCE = 10
DIM = 384


def _resource(t: int) -> str:
    return f"resource-{t // THREADS_PER_RESOURCE}"


def _rss_now_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return round(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples, dtype=np.float64) * 1000.0
    if arr.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3), "p99_ms": round(float(np.percentile(arr, 99)), 3)}


def _memory(path: str) -> Memory:
    return Memory(
        storage=SQLiteStore(path),
        vector=HnswVectorStore(path + ".vectors"),
        embedder=HashEmbedder(dim=DIM),
        options={"lastMessages": 10, "semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource"}},
    )


def _turn(workload: Workload, t: int, k: int) -> list[Message]:
    return [msgspec.structs.replace(m, resource_id=_resource(t)) for m in workload.messages_for_turn(t, k)]


def _query(q: int, threads: int) -> tuple[str, str, str]:
    t = (q * 7919) % threads
    return gen_text(STREAM_RESOURCE_QUERIES, q, 80), f"thread-{t}", _resource(t)


async def _semantic_latency(memory: Memory, threads: int, n: int = 300) -> dict[str, float]:
    times: list[float] = []
    for q in range(n):
        text, thread, owner = _query(q, threads)
        started = time.perf_counter()
        await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text)
        times.append(time.perf_counter() - started)
    return _pcts(times)


async def _vector_latency(memory: Memory, threads: int, n: int = 300) -> dict[str, float]:
    """The index's own scoped top-4 (no message reads): what the vector subsystem adds to a semantic query."""
    index = memory.actor_system.index
    assert index is not None
    times: list[float] = []
    for q in range(n):
        text, _, owner = _query(q + 1000, threads)
        started = time.perf_counter()
        await index.query(text, top_k=4, resource_id=owner)
        times.append(time.perf_counter() - started)
    return _pcts(times)


def _stats(memory: Memory) -> Any:
    index = memory.actor_system.index
    assert index is not None
    return index.statistics()


# ------------------------------------------------------------------------------------------------ phases


async def _write(path: str, start_threads: int, threads: int) -> dict[str, Any]:
    workload = Workload(threads=threads, resources=threads, turns=TURNS, queries=0)
    out: dict[str, Any] = {}
    memory = _memory(path)
    await memory.start()
    for t in range(start_threads, threads):
        await memory.create_thread(thread_id=f"thread-{t}", resource_id=_resource(t), title=f"Thread {t}")
    latencies: list[float] = []
    limiter = anyio.Semaphore(16)

    async def _thread(t: int) -> None:
        async with limiter:
            for k in range(TURNS):
                started = time.perf_counter()
                await memory.save_messages(_turn(workload, t, k))
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for t in range(start_threads, threads):
            tg.start_soon(_thread, t)
    seconds = time.perf_counter() - started
    saved = (threads - start_threads) * TURNS * 2
    out["save"] = {"messages": saved, "msgs_per_s": round(saved / seconds), **_pcts(latencies)}
    recall: list[float] = []
    for i in range(300):
        t = (i * 7919) % threads
        started = time.perf_counter()
        await memory.recall(f"thread-{t}", resource_id=_resource(t))
        recall.append(time.perf_counter() - started)
    out["recall"] = _pcts(recall)
    out["semantic_query"] = await _semantic_latency(memory, threads)
    out["vector_query"] = await _vector_latency(memory, threads)
    out["recall_at_10"] = await _recall_at_10(memory, path, threads)
    stats = _stats(memory)
    rss = _rss_now_mb()
    out["steady_rss_mb"] = rss
    out["index"] = {"vectors": stats.vectors, "hnswlib_mb": round(stats.store.ann_bytes / 2**20, 1),
                    "index_memory_mb": round(stats.memory_bytes / 2**20, 1), "staged_now": stats.staged,
                    "max_staged": stats.store.max_staged, "snapshot_saves": stats.store.snapshot_saves}
    out["rss_mb_per_million_vectors"] = round(rss * 1e6 / max(1, stats.vectors), 1)
    out["hnswlib_mb_per_million_vectors"] = round(stats.store.ann_bytes / 2**20 * 1e6 / max(1, stats.vectors), 1)
    started = time.perf_counter()
    await memory.aclose()
    out["aclose_s"] = round(time.perf_counter() - started, 3)
    return out


async def _recall_at_10(memory: Memory, path: str, threads: int, n: int = 50) -> float:
    """Mean overlap of the index's top 10 with exact search over the resource's stored rows."""
    import sqlite3

    index = memory.actor_system.index
    assert index is not None
    embedder = HashEmbedder(dim=DIM)
    conn = sqlite3.connect(path)
    total = 0.0
    try:
        for q in range(n):
            text, _, owner = _query(q, threads)
            hits = await index.query(text, top_k=10, resource_id=owner)
            rows = conn.execute("SELECT message_id, embedding FROM threadmind_vectors WHERE resource_id = ?",
                                (owner,)).fetchall()
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), DIM)
            matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
            vector = embedder.embed_sync([text]).vectors[0]
            order = np.argsort(-(matrix @ (vector / np.linalg.norm(vector))))[:10]
            exact = {rows[i][0] for i in order}
            total += len(exact & {h.message_id for h in hits}) / max(1, len(exact))
    finally:
        conn.close()
    return round(total / n, 4)


async def _restart(path: str, threads: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    started = time.perf_counter()
    memory = _memory(path)
    await memory.start()
    out["start_s"] = round(time.perf_counter() - started, 3)
    text, thread, owner = _query(0, threads)
    found = await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text)
    out["first_semantic_query_s"] = round(time.perf_counter() - started, 3)
    out["first_query_hits"] = len(found.messages)
    out["first_query_from_sql"] = _stats(memory).store.sql_queries > 0
    while True:
        stats = _stats(memory)
        if not stats.store.loading and stats.staged == 0:
            break
        await anyio.sleep(0.05)
    out["full_ann_speed_s"] = round(time.perf_counter() - started, 3)
    out["semantic_query_after"] = await _semantic_latency(memory, threads, 200)
    out["vector_query_after"] = await _vector_latency(memory, threads, 200)
    out["peak_rss_mb"] = _peak_rss_mb()
    out["rss_after_mb"] = _rss_now_mb()
    started = time.perf_counter()
    await memory.aclose()
    out["aclose_s"] = round(time.perf_counter() - started, 3)
    return out


def _cli(path: str, threads: int) -> dict[str, float]:
    text, thread, owner = _query(1, threads)
    commands = {
        "stats": ["stats"],
        "threads": ["threads", "--resource", owner],
        "show": ["show", thread],
        "search": ["search", text, "--resource", owner],
    }
    out: dict[str, float] = {}
    for name, args in commands.items():
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "threadmind.cli", *args, "--db", path, "--dim", str(DIM)],
                              capture_output=True, text=True, timeout=600)
        out[f"{name}_s"] = round(time.perf_counter() - started, 3)
        if done.returncode != 0:
            out[f"{name}_error"] = done.stderr[-300:]  # type: ignore[assignment]
    return out


def _phase(args: Sequence[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.bench_growth", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"phase {args} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _ratios(first: dict[str, Any], other: dict[str, Any]) -> dict[str, float]:
    pairs = {
        "save_msgs_per_s": ("write", "save", "msgs_per_s"),
        "recall_p50": ("write", "recall", "p50_ms"),
        "recall_p99": ("write", "recall", "p99_ms"),
        "semantic_p50": ("write", "semantic_query", "p50_ms"),
        "semantic_p99": ("write", "semantic_query", "p99_ms"),
        "vector_p50": ("write", "vector_query", "p50_ms"),
        "vector_p99": ("write", "vector_query", "p99_ms"),
        "recall_at_10": ("write", "recall_at_10"),
        "aclose_s": ("write", "aclose_s"),
        "first_semantic_query_s": ("restart", "first_semantic_query_s"),
    }
    out: dict[str, float] = {}
    for name, keys in pairs.items():
        a: Any = first
        b: Any = other
        for key in keys:
            a, b = a[key], b[key]
        out[name] = round(b / a, 3) if a else float("nan")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max", type=int, default=SIZES[-1], help="largest size in messages (default 1 000 000)")
    parser.add_argument("--workdir", help="where the database grows (default: a temporary directory)")
    parser.add_argument("--phase", choices=("write", "restart"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--from-threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase == "write":
        print(json.dumps(anyio.run(_write, args.db, args.from_threads, args.threads)))
        return
    if args.phase == "restart":
        print(json.dumps(anyio.run(_restart, args.db, args.threads)))
        return
    sizes = [s for s in SIZES if s <= args.max] or [args.max]
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-growth-")
    path = os.path.join(workdir, "growth.db")
    report: dict[str, Any] = {"dim": DIM, "messages_per_thread": TURNS * 2,
                              "threads_per_resource": THREADS_PER_RESOURCE, "sizes": {}}
    done_threads = 0
    for size in sizes:
        threads = size // (TURNS * 2)
        entry: dict[str, Any] = {"threads": threads, "resources": -(-threads // THREADS_PER_RESOURCE)}
        entry["write"] = _phase(["--phase", "write", "--db", path, "--from-threads", str(done_threads),
                                 "--threads", str(threads)])
        done_threads = threads
        entry["restart"] = _phase(["--phase", "restart", "--db", path, "--threads", str(threads)])
        entry["restart"]["peak_rss_vs_writer_steady"] = round(
            entry["restart"]["peak_rss_mb"] / entry["write"]["steady_rss_mb"], 3)
        entry["cli"] = _cli(path, threads)
        entry["disk_mb"] = {
            "database": round(sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p)) / 2**20, 1),
            "snapshot": round(sum(os.path.getsize(os.path.join(path + ".vectors", f))
                                  for f in os.listdir(path + ".vectors")) / 2**20, 1)
            if os.path.isdir(path + ".vectors") else 0.0,
        }
        report["sizes"][str(size)] = entry
        print(json.dumps({str(size): entry}), file=sys.stderr, flush=True)
    first = report["sizes"][str(sizes[0])]
    report["ratios_to_first"] = {size: _ratios(first, entry) for size, entry in report["sizes"].items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
