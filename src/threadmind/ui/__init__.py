"""The server side of the AI SDK's ``useChat``: the UI message stream and UI messages in both directions.

Checked against the ``ai`` npm package 7.0.173 (``UIMessageChunk``, ``UIMessage``, ``validateUIMessages``,
``createUIMessageStreamResponse``). With Starlette or FastAPI, :mod:`threadmind.ui.responses` has the response
classes (``UIMessageStreamResponse`` enters the stream first, so a refusal becomes its HTTP status)::

    @app.post("/api/chat")
    async def chat(request):
        try:
            body = await read_json(request)  # a body over MAX_BODY_BYTES is refused (413) before it is parsed
            stream = agent.stream(messages_from_ui(body), thread_id=body.get("id"), resource_id=user_id)
        except ThreadmindError as exc:
            return error_response(exc)
        return UIMessageStreamResponse(stream, hide_tools=MEMORY_TOOLS)

Any other framework: refuse a body over ``MAX_BODY_BYTES`` before parsing it, then send ``ui_message_stream(stream)``
with ``UI_MESSAGE_STREAM_HEADERS``, after awaiting its first chunk (which enters the stream and raises a refusal:
answer it with ``error_status(exc)`` and ``error_body(exc)``).

A browser is not trusted: ``messages_from_ui`` refuses system messages unless the server opts in, a message id of
another conversation is refused before the model runs, new messages are ordered by the server when their turn
holds the thread, and what a client is told of an error (``error_body``, the stream's ``error`` chunk) never names
another user's ids or threads.
"""

from __future__ import annotations

from .._public import present_as
from ._from_ui import messages_from_ui as messages_from_ui
from ._status import MAX_BODY_BYTES as MAX_BODY_BYTES
from ._status import error_body as error_body
from ._status import error_status as error_status
from ._stream import MEMORY_TOOLS as MEMORY_TOOLS
from ._stream import UI_MESSAGE_STREAM_HEADERS as UI_MESSAGE_STREAM_HEADERS
from ._stream import ui_finish_reason as ui_finish_reason
from ._stream import ui_message_stream as ui_message_stream
from ._to_ui import messages_to_ui as messages_to_ui

__all__ = (
    "MAX_BODY_BYTES",
    "MEMORY_TOOLS",
    "UI_MESSAGE_STREAM_HEADERS",
    "error_body",
    "error_status",
    "messages_from_ui",
    "messages_to_ui",
    "ui_finish_reason",
    "ui_message_stream",
)

present_as(globals(), __name__)
