"""The storage protocol every backend implements, and the query/result records it speaks.

``Memory`` owns policy (history windows, recall, processors); a store only persists and queries.
Ordering everywhere is (``created_at``, per-thread insertion sequence), so equal timestamps never
reorder. Every write method is atomic: it commits fully or raises and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from ..codecs import Message, Resource, Thread
from ..errors import ConfigError

if TYPE_CHECKING:
    from ._om import ObservationalMemoryStore
    from ._vector_records import VectorRecords

__all__ = (
    "UNSET",
    "DateRange",
    "STORE_CAPABILITIES",
    "STORE_METHODS",
    "SaveHook",
    "Include",
    "Lease",
    "Leases",
    "MessagePage",
    "MessageQuery",
    "ReadModifyWrite",
    "ResourceChange",
    "SideRecords",
    "Store",
    "ThreadChange",
    "ThreadPage",
    "ThreadsAndMessages",
    "check_store",
    "UnsetType",
)

T = TypeVar("T")
#: A hook run inside a message save's own transaction (SQL stores pass their connection).
SaveHook = Callable[[Any, Sequence[Message]], None]
UNSET = msgspec.UNSET
UnsetType = msgspec.UnsetType


class Include(msgspec.Struct, frozen=True, kw_only=True):
    """A context window around one message: the message, ``previous`` before it and ``next`` after it."""

    id: str
    with_previous_messages: int = 0
    with_next_messages: int = 0


class DateRange(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on ``created_at``; inclusive unless the matching ``*_exclusive`` flag is set."""

    start: datetime | None = None
    end: datetime | None = None
    start_exclusive: bool = False
    end_exclusive: bool = False


class MessageQuery(msgspec.Struct, frozen=True, kw_only=True):
    """One ``list_messages`` request (reference §5.3 semantics)."""

    thread_id: str | list[str]
    resource_id: str | None = None
    page: int = 0
    per_page: int | bool = 40  # False = all rows, 0 = none (only ``include`` windows)
    direction: Literal["ASC", "DESC"] = "ASC"
    include: list[Include] = msgspec.field(default_factory=list)
    date_range: DateRange | None = None
    metadata: dict[str, Any] | None = None  # scalar equality on content.metadata.<key>
    # False: the store may skip counting; ``total`` is then only the rows through this page (+1 when more
    # follow) and ``has_more`` stays exact. For readers that page on without showing a total.
    include_total: bool = True


class MessagePage(msgspec.Struct, frozen=True, kw_only=True):
    """Messages in the requested direction plus paging facts."""

    messages: list[Message]
    total: int
    page: int
    per_page: int | bool
    has_more: bool


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """A holder's claim on a key (``thread:<id>`` for an agent turn), and the fencing token its writes carry.

    Writes made with ``fence=lease`` are refused with ``LeaseLost`` (and write nothing) once the lease was
    taken over by another holder, which happens only after this holder stopped renewing it for ``ttl``.
    """

    key: str
    owner: str
    token: int
    acquired_at: float


class ThreadChange(msgspec.Struct, frozen=True, kw_only=True):
    """What a read-modify-write of a thread writes: a new title and/or metadata keys (shallow-merged)."""

    title: str | None = None
    metadata: Mapping[str, Any] | None = None


class ResourceChange(msgspec.Struct, frozen=True, kw_only=True):
    """What a read-modify-write of a resource writes: working memory and/or metadata keys (shallow-merged)."""

    working_memory: str | None | UnsetType = UNSET
    metadata: Mapping[str, Any] | None = None


class ThreadPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of threads."""

    threads: list[Thread]
    total: int
    page: int
    per_page: int | bool
    has_more: bool


@runtime_checkable
class ThreadsAndMessages(Protocol):
    """Threads, messages and resources, kept durably, with the write counts the actors' caches trust: the first
    capability of a :class:`Store` (every write atomic, all or nothing)."""

    async def open(self) -> None:
        """Create or validate the schema and connections; idempotent."""

    async def aclose(self) -> None:
        """Flush and close everything; idempotent."""

    # threads -----------------------------------------------------------------------------------
    async def create_thread(self, thread: Thread) -> Thread:
        """Insert a new thread; ``ValidationError`` if the id exists."""
        ...

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread or None."""
        ...

    async def list_threads(
        self,
        *,
        resource_id: str | None = None,
        page: int = 0,
        per_page: int | bool = 100,
        order_by: Literal["created_at", "updated_at"] = "created_at",
        direction: Literal["ASC", "DESC"] = "DESC",
        metadata: Mapping[str, Any] | None = None,
    ) -> ThreadPage:
        """Threads filtered by owner and scalar metadata equality."""
        ...

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Set the title (when given), shallow-merge metadata, bump ``updated_at``; ``ThreadNotFound``."""
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread and its messages in one transaction (no error when missing)."""

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        """Move a thread and all its messages to another resource in one transaction."""
        ...

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        """Insert a new thread and its messages atomically (used by clone)."""
        ...

    # messages ----------------------------------------------------------------------------------
    async def save_messages(
        self, thread_id: str, messages: Sequence[Message], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> list[Message]:
        """Upsert messages of one thread atomically, in order.

        Checks in the same transaction: the thread exists (``ThreadNotFound``), every message has this
        ``thread_id`` and the thread's ``resource_id`` (``ResourceMismatch``), no id already belongs to
        another thread (``ValidationError``). An existing id keeps its original ``created_at`` and its
        position; new ids are appended after everything stored. Bumps the thread's ``updated_at``.
        ``mark_pending``: also record the messages as awaiting vectors (``vector_records().take_pending``),
        in the same transaction, so a crash before their vectors are written leaves them for a retry.
        ``fence``: refused with ``LeaseLost`` (nothing written) when that lease was taken over.
        Returns the messages as stored (original ``created_at`` for re-saved ids).
        """
        ...

    async def save_messages_many(
        self, by_thread: Mapping[str, Sequence[Message]], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> dict[str, list[Message]]:
        """The messages of several threads (``{thread_id: messages}``) upserted in one transaction, each part
        checked as :meth:`save_messages` checks its batch: every part or none. Returns them by thread."""
        ...

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Page through a thread's messages (reference §5.3), with include windows and filters."""
        ...

    async def get_thread_with_tail(self, thread_id: str, size: int) -> tuple[Thread | None, MessagePage]:
        """The thread row and its newest ``size`` messages (``list_messages`` with ``per_page=size``,
        ``direction="DESC"``) as of one moment; thread actors load their cache with it."""
        ...

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by (created_at, sequence); unknown ids skipped."""
        ...

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged one level, content.metadata merged), bump threads."""
        ...

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        """Delete messages by id; return the affected thread ids (their ``updated_at`` bumped)."""
        ...

    # resources ---------------------------------------------------------------------------------
    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row or None."""
        ...

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None | UnsetType = UNSET,
        metadata: Mapping[str, Any] | None = None,
    ) -> Resource:
        """Create the row if missing (metadata ``{}``), else set the given fields (metadata shallow-merged)."""
        ...

    # write counts ------------------------------------------------------------------------------
    def thread_version(self, thread_id: str) -> int:
        """How many write calls touched the thread's row or messages (one per call, success or not).

        Actors trust what they cached only while this stays what they saw: a store shared with other
        processes returns a new value on every call while one may be writing (so every read is fresh).
        """
        ...

    def resource_version(self, resource_id: str) -> int:
        """How many write calls touched the resource's row (see :meth:`thread_version`)."""
        ...


@runtime_checkable
class ReadModifyWrite(Protocol):
    """Atomic read-modify-writes of one row: what no other process's write may come between (working memory,
    thread metadata). A capability of a :class:`Store`."""

    # atomic read-modify-writes -----------------------------------------------------------------
    async def modify_thread(
        self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *, fence: Lease | None = None
    ) -> Thread | None:
        """Read the thread and write what ``change`` makes of it, in one transaction: no write by any process
        can come between the read and the write. ``change`` must be a quick pure function (it may run on the
        store's database thread); None writes nothing. Returns the thread as written, or None.

        :raises ThreadNotFound: the thread does not exist.
        :raises LeaseLost: ``fence`` was taken over by another holder (nothing written).
        """
        ...

    async def modify_resource(
        self, resource_id: str, change: Callable[[Resource | None], ResourceChange | None], *,
        fence: Lease | None = None,
    ) -> Resource | None:
        """As :meth:`modify_thread` for a resource (``change`` gets None when it does not exist yet; a write
        creates it)."""
        ...


@runtime_checkable
class Leases(Protocol):
    """Leases held by one process at a time (an agent turn's hold on its thread), renewed by a heartbeat and
    checked by fenced writes. A capability of a :class:`Store`."""

    # leases ------------------------------------------------------------------------------------
    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        """Hold ``key`` for ``owner`` against every other process (an agent turn holds ``thread:<id>``).

        ``wait=False`` raises ``ThreadBusy`` at once when another holder has it; ``wait=True`` waits (without
        spinning) until it is released, or until its holder stopped renewing it for ``ttl`` seconds (died or
        froze), and then takes it over.
        """
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` back (no error when it was lost meanwhile)."""

    async def renew_leases(self, owner: str, ttl: float) -> None:
        """Keep every lease of ``owner`` alive for another ``ttl`` seconds (called periodically while it runs)."""


@runtime_checkable
class SideRecords(Protocol):
    """The records kept beside the messages by the vector index and observational memory, as durable as the
    messages. A capability of a :class:`Store`."""

    # side tables -------------------------------------------------------------------------------
    def vector_records(self) -> VectorRecords:
        """The vector rows, tombstones and pending marks that back the semantic index (the source of truth
        behind an HNSW cache), kept with this store's data."""
        ...

    def observational_records(self, *, ttl: float | None = None) -> ObservationalMemoryStore:
        """Observational-memory records (Mastra's ``mastra_observational_memory`` where the store has it);
        ``ttl`` bounds how long a current record may be served from memory."""
        ...


@runtime_checkable
class Store(ThreadsAndMessages, ReadModifyWrite, Leases, SideRecords, Protocol):
    """Durable threads, messages and resources: the whole contract threadmind relies on, the four capabilities
    together (a third party may implement and test them one at a time).

    Implementations: ``SQLiteStore``, ``InMemoryStore``, ``PostgresStore``, or your own. ``Memory`` checks a
    store once, at construction (:func:`check_store`), and refuses one that lacks a method below with a
    ``ConfigError`` naming it. Every write method is atomic (all or nothing) and bumps the write counts of
    what it touched (``thread_version``/``resource_version``): actors trust their caches only while the
    counts are the ones they last saw, so a store that cannot tell returns a count that changes on every
    call (caching off). Side tables live with the store (``vector_records``, ``observational_records``), so
    what the index and observational memory write is as durable as the messages.
    """


#: Every method a store must have, in the order ``check_store`` names missing ones.
STORE_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "ThreadsAndMessages": (
        "open", "aclose", "create_thread", "get_thread", "list_threads", "update_thread", "delete_thread",
        "update_thread_resource_id", "create_thread_with_messages", "save_messages", "save_messages_many",
        "list_messages", "get_thread_with_tail", "get_messages_by_id", "update_messages", "delete_messages",
        "get_resource", "update_resource", "thread_version", "resource_version"),
    "ReadModifyWrite": ("modify_thread", "modify_resource"),
    "Leases": ("acquire_lease", "release_lease", "renew_leases"),
    "SideRecords": ("vector_records", "observational_records"),
}
"""The methods of each capability of the ``Store`` contract, in the order ``check_store`` names missing ones."""
STORE_METHODS: tuple[str, ...] = tuple(name for names in STORE_CAPABILITIES.values() for name in names)



def check_store(store: object) -> Store:
    """``store`` if it implements the whole :class:`Store` contract, else ``ConfigError`` naming what lacks.

    Checked once, when a ``Memory`` is built, so a partial store fails at construction instead of silently
    keeping some data in a place that does not last.
    """
    missing = [name for name in STORE_METHODS if not callable(getattr(store, name, None))]
    if missing:
        parts = [f"{', '.join(lacking)} ({capability})" for capability, names in STORE_CAPABILITIES.items()
                 if (lacking := [name for name in names if name in missing])]
        raise ConfigError(
            f"{type(store).__name__} is not a complete threadmind Store: it lacks {'; '.join(parts)} "
            "(see threadmind.stores.Store for the contract)", code="THREADMIND_STORE_INCOMPLETE")
    assert isinstance(store, Store)
    return store


WriteFn = Callable[[Any], T]
