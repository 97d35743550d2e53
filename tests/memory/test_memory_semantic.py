"""Semantic recall through Memory: scopes, deletes, moves, clones, embedder outages; over SQLite + HnswVectorStore
and over PostgresStore + PgVectorStore (one real database), with HashEmbedder."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import EmbedderError, EmbeddingDimensionMismatch, ValidationError
from threadmind.models import ScriptedModel
from threadmind.stores import HnswVectorStore, InMemoryStore, PostgresStore, SQLiteStore
from threadmind.stores._protocol import Store
from threadmind.testing import actor_system

from ..stores.vectors._support import FlakyEmbedder, VectorFactory
from ._support import msg

TOPICS = [
    "booking a flight to tokyo for the spring conference",
    "my grandmother's lasagna recipe with fresh basil",
    "the quarterly invoice for the garden maintenance team",
    "learning to play jazz piano chords in the evening",
    "weekend hiking trail near the mountain lake",
    "debugging the database connection timeout in production",
]


def _options(scope: str = "resource", **extra: Any) -> dict[str, Any]:
    return {"semanticRecall": {"topK": 1, "messageRange": 1, "scope": scope, **extra}, "lastMessages": 2}


MemoryFactory = Callable[..., Memory]


@pytest.fixture
def make_memory(request: pytest.FixtureRequest, tmp_path: Path, make_vector: VectorFactory,
                vector_kind: str) -> MemoryFactory:
    """Memories on one database: SQLite + HnswVectorStore, or PostgresStore + PgVectorStore on one PostgreSQL."""

    def _make(embedder: Any = None, scope: str = "resource") -> Memory:
        storage: Store = (SQLiteStore(tmp_path / "memory.db") if vector_kind == "hnsw"
                          else PostgresStore(request.getfixturevalue("pg_dsn")))
        return Memory(storage=storage, vector=make_vector(tmp_path / "vec"), embedder=embedder or HashEmbedder(dim=64),
                      options=_options(scope))

    return _make


async def _fill(memory: Memory, thread_id: str = "t1", resource_id: str = "r1", prefix: str = "") -> list[str]:
    await memory.create_thread(resource_id=resource_id, thread_id=thread_id)
    ids = [f"{prefix}{thread_id}-{i}" for i in range(len(TOPICS))]
    result = await memory.save_messages([msg(mid, thread_id, resource_id, ms=i, text=f"{TOPICS[i]} ({thread_id})")
                                         for i, mid in enumerate(ids)])
    assert result.usage is not None and result.usage.tokens > 0  # texts are new to the embedding cache
    return ids


@pytest.fixture
async def memory(make_memory: MemoryFactory) -> AsyncIterator[Memory]:
    async with make_memory() as mem:
        yield mem


async def test_recall_returns_hit_with_its_window(memory: Memory) -> None:
    ids = await _fill(memory)
    result = await memory.recall("t1", resource_id="r1", vector_search_string="grandmother lasagna recipe basil")
    got = [m.id for m in result.messages]
    # the hit (index 1) with one before and one after, plus the last-2 history window, chronological
    assert got == [ids[0], ids[1], ids[2], ids[4], ids[5]]
    assert not result.degraded
    plain = await memory.recall("t1", resource_id="r1")
    assert [m.id for m in plain.messages] == ids[-2:]


async def test_scope_resource_vs_thread(make_memory: MemoryFactory) -> None:
    async with make_memory(scope="resource") as memory:
        await _fill(memory, "t1", "r1")
        other = await _fill(memory, "t2", "r1")
        await _fill(memory, "t3", "r2")
        await memory.create_thread(resource_id="r1", thread_id="empty")
        result = await memory.recall("empty", resource_id="r1", vector_search_string="jazz piano chords evening")
        got = [m.id for m in result.messages]
        assert any(g.startswith("t1-") or g.startswith("t2-") for g in got)
        assert not any(g.startswith("t3-") for g in got)  # never another resource's
        assert other[3] in got or "t1-3" in got
        with pytest.raises(ValidationError, match="resourceId"):
            await memory.recall("empty", vector_search_string="jazz")
    async with make_memory(scope="thread") as memory:
        result = await memory.recall("empty", resource_id="r1", vector_search_string="jazz piano chords evening")
        assert result.messages == []  # thread scope: nothing from t1/t2
        t2 = await memory.recall("t2", vector_search_string="jazz piano chords evening")
        assert {m.thread_id for m in t2.messages} == {"t2"} and "t2-3" in [m.id for m in t2.messages]


async def test_delete_messages_removes_vectors(memory: Memory) -> None:
    ids = await _fill(memory)
    index = actor_system(memory).index  # the vector side itself: a deleted vector must be gone, not skipped
    assert index is not None
    query = "learning to play jazz piano chords"
    assert ids[3] in [h.message_id for h in await index.query(query, top_k=10, resource_id="r1")]
    await memory.delete_messages([ids[3]])
    assert ids[3] not in [h.message_id for h in await index.query(query, top_k=10, resource_id="r1")]
    result = await memory.recall("t1", resource_id="r1", vector_search_string="learning to play jazz piano chords")
    assert ids[3] not in [m.id for m in result.messages]
    await memory.delete_thread("t1")
    assert await index.query(query, top_k=10, resource_id="r1") == []
    await memory.create_thread(resource_id="r1", thread_id="t9")
    after = await memory.recall("t9", resource_id="r1", vector_search_string="grandmother lasagna recipe")
    assert after.messages == []


async def test_reindex_without_missing_vectors_is_zero(memory: Memory) -> None:
    await _fill(memory)
    assert await memory.reindex() == 0


class _SwitchEmbedder:
    """HashEmbedder that raises while ``broken`` (the true edge of the system)."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=64)
        self.broken = False

    @property
    def model_id(self) -> str:
        return "switch-hash"

    @property
    def dimension(self) -> int | None:
        return 64

    async def embed(self, texts: list[str]) -> Embeddings:
        if self.broken:
            raise ConnectionError("embedding service down")
        return await self.inner.embed(texts)


async def test_embedder_outage_and_recovery(make_memory: MemoryFactory) -> None:
    embedder = _SwitchEmbedder()
    async with make_memory(embedder=embedder) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        embedder.broken = True
        batch = [msg(f"m{i}", ms=i, text=TOPICS[i]) for i in range(len(TOPICS))]
        with pytest.raises(EmbedderError) as info:
            await memory.save_messages(batch)
        assert isinstance(info.value.__cause__, ConnectionError) or info.value.__cause__ is not None
        stored = await memory.recall("t1", per_page=False)
        assert [m.id for m in stored.messages] == [m.id for m in batch]  # the messages were saved anyway
        degraded = await memory.recall("t1", resource_id="r1", vector_search_string="lasagna recipe")
        assert degraded.degraded is True
        # Hybrid recall still has its keyword hits (the lasagna message and its window) besides the history ...
        assert [m.id for m in degraded.messages] == ["m0", "m1", "m2", "m4", "m5"]
        vector_only = await memory.recall("t1", resource_id="r1", vector_search_string="lasagna recipe",
                                          thread_config={"semanticRecall": {"search": "vector"}})
        assert vector_only.degraded is True
        assert [m.id for m in vector_only.messages] == ["m4", "m5"]  # ... vector recall has history only
        embedder.broken = False
        made = await memory.reindex()
        assert made >= len(batch)
        healed = await memory.recall("t1", resource_id="r1", vector_search_string="grandmother lasagna recipe basil")
        assert not healed.degraded
        assert [m.id for m in healed.messages] == ["m0", "m1", "m2", "m4", "m5"]


async def test_vectors_follow_moves_clones_and_edits(memory: Memory) -> None:
    ids = await _fill(memory, "t1", "r1")
    await memory.update_thread_resource_id("t1", resource_id="r2")
    await memory.create_thread(resource_id="r1", thread_id="x1")
    await memory.create_thread(resource_id="r2", thread_id="x2")
    query = "grandmother's lasagna recipe with fresh basil"
    assert (await memory.recall("x1", resource_id="r1", vector_search_string=query)).messages == []
    moved = await memory.recall("x2", resource_id="r2", vector_search_string=query)
    assert ids[1] in [m.id for m in moved.messages]
    clone = await memory.clone_thread("t1", new_thread_id="c1", resource_id="r3")
    await memory.create_thread(resource_id="r3", thread_id="x3")
    cloned = await memory.recall("x3", resource_id="r3", vector_search_string=query)
    assert clone.id_map[ids[1]] in [m.id for m in cloned.messages]
    assert not {m.id for m in cloned.messages} & set(ids)  # the originals stay with r2
    new_text = "quantum chromodynamics lecture notes"
    content = {"content": new_text, "parts": [{"type": "text", "text": new_text}]}
    await memory.update_messages([{"id": ids[0], "content": content}])
    edited = await memory.recall("x2", resource_id="r2", vector_search_string=new_text)
    assert edited.messages[0].id == ids[0]


def test_processors_can_be_listed_before_start_when_the_dimension_is_known() -> None:
    memory = Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=384),
                    options={"semanticRecall": True})
    recall = [p for p in memory.get_input_processors() if getattr(p, "id", None) == "semantic-recall"]
    assert len(recall) == 1 and recall[0].index_name == "memory_messages_384"  # type: ignore[attr-defined]
    assert [getattr(p, "id", None) for p in memory.get_output_processors()] == ["semantic-recall", "message-history"]


async def test_processors_built_before_start_work_once_started(make_memory: MemoryFactory) -> None:
    memory = make_memory(embedder=HashEmbedder(dim=64))
    early = memory.get_input_processors()
    async with memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg(f"m{i}", ms=i, text=TOPICS[i]) for i in range(len(TOPICS))])
        model = ScriptedModel(["noted"])
        agent = Agent("a", "i", model, memory=memory, input_processors=early)  # the early ones replace memory's
        await agent.generate("grandmother lasagna recipe basil", thread_id="t1", resource_id="r1")
        seen = [m.id for m in model.requests[0].messages]
        assert "m0" in seen  # recalled by the processor made before start()


@pytest.mark.parametrize("started", [False, True])
async def test_a_declared_dimension_mismatch_is_reported_as_such(started: bool) -> None:
    memory = Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=384),
                    embedding_dimension=16, options={"semanticRecall": True})
    if not started:
        with pytest.raises(EmbeddingDimensionMismatch) as info:
            memory.get_input_processors()
        assert info.value.code == "MASTRA_MEMORY_EMBEDDING_DIMENSION_MISMATCH"
        return
    async with memory:
        for build in (memory.get_input_processors, memory.get_output_processors):
            with pytest.raises(EmbeddingDimensionMismatch):
                build()
        with pytest.raises(EmbeddingDimensionMismatch):
            await Agent("a", "i", ScriptedModel(["x"]), memory=memory).generate("hi", thread_id="t", resource_id="r")


async def test_an_agent_turn_survives_an_outage_of_an_embedder_of_unknown_dimension(
        make_memory: MemoryFactory) -> None:
    embedder = FlakyEmbedder(dim=32, known_dimension=False)
    embedder.fail = True  # down from the start: its dimension cannot be probed
    async with make_memory(embedder=embedder) as memory:
        model = ScriptedModel(["first answer", "second answer"])
        agent = Agent("a", "i", model, memory=memory)
        result = await agent.generate("hello there", thread_id="t1", resource_id="r1")
        assert result.text == "first answer" and result.tripwire is None
        stored = await memory.recall("t1", per_page=False)
        assert [m.text for m in stored.messages] == ["hello there", "first answer"]  # the turn was saved
        embedder.fail = False  # back: the next turn probes again and recalls semantically
        await agent.generate("and now?", thread_id="t1", resource_id="r1")
        assert await memory.reindex() >= 2  # what the degraded turn saved gets its vectors
        hits = await memory.recall("t1", resource_id="r1", vector_search_string="hello there")
        assert not hits.degraded and "hello there" in [m.text for m in hits.messages]
