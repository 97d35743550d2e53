"""The HTTP status a chat server answers for an error raised before its reply started."""

from __future__ import annotations

from ..errors import PayloadTooLarge, ResourceMismatch, ThreadBusy, ThreadmindError, ThreadNotFound, ValidationError

__all__ = ("MAX_BODY_BYTES", "error_body", "error_status")

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest chat request body read by default (4 MiB): a long conversation echoed with a few images fits; a
body that would fill the server's memory does not (``responses.read_json`` answers 413 without reading on)."""

_STATUSES: tuple[tuple[type[ThreadmindError], int], ...] = (
    (PayloadTooLarge, 413), (ValidationError, 422), (ResourceMismatch, 403), (ThreadNotFound, 404), (ThreadBusy, 409),
)


def error_status(exc: ThreadmindError) -> int:
    """``PayloadTooLarge`` 413, ``ValidationError`` 422, ``ResourceMismatch`` 403, ``ThreadNotFound`` 404,
    ``ThreadBusy`` 409; else 500."""
    for cls, status in _STATUSES:
        if isinstance(exc, cls):
            return status
    return 500


def error_body(exc: ThreadmindError) -> dict[str, dict[str, str]]:
    """The JSON body for ``exc``: ``{"error": {"code", "message"}}``, with the error's ``public_message``, which
    never names another resource's ids or threads (log ``exc`` itself for the whole story)."""
    return {"error": {"code": exc.code, "message": exc.public_message}}
