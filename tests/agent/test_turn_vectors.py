"""An agent turn's vectors wait for its messages to commit, as ``Memory.save_messages`` gates them.

The semantic-recall output step runs before the message-history step persists the turn; it must not stage
vectors for messages that a failed (or never reached) persist leaves unwritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests._factories import semantic_memory

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import StorageError
from threadmind.models import ScriptedModel
from threadmind.processors import MessageHistory
from threadmind.stores import SQLiteStore

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

