"""The reusable chat app over real HTTP (uvicorn on 127.0.0.1, httpx): headers, bytes, statuses, disconnects."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from threadmind.errors import ResourceMismatch, ThreadBusy, ThreadmindError, ThreadNotFound, ValidationError
from threadmind.events import FinishEvent, StartEvent, TextDeltaEvent, TextEndEvent, TextStartEvent
from threadmind.ui import UI_MESSAGE_STREAM_HEADERS, messages_to_ui

from ._app import ChatRequest, create_chat_app, serve
from ._scripted import ScriptedEventStream, Step

USE_CHAT_BODY = {"id": "chat-1", "trigger": "submit-message", "messageId": None,
                 "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}]}
REPLY: list[Step] = [StartEvent(message_id="a-1"), TextStartEvent(id="t"), TextDeltaEvent(id="t", delta="Hello"),
                     TextEndEvent(id="t"), FinishEvent()]


class Sources:
    """A factory handing out one scripted stream per request, and keeping them for the assertions."""

    def __init__(self, script: list[Step], fail_on_enter: BaseException | None = None) -> None:
        self.script = script
        self.fail_on_enter = fail_on_enter
        self.made: list[ScriptedEventStream] = []

    def __call__(self, request: ChatRequest) -> ScriptedEventStream:
        source = ScriptedEventStream(self.script, fail_on_enter=self.fail_on_enter)
        self.made.append(source)
        return source


@asynccontextmanager
async def running(sources: Sources) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_chat_app(sources, history=lambda: app.state.chat.requests[-1].messages)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client, app


async def test_a_chat_request_streams_the_ui_message_stream() -> None:
    sources = Sources(REPLY)
    async with running(sources) as (client, app):
        response = await client.post("/api/chat", json=USE_CHAT_BODY)
        assert response.status_code == 200
        for name, value in UI_MESSAGE_STREAM_HEADERS.items():
            assert response.headers[name] == value
        frames = response.content.split(b"\n\n")
        assert frames[-2:] == [b"data: [DONE]", b""]
        chunks = [json.loads(frame.removeprefix(b"data: ")) for frame in frames[:-2]]
        assert chunks[0] == {"type": "start", "messageId": "a-1"}
        assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
        (request,) = app.state.chat.requests
        assert request.body == USE_CHAT_BODY and [m.id for m in request.messages] == ["u-1"]
        history = await client.get("/api/history")
        assert history.json() == messages_to_ui(request.messages)
    assert sources.made[0].exit_type is None


@pytest.mark.parametrize(("error", "status"), [
    (ThreadBusy("th-1"), 409), (ThreadNotFound("th-1"), 404), (ResourceMismatch("th-1", "alice", "bob"), 403),
    (ValidationError("`thread_id` is required"), 422),
], ids=["busy", "not-found", "other-resource", "invalid"])
async def test_a_refusal_while_entering_the_stream_is_an_http_status(error: ThreadmindError, status: int) -> None:
    async with running(Sources(REPLY, fail_on_enter=error)) as (client, _app):
        response = await client.post("/api/chat", json=USE_CHAT_BODY)
        assert response.status_code == status
        assert response.json() == {"error": {"code": error.code, "message": error.public_message}}
        assert "alice" not in response.text  # the owner of another user's thread is never named to a client


async def test_a_malformed_body_is_422_naming_the_field() -> None:
    broken = {**USE_CHAT_BODY, "messages": [{"id": "u-1", "role": "user", "parts": [{"type": 3}]}]}
    sources = Sources(REPLY)
    async with running(sources) as (client, _app):
        response = await client.post("/api/chat", json=broken)
        assert response.status_code == 422
        assert "`messages[0].parts[0].type`" in response.json()["error"]["message"]
        not_json = await client.post("/api/chat", content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 400
    assert sources.made == []


async def test_a_client_that_disconnects_mid_reply_stops_the_source() -> None:
    never = anyio.Event()
    sources = Sources([StartEvent(message_id="a-1"), TextStartEvent(id="t"), TextDeltaEvent(id="t", delta="Thin"),
                       never, FinishEvent()])
    async with running(sources) as (client, _app):
        async with client.stream("POST", "/api/chat", json=USE_CHAT_BODY) as response:
            async for raw in response.aiter_raw():
                if b"Thin" in raw:
                    break
        with anyio.fail_after(10):
            await sources.made[0].exited.wait()
    (source,) = sources.made
    assert source.exit_type is anyio.get_cancelled_exc_class()  # the disconnect cancelled the waiting run
    assert not never.is_set()
