"""A bounded FIFO mailbox: backpressure instead of drops, graceful close, observable statistics.

Built on a ``deque`` plus one asyncio future per *waiting* party (a put into a mailbox with room never
allocates one). A ping-pong through two mailboxes measured ~17 µs per round trip, against ~24 µs with
``anyio.Event`` waiters and ~31 µs with anyio memory object streams (best of 25 runs, same machine).
Unlike a memory stream, ``close()`` keeps already-accepted items deliverable while refusing new ones.
threadmind runs on asyncio, and anyio cancel scopes cancel a task awaiting a plain future as usual.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

import anyio
import msgspec
from anyio.lowlevel import checkpoint

from .._lowlevel import Reply, new_reply
from ..errors import ThreadmindError, ValidationError

__all__ = ("Mailbox", "MailboxClosed", "MailboxStatistics")

T = TypeVar("T")


class MailboxStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a mailbox: queued items, its bound and how many senders wait for room."""

    depth: int
    capacity: int
    waiting_senders: int


class MailboxClosed(ThreadmindError):
    """The mailbox (or its actor) is closed and accepts nothing more."""

    default_code = "THREADMIND_MAILBOX_CLOSED"

    def __init__(self, message: str = "the mailbox is closed and accepts no more items") -> None:
        super().__init__(message)


class Mailbox(Generic[T]):
    """A bounded FIFO queue for one consumer (several work too).

    ``put`` awaits while the mailbox is full and never drops; waiting senders are admitted in arrival
    order as room frees up. ``close`` refuses further puts (and wakes waiting senders with
    :class:`MailboxClosed`) but items already accepted are still delivered; ``get`` raises
    :class:`anyio.EndOfStream` once the mailbox is closed and drained.
    """

    __slots__ = ("_capacity", "_closed", "_getters", "_items", "_putters")

    def __init__(self, capacity: int = 1024) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValidationError(f"capacity must be an integer ≥ 1, got {capacity!r}")
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._closed = False
        # Receivers parked in ``get``; each is woken once, in order, when an item (or the close) arrives.
        # Both waiter queues exist only while someone waits: an idle actor's mailbox is one deque and no more
        # objects for the garbage collector to walk (a registry caches thousands of idle actors).
        self._getters: deque[Reply[None]] | None = None
        # Senders parked in ``put`` with their item; ``get_nowait`` moves the oldest one into ``_items`` and
        # resolves its future with True; ``close`` resolves the rest with False (not admitted).
        self._putters: OrderedDict[Reply[bool], T] | None = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def statistics(self) -> MailboxStatistics:
        """A frozen snapshot of depth, capacity and waiting senders."""
        return MailboxStatistics(depth=len(self._items), capacity=self._capacity,
                                 waiting_senders=len(self._putters or ()))

    def put_nowait(self, item: T) -> None:
        """Enqueue ``item`` without waiting.

        :raises MailboxClosed: the mailbox is closed.
        :raises ~anyio.WouldBlock: the mailbox is full (or senders are already waiting for room).
        """
        if self._closed:
            raise MailboxClosed()
        if self._putters or len(self._items) >= self._capacity:
            raise anyio.WouldBlock
        self._items.append(item)
        if self._getters:
            self._wake_getter()

    async def put(self, item: T) -> None:
        """Enqueue ``item``, waiting for room while the mailbox is full.

        If the call is cancelled while waiting, the item was not enqueued unless room had already been
        handed to it (an actor's ``ask`` covers that case by cancelling the reply).

        :raises MailboxClosed: the mailbox is closed, or was closed while waiting for room.
        """
        if self._closed or not (self._putters or len(self._items) >= self._capacity):
            await checkpoint()  # the wait below is the checkpoint otherwise
            try:
                self.put_nowait(item)
                return
            except anyio.WouldBlock:
                pass
        event: Reply[bool] = new_reply()
        putters = self._putters
        if putters is None:
            putters = self._putters = OrderedDict()
        putters[event] = item
        try:
            admitted = await event
        except BaseException:
            if self._putters is not None:
                self._putters.pop(event, None)
            raise
        finally:
            if not self._putters:
                self._putters = None
        if not admitted:
            raise MailboxClosed()

    def get_nowait(self) -> T:
        """Dequeue the oldest item without waiting.

        :raises ~anyio.WouldBlock: the mailbox is empty (and still open).
        :raises ~anyio.EndOfStream: the mailbox is closed and drained.
        """
        items = self._items
        if items:
            item = items.popleft()
            putters = self._putters
            while putters:
                event, waiting = putters.popitem(last=False)
                if not event.done():  # a cancelled sender is skipped, its item never admitted
                    items.append(waiting)
                    event.set_result(True)
                    break
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def get(self) -> T:
        """Dequeue the oldest item, waiting while the mailbox is empty.

        :raises ~anyio.EndOfStream: the mailbox is closed and drained.
        """
        if self._items or self._closed:
            await checkpoint()  # waiting on the event below is the checkpoint otherwise
        while True:
            try:
                return self.get_nowait()
            except anyio.WouldBlock:
                pass
            event: Reply[None] = new_reply()
            getters = self._getters
            if getters is None:
                getters = self._getters = deque()
            getters.append(event)
            try:
                await event
            except BaseException:
                try:
                    if self._getters is None:
                        raise ValueError
                    self._getters.remove(event)
                except ValueError:
                    # We were woken for an item but will not take it: pass the wake-up on.
                    if self._items:
                        self._wake_getter()
                raise
            finally:
                if not self._getters:
                    self._getters = None

    def close(self) -> None:
        """Refuse further puts; already-accepted items stay deliverable. Idempotent."""
        if self._closed:
            return
        self._closed = True
        putters, self._putters = self._putters, None
        for putter in putters or ():
            if not putter.done():
                putter.set_result(False)
        getters, self._getters = self._getters, None
        for event in getters or ():
            if not event.done():
                event.set_result(None)

    def _wake_getter(self) -> None:
        # Wake the oldest receiver that is still waiting (a cancelled one may linger until it runs).
        getters = self._getters
        while getters:
            event = getters.popleft()
            if not event.done():
                event.set_result(None)
                return
