"""The reply as a message of the run's list: its id, its date, its text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from ..codecs import Message, MessageContent, Part, StepStartPart, TextPart
from ..processors import MessageList
from ..processors._merge import has_client_outcome, should_merge

__all__ = ("final_text", "publish", "stored_id")


def stored_id(message_list: MessageList, response_id: str) -> str:
    """The id the reply will be stored under: ``response_id``, unless this turn's input completes a tool call of
    the latest assistant message (a client tool's outcome or an approval answer, sent back on that message): the
    reply then continues that message (reference §4.4 rule 3). Any other stored assistant message is never
    continued, whatever came before it in the thread."""
    conversation = message_list.get_all()
    if not conversation or conversation[-1].role != "assistant":
        return response_id
    latest = conversation[-1]
    if "input" not in message_list.sources_of(latest.id) or not has_client_outcome(latest):
        return response_id
    probe = Message(response_id, "assistant", MessageContent(parts=[StepStartPart()]), latest.created_at,
                    message_list.thread_id, message_list.resource_id)
    return latest.id if should_merge(latest, probe, "response") else response_id


def publish(message_list: MessageList, response_id: str, started_at: datetime, parts: Sequence[Part], text: str,
            metadata: dict[str, Any] | None = None, *, continues: bool = False) -> None:
    """Put the reply so far into the list as the response message ``response_id``, dated when it started (and
    always after the turn's input); with ``continues`` (see :func:`stored_id`) it is merged into the message it
    continues, per the list's same-id rules."""
    existing = message_list.get(response_id)
    if existing is not None:
        merged = {**(existing.content.metadata or {}), **metadata} if metadata else existing.content.metadata
        content = MessageContent(parts=list(parts), content=text or None, metadata=merged)
        message_list.replace(msgspec.structs.replace(existing, content=content))
        return
    content = MessageContent(parts=list(parts), content=text or None, metadata=metadata)
    created = started_at
    newest = max((m.created_at for m in message_list.get_all()), default=None)
    if newest is not None and created <= newest:
        created = newest + timedelta(milliseconds=1)  # the response always sorts after the turn's input
    message = Message(response_id, "assistant", content, created, message_list.thread_id, message_list.resource_id)
    message_list.add(message, "response", merge=continues)


def final_text(before: list[Message], after: list[Message], text: str) -> str:
    """The run's text; when output processors changed the response, the text of what they left."""
    if len(before) == len(after) and all(a is b for a, b in zip(before, after, strict=True)):
        return text
    last = next((m for m in reversed(after) if m.role == "assistant"), None)
    if last is None:
        return ""
    if last.content.content is not None:
        return last.content.content
    return " ".join(p.text for p in last.content.parts if isinstance(p, TextPart))
