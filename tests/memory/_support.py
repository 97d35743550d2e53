"""Helpers shared by the Memory tests: message factories and a fixed clock origin."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmind import Memory, Message
from threadmind.stores._protocol import Store

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
StoreFactory = Callable[[], Store]

# asyncio debug mode captures a traceback per task/callback (about 5x slower); the few tests that run
# thousands of operations use the plain loop so the suite stays fast. Everything else keeps debug on.
PLAIN_LOOP = pytest.mark.parametrize("anyio_backend", [pytest.param(("asyncio", {"debug": False}), id="plain")])


def msg(
    message_id: str, thread_id: str = "t1", resource_id: str = "r1", *, ms: int = 0, text: str | None = None,
    role: str = "user", **fields: Any,
) -> Message:
    """A text message at ``BASE + ms`` milliseconds."""
    fields.setdefault("created_at", BASE + timedelta(milliseconds=ms))
    factory = Message.assistant if role == "assistant" else Message.user
    return factory(text if text is not None else f"text of {message_id}", id=message_id, thread_id=thread_id,
                   resource_id=resource_id, **fields)


async def all_ids(memory: Memory, thread_id: str) -> list[str]:
    """Every message id of a thread in (created_at, sequence) order."""
    result = await memory.recall(thread_id, per_page=False)
    return [m.id for m in result.messages]
