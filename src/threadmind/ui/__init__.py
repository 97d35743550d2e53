"""The server side of the AI SDK's ``useChat``: the UI message stream and UI messages in both directions.

Checked against the ``ai`` npm package 7.0.173 (``UIMessageChunk``, ``UIMessage``, ``validateUIMessages``,
``createUIMessageStreamResponse``). With Starlette or FastAPI, :mod:`threadmind.ui.responses` has the response
classes (``UIMessageStreamResponse`` enters the stream first, so a refusal becomes its HTTP status)::

    @app.post("/api/chat")
    async def chat(request):
        body = await request.json()
        stream = agent.stream(messages_from_ui(body), thread_id=body["id"], resource_id=user_id)
        return UIMessageStreamResponse(stream)

Any other framework: send ``ui_message_stream(stream)`` with ``UI_MESSAGE_STREAM_HEADERS``, after awaiting its
first chunk (which enters the stream and raises a refusal: answer it with ``error_status(exc)``).
"""

from __future__ import annotations

from ._from_ui import messages_from_ui as messages_from_ui
from ._status import error_body as error_body
from ._status import error_status as error_status
from ._stream import UI_MESSAGE_STREAM_HEADERS as UI_MESSAGE_STREAM_HEADERS
from ._stream import ui_finish_reason as ui_finish_reason
from ._stream import ui_message_stream as ui_message_stream
from ._to_ui import messages_to_ui as messages_to_ui

__all__ = (
    "UI_MESSAGE_STREAM_HEADERS",
    "error_body",
    "error_status",
    "messages_from_ui",
    "messages_to_ui",
    "ui_finish_reason",
    "ui_message_stream",
)
