"""The ``threadmind`` command: a demo of the embedded default, plus inspection and operation tools.

Every command works on one database (``--db``, default ``memory.db``; vectors live in ``<db>.vectors``; a
``postgresql://`` URL opens a PostgreSQL database instead, whose vectors the index rebuilds at start) and
takes the embedder options (``--embedder hash|openai/<model>``, ``--dim N``). Tables and the progress bar use
``rich`` when it is installed (the ``[cli]`` extra) and stdout is a terminal, else plain text. Errors are one
clear line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ._cli_import import read_import_file, save_lines
from ._cli_output import CliError, human_bytes, print_pairs, print_table, progress, snippet
from .errors import ConfigError, ThreadmindError, ThreadNotFound

if TYPE_CHECKING:
    from .codecs import Message
    from .embedders import Embedder
    from .memory import Memory
    from .stores import PostgresStore, SQLiteStore

__all__ = ("main",)

_DEFAULT_DB = "memory.db"
_DEFAULT_DIM = 384


# ------------------------------------------------------------------------------------------- opening


def _stored_dimensions(db: str | None) -> set[int]:
    """The vector dimensions a database already holds: Mastra's ``memory_messages_<dim>`` tables and the
    indexes of threadmind's vector table (read-only; nothing when the file does not exist yet)."""
    if not db or not os.path.isfile(db):
        return set()
    import sqlite3
    from contextlib import closing

    from .stores._interop import vector_tables_in

    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            found = {table.dimension for table in vector_tables_in(conn)}
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'threadmind_vectors'"
                            ).fetchone():
                for (name,) in conn.execute("SELECT DISTINCT index_name FROM threadmind_vectors"):
                    suffix = str(name).removeprefix("memory_messages")
                    if suffix == "":
                        found.add(1536)
                    elif suffix.startswith("_") and suffix[1:].isdigit():
                        found.add(int(suffix[1:]))
    except sqlite3.Error:
        return set()  # the store's own open reports what is wrong with the file
    return found


def _embedder(args: argparse.Namespace) -> tuple[Embedder, int | None]:
    """The embedder named by ``--embedder`` and the expected dimension: ``--dim``, else (for the hash embedder)
    the one dimension the database's vectors already have, else the hash default."""
    spec: str = args.embedder
    if spec == "hash":
        from .embedders import HashEmbedder

        dim = args.dim
        stored = _stored_dimensions(getattr(args, "db", None))
        if dim is None:
            dim = stored.pop() if len(stored) == 1 else _DEFAULT_DIM
        elif stored and dim not in stored and args.command == "search":  # reindex --dim N makes a new index
            have = ", ".join(map(str, sorted(stored)))
            raise ConfigError(f"--dim {dim} does not match the vectors in the database ({have}-dimensional): "
                              "the search would find nothing; leave --dim out to use theirs, or "
                              f"`threadmind reindex --dim {dim}` first")
        return HashEmbedder(dim=dim), dim

    if spec == "wordllama":
        from .embedders import WordLlamaEmbedder

        embedder = WordLlamaEmbedder(dim=args.dim or 256)
        return embedder, embedder.dimension
    if spec.startswith("openai/"):
        from .embedders._resolve import resolve_embedder

        return resolve_embedder(spec), args.dim
    raise ConfigError(f"--embedder must be 'hash', 'wordllama' or 'openai/<model>', not {spec!r}")


def _vectors_path(db: str) -> str:
    """Where the CLI keeps the HNSW snapshot of ``db``: ``memory.db`` -> ``memory.vectors``, as the README's
    ``HnswVectorStore("memory.vectors")`` does (a cache: it is rebuilt from the database when missing). A
    ``memory.db.vectors`` folder (``HnswVectorStore(path + ".vectors")``) is used when only it exists."""
    root, ext = os.path.splitext(db)
    path = (root if ext else db) + ".vectors"
    beside = db + ".vectors"
    if ext and not os.path.isdir(path) and os.path.isdir(beside):
        return beside
    return path


def _is_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def _shown(db: str) -> str:
    """The database as shown to the user: a URL without its password."""
    if not _is_url(db):
        return db
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(db)
    if parts.password is None:
        return db
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def _require_db(db: str) -> None:
    if not _is_url(db) and not os.path.exists(db):
        raise CliError(f"database {db!r} does not exist (pass --db PATH)")


def _memory(args: argparse.Namespace, *, semantic: bool, top_k: int = 4) -> Memory:
    """A Memory over ``--db`` (a file, or a ``postgresql://`` URL); with ``semantic`` also the vector index and the
    embedder."""
    from .memory import Memory
    from .stores import HnswVectorStore, PostgresStore, SQLiteStore

    store = PostgresStore(args.db) if _is_url(args.db) else SQLiteStore(args.db)
    if not semantic:
        return Memory(storage=store, options={"lastMessages": False})
    embedder, dim = _embedder(args)
    return Memory(
        storage=store,
        vector=HnswVectorStore(None if _is_url(args.db) else _vectors_path(args.db)),
        embedder=embedder,
        embedding_dimension=dim,
        options={"lastMessages": False, "semanticRecall": {"topK": top_k, "messageRange": 0, "scope": "resource"}},
    )


def _sql_store(memory: Memory) -> SQLiteStore | PostgresStore:
    from .stores import PostgresStore, SQLiteStore

    store = memory.storage
    assert isinstance(store, (SQLiteStore, PostgresStore))
    return store


async def _message_counts_of(store: SQLiteStore | PostgresStore, thread_ids: Sequence[str]) -> dict[str, int]:
    """Messages per listed thread, read through the thread index (not a count over every message)."""
    from .stores import PostgresStore

    if isinstance(store, PostgresStore):
        rows = await store.run_read(lambda conn: conn.fetch(
            "SELECT thread_id, count(*) FROM mastra_messages WHERE thread_id = ANY($1::text[]) GROUP BY 1",
            list(thread_ids)), "message counts")
        return {str(t): int(n) for t, n in rows}
    return await store.execute_read(lambda conn: _message_counts(conn, thread_ids))


# ------------------------------------------------------------------------------------------- demo


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def _demo(args: argparse.Namespace) -> int:
    from ._demo import DEMO_THREADS, demo_options, play_conversation
    from .memory import Memory
    from .stores import HnswVectorStore, SQLiteStore

    for option in ("threads", "resources", "turns", "concurrency"):
        value = getattr(args, option)
        if value < 1:
            raise CliError(f"--{option} must be a positive integer, got {value}")
    workdir = None
    if args.db:
        db_path = args.db
    else:
        workdir = tempfile.mkdtemp(prefix="threadmind-demo-")
        db_path = os.path.join(workdir, "memory.db")
    semantic = not args.no_semantic
    options: dict[str, Any] = demo_options() if not args.bench else {"lastMessages": 10}
    if args.bench and semantic:
        options["semanticRecall"] = {"topK": 4, "messageRange": 1, "scope": "resource"}
    if not semantic:
        options.pop("semanticRecall", None)
    if args.embedder == "auto":  # a real model when its wheel is there, else the hash embedder
        args.embedder = "wordllama" if importlib.util.find_spec("wordllama") is not None else "hash"
    embedder, dim = _embedder(args) if semantic else (None, None)
    memory = Memory(
        storage=SQLiteStore(db_path),
        vector=HnswVectorStore(_vectors_path(db_path)) if semantic else None,
        embedder=embedder,
        embedding_dimension=dim,
        options=options,
    )
    kept = workdir is None or args.keep
    named = {"hash": "the offline hash embedder", "wordllama": "the offline WordLlama model"}.get(args.embedder,
                                                                                                   args.embedder)
    print(f"threadmind demo on the embedded default: SQLite, hnswlib and {named}"
          + ("" if semantic else " (semantic recall off)"))
    print(f"database: {db_path}" + ("" if kept else " (deleted at exit; --keep keeps it)") + "\n")
    try:
        async with memory:
            if not args.bench:
                for thread_id in DEMO_THREADS:
                    if await memory.get_thread_by_id(thread_id) is not None:
                        raise CliError(f"{_shown(db_path)} already holds the demo's thread {thread_id!r}; "
                                        "leave --db out (a fresh temporary database) or give a new file")
                await play_conversation(memory)
                print()
            await _demo_workload(memory, args, full=args.bench)
    finally:
        if workdir is not None and not kept:
            await anyio.to_thread.run_sync(shutil.rmtree, workdir)

    return 0


async def _demo_workload(memory: Memory, args: argparse.Namespace, *, full: bool) -> None:
    """Save the deterministic benchmark workload through ``memory`` and print its throughput (``full``: and
    the HNSW insert time, recall latencies and a sample, as ``--bench`` does)."""
    from .workload import Workload

    workload = Workload(threads=args.threads, resources=min(args.resources, args.threads), turns=args.turns)
    total = workload.threads * workload.turns * 2
    if full:
        print(f"workload: {_plural(workload.threads, 'thread')} x {_plural(workload.turns, 'turn')} under "
              f"{_plural(workload.resources, 'resource')}, concurrency {args.concurrency}")
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
    latencies.sort()
    p50, p99 = _percentile(latencies, 0.5) * 1000, _percentile(latencies, 0.99) * 1000
    print(f"throughput: {total:,} messages saved ({_plural(workload.threads, 'thread')} x "
          f"{_plural(workload.turns, 'turn')}, {args.concurrency} at a time) in {elapsed:.2f} s: "
          f"{total / elapsed:,.0f} msgs/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms")

    if not full:
        return
    if memory.index_statistics() is not None:  # insert the staged vectors now, not under the timed reads
        started = time.perf_counter()
        inserted = await memory.flush_index()
        print(f"HNSW index: {inserted:,} vectors inserted in {time.perf_counter() - started:.2f} s")
    recall_times: list[float] = []
    for i in range(200):
        t = i % workload.threads
        started = time.perf_counter()
        await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t))
        recall_times.append(time.perf_counter() - started)
    recall_times.sort()
    print(f"last-10 recall: p50 {_percentile(recall_times, 0.5) * 1000:.3f} ms, "
          f"p99 {_percentile(recall_times, 0.99) * 1000:.3f} ms")
    if memory.index_statistics() is not None:
        query = workload.query_text(2, 0)
        recall_times = []
        for i in range(50):
            t = i % workload.threads
            started = time.perf_counter()
            hits = await memory.recall(workload.thread_id(t), resource_id=workload.resource_id(t), per_page=0,
                                       vector_search_string=query)
            recall_times.append(time.perf_counter() - started)
        recall_times.sort()
        print(f"semantic recall (resource scope): p50 {_percentile(recall_times, 0.5) * 1000:.3f} ms, "
              f"p99 {_percentile(recall_times, 0.99) * 1000:.3f} ms, last query found "
              f"{_plural(len(hits.messages), 'message')}")


def _plural(n: int, noun: str) -> str:
    """``1 thread``, ``2 threads``, ``10,000 messages``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


# ------------------------------------------------------------------------------------------- inspection


def _message_counts(conn: sqlite3.Connection, thread_ids: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for start in range(0, len(thread_ids), 500):  # under SQLite's bound-parameter limit
        chunk = list(thread_ids[start:start + 500])
        marks = ", ".join("?" * len(chunk))
        counts.update((str(t), int(n)) for t, n in conn.execute(
            f"SELECT thread_id, count(*) FROM mastra_messages WHERE thread_id IN ({marks}) GROUP BY 1", chunk))
    return counts


async def _threads(args: argparse.Namespace) -> int:
    from .codecs import thread_to_dict
    from .codecs._time import to_iso

    _require_db(args.db)
    async with _memory(args, semantic=False) as memory:
        page = await memory.list_threads(resource_id=args.resource, per_page=False)
        counts = await _message_counts_of(_sql_store(memory), [t.id for t in page.threads])
    if args.json:
        print(json.dumps([thread_to_dict(t) | {"messages": counts.get(t.id, 0)} for t in page.threads],
                         ensure_ascii=False, indent=2))
        return 0
    rows = [(t.id, t.resource_id, t.title, counts.get(t.id, 0), to_iso(t.updated_at)) for t in page.threads]
    scope = f" of resource {args.resource!r}" if args.resource else ""
    print_table(("thread", "resource", "title", "messages", "updated"), rows,
                 title=f"{_plural(page.total, 'thread')}{scope}")

    return 0


def _message_row(message: Message) -> tuple[str, str, str, str]:
    from .codecs._time import to_iso

    return (to_iso(message.created_at), message.role, message.id, snippet(message.text))


async def _show(args: argparse.Namespace) -> int:
    from .codecs import message_to_dict, thread_to_dict
    from .codecs._time import to_iso

    _require_db(args.db)
    async with _memory(args, semantic=False) as memory:
        thread = await memory.get_thread_by_id(args.thread)
        if thread is None:
            raise ThreadNotFound(args.thread)
        result = await memory.recall(args.thread, per_page=False)
    if args.json:
        print(json.dumps({"thread": thread_to_dict(thread), "messages": [message_to_dict(m) for m in result.messages]},
                         ensure_ascii=False, indent=2))
        return 0
    print_pairs(
        [("id", thread.id), ("resource", thread.resource_id), ("title", thread.title),
         ("created", to_iso(thread.created_at)), ("updated", to_iso(thread.updated_at)),
         ("metadata", json.dumps(thread.metadata, ensure_ascii=False)), ("messages", len(result.messages))],
        title=f"thread {thread.id}",
    )
    print_table(("created", "role", "id", "text"), [_message_row(m) for m in result.messages])
    return 0


async def _search(args: argparse.Namespace) -> int:
    if args.top_k < 1:
        raise CliError("--top-k must be a positive integer")
    _require_db(args.db)
    async with _memory(args, semantic=args.search != "keyword", top_k=args.top_k) as memory:
        resource = args.resource
        if args.thread is not None:
            thread = await memory.get_thread_by_id(args.thread)
            if thread is None:
                raise ThreadNotFound(args.thread)
            resource = thread.resource_id
        hits = await memory.search(args.query, resource_id=resource, thread_id=args.thread, top_k=args.top_k,
                                   search=args.search)

    def side(score: float | None) -> str:
        return "-" if score is None else f"{score:.3f}"

    rows = [(f"{hit.score:.4f}", hit.message.id, hit.message.thread_id or "", hit.message.role,
             side(hit.keyword_score), side(hit.vector_score), snippet(hit.message.text)) for hit in hits]
    scope = f"resource {args.resource!r}" if args.resource is not None else f"thread {args.thread!r}"
    print_table(("score", "message", "thread", "role", "words", "vector", "text"), rows,
                 title=f"{len(rows)} hits in {scope} ({args.search})")
    return 0


async def _export(args: argparse.Namespace) -> int:
    from .codecs import encode_json

    _require_db(args.db)
    async with _memory(args, semantic=False) as memory:
        store = _sql_store(memory)
        for thread_id in args.threads:
            if await memory.get_thread_by_id(thread_id) is None:
                raise ThreadNotFound(thread_id)
        out = sys.stdout
        async for message in store.iter_messages(args.threads or None):
            out.write(encode_json(message).decode() + "\n")  # Mastra's shape; InvalidMessage if it has no JSON form
    out.flush()
    return 0


# ------------------------------------------------------------------------------------------- import


async def _import(args: argparse.Namespace) -> int:
    good, bad = await anyio.to_thread.run_sync(read_import_file, args.file)
    by_thread: dict[str, list[tuple[int, Message]]] = {}
    for number, message in good:
        assert message.thread_id is not None
        by_thread.setdefault(message.thread_id, []).append((number, message))
    saved = created = 0
    pending_vectors = False
    async with _memory(args, semantic=not args.no_semantic) as memory:
        for thread_id, lines in by_thread.items():
            resource_id = lines[0][1].resource_id
            assert resource_id is not None
            thread = await memory.get_thread_by_id(thread_id)
            if thread is None:
                await memory.create_thread(thread_id=thread_id, resource_id=resource_id)
                created += 1
            n, pending = await save_lines(memory, lines, bad)
            saved += n
            pending_vectors = pending_vectors or pending
    bad.sort(key=lambda text: int(text.split(":", 1)[0].removeprefix("line ")))
    for text in bad:
        print(f"threadmind: import: {text}", file=sys.stderr)
    print(f"imported {_plural(saved, 'message')} into {_plural(len(by_thread), 'thread')} ({created} new); "
          f"{_plural(len(bad), 'bad line')}")
    if pending_vectors:
        print("threadmind: import: some vectors could not be made; run `threadmind reindex`", file=sys.stderr)
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------- operation


async def _reindex(args: argparse.Namespace) -> int:
    _require_db(args.db)
    async with _memory(args, semantic=True) as memory:
        with progress("reindex: keyword index") as words, progress("reindex") as messages:
            made = await memory.reindex(progress=messages, keyword_progress=words)
        name = memory.index_name
        # Inserting into HNSW and writing its snapshot at close take a while at a million vectors: say so.
        print("reindex: inserting into the HNSW index and saving its snapshot...", flush=True)
        started = time.perf_counter()
        await memory.flush_index()
    print(f"reindex: made {made} vectors in {name} (index saved in {time.perf_counter() - started:.1f} s)")

    return 0


def _vector_stats(conn: sqlite3.Connection) -> tuple[list[tuple[str, int, int]], int]:
    """Per index (name, vectors, messages without one), and the pending count; zeros before any vector.

    Read from the vector table's primary key alone (a message's vectors are ``<id>`` or ``<id>#<chunk>``), so
    the figures cost one index scan, not a lookup per message.
    """
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "threadmind_vectors" not in tables:
        return [], 0
    messages = int(conn.execute("SELECT count(*) FROM mastra_messages").fetchone()[0])
    per_index: list[tuple[str, int, int]] = []
    for name, count, with_vector in conn.execute(
        "SELECT index_name, count(*), sum(instr(vector_id, '#') = 0 OR vector_id LIKE '%#0') "
        "FROM threadmind_vectors GROUP BY 1 ORDER BY 1"
    ):
        per_index.append((str(name), int(count), max(0, messages - int(with_vector or 0))))
    pending = int(conn.execute("SELECT count(*) FROM threadmind_vector_pending").fetchone()[0]) \
        if "threadmind_vector_pending" in tables else 0
    return per_index, pending


def _disk_size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
                   if os.path.isfile(os.path.join(path, f)))
    return os.path.getsize(path) if os.path.exists(path) else 0


def _sizes(db: str, vectors_dir: str) -> tuple[int, int, bool]:
    """Database bytes (file + WAL), snapshot bytes, and whether a snapshot folder exists."""
    return _disk_size(db) + _disk_size(db + "-wal"), _disk_size(vectors_dir), os.path.isdir(vectors_dir)


async def _pg_vector_stats(store: PostgresStore) -> tuple[list[tuple[str, int, int]], int]:
    """``_vector_stats`` of a PostgreSQL database."""

    async def read(conn: Any) -> tuple[list[tuple[str, int, int]], int]:
        per_index = [(str(name), int(count), int(missing)) for name, count, missing in await conn.fetch(
            "SELECT v.index_name, count(*), (SELECT count(*) FROM mastra_messages m WHERE NOT EXISTS (SELECT 1 "
            "FROM threadmind_vectors w WHERE w.index_name = v.index_name AND w.message_id = m.id)) "
            "FROM threadmind_vectors v GROUP BY 1 ORDER BY 1")]
        return per_index, int(await conn.fetchval("SELECT count(*) FROM threadmind_vector_pending"))

    result: tuple[list[tuple[str, int, int]], int] = await store.run_read(read, "vector stats")
    return result


async def _stats(args: argparse.Namespace) -> int:
    from .stores import SQLiteStore
    from .stores._interop import mastra_vector_tables

    _require_db(args.db)
    async with _memory(args, semantic=False) as memory:
        store = _sql_store(memory)
        counts = await store.stats()
        if isinstance(store, SQLiteStore):
            per_index, pending = await store.execute_read(_vector_stats)
            mastra_tables = await mastra_vector_tables(store)
        else:
            per_index, pending = await _pg_vector_stats(store)
            mastra_tables = []
    vectors_dir = _vectors_path(args.db)
    if isinstance(store, SQLiteStore):
        db_bytes, snapshot_bytes, has_snapshot = await anyio.to_thread.run_sync(_sizes, args.db, vectors_dir)
    else:
        db_bytes, snapshot_bytes, has_snapshot = counts["file_bytes"], 0, False
    pairs: list[tuple[str, object]] = [
        ("threads", counts["threads"]),
        ("messages", counts["messages"]),
        ("resources", counts["resources"]),
        ("working memories", counts["working_memories"]),
        ("vectors", sum(n for _, n, _ in per_index)),
        ("database size", human_bytes(db_bytes)),
        ("index snapshot", f"{human_bytes(snapshot_bytes)} in {vectors_dir}" if has_snapshot
         else "none (rebuilt from SQL at the next start)" if per_index else "none"),

        ("pending vectors", pending),
    ]
    for name, count, missing in per_index:
        health = "ok" if not missing and not pending else "run `threadmind reindex`"
        pairs.append((f"index {name}", f"{count} vectors; {missing} messages without one; {health}"))
    if not per_index:  # written without semantic recall: nothing is wrong, so no reindex advice
        pairs.append(("index health", "no vector index (the messages were saved without semantic recall; "
                                      "`threadmind reindex` makes one)" if counts["messages"] else "no vectors yet"))
    for table in mastra_tables:
        pairs.append((f"mastra table {table.name}", f"dimension {table.dimension} (imported at start when empty)"))
    print_pairs(pairs, title=f"threadmind {_shown(args.db)}")
    return 0


# ------------------------------------------------------------------------------------------- parser


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=_DEFAULT_DB, metavar="PATH|URL",
                        help=f"database file (default: {_DEFAULT_DB}, with its index snapshot in memory.vectors), "
                             "or a postgresql:// URL")
    _embedder_options(common)
    return common


def _embedder_options(parser: argparse.ArgumentParser, default: str = "hash") -> None:
    parser.add_argument("--embedder", default=default, metavar="hash|wordllama|openai/MODEL",
                        help=f"embedder for vectors (default: {default})")
    parser.add_argument("--dim", type=int, default=None, metavar="N",
                        help="embedding dimension (default for hash: the dimension of the database's vectors, "
                             f"else {_DEFAULT_DIM})")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("threadmind")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from . import __version__

        return __version__


def _parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(prog="threadmind", description="Conversational memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"threadmind {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()

    demo = sub.add_parser(
        "demo", help="a short conversation showing what memory does, then one throughput line",
        description="Plays a two-thread conversation on the embedded default (SQLite + hnswlib + an offline "
                    "embedder: WordLlama when installed, else the hash embedder; scripted models: no network) "
                    "showing history, working memory, a title and a hit across threads found by words and "
                    "meaning, then saves a deterministic workload and prints its throughput. --bench skips the "
                    "conversation and prints more figures.")
    demo.add_argument("--db", metavar="PATH", help="database file (default: a fresh temporary file)")
    _embedder_options(demo, default="auto")
    demo.add_argument("--bench", action="store_true",
                      help="skip the conversation; also time the HNSW insert, history and semantic recall")
    demo.add_argument("--threads", type=int, default=200, metavar="N",
                      help="threads of the throughput workload (default: 200)")
    demo.add_argument("--resources", type=int, default=20, metavar="N",
                      help="resources the workload's threads belong to (default: 20)")
    demo.add_argument("--turns", type=int, default=25, metavar="N",
                      help="turns per thread, two messages each (default: 25)")
    demo.add_argument("--concurrency", type=int, default=16, metavar="N",
                      help="threads saving at the same time (default: 16)")
    demo.add_argument("--no-semantic", action="store_true", help="no embeddings, no vector index")
    demo.add_argument("--keep", action="store_true", help="keep the temporary database and print where it is")
    demo.set_defaults(run=_demo)

    threads = sub.add_parser("threads", parents=[common], help="list threads")
    threads.add_argument("--resource", metavar="R", help="only the threads of this resource")
    threads.add_argument("--json", action="store_true", help="print JSON (Mastra's thread shape)")
    threads.set_defaults(run=_threads)

    show = sub.add_parser("show", parents=[common], help="show a thread and its messages")
    show.add_argument("thread", metavar="THREAD")
    show.add_argument("--json", action="store_true", help="print JSON (Mastra's thread and message shapes)")
    show.set_defaults(run=_show)

    search = sub.add_parser("search", parents=[common], help="search a resource or a thread by words and meaning")
    search.add_argument("query", metavar="QUERY")
    scope = search.add_mutually_exclusive_group(required=True)
    scope.add_argument("--resource", metavar="R", help="search every thread of this resource")
    scope.add_argument("--thread", metavar="T", help="search this thread only")
    search.add_argument("--top-k", type=int, default=4, metavar="N", help="number of hits (default: 4)")
    search.add_argument("--search", choices=("hybrid", "vector", "keyword"), default="hybrid",
                        help="rank by words and vectors (default), by vectors only, or by words only")
    search.set_defaults(run=_search)

    export = sub.add_parser("export", parents=[common], help="messages as JSON lines (Mastra's shape) on stdout")
    export.add_argument("threads", nargs="*", metavar="THREAD", help="threads to export (default: all)")
    export.set_defaults(run=_export)

    imp = sub.add_parser("import", parents=[common], help="import messages from a JSON-lines file ('-': stdin)")
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--no-semantic", action="store_true",
                     help="save without vectors (`threadmind reindex` makes them later)")

    imp.set_defaults(run=_import)

    reindex = sub.add_parser("reindex", parents=[common],
                             help="index the words and make the vectors of messages that have none")
    reindex.set_defaults(run=_reindex)

    stats = sub.add_parser("stats", parents=[common], help="threads, messages, vectors, sizes and index health")
    stats.set_defaults(run=_stats)
    return parser


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups raised by task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``threadmind`` command; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed by argparse
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        result: int = anyio.run(args.run, args)
    except KeyboardInterrupt:
        return 130
    except BaseException as raised:  # noqa: BLE001 - the command line never shows a traceback
        exc = _leaf(raised)
        if isinstance(exc, KeyboardInterrupt):
            return 130
        if isinstance(exc, BrokenPipeError):  # e.g. `threadmind threads | head`: the reader left, nothing to say
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush at exit
            except OSError:
                pass
            return 0
        if isinstance(exc, ThreadmindError):
            print(f"threadmind: error: {exc.message} [{exc.code}]", file=sys.stderr)
        elif isinstance(exc, (CliError, OSError, ValueError)):
            print(f"threadmind: error: {exc}", file=sys.stderr)
        elif isinstance(exc, SystemExit):
            return exc.code if isinstance(exc.code, int) else 1
        else:
            print(f"threadmind: error: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
