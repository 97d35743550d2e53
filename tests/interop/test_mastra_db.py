"""threadmind's ``Memory`` reads a real Mastra 1.71 database (copied) exactly as Mastra reports it.

Threads, messages, working memory and the message vectors (imported once into threadmind's own vector
records, then used for semantic recall) are compared with ``manifest.json``; Mastra's tables stay untouched.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from threadmind.codecs import message_to_dict, thread_to_dict
from threadmind.embedders._hash import HashEmbedder
from threadmind.memory import Memory
from threadmind.stores._interop import import_mastra_vectors, mastra_vector_tables
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors._hnsw import HnswVectorStore
from threadmind.testing import actor_system

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text()) if FIXTURE.exists() else {}
pytestmark = pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available")

INDEX = "memory_messages_16"
OPTIONS = {
    "lastMessages": 10,
    "semanticRecall": {"topK": 4, "messageRange": 1, "scope": "resource"},
    "workingMemory": {"enabled": True, "scope": "resource"},
}


def _canonical(value: Any) -> str:
    # sort_keys: type-exact (1 vs 1.0 vs true) comparison of decoded JSON values
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@pytest.fixture
def db_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "memory.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)  # never open the original
    return copy


def _memory(db: Path) -> Memory:
    return Memory(
        storage=SQLiteStore(db),
        vector=HnswVectorStore(db.parent / "vectors"),
        embedder=HashEmbedder(dim=16),
        options=OPTIONS,
    )


@pytest.fixture
async def memory(db_copy: Path) -> AsyncIterator[Memory]:
    async with _memory(db_copy) as mem:
        yield mem


def _master(path: Path) -> dict[str, str | None]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
        return {f"{kind}:{table}:{name}": sql for kind, name, table, sql in rows}
    finally:
        conn.close()


def _mastra_vectors(path: Path) -> dict[str, bytes]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(f"SELECT embedding, metadata FROM {INDEX} NOT INDEXED").fetchall()
    finally:
        conn.close()
    return {json.loads(meta)["message_id"]: bytes(emb) for emb, meta in rows}


def _our_vectors(path: Path) -> dict[str, tuple[str, str, str, bytes]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT vector_id, message_id, thread_id, resource_id, embedding FROM threadmind_vectors "
            "WHERE index_name = ?",
            (INDEX,),
        ).fetchall()
    finally:
        conn.close()
    return {message_id: (vector_id, thread_id, resource_id, bytes(emb))
            for vector_id, message_id, thread_id, resource_id, emb in rows}


class TestThreadsAndMessages:
    async def test_list_threads_matches_manifest(self, memory: Memory) -> None:
        page = await memory.list_threads(per_page=False)
        got = sorted((thread_to_dict(t) for t in page.threads), key=lambda t: t["id"])
        assert page.total == MANIFEST["counts"]["threads"]
        assert [t["id"] for t in got] == [t["id"] for t in MANIFEST["threads"]]
        for mine, theirs in zip(got, MANIFEST["threads"], strict=True):
            assert set(mine) == set(theirs)
            for field in theirs:
                assert _canonical(mine[field]) == _canonical(theirs[field]), (theirs["id"], field)
            # key order of the (JSONB) metadata survives too
            assert json.dumps(mine["metadata"]) == json.dumps(theirs["metadata"])

    @pytest.mark.parametrize("expected", MANIFEST.get("threads", []), ids=lambda t: str(t["id"]))
    async def test_get_thread_by_id(self, memory: Memory, expected: dict[str, Any]) -> None:
        thread = await memory.get_thread_by_id(expected["id"], resource_id=expected["resourceId"])
        assert thread is not None
        assert _canonical(thread_to_dict(thread)) == _canonical(expected)
        assert await memory.get_thread_by_id(expected["id"], resource_id="someone-else") is None

    @pytest.mark.parametrize("thread_id", sorted(MANIFEST.get("messages", {})))
    async def test_every_message_in_order(self, memory: Memory, thread_id: str) -> None:
        expected = MANIFEST["messages"][thread_id]
        result = await memory.recall(thread_id, per_page=False)
        got = [message_to_dict(m) for m in result.messages]
        assert [m["id"] for m in got] == [m["id"] for m in expected]
        for mine, theirs in zip(got, expected, strict=True):
            assert set(mine) == set(theirs), mine["id"]
            for field in theirs:
                assert _canonical(mine[field]) == _canonical(theirs[field]), (mine["id"], field)
            for key in theirs["content"]:  # content fields one by one, for a readable failure
                assert _canonical(mine["content"].get(key)) == _canonical(theirs["content"][key]), (mine["id"], key)

    async def test_default_history_window(self, memory: Memory) -> None:
        result = await memory.recall("thread-untitled", resource_id="res-alice")
        ids = [m.id for m in result.messages]
        assert ids == [m["id"] for m in MANIFEST["messages"]["thread-untitled"]][-10:]
        assert ids[:4] == MANIFEST["scenario"]["identical_createdAt"]["insertion_order"]


class TestWorkingMemory:
    @pytest.mark.parametrize("resource", MANIFEST.get("resources", []), ids=lambda r: str(r["id"]))
    async def test_resource_scope(self, memory: Memory, resource: dict[str, Any]) -> None:
        thread = next(t for t in MANIFEST["threads"] if t["resourceId"] == resource["id"])
        got = await memory.get_working_memory(thread_id=thread["id"], resource_id=resource["id"])
        assert got == resource["workingMemory"]

    async def test_thread_scope(self, memory: Memory) -> None:
        expected = next(t for t in MANIFEST["threads"] if t["id"] == "thread-wm")["metadata"]["workingMemory"]
        got = await memory.get_working_memory(
            thread_id="thread-wm", resource_id="res-carol",
            memory_config={"workingMemory": {"enabled": True, "scope": "thread"}},
        )
        assert got == expected


class TestSchema:
    async def test_opening_leaves_mastra_tables_alone(self, db_copy: Path) -> None:
        before = _master(db_copy)
        async with _memory(db_copy) as mem:
            await mem.recall("thread-basic", resource_id="res-alice", vector_search_string="Tokyo hotel")
        after = _master(db_copy)
        for key, sql in before.items():  # nothing Mastra had was changed or dropped
            assert after.get(key) == sql, key
        added = set(after) - set(before)
        assert added, "threadmind keeps its vectors in tables of its own"
        assert all(key.split(":")[1].startswith("threadmind_") for key in added), sorted(added)


class TestVectors:
    async def test_tables_found(self, db_copy: Path) -> None:
        async with SQLiteStore(db_copy) as store:
            tables = await mastra_vector_tables(store)
        assert [(t.name, t.dimension) for t in tables] == [(INDEX, 16)]
        assert await mastra_vector_tables(InMemoryStore()) == []

    async def test_start_imports_every_vector(self, db_copy: Path) -> None:
        async with _memory(db_copy):
            pass
        theirs = _mastra_vectors(db_copy)
        ours = _our_vectors(db_copy)
        assert len(theirs) == MANIFEST["vector_indexes"][0]["count"]
        assert set(ours) == set(theirs)
        messages = {m["id"]: m for msgs in MANIFEST["messages"].values() for m in msgs}
        for message_id, (vector_id, thread_id, resource_id, embedding) in ours.items():
            assert vector_id == message_id  # threadmind's id scheme, so clones and re-saves replace them
            assert embedding == theirs[message_id]
            assert (thread_id, resource_id) == (messages[message_id]["threadId"], messages[message_id]["resourceId"])

    async def test_import_runs_once(self, db_copy: Path) -> None:
        async with SQLiteStore(db_copy) as store:
            assert await import_mastra_vectors(store) == 23
            assert await import_mastra_vectors(store) == 0
        async with _memory(db_copy) as mem:
            await mem.delete_messages(["msg-basic-01"])
        async with _memory(db_copy):  # a deleted vector is not brought back from Mastra's table
            pass
        assert "msg-basic-01" not in _our_vectors(db_copy)
        assert len(_our_vectors(db_copy)) == 22

    async def test_vectors_of_deleted_or_broken_rows_are_skipped(self, db_copy: Path) -> None:
        conn = sqlite3.connect(db_copy)
        conn.execute("DELETE FROM mastra_messages WHERE id = 'msg-wm-01'")
        conn.execute(  # the vector table's own DELETE/UPDATE need libsql; a message with a broken vector instead
            "UPDATE mastra_messages SET id = 'msg-gone' WHERE id = 'msg-meta-01'"
        )
        conn.commit()
        conn.close()
        async with SQLiteStore(db_copy) as store:
            imported = await import_mastra_vectors(store)
        assert imported == 21
        assert {"msg-wm-01", "msg-meta-01"}.isdisjoint(_our_vectors(db_copy))

    async def test_not_imported_into_a_non_empty_index(self, tmp_path: Path, db_copy: Path) -> None:
        async with Memory(storage=SQLiteStore(db_copy), vector=HnswVectorStore(tmp_path / "v"),
                          embedder=HashEmbedder(dim=16), options={"semanticRecall": True}) as mem:
            assert len(_our_vectors(db_copy)) == 23
            await mem.create_thread(thread_id="t-new", resource_id="res-new")
            await mem.save_messages([{"id": "m-new", "role": "user", "threadId": "t-new", "resourceId": "res-new",
                                      "createdAt": "2025-04-01T00:00:00.000Z",
                                      "content": {"format": 2, "parts": [{"type": "text", "text": "hello"}]}}])
        assert len(_our_vectors(db_copy)) == 24
        async with SQLiteStore(db_copy) as store:
            assert await import_mastra_vectors(store) == 0

    async def test_semantic_probe(self, memory: Memory) -> None:
        """Mastra's recall is by vectors alone: ``search: "vector"`` answers it hit for hit. The default (hybrid)
        puts the message holding the query's words first."""
        probe = MANIFEST["semantic_probe"]
        config = probe["threadConfig"]
        as_mastra = {**config, "semanticRecall": {**config["semanticRecall"], "search": "vector"}}
        result = await memory.recall(
            probe["threadId"],
            resource_id=probe["resourceId"],
            vector_search_string=probe["vectorSearchString"],
            thread_config=as_mastra,
        )
        assert [m.id for m in result.messages] == probe["recall_message_ids"]
        assert not result.degraded
        await memory.reindex()  # the keyword index of Mastra's rows, complete
        hybrid = await memory.search(probe["vectorSearchString"], resource_id=probe["resourceId"],
                                     thread_id=probe["threadId"], top_k=2)
        assert hybrid[0].message.id == "msg-basic-03" and hybrid[0].keyword_score is not None

    async def test_vector_query_scores(self, memory: Memory) -> None:
        probe = MANIFEST["semantic_probe"]
        query = probe["vector_query"]
        index = actor_system(memory).index  # the raw vector query behind recall, to compare scores with Mastra's
        assert index is not None
        hits = await index.query(probe["vectorSearchString"], top_k=query["topK"],
                                 thread_id=query["filter"]["thread_id"])
        assert [h.message_id for h in hits] == [h["message_id"] for h in query["hits"]]
        for mine, theirs in zip(hits, query["hits"], strict=True):
            assert mine.score == pytest.approx(theirs["score"], abs=1e-5)

    async def test_resource_scope_recall_spans_threads(self, memory: Memory) -> None:
        result = await memory.recall("thread-untitled", resource_id="res-alice", per_page=0,
                                     vector_search_string="flight from Berlin to Tokyo")
        threads = {m.thread_id for m in result.messages}
        assert result.messages and threads <= {"thread-basic", "thread-untitled", "thread-basic-clone"}
        assert "thread-basic" in threads or "thread-basic-clone" in threads
