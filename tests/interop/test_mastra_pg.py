"""One PostgreSQL database, two systems: the real ``@mastra/pg`` and threadmind's ``PostgresStore`` read each other.

The packages pinned by ``interop/pg/package-lock.json`` are installed once (``npm ci``) into a cache folder outside
the package (``$THREADMIND_INTEROP_CACHE`` or ``~/.cache/threadmind-interop``); ``interop/pg/mastra_pg.mjs`` runs
there with node against a database of the test session's cluster. Skipped when node/npm are missing or the npm
registry cannot be reached, except in CI (``CI=true`` or ``THREADMIND_REQUIRE_POSTGRES=1``), where that fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import asyncpg
except ImportError:  # the pg_cluster fixture skips these tests (fails them in CI) with the install hint
    asyncpg = None
from bench._pgserver import PgCluster

from threadmind.codecs import message_from_dict, message_to_dict, thread_to_dict
from threadmind.codecs._time import from_iso
from threadmind.memory import Memory
from threadmind.stores._om import OMRecord
from threadmind.stores._postgres import PostgresStore

REPO = Path(__file__).resolve().parents[2]
INTEROP = REPO / "interop" / "pg"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"
MANIFEST_PATH = FIXTURE / "manifest.json"
MANIFEST: dict[str, Any] = json.loads(MANIFEST_PATH.read_text()) if MANIFEST_PATH.exists() else {}
PINNED = {"@mastra/core": "1.71.0", "@mastra/memory": "1.31.0", "@mastra/pg": "1.27.1"}
MASTRA_TABLES = ("mastra_threads", "mastra_messages", "mastra_resources", "mastra_observational_memory")
_NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
                   "network", "getaddrinfo")

pytestmark = [
    pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available"),
    pytest.mark.timeout(600),  # a cold npm install; warm runs take seconds
]

RESOURCE_WM = "# User Information\n- **First Name**: Zoë\n- **Interests**: 日本語, \"quotes\" and \\backslashes\\\n"
THREAD_WM = "# Scratch\n- line one\n\ttabbed 🚀\n"
RESOURCE_METADATA = {"plan": "pro", "limits": {"daily": 100, "burst": 2.5}, "tags": ["a", "b"], "none": None}


def _required() -> bool:
    return os.environ.get("THREADMIND_REQUIRE_POSTGRES") == "1" or os.environ.get("CI", "").lower() == "true"


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"{reason} (required in CI)", pytrace=False)
    pytest.skip(reason)


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _installed(folder: Path) -> bool:
    for name, version in PINNED.items():
        manifest = folder / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text())["version"] != version:
            return False
    return True


@pytest.fixture(scope="module")
def mastra_pg_dir() -> Path:
    """A folder whose node_modules holds the locked packages, plus a copy of mastra_pg.mjs."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed to run the Mastra packages")
    assert npm is not None
    lock = (INTEROP / "package-lock.json").read_bytes()
    cache = os.environ.get("THREADMIND_INTEROP_CACHE")
    root = Path(cache) if cache else Path.home() / ".cache" / "threadmind-interop"
    folder = root / f"pg-{hashlib.sha256(lock).hexdigest()[:16]}"
    if not _installed(folder):
        staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(INTEROP / name, staging / name)
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=staging,
                                  capture_output=True, text=True, timeout=540, check=False)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            _unavailable("npm ci timed out (no network to the npm registry?)")
            raise
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = done.stdout + done.stderr
            if any(marker in output for marker in _NETWORK_ERRORS):
                _unavailable(f"npm ci failed for lack of network: {output.strip().splitlines()[-1]}")
            pytest.fail(f"npm ci failed:\n{output}")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    assert _installed(folder)
    shutil.copyfile(INTEROP / "mastra_pg.mjs", folder / "mastra_pg.mjs")
    return folder


def _mastra(folder: Path, mode: str, dsn: str, *extra: str) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, "mastra_pg.mjs", mode, dsn, *extra], cwd=folder, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "TZ": "UTC"})
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _describe(dsn: str) -> dict[str, Any]:
    """Columns (name, type, nullability, default) in order, indexes and constraints of Mastra's four tables."""
    conn = await asyncpg.connect(dsn)
    try:
        columns = await conn.fetch(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ANY($1::text[]) "
            "ORDER BY table_name, ordinal_position", list(MASTRA_TABLES))
        indexes = await conn.fetch("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                                   "AND tablename = ANY($1::text[]) ORDER BY indexname", list(MASTRA_TABLES))
        triggers = await conn.fetchval("SELECT count(*) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
                                       "WHERE c.relname = ANY($1::text[]) AND NOT tg.tgisinternal", list(MASTRA_TABLES))
    finally:
        await conn.close()
    return {"columns": [tuple(r) for r in columns], "indexes": [tuple(r) for r in indexes], "triggers": triggers}


@pytest.fixture
def second_dsn(pg_cluster: PgCluster) -> Iterator[str]:
    name = f"mastra_only_{os.getpid()}"
    pg_cluster.create_database(name)
    try:
        yield pg_cluster.dsn(name)
    finally:
        pg_cluster.drop_database(name)


async def test_the_schema_is_mastras_in_both_directions(mastra_pg_dir: Path, pg_dsn: str, second_dsn: str) -> None:
    _mastra(mastra_pg_dir, "init", second_dsn)  # Mastra alone
    mastras = await _describe(second_dsn)
    async with PostgresStore(pg_dsn):  # threadmind alone
        pass
    mine = await _describe(pg_dsn)
    assert mine == mastras
    assert len([c for c in mine["columns"] if c[0] == "mastra_observational_memory"]) == 39
    _mastra(mastra_pg_dir, "init", pg_dsn)  # Mastra opens threadmind's database: nothing of the four changes
    assert await _describe(pg_dsn) == mastras
    async with PostgresStore(second_dsn) as store:  # threadmind opens Mastra's database unchanged
        assert (await store.stats())["threads"] == 0
    assert await _describe(second_dsn) == mastras


def _om_view(record: OMRecord) -> dict[str, Any]:
    return {"id": record.id, "scope": record.scope, "threadId": record.thread_id, "resourceId": record.resource_id,
            "generationCount": record.generation_count, "activeObservations": record.active_observations,
            "config": record.config, "observedTimezone": record.observed_timezone,
            "isObserving": record.is_observing, "isReflecting": record.is_reflecting,
            "pendingMessageTokens": record.pending_message_tokens,
            "totalTokensObserved": record.total_tokens_observed,
            "observationTokenCount": record.observation_token_count,
            "createdAt": record.created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "updatedAt": record.updated_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


async def test_threadmind_reads_a_mastra_database_as_mastra_does(mastra_pg_dir: Path, pg_dsn: str) -> None:
    theirs = _mastra(mastra_pg_dir, "write", pg_dsn, str(MANIFEST_PATH))
    untitled = [m["id"] for m in theirs["messages"]["thread-untitled"]]
    assert untitled[:4] == ["msg-tie-0", "msg-tie-a", "msg-tie-b", "msg-tie-c"]  # Mastra: equal times by id
    store = PostgresStore(pg_dsn)
    async with Memory(storage=store, options={"workingMemory": {"enabled": True, "scope": "resource"}}) as memory:
        threads = (await memory.list_threads(per_page=False, direction="ASC")).threads
        assert [thread_to_dict(t) for t in threads] == theirs["threads"]
        for thread in threads:
            recalled = await memory.recall(thread.id, per_page=False)
            mine = [message_to_dict(m) for m in recalled.messages]
            assert [m["id"] for m in mine] == [m["id"] for m in theirs["messages"][thread.id]], thread.id
            for got, want in zip(mine, theirs["messages"][thread.id], strict=True):
                assert _canonical(got) == _canonical(want), got["id"]
            assert await memory.get_working_memory(
                thread_id=thread.id, resource_id=thread.resource_id,
                memory_config={"workingMemory": {"enabled": True, "scope": "thread"}},
            ) == theirs["workingMemory"]["thread"][thread.id]
            assert await memory.get_working_memory(thread_id=thread.id, resource_id=thread.resource_id) \
                == theirs["workingMemory"]["resource"][thread.resource_id]
        for resource_id, want in theirs["resources"].items():
            row = await store.get_resource(resource_id)
            if want is None:
                assert row is None
                continue
            assert row is not None and row.working_memory == want["workingMemory"]
            assert _canonical(row.metadata) == _canonical(want["metadata"])
    async with PostgresStore(pg_dsn) as fresh:
        record = await fresh.observational_records().current("thread:thread-basic")
    assert record is not None
    want_om = theirs["observationalMemory"]["thread-basic"]
    assert _om_view(record) == {key: want_om[key] for key in _om_view(record)}
    assert record.origin_type == want_om["originType"] == "initial" and record.last_observed_at is None
    # the chunk Mastra's async buffering left, read as Mastra reads it
    [chunk] = record.buffered_chunks
    [want_chunk] = want_om["bufferedObservationChunks"]
    assert chunk == want_chunk and chunk["messageIds"] == ["msg-basic-01", "msg-basic-02"]


async def test_threadmind_activates_what_mastra_buffered_and_mastra_reads_the_result(mastra_pg_dir: Path,
                                                                                      pg_dsn: str) -> None:
    """A turn in threadmind on a thread whose observations Mastra computed ahead reaches the threshold: Mastra's
    chunk becomes active with no Observer call, its messages are sealed, its continuation hint noted; Mastra then
    reads the record as its own (the chunk active, none left buffered)."""
    from threadmind.agent import Agent
    from threadmind.models import ModelRequest, ScriptedModel

    _mastra(mastra_pg_dir, "write", pg_dsn, str(MANIFEST_PATH))
    observer = ScriptedModel(iter(lambda: lambda request: "* 🔴 observed by threadmind", None))
    at_model: list[tuple[int, str]] = []

    def reply(request: ModelRequest) -> str:
        at_model.append((observer.calls, "\n".join(request.system)))
        return "Kyoto in spring, then."

    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 60, "bufferTokens": 20,
                                                       "blockAfter": 50}}}  # no turn waits here
    async with Memory(storage=PostgresStore(pg_dsn), options=options) as memory:
        agent = Agent("a", "i", ScriptedModel([reply]), memory=memory)
        await agent.generate("When should I go?", thread_id="thread-basic", resource_id="res-alice")
        await memory.settled()
        first = {m.id: m for m in (await memory.recall("thread-basic", per_page=False)).messages}
    [(calls, system)] = at_model
    assert calls == 0 and "Alice plans a trip to Kyoto" in system  # active before the model call, no Observer
    assert all(((first[i].content.metadata or {}).get("mastra") or {}).get("sealed")
               for i in ("msg-basic-01", "msg-basic-02"))
    theirs = _mastra(mastra_pg_dir, "read", pg_dsn)
    om = theirs["observationalMemory"]["thread-basic"]
    assert "Alice plans a trip to Kyoto" in om["activeObservations"] and om["generationCount"] == 0
    assert "mastra-cycle-1" not in json.dumps(om.get("bufferedObservationChunks") or [])
    assert om["lastObservedAt"].startswith("2025-03-01T09:00:05")
    thread = next(t for t in theirs["threads"] if t["id"] == "thread-basic")
    assert thread["metadata"]["mastra"]["om"]["suggestedResponse"] == "Ask about her hotel."


async def _write_with_threadmind(dsn: str) -> dict[str, Any]:
    """The Mastra fixture's threads, messages and working memory, written by threadmind; returns its view."""
    store = PostgresStore(dsn)
    memory = Memory(storage=store, options={"workingMemory": {"enabled": True, "scope": "resource"}})
    thread_scope = {"workingMemory": {"enabled": True, "scope": "thread"}}
    view: dict[str, Any] = {"threads": {}, "messages": {}, "resource_wm": {}, "thread_wm": {}}
    async with memory:
        for thread in MANIFEST["threads"]:
            await memory.create_thread(thread_id=thread["id"], resource_id=thread["resourceId"],
                                       title=thread["title"], metadata=thread["metadata"])
        for messages in MANIFEST["messages"].values():
            await memory.save_messages([message_from_dict(m) for m in messages])
        await memory.update_working_memory(thread_id="thread-basic", resource_id="res-alice",
                                           working_memory=RESOURCE_WM)
        await memory.update_working_memory(thread_id="thread-meta", resource_id="res-bob", working_memory=THREAD_WM,
                                           memory_config=thread_scope)
        await memory.storage.update_resource("res-bob", metadata=RESOURCE_METADATA)
        for thread in (await memory.list_threads(per_page=False)).threads:
            view["threads"][thread.id] = thread_to_dict(thread)
            recalled = await memory.recall(thread.id, per_page=False)
            view["messages"][thread.id] = [message_to_dict(m) for m in recalled.messages]
            view["thread_wm"][thread.id] = await memory.get_working_memory(
                thread_id=thread.id, resource_id=thread.resource_id, memory_config=thread_scope)
            view["resource_wm"][thread.resource_id] = await memory.get_working_memory(
                thread_id=thread.id, resource_id=thread.resource_id)
    return view


async def test_mastra_reads_what_threadmind_wrote(mastra_pg_dir: Path, pg_dsn: str) -> None:
    mine = await _write_with_threadmind(pg_dsn)
    record = OMRecord(id="om-1", lookup_key="thread:thread-meta", scope="thread", resource_id="res-bob",
                      thread_id="thread-meta", active_observations="- 🟢 user likes tea", origin_type="observation",
                      config={"observation": {"messageTokens": 100}}, generation_count=2,
                      observation_token_count=7, created_at=from_iso(mine["threads"]["thread-meta"]["createdAt"]),
                      updated_at=from_iso(mine["threads"]["thread-meta"]["updatedAt"]), observed_timezone="UTC",
                      buffered_chunks=[{"id": "ombuf-1", "cycleId": "c-1", "observations": "* 🟡 asked about tea",
                                        "tokenCount": 6, "messageIds": ["m-1", "m-2"], "messageTokens": 40,
                                        "lastObservedAt": "2026-01-02T03:04:05.678Z",
                                        "createdAt": "2026-01-02T03:04:06.000Z"}],
                      last_buffered_at_tokens=42, buffered_reflection="* 🔴 tea, always", buffered_reflection_tokens=5,
                      buffered_reflection_input_tokens=7, reflected_line_count=1)
    async with PostgresStore(pg_dsn) as store:
        await store.observational_records().put(record)
    theirs = _mastra(mastra_pg_dir, "read", pg_dsn)

    # Mastra lists threads by createdAt; threads created in one millisecond may come in either order.
    listed = [t["id"] for t in theirs["threads"]]
    assert sorted(listed) == sorted(mine["threads"])
    assert [mine["threads"][i]["createdAt"] for i in listed] == sorted(t["createdAt"] for t in mine["threads"].values())
    for thread in theirs["threads"]:
        expected = mine["threads"][thread["id"]]
        assert set(thread) == set(expected)
        for field in expected:
            assert _canonical(thread[field]) == _canonical(expected[field]), (thread["id"], field)
        assert json.dumps(thread["metadata"]) == json.dumps(expected["metadata"])  # both read jsonb's key order
    assert set(theirs["messages"]) == set(mine["messages"])
    for thread_id, messages in theirs["messages"].items():
        # Mastra orders equal timestamps by id (its table has no sequence); threadmind keeps the save order.
        expected = sorted(mine["messages"][thread_id], key=lambda m: (m["createdAt"], m["id"]))
        assert [m["id"] for m in messages] == [m["id"] for m in expected], thread_id
        for got, want in zip(messages, expected, strict=True):
            assert set(got) == set(want), got["id"]
            for field in want:
                assert _canonical(got[field]) == _canonical(want[field]), (got["id"], field)
    untitled = [m["id"] for m in mine["messages"]["thread-untitled"]]
    assert untitled[:4] == ["msg-tie-c", "msg-tie-a", "msg-tie-b", "msg-tie-0"]  # threadmind: the save order

    assert theirs["workingMemory"]["resource"] == mine["resource_wm"]
    assert theirs["workingMemory"]["resource"]["res-alice"] == RESOURCE_WM
    assert theirs["workingMemory"]["thread"] == mine["thread_wm"]
    assert theirs["workingMemory"]["thread"]["thread-meta"] == THREAD_WM
    assert json.dumps(theirs["resources"]["res-bob"]["metadata"], sort_keys=True) == json.dumps(
        RESOURCE_METADATA, sort_keys=True)

    om = theirs["observationalMemory"]["thread-meta"]
    assert {k: om[k] for k in _om_view(record)} == _om_view(record)
    # observations computed ahead (observation.bufferTokens) read back as Mastra's own chunks
    assert om["bufferedObservationChunks"] == record.buffered_chunks and om["lastBufferedAtTokens"] == 42
    assert (om["bufferedReflection"], om["bufferedReflectionTokens"], om["bufferedReflectionInputTokens"],
            om["reflectedObservationLineCount"]) == ("* 🔴 tea, always", 5, 7, 1)
    assert om["originType"] == "observation" and "lastObservedAt" not in om

    # and after Mastra has opened the database, threadmind still reads it the same
    async with Memory(storage=PostgresStore(pg_dsn)) as memory:
        for thread_id, expected_messages in mine["messages"].items():
            again = await memory.recall(thread_id, per_page=False)
            assert [message_to_dict(m) for m in again.messages] == expected_messages
