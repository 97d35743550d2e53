"""The newest messages of one thread, kept by its actor so the default history window needs no database read.

Every write to a thread goes through its actor, so the actor can keep the tail of the thread exactly in step:
a save merges its messages in (new ids after every stored one with the same ``created_at``, as the store's
insertion sequence orders them; re-saved ids in place), and anything it cannot follow exactly (deletes,
edits, moves, other processes) drops the tail, which is reloaded on the next read. A tail also expires after
``ttl`` seconds, which bounds how stale it can be when another process writes the same file.

Every live conversation keeps a tail (10 000 by default), so what a tail holds is kept out of the garbage
collector's sight: a full collection walks every tracked object and what it points to, and at 10 000 tails of 10
messages each the tails' lists, id sets and the messages' part lists made a full collection take 116–144 ms
here, against 33 ms kept as below. A tail holds tuples (untracked once they hold only untracked objects) and a
dict of ids (never tracked: strings and None), and :func:`settle` untracks the part lists of the messages it keeps.
"""

from __future__ import annotations

import bisect
import ctypes
import gc
import sys
from collections.abc import Callable, Sequence
from datetime import datetime

from ..codecs import Message

__all__ = ("Tail", "settle")


def _untracker() -> Callable[[object], None] | None:
    """CPython's ``PyObject_GC_UnTrack`` (safe on an object already untracked); None elsewhere."""
    if sys.implementation.name != "cpython":
        return None
    try:
        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    except AttributeError:  # an interpreter that does not export it: the lists stay tracked
        return None
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    return untrack


_UNTRACK = _untracker()


def settle(messages: Sequence[Message]) -> None:
    """Take the part lists of ``messages`` out of the collector's sight where every part is untracked (text,
    plain data): such a list cannot be in a reference cycle, and the messages a tail keeps are frozen (their
    lists are never changed: a change would be a change to the cache). A list holding a tracked part (a tool
    call's nested arguments) stays tracked. ``Message`` and ``MessageContent`` are untracked structs already."""
    if _UNTRACK is None:
        return
    is_tracked = gc.is_tracked
    for message in messages:
        parts = message.content.parts
        if is_tracked(parts) and not any(map(is_tracked, parts)):
            _UNTRACK(parts)


class Tail:
    """The newest ``capacity`` messages of a thread (ascending), the thread's message count and owner."""

    __slots__ = ("_clock", "_created", "_expires", "_ids", "complete", "messages", "owner", "total")

    def __init__(
        self,
        messages: Sequence[Message],
        total: int,
        owner: str | None,
        *,
        clock: Callable[[], float],
        ttl: float,
    ) -> None:
        settle(messages)
        self.messages: tuple[Message, ...] = tuple(messages)
        self._created: tuple[datetime, ...] = tuple(m.created_at for m in self.messages)
        self._ids: dict[str, None] = dict.fromkeys(m.id for m in self.messages)
        self.total = total
        self.owner = owner
        self.complete = total <= len(self.messages)
        self._clock = clock
        self._expires = clock() + ttl

    @property
    def fresh(self) -> bool:
        """Not expired."""
        return self._clock() < self._expires

    def window(self, limit: int) -> list[Message] | None:
        """The newest ``limit`` messages, ascending; None when the tail holds too few to be sure."""
        if limit <= len(self.messages) or self.complete:
            return list(self.messages[-limit:]) if limit else []
        return None

    def merge(self, saved: Sequence[Message], capacity: int) -> bool:
        """Fold a committed save in; False when the tail can no longer be kept exact (drop it)."""
        ids = self._ids
        messages = list(self.messages)
        created = list(self._created)
        oldest: datetime | None = created[0] if created else None
        fresh: list[Message] = []
        for message in saved:
            # Most saves carry only new ids: the id dict answers without indexing the tail on every save.
            at = next(i for i, m in enumerate(messages) if m.id == message.id) if message.id in ids else None
            if at is None:
                fresh.append(message)
            elif message.created_at != created[at]:
                return False
            else:  # re-saved: new content, same place (the store keeps created_at and position)
                messages[at] = message
        for message in fresh:  # new rows: after every stored row with the same created_at
            if not self.complete and (oldest is None or message.created_at <= oldest):
                return False  # older than the window: an old message re-saved, or a new one we cannot place
            position = bisect.bisect_right(created, message.created_at)
            messages.insert(position, message)
            created.insert(position, message.created_at)
            ids[message.id] = None
            self.total += 1
        if len(messages) > capacity:
            drop = len(messages) - capacity
            for gone in messages[:drop]:
                ids.pop(gone.id, None)
            del messages[:drop]
            del created[:drop]
            self.complete = False
        settle(saved)
        self.messages = tuple(messages)
        self._created = tuple(created)
        return True
