"""The actor that owns one conversation thread.

Every read-modify-write of a thread (persist, load, trim, update, delete, thread-scoped working memory)
runs through this actor's mailbox, one at a time, in arrival order. Ordering of stored messages follows
from that: the store's insertion sequence is assigned in the order this actor submits batches, so
(``created_at``, sequence) is a total order within the thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import msgspec

from ..codecs import Message, Thread
from ..stores._protocol import MessagePage, MessageQuery, SaveHook, Store
from ._actor import Actor

__all__ = (
    "CreateThread",
    "DeleteMessages",
    "DeleteThread",
    "Exclusive",
    "LoadMessages",
    "SaveMessages",
    "ThreadActor",
    "UpdateThread",
)


class SaveMessages(msgspec.Struct, frozen=True):
    """Upsert a batch of this thread's messages atomically (``after`` runs inside the same transaction)."""

    messages: Sequence[Message]
    after: SaveHook | None = None

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.messages.count": len(self.messages)}


class LoadMessages(msgspec.Struct, frozen=True):
    """Read a page of this thread's messages."""

    query: MessageQuery


class CreateThread(msgspec.Struct, frozen=True):
    """Insert the thread row."""

    thread: Thread


class UpdateThread(msgspec.Struct, frozen=True):
    """Set the title and/or shallow-merge metadata."""

    title: str | None = None
    metadata: Mapping[str, Any] | None = None


class DeleteThread(msgspec.Struct, frozen=True):
    """Delete the thread and its messages."""


class DeleteMessages(msgspec.Struct, frozen=True):
    """Delete some of this thread's messages."""

    ids: Sequence[str]


class Exclusive(msgspec.Struct, frozen=True):
    """Run ``fn`` with exclusive access to the thread (for multi-step read-modify-write)."""

    fn: Callable[[], Awaitable[Any]]
    name: str = "exclusive"

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.exclusive.name": self.name}


ThreadCommand = SaveMessages | LoadMessages | CreateThread | UpdateThread | DeleteThread | DeleteMessages | Exclusive


class ThreadActor(Actor[ThreadCommand]):
    """Serializes every operation on one thread; also guards agent turns (``turn_lock``)."""

    def __init__(self, thread_id: str, store: Store, *, mailbox_capacity: int = 1024) -> None:
        super().__init__(thread_id, mailbox_capacity=mailbox_capacity)
        self._store = store
        self.turn_lock = anyio.Lock()
        self._turns = 0

    @property
    def thread_id(self) -> str:
        """The thread this actor owns."""
        return self.key

    @property
    def idle(self) -> bool:
        """Idle means no queued work and no agent turn in progress (a turn must not lose its lock)."""
        return self._turns == 0 and super().idle

    def turn_started(self) -> None:
        """Count an agent turn as in progress (keeps the actor alive between its mailbox operations)."""
        self._turns += 1

    def turn_finished(self) -> None:
        """The turn is over."""
        self._turns -= 1

    async def handle(self, command: ThreadCommand) -> Any:
        store = self._store
        match command:
            case SaveMessages(messages, after):
                if after is None:
                    return await store.save_messages(self.key, messages)
                return await store.save_messages(self.key, messages, after=after)
            case LoadMessages(query):
                page: MessagePage = await store.list_messages(query)
                return page
            case CreateThread(thread):
                return await store.create_thread(thread)
            case UpdateThread(title, metadata):
                return await store.update_thread(self.key, title=title, metadata=metadata)
            case DeleteThread():
                return await store.delete_thread(self.key)
            case DeleteMessages(ids):
                return await store.delete_messages(ids)
            case Exclusive(fn):
                return await fn()
        raise TypeError(f"unknown thread command {type(command).__name__}")  # pragma: no cover
