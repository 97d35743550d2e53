"""Title generation after agent turns (reference §8.2; SPEC §8/§9: created_at kept, aclose waits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.lowlevel

from threadmind.agent import Agent
from threadmind.codecs import Thread
from threadmind.errors import ModelError
from threadmind.memory import Memory
from threadmind.models import ModelRequest, ModelResponse
from threadmind.models._scripted import ScriptedModel
from threadmind.stores._sqlite import SQLiteStore


def _memory(path: Path, generate_title: Any) -> Memory:
    return Memory(storage=SQLiteStore(path), options={"generateTitle": generate_title})


async def _thread(path: Path, thread_id: str = "t1") -> Thread:
    async with Memory(storage=SQLiteStore(path)) as memory:
        thread = await memory.get_thread_by_id(thread_id)
    assert thread is not None
    return thread


async def test_true_uses_agent_model(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    model = ScriptedModel(["hello there", "<think>hmm</think> \"Greeting Ada\" "])
    async with _memory(db, True) as memory:
        await Agent("a", "i", model, memory=memory).generate("Hi, I am Ada", thread_id="t1", resource_id="r1")
    assert model.calls == 2
    title_request = model.requests[1]
    assert "User: Hi, I am Ada" in title_request.messages[0].text
    assert "Assistant: hello there" in title_request.messages[0].text
    assert title_request.tools == []
    assert (await _thread(db)).title == "Greeting Ada"


async def test_min_messages_and_never_retitled(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    title_model = ScriptedModel(["First Title", "Second Title"])
    agent_model = ScriptedModel(["a1", "a2", "a3"])
    async with _memory(db, {"minMessages": 3, "model": title_model}) as memory:
        agent = Agent("a", "i", agent_model, memory=memory)
        created = await memory.create_thread(resource_id="r1", thread_id="t1")
        await agent.generate("one", thread_id="t1", resource_id="r1")
        assert title_model.calls == 0  # 2 messages < 3: no title after turn 1
        await agent.generate("two", thread_id="t1", resource_id="r1")
    titled = await _thread(db)
    assert title_model.calls == 1
    assert titled.title == "First Title"
    assert titled.created_at == created.created_at
    async with _memory(db, {"minMessages": 3, "model": title_model}) as memory:
        await Agent("a", "i", agent_model, memory=memory).generate("three", thread_id="t1", resource_id="r1")
    assert title_model.calls == 1  # a titled thread is never sent to the title model again
    assert (await _thread(db)).title == "First Title"


async def test_pre_titled_thread_untouched(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    title_model = ScriptedModel(["New"])
    async with _memory(db, {"model": title_model}) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", title="Mine")
        await Agent("a", "i", ScriptedModel(["ok"]), memory=memory).generate("x", thread_id="t1", resource_id="r1")
    assert title_model.calls == 0
    assert (await _thread(db)).title == "Mine"


async def test_read_only_run_not_titled(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    title_model = ScriptedModel(["New"])
    async with _memory(db, {"model": title_model}) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await Agent("a", "i", ScriptedModel(["ok"]), memory=memory).generate(
            "x", thread_id="t1", resource_id="r1", memory_options={"readOnly": True})
    assert title_model.calls == 0
    assert (await _thread(db)).title == ""


async def test_title_model_failure_leaves_title(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    title_model = ScriptedModel([ModelError("down")])
    async with _memory(db, {"model": title_model}) as memory:
        result = await Agent("a", "i", ScriptedModel(["fine"]), memory=memory).generate(
            "x", thread_id="t1", resource_id="r1")
        assert result.text == "fine"
    assert title_model.calls == 1
    thread = await _thread(db)
    assert thread.title == ""


async def test_aclose_waits_for_pending_title(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    finished: list[bool] = []

    async def slow(request: ModelRequest) -> ModelResponse:
        for _ in range(200):
            await anyio.lowlevel.checkpoint()
        finished.append(True)
        return ModelResponse(text="Slow Title")

    title_model = ScriptedModel([slow])
    async with _memory(db, {"model": title_model}) as memory:
        await Agent("a", "i", ScriptedModel(["ok"]), memory=memory).generate("x", thread_id="t1", resource_id="r1")
        assert finished == []  # still running in the background when the turn returned
    assert finished == [True]
    assert (await _thread(db)).title == "Slow Title"


async def test_concurrent_turns_title_once(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    title_model = ScriptedModel(["Only"] + ["Again"] * 20)
    async with _memory(db, {"model": title_model}) as memory:
        agent = Agent("a", "i", ScriptedModel(["ok"] * 20), memory=memory)

        async def turn(i: int) -> None:
            await agent.generate(f"m{i}", thread_id="t1", resource_id="r1")

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(turn, i)
    assert (await _thread(db)).title in ("Only", "Again")
    assert title_model.calls >= 1
