"""The actor that owns one conversation thread.

Every read-modify-write of a thread (persist, load, trim, update, delete, thread-scoped working memory)
runs through this actor, one at a time, in arrival order (through its mailbox, or in the caller's task
when the actor is idle; see ``Actor.run_now``). Ordering of stored messages follows
from that: the store's insertion sequence is assigned in the order this actor submits batches, so
(``created_at``, sequence) is a total order within the thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import anyio
import msgspec

from .._config import MessageHistoryConfig
from .._history_window import load_token_window
from ..codecs import Message, Thread
from ..errors import ResourceMismatch, ThreadNotFound, ValidationError
from ..stores import Include, Lease, MessagePage, MessageQuery, Store, ThreadChange
from ..stores._vector_rows import SavesVectorRows, VectorRows
from ..tokens import TokenCounter
from ..tracing import ATTR_CONVERSATION_ID, ATTR_THREAD_ID
from ._actor import NOT_NOW, Actor
from ._tail import Tail

__all__ = (
    "TAIL_CAPACITY",
    "TAIL_MAX",
    "CreateThread",
    "CreateThreadWithMessages",
    "DeleteMessages",
    "DeleteThread",
    "Exclusive",
    "LoadMessages",
    "GetThread",
    "LoadTokenWindow",
    "LoadWindow",
    "ModifyThread",
    "MoveThread",
    "PatchThreadMetadata",
    "SaveMessages",
    "SaveObserver",
    "ThreadActor",
    "UpdateThread",
)


class SaveObserver(Protocol):
    """Told, in the thread's commit order, that a save starts and how it ended (the index overlaps its work)."""

    async def started(self) -> object | None:
        """The save is about to commit: the vector rows it is to write itself (``save_messages_with_vectors``
        of a store that can, see ``RowsForSave``), or None. Must not raise."""

    def finished(self, saved: Sequence[Message] | None) -> None:
        """The stored messages, or None when the save failed or its outcome is unknown."""


class SaveMessages(msgspec.Struct, frozen=True):
    """Upsert a batch of this thread's messages atomically (``mark_pending``: and mark them as awaiting
    vectors in the same transaction).

    ``observer`` hears when the save starts and how it ended; it is always told the end once started.
    """

    messages: Sequence[Message]
    mark_pending: bool = False
    observer: SaveObserver | None = None
    fence: Lease | None = None

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.messages.count": len(self.messages)}


class LoadMessages(msgspec.Struct, frozen=True):
    """Read a page of this thread's messages."""

    query: MessageQuery


class LoadWindow(msgspec.Struct, frozen=True):
    """The newest ``limit`` messages (ascending) and the thread's message count, from the actor's tail.

    With ``resource_id`` the thread must belong to it (``ResourceMismatch``) and exist (``ThreadNotFound``,
    unless ``tolerate_missing``).
    """

    limit: int
    resource_id: str | None = None
    tolerate_missing: bool = False


class LoadTokenWindow(msgspec.Struct, frozen=True):
    """The newest messages that fit ``history``'s token budget and ``max_messages``, after the thread's trim
    boundary, with the messages of ``includes`` merged in, ascending (``Memory.recall`` with ``messageHistory``):
    read in the thread's order, between its writes."""

    history: MessageHistoryConfig
    max_messages: int | None
    includes: Sequence[Include] = ()
    resource_id: str | None = None
    counter: TokenCounter | None = None


class GetThread(msgspec.Struct, frozen=True):
    """The thread row (or None), from the actor's cache when fresh; its ``updated_at`` may lag behind saves."""


class CreateThread(msgspec.Struct, frozen=True):
    """Insert the thread row."""

    thread: Thread


class UpdateThread(msgspec.Struct, frozen=True):
    """Set the title and/or shallow-merge metadata."""

    title: str | None = None
    metadata: Mapping[str, Any] | None = None


class MoveThread(msgspec.Struct, frozen=True):
    """File the thread and all its messages under ``resource_id`` (``Store.update_thread_resource_id``)."""

    resource_id: str


class CreateThreadWithMessages(msgspec.Struct, frozen=True):
    """Make this new thread with these messages in one store transaction (a clone); a thread already there is
    refused with ``ValidationError`` carrying ``exists_code``."""

    thread: Thread
    messages: Sequence[Message]
    exists_code: str = "THREADMIND_THREAD_EXISTS"


class DeleteThread(msgspec.Struct, frozen=True):
    """Delete the thread and its messages."""


class DeleteMessages(msgspec.Struct, frozen=True):
    """Delete some of this thread's messages."""

    ids: Sequence[str]


class PatchThreadMetadata(msgspec.Struct, frozen=True):
    """Ask ``patch`` for a metadata patch of the thread as stored and write it (None: no write), in one store
    transaction (``Store.modify_thread``: no process can write between the read and the write).

    A read-modify-write of the metadata alone (the token limiter's boundary): the actor keeps its tail, as
    no message changes, and remembers the row it wrote.
    """

    patch: Callable[[Thread], Mapping[str, Any] | None]
    name: str = "patch_thread_metadata"
    fence: Lease | None = None

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.exclusive.name": self.name}


class ModifyThread(msgspec.Struct, frozen=True):
    """Ask ``change`` what to write of the thread as stored (None: nothing) and write it, in one store transaction
    (``Store.modify_thread``: no process can write between the read and the write). ``change`` is a pure
    synchronous function of the row (it may raise to refuse, e.g. ``ResourceMismatch``); working memory's merge
    rules stay with its caller. No message changes: the actor keeps its tail and remembers the row it wrote.
    """

    change: Callable[[Thread], ThreadChange | None]
    name: str = "modify_thread"
    fence: Lease | None = None

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.exclusive.name": self.name}


class Exclusive(msgspec.Struct, frozen=True):
    """Run ``fn`` with exclusive access to the thread (for multi-step read-modify-write).

    ``thread_unchanged``: ``fn`` writes neither this thread's messages nor its row (observational memory
    writes only its own records), so the actor keeps its cached tail and row.
    """

    fn: Callable[[], Awaitable[Any]]
    name: str = "exclusive"
    thread_unchanged: bool = False

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.exclusive.name": self.name}


ThreadCommand = (
    SaveMessages | LoadMessages | LoadWindow | LoadTokenWindow | GetThread | CreateThread | UpdateThread
    | PatchThreadMetadata | ModifyThread | MoveThread | CreateThreadWithMessages | DeleteThread | DeleteMessages
    | Exclusive
)

# A thread actor keeps as many of the thread's newest messages as the longest window read through it (the
# agent's last N, a token budget's pages, the rows since an observation), at least TAIL_MIN and at most
# TAIL_MAX. A reload after the TTL reads just that many: for last-10 history 16 rows, not 64 (a recall of a
# stale thread: p50 1.0 -> 0.53 ms).
TAIL_MIN = 16
TAIL_MAX = 256
TAIL_CAPACITY = 64  # the least a reload for rows since a time reads (they may reach further back)
TAIL_TTL = 2.0  # seconds before the tail is re-read (bounds staleness if another process writes the thread)


def _reads_since(query: MessageQuery, thread_id: str) -> bool:
    """Whether ``query`` asks for every message of ``thread_id`` from a time on, ascending, unfiltered.

    Reads of the whole thread (no start) keep going to the store: ``recall(per_page=False)`` then also sees
    rows written straight into the store, past the actor.
    """
    bound = query.date_range
    return (query.thread_id == thread_id and query.per_page is False and query.page == 0
            and query.direction == "ASC" and not query.include and not query.metadata
            and bound is not None and bound.start is not None and bound.end is None)


class ThreadActor(Actor[ThreadCommand]):
    """Serializes every operation on one thread; also guards agent turns (``turn_lock``)."""

    key_attributes = (ATTR_THREAD_ID, ATTR_CONVERSATION_ID)

    def __init__(self, thread_id: str, store: Store, *, mailbox_capacity: int = 1024, ttl: float = TAIL_TTL,
                 versions: Callable[[str], int] | None = None) -> None:
        super().__init__(thread_id, mailbox_capacity=mailbox_capacity)
        self._store = store
        self._ttl = ttl  # seconds the cached row and tail are trusted (math.inf: until a write says otherwise)
        self._turn_lock: anyio.Semaphore | None = None  # made by the first agent turn (see turn_lock)
        self._turns = 0
        self._tail: Tail | None = None
        # How many of the newest messages the tail keeps: grows (up to TAIL_MAX) to the longest window asked.
        self._capacity = TAIL_MIN
        self._thread: tuple[Thread | None, float] | None = None  # (row, expires at)
        # The store's write count for this thread, when it keeps one (WriteCounts): the count this actor
        # last saw, and how many of this command's store calls write. ``versions``: the store's
        # ``thread_version``, bound once for all the actors of a system (not an object per actor to collect).
        self._versions: Callable[[str], int] | None = versions if versions is not None else store.thread_version

        self._seen: int | None = None
        self._own_writes = 0

    @property
    def thread_id(self) -> str:
        """The thread this actor owns."""
        return self.key

    @property
    def turn_lock(self) -> anyio.Semaphore:
        """Held for the length of one agent turn; made on first use, so a thread that never runs a turn (most
        of the live ones in a deployment of many threads) costs no semaphore and waiter queue.

        A semaphore, not a lock: a stream abandoned mid-turn is closed by the event loop's finalizer in another
        task, which must be able to give the turn back. fast_acquire: an uncontended turn takes it without a
        yield (one event-loop pass per turn).
        """
        lock = self._turn_lock
        if lock is None:
            lock = self._turn_lock = anyio.Semaphore(1, fast_acquire=True)
        return lock

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
        """Run ``command``; with a store that counts its writes, drop the caches a write past us made stale.

        The caches (row and tail) are trusted while the store's count for this thread is the one this actor
        last saw: a command starting on another count finds them gone, and one whose own writes do not
        explain the count at its end (a write straight into the store meanwhile) leaves them gone.
        """
        versions = self._versions
        if versions is None:
            return await self._handle(command)
        start = versions(self.key)
        if start != self._seen:  # written past this actor (e.g. straight into the store)
            self._tail = self._thread = None
        self._own_writes = 0
        try:
            return await self._handle(command)
        finally:
            end = versions(self.key)
            if end != start + self._own_writes:
                self._tail = self._thread = None
            self._seen = end

    async def _handle(self, command: ThreadCommand) -> Any:
        store = self._store
        match command:
            case SaveMessages(messages, mark_pending, observer, fence):
                rows = None if observer is None else await observer.started()
                self._own_writes += 1
                try:
                    if rows is None:
                        saved = await store.save_messages(self.key, messages, mark_pending=mark_pending, fence=fence)
                    else:  # the vector store made the rows for this store: it writes them in the save
                        saved = (await cast(SavesVectorRows, store).save_messages_with_vectors(
                            {self.key: messages}, cast(VectorRows, rows), fence=fence))[self.key]
                except BaseException:
                    self._tail = None  # the outcome is unknown to us: re-read next time
                    if observer is not None:
                        observer.finished(None)
                    raise
                if observer is not None:
                    observer.finished(saved)
                if self._tail is not None and not self._tail.merge(saved, self._capacity):
                    self._tail = None
                # The cached row stays: only its updatedAt moved, and GetThread serves agent turns, which
                # need the owner and metadata (Memory.get_thread_by_id reads the store).
                return saved
            case LoadMessages(query):
                cached = self.answer_now(command)
                if cached is not NOT_NOW:
                    return cached
                since = _reads_since(query, self.key)
                if since and (self._tail is None or not self._tail.fresh):
                    # A stale or missing tail may cover it once reloaded.
                    await self._load_tail(max(self._capacity, TAIL_CAPACITY))
                    cached = self._since(query)
                    if cached is not NOT_NOW:
                        return cached
                page: MessagePage = await store.list_messages(query)
                if since and len(page.messages) < TAIL_MAX:  # keep that many from now on: served from memory
                    self._capacity = min(TAIL_MAX, max(self._capacity, len(page.messages) + TAIL_CAPACITY // 2))
                return page
            case LoadWindow(limit, resource_id, tolerate_missing):
                cached = self.answer_now(command)
                if cached is not NOT_NOW:
                    return cached
                return await self._load_window(limit, resource_id, tolerate_missing)
            case LoadTokenWindow(history, max_messages, includes, resource_id, counter):
                return await load_token_window(store, self.key, resource_id, history, max_messages, includes,
                                               counter=counter)
            case GetThread():
                cached = self.answer_now(command)
                if cached is not NOT_NOW:
                    return cached
                if self._tail is None or not self._tail.fresh:
                    # An agent turn asks for the row, then for its history: when both have expired (a thread
                    # idle for over 2 s, the usual chat), read them together.
                    self._thread = None
                    await self._load_tail(self._capacity)
                    assert self._thread is not None
                    return self._thread[0]
                row = await store.get_thread(self.key)
                self._remember(row)
                return row
            case CreateThread(thread):
                self._tail = self._thread = None
                self._own_writes += 1
                created = await store.create_thread(thread)
                self._tail = Tail([], 0, created.resource_id, clock=self._clock, ttl=self._ttl)
                self._remember(created)
                return created
            case UpdateThread(title, metadata):
                self._thread = None
                self._own_writes += 1
                updated = await store.update_thread(self.key, title=title, metadata=metadata)
                self._remember(updated)
                return updated
            case PatchThreadMetadata(patch, _, fence):
                self._thread = None

                def change(current: Thread) -> ThreadChange | None:
                    changes = patch(current)
                    return None if changes is None else ThreadChange(metadata=changes)

                self._own_writes += 1
                patched = await store.modify_thread(self.key, change, fence=fence)
                if patched is not None:
                    self._remember(patched)
                return patched
            case ModifyThread(modify, _, fence):
                self._thread = None
                self._own_writes += 1
                modified = await store.modify_thread(self.key, modify, fence=fence)
                if modified is not None:
                    self._remember(modified)
                return modified
            case MoveThread(resource_id):
                self._tail = self._thread = None  # every message changes owner
                self._own_writes += 1
                moved = await store.update_thread_resource_id(self.key, resource_id)
                self._remember(moved)
                return moved
            case CreateThreadWithMessages(thread, messages, exists_code):
                self._tail = self._thread = None
                if await store.get_thread(self.key) is not None:
                    raise ValidationError(f"Thread with id {self.key} already exists", code=exists_code)
                self._own_writes += 1
                created = await store.create_thread_with_messages(thread, messages)
                self._remember(created)
                return created
            case DeleteThread():
                self._tail = self._thread = None
                return await store.delete_thread(self.key)
            case DeleteMessages(ids):
                self._tail = self._thread = None  # updatedAt moves
                return await store.delete_messages(ids)
            case Exclusive(fn, _, thread_unchanged):
                if not thread_unchanged:
                    self._tail = self._thread = None  # an arbitrary read-modify-write: trust neither afterwards
                return await fn()
        raise TypeError(f"unknown thread command {type(command).__name__}")  # pragma: no cover

    def runs_inline(self, command: ThreadCommand) -> bool:
        """Store-bound commands run in an idle actor's caller's task; ``Exclusive`` runs user code: mailbox."""
        return not isinstance(command, Exclusive)

    def answer_now(self, command: ThreadCommand) -> Any:
        """Cached reads: the thread row and history windows while they are fresh (see :meth:`handle`)."""
        match command:
            case GetThread():
                cached = self._thread
                if cached is not None and self._clock() < cached[1] and self._in_step():
                    return cached[0]
            case LoadWindow(limit, resource_id, tolerate_missing):
                tail = self._tail
                if tail is not None and tail.fresh and self._in_step():
                    window = tail.window(limit)
                    if window is not None:
                        return self._page(tail, window, limit, resource_id, tolerate_missing)
            case LoadMessages(query):
                return self._since(query)
        return NOT_NOW

    def _since(self, query: MessageQuery) -> MessagePage | Any:
        """Every message from a time on, ascending (observational memory's unobserved rows), from the tail.

        Only the plain form (this thread, all rows from a start bound, no filters or include windows),
        and only when the tail provably holds every matching row: it is complete, or its oldest row is older
        than the bound (the tail is the newest rows in store order, so nothing it lacks can match).
        """
        tail = self._tail
        if (tail is None or not tail.fresh or not tail.messages or not self._in_step()
                or not _reads_since(query, self.key)
                or (query.resource_id is not None and query.resource_id != tail.owner)):
            return NOT_NOW
        bound = query.date_range
        assert bound is not None and bound.start is not None  # _reads_since
        start, exclusive = bound.start, bound.start_exclusive
        oldest = tail.messages[0].created_at
        if not tail.complete and (oldest > start or (oldest == start and not exclusive)):
            return NOT_NOW
        if exclusive:
            rows = [m for m in tail.messages if m.created_at > start]
        else:
            rows = [m for m in tail.messages if m.created_at >= start]
        return MessagePage(messages=rows, total=len(rows), page=0, per_page=False, has_more=False)

    def _in_step(self) -> bool:
        """No write reached the store past this actor since it last looked (always, for a store that does not
        count its writes)."""
        versions = self._versions
        return versions is None or versions(self.key) == self._seen

    def _remember(self, thread: Thread | None) -> None:
        self._thread = (thread, self._clock() + self._ttl)

    async def _load_window(self, limit: int, resource_id: str | None, tolerate_missing: bool) -> MessagePage:
        """A window the cached tail cannot answer (stale, missing, or too short): re-read the tail first."""
        self._capacity = max(self._capacity, min(limit, TAIL_MAX))
        tail = await self._load_tail(max(limit, self._capacity))
        window = tail.window(limit)
        assert window is not None
        if self._tail is None and resource_id is not None:  # rows of mixed resources: ask the store exactly
            page = await self._store.list_messages(
                MessageQuery(thread_id=self.key, resource_id=resource_id, per_page=limit, direction="DESC"))
            window = page.messages[::-1]
            tail = Tail(window, page.total, tail.owner, clock=self._clock, ttl=0.0)
        return self._page(tail, window, limit, resource_id, tolerate_missing)

    def _page(
        self, tail: Tail, window: list[Message], limit: int, resource_id: str | None, tolerate_missing: bool
    ) -> MessagePage:
        if resource_id is not None:
            if tail.owner is None and not tolerate_missing:
                raise ThreadNotFound(self.key, message=f"No thread found with id {self.key}")
            if tail.owner is not None and tail.owner != resource_id:
                raise ResourceMismatch(self.key, tail.owner, resource_id)
        return MessagePage(messages=window, total=tail.total, page=0, per_page=limit, has_more=tail.total > limit)

    async def _load_tail(self, size: int) -> Tail:
        # The owner comes from the cached row while it is fresh (an agent turn on a thread idle for over 2 s
        # has just re-read it); else row and tail come together, in one read where the store offers it.
        cached = self._thread
        store = self._store
        if cached is not None and self._clock() < cached[1]:
            thread = cached[0]
            page = await store.list_messages(MessageQuery(thread_id=self.key, per_page=size, direction="DESC"))
        else:
            thread, page = await store.get_thread_with_tail(self.key, size)
            self._remember(thread)
        owner = thread.resource_id if thread is not None else None
        messages = page.messages[::-1]
        tail = Tail(messages, page.total, owner, clock=self._clock, ttl=self._ttl)
        # Only a tail whose rows all carry the owner's resource id answers resource-filtered reads exactly.
        self._tail = tail if all(m.resource_id == owner for m in messages) else None
        return tail
