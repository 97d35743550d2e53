"""The resource actor caches the resource row: reads after the first need no database, updates are seen."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from tests._factories import FakeClock

from threadmind import Memory
from threadmind.actors._registry import ActorRegistry
from threadmind.actors._resource_actor import GetResource, ResourceActor
from threadmind.actors._thread_actor import Exclusive
from threadmind.agent import Agent
from threadmind.codecs import Resource
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import SQLiteStore


class CountingResources(SQLiteStore):
    """A real SQLite store that counts resource reads."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.resource_reads = 0

    async def get_resource(self, resource_id: str) -> Resource | None:
        self.resource_reads += 1
        return await super().get_resource(resource_id)


async def test_working_memory_turns_read_the_resource_once(tmp_path: Path) -> None:
    store = CountingResources(tmp_path / "m.db")
    options = {"lastMessages": 4, "workingMemory": {"enabled": True, "scope": "resource"}}
    async with Memory(storage=store, options=options) as memory:
        await memory.update_working_memory(thread_id="t", resource_id="r", working_memory="# Notes\n- likes tea")
        model = ScriptedModel([f"answer {i}" for i in range(5)])
        agent = Agent("a", "i", model, memory=memory)
        reads = store.resource_reads
        for i in range(5):
            await agent.generate(f"turn {i}", thread_id="t", resource_id="r")
        assert store.resource_reads == reads + 1  # one read, then the actor's cached row
        assert all(any("likes tea" in s for s in request.system) for request in model.requests)


async def test_an_update_through_memory_is_seen_by_the_next_turn(tmp_path: Path) -> None:
    store = CountingResources(tmp_path / "m.db")
    options = {"lastMessages": 4, "workingMemory": {"enabled": True, "scope": "resource"}}
    async with Memory(storage=store, options=options) as memory:
        model = ScriptedModel([
            ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# Notes\n- name: Ada"})]),
            "noted",
            "hello Ada", "still Ada",
        ])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("my name is Ada", thread_id="t1", resource_id="r")  # the tool updates it
        assert await memory.get_working_memory(thread_id="t1", resource_id="r") == "# Notes\n- name: Ada"
        await agent.generate("who am I?", thread_id="t2", resource_id="r")  # another thread, same resource
        await agent.generate("and now?", thread_id="t1", resource_id="r")
        assert any("name: Ada" in s for s in model.requests[-1].system)
        assert any("name: Ada" in s for s in model.requests[-2].system)


async def test_the_cached_row_expires_and_exclusive_work_drops_it(tmp_path: Path) -> None:
    clock = FakeClock()
    async with SQLiteStore(tmp_path / "m.db") as store:
        reads: list[str] = []
        original = store.get_resource

        async def counted(resource_id: str) -> Resource | None:
            reads.append(resource_id)
            return await original(resource_id)

        store.get_resource = counted  # type: ignore[method-assign]
        registry = ActorRegistry(lambda key: ResourceActor(key, store, ttl=2.0, clock=clock), sweep_interval=None)
        async with registry:
            assert await registry.ask("r", GetResource()) is None
            assert await registry.ask("r", GetResource()) is None
            assert len(reads) == 1
            # Another process (here: a plain sqlite3 connection, which no store object counts) writes the
            # row: the cache may lag it, but by at most the TTL.
            with contextlib.closing(sqlite3.connect(tmp_path / "m.db", isolation_level=None)) as other:
                other.execute('INSERT INTO mastra_resources (id, "workingMemory", metadata, "createdAt", "updatedAt") '
                              "VALUES ('r', 'from elsewhere', '{}', '2025-01-01T00:00:00.000Z', "
                              "'2025-01-01T00:00:00.000Z')")
            cached: Any = await registry.ask("r", GetResource())
            assert cached is None
            clock.now += 2.5
            fresh: Any = await registry.ask("r", GetResource())
            assert fresh is not None and fresh.working_memory == "from elsewhere"
            assert len(reads) == 2
            # Another store object on the same file in this process shares the write counts: seen at once.
            async with SQLiteStore(tmp_path / "m.db") as elsewhere:
                await elsewhere.update_resource("r", working_memory="from another store object")
            shared: Any = await registry.ask("r", GetResource())
            assert shared.working_memory == "from another store object" and len(reads) == 3
            # A write straight into this store, past the actor, is seen at once.
            await store.update_resource("r", working_memory="past the actor")
            seen: Any = await registry.ask("r", GetResource())
            assert seen.working_memory == "past the actor" and len(reads) == 4

            async def write() -> None:
                await store.update_resource("r", working_memory="through the actor")

            await registry.ask("r", Exclusive(write))
            after: Any = await registry.ask("r", GetResource())
            assert after.working_memory == "through the actor" and len(reads) == 5
