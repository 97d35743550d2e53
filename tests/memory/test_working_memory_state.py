"""``workingMemory.useStateSignals``: working memory reaches the model as Mastra 1.71 sends it, a ``working-memory``
state signal (a snapshot, then unified-diff deltas, nothing while it is unchanged), stored as Mastra stores it,
with the ``setWorkingMemory`` tool; through ``generate`` and through the chat server's door, on every store."""

from __future__ import annotations

import hashlib
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.agent import Agent
from threadmind.codecs import Message, ToolInvocationPart, message_from_dict
from threadmind.errors import ConfigError
from threadmind.memory import Memory
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.processors import WorkingMemoryState
from threadmind.processors._signals import for_model
from threadmind.processors._working_memory_state import markdown_delta
from threadmind.stores import InMemoryStore, PostgresStore, SQLiteStore, Store
from threadmind.testing import observational_engine
from threadmind.ui import MEMORY_TOOLS, messages_from_ui

TEMPLATE = "# Me\n- name:\n- city:"
OPTIONS: dict[str, Any] = {"lastMessages": 10, "workingMemory": {"enabled": True, "template": TEMPLATE,
                                                                 "useStateSignals": True}}
ADA = "# Me\n- name: Ada\n- city: Paris"
GRACE = "# Me\n- name: Grace\n- city: Paris"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        return lambda: PostgresStore(dsn)
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "wm.db")
    return InMemoryStore


@pytest.fixture
async def memory(new_store: Callable[[], Store]) -> AsyncIterator[Memory]:
    async with Memory(storage=new_store(), options=OPTIONS) as opened:
        await opened.create_thread(thread_id="t1", resource_id="r1")
        await opened.update_working_memory(thread_id="t1", resource_id="r1", working_memory=ADA)
        yield opened


def _key(text: str) -> str:
    return "sha256:" + hashlib.sha256(b"markdown\0" + text.encode()).hexdigest()


def _signals(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "signal"]


def _wm_blocks(request_messages: list[Message]) -> list[str]:
    return [m.content.content or "" for m in request_messages
            if m.role == "user" and (m.content.content or "").startswith("<working-memory")]


def test_the_option_is_mastras() -> None:
    with pytest.raises(ConfigError, match="useStateSignals is not supported with workingMemory.version: 'vnext'"):
        Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "useStateSignals": True,
                                                                   "version": "vnext"}})
    memory = Memory(storage=InMemoryStore(), options=OPTIONS)
    tools = memory.list_tools()
    assert list(tools) == ["setWorkingMemory"]
    assert tools["setWorkingMemory"].description.startswith("The current working memory state is delivered to you")
    ids = [getattr(p, "id", None) for p in memory.get_input_processors()]
    assert "working-memory" not in ids and ids[-1] == WorkingMemoryState.id
    assert "setWorkingMemory" in MEMORY_TOOLS  # a chat server that hides the memory tools hides this one too


async def test_a_snapshot_then_nothing_then_a_delta(memory: Memory) -> None:
    model = ScriptedModel([
        "Hello Ada.",
        ModelResponse(tool_calls=[ToolCall("c1", "setWorkingMemory", {"memory": GRACE})]),
        "Noted, Grace.",
        "Still Grace.",
    ])
    agent = Agent("a", "Be brief.", model, memory=memory)
    assert await memory.get_system_message(thread_id="t1", resource_id="r1") is None

    await agent.generate("hi", thread_id="t1", resource_id="r1")
    first = model.requests[0]
    assert not any("WORKING_MEMORY" in text for text in first.system)  # no working memory in the prompt
    assert [m.role for m in first.messages] == ["user", "user"]  # the user's text, then the signal
    assert _wm_blocks(first.messages) == [f'<working-memory format="markdown" scope="resource">{ADA}</working-memory>']

    stored = (await memory.recall("t1", resource_id="r1", per_page=False)).messages
    [snapshot] = _signals(stored)
    assert [m.role for m in stored] == ["user", "signal", "assistant"]
    assert snapshot.type == "working-memory"
    signal = (snapshot.content.metadata or {})["signal"]
    assert signal["type"] == "state" and signal["tagName"] == "working-memory"
    assert signal["attributes"] == {"format": "markdown", "scope": "resource"}
    assert signal["metadata"] == {"state": {"id": "working-memory", "cacheKey": _key(ADA), "mode": "snapshot",
                                            "threadId": "t1", "version": 1}, "value": ADA}
    thread = await memory.get_thread_by_id("t1")
    assert thread is not None and thread.metadata is not None
    tracking = thread.metadata["mastra"]["stateSignals"]["working-memory"]
    assert tracking["currentCacheKey"] == _key(ADA) and tracking["currentMode"] == "snapshot"
    assert tracking["lastSignalId"] == tracking["lastSnapshotSignalId"] == snapshot.id
    assert tracking["activeCopies"] == [{"id": snapshot.id, "cacheKey": _key(ADA), "mode": "snapshot", "version": 1}]

    # Second turn: the snapshot is in the window, unchanged: nothing new before the first call; the tool changes
    # the memory, and the next call gets only the change.
    await agent.generate("call me Grace", thread_id="t1", resource_id="r1")
    before_tool, after_tool = model.requests[1], model.requests[2]
    assert _wm_blocks(before_tool.messages) == _wm_blocks(first.messages)  # the stored snapshot, once
    delta = '@@ -2,1 +2,1 @@\n-- name: Ada\n+- name: Grace'
    assert _wm_blocks(after_tool.messages)[-1] == (
        f'<working-memory format="markdown" scope="resource" patch="unified-diff">{delta}</working-memory>')
    stored = (await memory.recall("t1", resource_id="r1", per_page=False)).messages
    assert [m.role for m in stored] == ["user", "signal", "assistant", "user", "assistant", "signal"]
    change = _signals(stored)[-1]
    state = (change.content.metadata or {})["signal"]["metadata"]
    assert state == {"state": {"id": "working-memory", "cacheKey": _key(GRACE), "mode": "delta", "threadId": "t1",
                               "version": 2}, "value": GRACE, "delta": delta}
    calls = [p.tool_invocation.tool_name for m in stored for p in m.content.parts if isinstance(p, ToolInvocationPart)]
    assert calls == ["setWorkingMemory"]  # kept in the thread, unlike updateWorkingMemory's

    # Third turn: unchanged, and the window still holds the snapshot: no signal.
    await agent.generate("thanks", thread_id="t1", resource_id="r1")
    assert len(_signals((await memory.recall("t1", resource_id="r1", per_page=False)).messages)) == 2
    assert len(_wm_blocks(model.requests[3].messages)) == 2  # the snapshot and the delta, as stored


async def test_a_snapshot_again_once_the_window_lost_it(memory: Memory) -> None:
    model = ScriptedModel(["one", "two"])
    agent = Agent("a", "Be brief.", model, memory=memory)
    await agent.generate("hi", thread_id="t1", resource_id="r1")
    await agent.generate("again", thread_id="t1", resource_id="r1", memory_options={"lastMessages": 1})
    assert _wm_blocks(model.requests[1].messages) == [
        f'<working-memory format="markdown" scope="resource">{ADA}</working-memory>']
    signals = _signals((await memory.recall("t1", resource_id="r1", per_page=False)).messages)
    assert [(s.content.metadata or {})["signal"]["metadata"]["state"]["version"] for s in signals] == [1, 1]


async def test_the_chat_servers_door(tmp_path: Path) -> None:
    """A useChat body through ``messages_from_ui`` and ``Agent.stream``: the model gets the signal, the thread keeps
    it."""
    async with Memory(storage=SQLiteStore(tmp_path / "chat.db"), options=OPTIONS) as memory:
        await memory.create_thread(thread_id="chat-1", resource_id="r1")
        await memory.update_working_memory(thread_id="chat-1", resource_id="r1", working_memory=ADA)
        model = ScriptedModel(["hello"])
        agent = Agent("chat", "You answer.", model, memory=memory)
        body = {"id": "chat-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="r1") as stream:
            async for _ in stream:
                pass
        assert _wm_blocks(model.requests[0].messages) == [
            f'<working-memory format="markdown" scope="resource">{ADA}</working-memory>']
        stored = (await memory.recall("chat-1", resource_id="r1", per_page=False)).messages
        assert [m.role for m in stored] == ["user", "signal", "assistant"]


def test_signals_read_as_mastra_renders_them() -> None:
    def signal(kind: str, text: str, attributes: dict[str, Any] | None = None) -> Message:
        meta: dict[str, Any] = {"id": "s", "type": kind, "tagName": kind if kind != "reactive" else "system-reminder"}
        if attributes:
            meta["attributes"] = attributes
        return message_from_dict({"id": "s", "role": "signal", "createdAt": "2026-01-01T00:00:00.000Z",
                                  "content": {"format": 2, "parts": [{"type": "text", "text": text}],
                                              "metadata": {"signal": meta}}})

    [user, state, reminder] = for_model([signal("user", "plain words"), signal("state", "a < b & c", {"k": 'say "x"'}),
                                         signal("reactive", "")])
    assert user.role == "user" and user.content.content == "plain words"
    assert state.role == "user" and state.content.content == '<state k="say &quot;x&quot;">a &lt; b &amp; c</state>'
    assert reminder.content.content == "<system-reminder />"


@pytest.mark.parametrize(("old", "new", "hunks"), [
    ("a\nb\nc", "a\nB\nc", "@@ -2,1 +2,1 @@\n-b\n+B"),
    ("a\nc", "a\nb\nc", "@@ -2,0 +2,1 @@\n+b"),  # an insertion is numbered by the line it precedes (jsdiff)
    ("a\nb\nc", "a\nc", "@@ -2,1 +2,0 @@\n-b"),
    ("a\nb", "a\nb\nc", "@@ -2,1 +2,2 @@\n-b\n+b\n+c"),  # "b" lost its line end: a changed line, as jsdiff has it
    ("x\ny\nz", "X\ny\nZ", "@@ -1,1 +1,1 @@\n-x\n+X\n@@ -3,1 +3,1 @@\n-z\n+Z"),
])
def test_deltas_are_jsdiff_hunks(old: str, new: str, hunks: str) -> None:
    assert markdown_delta(old, new) == hunks


async def test_turns_in_two_processes_share_the_signals_and_their_tracking(tmp_path: Path) -> None:
    """A turn in another process on the same SQLite file sees the snapshot this process stored and sends only the
    change its tool made; this process's next turn then sends nothing (the tracking the other wrote says the model
    has the current text)."""
    path = tmp_path / "shared.db"
    script = textwrap.dedent(f"""
        import anyio
        from threadmind import Memory
        from threadmind.agent import Agent
        from threadmind.models import ModelResponse, ScriptedModel, ToolCall
        from threadmind.stores import SQLiteStore

        async def main():
            model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "setWorkingMemory",
                                                                      {{"memory": {GRACE!r}}})]), "Noted."])
            async with Memory(storage=SQLiteStore({str(path)!r}), options={OPTIONS!r}) as memory:
                await Agent("a", "Be brief.", model, memory=memory).generate("call me Grace", thread_id="t1",
                                                                             resource_id="r1")
                blocks = [m.content.content for m in model.requests[0].messages if m.role == "user"
                          and (m.content.content or "").startswith("<working-memory")]
                print(len(blocks))

        anyio.run(main)
    """)
    async with Memory(storage=SQLiteStore(path), options=OPTIONS) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory=ADA)
        model = ScriptedModel(["Hello Ada.", "Hello Grace."])
        agent = Agent("a", "Be brief.", model, memory=memory)
        await agent.generate("hi", thread_id="t1", resource_id="r1")
        done = await anyio.run_process([sys.executable, "-c", script])
        assert done.stdout.decode().split() == ["1"]  # the other process's first call: the stored snapshot only
        await agent.generate("and now?", thread_id="t1", resource_id="r1")
        assert len(_wm_blocks(model.requests[1].messages)) == 2  # snapshot and the other process's delta: no more
        stored = (await memory.recall("t1", resource_id="r1", per_page=False)).messages
        assert [(m.content.metadata or {})["signal"]["metadata"]["state"]["mode"] for m in _signals(stored)] == [
            "snapshot", "delta"]
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.metadata is not None
        assert thread.metadata["mastra"]["stateSignals"]["working-memory"]["version"] == 2


async def test_agent_managed_false_leaves_the_agent_reading_only() -> None:
    """``workingMemory.agentManaged: false`` (Mastra's default is true): no tool, and the read-only instruction."""
    options = {"workingMemory": {"enabled": True, "template": TEMPLATE, "agentManaged": False}}
    assert Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "agentManaged": True}})
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory=ADA)
        assert memory.list_tools() == {}
        model = ScriptedModel(["hi"])
        await Agent("a", "Be brief.", model, memory=memory).generate("hello", thread_id="t1", resource_id="r1")
        assert model.requests[0].tools == []
        [instruction] = [text for text in model.requests[0].system if "WORKING_MEMORY" in text]
        assert instruction.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION (READ-ONLY):") and ADA in instruction
        assert instruction == await memory.get_system_message(thread_id="t1", resource_id="r1")


async def test_observational_memory_can_manage_working_memory() -> None:
    """``observation.manageWorkingMemory``: the Observer is asked for the updated document beside its observations
    and its answer becomes the working memory; the agent then only reads it, as a state signal (Mastra's
    defaults, which explicit settings override)."""
    from threadmind.models import ModelRequest
    from threadmind.stores import InMemoryStore as Store_

    def observe(request: ModelRequest) -> str:
        return f"* 🔴 the user is called Grace\n<working-memory>\n{GRACE}\n</working-memory>"

    observer = ScriptedModel(iter(lambda: observe, None))
    options = {"workingMemory": {"enabled": True, "template": TEMPLATE},
               "observationalMemory": {"model": observer, "observation": {"messageTokens": 20,
                                                                          "manageWorkingMemory": True}}}
    memory = Memory(storage=Store_(), options=options)
    assert (memory.options.working_memory.agent_managed, memory.options.working_memory.use_state_signals) == (
        False, True)
    explicit = {**options, "workingMemory": {"enabled": True, "agentManaged": True, "useStateSignals": False}}
    kept = Memory(storage=Store_(), options=explicit).options.working_memory
    assert (kept.agent_managed, kept.use_state_signals) == (True, False)
    async with memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory=ADA)
        agent = Agent("a", "Be brief.", ScriptedModel(["noted", "sure"]), memory=memory)
        await agent.generate("my name is Grace now, " + "really " * 30, thread_id="t1", resource_id="r1")
        await memory.settled()
        assert observer.requests, "the Observer ran"
        system = observer.requests[0].system[0]
        assert "<working-memory>\nUpdate working memory with durable facts" in system
        assert f"Current working memory:\n{ADA}" in system and f"Working memory template:\n{TEMPLATE}" in system
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == GRACE
        assert memory.list_tools() == {}
        records = await observational_engine(memory).records.history("thread:t1")  # type: ignore[union-attr]
        assert "<working-memory>" not in records[-1].active_observations
