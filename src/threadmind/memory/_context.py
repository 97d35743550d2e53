"""``Memory.get_context``: what one model call needs from memory, assembled for callers that run their own model
loop (Mastra's ``getContext``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from .._config import MemoryConfig
from ..codecs import Message
from ..processors._observation_text import CONTINUATION_ID, CONTINUATION_REMINDER, observations_system_message
from ..stores import OMRecord

if TYPE_CHECKING:
    from ._facade import Memory

__all__ = ("MemoryContext", "memory_context")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class MemoryContext(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one model call needs from memory (``Memory.get_context``; Mastra's ``getContext``).

    ``system_message``: the observations block and the working-memory instruction, joined by a blank line (None:
    neither). ``messages``: oldest first; with observations, every message not observed yet (all the resource's
    threads in resource scope), else the configured history (``lastMessages`` or its token budget), as ``recall``
    returns it. ``continuation_message``: with observations, the reminder to place before ``messages`` (never
    stored). ``other_threads_context`` is always None here: threadmind hands resource-scope observations their
    threads' messages in ``messages`` instead.
    """

    system_message: str | None
    messages: list[Message]
    has_observations: bool = False
    om_record: OMRecord | None = None
    continuation_message: Message | None = None
    other_threads_context: str | None = None


async def memory_context(memory: Memory, config: MemoryConfig, thread_id: str,
                         resource_id: str | None) -> MemoryContext:
    """(``Memory.get_context``, arguments checked) Observations, working memory and messages, as Mastra assembles
    them."""
    parts: list[str] = []
    record: OMRecord | None = None
    continuation: Message | None = None
    messages: list[Message] | None = None
    om = config.observational_memory_config
    if om is not None:
        engine = memory._core.door.observational_engine()
        record, unobserved = await engine.load(om, thread_id, resource_id, memory._pipeline.access)
        if record is not None:
            messages = unobserved  # everything after what the observations cover
            if record.active_observations.strip():
                parts.append(observations_system_message(record.active_observations))
                continuation = Message.user(CONTINUATION_REMINDER, id=CONTINUATION_ID, thread_id=thread_id,
                                            resource_id=resource_id, created_at=_EPOCH)
    instruction = await memory.get_system_message(thread_id=thread_id, resource_id=resource_id,
                                                  memory_config=config)
    if instruction:
        parts.append(instruction)
    if messages is None:
        messages = list((await memory.recall(thread_id, resource_id=resource_id, thread_config=config)).messages)
    return MemoryContext(system_message="\n\n".join(parts) if parts else None, messages=messages,
                         has_observations=continuation is not None, om_record=record,
                         continuation_message=continuation)
