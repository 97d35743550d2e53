"""The newest messages of one thread, kept by its actor so the default history window needs no database read.

Every write to a thread goes through its actor, so the actor can keep the tail of the thread exactly in step:
a save merges its messages in (new ids after every stored one with the same ``created_at``, as the store's
insertion sequence orders them; re-saved ids in place), and anything it cannot follow exactly (deletes,
edits, moves, other processes) drops the tail, which is reloaded on the next read. A tail also expires after
``ttl`` seconds, which bounds how stale it can be when another process writes the same file.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from datetime import datetime

from ..codecs import Message

__all__ = ("Tail",)


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
        self.messages = list(messages)
        self._created = [m.created_at for m in self.messages]
        self._ids = {m.id for m in self.messages}
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
            return self.messages[-limit:] if limit else []
        return None

    def merge(self, saved: Sequence[Message], capacity: int) -> bool:
        """Fold a committed save in; False when the tail can no longer be kept exact (drop it)."""
        ids = self._ids
        oldest: datetime | None = self._created[0] if self._created else None
        fresh: list[Message] = []
        for message in saved:
            # Most saves carry only new ids: the id set answers without indexing the tail on every save.
            at = next(i for i, m in enumerate(self.messages) if m.id == message.id) if message.id in ids else None
            if at is None:
                fresh.append(message)
            elif message.created_at != self._created[at]:
                return False
            else:  # re-saved: new content, same place (the store keeps created_at and position)
                self.messages[at] = message
        for message in fresh:  # new rows: after every stored row with the same created_at
            if not self.complete and (oldest is None or message.created_at <= oldest):
                return False  # older than the window: an old message re-saved, or a new one we cannot place
            position = bisect.bisect_right(self._created, message.created_at)
            self.messages.insert(position, message)
            self._created.insert(position, message.created_at)
            ids.add(message.id)
            self.total += 1
        if len(self.messages) > capacity:
            drop = len(self.messages) - capacity
            ids.difference_update(m.id for m in self.messages[:drop])
            del self.messages[:drop]
            del self._created[:drop]
            self.complete = False
        return True
