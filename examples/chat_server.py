"""A chat server for AI SDK ``useChat`` front ends, with memory: ``python examples/chat_server.py``.

``POST /api/chat`` streams the reply as the AI SDK UI message stream and keeps the conversation in SQLite
(``CHAT_DB``), or in PostgreSQL when ``DATABASE_URL`` is set: the history the client echoes back is recognised, a
reply the user stops is kept as far as it went, overlapping requests on one chat each get their own reply. With
``OPENAI_API_KEY`` set it talks to gpt-4o-mini; without it a scripted model echoes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threadmind import Memory, ThreadmindError
from threadmind.agent import Agent
from threadmind.models import ModelRequest, ScriptedModel
from threadmind.stores import PostgresStore, SQLiteStore, Store
from threadmind.ui import MEMORY_TOOLS, messages_from_ui
from threadmind.ui.responses import UIMessageStreamResponse, error_response, read_json


def echo(request: ModelRequest) -> str:
    return f"You said: {request.messages[-1].text}"


def storage() -> Store:
    dsn = os.environ.get("DATABASE_URL")  # postgresql://user:password@host/db (pip install -e '.[postgres]')
    return PostgresStore(dsn) if dsn else SQLiteStore(os.environ.get("CHAT_DB", "chat.db"))


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    model = "openai/gpt-4o-mini" if os.environ.get("OPENAI_API_KEY") else ScriptedModel(itertools.repeat(echo))
    async with Memory(storage=storage()) as memory:
        app.state.agent = Agent("assistant", "You are a helpful assistant.", model, memory=memory)
        yield


async def chat(request: Request) -> Response:
    user = request.headers.get("x-user-id", "demo-user")  # who is asking: your authentication goes here
    try:
        body = await read_json(request)  # over 4 MiB (MAX_BODY_BYTES): 413, before any of it is parsed
        stream = request.app.state.agent.stream(messages_from_ui(body), thread_id=body.get("id"), resource_id=user)
    except ThreadmindError as exc:  # 413, ValidationError 422, ResourceMismatch 403, ThreadNotFound 404, ThreadBusy 409
        return error_response(exc)  # {"error": {"code", "message"}}, never naming another user's ids or threads
    # A refusal (another user's thread, a busy one) is its HTTP status; memory's tool calls stay on the server.
    return UIMessageStreamResponse(stream, hide_tools=MEMORY_TOOLS)


app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"])], lifespan=lifespan)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
