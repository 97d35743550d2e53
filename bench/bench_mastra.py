"""threadmind against Mastra side by side on one PostgreSQL server: the shared workload (bench/WORKLOAD.md) through
``Memory`` on ``PostgresStore`` (+ ``PgVectorStore``) and through the real ``@mastra/memory`` Memory on
``@mastra/pg``'s PostgresStore (+ PgVector), each phase on a fresh database, the two systems alternating run by run
so that a drifting machine hits both alike.

Run: ``python -m bench.bench_mastra [--repeat 2] [--phases save_sequential,save_concurrency_16,recall_last_10,
semantic]``. Needs node and the registry (or the npm cache) for the pinned packages of ``interop/pg``. Phases: saves
one turn at a time and 16 threads in flight (semantic recall off); last-10 recall (1 000 calls after the 16-in-flight
saves); semantic saves (16 in flight, the workload's 384-d hash embedder on both sides, ported to JavaScript in
``interop/pg/mastra_bench.mjs``) and the workload's semantic queries (top 4, range 1, resource then thread scope:
threadmind's default hybrid ranking, Mastra's vector recall). Prints one JSON document: each system's runs, the
medians and threadmind's ratio (throughput: threadmind / Mastra; latency: Mastra / threadmind).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from threadmind import Memory, message_to_dict
from threadmind.stores import PostgresStore
from threadmind.stores._postgres._pool import import_asyncpg
from threadmind.workload import STREAM_RESOURCE_QUERIES, STREAM_THREAD_QUERIES, Workload

from ._pgserver import PgCluster
from .bench_postgres import Turns, _create_threads, _each_save, _pcts, _phase_memory, _phase_semantic, _Server

REPO = Path(__file__).resolve().parents[1]
PHASES = ("save_sequential", "save_concurrency_16", "recall_last_10", "semantic")


def _mastra_folder() -> Path:
    """The folder with ``interop/pg``'s pinned packages installed (the tests' cache) and its scripts."""
    sys.path.insert(0, str(REPO))
    from tests._npm import install  # the one installer of pinned npm packages (cached between runs)

    return install(REPO / "interop" / "pg", "mastra-pg")


def _workload_file(workload: Workload, turns: Turns, folder: Path, calls: int) -> Path:
    path = folder / "workload.json"
    recalls = [[workload.thread_id(i % workload.threads), workload.resource_id(i % workload.threads)]
               for i in range(calls)]
    path.write_text(json.dumps({
        "threads": [{"id": workload.thread_id(t), "resourceId": workload.resource_id(t),
                     "title": workload.thread_title(t)} for t in range(workload.threads)],
        "turns": [[[message_to_dict(m) for m in turn] for turn in turns[t]] for t in range(workload.threads)],
        "recalls": recalls,
        "resourceQueries": [{"threadId": q.thread_id, "resourceId": q.resource_id, "text": q.text}
                            for q in workload.iter_queries(STREAM_RESOURCE_QUERIES)],
        "threadQueries": [{"threadId": q.thread_id, "resourceId": q.resource_id, "text": q.text}
                          for q in workload.iter_queries(STREAM_THREAD_QUERIES)],
    }))
    return path


async def _mastra(folder: Path, phase: str, dsn: str, workload_path: Path, workload: Workload) -> dict[str, Any]:
    done = await anyio.run_process(["node", "mastra_bench.mjs", phase, dsn, str(workload_path)], cwd=folder,
                                   check=False)
    if done.returncode != 0:
        raise RuntimeError(f"mastra_bench.mjs {phase} failed: {done.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if phase == "semantic":  # Mastra did the work compared: a vector per message, and recalls that return messages
        conn = await import_asyncpg().connect(dsn)
        try:
            vectors = await conn.fetchval("SELECT count(*) FROM memory_messages_384")
        finally:
            await conn.close()
        if vectors != workload.message_count or not result["resource_query"]["messages_returned"]:
            raise RuntimeError(f"Mastra stored {vectors} vectors for {workload.message_count} messages and recalled "
                               f"{result['resource_query']['messages_returned']} messages")
    return result


async def _ours(server: _Server, phase: str, workload: Workload, turns: Turns, label: str,
                calls: int) -> dict[str, Any]:
    if phase in ("save_sequential", "save_concurrency_16"):
        return {"save": await _phase_memory(server, workload, turns, 1 if phase == "save_sequential" else 16, label)}
    if phase == "recall_last_10":
        dsn = await server.new(label)
        async with Memory(storage=PostgresStore(dsn, min_size=16, max_size=16), options={"lastMessages": 10}) as memory:
            await _create_threads(workload, lambda t: memory.create_thread(
                thread_id=workload.thread_id(t), resource_id=workload.resource_id(t), title=workload.thread_title(t)))
            await _each_save(turns, 16, memory.save_messages, [])
            latencies: list[float] = []
            for i in range(calls):
                t = i % workload.threads
                started = time.perf_counter()
                await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
                latencies.append(time.perf_counter() - started)
        return {"recall": {"calls": calls, **_pcts(latencies)}}
    out = await _phase_semantic(server, workload, turns, "pgvector")
    return {"save": out["save_concurrency_16"],
            "resource_query": out["resource_query"]["recall_with_window"],
            "thread_query": out["thread_query"]["recall_with_window"]}


def _figures(run: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one run: throughput (msgs/s) and p50 latencies (ms)."""
    out: dict[str, float] = {}
    if "save" in run:
        out["save_msgs_per_s"] = run["save"]["msgs_per_s"]
        out["save_p50_ms"] = run["save"]["p50_ms"]
    for key in ("recall", "resource_query", "thread_query"):
        if key in run:
            out[f"{key}_p50_ms"] = run[key]["p50_ms"]
    return out


async def _main(args: argparse.Namespace, admin_dsn: str) -> dict[str, Any]:
    workload = Workload(threads=args.threads, resources=args.resources, turns=args.turns, queries=args.queries)
    turns: Turns = {t: [workload.messages_for_turn(t, k) for k in range(workload.turns)]
                    for t in range(workload.threads)}
    folder = _mastra_folder()
    server = _Server(admin_dsn)
    report: dict[str, Any] = {"workload": {"threads": workload.threads, "resources": workload.resources,
                                           "turns": workload.turns, "messages": workload.message_count}}
    with tempfile.TemporaryDirectory(prefix="threadmind-bench-mastra-") as scratch:
        workload_path = _workload_file(workload, turns, Path(scratch), args.recalls)
        try:
            for phase in args.phases.split(","):
                runs: dict[str, list[dict[str, float]]] = {"threadmind": [], "mastra": []}
                for i in range(args.repeat):
                    for system in ("threadmind", "mastra") if i % 2 == 0 else ("mastra", "threadmind"):
                        label = f"{system[0]}{phase.replace('_', '')}{i}"
                        run = (await _ours(server, phase, workload, turns, label, args.recalls)
                               if system == "threadmind"
                               else await _mastra(folder, phase, await server.new(label), workload_path, workload))
                        runs[system].append(_figures(run))
                medians = {system: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                           for system, rs in runs.items()}
                ratios = {key: round(medians["threadmind"][key] / medians["mastra"][key], 2)
                          if key.endswith("per_s") else round(medians["mastra"][key] / medians["threadmind"][key], 2)
                          for key in medians["threadmind"]}
                report[phase] = {"runs": runs, "median": medians, "threadmind_advantage": ratios}
        finally:
            await server.drop_all()
    node = (await anyio.run_process(["node", "--version"], check=False)).stdout.decode().strip()
    report["versions"] = {"python": sys.version.split()[0], "node": node,
                          "mastra": json.loads((REPO / "interop" / "pg" / "package.json").read_text())["dependencies"]}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--queries", type=int, default=500, help="semantic queries per scope")
    parser.add_argument("--recalls", type=int, default=1000, help="last-10 recalls")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each system per phase, alternating")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated: " + ", ".join(PHASES))
    parser.add_argument("--dsn", help="an existing server's maintenance database (default: start a durable one)")
    args = parser.parse_args(argv)
    unknown = set(args.phases.split(",")) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.dsn:
        report = anyio.run(_main, args, args.dsn)
    else:
        with PgCluster(durable=True) as cluster:
            report = anyio.run(_main, args, cluster.socket_dsn())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
