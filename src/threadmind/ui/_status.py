"""The HTTP status a chat server answers for an error raised before its reply started."""

from __future__ import annotations

from ..errors import ResourceMismatch, ThreadBusy, ThreadmindError, ThreadNotFound, ValidationError

__all__ = ("error_body", "error_status")

_STATUSES: tuple[tuple[type[ThreadmindError], int], ...] = (
    (ValidationError, 422), (ResourceMismatch, 403), (ThreadNotFound, 404), (ThreadBusy, 409),
)


def error_status(exc: ThreadmindError) -> int:
    """``ValidationError`` 422, ``ResourceMismatch`` 403, ``ThreadNotFound`` 404, ``ThreadBusy`` 409; else 500."""
    for cls, status in _STATUSES:
        if isinstance(exc, cls):
            return status
    return 500


def error_body(exc: ThreadmindError) -> dict[str, dict[str, str]]:
    """The JSON body for ``exc``: ``{"error": {"code", "message"}}``."""
    return {"error": {"code": exc.code, "message": exc.message}}
