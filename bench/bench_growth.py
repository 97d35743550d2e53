"""Lifecycle costs as a deployment grows: one database grown to 10k, 100k and 1M messages (384-d vectors).

Each size adds threads of 10 messages (5 turns) under resources of 10 threads, so 1M messages are 100 000
threads over 10 000 resources. Per size, in fresh processes (so RSS is per process):

- ``write``: save the new threads' turns (16 saves in flight, semantic recall on, HashEmbedder 384-d) with the
  event loop's longest gaps meanwhile (a 1 ms ticker: how long anything held the loop), then
  recall and semantic-query latency, recall@10 against exact search, steady-state RSS with hnswlib's share,
  the most staged vectors (the not-yet-inserted tail), and ``aclose()`` time;
- ``restart``: start to the first correct semantic query, to full ANN speed (loaded, nothing staged), the peak
  RSS of the restarted process, semantic-query latency after it, and the wait for the snapshot it saves when
  it added a long tail of rows (so the next start loads them from the snapshot);
- ``latency``: a second start (first answer, ready, the event loop's longest gap meanwhile), then the same
  reads at every size: 300 threads' last 10 and 100 resources' semantic queries (99 at 10k), each the first
  read of its thread or resource (nothing of it cached), then again (cached); ``write`` and ``restart`` pick
  threads and resources at random, which at 10k are nearly all cached and at 1M nearly all not. Then
  ``raw_sqlite``: the first reads' statements in plain ``sqlite3`` (the part of their growth that is SQLite's);
- ``cli``: ``threadmind stats / threads / show / search`` wall time, process start included.

Then ``idle``, an idle-thread heavy deployment, in a fresh process on a fresh database (no semantic recall,
``idle_timeout`` 2 s): ``--idle N`` threads (default 100 000) are touched once each (create, save one user
message, recall; 16 in flight), then left idle until every actor is passivated. It reports RSS before, at the
peak and after passivation, the most live actors, the time passivation took, what stays per thread (RSS and
allocated-block deltas after ``gc.collect()``, plus tracemalloc on a 2 000-thread run in a process of its
own), and the event loop's longest stalls (a 1 ms ticker's gaps, while touching and while the sweeps drain
the rest), with each sweep slice's own duration. Target: under 2 KiB per passivated thread, no stall from a
sweep over all actors at once.

Prints JSON: every figure per size and the ratios to the first size's, and ``idle``. ``--max`` stops early
(quick runs); ``--idle 0`` skips the idle phase, ``--only idle`` runs it alone.
``--gc-threshold N`` sets CPython's youngest-generation threshold in every phase (see the README's deployment notes);
``--search vector`` measures the reference's vector-only recall instead of the hybrid default; ``--search both``
asks each of the ``latency`` phase's semantic queries by vectors alone and by the hybrid ranking, one right after
the other (each first every other query), so the two are compared at one moment of the machine (the other phases
run hybrid).
Usage: ``python -m bench.bench_growth [--max 100000] [--workdir DIR] [--idle N] [--only growth|idle]
[--search hybrid|vector|keyword|both] [--gc-threshold N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import anyio
import msgspec
import numpy as np

from threadmind import Memory
from threadmind.codecs import Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.testing import actor_system
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload, gen_text

from ._growth_common import GcPauses, LoopGaps, pcts, rss_now_mb
from ._growth_idle import IDLE_THREADS, IDLE_TIMEOUT, IDLE_TRACED, idle_phase, idle_traced_phase

SIZES = (10_000, 100_000, 1_000_000)
TURNS = 5  # 10 messages per thread
THREADS_PER_RESOURCE = 10
DIM = 384


def _resource(t: int) -> str:
    return f"resource-{t // THREADS_PER_RESOURCE}"


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


SEARCH = {"mode": "hybrid"}  # semanticRecall.search of every phase (--search; "both": see the module docstring)


def _memory(path: str) -> Memory:
    return Memory(
        storage=SQLiteStore(path),
        vector=HnswVectorStore(path + ".vectors"),
        embedder=HashEmbedder(dim=DIM),
        options={"lastMessages": 10, "semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource",
                                                        "search": _configured_search()}},
    )


def _configured_search() -> str:
    """The memory's ``semanticRecall.search``: ``--search``, hybrid for ``both``."""
    return "hybrid" if SEARCH["mode"] == "both" else SEARCH["mode"]


def _turn(workload: Workload, t: int, k: int) -> list[Message]:
    return [msgspec.structs.replace(m, resource_id=_resource(t)) for m in workload.messages_for_turn(t, k)]


def _query(q: int, threads: int) -> tuple[str, str, str]:
    t = (q * 7919) % threads
    return gen_text(STREAM_RESOURCE_QUERIES, q, 80), f"thread-{t}", _resource(t)


async def _recall_latency(memory: Memory, threads: int, n: int = 300, offset: int = 0) -> dict[str, float]:
    """The last 10 messages of ``n`` threads spread over the database."""
    times: list[float] = []
    for i in range(n):
        t = (i * 7919 + offset) % threads
        started = time.perf_counter()
        await memory.recall(f"thread-{t}", resource_id=_resource(t))
        times.append(time.perf_counter() - started)
    return pcts(times)


async def _semantic_latency(memory: Memory, threads: int, n: int = 300) -> dict[str, float]:
    times: list[float] = []
    for q in range(n):
        text, thread, owner = _query(q, threads)
        started = time.perf_counter()
        await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text)
        times.append(time.perf_counter() - started)
    return pcts(times)


async def _vector_latency(memory: Memory, threads: int, n: int = 300) -> dict[str, float]:
    """The index's own scoped top-4 (no message reads): what the vector subsystem adds to a semantic query."""
    index = actor_system(memory).index
    assert index is not None
    times: list[float] = []
    for q in range(n):
        text, _, owner = _query(q + 1000, threads)
        started = time.perf_counter()
        await index.query(text, top_k=4, resource_id=owner)
        times.append(time.perf_counter() - started)
    return pcts(times)


def _stats(memory: Memory) -> Any:
    index = actor_system(memory).index
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
    latencies = array("d")  # 900 000 floats at 1M: not a list the collector walks at every full collection
    next_thread = start_threads
    tenth = max(1, (threads - start_threads) // 10)
    marks: list[float] = []  # when each tenth of the threads had been taken: the save rate as the file grows

    async def _worker() -> None:
        # 16 workers take the threads in turn: 16 saves in flight, as 16 concurrent requests of a server
        # make, and no parked task per thread (90 000 of them at 1M were the collector's largest heap).
        nonlocal next_thread
        while next_thread < threads:
            t = next_thread
            next_thread += 1
            if (t - start_threads) % tenth == 0:
                marks.append(time.perf_counter())
            for k in range(TURNS):
                started = time.perf_counter()
                await memory.save_messages(_turn(workload, t, k))
                latencies.append(time.perf_counter() - started)

    gaps = LoopGaps()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    started = time.perf_counter()
    async with anyio.create_task_group() as outer:
        outer.start_soon(gaps.run)
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(_worker)
        gaps.stop()
    seconds = time.perf_counter() - started
    marks.append(started + seconds)
    gc.callbacks.remove(pauses)
    saved = (threads - start_threads) * TURNS * 2
    out["save"] = {"messages": saved, "msgs_per_s": round(saved / seconds), **pcts(latencies),
                   "msgs_per_s_by_tenth": [round(tenth * TURNS * 2 / (b - a)) for a, b in pairwise(marks)]}
    out["event_loop_while_saving"] = {**gaps.report(), "gc": pauses.report(),
                                      "live_thread_actors": len(actor_system(memory).threads),
                                      "gc_tracked_objects": len(gc.get_objects()),
                                      "gc_thresholds": list(gc.get_threshold())}
    out["recall"] = await _recall_latency(memory, threads)
    out["semantic_query"] = await _semantic_latency(memory, threads)
    out["vector_query"] = await _vector_latency(memory, threads)
    out["recall_at_10"] = await _recall_at_10(memory, path, threads)
    stats = _stats(memory)
    rss = rss_now_mb()
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

    index = actor_system(memory).index
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
    gaps = LoopGaps()  # how long loading the index held the event loop (hnswlib's load_index holds the GIL)
    async with anyio.create_task_group() as ticker:
        ticker.start_soon(gaps.run)
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
        gaps.stop()
    out["event_loop_until_full_speed"] = gaps.report()
    out["semantic_query_after"] = await _semantic_latency(memory, threads, 200)
    out["recall_after"] = await _recall_latency(memory, threads, offset=4999)  # threads mostly not cached yet
    out["vector_query_after"] = await _vector_latency(memory, threads, 200)
    out["peak_rss_mb"] = _peak_rss_mb()
    out["rss_after_mb"] = rss_now_mb()
    # A start that added the rows its snapshot lacked saves a new one once live: what a server living on does
    # (the next start then loads the lot); the writer is a forked child, outside this process's RSS.
    out["snapshot_wait_s"] = await _until_snapshot_saved(memory)
    out["snapshot_saves"] = _stats(memory).store.snapshot_saves
    started = time.perf_counter()
    await memory.aclose()
    out["aclose_s"] = round(time.perf_counter() - started, 3)
    return out


async def _until_full_speed(memory: Memory, threads: int) -> float:
    """Start the index (the first semantic query opens it) and wait until it is loaded with nothing staged;
    returns how long the first query took."""
    text, thread, owner = _query(0, threads)
    started = time.perf_counter()
    await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text)
    first = time.perf_counter() - started
    while True:
        stats = _stats(memory)
        if not stats.store.loading and stats.staged == 0:
            return round(first, 3)
        await anyio.sleep(0.05)


async def _until_snapshot_saved(memory: Memory) -> float:
    """Wait for the snapshot a start saves when it added a long tail of rows (the flusher starts it after half a
    second of quiet); returns the seconds waited."""
    started = time.perf_counter()
    await anyio.sleep(0.6)
    while _stats(memory).store.snapshot_saving:  # noqa: ASYNC110 - statistics are polled, nothing signals
        await anyio.sleep(0.05)
    return round(time.perf_counter() - started, 3)


async def _timed(calls: Sequence[tuple[str, str, str | None]], memory: Memory) -> dict[str, Any]:
    """Latency of one ``recall`` per (thread, resource, search text or None for the last 10)."""
    times: list[float] = []
    for thread, owner, text in calls:
        started = time.perf_counter()
        if text is None:
            await memory.recall(thread, resource_id=owner)
        else:
            await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text)
        times.append(time.perf_counter() - started)
    return {**pcts(times), "n": len(times)}


async def _alternating(calls: Sequence[tuple[str, str, str]], memory: Memory) -> dict[str, Any]:
    """Each search of ``calls`` recalled by vectors alone and by the hybrid ranking, one right after the other (each
    mode first every other call: the second finds the query's embedding cached); both modes' latencies and the
    ratio of their medians."""
    times: dict[str, list[float]] = {"vector": [], "hybrid": []}
    for i, (thread, owner, text) in enumerate(calls):
        for mode in ("vector", "hybrid") if i % 2 == 0 else ("hybrid", "vector"):
            config = {"semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource", "search": mode}}
            started = time.perf_counter()
            await memory.recall(thread, resource_id=owner, per_page=0, vector_search_string=text,
                                thread_config=config)
            times[mode].append(time.perf_counter() - started)
    ratio = float(np.median(times["hybrid"]) / np.median(times["vector"])) if calls else 0.0
    return {"vector": pcts(times["vector"]), "hybrid": pcts(times["hybrid"]), "ratio_p50": round(ratio, 2),
            "n": len(calls)}


async def _latency(path: str, threads: int, n: int = 300, scopes: int = 100) -> dict[str, Any]:
    """A second start as a server makes it (``load_index()`` before any request: how long, and the event loop's
    longest gap meanwhile), then the same reads at every size: each thread's or resource's first read (nothing
    of it cached: the last 10 from SQL, the resource's vectors gathered from its stored rows), then again.

    ``write`` and ``restart`` time reads of threads and resources picked at random over the database: at 10k all
    1 000 threads fit the actor cache and all 100 resources the scope-block cache, at 1M most picks miss both, so
    their ratios compare cached reads with uncached ones. These compare like with like: ``n`` threads, and
    ``scopes`` resources (as many as a 10k database has; their blocks fit the default 32 MiB scope cache).
    """
    out: dict[str, Any] = {}
    memory = _memory(path)
    await memory.start()
    gaps = LoopGaps()  # a start after a restart that saved its snapshot: the whole index is in the snapshot
    async with anyio.create_task_group() as ticker:
        ticker.start_soon(gaps.run)
        started = time.perf_counter()
        out["vectors_loaded"] = await memory.load_index()  # as a server's start does, before it takes traffic
        out["load_index_s"] = round(time.perf_counter() - started, 3)
        await _until_full_speed(memory, threads)
        out["ready_s"] = round(time.perf_counter() - started, 3)
        gaps.stop()
    out["event_loop_until_ready"] = gaps.report()
    out["snapshot_wait_s"] = await _until_snapshot_saved(memory)  # not measured beside a snapshot's writer
    resources = -(-threads // THREADS_PER_RESOURCE)
    _, _, first_owner = _query(0, threads)
    # 7919 is prime: i * 7919 % size visits distinct values for i < size (every size here is a power of ten).
    chosen = [r for r in ((i * 7919 + 1) % resources for i in range(min(scopes + 1, resources)))
              if f"resource-{r}" != first_owner][:scopes]
    searches = [(f"thread-{r * THREADS_PER_RESOURCE}", f"resource-{r}") for r in chosen]
    picked = {thread for thread, _ in searches}
    spread = dict.fromkeys(f"thread-{(i * 7919 + 3) % threads}" for i in range(2 * n))
    histories = [(thread, _resource(int(thread[7:])), None) for thread in spread if thread not in picked][:n]
    out["recall_cold"] = await _timed(histories, memory)
    out["recall_hot"] = await _timed(histories, memory)
    for name, first_text in (("semantic_cold", 10_000), ("semantic_hot", 20_000)):
        reads = _stats(memory).store.stored_scope_reads
        # new texts the second time: a repeated text would skip embedding (the query cache)
        asked = [(thread, owner, gen_text(STREAM_RESOURCE_QUERIES, first_text + i, 80))
                 for i, (thread, owner) in enumerate(searches)]
        out[name] = await (_alternating(asked, memory) if SEARCH["mode"] == "both" else _timed(asked, memory))
        out[name]["scope_reads"] = _stats(memory).store.stored_scope_reads - reads  # blocks read from SQL
    await memory.aclose()
    # other threads and resources where there are enough (a 10k database has only the 100 resources read above)
    spare = [thread for thread in dict.fromkeys(f"thread-{(i * 7919 + 5) % threads}" for i in range(3 * n))
             if thread not in spread and thread not in picked]
    raw_histories = [*spare, *(thread for thread, _, _ in histories)][:n]
    unread = [r for r in dict.fromkeys((i * 7919 + 2) % resources for i in range(3 * scopes)) if r not in chosen]
    raw_scopes = [f"resource-{r}" for r in [*unread, *chosen] if f"resource-{r}" != first_owner][:scopes]
    out["raw_sqlite"] = await _raw_sqlite(path, raw_histories, raw_scopes)
    return out


async def _raw_sqlite(path: str, histories: Sequence[str], scopes: Sequence[str]) -> dict[str, Any]:
    """The baseline of the ``latency`` phase's first reads: plain ``sqlite3`` on a fresh connection (an empty page
    cache of the same size as the store's), other threads and resources of the same spread, the same statements.

    ``recall_cold``: the thread row, the message count and the newest 16 messages (what a thread actor reads when
    nothing of the thread is cached); ``semantic_cold``: the resource's stored vectors, an exact top 4 in numpy,
    and each hit with one message before and after it (the include windows of ``messageRange: 1``). What grows
    here with the file is SQLite's, not threadmind's: these ratios are the floor of the like-for-like ones.
    """
    import sqlite3

    texts = [gen_text(STREAM_RESOURCE_QUERIES, 30_000 + i, 80) for i in range(len(scopes))]
    queries = np.asarray((await HashEmbedder(dim=DIM).embed(texts)).vectors, dtype=np.float32)
    cols = 'id, content, role, type, "createdAt", thread_id, "resourceId", rowid'
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA query_only = ON")
        row = conn.execute("SELECT index_name FROM threadmind_vectors LIMIT 1").fetchone()
        index_name = row[0] if row else ""
        times: list[float] = []
        read = 0
        for thread in histories:
            started = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute('SELECT id, "resourceId", title, metadata, "createdAt", "updatedAt" FROM mastra_threads '
                         "WHERE id = ?", (thread,)).fetchone()
            conn.execute("SELECT COUNT(*) FROM mastra_messages WHERE thread_id IN (?)", (thread,)).fetchone()
            read += len(conn.execute(f'SELECT {cols} FROM mastra_messages WHERE thread_id IN (?) ORDER BY '
                                     '"createdAt" DESC, rowid DESC LIMIT ? OFFSET ?', (thread, 16, 0)).fetchall())
            conn.execute("COMMIT")
            times.append(time.perf_counter() - started)
        out: dict[str, Any] = {"recall_cold": {**pcts(times), "n": len(times), "messages_read": read}}
        times = []
        read = 0
        for owner, query in zip(scopes, queries, strict=True):
            started = time.perf_counter()
            rows = conn.execute("SELECT message_id, embedding FROM threadmind_vectors WHERE +index_name = ? AND "
                                "resource_id = ?", (index_name, owner)).fetchall()
            block = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), DIM)
            best = np.argsort(-(block @ query))[:4]
            for i in best:
                target = conn.execute(f"SELECT {cols} FROM mastra_messages WHERE id = ?", (rows[i][0],)).fetchone()
                read += 1
                for sign, order in (("<", "DESC"), (">", "ASC")):
                    read += len(conn.execute(
                        f'SELECT {cols} FROM mastra_messages WHERE thread_id = ? AND ("createdAt", rowid) {sign} '
                        f'(?, ?) ORDER BY "createdAt" {order}, rowid {order} LIMIT 1',
                        (target[5], target[4], target[7]),
                    ).fetchall())
            times.append(time.perf_counter() - started)
        out["semantic_cold"] = {**pcts(times), "n": len(times), "messages_read": read}
        return out
    finally:
        conn.close()


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


_PHASE_FLAGS: list[str] = []  # passed on to every phase's process (--search, --gc-threshold)


def _phase(args: Sequence[str]) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where bench/ is a package
    done = subprocess.run([sys.executable, "-m", "bench.bench_growth", *args, *_PHASE_FLAGS], capture_output=True,
                          text=True, cwd=root)
    if done.returncode != 0:
        raise RuntimeError(f"phase {args} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: The ``latency`` phase's reads, the same at every size (their ratios compare like with like).
LIKE_FOR_LIKE = ("recall_cold", "recall_hot", "semantic_cold", "semantic_hot")


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
        **{f"{read}_{pct}": ("latency", read, f"{pct}_ms") for read in LIKE_FOR_LIKE for pct in ("p50", "p99")},
        **{f"raw_sqlite_{read}_{pct}": ("latency", "raw_sqlite", read, f"{pct}_ms")
           for read in ("recall_cold", "semantic_cold") for pct in ("p50", "p99")},
    }
    if SEARCH["mode"] == "both":  # each semantic read by both modes: a ratio per mode
        for read in ("semantic_cold", "semantic_hot"):
            for pct in ("p50", "p99"):
                del pairs[f"{read}_{pct}"]
                for mode in ("vector", "hybrid"):
                    pairs[f"{read}_{mode}_{pct}"] = ("latency", read, mode, f"{pct}_ms")
    out: dict[str, float] = {}
    for name, keys in pairs.items():
        a: Any = first
        b: Any = other
        for key in keys:
            a, b = a[key], b[key]
        out[name] = round(b / a, 3) if a else float("nan")
    return out


def _run_idle(workdir: str, threads: int, idle_timeout: float, max_actors: int | None) -> dict[str, Any]:
    actors = max_actors if max_actors is not None else max(threads, 10_000)
    common = ["--idle-timeout", str(idle_timeout), "--idle-max-actors", str(actors)]
    entry = _phase(["--phase", "idle", "--db", os.path.join(workdir, "idle.db"), "--threads", str(threads), *common])
    traced = min(threads, IDLE_TRACED)
    entry["tracemalloc"] = _phase(["--phase", "idle-traced", "--db", os.path.join(workdir, "idle-traced.db"),
                                   "--threads", str(traced), *common])
    retained = entry["retained_per_thread"]
    retained["tracemalloc_bytes"] = entry["tracemalloc"]["retained_bytes_per_thread"]
    retained["under_2_kib"] = max(retained["rss_bytes"], retained["tracemalloc_bytes"]) < 2048
    return entry


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max", type=int, default=SIZES[-1], help="largest size in messages (default 1 000 000)")
    parser.add_argument("--workdir", help="where the database grows (default: a temporary directory)")
    parser.add_argument("--idle", type=int, default=IDLE_THREADS, metavar="N",
                        help="threads of the idle phase (default 100 000; 0 skips it)")
    parser.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT,
                        help="the idle phase's Memory idle_timeout in seconds (default 2)")
    parser.add_argument("--idle-max-actors", type=int,
                        help="the idle phase's Memory max_actors (default: N, at least 10 000, so the idle timeout, "
                             "not the LRU cap, retires the actors)")
    parser.add_argument("--only", choices=("growth", "idle"), help="run only the growth phases or only the idle one")
    parser.add_argument("--gc-threshold", type=int, metavar="N",
                        help="gc.set_threshold(N) in every phase (default: CPython's 700): how tuning the collector's "
                             "youngest generation changes the figures")
    parser.add_argument("--search", choices=("hybrid", "vector", "keyword", "both"), default="hybrid",
                        help="semanticRecall.search of the recalls and searches (default hybrid; both: the latency "
                             "phase's semantic queries by each mode in turn)")
    parser.add_argument("--phase", choices=("write", "restart", "latency", "idle", "idle-traced"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--from-threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    SEARCH["mode"] = args.search
    _PHASE_FLAGS[:] = ["--search", args.search]
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold)
        _PHASE_FLAGS.extend(["--gc-threshold", str(args.gc_threshold)])
    if args.phase == "write":
        print(json.dumps(anyio.run(_write, args.db, args.from_threads, args.threads)))
        return
    if args.phase in ("restart", "latency"):
        print(json.dumps(anyio.run(_restart if args.phase == "restart" else _latency, args.db, args.threads)))
        return
    if args.phase in ("idle", "idle-traced"):
        phase = idle_phase if args.phase == "idle" else idle_traced_phase
        print(json.dumps(anyio.run(phase, args.db, args.threads, args.idle_timeout, args.idle_max_actors)))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-growth-")
    report: dict[str, Any] = {}
    if args.only != "idle":
        report = _growth(workdir, args.max)
        report["search"] = args.search
    if args.only != "growth" and args.idle > 0:
        report["idle"] = _run_idle(workdir, args.idle, args.idle_timeout, args.idle_max_actors)
        print(json.dumps({"idle": report["idle"]}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


def _growth(workdir: str, largest: int) -> dict[str, Any]:
    sizes = [s for s in SIZES if s <= largest] or [largest]
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
        entry["latency"] = _phase(["--phase", "latency", "--db", path, "--threads", str(threads)])
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
    return report


if __name__ == "__main__":
    main()
