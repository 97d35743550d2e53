"""Thread titles: generated once, from the start of the conversation, for a thread that has none.

Reference §1 (generateTitle): the title model sees the conversation as a transcript and answers with a short
title; ``<think>`` blocks and quotes are cut. A title is never replaced, and ``created_at`` never changes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
        store = core.store()  # not actors(): aclose() lets background work finish
        current = await store.get_thread(thread_id)
        if current is None or current.title:
            return None
        with operation_span("threadmind.memory.generate_title", "chat", thread_id=thread_id):
            response = await model.generate(ModelRequest(
                system=[instructions], messages=[Message.user(_transcript(messages))]))
        title = _THINK.sub("", response.text or "").strip().strip("\"'")
        if not title:
            return None
        set_to: str | None = None

        def change(thread: Thread) -> ThreadChange | None:
            return None if thread.title else ThreadChange(title=title)  # never retitle

        async def _set() -> None:
            nonlocal set_to
            try:
                if await store.modify_thread(thread_id, change) is not None:
                    set_to = title
            except ThreadNotFound:  # deleted meanwhile
                pass

        assert core.system is not None
        with operation_span("threadmind.memory.set_title", "update_memory", thread_id=thread_id):
            await core.system.exclusive(thread_id, _set, "set_title", background=True)
        return set_to
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
