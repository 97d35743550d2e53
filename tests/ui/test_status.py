"""error_status and error_body: what a chat server answers for an error raised before its reply started."""

from __future__ import annotations

import pytest

from threadmind.errors import (
    ModelError,
    ResourceMismatch,
    StorageError,
    ThreadBusy,
    ThreadmindError,
    ThreadNotFound,
    ValidationError,
)
from threadmind.ui import error_body, error_status


@pytest.mark.parametrize(("error", "status"), [
    (ValidationError("`thread_id` is required"), 422), (ResourceMismatch("t", "alice", "bob"), 403),
    (ThreadNotFound("t"), 404), (ThreadBusy("t"), 409), (StorageError("disk full"), 500), (ModelError("down"), 500),
])
def test_each_refusal_has_its_status(error: ThreadmindError, status: int) -> None:
    assert error_status(error) == status
    assert error_body(error) == {"error": {"code": error.code, "message": error.message}}
