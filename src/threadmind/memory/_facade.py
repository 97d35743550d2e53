"""The ``Memory`` facade: threads, messages, recall and working memory over a store and an index.

``Memory`` validates every argument (``ValidationError`` naming the field; the longer checks in ``_validation`` and
``_setup``) and delegates: the actor system serializes each thread's and resource's operations; the modules beside
this one hold the policy (``_messages``, ``_recall``, ``_working_memory``, ``_clone``, ``_pipeline``, ``_turn``,
``_observational``). ``start()``/``aclose()`` (or ``async with``) may be called from any task.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import anyio

from .._config import MemoryConfig, SearchMode
from .._results import CloneResult, RecallResult, SaveResult, SearchHit, WorkingMemoryTemplate
from ..actors._thread_actor import DeleteThread, MoveThread, UpdateThread
from ..codecs import Message, Thread
from ..codecs._time import utc_now
from ..errors import ConfigError, ValidationError
from ..models import LanguageModel
from ..processors._working_memory_text import instruction, readonly_instruction, template_for
from ..stores import DateRange, Include, Store, ThreadPage
from ..stores._query import parse_date_range, parse_include
from ..tokens import TokenCounter
from ..tools import Tool
from ..tracing import operation_span
from ._clone import clone_thread
from ._context import MemoryContext, memory_context
from ._core import MemoryCore, parse_options, ttl_seconds
from ._extractors import Extractor, check_extractors
from ._messages import delete_messages, reindex_messages, save_batch, update_messages
from ._pipeline import Pipeline
from ._recall import recall, search_messages
from ._recall_tool import recall_tool
from ._setup import check_runtime, recall_parts
from ._summarize import MAX_INPUT_TOKENS, ThreadSummary, check_limits, summarize
from ._threads import create_thread
from ._turn import Turn, open_turn
from ._validation import (
    check_ids,
    check_list,
    check_metadata,
    check_recall_args,
    check_search_args,
    check_title,
    check_vector_search_args,
    require_id,
    saveable_batch,
)
from ._working_memory import (
    mirror_into_resource,
    owned_by,
    read_working_memory,
    scope_key,
    working_memory_tool,
    write_working_memory,
)

if TYPE_CHECKING:
    from ..actors import IndexStatistics
    from ..actors._index_actor import VectorHit
    from ..embedders import Embedder
    from ..stores import VectorStore

__all__ = ("Memory",)

_TAIL_TTL = 2.0  # seconds actors trust what they cached by default (see ``cache_ttl``)


class Memory:
    """Durable conversational memory for agents (threads, messages, recall, working memory).

    :param storage: a ``Store`` (``SQLiteStore``, ``InMemoryStore``, ``PostgresStore`` or your own; checked
        here, ``ConfigError`` naming a missing method); operations without one raise ``ConfigError``.
    :param vector: a vector store for semantic recall (``HnswVectorStore``, ``PgVectorStore`` or any
        :class:`~threadmind.stores.VectorStore`), or None/False for none.
    :param embedder: an ``Embedder`` or a model-router string such as ``"openai/text-embedding-3-small"``.
    :param embedding_dimension: the expected vector length; a different embedder output raises
        ``EmbeddingDimensionMismatch`` before any index is created.
    :param options: a ``MemoryConfig`` or a dict in Mastra's camelCase shape.
    :param token_counter: counts tokens for budgets and ``estimate_tokens``; the reference-compatible
        estimator by default, or ``ExactTokenCounter()`` (extra ``[tokens]``) for real BPE counts.
    :param cache_ttl: seconds an unused cache entry (a thread's row and newest messages, a resource's row, the
        current OM record) is kept. Caches never serve stale data: they are validated against the store's write
        counts, and a store shared with another process is read through. ``None``: kept until evicted.
    :param lease_ttl: seconds after which a process that died or froze while holding a thread (an agent turn)
        loses it to a waiting process; a live holder renews its lease every quarter of it.
    """

    def __init__(
        self,
        *,
        storage: Store | None = None,
        vector: VectorStore | Literal[False] | None = None,
        embedder: Embedder | str | None = None,
        embedding_dimension: int | None = None,
        options: MemoryConfig | Mapping[str, Any] | None = None,
        idle_timeout: float = 300.0,
        token_counter: TokenCounter | None = None,
        max_actors: int = 10_000,
        cache_ttl: float | None = _TAIL_TTL,
        lease_ttl: float = 30.0,
    ) -> None:
        check_runtime(cache_ttl=cache_ttl, idle_timeout=idle_timeout, max_actors=max_actors, lease_ttl=lease_ttl)
        parsed = parse_options(options)
        vector_store, embedder = recall_parts(parsed, storage, vector, embedder, embedding_dimension)
        self._core = MemoryCore(storage=storage, vector=vector_store, embedder=embedder,
                                embedding_dimension=embedding_dimension, options=parsed, idle_timeout=idle_timeout,
                                token_counter=token_counter, max_actors=max_actors, cache_ttl=ttl_seconds(cache_ttl),
                                lease_ttl=float(lease_ttl))
        self._pipeline = Pipeline(self._core)

    # lifecycle -----------------------------------------------------------------------------------
    @property
    def options(self) -> MemoryConfig:
        """The instance options (per-call options merge over these)."""
        return self._core.options

    @property
    def storage(self) -> Store:
        """The configured store; ``ConfigError`` when there is none."""
        return self._core.door.configured()

    def effective_options(self, memory_config: MemoryConfig | Mapping[str, Any] | None = None) -> MemoryConfig:
        """The options a call given ``memory_config`` (a per-call ``MemoryConfig`` or camelCase dict: what
        ``save_messages(memory_config=)``, ``recall(thread_config=)`` and ``Agent.generate(memory_options=)`` take)
        runs with (Mastra's ``getMergedThreadConfig``)."""
        return self._core.call_config(memory_config)

    async def start(self) -> None:
        """Open the store and start the actor system (idempotent; a failed start may be retried).

        The actor system lives in a task of its own, owned by this Memory, so ``start()`` and ``aclose()`` may
        be called from any task and under any timeout (a server's startup and shutdown handlers).
        """
        await self._core.door.start()  # ConfigError without a store

    async def aclose(self) -> None:
        """Wait for background work, drain every actor, flush the index and close the store (from any task)."""
        await self._core.door.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __del__(self) -> None:
        core = getattr(self, "_core", None)
        if core is not None and core.door.running:
            warnings.warn("unclosed Memory; use `async with memory:` or await memory.aclose()", ResourceWarning,
                          stacklevel=1)

    # threads -------------------------------------------------------------------------------------
    async def create_thread(self, *, resource_id: str, thread_id: str | None = None, title: str | None = None,
                            metadata: Mapping[str, Any] | None = None) -> Thread:
        """Create a thread owned by ``resource_id``; ``ValidationError`` if the id is taken."""
        require_id(resource_id, "resource_id")
        if thread_id is not None:
            require_id(thread_id, "thread_id")
        check_title(title)
        check_metadata(metadata)
        thread_id = thread_id or str(uuid.uuid4())
        now = utc_now()
        thread = Thread(thread_id, resource_id, title or "", dict(metadata) if metadata is not None else None, now, now)
        with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            created = await create_thread(self._core, thread)
            await mirror_into_resource(self._core, created.resource_id, metadata)
            return created

    async def get_thread_by_id(self, thread_id: str, *, resource_id: str | None = None) -> Thread | None:
        """The thread, or None when missing or owned by another resource than ``resource_id``."""
        require_id(thread_id, "thread_id")
        with operation_span("threadmind.memory.get_thread", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            self._core.door.check_running()
            thread = await self._core.door.get_thread(thread_id)
            if thread is None or (resource_id is not None and thread.resource_id != resource_id):
                return None
            return thread

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
        """A page of threads, optionally of one resource and matching scalar metadata values."""
        if order_by not in ("created_at", "updated_at", "createdAt", "updatedAt"):
            raise ValidationError(f"order_by must be 'created_at' or 'updated_at', got {order_by!r}")
        if direction not in ("ASC", "DESC"):
            raise ValidationError(f"direction must be 'ASC' or 'DESC', got {direction!r}")
        if resource_id is not None:
            require_id(resource_id, "resource_id")
        order: Literal["created_at", "updated_at"] = "updated_at" if order_by in ("updated_at", "updatedAt") \
            else "created_at"
        with operation_span("threadmind.memory.list_threads", "search_memory", resource_id=resource_id):
            self._core.door.check_running()
            return await self._core.door.list_threads(resource_id=resource_id, page=page, per_page=per_page,
                                                         order_by=order, direction=direction, metadata=metadata)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Thread:
        """Set the title and/or shallow-merge metadata; ``ThreadNotFound`` when missing."""
        require_id(thread_id, "thread_id")
        check_title(title)
        check_metadata(metadata)
        with operation_span("threadmind.memory.update_thread", "update_memory", thread_id=thread_id):
            thread: Thread = await self._core.door.ask(thread_id, UpdateThread(title, metadata))
            await mirror_into_resource(self._core, thread.resource_id, metadata)
            return thread

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread, its messages, its vectors and its observations."""
        require_id(thread_id, "thread_id")
        core = self._core
        with operation_span("threadmind.memory.delete_thread", "delete_memory", thread_id=thread_id):
            await core.door.ask(thread_id, DeleteThread())
            if core.door.index is not None:
                await core.door.index.delete_thread(thread_id)
            if core.door.observational is not None:  # the thread's observations go with it (reference §1 deleteThread)
                await core.door.observational.records.delete(f"thread:{thread_id}")

    async def update_thread_resource_id(self, thread_id: str, *, resource_id: str) -> Thread:
        """Move a thread and all its messages (and vectors) to another resource."""
        require_id(thread_id, "thread_id")
        require_id(resource_id, "resource_id")
        core = self._core
        with operation_span("threadmind.memory.update_thread_resource_id", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            thread: Thread = await core.door.ask(thread_id, MoveThread(resource_id))
            if core.door.index is not None:
                await core.door.index.move_thread(thread_id, resource_id)
            return thread

    # messages ------------------------------------------------------------------------------------
    async def save_messages(
        self,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> SaveResult:
        """Persist messages (idempotent upsert by id), then embed them when semantic recall is on.

        Every message needs ``thread_id`` and ``resource_id`` and an existing thread owned by that resource.
        System messages and transient signals are dropped; ``<working_memory>`` blocks and
        ``updateWorkingMemory`` tool parts are stripped. The batch commits in one transaction or not at all,
        also when it spans threads (it is then written while every one of their actors is held). If the
        embedder fails the messages stay saved, their vectors are queued for retry, and ``EmbedderError``
        is raised.
        """
        config = self._core.call_config(memory_config)
        batch = saveable_batch(messages)
        threads = {m.thread_id for m in batch}
        only = next(iter(threads)) if len(threads) == 1 else None
        owner = batch[0].resource_id if batch and all(m.resource_id == batch[0].resource_id for m in batch) else None
        with operation_span("threadmind.memory.save_messages", "upsert_memory", thread_id=only, resource_id=owner,
                            threadmind__messages__count=len(batch)):
            self._core.door.check_running()
            return await save_batch(self._core, batch, config)

    async def recall(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        per_page: int | bool | None = None,
        page: int = 0,
        direction: Literal["ASC", "DESC"] | None = None,
        include: Sequence[Mapping[str, Any] | Include] | None = None,
        date_range: Mapping[str, Any] | DateRange | None = None,
        thread_config: MemoryConfig | Mapping[str, Any] | None = None,
        vector_search_string: str | None = None,
    ) -> RecallResult:
        """Messages of a thread: the configured history window by default, or a page when ``per_page`` is given.

        With ``vector_search_string`` and semantic recall on, the top-k similar messages (and their context
        windows) are merged in; during an embedder outage the result is history only, ``degraded=True``.
        """
        check_recall_args(thread_id, resource_id, page, per_page, direction, include)
        includes = [parse_include(v, i) for i, v in enumerate(include or ())]
        window = parse_date_range(date_range)
        config = self._core.call_config(thread_config)
        with operation_span("threadmind.memory.recall", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await recall(self._core, config, thread_id, resource_id, per_page=per_page, page=page,
                                direction=direction, includes=includes, window=window,
                                vector_search_string=vector_search_string)

    async def list_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by time; unknown ids are skipped."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValidationError("`ids` must be a list of message ids")
        for i, value in enumerate(ids):
            require_id(value, f"ids[{i}]")
        with operation_span("threadmind.memory.list_messages_by_id", "search_memory"):
            self._core.door.check_running()
            return await self._core.door.get_messages_by_id(list(ids))

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged); changed text is re-embedded."""
        check_list(updates, "updates", "dicts, each with an 'id'")
        for i, update in enumerate(updates):
            if not isinstance(update, Mapping):
                raise ValidationError(f"updates[{i}] must be a dict with an 'id'")
            require_id(update.get("id"), f"updates[{i}].id")
        self._core.door.check_running()
        if not updates:
            await anyio.lowlevel.checkpoint()
            return []
        with operation_span("threadmind.memory.update_messages", "update_memory"):
            return await update_messages(self._core, updates)

    async def delete_messages(self, ids: Sequence[str | Message | Mapping[str, Any]]) -> None:
        """Delete messages by id (or message objects), and their vectors."""
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Sequence):
            raise ValidationError("Invalid input: must be an array of message IDs or message objects")
        keys: list[str] = []
        for item in ids:
            if isinstance(item, str):
                key: object = item
            elif isinstance(item, Message):
                key = item.id
            elif isinstance(item, Mapping) and "id" in item:
                key = item["id"]
            else:
                raise ValidationError("Invalid input: array items must be strings or objects with an id property "
                                      f"(ids[{len(keys)}] is {type(item).__name__})")
            if not isinstance(key, str) or not key.strip():
                raise ValidationError("All message IDs must be non-empty strings")
            keys.append(key)
        self._core.door.check_running()
        if not keys:
            await anyio.lowlevel.checkpoint()
            return
        with operation_span("threadmind.memory.delete_messages", "delete_memory"):
            await delete_messages(self._core, keys)

    async def clone_thread(
        self,
        source_thread_id: str,
        *,
        new_thread_id: str | None = None,
        resource_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        message_limit: int | None = None,
    ) -> CloneResult:
        """Copy a thread and its messages (new ids) into a new thread, with their vectors, the thread's working
        memory and its observations (reference §1, §7.1). ``resource_id`` names the copy's owner."""
        require_id(source_thread_id, "source_thread_id")
        if new_thread_id is not None:
            require_id(new_thread_id, "new_thread_id")
        if resource_id is not None:
            require_id(resource_id, "resource_id")
        if message_limit is not None and (isinstance(message_limit, bool) or not isinstance(message_limit, int)
                                          or message_limit < 0):
            raise ValidationError("message_limit must be a non-negative integer")
        check_metadata(metadata)
        with operation_span("threadmind.memory.clone_thread", "update_memory", thread_id=source_thread_id,
                            resource_id=resource_id):
            return await clone_thread(self._core, source_thread_id, new_thread_id=new_thread_id,
                                      resource_id=resource_id, title=title, metadata=metadata,
                                      message_limit=message_limit)

    # vectors -------------------------------------------------------------------------------------
    async def reindex(self, *, progress: Any = None, keyword_progress: Any = None) -> int:
        """Index the words of every message the store's keyword index lacks (written by Mastra, or by an older
        threadmind), then make vectors for every message that has none (including ones that failed to embed);
        returns the vectors made.

        ``progress(done, total)`` and ``keyword_progress(done, total)`` are called as batches complete (by
        default progress goes to the log).
        """
        with operation_span("threadmind.memory.reindex", "embeddings"):
            return await reindex_messages(self._core, progress, keyword_progress)

    async def search(
        self,
        query: str,
        *,
        resource_id: str,
        thread_id: str | None = None,
        top_k: int = 10,
        search: SearchMode | None = None,
        threshold: float | None = None,
        date_range: Mapping[str, Any] | DateRange | None = None,
    ) -> list[SearchHit]:
        """The ``top_k`` messages best matching ``query``, best first, each with its score and what the keyword and
        vector rankings gave it: within the thread when ``thread_id`` is given (which must be the resource's),
        else within the resource. ``search`` overrides the configured mode (``"hybrid"``, ``"vector"``,
        ``"keyword"``); ``threshold`` drops vector candidates below that similarity (never a keyword hit);
        ``date_range`` keeps messages created within it. The same pipeline as recall (``threadmind.search``).

        :raises ValidationError: a bad argument, or ``"vector"`` without a vector store and an embedder.
        :raises ResourceMismatch: the thread belongs to another resource.
        """
        check_search_args(query, resource_id, thread_id, top_k, search, threshold)
        window = parse_date_range(date_range) if date_range is not None else None
        with operation_span("threadmind.memory.search", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await search_messages(self._core, query, resource_id=resource_id, thread_id=thread_id,
                                         top_k=top_k, mode=search, threshold=threshold, window=window)

    async def search_vectors(
        self,
        text: str,
        *,
        top_k: int = 10,
        thread_id: str | None = None,
        resource_id: str | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` stored messages most similar to ``text`` (message, thread, resource and score), within a
        thread or a resource when given; ``[]`` without semantic recall. For tools and operators: ``recall``
        is what an agent turn uses."""
        check_vector_search_args(text, top_k, thread_id, resource_id)
        with operation_span("threadmind.memory.search_vectors", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            index = self._core.door.running_index()
            if index is None:
                await anyio.lowlevel.checkpoint()
                return []
            return await index.query(text, top_k=top_k, thread_id=thread_id, resource_id=resource_id,
                                     threshold=threshold)

    async def load_index(self) -> int:
        """Load the semantic-recall index now and wait for it; the vectors it holds (0 without semantic recall).

        Otherwise the first operation that needs the index selects it, and a large one loads in the background
        while queries are answered exactly from the stored rows. A server calls this at start, before it takes
        traffic: hnswlib reads a snapshot holding the GIL, which stalls the event loop (1–6 s at a million
        vectors on a 2-core machine), and until the load ends semantic queries are slower.
        """
        index = self._core.door.running_index()
        if index is None:
            await anyio.lowlevel.checkpoint()
            return 0
        return await index.load()

    async def settled(self) -> None:
        """Return once the background work started so far has finished: titles, observations and reflections
        (and what they started meanwhile), then the index's queued work (the vectors of agent turns, HNSW
        insertion). The memory stays open; work started later is not waited for (Mastra's ``settled()``)."""
        await self._core.door.settled()

    async def flush_index(self) -> int:
        """Wait until every vector queued so far is written and searchable; returns how many were staged.

        Saves already return once their vectors are queryable; this is for work that opted out (an agent
        turn embeds in the background) and for tools that need a quiescent index.
        """
        index = self._core.door.running_index()
        if index is None:
            await anyio.lowlevel.checkpoint()
            return 0
        return await index.flush()

    @property
    def index_name(self) -> str | None:
        """The vector index semantic recall uses (``memory_messages_<dim>``), once the embedder's dimension is
        known (at ``start()``, or at the first use after an unreachable embedder)."""
        return self._core.door.index_name

    def index_statistics(self) -> IndexStatistics | None:
        """Counters of the vector index (live vectors, pending messages, batches...), or None without one."""
        index = self._core.door.index
        return index.statistics() if index is not None else None

    # working memory ------------------------------------------------------------------------------
    async def get_working_memory(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> str | None:
        """The stored working memory text, or None when disabled, empty, or the thread is another resource's."""
        check_ids(thread_id, resource_id)
        self._core.door.check_running()
        config = self._core.call_config(memory_config)
        if not config.working_memory.enabled:
            return None
        with operation_span("threadmind.memory.get_working_memory", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await read_working_memory(self._core.door, config, thread_id, resource_id)

    async def get_working_memory_object(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> Any:
        """The stored working memory read through ``workingMemory.schema``: an instance of the Pydantic model or
        msgspec Struct, the JSON object (a dict) for a JSON Schema; None when disabled, empty, or the thread is
        another resource's. ``get_working_memory`` still returns the stored JSON text.

        :raises ~threadmind.errors.ConfigError: working memory has no schema (Markdown is text: use
            ``get_working_memory``).
        :raises ~threadmind.errors.ValidationError: the stored text does not match the schema (it was written
            with ``update_working_memory`` or under another schema); the message names the path.
        """
        check_ids(thread_id, resource_id)
        self._core.door.check_running()
        config = self._core.call_config(memory_config)
        if not config.working_memory.enabled:
            return None
        compiled = config.working_memory.compiled_schema
        if compiled is None:
            raise ConfigError("get_working_memory_object needs workingMemory.schema (a Pydantic model, a msgspec "
                              "Struct or a JSON Schema); Markdown working memory is text: use get_working_memory")
        with operation_span("threadmind.memory.get_working_memory", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            text = await read_working_memory(self._core.door, config, thread_id, resource_id)
        return None if text is None else compiled.load(text)

    async def update_working_memory(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        working_memory: str,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> None:
        """Replace the working memory (serialized per resource or per thread); ``ResourceMismatch`` when the
        thread belongs to another resource."""
        check_ids(thread_id, resource_id)
        config = self._core.call_config(memory_config)
        if not config.working_memory.enabled:
            raise ConfigError("Working memory is not enabled for this memory instance")
        if not isinstance(working_memory, str):
            raise ValidationError(f"`working_memory` must be a string, got {type(working_memory).__name__}")
        scope, key = scope_key(config, thread_id, resource_id)
        await write_working_memory(self._core.door, scope, key, lambda _old: working_memory, owner=resource_id,
                                   thread_id=thread_id)

    def get_working_memory_template(
        self, *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> WorkingMemoryTemplate | None:
        """The Markdown template (trimmed) or the JSON Schema the model sees, with its ``$schema`` (draft-07
        unless a JSON Schema names another; 2020-12 for a Pydantic model or msgspec Struct); None when working
        memory is off."""
        return template_for(self._core.call_config(memory_config).working_memory)

    async def get_system_message(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> str | None:
        """The working-memory instruction the model sees (read-only variant when read-only), or None (also for
        a thread of another resource)."""
        check_ids(thread_id, resource_id)
        self._core.door.check_running()
        config = self._core.call_config(memory_config)
        template = template_for(config.working_memory)
        if template is None or config.working_memory.state_signals:  # delivered as a state signal instead
            return None
        with operation_span("threadmind.memory.get_system_message", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            if not await owned_by(self._core.door, thread_id, resource_id):
                return None
            data = await read_working_memory(self._core.door, config, thread_id, resource_id)
            if config.read_only or not config.working_memory.managed_by_agent:
                return readonly_instruction(data)
            return instruction(template, data, vnext=config.working_memory.version == "vnext")

    async def get_context(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> MemoryContext:
        """What one model call needs from memory, for callers that run their own model loop (Mastra's
        ``getContext``): the system message (observations, working-memory instruction), the messages to send
        (unobserved ones when observations exist, else the configured history) and the observation record. See
        :class:`MemoryContext`."""
        check_ids(thread_id, resource_id)
        config = self._core.call_config(memory_config)
        with operation_span("threadmind.memory.get_context", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await memory_context(self, config, thread_id, resource_id)

    async def summarize_thread(
        self,
        thread_id: str,
        *,
        model: LanguageModel,
        resource_id: str | None = None,
        instructions: str | None = None,
        last_messages: int | None = None,
        max_input_tokens: int = MAX_INPUT_TOKENS,
        extract: Sequence[Extractor] = (),
    ) -> ThreadSummary:
        """Summarize a thread in one model call (Mastra's ``summarizeThread``): observational memory's Observer
        over its newest messages (at most ``last_messages``, and no more than ``max_input_tokens``; the newest is
        always read), with ``instructions`` appended to the Observer's. Nothing is written: the summary is yours.
        Works with or without observational memory. ``extract``: :class:`~threadmind.memory.Extractor` s whose
        values come back in ``ThreadSummary.extracted`` (failures in ``extraction_failures``, never raised).

        :raises ModelError: the model failed.
        :raises ConfigError: ``extract`` holds something else than extractors, or one slug twice.
        """
        check_ids(thread_id, resource_id)
        check_limits(last_messages, max_input_tokens)
        extractors = check_extractors(extract)
        if not isinstance(model, LanguageModel):
            raise ValidationError("model must be a LanguageModel (generate/stream)")
        if instructions is not None and not isinstance(instructions, str):
            raise ValidationError(f"instructions must be a string or None, got {type(instructions).__name__}")
        return await summarize(self, thread_id, model=model, resource_id=resource_id, instructions=instructions,
                               last_messages=last_messages, max_input_tokens=max_input_tokens, extract=extractors)

    def list_tools(self, *, memory_config: MemoryConfig | Mapping[str, Any] | None = None) -> dict[str, Tool]:
        """Memory's tools: ``updateWorkingMemory`` when working memory is on and writable (``setWorkingMemory`` with
        ``useStateSignals``), and ``recall`` when observational memory runs in ``retrieval`` mode."""
        config = self._core.call_config(memory_config)
        return {tool.name: tool for tool in (working_memory_tool(self._core, config), recall_tool(config))
                if tool is not None}

    # processors and turns ------------------------------------------------------------------------
    def get_input_processors(
        self, configured: Sequence[object] = (), *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> list[object]:
        """The memory's input processors in the reference order, skipping ids already ``configured``."""
        return self._pipeline.input_processors(configured, self._core.call_config(memory_config))

    def get_output_processors(
        self, configured: Sequence[object] = (), *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> list[object]:
        """The memory's output processors: ``semantic-recall`` then ``message-history``."""
        return self._pipeline.output_processors(configured, self._core.call_config(memory_config))

    def turn(
        self,
        thread_id: str,
        resource_id: str,
        *,
        memory_options: MemoryConfig | Mapping[str, Any] | None = None,
        input_processors: Sequence[object] = (),
        output_processors: Sequence[object] = (),
        input_ids: Sequence[str] = (),
    ) -> AbstractAsyncContextManager[Turn]:
        """Hold ``thread_id`` for one agent turn and prepare it (see :class:`~threadmind.memory.Turn`).

        The seam agent runners build on: the thread is taken per ``thread_concurrency``, made sure to exist and
        to belong to ``resource_id``, and the memory's processors (skipping the ids in the runner's own
        ``input_processors``/``output_processors``) and tools are built with the per-call ``memory_options``.
        ``input_ids``: the ids the caller chose for the turn's input messages; one of another thread is refused
        before anything is written (a missing thread is not created), and those already stored in this thread
        keep their times when the runner calls :meth:`Turn.order_input`.

        :raises ThreadBusy: ``thread_concurrency="reject"`` and another turn holds the thread.
        :raises ResourceMismatch: the thread belongs to another resource.
        :raises MessageIdTaken: an id of ``input_ids`` belongs to another thread.
        """
        require_id(thread_id, "thread_id")
        require_id(resource_id, "resource_id")
        return open_turn(self._core, self._pipeline, thread_id, resource_id, memory_options, input_processors,
                         output_processors, input_ids)

    # tokens --------------------------------------------------------------------------------------
    def estimate_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the memory's token counter (the tokenx-style estimator by default)."""
        if not isinstance(text, str):
            raise ValidationError(f"`text` must be a string, got {type(text).__name__}")
        return self._core.tokens.count_text(text)

