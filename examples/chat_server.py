"""A chat server for AI SDK ``useChat`` front ends, with memory: ``python examples/chat_server.py``.

``POST /api/chat`` streams the reply as the AI SDK UI message stream and keeps the conversation in SQLite
(``CHAT_DB``): the history the client echoes back is recognised, a reply the user stops is kept as far as it went.
With ``OPENAI_API_KEY`` set it talks to gpt-4o-mini; without it a scripted model echoes.
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
from threadmind.stores import SQLiteStore
from threadmind.ui import messages_from_ui
from threadmind.ui.responses import UIMessageStreamResponse, error_response


def echo(request: ModelRequest) -> str:
    return f"You said: {request.messages[-1].text}"


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    model = "openai/gpt-4o-mini" if os.environ.get("OPENAI_API_KEY") else ScriptedModel(itertools.repeat(echo))
    async with Memory(storage=SQLiteStore(os.environ.get("CHAT_DB", "chat.db"))) as memory:
        app.state.agent = Agent("assistant", "You are a helpful assistant.", model, memory=memory)
        yield


async def chat(request: Request) -> Response:
    user = request.headers.get("x-user-id", "demo-user")  # who is asking: your authentication goes here
    try:
        body = await request.json()
        stream = request.app.state.agent.stream(messages_from_ui(body), thread_id=body.get("id"), resource_id=user)
    except ThreadmindError as exc:  # ValidationError 422, ResourceMismatch 403, ThreadNotFound 404, ThreadBusy 409
        return error_response(exc)
    except ValueError:
        return Response("the body must be JSON", status_code=400)
    return UIMessageStreamResponse(stream)  # a refusal (another user's thread, a busy one) is its HTTP status


app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"])], lifespan=lifespan)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
