"""The one door from ``memory/`` to a Memory's store and actors.

``StoreDoor`` holds every store operation memory's own logic runs (messages by id, pages, batches across threads,
read-modify-writes, leases, the observational-memory records): the rest of ``memory/`` reaches the store through it
and never through ``MemoryCore.store()`` (the architecture test holds that), so the store calls of ``memory/`` can
be read in one place. Thread commands (``SaveMessages``, ``LoadWindow``, ``ModifyThread`` ...) go to the thread
actors through ``ActorSystem``. ``ActorAccess`` is the ``MemoryAccess`` that ``Memory`` hands its own processors:
reads of one thread's history are served by the thread's actor (from its in-memory tail while it is fresh), and
persisting a turn is one step of that actor (make sure the thread exists, then save), so it takes its place in the
thread's order like any other write. ``RoutedIndex`` is the index as the ``semantic-recall`` processor sees it:
looked up at each call, so processors can be built before ``start()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .._config import SearchMode
from .._metadata_filter import MetadataFilter
from ..actors._system import current_fence
from ..actors._thread_actor import TAIL_MAX, CreateThread, LoadMessages, LoadWindow, SaveMessages
from ..codecs import Message, Resource, Thread
from ..errors import ConfigError, ThreadNotFound, ValidationError
from ..processors._access import AccessBase, TurnEmbedder, embed_stored
from ..search._searcher import as_vector_hits
from ..stores import Lease, MessagePage, MessageQuery, Store, ThreadChange, ThreadPage
from ..stores._keywords import supports_keywords
from ..stores._om import ObservationalMemoryStore
from ..tracing import operation_span

if TYPE_CHECKING:
    from ..actors._index_actor import IndexActor, VectorHit
    from ._core import MemoryCore

__all__ = ("ActorAccess", "RoutedIndex", "StoreDoor")

_log = logging.getLogger("threadmind.semantic_recall")


class ActorAccess(AccessBase):
    """``MemoryAccess`` over a Memory's actors (see the module docstring)."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._core.store().get_thread(thread_id)

    async def list_threads(self, *, resource_id: str | None = None, per_page: int | bool = 100) -> ThreadPage:
        return await self._core.store().list_threads(resource_id=resource_id, per_page=per_page)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self._core.store().get_messages_by_id(ids)

    async def get_resource(self, resource_id: str) -> Resource | None:
        return await self._core.actors().get_resource(resource_id)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if not isinstance(query.thread_id, str):
            return await self._core.store().list_messages(query)
        system = self._core.actors()
        per_page = query.per_page
        if (query.direction == "DESC" and not query.include and query.date_range is None and not query.metadata
                and isinstance(per_page, int) and per_page is not True and per_page > 0
                and (query.page == 0 or (query.page + 1) * per_page <= TAIL_MAX)):
            # "The last N", or a page of the newest TAIL_MAX (a token budget's loader): from the actor's tail.
            newest = (query.page + 1) * per_page
            window: MessagePage = await system.ask(
                query.thread_id, LoadWindow(newest, query.resource_id, tolerate_missing=True))
            if query.page == 0:
                return msgspec.structs.replace(window, messages=window.messages[::-1])
            held = len(window.messages)
            older = window.messages[max(0, held - newest):max(0, held - newest + per_page)]
            return MessagePage(messages=older[::-1], total=window.total, page=query.page, per_page=per_page,
                               has_more=window.total > newest)
        page: MessagePage = await system.ask(query.thread_id, LoadMessages(query))
        return page

    async def persist_turn(self, thread: Thread, messages: Sequence[Message], *, mark_pending: bool = False,
                           embed: TurnEmbedder | None = None) -> list[Message]:
        """Save the turn into ``thread`` (created first when missing), through the thread's actor.

        The turn made sure of the thread when it began; one deleted since surfaces as ``ThreadNotFound`` from the
        save and is made again, as the reference ensures the thread exists. With ``embed`` (this Memory's index, as
        its ``semantic-recall`` processor asks) the save embeds while it commits and returns once the vectors are
        queryable: the path of ``Memory.save_messages`` (``IndexActor.upsert_on_commit``); another embedder embeds
        the stored messages after the commit.
        """
        system = self._core.actors()
        index = self._core.index if isinstance(embed, RoutedIndex) else None
        with operation_span("threadmind.memory.save_messages", "upsert_memory", thread_id=thread.id,
                            resource_id=thread.resource_id, threadmind__messages__count=len(messages)):
            fence = current_fence(thread.id)
            gate = None if index is None else index.upsert_on_commit(messages)
            try:
                saved: list[Message] = await system.ask(thread.id, SaveMessages(messages, mark_pending, gate, fence))
            except ThreadNotFound:
                await self._create(thread)
                gate = None if index is None else index.upsert_on_commit(messages)
                saved = await system.ask(thread.id, SaveMessages(messages, mark_pending, gate, fence))
            if gate is not None:
                try:
                    await gate.result()
                except Exception:  # the turn is durable; its messages stay marked as awaiting vectors
                    _log.warning("embedding the turn's messages failed; they will be retried", exc_info=True)
            elif embed is not None:
                await embed_stored(embed, saved)
            return saved

    async def _create(self, thread: Thread) -> None:
        with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread.id,
                            resource_id=thread.resource_id):
            try:
                await self._core.actors().ask(thread.id, CreateThread(thread))
            except ValidationError:  # created meanwhile (another turn): save into it
                pass


class RoutedIndex:
    """The Memory's index actor for the ``semantic-recall`` processor (see the module docstring)."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core

    def _actor(self) -> IndexActor:
        self._core.actors()
        index = self._core.index
        if index is None:
            raise ConfigError("semantic recall needs a vector store and an embedder",
                              code="SEMANTIC_RECALL_MISSING_VECTOR_ADAPTER")
        return index

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None, search: SearchMode = "vector",
                    keyword_weight: float | None = None, metadata_filter: MetadataFilter | None = None,
                    ) -> list[VectorHit]:
        """The ``top_k`` best messages of the scope by ``search`` (``threadmind.search``: the same pipeline as
        ``Memory.recall`` and ``Memory.search``), those matching ``metadata_filter`` only."""
        found = await self._core.searcher().search(text, top_k=top_k, resource_id=resource_id, thread_id=thread_id,
                                                   mode=search, keyword_weight=keyword_weight, threshold=threshold,
                                                   metadata_filter=metadata_filter)
        return as_vector_hits(found.ranked, top_k)

    @property
    def embeds(self) -> bool:
        """Whether the turn's messages get vectors (there is an index)."""
        return self._core.index is not None

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int:
        return await self._actor().upsert_messages(messages, wait=wait)


class StoreDoor:
    """The store operations of ``memory/`` (see the module docstring); each is the store's own, called as is."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core

    @property
    def keyword_index(self) -> bool:
        """Whether the store keeps a keyword index (it can answer searches by words)."""
        return supports_keywords(self._core.store())

    def configured(self) -> Store:
        """The store itself (``Memory.storage``); ``ConfigError`` when the Memory has none."""
        return self._core.store()

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._core.store().get_thread(thread_id)

    async def list_threads(self, *, resource_id: str | None = None, page: int = 0, per_page: int | bool = 100,
                           order_by: Literal["created_at", "updated_at"] = "created_at",
                           direction: Literal["ASC", "DESC"] = "DESC",
                           metadata: Mapping[str, Any] | None = None) -> ThreadPage:
        return await self._core.store().list_threads(resource_id=resource_id, page=page, per_page=per_page,
                                                    order_by=order_by, direction=direction, metadata=metadata)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        return await self._core.store().list_messages(query)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self._core.store().get_messages_by_id(ids)

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        return await self._core.store().update_messages(updates)

    async def modify_thread(self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *,
                            fence: Lease | None = None) -> Thread | None:
        return await self._core.store().modify_thread(thread_id, change, fence=fence)

    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        return await self._core.store().acquire_lease(key, owner=owner, ttl=ttl, wait=wait)

    async def release_lease(self, lease: Lease) -> None:
        await self._core.store().release_lease(lease)

    async def build_keyword_index(self, progress: Callable[[int, int], object]) -> int:
        """Index the words of the messages the keyword index lacks (0 when the store keeps none)."""
        store = self._core.store()
        return await store.build_keyword_index(progress) if supports_keywords(store) else 0

    def observational_records(self, *, ttl: float | None = None) -> ObservationalMemoryStore:
        return self._core.store().observational_records(ttl=ttl)
