"""Thread titles: generated once, from the start of the conversation, for a thread that has none.

Reference §1 (generateTitle): the title model sees the conversation as a transcript and answers with a short
title; ``<think>`` blocks and quotes are cut. A title is never replaced, and ``created_at`` never changes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..actors._thread_actor import GetThread, ModifyThread
from ..codecs import Message, Thread
from ..codecs._transcript import part_texts
from ..errors import ThreadNotFound
from ..stores import ThreadChange
from ..tracing import operation_span

if TYPE_CHECKING:
    from ..models import LanguageModel
    from ._core import MemoryCore

__all__ = ("TITLE_INSTRUCTIONS", "generate_title")

_log = logging.getLogger("threadmind.memory")
_THINK = re.compile(r"<think>.*?</think>", re.S)
TITLE_INSTRUCTIONS = (
    "You will generate a short title based on the first message a user begins a conversation with. "
    "Ensure it is not more than 80 characters long. The title should be a summary of the user's message. "
    "Do not use quotes or colons. The entire text you return will be used as the title."
)


async def generate_title(
    core: MemoryCore, model: LanguageModel, thread_id: str, messages: Sequence[Message], instructions: str
) -> str | None:
    """Ask ``model`` for a title and set it if the thread still has none; the title set, or None.

    Failures are logged and leave the title untouched (a title is a nicety, never a reason to fail a turn).
    """
    from ..models import ModelRequest

    try:
        # background work: aclose() lets it finish
        current: Thread | None = await core.door.ask(thread_id, GetThread(), background=True)
        if current is None or current.title:
            return None
        with operation_span("threadmind.memory.generate_title", "chat", thread_id=thread_id):
            response = await model.generate(ModelRequest(
                system=[instructions], messages=[Message.user(_transcript(messages))]))
        title = _THINK.sub("", response.text or "").strip().strip("\"'")
        if not title:
            return None

        def change(thread: Thread) -> ThreadChange | None:
            return None if thread.title else ThreadChange(title=title)  # never retitle

        with operation_span("threadmind.memory.set_title", "update_memory", thread_id=thread_id):
            try:
                titled = await core.door.ask(thread_id, ModifyThread(change, "set_title"), background=True)
            except ThreadNotFound:  # deleted meanwhile
                return None
        return title if titled is not None else None
    except Exception:
        _log.warning("title generation for thread %s failed; title left untouched", thread_id, exc_info=True)
        return None


def _transcript(messages: Sequence[Message]) -> str:
    labels = {"reasoning": "Reasoning", "tool": "Tool"}
    lines: list[str] = []
    for message in messages:
        role = "User" if message.role == "user" else "Assistant"
        for kind, text in part_texts(message, tool_chars=200):
            lines.append(f"{labels.get(kind, role)}: {text}")
    return "\n".join(lines)
