"""Starlette (and FastAPI) helpers for a chat endpoint: the request body read with a size limit, the UI message
stream of an ``AgentStream``, and errors.

Needs ``starlette`` (the ``server`` extra)::

    @app.post("/api/chat")
    async def chat(request):
        try:
            body = await read_json(request)  # over MAX_BODY_BYTES: 413, before any of it is parsed
            stream = agent.stream(messages_from_ui(body), thread_id=body.get("id"), resource_id=user)
        except ThreadmindError as exc:
            return error_response(exc)
        return UIMessageStreamResponse(stream, hide_tools=MEMORY_TOOLS)
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from contextlib import aclosing
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..errors import PayloadTooLarge, ThreadmindError, ValidationError
from ..events import EventStream
from ._status import MAX_BODY_BYTES, error_body, error_status
from ._stream import UI_MESSAGE_STREAM_HEADERS, ui_message_stream

__all__ = ("UIMessageStreamResponse", "error_response", "read_json")


async def read_json(request: Request, *, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """The request's JSON body, read only as far as ``max_bytes``: a larger body (by its ``content-length``, or as
    it arrives) is refused before any of it is parsed, so a client cannot make the server hold what it sends.

    :raises PayloadTooLarge: the body is larger than ``max_bytes`` (HTTP 413 through :func:`error_response`).
    :raises ValidationError: the body is not JSON (422).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the request body has {int(declared)} bytes; this server accepts {max_bytes} at most")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > max_bytes:
            raise PayloadTooLarge(f"the request body is larger than the {max_bytes} bytes this server accepts")
    try:
        return json.loads(received)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ValidationError(f"the request body is not JSON: {exc}") from None


def error_response(exc: ThreadmindError) -> JSONResponse:
    """``{"error": {"code", "message"}}`` with the status of :func:`~threadmind.ui.error_status`."""
    return JSONResponse(error_body(exc), status_code=error_status(exc))


class UIMessageStreamResponse(StreamingResponse):
    """Streams ``stream`` (an ``AgentStream``) as the AI SDK UI message stream, with its headers.

    The stream is entered before the response starts, so a refusal (``ThreadBusy``, ``ResourceMismatch``,
    ``ThreadNotFound``, ``ValidationError``) is answered with its HTTP status (:func:`error_response`) instead
    of a 200. A client that disconnects cancels the run at once (the response listens for ``http.disconnect``):
    the run aborts as ``Agent(on_abort=...)`` says. The stream is entered, iterated and closed in the task that
    serves the request. ``hide_tools``: tool calls left out of the stream (``MEMORY_TOOLS``: the working-memory
    document the model writes), see :func:`~threadmind.ui.ui_message_stream`.
    """

    def __init__(self, stream: EventStream, *, headers: Mapping[str, str] | None = None,
                 hide_tools: Collection[str] = ()) -> None:
        self._body = ui_message_stream(stream, hide_tools=hide_tools)
        super().__init__(self._body, headers={**UI_MESSAGE_STREAM_HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self._body) as chunks:
            try:
                first = await anext(chunks)  # enters the stream: a refusal raises here
            except ThreadmindError as exc:
                await error_response(exc)(scope, receive, send)
                return
            async with anyio.create_task_group() as tg:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_disconnect)
                try:
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                    async for chunk in chunks:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:  # the client went away while we were sending (ASGI 2.4 servers)
                    pass
                tg.cancel_scope.cancel()
