"""A small Starlette app serving the AI SDK ``useChat`` protocol over any event-stream factory, and a uvicorn runner.

``create_chat_app(factory)`` answers ``POST /api/chat``: the body goes through ``messages_from_ui``, the factory
turns the request into an ``EventStream`` (``agent.stream(...)`` in a real server, a scripted stream in tests) and
the reply is ``threadmind.ui.responses.UIMessageStreamResponse``: errors raised before the first chunk map to HTTP
statuses (``ValidationError`` 422, ``ResourceMismatch`` 403, ``ThreadNotFound`` 404, ``ThreadBusy`` 409), a client
that disconnects cancels the stream at once, and the body generator is always closed in the task that iterated it.
``GET /api/history`` returns ``messages_to_ui`` of what the ``history`` callable gives. ``lifespan`` is the app's
(``serve`` runs it: a Memory opened there lives as long as the server).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from threadmind.codecs import Message
from threadmind.errors import ThreadmindError
from threadmind.events import EventStream
from threadmind.ui import error_status, messages_from_ui, messages_to_ui
from threadmind.ui.responses import UIMessageStreamResponse, error_response

__all__ = ("ChatRequest", "UIMessageStreamResponse", "create_chat_app", "error_status", "serve")


@dataclass(frozen=True)
class ChatRequest:
    """One ``POST /api/chat``: the JSON body as the client sent it and its messages."""

    body: dict[str, Any]
    messages: list[Message]

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text
        return ""


EventStreamFactory = Callable[[ChatRequest], EventStream | Awaitable[EventStream]]

@dataclass
class ChatAppState:
    """What the app saw: every chat request, in order."""

    requests: list[ChatRequest] = field(default_factory=list)


def create_chat_app(
    factory: EventStreamFactory,
    *,
    history: Callable[[], Sequence[Message] | Awaitable[Sequence[Message]]] | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """The chat app; ``app.state.chat`` is a :class:`ChatAppState`."""
    state = ChatAppState()

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": {"code": "INVALID_JSON", "message": "the body is not JSON"}},
                                status_code=400)
        try:
            chat_request = ChatRequest(body=body, messages=messages_from_ui(body))
            state.requests.append(chat_request)
            made = factory(chat_request)
            stream: EventStream = await made if isinstance(made, Awaitable) else made
        except ThreadmindError as exc:
            return error_response(exc)
        return UIMessageStreamResponse(stream)

    async def load_history(request: Request) -> Response:
        stored = history() if history is not None else []
        messages = await stored if isinstance(stored, Awaitable) else stored
        return JSONResponse(messages_to_ui(messages))

    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"]),
                            Route("/api/history", load_history, methods=["GET"])], lifespan=lifespan)
    app.state.chat = state
    return app


@asynccontextmanager
async def serve(app: Starlette | Callable[..., Any]) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) for the duration; yields the base URL.

    Runs uvicorn's startup and shutdown (the app's lifespan with them) from this task (no main loop, no signal
    handlers taken over).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=5)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        if server.should_exit:
            raise RuntimeError("the app's lifespan startup failed")
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await server.shutdown(sockets=[sock])
    finally:
        sock.close()
