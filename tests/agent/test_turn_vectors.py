"""An agent turn is saved with semantic recall on through the pipeline of ``Memory.save_messages``: its messages are
embedded while they commit and their vectors staged only once the commit succeeded, by ``generate`` and by
``stream`` (the chat server's door) alike; the turn does not wait for them, ``Memory.settled()`` does.

The semantic-recall output step runs before the message-history step persists the turn; it must not stage
vectors for messages that a failed (or never reached) persist leaves unwritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import semantic_memory

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import StorageError
from threadmind.models import ScriptedModel
from threadmind.processors import MessageHistory
from threadmind.stores import InMemoryStore, Lease, SQLiteStore, Store
from threadmind.ui import messages_from_ui

OPTIONS = {"lastMessages": 10, "semanticRecall": {"topK": 5, "messageRange": 0, "scope": "resource"}}
IDS: dict[str, Any] = {"thread_id": "t1", "resource_id": "r1"}


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Memory]:
    path = tmp_path / "m.db"
    async with semantic_memory(SQLiteStore(path, synchronous="NORMAL"), tmp_path / "v", OPTIONS) as mem:
        await mem.create_thread(resource_id="r1", thread_id="t1")
        # The test's stand-in for a failing disk: refuse any message mentioning "poison".
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TRIGGER refuse_poison BEFORE INSERT ON mastra_messages "
                         "WHEN NEW.content LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        yield mem


async def _hits(memory: Memory, text: str) -> list[str]:
    await memory.flush_index()
    return sorted(hit.message_id for hit in await memory.search_vectors(text, top_k=50, resource_id="r1"))


async def test_failed_persist_leaves_no_vectors(memory: Memory) -> None:
    agent = Agent("a", "Be brief.", ScriptedModel(["a poison reply"]), memory=memory)
    with pytest.raises(StorageError):
        await agent.generate("tell me about poison apples", **IDS)
    assert await _hits(memory, "poison apples") == []
    assert (await memory.recall("t1", resource_id="r1", per_page=False)).messages == []
    stats = memory.index_statistics()
    assert stats is not None and stats.vectors == 0 and stats.pending == 0
    # the thread stays usable, and a turn that persists is embedded exactly as stored
    ok = await Agent("a", "Be brief.", ScriptedModel(["apples are red"]), memory=memory).generate(
        "tell me about apples", **IDS)
    stored = [m.id for m in (await memory.recall("t1", resource_id="r1", per_page=False)).messages]
    assert len(stored) == 2 and ok.messages[0].id in stored
    assert await _hits(memory, "apples") == sorted(stored)


async def test_persist_before_the_semantic_step_still_embeds(memory: Memory) -> None:
    """A user-configured MessageHistory runs before memory's semantic step: the vectors follow the commit."""
    history = MessageHistory(memory.storage, last_messages=10)
    agent = Agent("a", "Be brief.", ScriptedModel(["pears are green"]), memory=memory,
                  output_processors=[history])
    await agent.generate("tell me about pears", **IDS)
    stored = [m.id for m in (await memory.recall("t1", resource_id="r1", per_page=False)).messages]
    assert len(stored) == 2
    assert await _hits(memory, "pears") == sorted(stored)


class _DownEmbedder(HashEmbedder):
    """A remote embedder that is down: the turn must still persist, its messages marked pending."""

    down = True

    async def embed(self, texts: list[str]) -> Embeddings:
        if self.down:
            raise ConnectionError("embedding API unreachable")
        return await super().embed(texts)


async def test_a_turn_whose_vectors_fail_is_marked_pending_in_its_save(tmp_path: Path) -> None:
    embedder = _DownEmbedder(dim=64)
    async with semantic_memory(SQLiteStore(tmp_path / "p.db", synchronous="NORMAL"), tmp_path / "v", OPTIONS,
                               embedder=embedder) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await Agent("a", "Be brief.", ScriptedModel(["plums are purple"]), memory=memory).generate(
            "tell me about plums", **IDS)
        await memory.flush_index()
        stats = memory.index_statistics()
        assert stats is not None and stats.vectors == 0 and stats.pending == 2
        embedder.down = False
        assert await memory.reindex() == 2
        assert len(await _hits(memory, "plums")) == 2



class _SlowEmbedder(HashEmbedder):
    """A remote embedder that takes its time (the turn returns before its vectors exist)."""

    async def embed(self, texts: list[str]) -> Embeddings:
        await anyio.sleep(0.2)
        return await super().embed(texts)


def _stores(tmp_path: Path) -> dict[str, Store]:
    return {"sqlite": SQLiteStore(tmp_path / "s.db", synchronous="NORMAL"), "memory": InMemoryStore()}


@pytest.mark.parametrize("store_kind", ["sqlite", "memory"])
async def test_a_generated_turn_is_searchable_by_meaning_once_settled(tmp_path: Path, store_kind: str) -> None:
    async with semantic_memory(_stores(tmp_path)[store_kind], tmp_path / "v", OPTIONS,
                               embedder=_SlowEmbedder(dim=64)) as memory:
        result = await Agent("a", "Be brief.", ScriptedModel(["figs are sweet"]), memory=memory).generate(
            "tell me about figs", **IDS)
        stored = sorted(m.id for m in (await memory.recall("t1", resource_id="r1", per_page=False)).messages)
        assert len(stored) == 2 and result.messages[-1].id in stored
        await memory.settled()  # the turn does not wait for its vectors
        hits = await memory.search_vectors("figs", top_k=50, resource_id="r1")
        assert sorted(hit.message_id for hit in hits) == stored


async def test_a_streamed_chat_turn_is_searchable_by_meaning_once_settled(tmp_path: Path) -> None:
    async with semantic_memory(SQLiteStore(tmp_path / "c.db", synchronous="NORMAL"), tmp_path / "v", OPTIONS,
                               embedder=_SlowEmbedder(dim=64)) as memory:
        agent = Agent("a", "Be brief.", ScriptedModel(["kiwis are fuzzy"]), memory=memory)
        body = {"id": "t1", "trigger": "submit-message",
                "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "kiwis?"}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="t1", resource_id="r1") as stream:
            async for _ in stream:
                pass
        stored = sorted(m.id for m in (await memory.recall("t1", resource_id="r1", per_page=False)).messages)
        assert len(stored) == 2 and "u-1" in stored
        await memory.settled()
        hits = await memory.search_vectors("kiwis", top_k=50, resource_id="r1")
        assert sorted(hit.message_id for hit in hits) == stored


class _Timeline:
    """When the turn's save and its embedding began and ended (seconds since the turn began)."""

    def __init__(self) -> None:
        self.events: list[str] = []


class _SlowDisk(InMemoryStore):
    """A store whose saves take 0.2 s (a slow disk, a remote database)."""

    def __init__(self, timeline: _Timeline) -> None:
        super().__init__()
        self._timeline = timeline

    async def save_messages(self, thread_id: str, messages: Sequence[Message], *, mark_pending: bool = False,
                            fence: Lease | None = None) -> list[Message]:
        self._timeline.events.append("save begins")
        await anyio.sleep(0.2)
        saved = await super().save_messages(thread_id, messages, mark_pending=mark_pending, fence=fence)
        self._timeline.events.append("save commits")
        return saved


class _TimedEmbedder(_SlowEmbedder):
    def __init__(self, timeline: _Timeline) -> None:
        super().__init__(dim=64)
        self._timeline = timeline

    async def embed(self, texts: list[str]) -> Embeddings:
        if any("brown" in text or "palms" in text for text in texts):  # the saved messages, not a recall's query
            self._timeline.events.append("embedding begins")
        return await super().embed(texts)


async def test_a_turn_embeds_while_its_save_commits_as_save_messages_does(tmp_path: Path) -> None:
    timeline = _Timeline()
    async with semantic_memory(_SlowDisk(timeline), tmp_path / "v", OPTIONS,
                               embedder=_TimedEmbedder(timeline)) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        for door in ("save_messages", "generate"):
            timeline.events.clear()
            if door == "save_messages":
                await memory.save_messages([Message.user("dates are brown", thread_id="t1", resource_id="r1")])
            else:
                await Agent("a", "Be brief.", ScriptedModel(["dates grow on palms"]), memory=memory).generate(
                    "tell me about dates", **IDS)
            # one meaning of "saved with semantic recall on" whatever the door: the embedding overlaps the commit
            assert timeline.events == ["save begins", "embedding begins", "save commits"], door
