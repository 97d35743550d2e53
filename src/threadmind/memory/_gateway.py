"""The one door from ``memory/`` to a Memory's store and actors.

``Door`` owns what a Memory runs (its ``ActorSystem``: the thread, resource and index actors; the retrieval pipeline;
the observational-memory engine) and holds every way the rest of ``memory/`` reaches them: typed commands to a
thread's or resource's actor (``ask``, ``across``, ``modify_resource``), the turn's hold, background work, and the
store operations memory's own logic runs (messages by id, pages, read-modify-writes, leases, the observation
records). No other module of ``memory/`` calls the store or the actor system (the architecture test holds that), so
what ``memory/`` does to a thread can be read in one place; ``MemoryCore`` is the configuration it is built from.
``ActorAccess`` is the ``MemoryAccess`` that ``Memory`` hands its own processors: reads of one thread's history are
served by the thread's actor (from its in-memory tail while it is fresh), and persisting a turn is one step of that
actor (make sure the thread exists, then save), so it takes its place in the thread's order like any other write.
``RoutedIndex`` is the index as the ``semantic-recall`` processor sees it: looked up at each call, so processors can
be built before ``start()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
import msgspec

from .._config import SearchMode, SemanticRecallConfig
from .._metadata_filter import MetadataFilter
from ..actors import ActorSystem
from ..actors._across import AcrossThreads
from ..actors._resource_actor import ModifyResource
from ..actors._system import TurnPolicy, current_fence
from ..actors._thread_actor import TAIL_MAX, CreateThread, LoadMessages, LoadWindow, SaveMessages
from ..codecs import Message, Resource, Thread
from ..errors import ConfigError, EmbeddingDimensionMismatch, ThreadmindError, ThreadNotFound, ValidationError
from ..processors._access import AccessBase, TurnEmbedder, embed_stored
from ..search._searcher import Searcher, as_vector_hits
from ..stores import Lease, MessagePage, MessageQuery, Store, ThreadChange, ThreadPage
from ..stores._keywords import supports_keywords
from ..stores._om import ObservationalMemoryStore
from ..tracing import operation_span

if TYPE_CHECKING:
    from ..actors._index_actor import IndexActor, VectorHit
    from ._core import MemoryCore
    from ._observational import ObservationalMemoryEngine

__all__ = ("STORAGE_MISSING", "ActorAccess", "Door", "RoutedIndex")

STORAGE_MISSING = (
    "Memory requires a storage provider to function. Add a storage configuration to Memory "
    "(for example storage=SQLiteStore('memory.db'))."
)

_log = logging.getLogger("threadmind.memory")


class ActorAccess(AccessBase):
    """``MemoryAccess`` over a Memory's actors (see the module docstring)."""

    def __init__(self, door: Door) -> None:
        self._door = door

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._door.configured().get_thread(thread_id)

    async def list_threads(self, *, resource_id: str | None = None, per_page: int | bool = 100) -> ThreadPage:
        return await self._door.configured().list_threads(resource_id=resource_id, per_page=per_page)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self._door.configured().get_messages_by_id(ids)

    async def get_resource(self, resource_id: str) -> Resource | None:
        return await self._door.get_resource(resource_id)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if not isinstance(query.thread_id, str):
            return await self._door.configured().list_messages(query)
        door = self._door  # each ask checks that the memory is running
        per_page = query.per_page
        if (query.direction == "DESC" and not query.include and query.date_range is None and not query.metadata
                and isinstance(per_page, int) and per_page is not True and per_page > 0
                and (query.page == 0 or (query.page + 1) * per_page <= TAIL_MAX)):
            # "The last N", or a page of the newest TAIL_MAX (a token budget's loader): from the actor's tail.
            newest = (query.page + 1) * per_page
            window: MessagePage = await door.ask(
                query.thread_id, LoadWindow(newest, query.resource_id, tolerate_missing=True))
            if query.page == 0:
                return msgspec.structs.replace(window, messages=window.messages[::-1])
            held = len(window.messages)
            older = window.messages[max(0, held - newest):max(0, held - newest + per_page)]
            return MessagePage(messages=older[::-1], total=window.total, page=query.page, per_page=per_page,
                               has_more=window.total > newest)
        page: MessagePage = await door.ask(query.thread_id, LoadMessages(query))
        return page

    async def persist_turn(self, thread: Thread, messages: Sequence[Message], *, mark_pending: bool = False,
                           embed: TurnEmbedder | None = None) -> list[Message]:
        """Save the turn into ``thread`` (created first when missing), through the thread's actor.

        The turn made sure of the thread when it began; one deleted since surfaces as ``ThreadNotFound`` from the
        save and is made again, as the reference ensures the thread exists. With ``embed`` (this Memory's index, as
        its ``semantic-recall`` processor asks) the save embeds while it commits, the path of ``Memory.save_messages``
        (``IndexActor.upsert_on_commit``: an agent turn does not wait for its vectors); another embedder is given the
        stored messages after the commit.
        """
        door = self._door
        door.check_running()
        index = self._door.index if isinstance(embed, RoutedIndex) else None
        with operation_span("threadmind.memory.save_messages", "upsert_memory", thread_id=thread.id,
                            resource_id=thread.resource_id, threadmind__messages__count=len(messages)):
            fence = current_fence(thread.id)
            gate = None if index is None else index.upsert_on_commit(messages)
            try:
                saved: list[Message] = await door.ask(thread.id, SaveMessages(messages, mark_pending, gate, fence))
            except ThreadNotFound:
                await self._create(thread)
                gate = None if index is None else index.upsert_on_commit(messages)
                saved = await door.ask(thread.id, SaveMessages(messages, mark_pending, gate, fence))
            if gate is None and embed is not None:
                await embed_stored(embed, saved)
            return saved

    async def _create(self, thread: Thread) -> None:
        with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread.id,
                            resource_id=thread.resource_id):
            try:
                await self._door.ask(thread.id, CreateThread(thread))
            except ValidationError:  # created meanwhile (another turn): save into it
                pass


class RoutedIndex:
    """The Memory's index actor for the ``semantic-recall`` processor (see the module docstring)."""

    def __init__(self, door: Door) -> None:
        self._door = door

    def _actor(self) -> IndexActor:
        self._door.check_running()
        index = self._door.index
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
        found = await self._door.searcher().search(text, top_k=top_k, resource_id=resource_id, thread_id=thread_id,
                                                   mode=search, keyword_weight=keyword_weight, threshold=threshold,
                                                   metadata_filter=metadata_filter, depth=top_k)
        return as_vector_hits(found.ranked, top_k)

    @property
    def embeds(self) -> bool:
        """Whether the turn's messages get vectors (there is an index)."""
        return self._door.index is not None

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int:
        return await self._actor().upsert_messages(messages, wait=wait)


class Door:
    """The one door of ``memory/`` to the store and the actors (see the module docstring).

    :param core: the Memory's configuration.
    :param idle_timeout: seconds an idle actor stays in memory; ``max_actors``: at most this many.
    :param lease_ttl: seconds a turn's lease outlives a frozen holder.
    """

    def __init__(self, core: MemoryCore, *, idle_timeout: float, max_actors: int, lease_ttl: float) -> None:
        self._core = core
        #: The vector index's name, once the embedder's dimension is known.
        self.index_name: str | None = None
        self._searcher: Searcher | None = None
        self._om: ObservationalMemoryEngine | None = None
        self._system: ActorSystem | None = None
        if core.storage is not None:
            self._system = ActorSystem(core.storage, cache_ttl=core.cache_ttl, idle_timeout=idle_timeout,
                                       max_actors=max_actors, lease_ttl=lease_ttl, index=self._make_index(),
                                       on_start=self._on_start)

    # -- the store ----------------------------------------------------------------------------------
    def configured(self) -> Store:
        """The store itself (``Memory.storage``); ``ConfigError`` when the Memory has none."""
        storage = self._core.storage
        if storage is None:
            raise ConfigError(STORAGE_MISSING, code="THREADMIND_STORAGE_MISSING")
        return storage

    @property
    def keyword_index(self) -> bool:
        """Whether the store keeps a keyword index (it can answer searches by words)."""
        return supports_keywords(self.configured())

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread row as the store has it now (``get_thread_by_id``; the actor's may lag on ``updated_at``)."""
        return await self.configured().get_thread(thread_id)

    async def list_threads(self, *, resource_id: str | None = None, page: int = 0, per_page: int | bool = 100,
                           order_by: Literal["created_at", "updated_at"] = "created_at",
                           direction: Literal["ASC", "DESC"] = "DESC",
                           metadata: Mapping[str, Any] | None = None) -> ThreadPage:
        return await self.configured().list_threads(resource_id=resource_id, page=page, per_page=per_page,
                                                    order_by=order_by, direction=direction, metadata=metadata)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        return await self.configured().list_messages(query)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self.configured().get_messages_by_id(ids)

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        return await self.configured().update_messages(updates)

    async def modify_thread(self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *,
                            fence: Lease | None = None) -> Thread | None:
        return await self.configured().modify_thread(thread_id, change, fence=fence)

    async def acquire_lease(self, key: str, *, wait: bool) -> Lease:
        """The store lease ``key``, held by this Memory for ``lease_ttl`` (renewed by the heartbeat)."""
        system = self.actors(background=True)
        return await self.configured().acquire_lease(key, owner=system.owner, ttl=system.lease_ttl, wait=wait)

    async def release_lease(self, lease: Lease) -> None:
        await self.configured().release_lease(lease)

    async def build_keyword_index(self, progress: Callable[[int, int], object]) -> int:
        """Index the words of the messages the keyword index lacks (0 when the store keeps none)."""
        store = self.configured()
        return await store.build_keyword_index(progress) if supports_keywords(store) else 0

    def observational_records(self) -> ObservationalMemoryStore:
        """The observation records, cached as long as the Memory's caches are trusted."""
        return self.configured().observational_records(ttl=self._core.cache_ttl)

    # -- the actors ---------------------------------------------------------------------------------
    def actors(self, *, background: bool = False) -> ActorSystem:
        """(this module) The actor system: ``ConfigError`` without a store, ``ThreadmindError`` when not running
        (``background``: also while ``aclose()`` lets background work finish)."""
        self.configured()
        assert self._system is not None
        if not background:
            self._system.check_running()
        return self._system

    @property
    def running(self) -> bool:
        """Started and not closed."""
        return self._system is not None and self._system.running

    def check_running(self) -> None:
        """``ConfigError`` without a store; ``ThreadmindError`` unless started and not closed."""
        self.actors()

    async def start(self) -> None:
        """Start the actor system (the store opens, the index actor starts)."""
        await self.actors(background=True).start()

    async def aclose(self) -> None:
        """Let background work finish, flush the index, drain the actors, close the store."""
        if self._system is not None:
            await self._system.aclose()

    async def settled(self) -> None:
        """Wait for the background work started so far (titles, observations), then the index's queued work."""
        system = self._system
        if system is None or not system.running:
            await anyio.lowlevel.checkpoint()
            return
        await system.settled()
        index = system.index
        if index is not None:
            await index.flush()

    async def ask(self, thread_id: str, command: Any, *, background: bool = False) -> Any:
        """A typed command to the thread's actor, in its arrival order (``background``: from background work)."""
        return await self.actors(background=background).ask(thread_id, command, background=background)

    async def across(self, command: AcrossThreads) -> Any:
        """A write across threads, while every thread's actor is held (``actors._across``)."""
        return await self.actors().across(command)

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row, from its actor."""
        return await self.actors().get_resource(resource_id)

    async def modify_resource(self, resource_id: str, command: ModifyResource) -> Resource | None:
        """A read-modify-write of the resource row on its actor."""
        return await self.actors().modify_resource(resource_id, command)

    def turn(self, thread_id: str, policy: TurnPolicy) -> AbstractAsyncContextManager[Lease | None]:
        """An agent turn's hold on its thread (``ActorSystem.turn``)."""
        return self.actors().turn(thread_id, policy)

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None) -> bool:
        """Background work that ``aclose()`` waits for; False when the Memory takes none (closing, or none)."""
        system = self._system
        return system is not None and system.spawn(fn, *args, name=name)

    # -- the index and the retrieval pipeline -------------------------------------------------------
    @property
    def index(self) -> IndexActor | None:
        """The index actor, when semantic recall has a vector store and an embedder."""
        return self._system.index if self._system is not None else None

    def running_index(self) -> IndexActor | None:
        """The index actor of the running actor system (None without one); raises as :meth:`check_running`."""
        return self.actors().index

    def searcher(self) -> Searcher:
        """The retrieval pipeline over the store (its keyword index, when it keeps one) and the index actor (when
        there is a vector store and an embedder), made once; raises as :meth:`check_running`."""
        index = self.actors().index
        if self._searcher is None:
            store = self.configured()
            recall = self._core.options.semantic_recall_config or SemanticRecallConfig()
            self._searcher = Searcher(store if supports_keywords(store) else None, index,
                                      max_chunk_chars=recall.max_chunk_chars, store=store)
        return self._searcher

    def _make_index(self) -> IndexActor | None:
        core = self._core
        if core.vector is None or core.embedder is None or core.storage is None:
            return None
        from ..actors._index_actor import IndexActor

        recall = core.options.semantic_recall_config or SemanticRecallConfig()
        return IndexActor(store=core.storage, vector=core.vector, embedder=core.embedder,
                          embedding_dimension=core.embedding_dimension, max_chunk_chars=recall.max_chunk_chars)

    async def _on_start(self) -> None:
        """Learn the index name now (so ``get_input_processors()`` stays synchronous) and bring a Mastra file's
        vectors over once."""
        index = self.index
        if index is None:
            return
        try:
            await index.dimension()
            self.index_name = await index.index_name()
        except ThreadmindError:
            _log.warning("embedder dimension probe failed at start; will retry on first use")
        if self.index_name is not None:
            from ..stores._interop import import_mastra_vectors

            try:
                await import_mastra_vectors(self.configured(), index_names=[self.index_name])
            except ThreadmindError:
                _log.warning("could not import Mastra vectors into %s", self.index_name, exc_info=True)

    async def ensure_index_name(self) -> None:
        """Retry a failed embedder-dimension probe (raises its error); no-op once the index name is known."""
        index = self.index
        if index is not None and self.index_name is None:
            await index.dimension()
            self.index_name = await index.index_name()

    def declared_index_name(self) -> str | None:
        """The index name from what is known or declared (None: the embedder must be probed first).

        :raises EmbeddingDimensionMismatch: ``embedding_dimension`` contradicts the embedder's declared one.
        """
        if self.index_name is not None:
            return self.index_name
        embedder = self._core.embedder
        if embedder is None:
            return None
        dim = embedder.dimension
        if dim is None:
            return None
        declared = self._core.embedding_dimension
        if declared is not None and dim != declared:
            raise EmbeddingDimensionMismatch(declared, dim)
        return "memory_messages" if dim == 1536 else f"memory_messages_{dim}"

    # -- observational memory -----------------------------------------------------------------------
    @property
    def observational(self) -> ObservationalMemoryEngine | None:
        """The observational-memory engine, once anything has needed it."""
        return self._om

    def observational_engine(self) -> ObservationalMemoryEngine:
        """The observational-memory engine (made on first use: records, in-flight observations)."""
        if self._om is None:
            from ._observational import ObservationalMemoryEngine

            self._om = ObservationalMemoryEngine(self)
        return self._om
