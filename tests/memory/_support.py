"""What the Memory tests share beyond tests/_factories.py: their message signature (id first, milliseconds
after ``BASE``, thread ``t1`` of resource ``r1``) and the plain-loop mark."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tests._factories import BASE, StoreFactory, all_ids, text_msg

from threadmind import Message

__all__ = ["BASE", "PLAIN_LOOP", "StoreFactory", "all_ids", "msg"]

# asyncio debug mode captures a traceback per task/callback (about 5x slower); the few tests that run
# thousands of operations use the plain loop so the suite stays fast. Everything else keeps debug on.
PLAIN_LOOP = pytest.mark.parametrize("anyio_backend", [pytest.param(("asyncio", {"debug": False}), id="plain")])


def msg(
    message_id: str, thread_id: str = "t1", resource_id: str = "r1", *, ms: int = 0, text: str | None = None,
    role: str = "user", created_at: datetime | None = None,
) -> Message:
    """A text message at ``BASE + ms`` milliseconds (or ``created_at``); any role but ``assistant`` is a user."""
    return text_msg("assistant" if role == "assistant" else "user",
                    text if text is not None else f"text of {message_id}", id=message_id,
                    at=created_at if created_at is not None else BASE + timedelta(milliseconds=ms),
                    thread_id=thread_id, resource_id=resource_id)
