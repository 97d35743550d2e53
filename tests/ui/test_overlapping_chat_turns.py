"""Overlapping chat requests on one chat id, through the chat server's door: ``messages_from_ui`` + ``Agent.stream``.

Two tabs, a double submit, or a message sent while the reply to the previous one is still streaming: each request
must get its own reply to its own question, under its own message id, and the thread must alternate, whatever time
the client's body carries (SPEC §11). Run on every store.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.agent import Agent, Tool
from threadmind.codecs import message_to_dict
from threadmind.events import StartEvent
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import InMemoryStore, PostgresStore, SQLiteStore, Store
from threadmind.ui import messages_from_ui

CHAT, USER = "chat-1", "user-1"


def answer(request: ModelRequest) -> str:
    """The scripted model answers the last message it was shown, naming its role."""
    last = request.messages[-1]
    return f"answer to {last.role}: {last.text}"


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """Fresh stores of every kind (a SQLite file, in-memory, a PostgreSQL database of its own)."""
    kind = request.param
    if kind == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return lambda: PostgresStore(dsn, max_size=4)
    if kind == "sqlite":
        return lambda: SQLiteStore(tmp_path / "chat.db", synchronous="NORMAL")
    return InMemoryStore


@asynccontextmanager
async def chat_agent(make_store: Callable[[], Store], model: ScriptedModel) -> AsyncIterator[tuple[Agent, Memory]]:
    async with Memory(storage=make_store(), options={"lastMessages": 40}) as memory:
        yield Agent("chat", "You answer.", model, memory=memory), memory


def ui_user(message_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


async def send(agent: Agent, body: dict[str, Any]) -> str:
    """One request as the example server handles it; returns the ``start`` chunk's message id."""
    start = ""
    async with agent.stream(messages_from_ui(body), thread_id=body["id"], resource_id=USER) as stream:
        async for event in stream:
            if isinstance(event, StartEvent):
                assert event.message_id is not None
                start = event.message_id
    return start


async def rows(memory: Memory) -> list[Message]:
    return (await memory.recall(CHAT, resource_id=USER, per_page=False)).messages


def assert_alternates_and_answers_its_own(stored: list[Message], starts: dict[str, str]) -> None:
    """user, assistant, user, ... with each reply answering the user message just before it, stored under the
    id its client was told in ``start`` (``starts``: user message id → start id)."""
    assert [m.role for m in stored] == ["user", "assistant"] * (len(stored) // 2)
    for question, reply in zip(stored[::2], stored[1::2], strict=True):
        assert reply.text == f"answer to user: {question.text}"
        assert starts[question.id] == reply.id
    assert len({m.id for m in stored}) == len(stored)
    assert [m.created_at for m in stored] == sorted(m.created_at for m in stored)


@pytest.mark.parametrize("clients", [2, 6, 10])
async def test_overlapping_requests_each_get_their_own_reply(make_store: Callable[[], Store], clients: int) -> None:
    model = ScriptedModel(itertools.repeat(answer))
    starts: dict[str, str] = {}
    async with chat_agent(make_store, model) as (agent, memory):
        async def client(i: int) -> None:
            starts[f"u{i}"] = await send(agent, {"id": CHAT, "messages": [ui_user(f"u{i}", f"question {i}")],
                                                 "trigger": "submit-message"})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(clients):
                    tg.start_soon(client, i)
        stored = await rows(memory)
    assert len(stored) == 2 * clients
    assert_alternates_and_answers_its_own(stored, starts)
    # Every model call saw the question of its own request last, never another request's reply.
    assert all(r.messages[-1].role == "user" for r in model.requests)


async def test_clients_that_echo_their_own_history_stay_in_order(make_store: Callable[[], Store]) -> None:
    """Three tabs, three turns each, each tab echoing only what it saw (as useChat does)."""
    model = ScriptedModel(itertools.repeat(answer))
    starts: dict[str, str] = {}
    async with chat_agent(make_store, model) as (agent, memory):
        async def tab(t: int) -> None:
            seen: list[dict[str, Any]] = []
            for turn in range(3):
                question = ui_user(f"t{t}-{turn}", f"tab {t} turn {turn}")
                seen.append(question)
                reply = await send(agent, {"id": CHAT, "messages": list(seen), "trigger": "submit-message"})
                starts[question["id"]] = reply
                seen.append({"id": reply, "role": "assistant",
                             "parts": [{"type": "text", "text": f"answer to user: {question['parts'][0]['text']}"}]})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for t in range(3):
                    tg.start_soon(tab, t)
        stored = await rows(memory)
    assert len(stored) == 18
    assert_alternates_and_answers_its_own(stored, starts)


async def test_a_client_clock_in_the_future_does_not_reorder_later_turns(make_store: Callable[[], Store]) -> None:
    model = ScriptedModel(itertools.repeat(answer))
    starts: dict[str, str] = {}
    async with chat_agent(make_store, model) as (agent, memory):
        future = ui_user("u-future", "from a fast clock", metadata={"createdAt": "2099-01-01T00:00:00.000Z"})
        past = ui_user("u-past", "from a slow clock", metadata={"createdAt": "2001-01-01T00:00:00.000Z"})
        starts["u-future"] = await send(agent, {"id": CHAT, "messages": [future]})
        starts["u-past"] = await send(agent, {"id": CHAT, "messages": [past]})
        starts["u-now"] = await send(agent, {"id": CHAT, "messages": [ui_user("u-now", "no clock")]})
        stored = await rows(memory)
    assert [m.id for m in stored[::2]] == ["u-future", "u-past", "u-now"]
    assert_alternates_and_answers_its_own(stored, starts)
    assert all(m.created_at.year < 2099 for m in stored)


async def test_a_reply_never_continues_an_assistant_message_it_completes_no_tool_call_of(
        make_store: Callable[[], Store]) -> None:
    """A request whose echo ends with a stored reply (no new question, no tool outcome) gets a new message."""
    model = ScriptedModel(itertools.repeat(answer))
    async with chat_agent(make_store, model) as (agent, memory):
        first = await send(agent, {"id": CHAT, "messages": [ui_user("u0", "hello")]})
        echo = [ui_user("u0", "hello"), {"id": first, "role": "assistant",
                                         "parts": [{"type": "text", "text": "answer to user: hello"}]}]
        again = await send(agent, {"id": CHAT, "messages": echo, "trigger": "submit-message"})
        stored = await rows(memory)
    assert again != first
    assert [(m.id, m.text) for m in stored] == [("u0", "hello"), (first, "answer to user: hello"),
                                                (again, "answer to assistant: answer to user: hello")]


async def test_a_client_tool_outcome_still_continues_its_message(make_store: Callable[[], Store]) -> None:
    model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("call-1", "confirm", {"flight": "NH 106"})]),
                           "Booked."])
    confirm = Tool("confirm", "Ask the user", {"type": "object", "properties": {"flight": {"type": "string"}}})
    async with Memory(storage=make_store()) as memory:
        agent = Agent("chat", "You book.", model, memory=memory, tools=[confirm])
        pending = await agent.generate("Book NH 106", thread_id=CHAT, resource_id=USER)
        outcome = message_to_dict(pending.messages[-1])
        outcome["content"]["parts"][-1]["toolInvocation"].update(state="result", result={"confirmed": True})
        async with agent.stream([outcome], thread_id=CHAT, resource_id=USER) as stream:
            start = next(e for e in [e async for e in stream] if isinstance(e, StartEvent))
        stored = await rows(memory)
    assert start.message_id == pending.messages[-1].id
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].text.endswith("Booked.")
