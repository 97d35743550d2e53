"""One pgvector table, two systems: the real ``@mastra/pg`` ``PgVector`` and threadmind's ``PgVectorStore`` read the
vectors the other wrote (``interop/pg/mastra_pgvector.mjs`` runs Mastra's package with node, installed by
``tests/_npm.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Literal

import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import PgVectorStore, PostgresStore
from threadmind.testing import actor_system

from .._npm import install, node_binary

REPO = Path(__file__).resolve().parents[2]
DIM = 16
TEXTS = {
    ("t1", "r1"): ["booking a flight to tokyo in spring", "my grandmother's lasagna recipe", "jazz piano at night"],
    ("t2", "r1"): ["the quarterly garden invoice", "hiking near the mountain lake", "tokyo hotel near the station"],
    ("t3", "r2"): ["debugging a database timeout", "lasagna with fresh basil leaves", "a flight delayed in tokyo"],
}
QUERIES = ["tokyo flight booking", "lasagna recipe with basil", "mountain lake hike"]
pytestmark = pytest.mark.timeout(600)  # a cold npm install; warm runs take seconds


@pytest.fixture(scope="module")
def mastra_dir() -> Path:
    return install(REPO / "interop" / "pg", "mastra-pg")


def _mastra(folder: Path, tmp_path: Path, mode: str, dsn: str, request: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / f"{mode}.json"
    path.write_text(json.dumps(request))
    done = subprocess.run([node_binary(), "mastra_pgvector.mjs", mode, dsn, str(path)], cwd=folder,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _messages() -> list[Message]:
    return [Message.user(text, id=f"{thread}-{i}", thread_id=thread, resource_id=resource)
            for (thread, resource), texts in TEXTS.items() for i, text in enumerate(texts)]


async def _vectors(texts: list[str]) -> list[list[float]]:
    return [[float(x) for x in row] for row in (await HashEmbedder(dim=DIM).embed(texts)).vectors]


async def _threads(memory: Memory) -> None:
    for thread, resource in TEXTS:
        await memory.create_thread(thread_id=thread, resource_id=resource)


def _scopes() -> list[tuple[dict[str, str], dict[str, str | None]]]:
    """(Mastra's filter, threadmind's scope) pairs."""
    return [({"resource_id": "r1"}, {"resource_id": "r1", "thread_id": None}),
            ({"thread_id": "t3"}, {"resource_id": None, "thread_id": "t3"})]

async def _save_and_query(memory: Memory) -> list[list[tuple[str, float]]]:
    """Save the threads and messages, then each query of each scope through threadmind's index: (id, score)."""
    await _threads(memory)
    await memory.save_messages(_messages())
    index = actor_system(memory).index
    assert index is not None
    mine: list[list[tuple[str, float]]] = []
    for text in QUERIES:
        for _, scope in _scopes():
            hits = await index.query(text, top_k=3, **scope)  # type: ignore[arg-type]
            mine.append([(h.message_id, round(h.score, 5)) for h in hits])
    return mine


async def _mastra_queries(folder: Path, tmp_path: Path, dsn: str) -> dict[str, Any]:
    """The same queries asked of Mastra's ``PgVector`` (its filters for the scopes)."""
    queries = [{"vector": vector, "topK": 3, "filter": mastra_filter}
               for vector in await _vectors(QUERIES) for mastra_filter, _ in _scopes()]
    return _mastra(folder, tmp_path, "query", dsn, {"indexName": f"memory_messages_{DIM}", "queries": queries})



# threadmind's HNSW index as Mastra describes it: made with the table, or (the default) not until a scope needs it, so
# Mastra sees a table without an ANN index ("flat") and searches it exactly, as threadmind does at this size.
BUILDS = pytest.mark.parametrize(("build", "described"), [("at_start", "hnsw"), ("when_needed", "flat")])


@pytest.mark.slow_variants("at_start")  # the index built when needed stays in the default run
@BUILDS
async def test_mastra_queries_the_vectors_threadmind_wrote(mastra_dir: Path, pg_dsn: str, tmp_path: Path,
                                                           build: Literal["at_start", "when_needed"],
                                                           described: str) -> None:
    memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw=build),
                    embedder=HashEmbedder(dim=DIM),
                    options={"semanticRecall": {"scope": "resource"}})
    async with memory:
        mine = await _save_and_query(memory)
    theirs = await _mastra_queries(mastra_dir, tmp_path, pg_dsn)
    assert [[(r["metadata"]["message_id"], round(r["score"], 5)) for r in result] for result in theirs["results"]] \
        == mine
    assert all(len(result) == 3 for result in mine)
    first = theirs["results"][0][0]
    assert first["metadata"]["thread_id"] in ("t1", "t2") and first["metadata"]["resource_id"] == "r1"
    assert first["metadata"]["role"] == "user" and first["metadata"]["created_at"].endswith("Z")
    describe = theirs["describe"]
    assert (describe["dimension"], describe["metric"], describe["type"], describe["count"]) == (DIM, "cosine",
                                                                                                described, 9)


@pytest.mark.slow_variants("at_start")  # the index built when needed stays in the default run
@BUILDS
async def test_threadmind_recalls_the_vectors_mastra_wrote(mastra_dir: Path, pg_dsn: str, tmp_path: Path,
                                                           build: Literal["at_start", "when_needed"],
                                                           described: str) -> None:
    messages = _messages()
    async with Memory(storage=PostgresStore(pg_dsn)) as plain:  # the messages, without vectors
        await _threads(plain)
        await plain.save_messages(messages)
    created = {m.id: m.created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z") for m in messages}
    upsert = {  # what @mastra/memory upserts for each message (vector ids are PgVector's random uuids)
        "indexName": f"memory_messages_{DIM}", "dimension": DIM, "vectors": await _vectors([m.text for m in messages]),
        "metadata": [{"message_id": m.id, "thread_id": m.thread_id, "resource_id": m.resource_id, "role": m.role,
                      "content": m.text, "created_at": created[m.id]} for m in messages],
    }
    written = _mastra(mastra_dir, tmp_path, "upsert", pg_dsn, upsert)
    assert written["describe"]["type"] == "ivfflat" and len(written["ids"]) == 9  # Mastra's default index

    memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw=build),
                    embedder=HashEmbedder(dim=DIM),
                    options={"semanticRecall": {"scope": "resource", "topK": 1, "messageRange": 0}})
    mine: list[list[tuple[str, float]]] = []
    async with memory:
        recalled = await memory.recall("t1", resource_id="r1", per_page=0,
                                       vector_search_string="the quarterly garden invoice")
        assert [m.id for m in recalled.messages] == ["t2-0"]  # found through Mastra's row for t2-0
        index = actor_system(memory).index
        assert index is not None
        for text in QUERIES:
            for _, scope in _scopes():
                mine.append([(h.message_id, round(h.score, 5))
                             for h in await index.query(text, top_k=3, **scope)])  # type: ignore[arg-type]
        await memory.delete_messages(["t3-1"])  # threadmind's delete removes Mastra's row for the message
    theirs = await _mastra_queries(mastra_dir, tmp_path, pg_dsn)
    # Mastra's IVFFlat index (built on 9 rows: its lists hold nothing useful) is replaced by threadmind's HNSW index,
    # or dropped until a scope needs one
    assert theirs["describe"]["type"] == described and theirs["describe"]["count"] == 8
    got = [[(r["metadata"]["message_id"], round(r["score"], 5)) for r in result] for result in theirs["results"]]
    expected = [[hit for hit in hits if hit[0] != "t3-1"] for hits in mine]
    for ours, mastra in zip(expected, got, strict=True):
        assert mastra[:len(ours)] == ours
    assert any(hit[0] == "t3-1" for hits in mine for hit in hits)  # the deleted message was a hit before


async def test_an_ivfflat_index_config_gives_mastra_the_index_it_would_build_and_keep(
        mastra_dir: Path, pg_dsn: str, tmp_path: Path) -> None:
    """``semanticRecall.indexConfig`` as a Mastra app writes it: threadmind builds that IVFFlat index, Mastra reads it
    as its own, answers as threadmind does, and its ``createIndex`` with the same config keeps it."""
    config = {"type": "ivfflat", "ivf": {"lists": 1}}  # one list: Mastra's single probe sees every row
    memory = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn, build_hnsw="at_start"),
                    embedder=HashEmbedder(dim=DIM), options={"semanticRecall": {"scope": "resource",
                                                                                "indexConfig": config}})
    async with memory:
        mine = await _save_and_query(memory)
    oid = "SELECT to_regclass('memory_messages_16_vector_idx')::oid"
    async with PostgresStore(pg_dsn) as store:
        before = await store._read(lambda conn: conn.fetchval(oid), "test")
    theirs = await _mastra_queries(mastra_dir, tmp_path, pg_dsn)
    assert [[(r["metadata"]["message_id"], round(r["score"], 5)) for r in result] for result in theirs["results"]] \
        == mine
    assert (theirs["describe"]["type"], theirs["describe"]["config"]) == ("ivfflat", {"lists": 1})
    created = _mastra(mastra_dir, tmp_path, "create", pg_dsn, {"indexName": f"memory_messages_{DIM}",
                                                               "dimension": DIM, "indexConfig": config})
    assert created["describe"]["count"] == 9
    async with PostgresStore(pg_dsn) as store:
        assert await store._read(lambda conn: conn.fetchval(oid), "test") == before  # not rebuilt
