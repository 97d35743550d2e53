"""error_status and error_body: what a chat server answers for an error raised before its reply started."""

from __future__ import annotations

import pytest

from threadmind.errors import (
    MessageIdTaken,
    ModelError,
    PayloadTooLarge,
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
    (MessageIdTaken("m-1", "alices-thread", "t"), 422), (PayloadTooLarge("the body is over 4 MiB"), 413),
])
def test_each_refusal_has_its_status(error: ThreadmindError, status: int) -> None:
    assert error_status(error) == status
    assert error_body(error) == {"error": {"code": error.code, "message": error.public_message}}


@pytest.mark.parametrize("error", [ResourceMismatch("t", "alice", "bob"), MessageIdTaken("m-1", "alices-thread", "t")],
                         ids=["other-resource", "id-of-another-thread"])
def test_a_body_never_names_another_resources_ids_or_threads(error: ThreadmindError) -> None:
    """The operator's message names them (for logs); what a client is told does not."""
    assert "alice" in error.message
    assert "alice" not in str(error_body(error))
