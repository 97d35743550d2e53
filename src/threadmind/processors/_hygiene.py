"""What never gets persisted: system messages, transient signals, working-memory tags and tool parts.

Shared by ``Memory.save_messages`` and the ``MessageHistory`` output processor (reference §1, §3.2 step 4).
"""

from __future__ import annotations

import msgspec

from .._history_window import is_transient_signal
from ..codecs import Message, MessageContent, Part, TextPart, ToolInvocationPart

__all__ = ("WM_TOOL_NAME", "persistable", "strip_working_memory_tags")

WM_TOOL_NAME = "updateWorkingMemory"
_OPEN = "<working_memory>"
_CLOSE = "</working_memory>"


def strip_working_memory_tags(text: str) -> str:
    """Remove ``<working_memory>…</working_memory>`` blocks; an unclosed tag keeps the rest of the text."""
    start = text.find(_OPEN)
    if start < 0:
        return text
    out: list[str] = []
    pos = 0
    while start >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break
        out.append(text[pos:start])
        pos = end + len(_CLOSE)
        start = text.find(_OPEN, pos)
    out.append(text[pos:])
    stripped = "".join(out)
    return stripped.strip() if stripped != text else text


def _clean_parts(parts: list[Part], *, history_step: bool) -> tuple[list[Part], bool]:
    changed = False
    kept: list[Part] = []
    for part in parts:
        if isinstance(part, ToolInvocationPart):
            invocation = part.tool_invocation
            if invocation.tool_name == WM_TOOL_NAME or (history_step and invocation.state == "partial-call"):
                changed = True
                continue
        elif isinstance(part, TextPart) and _OPEN in part.text:
            text = strip_working_memory_tags(part.text)
            if text != part.text:
                part = msgspec.structs.replace(part, text=text)
                changed = True
        kept.append(part)
    return kept, changed


def persistable(message: Message, *, history_step: bool = False) -> Message | None:
    """The message as it should be stored, or None when nothing of it should be.

    ``history_step``: the MessageHistory output step's rules (reference §3.2 step 4), which also drop
    ``partial-call`` parts and a message whose parts were all removed; ``Memory.save_messages`` (§1) keeps
    partial calls and a message that still has text.
    """
    if message.role == "system" or is_transient_signal(message):
        return None
    content = message.content
    parts, changed = _clean_parts(content.parts, history_step=history_step)
    text = content.content
    if text is not None and _OPEN in text:
        new_text = strip_working_memory_tags(text)
        if new_text != text:
            text = new_text
            changed = True
    if not parts and (not text or (history_step and changed and content.parts)):
        return None
    if not changed:
        return message
    new_content: MessageContent = msgspec.structs.replace(content, parts=parts, content=text)
    return msgspec.structs.replace(message, content=new_content)
