"""The AI SDK's own client against ``Agent.stream`` with a real Memory: what the browser shows is what memory keeps.

``js/chat_client.mjs`` (the ``ai`` package's ``AbstractChat`` + ``DefaultChatTransport``, what ``useChat`` runs)
talks to ``_app.create_chat_app`` served by uvicorn on 127.0.0.1, whose factory is ``agent.stream`` over a Memory
opened in the app's lifespan (SQLite file). The conversation: a question answered with a server tool and a client
tool (the client answers it and sends it back, as ``useChat`` does), a follow-up, a reply the client stops half
way, and one more message after the stop. Every request echoes the whole conversation.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette

from threadmind import Memory, Message
from threadmind.agent import Agent, Tool
from threadmind.codecs import TextPart, ToolInvocationPart
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import SQLiteStore
from threadmind.ui import messages_to_ui

from ._app import ChatRequest, create_chat_app, serve
from ._node import node_binary

pytestmark = pytest.mark.timeout(600)  # a cold `npm ci`; warm runs take a few seconds

CHAT_ID = "chat-agent"
USER = "user-1"
WEATHER_QUESTION = "What's the weather in Paris?"


class Brain:
    """The scripted model: answers from what the request holds; the "slow" reply stops after "Thinking"."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.slow_closed = anyio.Event()

    async def _slow(self) -> AsyncGenerator[str, None]:
        try:
            yield "Thinking"
            await anyio.sleep_forever()  # the client stops before the rest
            yield " never sent"
        finally:
            self.slow_closed.set()

    def __call__(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        last = request.messages[-1]
        if last.role == "user":
            answers: dict[str, Any] = {
                WEATHER_QUESTION: ModelResponse(text="Let me check.",
                                                tool_calls=[ToolCall("call-w", "weather", {"city": "Paris"})]),
                "thanks": "You're welcome.",
                "after the stop": "Back again.",
            }
            return self._slow() if last.text == "slow" else answers[last.text]
        states = {p.tool_invocation.tool_call_id: p.tool_invocation.state for p in last.content.parts
                  if isinstance(p, ToolInvocationPart)}
        if states.get("call-c") == "result":
            return "Booked."
        assert states == {"call-w": "result"}, states
        return ModelResponse(text="It is 21°C.",
                             tool_calls=[ToolCall("call-c", "confirm", {"question": "Book a table?"})])


@dataclass
class Chat:
    client: dict[str, Any]  # what chat_client.mjs printed
    stored: list[Message]
    brain: Brain
    echoed: list[list[str]]  # the message ids each request carried


async def _run_chat(folder: Path, database: Path) -> Chat:
    brain = Brain()
    weather = Tool("weather", "the weather in a city", {"type": "object"}, lambda args: {"tempC": 21})
    confirm = Tool("confirm", "ask the user to confirm", {"type": "object"})  # a client tool

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        options = {"generateTitle": {"model": ScriptedModel(["Weather in Paris"]), "emitEvent": True}}
        async with Memory(storage=SQLiteStore(str(database)), options=options) as memory:
            app.state.memory = memory
            app.state.agent = Agent("chat", "You are helpful.", ScriptedModel(itertools.repeat(brain)),
                                    memory=memory, tools=[weather, confirm])
            yield

    def reply(request: ChatRequest) -> Any:
        return app.state.agent.stream(request.messages, thread_id=request.body["id"], resource_id=USER)

    async def history() -> list[Message]:
        messages: list[Message] = (await app.state.memory.recall(CHAT_ID, resource_id=USER, per_page=False)).messages
        return messages

    app = create_chat_app(reply, history=history, lifespan=lifespan)
    async with serve(app) as url:
        plan = {
            "api": f"{url}/api/chat", "history": f"{url}/api/history", "chatId": CHAT_ID,
            "clientTools": {"confirm": {"answer": "yes"}},
            "steps": [{"send": WEATHER_QUESTION}, {"send": "thanks"}, {"send": "slow", "stopOnText": "Thinking"},
                      {"send": "after the stop"}],
        }
        done = await anyio.run_process([node_binary(), "chat_client.mjs", json.dumps(plan)], cwd=folder,
                                       check=False)
        assert done.returncode == 0, done.stderr.decode()
        with anyio.fail_after(10):
            await brain.slow_closed.wait()
        stored = await history()
    echoed = [[m["id"] for m in r.body["messages"]] for r in app.state.chat.requests]
    return Chat(json.loads(done.stdout), stored, brain, echoed)


@pytest.fixture(scope="module")
def chat(ai_client: Path, tmp_path_factory: pytest.TempPathFactory) -> Chat:
    database = tmp_path_factory.mktemp("agent-chat") / "chat.db"
    return anyio.run(_run_chat, ai_client, database, backend_options={"debug": True})


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def _stored_text(message: Message) -> str:
    return "".join(p.text for p in message.content.parts if isinstance(p, TextPart))


def _tools(message: Message) -> dict[str, Any]:
    return {p.tool_invocation.tool_call_id: p.tool_invocation for p in message.content.parts
            if isinstance(p, ToolInvocationPart)}


class TestMemoryKeepsWhatTheClientSaw:
    def test_each_message_is_stored_exactly_once_under_the_clients_ids(self, chat: Chat) -> None:
        client_ids = [m["id"] for m in chat.client["messages"]]
        stored_ids = [m.id for m in chat.stored]
        assert stored_ids == client_ids
        assert len(set(stored_ids)) == len(stored_ids) == 8
        assert [m.role for m in chat.stored] == ["user", "assistant"] * 4

    def test_every_request_echoed_the_whole_conversation(self, chat: Chat) -> None:
        ids = [m.id for m in chat.stored]
        # the question, the client tool's answer (the reply so far), then each new message after the conversation
        assert chat.echoed == [ids[:1], ids[:2], ids[:3], ids[:5], ids[:7]]

    def test_the_reply_texts_match(self, chat: Chat) -> None:
        shown = [_texts(m) for m in chat.client["messages"]]
        assert shown == [_stored_text(m) for m in chat.stored]
        assert shown[1::2] == ["Let me check.It is 21°C.Booked.", "You're welcome.", "Thinking", "Back again."]

    def test_the_client_tools_result_completed_the_stored_call(self, chat: Chat) -> None:
        tools = _tools(chat.stored[1])
        assert (tools["call-w"].state, tools["call-w"].result) == ("result", {"tempC": 21})
        assert (tools["call-c"].state, tools["call-c"].args, tools["call-c"].result) == (
            "result", {"question": "Book a table?"}, {"answer": "yes"})
        assert {"toolName": "confirm", "toolCallId": "call-c", "input": {"question": "Book a table?"}} in \
            chat.client["toolCalls"]  # the client ran it (onToolCall) and sent its output back

    def test_the_stopped_reply_is_stored_as_far_as_it_went_and_marked_aborted(self, chat: Chat) -> None:
        stopped = chat.stored[5]
        assert _stored_text(stopped) == "Thinking"
        assert (stopped.content.metadata or {}).get("aborted") is True
        assert [m.id for m in chat.stored if (m.content.metadata or {}).get("aborted")] == [stopped.id]
        steps = {step["send"]: step for step in chat.client["steps"]}
        assert steps["slow"]["status"] == "ready" and steps["slow"]["error"] is None
        finishes = [(f["isAbort"], f["isError"]) for f in chat.client["finishes"]]
        assert finishes.count((True, False)) == 1

    def test_the_turn_after_the_stop_sees_the_partial_reply(self, chat: Chat) -> None:
        last = chat.brain.requests[-1]
        assert [(m.role, m.text) for m in last.messages][-3:] == [
            ("user", "slow"), ("assistant", "Thinking"), ("user", "after the stop")]

    def test_the_model_saw_the_conversation_once_per_request(self, chat: Chat) -> None:
        for request in chat.brain.requests:
            ids = [m.id for m in request.messages]
            assert len(ids) == len(set(ids))


class TestTheClientSees:
    def test_the_title_arrives_before_the_first_reply_finished(self, chat: Chat) -> None:
        assert chat.client["data"] == [{"type": "data-thread-title", "data": {"threadId": CHAT_ID,
                                                                              "title": "Weather in Paris"},
                                        "transient": True}]

    def test_the_first_reply_has_the_tool_parts_as_the_sdk_builds_them(self, chat: Chat) -> None:
        reply = chat.client["messages"][1]
        assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "tool-weather", "step-start", "text",
                                                      "tool-confirm", "step-start", "text"]
        assert reply["parts"][2] == {"type": "tool-weather", "toolCallId": "call-w", "state": "output-available",
                                     "input": {"city": "Paris"}, "output": {"tempC": 21}}

    def test_the_stored_history_loads_back_as_valid_ui_messages(self, chat: Chat) -> None:
        history = chat.client["history"]
        assert history["valid"], history["problem"]
        assert history["messages"] == messages_to_ui(chat.stored)
        assert history["messages"][5]["metadata"]["aborted"] is True
