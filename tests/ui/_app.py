"""A small Starlette app serving the AI SDK ``useChat`` protocol over any event-stream factory, and a uvicorn runner.

``create_chat_app(factory)`` answers ``POST /api/chat``: the body goes through ``messages_from_ui``, the factory
turns the request into an ``EventStream`` (``agent.stream(...)`` in a real server, a scripted stream in tests) and
the reply is ``ui_message_stream`` with ``UI_MESSAGE_STREAM_HEADERS``. Errors raised before the first chunk map to
HTTP statuses (``ValidationError`` 422, ``ResourceMismatch`` 403, ``ThreadNotFound`` 404, ``ThreadBusy`` 409).
``GET /api/history`` returns ``messages_to_ui`` of what the ``history`` callable gives. A client that disconnects
cancels the stream at once (the response listens for ``http.disconnect``), and the body generator is always closed
in the task that iterated it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from threadmind.codecs import Message
from threadmind.errors import ResourceMismatch, ThreadBusy, ThreadmindError, ThreadNotFound, ValidationError
from threadmind.events import EventStream
from threadmind.ui import UI_MESSAGE_STREAM_HEADERS, messages_from_ui, messages_to_ui, ui_message_stream

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

_STATUSES: tuple[tuple[type[ThreadmindError], int], ...] = (
    (ValidationError, 422), (ResourceMismatch, 403), (ThreadNotFound, 404), (ThreadBusy, 409),
)


def error_status(exc: ThreadmindError) -> int:
    """The HTTP status for an error raised before the reply started (500 for any other)."""
    for cls, status in _STATUSES:
        if isinstance(exc, cls):
            return status
    return 500


def _error_response(exc: ThreadmindError) -> JSONResponse:
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=error_status(exc))


class UIMessageStreamResponse(StreamingResponse):
    """Streams a ``ui_message_stream`` body, or an error status if entering the stream is refused.

    The body is primed, iterated and closed in this one task (an ``AgentStream`` may hold a task group across
    its events); a client disconnect cancels it at once.
    """

    def __init__(self, body: AsyncGenerator[bytes, None]) -> None:
        super().__init__(body, headers=dict(UI_MESSAGE_STREAM_HEADERS))
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(watch_disconnect)
            async with aclosing(self._body) as chunks:
                try:
                    first = await chunks.__anext__()  # enters the stream: a refusal raises here
                except ThreadmindError as exc:
                    await _error_response(exc)(scope, receive, send)
                else:
                    try:
                        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                        await send({"type": "http.response.body", "body": first, "more_body": True})
                        async for chunk in chunks:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    except OSError:  # the client went away while we were sending (ASGI 2.4 servers)
                        pass
            tg.cancel_scope.cancel()


@dataclass
class ChatAppState:
    """What the app saw: every chat request, in order."""

    requests: list[ChatRequest] = field(default_factory=list)


def create_chat_app(
    factory: EventStreamFactory,
    *,
    history: Callable[[], Sequence[Message] | Awaitable[Sequence[Message]]] | None = None,
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
            return _error_response(exc)
        return UIMessageStreamResponse(ui_message_stream(stream))

    async def load_history(request: Request) -> Response:
        stored = history() if history is not None else []
        messages = await stored if isinstance(stored, Awaitable) else stored
        return JSONResponse(messages_to_ui(messages))

    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"]),
                            Route("/api/history", load_history, methods=["GET"])])
    app.state.chat = state
    return app


@asynccontextmanager
async def serve(app: Starlette | Callable[..., Any]) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) for the duration; yields the base URL.

    Runs uvicorn's startup and shutdown in this task (no main loop, no signal handlers taken over).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await server.shutdown(sockets=[sock])
    finally:
        sock.close()
