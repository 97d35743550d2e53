"""``semanticRecall.filter`` (Mastra's metadata conditions): every recall mode and door returns only messages whose
metadata (their thread's metadata as it is now, their ids, role, text and time) matches, never widens the scope,
and still returns ``topK`` when the scope holds that many matching messages."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory, Message
from threadmind._metadata_filter import compile_filter
from threadmind.agent import Agent
from threadmind.embedders import HashEmbedder
from threadmind.errors import ConfigError
from threadmind.models import ScriptedModel
from threadmind.stores import HnswVectorStore, InMemoryStore, PgVectorStore, PostgresStore, SQLiteStore
from threadmind.stores._sqlite._fts import queued
from threadmind.ui import messages_from_ui

MODES = ("hybrid", "vector", "keyword")
APOLLO = {"project": "apollo", "tags": ["space", "nasa"], "budget": {"usd": 120}}
ZEUS = {"project": "zeus", "tags": ["myth"], "budget": {"usd": 5}}


class TestOperators:
    META = {"project": "apollo", "tags": ["space", "nasa"], "budget": {"usd": 120}, "role": "user",
            "content": "Lunar Module docking", "created_at": "2025-03-01T10:00:00.000Z", "flag": True}

    @pytest.mark.parametrize(("condition", "expected"), [
        ({"project": "apollo"}, True), ({"project": "zeus"}, False), ({"tags": "nasa"}, True),
        ({"budget.usd": 120}, True), ({"budget.usd": {"$gt": 100, "$lte": 120}}, True),
        ({"budget.usd": {"$lt": "200"}}, False), ({"project": {"$ne": "zeus"}}, True),
        ({"project": {"$in": ["zeus", "apollo"]}}, True), ({"tags": {"$nin": ["myth"]}}, True),
        ({"tags": {"$all": ["nasa", "space"]}}, True), ({"tags": {"$size": 2}}, True),
        ({"tags": {"$elemMatch": {"$regex": "^sp"}}}, True), ({"missing": {"$exists": False}}, True),
        ({"project": {"$exists": True}}, True), ({"missing": None}, True), ({"missing": {"$ne": 1}}, True),
        ({"content": {"$regex": "lunar", "$options": "i"}}, True), ({"content": {"$regex": "lunar"}}, False),
        ({"content": {"$contains": "Module"}}, True), ({"tags": {"$contains": ["space"]}}, True),
        ({"budget": {"$contains": {"usd": 120}}}, True), ({"created_at": {"$gte": "2025-03-01"}}, True),
        ({"flag": 1}, False), ({"$or": [{"project": "zeus"}, {"role": "user"}]}, True),
        ({"$and": [{"project": "apollo"}, {"role": "assistant"}]}, False), ({"$nor": [{"project": "zeus"}]}, True),
        ({"$not": {"project": "apollo"}}, False), ({"project": {"$not": {"$eq": "zeus"}}}, True),
    ])
    def test_mastras_operators(self, condition: dict[str, Any], expected: bool) -> None:
        assert compile_filter(condition).matches(self.META) is expected

    @pytest.mark.parametrize(("condition", "named"), [
        ({"project": {"$near": 1}}, r"semanticRecall\.filter\.project has an unknown operator '\$near'"),
        ({"$xor": []}, r"unknown operator '\$xor'"), ({"$or": {}}, r"\$or must be a non-empty list"),
        ({"n": {"$gt": [1]}}, r"filter\.n\.\$gt must be a number or a string"),
        ({"c": {"$regex": "("}}, "not a valid regular expression"), ({"c": {"$options": "i"}}, r"\$options needs"),
        ({"t": {"$size": -1}}, r"\$size must be a non-negative integer"), ({"p": {"$eq": 1, "x": 2}}, "mixes"),
    ])
    def test_a_bad_filter_is_refused_naming_its_place(self, condition: dict[str, Any], named: str) -> None:
        with pytest.raises(ConfigError, match=named):
            Memory(storage=InMemoryStore(), options={"semanticRecall": {"search": "keyword", "filter": condition}})


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Memory]:
    options = {"lastMessages": 0, "semanticRecall": {"topK": 4, "messageRange": 0, "scope": "resource"}}
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        built = Memory(storage=PostgresStore(dsn), vector=PgVectorStore(dsn), embedder=HashEmbedder(dim=64),
                       options=options)
    else:
        store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "f.db")
        built = Memory(storage=store, vector=HnswVectorStore(tmp_path / "v"), embedder=HashEmbedder(dim=64),
                       options=options)
    async with built:
        yield built


async def _seed(memory: Memory) -> None:
    """Resource r1: thread ta (apollo, 3 messages) and tz (zeus, 40 messages, all about the rocket); r2: tx
    (apollo)."""
    for thread, resource, metadata in (("ta", "r1", APOLLO), ("tz", "r1", ZEUS), ("tx", "r2", APOLLO)):
        await memory.create_thread(thread_id=thread, resource_id=resource, metadata=metadata)
    await memory.save_messages([Message.user(text, id=f"a{i}", thread_id="ta", resource_id="r1")
                                for i, text in enumerate(["the rocket engine test went well", "lunar orbit plan",
                                                          "the crew trained on the rocket simulator"])])
    await memory.save_messages([Message.user(f"rocket rocket engine fuel note {i}", id=f"z{i:02d}", thread_id="tz",
                                             resource_id="r1") for i in range(40)])
    await memory.save_messages([Message.user("the rocket engine of another tenant", id="x0", thread_id="tx",
                                             resource_id="r2")])


async def _recall(memory: Memory, mode: str, condition: dict[str, Any], top_k: int = 4) -> list[str]:
    config = {"semanticRecall": {"topK": top_k, "messageRange": 0, "scope": "resource", "search": mode,
                                 "filter": condition}}
    result = await memory.recall("ta", resource_id="r1", vector_search_string="rocket engine",
                                 thread_config=config)
    return [m.id for m in result.messages]


@pytest.mark.parametrize("mode", MODES)
async def test_only_matching_messages_come_back_topk_of_them_in_every_mode(memory: Memory, mode: str) -> None:
    await _seed(memory)
    assert sum(i.startswith("z") for i in await _recall(memory, mode, {})) >= 3  # unfiltered: zeus wins
    found = await _recall(memory, mode, {"project": "apollo"})
    assert set(found) == {"a0", "a1", "a2"}  # "lunar orbit plan" by its neighbours (reply smoothing) by words
    assert not any(i.startswith("z") for i in await _recall(memory, mode, {"tags": {"$in": ["nasa"]}}))
    assert len(await _recall(memory, mode, {"project": "zeus"}, top_k=6)) == 6
    # a condition on another tenant's ids never widens the scope
    assert await _recall(memory, mode, {"$or": [{"resource_id": "r2"}, {"thread_id": "tx"}]}) == []
    # the message's own fields: role, text, time
    assert set(await _recall(memory, mode, {"content": {"$regex": "crew"}})) == {"a2"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_change_of_the_threads_metadata_reaches_the_filter(memory: Memory, mode: str) -> None:
    await _seed(memory)
    assert await _recall(memory, mode, {"project": "hermes"}) == []
    await memory.update_thread("ta", metadata={"project": "hermes"})
    assert set(await _recall(memory, mode, {"project": "hermes"})) <= {"a0", "a1", "a2"}
    assert len(await _recall(memory, mode, {"project": "hermes"})) >= 2


async def test_memory_search_and_the_agents_recall_apply_it(tmp_path: Path) -> None:
    options = {"lastMessages": 1, "semanticRecall": {"topK": 3, "messageRange": 0, "scope": "resource",
                                                     "filter": {"project": "apollo"}}}
    memory = Memory(storage=SQLiteStore(tmp_path / "a.db"), vector=HnswVectorStore(tmp_path / "v"),
                    embedder=HashEmbedder(dim=64), options=options)
    async with memory:
        await _seed(memory)
        hits = await memory.search("rocket engine", resource_id="r1", top_k=3)
        assert hits and {h.message.thread_id for h in hits} == {"ta"}
        model = ScriptedModel(["noted"])
        await memory.create_thread(thread_id="tn", resource_id="r1", metadata={"project": "apollo"})
        await Agent("a", "be brief", model, memory=memory).generate("tell me about the rocket engine",
                                                                    thread_id="tn", resource_id="r1")
        seen = "\n".join(model.requests[0].system)
        assert "the rocket engine test went well" in seen and "fuel note" not in seen


async def test_another_process_changing_a_threads_metadata_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    script = textwrap.dedent(f"""
        import anyio
        from threadmind import Memory
        from threadmind.stores import SQLiteStore

        async def main():
            async with Memory(storage=SQLiteStore({str(path)!r})) as memory:
                await memory.update_thread("tz", metadata={{"project": "apollo"}})

        anyio.run(main)
    """)
    options = {"semanticRecall": {"topK": 4, "messageRange": 0, "search": "keyword"}}
    async with Memory(storage=SQLiteStore(path), options=options) as memory:
        await _seed(memory)
        assert not any(i.startswith("z") for i in await _recall(memory, "keyword", {"project": "apollo"}))
        await anyio.run_process([sys.executable, "-c", script])
        assert any(i.startswith("z") for i in await _recall(memory, "keyword", {"project": "apollo"}))


async def test_the_chat_servers_door_applies_it_and_each_turns_recall_needs_no_fold(tmp_path: Path) -> None:
    """A useChat body through ``messages_from_ui`` and ``Agent.stream``: the model sees only matching messages, and
    a second chat turn's recall, after the first turn's save and a pause, is answered from what the store kept."""
    store = SQLiteStore(tmp_path / "chat.db")
    options = {"lastMessages": 1, "semanticRecall": {"topK": 3, "messageRange": 0, "scope": "resource",
                                                     "filter": {"project": "apollo"}}}
    memory = Memory(storage=store, vector=HnswVectorStore(tmp_path / "v"), embedder=HashEmbedder(dim=64),
                    options=options)
    async with memory:
        await _seed(memory)
        await memory.create_thread(thread_id="chat-1", resource_id="r1", metadata={"project": "apollo"})
        model = ScriptedModel(["noted", "noted again"])
        agent = Agent("chat", "You answer.", model, memory=memory)
        for n, text in enumerate(["tell me about the rocket engine", "and the rocket simulator?"]):
            body = {"id": "chat-1", "messages": [{"id": f"u{n}", "role": "user",
                                                  "parts": [{"type": "text", "text": text}]}]}
            before = store.cache_statistics()["keyword_from_memory"]
            async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="r1") as stream:
                async for _ in stream:
                    pass
            seen = "\n".join(model.requests[n].system)
            assert "remembered from a different conversation" in seen and "fuel note" not in seen  # apollo only
            assert ("the rocket engine test went well" if n == 0 else "the crew trained on the rocket simulator") \
                in seen
            if n == 1:  # the first turn's save was folded in the pause: this recall read nothing of the scope
                assert store.cache_statistics()["keyword_from_memory"] > before
            await memory.settled()
            with anyio.fail_after(5):  # the pause between turns: the saved words are folded in the background
                while await store.execute_read(queued):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # its blocks are advanced on the event loop once its commit is reported
