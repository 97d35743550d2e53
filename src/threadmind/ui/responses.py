"""Starlette (and FastAPI) responses for a chat endpoint: the UI message stream of an ``AgentStream``, and errors.

Needs ``starlette`` (the ``server`` extra)::

    @app.post("/api/chat")
    async def chat(request):
        body = await request.json()
        return UIMessageStreamResponse(agent.stream(messages_from_ui(body), thread_id=body["id"], resource_id=user))
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import aclosing

import anyio
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..errors import ThreadmindError
from ..events import EventStream
from ._status import error_body, error_status
from ._stream import UI_MESSAGE_STREAM_HEADERS, ui_message_stream

__all__ = ("UIMessageStreamResponse", "error_response")


def error_response(exc: ThreadmindError) -> JSONResponse:
    """``{"error": {"code", "message"}}`` with the status of :func:`~threadmind.ui.error_status`."""
    return JSONResponse(error_body(exc), status_code=error_status(exc))


class UIMessageStreamResponse(StreamingResponse):
    """Streams ``stream`` (an ``AgentStream``) as the AI SDK UI message stream, with its headers.

    The stream is entered before the response starts, so a refusal (``ThreadBusy``, ``ResourceMismatch``,
    ``ThreadNotFound``, ``ValidationError``) is answered with its HTTP status (:func:`error_response`) instead
    of a 200. A client that disconnects cancels the run at once (the response listens for ``http.disconnect``):
    the run aborts as ``Agent(on_abort=...)`` says. The stream is entered, iterated and closed in the task that
    serves the request.
    """

    def __init__(self, stream: EventStream, *, headers: Mapping[str, str] | None = None) -> None:
        self._body = ui_message_stream(stream)
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
