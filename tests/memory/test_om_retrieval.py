"""Observational memory's ``retrieval`` mode: observation groups name the messages they came from, the model is
shown them with their ranges and told how to look, and the ``recall`` tool reads those messages back — within the
turn's resource only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from threadmind import Message
from threadmind.agent import Agent
from threadmind.codecs import ToolInvocationPart
from threadmind.errors import ThreadmindError
from threadmind.memory import Memory
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.processors._observation_groups import (
    combine_ranges,
    parse_groups,
    reconcile_after_reflection,
    render_groups,
    wrap_in_group,
)
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import observational_engine
from threadmind.tools import ToolContext

from ._om_support import endless, long_text

GROUP = re.compile(r'<observation-group id="([0-9a-f]{16})" range="([^":]+):([^"]+)">')


def _options(retrieval: Any, **observation: Any) -> dict[str, Any]:
    observer = endless(lambda request: "* 🔴 the user planned a trip to Lisbon")
    return {"observationalMemory": {"retrieval": retrieval,
                                    "observation": {"model": observer, "messageTokens": 50, **observation}}}


async def _thread(memory: Memory, thread_id: str, resource_id: str, texts: list[str]) -> list[Message]:
    await memory.create_thread(thread_id=thread_id, resource_id=resource_id, title=f"about {thread_id}")
    messages = [Message.user(text, thread_id=thread_id, resource_id=resource_id) if i % 2 == 0 else
                Message.assistant(text, thread_id=thread_id, resource_id=resource_id) for i, text in enumerate(texts)]
    return (await memory.save_messages(messages)).messages


async def _recall(memory: Memory, thread_id: str | None, resource_id: str, **args: Any) -> Any:
    tool = memory.list_tools()["recall"]
    return await tool.run(args, ToolContext(thread_id=thread_id, resource_id=resource_id, memory=memory))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_observations_are_grouped_and_the_model_recalls_the_messages_behind_them(tmp_path: Path,
                                                                                      kind: str) -> None:
    """An observation is stored as an ``<observation-group>`` whose range names the first and last observed
    messages; the next turn shows it as a ``## Group`` section with its ``_range`` and the recall instructions, and
    the model's ``recall`` call with the range's end as cursor reads the raw messages before it."""
    seen: list[ModelRequest] = []
    cursor: list[str] = []

    def reply(request: ModelRequest) -> ModelResponse | str:
        seen.append(request)
        if len(seen) == 2:  # the second turn: look up what the observation summarised
            system = "\n".join(request.system)
            found = re.search(r"_range: `([^:`]+):([^`]+)`_", system)
            assert found is not None, system
            cursor.append(found.group(2))  # the range's end, read backwards
            return ModelResponse(tool_calls=[ToolCall("c1", "recall", {"cursor": found.group(2), "page": -1})])
        return "noted"

    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    async with Memory(storage=store, options=_options(True)) as memory:
        agent = Agent("a", "i", endless(reply), memory=memory)
        first = await agent.generate(long_text("my flight code is TP1234") + " " + long_text("and more"),
                                     thread_id="t1", resource_id="r1")
        await memory.settled()
        result = await agent.generate("what was my flight code exactly?", thread_id="t1", resource_id="r1")
        await memory.settled()  # (the second turn's messages are observed after it, in the background)
        stored = (await memory.recall("t1", per_page=False)).messages
        engine = observational_engine(memory)
        assert engine is not None
        [record] = await engine.records.history("thread:t1")
    assert first.text == "noted"
    group, later = GROUP.findall(record.active_observations)  # the first turn's group, then the second turn's
    assert (group[1], group[2]) == (stored[0].id, stored[1].id)  # the turn's user message and reply
    assert (later[1], later[2]) == (stored[2].id, stored[-1].id)
    assert "recall" in [tool.name for tool in seen[1].tools]
    system = "\n".join(seen[1].system)
    assert f"## Group `{group[0]}`" in system and "## Recall — looking up source messages" in system
    assert "<observation-group id=" not in system  # shown as sections, not as tags
    tool_result = next(p for m in result.messages for p in m.content.parts
                       if isinstance(p, ToolInvocationPart)).tool_invocation
    assert tool_result.state == "result" and cursor == [group[2]]
    assert f"[{group[1]}]" in tool_result.result["messages"] and "TP1234" in tool_result.result["messages"]
    assert tool_result.result["count"] == 1 and not tool_result.result["hasPrevPage"]


async def test_the_recall_tool_pages_through_a_thread_and_reads_one_part_in_pieces() -> None:
    long_text = "BEGIN " + " ".join(f"token{i}" for i in range(3000)) + " END"
    async with Memory(storage=InMemoryStore(), options=_options({"scope": "thread"})) as memory:
        saved = await _thread(memory, "t1", "r1", [f"message {i}" for i in range(5)] + [long_text])
        first = await _recall(memory, "t1", "r1", limit=2)
        assert [line for line in first["messages"].split("\n") if line.startswith("**")] == [
            f"**user ({_stamp(saved[0])})** [{saved[0].id}]:", f"**assistant ({_stamp(saved[1])})** [{saved[1].id}]:"]
        assert first["hasNextPage"] and not first["hasPrevPage"] and first["count"] == 2
        forward = await _recall(memory, "t1", "r1", cursor=saved[1].id, limit=2)
        assert "message 2" in forward["messages"] and "message 3" in forward["messages"]
        assert "message 1" not in forward["messages"] and forward["hasNextPage"]
        backward = await _recall(memory, "t1", "r1", cursor=saved[3].id, page=-1, limit=2)
        assert "message 1" in backward["messages"] and "message 2" in backward["messages"]
        assert "message 3" not in backward["messages"] and backward["hasPrevPage"]
        last = await _recall(memory, "t1", "r1", anchor="end", limit=1)
        assert "recall cursor=" in last["messages"] and "partIndex=0" in last["messages"]  # cut, with the call
        pieces, offset = [], 0
        while True:
            piece = await _recall(memory, "t1", "r1", cursor=saved[5].id, partIndex=0, charOffset=offset)
            pieces.append(piece["text"])
            if "nextCharOffset" not in piece:
                break
            offset = piece["nextCharOffset"]
        assert len(pieces) > 1 and "".join(pieces) == long_text
        hint = await _recall(memory, "t1", "r1", cursor=f"{saved[0].id}:{saved[1].id}")
        assert hint["messages"].startswith("The cursor") and f'start="{saved[0].id}"' in hint["messages"]


def _stamp(message: Message) -> str:
    return message.created_at.strftime("%Y-%m-%d %H:%M:%SZ")


async def test_recall_never_reads_another_users_threads() -> None:
    """Resource scope: the user's threads are listed and readable; another user's thread, or a cursor in it, reads as
    not found, whatever the model was told."""
    async with Memory(storage=InMemoryStore(), options=_options(True)) as memory:
        await _thread(memory, "mine-1", "alice", ["alice asks about Lisbon", "sure"])
        await _thread(memory, "mine-2", "alice", ["alice asks about Porto", "ok"])
        [secret, _] = await _thread(memory, "theirs", "bob", ["bob's bank PIN is 4321", "stored"])
        listed = await _recall(memory, "mine-2", "alice", mode="threads")
        assert "mine-1" in listed["threads"] and "mine-2" in listed["threads"] and "theirs" not in listed["threads"]
        assert "← current" in listed["threads"] and listed["count"] == 2
        other = await _recall(memory, "mine-2", "alice", threadId="mine-1")
        assert "alice asks about Lisbon" in other["messages"]
        with pytest.raises(ThreadmindError, match="Thread does not belong to the active resource"):
            await _recall(memory, "mine-2", "alice", threadId="theirs")
        with pytest.raises(ThreadmindError, match=f"Could not resolve cursor message: {secret.id}"):
            await _recall(memory, "mine-2", "alice", cursor=secret.id, threadId="mine-1")
        with pytest.raises(ThreadmindError, match="Could not resolve cursor message"):
            await _recall(memory, "mine-2", "alice", cursor=secret.id, partIndex=0, threadId="mine-1")


@pytest.mark.parametrize("vector", [False, True])
async def test_recall_searches_the_users_messages_when_asked(vector: bool) -> None:
    """``retrieval.vector``: ``mode: "search"`` ranks the user's messages (keyword ranking here: no vector store)
    and names the thread and message each hit came from; without it, search says it is not configured."""
    async with Memory(storage=InMemoryStore(), options=_options({"vector": vector})) as memory:
        await _thread(memory, "t1", "alice", ["the wifi password is hunter2", "noted"])
        await _thread(memory, "t2", "alice", ["book a table for friday", "done"])
        await _thread(memory, "t3", "bob", ["my wifi password is swordfish", "noted"])
        schema = memory.list_tools()["recall"].parameters["properties"]
        assert ("search" in schema["mode"]["enum"]) is vector and ("query" in schema) is vector
        found = await _recall(memory, "t2", "alice", mode="search", query="wifi password")
    if not vector:
        assert found == {"results": "Search is not configured. Enable it with `retrieval: { vector: true }` and "
                                    "configure a vector store and embedder on your Memory instance.", "count": 0}
        return
    assert "hunter2" in found["results"] and "swordfish" not in found["results"]
    assert "- thread: t1 (about t1)" in found["results"] and "Message from another thread" in found["results"]


def test_observation_groups_survive_a_reflection() -> None:
    """The Reflector sees ``## Group`` sections; its sections map back to their groups (with the ranges of the
    groups they drew lines from), and a text without sections becomes one ``reflection`` group over all ranges."""
    source = "\n\n".join([wrap_in_group("* a fact\n* b fact", "m1:m2", "aaaa"),
                          wrap_in_group("* c fact", "m3:m4", "bbbb")])
    shown = render_groups(source)
    assert shown == "## Group `aaaa`\n_range: `m1:m2`_\n\n* a fact\n* b fact\n\n## Group `bbbb`\n_range: `m3:m4`_\n\n" \
                    "* c fact"
    kept = parse_groups(reconcile_after_reflection("## Group `aaaa`\n_range: `m1:m2`_\n\n* a fact\n* c fact", source)
                        or "")
    assert [(g.id, g.range, g.kind, g.content) for g in kept] == [("aaaa", "m1:m4", "reflection", "* a fact\n* c fact")]
    [merged] = parse_groups(reconcile_after_reflection("* everything, condensed", source) or "")
    assert (merged.range, merged.kind) == ("m1:m4", "reflection")
    assert combine_ranges(parse_groups(wrap_in_group("x", "7:9") + wrap_in_group("y", "3:4"))) == "3:9"
    assert reconcile_after_reflection("* plain", "* no groups here") is None


async def test_the_recall_tool_through_the_chat_servers_door() -> None:
    """``messages_from_ui`` + ``Agent.stream``: the model's ``recall`` call and its output reach the chat client as
    tool parts, and the reply that follows is stored with the call."""
    from threadmind.events import ToolInputAvailableEvent, ToolOutputAvailableEvent
    from threadmind.ui import messages_from_ui

    async with Memory(storage=InMemoryStore(), options=_options({"scope": "thread"})) as memory:
        [first, _] = await _thread(memory, "chat-1", "alice", ["my locker code is 7731", "noted"])
        model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "recall", {"cursor": first.id, "page": 1})]),
                               "Your locker code is 7731."])
        agent = Agent("a", "i", model, memory=memory)
        body = {"id": "chat-1", "trigger": "submit-message",
                "messages": [{"id": "q1", "role": "user", "parts": [{"type": "text", "text": "what was my code?"}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="alice") as stream:
            events = [event async for event in stream]
        stored = (await memory.recall("chat-1", per_page=False)).messages
    called = next(e for e in events if isinstance(e, ToolInputAvailableEvent))
    output = next(e for e in events if isinstance(e, ToolOutputAvailableEvent))
    assert called.tool_name == "recall" and "noted" in output.output["messages"] and output.output["count"] == 1
    reply = stored[-1]
    assert reply.role == "assistant" and "7731" in reply.text
    assert any(isinstance(p, ToolInvocationPart) and p.tool_invocation.tool_name == "recall"
               for p in reply.content.parts)
