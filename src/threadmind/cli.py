"""The ``threadmind`` command: a demo of the embedded default, plus inspection and operation tools.

Errors are one clear line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import anyio

from .errors import ThreadmindError

__all__ = ("main",)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def _demo(args: argparse.Namespace) -> int:
    from .embedders import HashEmbedder
    from .memory import Memory
    from .stores import HnswVectorStore, SQLiteStore
    from .workload import Workload

    workdir = None
    if args.db:
        db_path = args.db
    else:
        workdir = tempfile.mkdtemp(prefix="threadmind-demo-")
        db_path = os.path.join(workdir, "memory.db")
    semantic = not args.no_semantic
    options: dict[str, Any] = {"lastMessages": 10}
    if semantic:
        options["semanticRecall"] = {"topK": 4, "messageRange": 1, "scope": "resource"}
    workload = Workload(threads=args.threads, resources=min(args.resources, args.threads), turns=args.turns)
    memory = Memory(
        storage=SQLiteStore(db_path),
        vector=HnswVectorStore(db_path + ".vectors") if semantic else None,
        embedder=HashEmbedder(dim=384) if semantic else None,
        options=options,
    )
    print(f"threadmind demo: {args.threads} threads x {args.turns} turns under {workload.resources} resources, "
          f"concurrency {args.concurrency}, semantic recall {'on' if semantic else 'off'}")
    print(f"database: {db_path}")
    async with memory:
        for t in range(workload.threads):
            await memory.create_thread(thread_id=workload.thread_id(t), resource_id=workload.resource_id(t),
                                       title=f"Thread {t}")
        limiter = anyio.Semaphore(args.concurrency)
        latencies: list[float] = []

        async def _thread_turns(t: int) -> None:
            async with limiter:
                for k in range(workload.turns):
                    started = time.perf_counter()
                    await memory.save_messages(workload.messages_for_turn(t, k))
                    latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for t in range(workload.threads):
                tg.start_soon(_thread_turns, t)
        elapsed = time.perf_counter() - started
        total = workload.threads * workload.turns * 2
        latencies.sort()
        print(f"saved {total} messages in {elapsed:.2f} s: {total / elapsed:,.0f} msgs/s "
              f"(save p50 {_percentile(latencies, 0.5) * 1000:.2f} ms, p99 {_percentile(latencies, 0.99) * 1000:.2f} ms)")
        recall_times: list[float] = []
        for i in range(200):
            t = i % workload.threads
            started = time.perf_counter()
            await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
            recall_times.append(time.perf_counter() - started)
        recall_times.sort()
        print(f"last-10 recall: p50 {_percentile(recall_times, 0.5) * 1000:.3f} ms, "
              f"p99 {_percentile(recall_times, 0.99) * 1000:.3f} ms")
        sample = await memory.recall(workload.thread_id(0), resource_id=workload.resource_id(0))
        print(f"sample recall of {workload.thread_id(0)} ({len(sample.messages)} messages):")
        for message in sample.messages[-4:]:
            print(f"  [{message.role}] {message.text[:70]}...")
        if semantic:
            query = workload.query_text(2, 0)
            hits = await memory.recall(workload.thread_id(0), resource_id=workload.resource_id(0), per_page=0,
                                       vector_search_string=query)
            print(f"semantic recall for {query[:50]!r}: {len(hits.messages)} messages from "
                  f"{len({m.thread_id for m in hits.messages})} threads")
    if workdir is not None and not args.keep:
        for name in os.listdir(workdir):
            path = os.path.join(workdir, name)
            if os.path.isdir(path):
                for inner in os.listdir(path):
                    os.remove(os.path.join(path, inner))
                os.rmdir(path)
            else:
                os.remove(path)
        os.rmdir(workdir)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="threadmind", description="Conversational memory for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the shared workload on the embedded default (SQLite + hnswlib)")
    demo.add_argument("--db", help="database file (default: a fresh temporary file)")
    demo.add_argument("--threads", type=int, default=200)
    demo.add_argument("--resources", type=int, default=20)
    demo.add_argument("--turns", type=int, default=25)
    demo.add_argument("--concurrency", type=int, default=16)
    demo.add_argument("--no-semantic", action="store_true", help="skip embeddings and the vector index")
    demo.add_argument("--keep", action="store_true", help="keep the temporary database")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``threadmind`` command."""
    args = _parser().parse_args(argv)
    try:
        result: int = anyio.run(args.run, args)
    except ThreadmindError as exc:
        print(f"threadmind: error: {exc.message} [{exc.code}]", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"threadmind: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
