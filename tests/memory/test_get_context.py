"""``Memory.get_context`` (Mastra's ``getContext``): one call assembles what a model call needs from memory, for
callers that run their own model loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from threadmind import Message
from threadmind.agent import Agent
from threadmind.errors import ValidationError
from threadmind.memory import Memory, MemoryContext
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import CONTINUATION_REMINDER, OBSERVATIONS_PREAMBLE
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore

from ._om_support import endless, long_text, observer_step, om_memory, om_records

BASE = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_without_observations_it_is_the_history_and_the_working_memory_instruction(
        tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    options = {"lastMessages": 3, "workingMemory": {"enabled": True, "scope": "thread"}}
    async with Memory(storage=store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([Message.user(f"message {i}", id=f"m{i}", thread_id="t1", resource_id="r1",
                                                 created_at=BASE + timedelta(seconds=i)) for i in range(5)])
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# User\n- Name: Ada")
        context = await memory.get_context("t1", resource_id="r1")
        assert isinstance(context, MemoryContext)
        assert [m.id for m in context.messages] == ["m2", "m3", "m4"]  # the last three, oldest first
        assert context.system_message == await memory.get_system_message(thread_id="t1", resource_id="r1")
        assert context.system_message is not None and "Name: Ada" in context.system_message
        assert (context.has_observations, context.om_record, context.continuation_message) == (False, None, None)
        narrower = await memory.get_context("t1", resource_id="r1", memory_config={"lastMessages": 1,
                                                                                  "workingMemory": {"enabled": False}})
        assert [m.id for m in narrower.messages] == ["m4"] and narrower.system_message is None
        with pytest.raises(ValidationError):
            await memory.get_context("", resource_id="r1")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_with_observations_it_is_the_observations_and_what_they_do_not_cover(tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    calls: list[str] = []
    async with om_memory(store, endless(observer_step(calls))) as memory:
        agent = Agent("a", "be brief", ScriptedModel(["r1", "r2", "r3"]), memory=memory)
        await agent.generate(long_text("turn one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("turn two"), thread_id="t1", resource_id="r1")
        await agent.generate("short three", thread_id="t1", resource_id="r1")
        await memory.settled()
        record = (await om_records(memory))[-1]
        await memory.save_messages([Message.user("a new question", id="q9", thread_id="t1", resource_id="r1")])
        context = await memory.get_context("t1", resource_id="r1")
    assert context.has_observations and context.om_record == record
    assert context.system_message is not None and context.system_message.startswith(OBSERVATIONS_PREAMBLE)
    assert "* 🔴 observation 1" in context.system_message
    texts = [m.text for m in context.messages]
    assert texts[-1] == "a new question" and not any("turn one" in text for text in texts)  # observed: the block
    assert all(m.id not in record.observed_message_ids for m in context.messages)
    assert [m.created_at for m in context.messages] == sorted(m.created_at for m in context.messages)
    reminder = context.continuation_message
    assert reminder is not None and reminder.id == "om-continuation" and reminder.role == "user"
    assert reminder.text == CONTINUATION_REMINDER and reminder.created_at == datetime(1970, 1, 1, tzinfo=UTC)
