"""What memory processors may do with memory: one narrow surface, ``MemoryAccess``.

A processor built by ``Memory`` gets the Memory's own access, which routes every read of a thread through
that thread's actor (served from its cache when fresh) and the turn's save through it as one step, so it
takes its place in the thread's order. A processor built by hand on a bare ``Store`` gets ``StoreAccess``,
the same surface straight over the store (for pipelines outside a Memory). Either way a processor never holds
more than this: no thread deletes, no resource writes, no raw transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._history_window import MessageReader
from ..codecs import Message, Resource, Thread
from ..errors import ThreadNotFound, ValidationError
from ..stores import MessagePage, MessageQuery, Store, ThreadPage

__all__ = ("AccessBase", "MemoryAccess", "StoreAccess", "TurnEmbedder", "as_access",
           "embed_stored")

_log = logging.getLogger("threadmind.semantic_recall")


class TurnEmbedder(Protocol):
    """What embeds a persisted turn: the index behind the ``semantic-recall`` processor."""

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int:
        """Embed and index ``messages``; with ``wait``, return once their vectors are queryable."""
        ...


async def embed_stored(embedder: TurnEmbedder, stored: Sequence[Message]) -> None:
    """Queue a committed turn's messages for their vectors (an agent turn does not wait for them; see
    ``IndexActor.upsert_on_commit``). A failure is logged, not raised (the turn is durable; its messages stay marked
    as awaiting vectors, and the index retries them)."""
    new = [m for m in stored if m.role != "system"]
    if not new:
        return
    try:
        await embedder.upsert_messages(new, wait=False)
    except Exception:
        _log.warning("embedding the turn's messages failed; they will be retried", exc_info=True)



@runtime_checkable
class MemoryAccess(MessageReader, Protocol):
    """The reads memory processors make, and the one write: persisting the turn."""

    async def list_threads(self, *, resource_id: str | None = None, per_page: int | bool = 100) -> ThreadPage:
        """Threads of a resource (observational memory in resource scope reads them all)."""
        ...

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages by id, in any thread; unknown ids skipped."""
        ...

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row, or None."""
        ...

    async def persist_turn(self, thread: Thread, messages: Sequence[Message], *, mark_pending: bool = False,
                           embed: TurnEmbedder | None = None) -> list[Message]:
        """Save ``messages`` into ``thread``, creating the thread first when it is missing, in one step of the
        thread's owner; returns them as stored. ``mark_pending`` as in ``Store.save_messages``. With ``embed``, the
        stored messages get vectors through it, searchable soon after this returns (``IndexActor.upsert_on_commit``
        states the rule; an embedding failure leaves them awaiting vectors, and the save stands)."""
        ...


class AccessBase:
    """Marks the built-in ``MemoryAccess`` implementations, so ``as_access`` recognises them without the
    (slow) structural protocol check."""

    __slots__ = ()


class StoreAccess(AccessBase):
    """``MemoryAccess`` straight over a ``Store``, for processors built outside a Memory."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self.store.get_thread(thread_id)

    async def list_threads(self, *, resource_id: str | None = None, per_page: int | bool = 100) -> ThreadPage:
        return await self.store.list_threads(resource_id=resource_id, per_page=per_page)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        return await self.store.list_messages(query)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self.store.get_messages_by_id(ids)

    async def get_resource(self, resource_id: str) -> Resource | None:
        return await self.store.get_resource(resource_id)

    async def persist_turn(self, thread: Thread, messages: Sequence[Message], *, mark_pending: bool = False,
                           embed: TurnEmbedder | None = None) -> list[Message]:
        store = self.store
        try:
            saved = await store.save_messages(thread.id, messages, mark_pending=mark_pending)
        except ThreadNotFound:  # the thread is gone (or never was): make it, then save (reference: ensure)
            try:
                await store.create_thread(thread)
            except ValidationError:  # made meanwhile by someone else: save into theirs
                pass
            saved = await store.save_messages(thread.id, messages, mark_pending=mark_pending)
        if embed is not None:  # no thread actor to overlap the embedding with the commit: after it
            await embed_stored(embed, saved)
        return saved


def as_access(storage: Store | MemoryAccess) -> MemoryAccess:
    """A processor's ``storage`` argument as ``MemoryAccess`` (a bare store is wrapped in ``StoreAccess``)."""
    if isinstance(storage, AccessBase):  # nominal: ~0.1 µs, where the protocol check costs ~7 µs
        return storage  # type: ignore[return-value]
    if isinstance(storage, MemoryAccess):
        return storage

    return StoreAccess(storage)
