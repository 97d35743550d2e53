"""The ``Memory`` facade: threads, messages, recall and working memory over a store and an index.

``Memory`` owns policy (history windows, recall, hygiene, validation); stores persist, actors serialize.
Every thread operation runs through that thread's :class:`~threadmind.actors.ThreadActor`; every
resource-scoped working-memory update through a resource actor. ``start()``/``aclose()`` (or
``async with``) enter and exit the task groups that own those actors, so they must be called from the
same task, as with any anyio task group.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import math
import re
import uuid
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import anyio
import msgspec

from ._config import (
    GenerateTitleConfig,
    IndexConfig,
    MemoryConfig,
    MessageHistoryConfig,
    MessageRange,
    ObservationalMemoryConfig,
    SemanticRecallConfig,
    WorkingMemoryConfig,
    memory_config_from,
    merge_config,
)
from ._history import BOUNDARY_KEY, Boundary
from ._hygiene import persistable
from ._results import CloneResult, RecallResult, SaveResult, Usage, WorkingMemoryTemplate
from ._working_memory import (
    deep_merge,
    drop_optional_nulls,
    instruction,
    normalize_ws,
    readonly_instruction,
    template_for,
    validate_schema,
)
from .actors._registry import ActorRegistry
from .actors._resource_actor import GetResource, ResourceActor
from .actors._thread_actor import (
    TAIL_MAX,
    TAIL_TTL,
    CreateThread,
    DeleteMessages,
    DeleteThread,
    Exclusive,
    GetThread,
    LoadMessages,
    LoadWindow,
    PatchThreadMetadata,
    SaveMessages,
    ThreadActor,
    UpdateThread,
)
from .codecs import (
    Message,
    Resource,
    Thread,
    checked_message,
    encode_json,
    message_from_dict,
    to_iso,
    utc_now,
)
from .errors import (
    ConfigError,
    EmbedderError,
    EmbeddingDimensionMismatch,
    InvalidMessage,
    ResourceMismatch,
    ThreadBusy,
    ThreadmindError,
    ThreadNotFound,
    ValidationError,
)
from .processors._history import MemoryTokenLimiter, MessageHistory
from .processors._input_filter import MemoryInputFilter
from .processors._merge import is_system_reminder
from .processors._protocol import processor_id
from .processors._semantic import SemanticRecall
from .processors._working_memory import WorkingMemory
from .stores._protocol import DateRange, Include, MessagePage, MessageQuery, SaveHook, Store, ThreadPage
from .tokens import DefaultTokenCounter, TokenCounter
from .tracing import operation_span

if TYPE_CHECKING:
    from ._observational import ObservationalMemoryEngine
    from .actors._index_actor import IndexActor, IndexStatistics, VectorHit
    from .agent import Tool, ToolContext
    from .embedders._protocol import Embedder
    from .models import LanguageModel
    from .processors._message_list import MessageList
    from .stores._hnsw import HnswVectorStore

__all__ = (
    "GenerateTitleConfig",
    "IndexConfig",
    "Memory",
    "MemoryConfig",
    "MessageHistoryConfig",
    "MessageRange",
    "ObservationalMemoryConfig",
    "SemanticRecallConfig",
    "WorkingMemoryConfig",
)

T = TypeVar("T")
_log = logging.getLogger("threadmind.memory")

_STORAGE_MISSING = (
    "Memory requires a storage provider to function. Add a storage configuration to Memory "
    "(for example storage=SQLiteStore('memory.db'))."
)


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


def _require_id(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"`{field}` must be a non-empty string, got {value!r}")
    return value


def _configured_ids(configured: object) -> set[str]:
    """The ids of the processors a caller configured itself (memory skips those)."""
    if configured is None:
        return set()
    if isinstance(configured, (str, bytes, Mapping)) or not isinstance(configured, Iterable):
        raise ValidationError(f"`configured` must be a list of processors, got {type(configured).__name__}")
    return {processor_id(p) for p in configured}


def _check_ids(thread_id: object, resource_id: object) -> None:
    """A thread id and an optional resource id, as working-memory calls take them."""
    _require_id(thread_id, "thread_id")
    if resource_id is not None:
        _require_id(resource_id, "resource_id")


_MERGED_CONFIGS = 256  # per-call configs remembered by their JSON (most callers pass the same few each time)
_config_json = msgspec.json.Encoder().encode


def _check_message(message: Message, index: int) -> Message:
    """A ``Message`` built in Python is not type-checked by msgspec: check it stores and reads back."""
    if not isinstance(message.id, str) or not message.id:
        raise ValidationError(f"messages[{index}].id must be a non-empty string, got {message.id!r}")
    return checked_message(message, f"messages[{index}]")


def _coerce_message(value: object, index: int) -> Message:
    if isinstance(value, Message):
        return _check_message(value, index)
    if isinstance(value, Mapping):
        try:
            return message_from_dict(value)
        except InvalidMessage as exc:
            text = exc.message
            text = text.replace("`$.", f"`messages[{index}].") if "`$." in text else f"{text} - at `messages[{index}]`"
            raise InvalidMessage(text) from exc
    raise ValidationError(f"messages[{index}] must be a Message or a dict, not {type(value).__name__}")


def _check_metadata(metadata: object) -> None:
    """Thread metadata must be a dict that encodes as JSON (msgspec raises NotImplementedError otherwise)."""
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"`metadata` must be a dict, got {type(metadata).__name__}")
    try:
        encode_json(dict(metadata))
    except (TypeError, ValueError, NotImplementedError, msgspec.EncodeError) as exc:
        raise ValidationError(f"`metadata` is not JSON-serializable: {exc}") from exc


def _include_from(value: object, index: int) -> Include:
    if isinstance(value, Include):
        return value
    if not isinstance(value, Mapping) or not isinstance(value.get("id"), str):
        raise ValidationError(f"include[{index}] must be a dict with a string 'id'")

    def _count(*names: str) -> int:
        for name in names:
            if name in value:
                count = value[name]
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise ValidationError(f"include[{index}].{name} must be a non-negative integer")
                return count
        return 0

    return Include(
        id=value["id"],
        with_previous_messages=_count("with_previous_messages", "withPreviousMessages"),
        with_next_messages=_count("with_next_messages", "withNextMessages"),
    )


def _date_range_from(value: object) -> DateRange | None:
    if value is None or isinstance(value, DateRange):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError("date_range must be a dict with start/end datetimes")
    known = {"start", "end", "start_exclusive", "end_exclusive", "startExclusive", "endExclusive"}
    unknown = set(value) - known
    if unknown:
        raise ValidationError(f"date_range has unknown keys {sorted(unknown)}; use start, end, *_exclusive")
    for key in ("start", "end"):
        if value.get(key) is not None and not isinstance(value[key], datetime):
            raise ValidationError(f"date_range.{key} must be a datetime or None")
    return DateRange(
        start=value.get("start"),
        end=value.get("end"),
        start_exclusive=bool(value.get("start_exclusive", value.get("startExclusive", False))),
        end_exclusive=bool(value.get("end_exclusive", value.get("endExclusive", False))),
    )


class Memory:
    """Durable conversational memory for agents (threads, messages, recall, working memory).

    :param storage: a ``Store`` (``SQLiteStore`` or ``InMemoryStore``); operations without one raise
        ``ConfigError``.
    :param vector: an ``HnswVectorStore`` for semantic recall, or None/False for none.
    :param embedder: an ``Embedder`` or a model-router string such as ``"openai/text-embedding-3-small"``.
    :param embedding_dimension: the expected vector length; a different embedder output raises
        ``EmbeddingDimensionMismatch`` before any index is created.
    :param options: a ``MemoryConfig`` or a dict in Mastra's camelCase shape.
    :param token_counter: counts tokens for budgets and ``estimate_tokens``; the reference-compatible
        estimator by default, or ``ExactTokenCounter()`` (extra ``[tokens]``) for real BPE counts.
    :param cache_ttl: seconds the thread and resource actors (and observational memory) trust what they
        cached from the store: a thread's row and newest messages, a resource's row, the current OM record.
        Writes in this process (through this memory, straight into ``memory.storage``, or through another
        ``SQLiteStore`` object on the same file) are seen at once either way; the TTL bounds how long a write
        by another process can go unseen. ``None``: no expiry, for a database only this process writes (a
        turn after a pause then reads nothing before the model).
    """

    def __init__(
        self,
        *,
        storage: Store | None = None,
        vector: HnswVectorStore | Literal[False] | None = None,
        embedder: Embedder | str | None = None,
        embedding_dimension: int | None = None,
        options: MemoryConfig | Mapping[str, Any] | None = None,
        idle_timeout: float = 300.0,
        token_counter: TokenCounter | None = None,
        max_actors: int = 10_000,
        cache_ttl: float | None = TAIL_TTL,
    ) -> None:
        if cache_ttl is not None and (isinstance(cache_ttl, bool) or not isinstance(cache_ttl, (int, float))
                                      or not cache_ttl >= 0):
            raise ConfigError(f"cache_ttl must be None or a number of seconds >= 0, got {cache_ttl!r}")
        if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float)) or not idle_timeout >= 0:
            raise ConfigError(f"idle_timeout must be a number of seconds >= 0, got {idle_timeout!r}")
        if isinstance(max_actors, bool) or not isinstance(max_actors, int) or max_actors < 1:
            raise ConfigError(f"max_actors must be an integer >= 1, got {max_actors!r}")
        self._cache_ttl = math.inf if cache_ttl is None else float(cache_ttl)
        self._options = memory_config_from(options)
        self._merged: OrderedDict[bytes, MemoryConfig] = OrderedDict()
        if embedding_dimension is not None and (
            isinstance(embedding_dimension, bool) or not isinstance(embedding_dimension, int) or embedding_dimension < 1
        ):
            raise ConfigError("embedding_dimension must be a positive integer")
        if isinstance(embedder, str):
            from .embedders._resolve import resolve_embedder

            embedder = resolve_embedder(embedder)
        self._storage = storage
        self._vector = vector or None
        self._embedder = embedder
        self._embedding_dimension = embedding_dimension
        if self._options.semantic_recall_config is not None:
            if self._vector is None:
                raise ConfigError("Semantic recall requires a vector store to be configured.",
                                  code="THREADMIND_CONFIG_VECTOR")
            if self._embedder is None:
                raise ConfigError("Semantic recall requires an embedder to be configured.",
                                  code="THREADMIND_CONFIG_EMBEDDER")
            # The HNSW parameters come from the vector store, or from semanticRecall.indexConfig where the
            # store was left at its defaults (per-call configs cannot rebuild the index).
            wanted = self._options.semantic_recall_config.index_config
            self._vector._adopt(wanted.metric, wanted.m, wanted.ef_construction, wanted.ef_search)
        self._idle_timeout = idle_timeout
        self._tokens: TokenCounter = token_counter or DefaultTokenCounter()
        self._max_actors = max_actors
        self._state = _State.NEW
        # The task that owns the actor system (see ``start``), what it says once started, and its stop signal.
        self._host: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._threads: ActorRegistry[ThreadActor] | None = None
        self._resources: ActorRegistry[ResourceActor] | None = None
        self._index: IndexActor | None = None
        self._background: anyio.abc.TaskGroup | None = None
        self._index_name: str | None = None
        self._routed = _RoutedStore(self)
        self._om_engine: ObservationalMemoryEngine | None = None

    # lifecycle -----------------------------------------------------------------------------------
    @property
    def options(self) -> MemoryConfig:
        """The instance options (per-call options merge over these)."""
        return self._options

    @property
    def storage(self) -> Store:
        """The configured store; ``ConfigError`` when there is none."""
        if self._storage is None:
            raise ConfigError(_STORAGE_MISSING, code="THREADMIND_STORAGE_MISSING")
        return self._storage

    async def start(self) -> None:
        """Open the store and start the actor system (idempotent).

        The actor system lives in a task of its own, owned by this Memory, so ``start()`` and ``aclose()`` may
        be called from any task and under any timeout (a server's startup and shutdown handlers).
        """
        if self._state is _State.RUNNING:
            return
        if self._state is _State.CLOSED:
            raise ThreadmindError("this Memory is closed; create a new one", code="THREADMIND_CLOSED")
        store = self.storage
        if self._started is None:  # the first start(); a concurrent one waits for the same outcome
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._stop = asyncio.Event()
            self._host = loop.create_task(self._run_host(store, self._started, self._stop), name="threadmind.memory")
        started = self._started
        try:
            await asyncio.shield(started)
        except BaseException:
            if not started.done() or started.cancelled() or started.exception() is not None:
                await self._stop_host()  # a failed or interrupted start leaves nothing running
                if self._started is started:  # and a later start() tries afresh
                    self._host = self._started = self._stop = None
            raise
        self._state = _State.RUNNING

    async def _run_host(self, store: Store, started: asyncio.Future[None], stop: asyncio.Event) -> None:
        """(host task) Enter the store and the actor system, report, run until ``aclose()``, then drain them."""
        try:
            async with AsyncExitStack() as stack:
                await self._enter_system(stack, store)
                started.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if started.done():
                raise  # a failure while draining: aclose() reports it
            if isinstance(exc, asyncio.CancelledError):
                started.cancel()
            else:
                started.set_exception(exc)

    async def _enter_system(self, stack: AsyncExitStack, store: Store) -> None:
        await store.open()
        stack.push_async_callback(store.aclose)
        self._threads = await stack.enter_async_context(
            ActorRegistry(
                lambda key: ThreadActor(key, store, ttl=self._cache_ttl),
                idle_timeout=self._idle_timeout,
                max_actors=self._max_actors,
                sweep_interval=_sweep_interval(self._idle_timeout),
            )
        )
        self._resources = await stack.enter_async_context(
            ActorRegistry(lambda key: ResourceActor(key, store, ttl=self._cache_ttl),
                          idle_timeout=self._idle_timeout, sweep_interval=_sweep_interval(self._idle_timeout))
        )
        if self._vector is not None and self._embedder is not None:
            from .actors._index_actor import IndexActor

            recall = self._options.semantic_recall_config or SemanticRecallConfig()
            index = IndexActor(
                store=store,
                vector=self._vector,
                embedder=self._embedder,
                embedding_dimension=self._embedding_dimension,
                max_chunk_chars=recall.max_chunk_chars,
            )
            self._index = await stack.enter_async_context(index)
            try:  # learn the index name now so get_input_processors() can stay synchronous
                await index.dimension()
                self._index_name = await index.index_name()
            except ThreadmindError:
                _log.warning("embedder dimension probe failed at start; will retry on first use")
            if self._index_name is not None:  # a Mastra file: bring its vectors over once (index empty)
                from ._interop import import_mastra_vectors

                try:
                    await import_mastra_vectors(store, index_names=[self._index_name])
                except ThreadmindError:
                    _log.warning("could not import Mastra vectors into %s", self._index_name, exc_info=True)
        self._background = await stack.enter_async_context(anyio.create_task_group())

    async def _stop_host(self) -> None:
        """Tell the host task to drain and wait for it, even if this caller is cancelled meanwhile (shielded:
        the shutdown then completes on its own)."""
        host, stop = self._host, self._stop
        if host is None or stop is None:
            return
        stop.set()
        await asyncio.shield(host)

    async def aclose(self) -> None:
        """Wait for background work, drain every actor, flush the index and close the store (from any task)."""
        state, self._state = self._state, _State.CLOSED
        if state is _State.RUNNING or self._host is not None:
            await self._stop_host()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    def __del__(self) -> None:
        if getattr(self, "_state", None) is _State.RUNNING:
            warnings.warn("unclosed Memory; use `async with memory:` or await memory.aclose()", ResourceWarning,
                          stacklevel=1)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _running(self) -> tuple[Store, ActorRegistry[ThreadActor]]:
        store = self.storage
        if self._state is _State.NEW:
            raise ThreadmindError(
                "Memory is not started: use `async with memory:` or `await memory.start()` first",
                code="THREADMIND_NOT_STARTED",
            )
        if self._state is _State.CLOSED or self._threads is None:
            raise ThreadmindError("this Memory is closed", code="THREADMIND_CLOSED")
        return store, self._threads

    async def _ask(self, thread_id: str, command: Any) -> Any:
        _, threads = self._running()
        return await threads.ask(thread_id, command)

    async def _exclusive(self, thread_id: str, fn: Callable[[], Awaitable[T]], name: str) -> T:
        result: T = await self._ask(thread_id, Exclusive(fn, name))
        return result

    async def _holding(self, thread_ids: Sequence[str], fn: Callable[[], Awaitable[T]], name: str) -> T:
        """Run ``fn`` while holding the actor of each of ``thread_ids`` (an ``Exclusive`` on each, nested).

        Callers pass the ids sorted: two holders then always take their common actors in the same order,
        so neither can wait on the other (no thread command waits on another thread's actor). Once the
        first actor has started, the rest runs to completion even if the caller leaves (handlers are
        shielded).
        """
        if not thread_ids:
            return await fn()
        first, rest = thread_ids[0], thread_ids[1:]
        return await self._exclusive(first, lambda: self._holding(rest, fn, name), name)

    async def _background_exclusive(
        self, thread_id: str, fn: Callable[[], Awaitable[T]], name: str, *, thread_unchanged: bool = False
    ) -> T:
        """``_exclusive`` for background work: it still runs while ``aclose()`` drains the background group."""
        if self._threads is None:
            raise ThreadmindError("this Memory is closed", code="THREADMIND_CLOSED")
        result: T = await self._threads.ask(thread_id, Exclusive(fn, name, thread_unchanged))
        return result

    async def _resource_exclusive(self, resource_id: str, fn: Callable[[], Awaitable[T]], name: str) -> T:
        self._running()
        assert self._resources is not None
        result: T = await self._resources.ask(resource_id, Exclusive(fn, name))
        return result

    async def _get_resource(self, resource_id: str) -> Resource | None:
        """The resource row through its actor (cached while fresh; after any update through it, re-read)."""
        self._running()
        assert self._resources is not None
        resource: Resource | None = await self._resources.ask(resource_id, GetResource())
        return resource

    def _call_config(self, override: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
        if override is None or override is self._options:
            return self._options
        if type(override) is not dict:
            return merge_config(self._options, override)
        try:  # the same per-call dict comes with every turn: merge it once (configs are frozen)
            key = _config_json(override)
        except (TypeError, msgspec.EncodeError):  # holds a value JSON cannot express (a schema class, a model)
            return merge_config(self._options, override)
        merged = self._merged.get(key)
        if merged is None:
            merged = self._merged[key] = merge_config(self._options, override)
            if len(self._merged) > _MERGED_CONFIGS:
                self._merged.popitem(last=False)
        else:
            self._merged.move_to_end(key)
        return merged

    # threads -------------------------------------------------------------------------------------
    async def create_thread(
        self,
        *,
        resource_id: str,
        thread_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Create a thread owned by ``resource_id``; ``ValidationError`` if the id is taken."""
        _require_id(resource_id, "resource_id")
        if thread_id is not None:
            _require_id(thread_id, "thread_id")
        if title is not None and not isinstance(title, str):
            raise ValidationError(f"`title` must be a string, got {type(title).__name__}")
        _check_metadata(metadata)
        thread_id = thread_id or str(uuid.uuid4())
        now = utc_now()
        thread = Thread(thread_id, resource_id, title or "", dict(metadata) if metadata is not None else None, now, now)
        with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            created: Thread = await self._ask(thread_id, CreateThread(thread))
            await self._mirror_working_memory(created.resource_id, metadata)
            return created

    async def _mirror_working_memory(self, resource_id: str, metadata: Mapping[str, Any] | None) -> None:
        """Thread metadata carrying a string ``workingMemory`` also sets the resource's, when working memory is
        resource-scoped (reference §7.1: saveThread/updateThread)."""
        text = metadata.get("workingMemory") if metadata else None
        wm = self._options.working_memory
        if isinstance(text, str) and wm.enabled and wm.scope == "resource":
            await self._write_working_memory("resource", resource_id, lambda _old: text)

    async def get_thread_by_id(self, thread_id: str, *, resource_id: str | None = None) -> Thread | None:
        """The thread, or None when missing or owned by another resource than ``resource_id``."""
        _require_id(thread_id, "thread_id")
        with operation_span("threadmind.memory.get_thread", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            store, _ = self._running()
            thread = await store.get_thread(thread_id)
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
            _require_id(resource_id, "resource_id")
        order: Literal["created_at", "updated_at"] = "updated_at" if order_by in ("updated_at", "updatedAt") \
            else "created_at"
        with operation_span("threadmind.memory.list_threads", "search_memory", resource_id=resource_id):
            store, _ = self._running()
            return await store.list_threads(resource_id=resource_id, page=page, per_page=per_page, order_by=order,
                                            direction=direction, metadata=metadata)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Thread:
        """Set the title and/or shallow-merge metadata; ``ThreadNotFound`` when missing."""
        _require_id(thread_id, "thread_id")
        if title is not None and not isinstance(title, str):
            raise ValidationError(f"`title` must be a string, got {type(title).__name__}")
        _check_metadata(metadata)
        with operation_span("threadmind.memory.update_thread", "update_memory", thread_id=thread_id):
            thread: Thread = await self._ask(thread_id, UpdateThread(title, metadata))
            await self._mirror_working_memory(thread.resource_id, metadata)
            return thread

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread, its messages and its vectors."""
        _require_id(thread_id, "thread_id")
        with operation_span("threadmind.memory.delete_thread", "delete_memory", thread_id=thread_id):
            await self._ask(thread_id, DeleteThread())
            if self._index is not None:
                await self._index.delete_thread(thread_id)
            if self._om_engine is not None:  # the thread's observations go with it (reference §1 deleteThread)
                await self._om_engine.records.delete(f"thread:{thread_id}")

    async def update_thread_resource_id(self, thread_id: str, *, resource_id: str) -> Thread:
        """Move a thread and all its messages (and vectors) to another resource."""
        _require_id(thread_id, "thread_id")
        _require_id(resource_id, "resource_id")
        with operation_span("threadmind.memory.update_thread_resource_id", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            store, _ = self._running()
            thread = await self._exclusive(
                thread_id, lambda: store.update_thread_resource_id(thread_id, resource_id), "move_thread"
            )
            if self._index is not None:
                await self._index.move_thread(thread_id, resource_id)
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
        config = self._call_config(memory_config)
        if type(messages) is not list and (isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence)):
            raise ValidationError("`messages` must be a list of Message objects or dicts")
        batch: list[Message] = []
        seen: dict[str, int] = {}
        for index, value in enumerate(messages):
            message = _coerce_message(value, index)
            thread_id, resource_id = message.thread_id, message.resource_id
            # The field names are formatted only on failure (this loop runs for every saved message).
            if not (type(thread_id) is str and thread_id.strip()):
                _require_id(thread_id, f"messages[{index}].thread_id")
            if not (type(resource_id) is str and resource_id.strip()):
                _require_id(resource_id, f"messages[{index}].resource_id")
            kept = persistable(message)
            if kept is None:
                continue
            if kept.id in seen:  # a repeated id in one batch: the last copy wins, in the first slot
                batch[seen[kept.id]] = kept
                continue
            seen[kept.id] = len(batch)
            batch.append(kept)
        by_thread: dict[str, list[Message]] = {}
        for message in batch:
            by_thread.setdefault(message.thread_id or "", []).append(message)
        only = next(iter(by_thread)) if len(by_thread) == 1 else None
        owner = batch[0].resource_id if batch and all(m.resource_id == batch[0].resource_id for m in batch) else None
        with operation_span("threadmind.memory.save_messages", "upsert_memory", thread_id=only, resource_id=owner,
                            threadmind__messages__count=len(batch)):
            self._running()
            if not batch:
                return SaveResult(messages=[])
            indexer = self._index if config.semantic_recall_config is not None else None
            marker = indexer.pending_marker() if indexer is not None else None
            if indexer is not None and only is not None:
                # One thread: embed while the save commits (the vectors are staged once it has committed).
                upsert = indexer.upsert_on_commit(batch)
                saved: list[Message] = await self._ask(only, SaveMessages(batch, marker, upsert))
                tokens = await upsert.result()
            else:
                saved = await self._save_by_thread(by_thread, marker)
                tokens = await indexer.upsert_messages(saved) if indexer is not None else 0
            saved.sort(key=_created_at)  # as stored: ascending by created_at, ties in batch order (reference §1)
            return SaveResult(messages=saved, usage=Usage(tokens=tokens) if tokens else None)

    async def _check_threads(self, by_thread: dict[str, list[Message]]) -> None:
        """Refuse a batch spanning threads before any part of it is written (each part commits on its own)."""
        store, _ = self._running()
        owner: dict[str, str] = {}
        for thread_id, msgs in by_thread.items():
            thread = await store.get_thread(thread_id)
            if thread is None:
                raise ThreadNotFound(thread_id)
            for message in msgs:
                if message.resource_id != thread.resource_id:
                    raise ResourceMismatch(thread_id, thread.resource_id, str(message.resource_id))
                owner[message.id] = thread_id
        for found in await store.get_messages_by_id(list(owner)):
            if found.thread_id != owner[found.id]:
                raise ValidationError(f"message id {found.id!r} already belongs to thread {found.thread_id!r}; a "
                                      f"message cannot move to thread {owner[found.id]!r}")

    async def _save_by_thread(
        self, by_thread: dict[str, list[Message]], marker: SaveHook | None = None
    ) -> list[Message]:
        if len(by_thread) == 1:
            ((thread_id, msgs),) = by_thread.items()
            saved: list[Message] = await self._ask(thread_id, SaveMessages(msgs, marker))
            return saved
        store, _ = self._running()
        save_many = getattr(store, "save_messages_many", None)
        results: dict[str, list[Message]] = {}
        if save_many is not None:
            # One transaction for every thread's part, written while each thread's actor is held, so the
            # batch takes its place in every thread's arrival order and no part commits without the others.
            async def write() -> dict[str, list[Message]]:
                stored: dict[str, list[Message]] = await save_many(by_thread, after=marker)
                return stored

            results = await self._holding(sorted(by_thread), write, "save_messages")
        else:  # a store without it: refuse early, then each thread's part commits on its own
            await self._check_threads(by_thread)

            async def _one(thread_id: str, msgs: list[Message]) -> None:
                results[thread_id] = await self._ask(thread_id, SaveMessages(msgs, marker))

            async with anyio.create_task_group() as tg:
                for thread_id, msgs in by_thread.items():
                    tg.start_soon(_one, thread_id, msgs)
        return [m for thread_id in by_thread for m in results[thread_id]]

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
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise ValidationError("threadId must be a non-empty string or array of non-empty strings",
                                  code="MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_THREAD_ID")
        if resource_id is not None:
            _require_id(resource_id, "resource_id")
        if isinstance(page, bool) or not isinstance(page, int) or page < 0:
            raise ValidationError(f"page must be a non-negative integer, got {page!r}",
                                  code="MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_PAGE")
        if per_page is not None and per_page is not False and (
            per_page is True or not isinstance(per_page, int) or per_page < 0
        ):
            raise ValidationError(f"per_page must be a non-negative integer, False (all) or None, got {per_page!r}")
        if direction is not None and direction not in ("ASC", "DESC"):
            raise ValidationError(f"direction must be 'ASC' or 'DESC', got {direction!r}")
        if include is not None and (isinstance(include, (str, bytes, Mapping)) or not isinstance(include, Sequence)):
            raise ValidationError(f"`include` must be a list of {{id, with_previous_messages, with_next_messages}}, "
                                  f"got {type(include).__name__}")
        includes = [_include_from(v, i) for i, v in enumerate(include or ())]
        window = _date_range_from(date_range)
        config = self._call_config(thread_config)
        semantic = config.semantic_recall_config if (vector_search_string and self._index is not None) else None
        with operation_span("threadmind.memory.recall", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            store, _ = self._running()
            if not config.history_enabled and per_page is None and semantic is None:
                # Reference §1.1 step 2: no history asked for and no search to run (``include`` or not).
                return RecallResult(messages=[], total=0, page=page, per_page=0, has_more=False)
            # Step 3: resource-scoped semantic recall, as configured, tolerates a thread that does not exist yet.
            configured = config.semantic_recall_config
            tolerate_missing = configured is not None and configured.scope != "thread"
            limit = config.max_messages
            if (per_page is None and page == 0 and direction is None and not includes and window is None
                    and semantic is None and config.message_history is None and limit):
                # The default window comes from the thread actor's in-memory tail: no database read when warm.
                tail: MessagePage = await self._ask(thread_id, LoadWindow(limit, resource_id, tolerate_missing))
                return RecallResult(messages=_visible(tail.messages), total=tail.total, page=0, per_page=limit,
                                    has_more=tail.has_more)
            if resource_id is not None:
                thread = await store.get_thread(thread_id)
                if thread is None and not tolerate_missing:
                    raise ThreadNotFound(thread_id, message=f"No thread found with id {thread_id}")
                if thread is not None and thread.resource_id != resource_id:
                    raise ResourceMismatch(thread_id, thread.resource_id, resource_id)
            degraded = False
            if semantic is not None:
                assert vector_search_string is not None
                hits_include, degraded = await self._semantic_includes(
                    vector_search_string, semantic, thread_id=thread_id, resource_id=resource_id
                )
                includes.extend(hits_include)
            if per_page is None and config.message_history is not None and config.history_enabled:
                return await self._token_window(thread_id, resource_id, config, includes, degraded)
            size: int | bool = per_page if per_page is not None else (config.max_messages or 0)
            newest_first = direction is None and size is not False
            query = MessageQuery(
                thread_id=thread_id,
                resource_id=resource_id,
                page=page,
                per_page=size,
                direction="DESC" if newest_first else (direction or "ASC"),
                include=includes,
                date_range=window,
            )
            result: MessagePage = await self._ask(thread_id, LoadMessages(query))
            messages = _visible(result.messages)
            if newest_first:
                messages.reverse()  # the store returned (created_at, sequence) descending
            return RecallResult(messages=messages, total=result.total, page=result.page,
                                per_page=result.per_page, has_more=result.has_more, degraded=degraded)

    async def _semantic_includes(
        self, text: str, semantic: SemanticRecallConfig, *, thread_id: str, resource_id: str | None
    ) -> tuple[list[Include], bool]:
        assert self._index is not None
        if semantic.scope == "resource" and resource_id is None:
            raise ValidationError(
                "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided. "
                "Either provide a resourceId or explicitly set semanticRecall.scope to 'thread'."
            )
        from .actors._index_actor import chunk_text

        # The query is chunked as stored texts are (whitespace runs become one space; reference §6.2), and
        # each chunk runs its own top-k query; a message found by several chunks comes once.
        found: dict[str, None] = {}
        try:
            for chunk in chunk_text(text, semantic.max_chunk_chars):
                hits = await self._index.query(
                    chunk,
                    top_k=semantic.top_k,
                    resource_id=resource_id if semantic.scope == "resource" else None,
                    thread_id=thread_id if semantic.scope == "thread" else None,
                    threshold=semantic.threshold,
                )
                found.update(dict.fromkeys(hit.message_id for hit in hits))
        except EmbedderError:
            return [], True
        window = semantic.range
        return [
            Include(id=message_id, with_previous_messages=window.before, with_next_messages=window.after)
            for message_id in found
        ], False

    async def _token_window(
        self,
        thread_id: str,
        resource_id: str | None,
        config: MemoryConfig,
        includes: list[Include],
        degraded: bool,
    ) -> RecallResult:
        from ._history import load_token_window

        store, _ = self._running()

        history = config.message_history
        assert history is not None

        async def _load() -> list[Message]:
            return await load_token_window(store, thread_id, resource_id, history, config.max_messages, includes,
                                           counter=self._tokens)

        messages = await self._exclusive(thread_id, _load, "load_token_window")
        messages = _visible(messages)
        per_page: int | bool = config.max_messages if config.max_messages is not None else False
        return RecallResult(messages=messages, total=len(messages), page=0, per_page=per_page, has_more=False,
                            degraded=degraded)

    async def list_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by time; unknown ids are skipped."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValidationError("`ids` must be a list of message ids")
        for i, value in enumerate(ids):
            _require_id(value, f"ids[{i}]")
        with operation_span("threadmind.memory.list_messages_by_id", "search_memory"):
            store, _ = self._running()
            return await store.get_messages_by_id(list(ids))

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged); changed text is re-embedded."""
        if isinstance(updates, (str, bytes, Mapping)) or not isinstance(updates, Sequence):
            raise ValidationError("`updates` must be a list of dicts, each with an 'id'")
        for i, update in enumerate(updates):
            if not isinstance(update, Mapping):
                raise ValidationError(f"updates[{i}] must be a dict with an 'id'")
            _require_id(update.get("id"), f"updates[{i}].id")
        store, _ = self._running()
        if not updates:
            await anyio.lowlevel.checkpoint()
            return []
        with operation_span("threadmind.memory.update_messages", "update_memory"):
            existing = {m.id: m for m in await store.get_messages_by_id([u["id"] for u in updates])}
            by_thread: dict[str, list[Mapping[str, Any]]] = {}
            for i, update in enumerate(updates):
                old = existing.get(update["id"])
                if old is None:
                    raise ValidationError(f"updates[{i}].id: message {update['id']!r} does not exist")
                for key in ("resource_id", "resourceId"):  # a message always carries its thread's owner
                    if key in update and update[key] != old.resource_id:
                        raise ValidationError(f"updates[{i}].{key}: message {old.id!r} belongs to resource "
                                              f"{old.resource_id!r}; use update_thread_resource_id to move threads")
                by_thread.setdefault(old.thread_id or "", []).append(update)
            # One transaction for every thread involved, written while their actors are held (as a batch save).
            updated: list[Message] = await self._holding(
                sorted(by_thread), _bind(store.update_messages, list(updates)), "update_messages")
            if self._index is not None and self._options.semantic_recall_config is not None:
                changed = [m for m in updated if existing[m.id].content != m.content]
                if changed:
                    await self._index.upsert_messages(changed)
            return updated

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
        store, _ = self._running()
        if not keys:
            await anyio.lowlevel.checkpoint()
            return
        with operation_span("threadmind.memory.delete_messages", "delete_memory"):
            by_thread: dict[str, list[str]] = {}
            for message in await store.get_messages_by_id(keys):
                by_thread.setdefault(message.thread_id or "", []).append(message.id)
            if len(by_thread) == 1:
                ((thread_id, subset),) = by_thread.items()
                await self._ask(thread_id, DeleteMessages(subset))
            elif by_thread:  # one transaction for every thread involved, written while their actors are held
                found = [mid for subset in by_thread.values() for mid in subset]
                await self._holding(sorted(by_thread), _bind(store.delete_messages, found), "delete_messages")
            if self._index is not None:
                await self._index.delete_messages(keys)

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
        memory and its observations (see ``_clone_side_state``)."""
        _require_id(source_thread_id, "source_thread_id")
        if new_thread_id is not None:
            _require_id(new_thread_id, "new_thread_id")
        if resource_id is not None:
            _require_id(resource_id, "resource_id")
        if message_limit is not None and (isinstance(message_limit, bool) or not isinstance(message_limit, int)
                                          or message_limit < 0):
            raise ValidationError("message_limit must be a non-negative integer")
        _check_metadata(metadata)
        with operation_span("threadmind.memory.clone_thread", "update_memory", thread_id=source_thread_id,
                            resource_id=resource_id):
            store, _ = self._running()
            source = await store.get_thread(source_thread_id)
            if source is None:
                raise ThreadNotFound(source_thread_id, code="MASTRA_STORAGE_LIBSQL_CLONE_THREAD_SOURCE_NOT_FOUND",
                                     message=f"Source thread with id {source_thread_id} not found")
            page: MessagePage = await self._ask(
                source_thread_id, LoadMessages(MessageQuery(thread_id=source_thread_id, per_page=False))
            )
            originals = page.messages
            if message_limit is not None:
                originals = originals[len(originals) - message_limit:] if message_limit else []
            target_id = new_thread_id or str(uuid.uuid4())
            target_resource = resource_id or source.resource_id
            now = utc_now()
            clone_info: dict[str, Any] = {"sourceThreadId": source_thread_id, "clonedAt": to_iso(now)}
            if originals:
                clone_info["lastMessageId"] = originals[-1].id
            # Thread-scoped working memory lives in the thread's metadata: the clone inherits it (reference §7.1),
            # unless the caller's metadata sets its own.
            inherited = source.metadata.get("workingMemory") if source.metadata else None
            new_metadata = {**({"workingMemory": inherited} if isinstance(inherited, str) else {}),
                            **(metadata or {}), "clone": clone_info}
            new_title = title if title is not None else (f"Clone of {source.title}" if source.title else "")
            thread = Thread(target_id, target_resource, new_title, new_metadata, now, now)
            id_map = {m.id: str(uuid.uuid4()) for m in originals}
            copies = [
                msgspec.structs.replace(m, id=id_map[m.id], thread_id=target_id, resource_id=target_resource)
                for m in originals
            ]

            async def _create() -> Thread:
                if await store.get_thread(target_id) is not None:
                    raise ValidationError(f"Thread with id {target_id} already exists",
                                          code="MASTRA_STORAGE_LIBSQL_CLONE_THREAD_THREAD_EXISTS")
                return await store.create_thread_with_messages(thread, copies)

            created = await self._exclusive(target_id, _create, "clone_thread")
            if self._index is not None and self._options.semantic_recall_config is not None and copies:
                await self._index.copy_messages(id_map, thread_id=target_id, resource_id=target_resource)
            await self._clone_side_state(source, created, id_map)
            return CloneResult(thread=created, messages=copies, id_map=id_map)

    async def _clone_side_state(self, source: Thread, clone: Thread, id_map: Mapping[str, str]) -> None:
        """What a clone inherits besides its messages and their vectors (reference §1, §7.1).

        Resource-scoped working memory follows a clone into another resource, but only into one that has none
        (an existing profile is never overwritten). The source thread's observations (its current
        observational-memory record) are copied to the clone, their observed ids mapped to the copies.
        """
        store, _ = self._running()
        if clone.resource_id != source.resource_id:
            origin = await self._get_resource(source.resource_id)
            text = origin.working_memory if origin is not None else None
            if text:
                async def _inherit() -> None:
                    target = await store.get_resource(clone.resource_id)
                    if target is None or not target.working_memory:
                        await store.update_resource(clone.resource_id, working_memory=text)

                await self._resource_exclusive(clone.resource_id, _inherit, "clone_working_memory")
        if self._options.observational_memory_config is None and self._om_engine is None:
            return
        from ._observational import ObservationalMemoryEngine

        if self._om_engine is None:
            self._om_engine = ObservationalMemoryEngine(self)
        records = self._om_engine.records
        current = await records.current(f"thread:{source.id}")
        if current is not None:
            now = utc_now()
            await records.put(msgspec.structs.replace(
                current.copy(), id=str(uuid.uuid4()), lookup_key=f"thread:{clone.id}", thread_id=clone.id,
                resource_id=clone.resource_id, created_at=now, updated_at=now,
                observed_message_ids=[id_map[i] for i in current.observed_message_ids if i in id_map]))

    async def reindex(self) -> int:
        """Make vectors for every message that has none (including ones that failed to embed)."""
        with operation_span("threadmind.memory.reindex", "embeddings"):
            self._running()
            if self._index is None:
                return 0

            def _progress(done: int, total: int) -> None:
                _log.info("reindex: %d/%d messages embedded", done, total)

            return await self._index.reindex(_progress)

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
        if not isinstance(text, str):
            raise ValidationError(f"`text` must be a string, got {type(text).__name__}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 10_000:
            raise ValidationError(f"`top_k` must be an integer from 1 to 10000, got {top_k!r}")
        if thread_id is not None:
            _require_id(thread_id, "thread_id")
        if resource_id is not None:
            _require_id(resource_id, "resource_id")
        with operation_span("threadmind.memory.search_vectors", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            self._running()
            if self._index is None:
                await anyio.lowlevel.checkpoint()
                return []
            return await self._index.query(text, top_k=top_k, thread_id=thread_id, resource_id=resource_id,
                                           threshold=threshold)

    async def flush_index(self) -> int:
        """Wait until every vector queued so far is written and searchable; returns how many were staged.

        Saves already return once their vectors are queryable; this is for work that opted out (an agent
        turn embeds in the background) and for tools that need a quiescent index.
        """
        self._running()
        if self._index is None:
            await anyio.lowlevel.checkpoint()
            return 0
        return await self._index.flush()

    def index_statistics(self) -> IndexStatistics | None:
        """Counters of the vector index (live vectors, pending messages, batches...), or None without one."""
        return self._index.statistics() if self._index is not None else None

    # working memory ------------------------------------------------------------------------------
    def _wm_scope_key(self, config: MemoryConfig, thread_id: str, resource_id: str | None) -> tuple[str, str]:
        scope = config.working_memory.scope
        if scope == "resource":
            if not resource_id:
                raise ValidationError(
                    "Memory error: Resource-scoped working memory is enabled but no resourceId was provided. "
                    "Either provide a resourceId or explicitly set workingMemory.scope to 'thread'."
                )
            return scope, resource_id
        _require_id(thread_id, "thread_id")
        return scope, thread_id

    async def get_working_memory(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> str | None:
        """The stored working memory text, or None when disabled or empty."""
        _check_ids(thread_id, resource_id)
        self._running()
        config = self._call_config(memory_config)
        if not config.working_memory.enabled:
            return None
        scope, key = self._wm_scope_key(config, thread_id, resource_id)
        with operation_span("threadmind.memory.get_working_memory", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            store, _ = self._running()
            if scope == "resource":
                if not await self._owned_by(thread_id, resource_id):
                    return None
                resource = await self._get_resource(key)
                return resource.working_memory if resource is not None else None
            thread = await store.get_thread(key)
            if thread is not None and resource_id is not None and thread.resource_id != resource_id:
                return None  # another resource's thread reads as absent, as in get_thread_by_id
            value = (thread.metadata or {}).get("workingMemory") if thread is not None else None
            return value if isinstance(value, str) else None

    async def _owned_by(self, thread_id: str | None, resource_id: str | None) -> bool:
        """False when ``thread_id`` names an existing thread of another resource than ``resource_id`` (SPEC §6).

        A thread that does not exist yet passes: resource-scoped working memory may precede its first thread.
        """
        if not thread_id or resource_id is None:
            return True
        thread: Thread | None = await self._ask(thread_id, GetThread())
        return thread is None or thread.resource_id == resource_id

    async def _check_owner(self, thread_id: str | None, resource_id: str | None) -> None:
        """Refuse a write that names an existing thread of another resource (``ResourceMismatch``)."""
        if not await self._owned_by(thread_id, resource_id):
            thread: Thread | None = await self._ask(str(thread_id), GetThread())
            assert thread is not None and resource_id is not None
            raise ResourceMismatch(str(thread_id), thread.resource_id, resource_id)

    async def update_working_memory(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        working_memory: str,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> None:
        """Replace the working memory (serialized per resource or per thread)."""
        _check_ids(thread_id, resource_id)
        config = self._call_config(memory_config)
        if not config.working_memory.enabled:
            raise ConfigError("Working memory is not enabled for this memory instance")
        if not isinstance(working_memory, str):
            raise ValidationError(f"`working_memory` must be a string, got {type(working_memory).__name__}")
        scope, key = self._wm_scope_key(config, thread_id, resource_id)
        await self._write_working_memory(scope, key, lambda _old: working_memory, owner=resource_id,
                                         thread_id=thread_id)

    async def _write_working_memory(
        self, scope: str, key: str, update: Callable[[str | None], str | None], *, owner: str | None = None,
        thread_id: str | None = None,
    ) -> str | None:
        """Read-modify-write working memory under the scope's actor; ``update`` returns None to skip.

        ``owner``: the resource the caller acts as; a ``thread_id`` of another resource is refused
        (``ResourceMismatch``) before anything is written. Every write (the public call, the tool, thread
        metadata mirrored into the resource) has its ``update_memory`` span.
        """
        with operation_span("threadmind.memory.update_working_memory", "update_memory", thread_id=thread_id,
                            resource_id=owner if owner is not None else (key if scope == "resource" else None),
                            threadmind__working_memory__scope=scope):
            return await self._write_working_memory_now(scope, key, update, owner, thread_id)

    async def _write_working_memory_now(
        self, scope: str, key: str, update: Callable[[str | None], str | None], owner: str | None,
        thread_id: str | None,
    ) -> str | None:
        store, _ = self._running()
        if scope == "resource":
            await self._check_owner(thread_id, owner)

            async def _resource() -> str | None:
                resource: Resource | None = await store.get_resource(key)
                new = update(resource.working_memory if resource is not None else None)
                if new is not None:
                    await store.update_resource(key, working_memory=new)
                return new

            return await self._resource_exclusive(key, _resource, "working_memory")

        async def _thread() -> str | None:
            thread = await store.get_thread(key)
            if thread is None:
                raise ThreadNotFound(key, message=f"Thread {key} not found")
            if owner is not None and thread.resource_id != owner:
                raise ResourceMismatch(key, thread.resource_id, owner)
            old = (thread.metadata or {}).get("workingMemory")
            new = update(old if isinstance(old, str) else None)
            if new is not None:
                await store.update_thread(key, metadata={"workingMemory": new})
            return new

        return await self._exclusive(key, _thread, "working_memory")

    def get_working_memory_template(
        self, *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> WorkingMemoryTemplate | None:
        """The Markdown template (trimmed) or the JSON Schema (draft-07); None when working memory is off."""
        return template_for(self._call_config(memory_config).working_memory)

    async def get_system_message(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        memory_config: MemoryConfig | Mapping[str, Any] | None = None,
    ) -> str | None:
        """The working-memory instruction the model sees (read-only variant when read-only), or None."""
        _check_ids(thread_id, resource_id)
        self._running()
        config = self._call_config(memory_config)
        template = template_for(config.working_memory)
        if template is None:
            return None
        with operation_span("threadmind.memory.get_system_message", "search_memory", thread_id=thread_id,
                            resource_id=resource_id):
            if not await self._owned_by(thread_id, resource_id):
                return None  # another resource's thread: nothing to instruct about
            data = await self.get_working_memory(thread_id=thread_id, resource_id=resource_id, memory_config=config)
            if config.read_only:
                return readonly_instruction(data)
            return instruction(template, data, vnext=config.working_memory.version == "vnext")

    def list_tools(self, *, memory_config: MemoryConfig | Mapping[str, Any] | None = None) -> dict[str, Tool]:
        """``{"updateWorkingMemory": Tool}`` when working memory is on and writable, else ``{}``."""
        from .agent import Tool

        config = self._call_config(memory_config)
        template = template_for(config.working_memory)
        if template is None or config.read_only:
            return {}
        if template.format == "json":
            schema = dict(config.working_memory.schema or {})
            parameters: dict[str, Any] = {"type": "object", "properties": {"memory": schema}, "required": ["memory"]}
            description = (
                "Update the working memory with new information. Data is merged with existing memory - only "
                "include fields you want to add or update. To preserve existing data, omit the field entirely. "
                "Arrays are replaced entirely when provided, so include every item you want to keep. Set a "
                "field to null to remove it."
            )
        elif config.working_memory.version == "vnext":
            parameters = {
                "type": "object",
                "properties": {
                    "newMemory": {"type": "string", "description": "The Markdown text to add to working memory, "
                                  "or to put in place of searchString."},
                    "searchString": {"type": "string", "description": "Exact text of working memory to replace "
                                     "(with updateReason clarify-existing-memory or replace-irrelevant-memory)."},
                    "updateReason": {"type": "string", "enum": list(_VNEXT_REASONS),
                                     "description": "Why working memory changes; append-new-memory by default."},
                },
            }
            description = (
                "Update the working memory with new information: add what is new, or replace an existing entry "
                "by sending the exact text to replace as searchString. Existing data not mentioned is kept."
            )
        else:
            parameters = {
                "type": "object",
                "properties": {"memory": {"type": "string", "description": "The Markdown formatted working memory "
                                          "content to store. This MUST be a string. Never pass an object."}},
                "required": ["memory"],
            }
            description = (
                "Update the working memory with new information. Any data not included will be overwritten. "
                "Always pass data as string to the memory field. Never pass an object."
            )

        async def _execute(args: Any, context: ToolContext) -> dict[str, Any]:
            return await self._update_working_memory_tool(args, context, config)

        return {"updateWorkingMemory": Tool("updateWorkingMemory", description, parameters, _execute)}

    async def _update_working_memory_tool(
        self, args: Any, context: ToolContext, config: MemoryConfig
    ) -> dict[str, Any]:
        scope = config.working_memory.scope
        thread_id, resource_id = context.thread_id, context.resource_id
        if scope == "thread" and not thread_id:
            raise ValidationError("Thread ID is required for thread-scoped working memory updates")
        if scope == "resource" and not resource_id:
            raise ValidationError("Resource ID is required for resource-scoped working memory updates")
        if thread_id:
            store, _ = self._running()
            thread = await store.get_thread(thread_id)
            if thread is None:
                thread = await self._ensure_thread(thread_id, resource_id or thread_id)
            if resource_id and thread.resource_id != resource_id:
                raise ResourceMismatch(thread_id, thread.resource_id, resource_id, message=(
                    f"Thread with id {thread_id} resourceId does not match the current resourceId {resource_id}"))
        key = resource_id if scope == "resource" else thread_id
        assert key is not None
        template = template_for(config.working_memory)
        assert template is not None
        if template.format == "markdown" and config.working_memory.version == "vnext":
            try:
                return await self._update_working_memory_vnext(args, scope, key, template.content,
                                                               owner=resource_id, thread_id=thread_id)
            except Exception:  # the reference's vNext tool reports every failure this way
                _log.warning("working memory vNext update failed", exc_info=True)
                return {"success": False, "reason": "Tool error."}
        if template.format == "markdown":
            value = args.get("memory") if isinstance(args, Mapping) else None
            if not isinstance(value, str):
                return {"error": True, "message": "Tool input validation failed for update-working-memory: "
                                                  "memory must be a string"}
            skipped = False

            def _replace(old: str | None) -> str | None:
                nonlocal skipped
                empty = normalize_ws(template.content)
                if old and normalize_ws(value) == empty and normalize_ws(old) != empty:
                    skipped = True
                    return None
                return value

            await self._write_working_memory(scope, key, _replace, owner=resource_id, thread_id=thread_id)
            if skipped:
                return {"success": False, "message": "Attempted to replace existing working memory with empty "
                                                     "template. Update skipped to prevent data loss."}
            return {"success": True}
        schema = config.working_memory.schema or {}
        payload = args.get("memory", args) if isinstance(args, Mapping) else args
        if payload is None:
            return {"success": True, "message": "No memory data provided, existing memory unchanged."}
        if isinstance(payload, str):
            try:
                payload = json.loads(payload)
            except ValueError as exc:
                return {"success": False, "message": f"Failed to parse working memory input as JSON: {exc}. "
                                                     f"Raw input: {payload[:500]}"}
        payload = drop_optional_nulls(payload, schema)
        errors = validate_schema(payload, {**schema, "required": []})
        if errors or not isinstance(payload, dict):
            detail = "; ".join(errors) or "memory must be an object"
            return {"error": True, "message": f"Tool input validation failed for update-working-memory: {detail}"}
        update = payload

        def _merge(old: str | None) -> str:
            try:
                existing = json.loads(old) if old else {}
            except ValueError:
                existing = {}
            return json.dumps(deep_merge(existing, update), separators=(",", ":"), ensure_ascii=False)

        await self._write_working_memory(scope, key, _merge, owner=resource_id, thread_id=thread_id)
        return {"success": True}

    async def _update_working_memory_vnext(
        self, args: Any, scope: str, key: str, template: str, *, owner: str | None, thread_id: str | None
    ) -> dict[str, Any]:
        """The vNext tool (reference §7.4): append, or replace ``searchString``, never rewrite the whole text."""
        values = args if isinstance(args, Mapping) else {}
        new = values.get("newMemory")
        new = new if isinstance(new, str) else ""
        search = values.get("searchString")
        search = search if isinstance(search, str) and search else None
        reason = values.get("updateReason") or "append-new-memory"
        if reason not in _VNEXT_REASONS:
            return {"error": True, "message": "Tool input validation failed for update-working-memory: "
                                              f"updateReason must be one of {', '.join(_VNEXT_REASONS)}"}
        if reason == "append-new-memory":
            search = None
        elif search is None:
            return {"success": False, "reason": f"updateReason was {reason} but no searchString was provided. "
                                                f'Unable to replace undefined with "{new}"'}
        if scope == "resource" and reason == "replace-irrelevant-memory":
            search = None  # resource-scoped memory is shared by threads: an append, as in the reference
        is_template = new == template or normalize_ws(new) == normalize_ws(template)
        outcome: dict[str, Any] = {}

        def _apply(old: str | None) -> str | None:
            if not old:
                if is_template:
                    outcome.update(success=False, reason="try again when you have data to add. newMemory was "
                                                         "equal to the working memory template")
                    return None
                outcome.update(success=True, reason="started new working memory")
                text = new
            elif search is not None and search in old:
                outcome.update(success=True, reason="found and replaced searchString with newMemory")
                text = old.replace(search, new, 1)
            elif new in old or is_template:
                outcome.update(success=False, reason="attempted to insert duplicate data into working memory. this "
                                                     "entry was skipped")
                return None
            else:
                outcome.update(success=True, reason="attempted to replace working memory string that doesn't exist. "
                               "Appending to working memory instead." if search is not None
                               else "appended newMemory to end of working memory")
                text = f"{old}\n{new}"
            return text.replace(template, "") if template else text  # the template itself is never stored

        await self._write_working_memory(scope, key, _apply, owner=owner, thread_id=thread_id)
        return outcome

    # processors ----------------------------------------------------------------------------------
    def _semantic_processor(self, config: MemoryConfig) -> object:

        recall = config.semantic_recall_config
        assert recall is not None
        if self._vector is None:
            raise ConfigError("semantic recall needs a vector store", code="SEMANTIC_RECALL_MISSING_VECTOR_ADAPTER")
        if self._embedder is None:
            raise ConfigError("semantic recall needs an embedder", code="SEMANTIC_RECALL_MISSING_EMBEDDER")
        name = self._index_name or self._declared_index_name(self._embedder)
        if name is None:
            raise EmbedderError(
                "Failed to determine the embedder's output dimension. Semantic recall cannot safely select a "
                "vector index until the embedder returns a usable embedding. Check that the embedder is "
                "reachable and correctly configured.",
                code="MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED",
            )
        return SemanticRecall(self._routed, _RoutedIndex(self), top_k=recall.top_k,
                              message_range=recall.message_range, scope=recall.scope, threshold=recall.threshold,
                              index_name=name)

    def _declared_index_name(self, embedder: Embedder) -> str | None:
        """The index name from the dimension the embedder declares (None: it must be probed, see ``start``).

        :raises EmbeddingDimensionMismatch: ``embedding_dimension`` says otherwise.
        """
        dim = embedder.dimension
        if dim is None:
            return None
        if self._embedding_dimension is not None and dim != self._embedding_dimension:
            raise EmbeddingDimensionMismatch(self._embedding_dimension, dim)
        return "memory_messages" if dim == 1536 else f"memory_messages_{dim}"

    def get_input_processors(
        self, configured: Sequence[object] = (), *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> list[object]:
        """The memory's input processors in the reference order, skipping ids already ``configured``."""

        config = self._call_config(memory_config)
        taken = _configured_ids(configured)
        history_on = config.history_enabled
        om = config.observational_memory_config
        routed = self._routed
        out: list[object] = []
        if self._storage is None and (history_on or config.working_memory.enabled):
            code = "MESSAGE_HISTORY_MISSING_STORAGE_ADAPTER" if history_on else "WORKING_MEMORY_MISSING_STORAGE_ADAPTER"
            raise ConfigError(_STORAGE_MISSING, code=code)
        if ("message-history" in taken or om is not None or history_on) and "memory-input-filter" not in taken:
            out.append(MemoryInputFilter(routed, retain_full_input=config.retain_full_input))
        if config.working_memory.enabled and "working-memory" not in taken:
            wm = config.working_memory
            out.append(WorkingMemory(routed, wm.template, wm.scope, config.read_only, schema=wm.schema,
                                     template_provider=lambda c: self.get_working_memory_template(memory_config=c)))
        if history_on and om is None and "message-history" not in taken:
            out.append(MessageHistory(routed, config.max_messages, config.message_history,
                                      token_counter=self._tokens))
        if config.semantic_recall_config is not None and "semantic-recall" not in taken:
            out.append(self._semantic_processor(config))
        history = config.message_history
        if history_on and history is not None and om is None and "memory-token-limiter" not in taken:
            out.append(MemoryTokenLimiter(history.max_tokens, history.remove_tokens, token_counter=self._tokens,
                                          on_trim=self._write_boundary))
        if om is not None and "observational-memory" not in taken:
            out.append(self._observational_processor(om))
        return out

    def get_output_processors(
        self, configured: Sequence[object] = (), *, memory_config: MemoryConfig | Mapping[str, Any] | None = None
    ) -> list[object]:
        """The memory's output processors: ``semantic-recall`` then ``message-history``."""

        config = self._call_config(memory_config)
        taken = _configured_ids(configured)
        out: list[object] = []
        if config.semantic_recall_config is not None and "semantic-recall" not in taken:
            out.append(self._semantic_processor(config))
        if config.history_enabled and config.observational_memory_config is None and "message-history" not in taken:
            out.append(MessageHistory(self._routed, config.max_messages, config.message_history,
                                      token_counter=self._tokens))
        om = config.observational_memory_config
        if om is not None and "observational-memory" not in taken:
            out.append(self._observational_processor(om))
        return out

    def _observational_processor(self, om: ObservationalMemoryConfig) -> object:
        """The ``observational-memory`` processor; its engine (records, in-flight observations) lives per memory."""
        from ._observational import ObservationalMemoryEngine
        from .processors._observational import ObservationalMemory

        if self._storage is None:
            raise ConfigError(_STORAGE_MISSING, code="THREADMIND_STORAGE_MISSING")
        if self._om_engine is None:
            self._om_engine = ObservationalMemoryEngine(self)
        return ObservationalMemory(self._routed, self._om_engine, om)

    async def _processors_for_run(
        self, configured: Sequence[object], config: MemoryConfig | None, phase: Literal["input", "output"]
    ) -> list[object]:
        if config is not None and config.semantic_recall_config is not None and self._index is not None \
                and self._index_name is None:
            await self._index.dimension()  # retries a failed probe; raises its error
            self._index_name = await self._index.index_name()
        if phase == "input":
            return self.get_input_processors(configured, memory_config=config)
        return self.get_output_processors(configured, memory_config=config)

    async def _write_boundary(self, thread_id: str, advance: Callable[[Thread], Boundary | None]) -> Thread | None:
        """Serialized read-modify-write of the token-limiter boundary in thread metadata."""
        def patch(thread: Thread) -> dict[str, Any] | None:
            boundary = advance(thread)
            return None if boundary is None else {BOUNDARY_KEY: boundary.to_metadata()}

        with operation_span("threadmind.memory.advance_boundary", "update_memory", thread_id=thread_id):
            updated: Thread | None = await self._ask(thread_id, PatchThreadMetadata(patch, "advance_boundary"))
        return updated

    # agent turns ---------------------------------------------------------------------------------
    @asynccontextmanager
    async def _turn(self, thread_id: str, resource_id: str, policy: str) -> AsyncIterator[None]:
        """Serialize agent turns on one thread per ``thread_concurrency``."""
        _, threads = self._running()
        if policy == "parallel":
            yield
            return
        actor = threads.get(thread_id)
        actor.turn_started()
        try:
            if policy == "reject":
                try:
                    actor.turn_lock.acquire_nowait()
                except anyio.WouldBlock:
                    raise ThreadBusy(thread_id) from None
                try:
                    yield
                finally:
                    actor.turn_lock.release()
            else:
                async with actor.turn_lock:
                    yield
        finally:
            actor.turn_finished()

    async def _ensure_thread(self, thread_id: str, resource_id: str) -> Thread:
        """The run's thread, created when missing; another resource's thread is refused."""
        store, _ = self._running()
        thread: Thread | None = await self._ask(thread_id, GetThread())
        if thread is None:
            try:
                thread = await self.create_thread(resource_id=resource_id, thread_id=thread_id)
            except ValidationError:
                thread = await store.get_thread(thread_id)  # created concurrently by another turn
                if thread is None:
                    raise
        if thread.resource_id and thread.resource_id != resource_id:
            raise ResourceMismatch(
                thread_id, thread.resource_id, resource_id, code="AGENT_MEMORY_THREAD_RESOURCE_MISMATCH",
                message=f'Thread "{thread_id}" belongs to resource "{thread.resource_id}" but resource '
                        f'"{resource_id}" was provided. A thread can only be used by the resource that owns it.',
            )
        return thread

    def _after_turn(
        self, model: LanguageModel, thread_id: str, resource_id: str, config: MemoryConfig, message_list: MessageList
    ) -> None:
        """Start title generation in the background when the thread is untitled (awaited by ``aclose``)."""
        if self._om_engine is not None and config.observational_memory_config is not None:
            self._om_engine.note_agent_model(thread_id, resource_id, model)  # the Observer's fallback model
        title = config.generate_title_config
        if title is None or config.read_only or self._background is None:
            return
        own = [m for m in message_list.get_all() if m.thread_id in (None, thread_id)]
        if len(own) < title.min_messages or not any(m.role == "user" for m in own):
            return
        title_model = title.model or model
        if isinstance(title_model, str):
            from .models import resolve_model

            title_model = resolve_model(title_model)
        self._background.start_soon(self._generate_title, title_model, thread_id, own,
                                    title.instructions or _TITLE_INSTRUCTIONS)

    async def _generate_title(
        self, model: LanguageModel, thread_id: str, messages: list[Message], instructions: str
    ) -> None:
        from .models import ModelRequest

        try:
            store = self.storage  # not _running(): aclose() lets background work finish
            current = await store.get_thread(thread_id)
            if current is None or current.title:
                return
            with operation_span("threadmind.memory.generate_title", "chat", thread_id=thread_id):
                response = await model.generate(ModelRequest(
                    system=[instructions], messages=[Message.user(_transcript(messages))]))
            title = _THINK.sub("", response.text or "").strip().strip("\"'")
            if not title:
                return

            async def _set() -> None:
                thread = await store.get_thread(thread_id)
                if thread is not None and not thread.title:  # never retitle
                    await store.update_thread(thread_id, title=title)

            with operation_span("threadmind.memory.set_title", "update_memory", thread_id=thread_id):
                await self._background_exclusive(thread_id, _set, "set_title")
        except Exception:
            _log.warning("title generation for thread %s failed; title left untouched", thread_id, exc_info=True)


    # tokens --------------------------------------------------------------------------------------
    def estimate_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the memory's token counter (the tokenx-style estimator by default)."""
        if not isinstance(text, str):
            raise ValidationError(f"`text` must be a string, got {type(text).__name__}")
        return self._tokens.count_text(text)


_VNEXT_REASONS = ("append-new-memory", "clarify-existing-memory", "replace-irrelevant-memory")


def _sweep_interval(idle_timeout: float) -> float | None:
    """How often the registries look for actors idle past ``idle_timeout``: a fraction of it, within 0.05–30 s."""
    if not math.isfinite(idle_timeout):
        return None
    return min(30.0, max(0.05, idle_timeout / 4))


def _created_at(message: Message) -> datetime:
    return message.created_at


def _bind(fn: Callable[[T], Awaitable[Any]], arg: T) -> Callable[[], Awaitable[Any]]:
    async def _call() -> Any:
        return await fn(arg)

    return _call


def _visible(messages: Iterable[Message]) -> list[Message]:
    """Drop system rows and system reminders, as ``recall`` does by default (reference §4.6)."""
    out: list[Message] = []
    for message in messages:
        if message.role == "system" or is_system_reminder(message):
            continue
        out.append(message)
    return out


class _RoutedIndex:
    """The index actor as the ``semantic-recall`` processor sees it: the memory's, looked up at each call, so
    processors can be built before ``start()``."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    def _actor(self) -> IndexActor:
        self._memory._running()
        index = self._memory._index
        if index is None:
            raise ConfigError("semantic recall needs a vector store and an embedder",
                              code="SEMANTIC_RECALL_MISSING_VECTOR_ADAPTER")
        return index

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None) -> list[VectorHit]:
        return await self._actor().query(text, top_k=top_k, resource_id=resource_id, thread_id=thread_id,
                                         threshold=threshold)

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int:
        return await self._actor().upsert_messages(messages, wait=wait)

    def pending_marker(self) -> Callable[[Any, Sequence[Message]], None] | None:
        return self._actor().pending_marker()


class _RoutedStore:
    """The store as memory processors see it: thread writes and loads go through the thread's actor."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    @property
    def _store(self) -> Store:
        return self._memory.storage

    async def open(self) -> None:
        """Nothing to do: the memory owns the real store."""

    async def aclose(self) -> None:
        """Nothing to do: the memory owns the real store."""

    async def create_thread(self, thread: Thread) -> Thread:
        with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread.id,
                            resource_id=thread.resource_id):
            created: Thread = await self._memory._ask(thread.id, CreateThread(thread))
        return created

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._store.get_thread(thread_id)

    async def list_threads(self, **kwargs: Any) -> ThreadPage:
        return await self._store.list_threads(**kwargs)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Thread:
        with operation_span("threadmind.memory.update_thread", "update_memory", thread_id=thread_id):
            thread: Thread = await self._memory._ask(thread_id, UpdateThread(title, metadata))
        return thread

    async def delete_thread(self, thread_id: str) -> None:
        await self._memory.delete_thread(thread_id)

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        return await self._memory.update_thread_resource_id(thread_id, resource_id=resource_id)

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        store = self._store
        with operation_span("threadmind.memory.create_thread", "upsert_memory", thread_id=thread.id,
                            resource_id=thread.resource_id, threadmind__messages__count=len(messages)):
            return await self._memory._exclusive(
                thread.id, lambda: store.create_thread_with_messages(thread, messages), "create_thread_with_messages"
            )

    async def save_messages(
        self, thread_id: str, messages: Sequence[Message], *, after: SaveHook | None = None
    ) -> list[Message]:
        owner = messages[0].resource_id if messages else None
        with operation_span("threadmind.memory.save_messages", "upsert_memory", thread_id=thread_id, resource_id=owner,
                            threadmind__messages__count=len(messages)):
            saved: list[Message] = await self._memory._ask(thread_id, SaveMessages(messages, after))
        return saved

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if isinstance(query.thread_id, str):
            per_page = query.per_page
            if (query.direction == "DESC" and not query.include and query.date_range is None and not query.metadata
                    and isinstance(per_page, int) and per_page is not True and per_page > 0
                    and (query.page == 0 or (query.page + 1) * per_page <= TAIL_MAX)):
                # "The last N", or a page of the newest TAIL_MAX (a token budget's loader): from the actor's tail.
                newest = (query.page + 1) * per_page
                window: MessagePage = await self._memory._ask(
                    query.thread_id, LoadWindow(newest, query.resource_id, tolerate_missing=True))
                if query.page == 0:
                    return msgspec.structs.replace(window, messages=window.messages[::-1])
                held = len(window.messages)
                older = window.messages[max(0, held - newest):max(0, held - newest + per_page)]
                return MessagePage(messages=older[::-1], total=window.total, page=query.page, per_page=per_page,
                                   has_more=window.total > newest)
            page: MessagePage = await self._memory._ask(query.thread_id, LoadMessages(query))
            return page
        return await self._store.list_messages(query)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self._store.get_messages_by_id(ids)

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        return await self._memory.update_messages(updates)

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        found = await self._store.get_messages_by_id(ids)
        await self._memory.delete_messages(list(ids))
        return {m.thread_id for m in found if m.thread_id}

    async def get_resource(self, resource_id: str) -> Resource | None:
        return await self._memory._get_resource(resource_id)

    async def update_resource(self, resource_id: str, **kwargs: Any) -> Resource:
        store = self._store
        with operation_span("threadmind.memory.update_resource", "update_memory", resource_id=resource_id):
            return await self._memory._resource_exclusive(
                resource_id, lambda: store.update_resource(resource_id, **kwargs), "update_resource"
            )


_THINK = re.compile(r"<think>.*?</think>", re.S)
_TITLE_INSTRUCTIONS = (
    "You will generate a short title based on the first message a user begins a conversation with. "
    "Ensure it is not more than 80 characters long. The title should be a summary of the user's message. "
    "Do not use quotes or colons. The entire text you return will be used as the title."
)


def _transcript(messages: Sequence[Message]) -> str:
    from ._transcript import part_texts

    labels = {"reasoning": "Reasoning", "tool": "Tool"}
    lines: list[str] = []
    for message in messages:
        role = "User" if message.role == "user" else "Assistant"
        for kind, text in part_texts(message, tool_chars=200):
            lines.append(f"{labels.get(kind, role)}: {text}")
    return "\n".join(lines)
