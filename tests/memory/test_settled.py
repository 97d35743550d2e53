"""``Memory.settled()`` (SPEC §13): returns once the background work started so far (titles, observations, the
vectors of agent turns) has finished, and the memory stays open."""

from __future__ import annotations

from pathlib import Path

import anyio

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.embedders import HashEmbedder
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import OBSERVER_INSTRUCTIONS
from threadmind.stores import HnswVectorStore, InMemoryStore, SQLiteStore
from threadmind.testing import actor_system, observational_engine
from threadmind.ui import messages_from_ui


def _gated_titles(gate: anyio.Event) -> ScriptedModel:
    """A title model that answers only once ``gate`` is set."""
    async def title(request: ModelRequest) -> str:
        await gate.wait()
        return "Settled Title"

    return ScriptedModel([title])


async def test_settled_waits_for_the_title_and_the_memory_stays_open(tmp_path: Path) -> None:
    gate = anyio.Event()
    memory = Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"generateTitle": {"model": _gated_titles(gate)}})
    async with memory:
        await Agent("a", "i", ScriptedModel(["hello"]), memory=memory).generate("Hi", thread_id="t1",
                                                                                 resource_id="r1")
        finished: list[bool] = []

        async def wait_settled() -> None:
            await memory.settled()
            finished.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_settled)
            await anyio.sleep(0.2)
            assert finished == []  # the title is still being written
            thread = await memory.get_thread_by_id("t1")
            assert thread is not None and thread.title != "Settled Title"
            gate.set()
        assert finished == [True]
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "Settled Title"
        await memory.settled()  # nothing left: returns at once
        assert len((await memory.recall("t1", resource_id="r1")).messages) == 2  # still open


async def test_settled_waits_for_the_vectors_of_an_agent_turn() -> None:
    """An agent turn embeds after its commit without waiting; settled() returns once those vectors are found."""
    memory = Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=64),
                    options={"semanticRecall": {"topK": 2, "messageRange": 0, "scope": "resource"}})
    async with memory:
        agent = Agent("a", "i", ScriptedModel(["about the lighthouse keeper", "noted"]), memory=memory)
        await agent.generate("tell me about the lighthouse", thread_id="t1", resource_id="r1")
        await memory.settled()
        index = actor_system(memory).index
        assert index is not None
        assert index.statistics().staged == 0
        hits = await memory.search_vectors("lighthouse keeper", top_k=4, resource_id="r1")
        assert len(hits) == 2


async def test_settled_waits_for_an_observation_and_returns_on_a_memory_without_work() -> None:
    observed = anyio.Event()
    release = anyio.Event()

    async def step(request: ModelRequest) -> str:
        if request.system[0] != OBSERVER_INSTRUCTIONS:
            return "ok"
        observed.set()
        await release.wait()
        return "* 🔴 the user likes tea"

    model = ScriptedModel(iter(lambda: step, None))
    options = {"observationalMemory": {"model": model, "observation": {"messageTokens": 50}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", model, memory=memory)
        long = "tea: " + " ".join(f"word{i}" for i in range(60))
        await agent.generate(long, thread_id="t1", resource_id="r1")
        with anyio.fail_after(5):
            await observed.wait()
        engine = observational_engine(memory)
        assert engine is not None
        with anyio.move_on_after(0.2) as scope:
            await memory.settled()
        assert scope.cancelled_caught  # the observation is still running
        release.set()
        with anyio.fail_after(5):
            await memory.settled()
        records = await engine.records.history("thread:t1")
        assert records and "likes tea" in records[-1].active_observations
    async with Memory(storage=InMemoryStore()) as idle:
        with anyio.fail_after(1):
            await idle.settled()
    await Memory(storage=InMemoryStore()).settled()  # not started: nothing to wait for


async def test_settled_after_a_streamed_chat_request_waits_for_its_title(tmp_path: Path) -> None:
    """The chat server's door: a useChat body through messages_from_ui and Agent.stream; the reply is stored when
    the stream ends, the title later, and settled() returns once it is."""
    gate = anyio.Event()
    memory = Memory(storage=SQLiteStore(tmp_path / "chat.db"),
                    options={"generateTitle": {"model": _gated_titles(gate)}})
    body = {"id": "chat-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}]}
    async with memory:
        agent = Agent("chat", "You answer.", ScriptedModel(["hello from the stream"]), memory=memory)
        async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="alice") as stream:
            async for _ in stream:
                pass
        stored = (await memory.recall("chat-1", resource_id="alice", per_page=False)).messages
        assert [m.role for m in stored] == ["user", "assistant"]
        with anyio.move_on_after(0.2) as scope:
            await memory.settled()
        assert scope.cancelled_caught  # the title model has not answered
        gate.set()
        with anyio.fail_after(5):
            await memory.settled()
        thread = await memory.get_thread_by_id("chat-1")
        assert thread is not None and thread.title == "Settled Title"
