"""IndexActor: the single owner of the message vector index; coalesces upserts into batched embed + write calls.

One writer task drains a FIFO of commands. Consecutive upserts from every caller form one batch (up to
``batch_size`` texts, lingering ``linger`` seconds for more): one ``embedder.embed`` call for the texts
not cached, one hnswlib ``add_items`` in a worker thread, and SQL rows written behind, several batches'
rows in one write (:mod:`._write_behind`). Deletes, moves and copies go
through the same FIFO, so a delete issued after an upsert always ends deleted. Every hnswlib call (add,
search, save) runs through one ``CapacityLimiter(1)``, so a query never overlaps a write.

A one-thread ``Memory.save_messages`` queues its upsert as the thread actor starts the save
(:class:`CommitGatedUpsert`): the batch embeds while the messages commit and stages the vectors only once
the commit succeeded, so the caller waits for the commit and the staging, not for the embedding as well.

When a batched embed call fails, its texts are retried one by one: only callers whose own texts fail
get the ``EmbedderError``, and their messages are recorded as pending in the SQL store, to be retried
by :meth:`IndexActor.retry_pending` (at start, periodically with backoff) and by :meth:`IndexActor.reindex`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
import numpy as np
import numpy.typing as npt
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from opentelemetry import trace
from opentelemetry.trace import Link

from ..codecs import Message, TextPart, to_iso
from ..embedders._cache import EmbeddingCache
from ..embedders._protocol import Embedder
from ..errors import ConfigError, EmbedderError, EmbeddingDimensionMismatch, ThreadmindError, ValidationError
from ..stores._hnsw import HnswVectorStore, SearchHit, _Entry, _HnswIndex
from ..stores._protocol import MessageQuery, Store
from ..stores._vector_records import (
    PendingVector,
    SQLiteVectorRecords,
    VectorRecord,
    VectorRecords,
)
from ..tracing import ATTR_OPERATION, operation_span, tracing_enabled
from ._write_behind import CoalescingRecords

__all__ = ("CommitGatedUpsert", "IndexActor", "IndexStatistics", "VectorHit", "chunk_text", "message_text")

logger = logging.getLogger("threadmind.index")

T = TypeVar("T")
F32 = npt.NDArray[np.float32]

PROBE_FAILED_CODE = "MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED"
_PROBE_FAILED_TEXT = (
    "Failed to determine the embedder's output dimension. Semantic recall cannot safely select a vector index "
    "until the embedder returns a usable embedding. Check that the embedder is reachable and correctly configured."
)
_PROBE_EMPTY_TEXT = "Embedder returned no usable embedding for the dimension probe."
_MAX_RETRY_DELAY = 300.0

# JavaScript's \s: what Mastra's `text.split(/\s+/)` and `trim()` treat as whitespace.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_SPACE_CHARS = "".join(chr(c) for c in (*range(9, 14), 32, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                                            0x202F, 0x205F, 0x3000, 0xFEFF))  # the same set, for str.strip
_SPLIT = re.compile(f"[{_JS_SPACE}]+")
_TRIM = re.compile(f"^[{_JS_SPACE}]+|[{_JS_SPACE}]+$")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


# ------------------------------------------------------------------------------------ text and chunks


def message_text(message: Message) -> str:
    """The text a message is embedded by (reference §6.3): ``content.content`` if non-blank, else text parts.

    Text parts are joined with a space and trimmed; an empty result means the message gets no vector.
    """
    content = message.content.content
    if content and content.strip(_JS_SPACE_CHARS):
        return content
    return " ".join(p.text for p in message.content.parts if isinstance(p, TextPart)).strip(_JS_SPACE_CHARS)


def _u16len(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript counts it."""
    return len(text) + len(_ASTRAL.findall(text)) if not text.isascii() else len(text)


def _hard_split(word: str, budget: int) -> list[str]:
    """Budget-sized slices of an over-long word (never splitting a surrogate pair)."""
    if word.isascii() or not _ASTRAL.search(word):
        return [word[i : i + budget] for i in range(0, len(word), budget)]
    out: list[str] = []
    current: list[str] = []
    size = 0
    for ch in word:
        width = 2 if ord(ch) > 0xFFFF else 1
        if current and size + width > budget:
            out.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += width
    if current:
        out.append("".join(current))
    return out


def chunk_text(text: str, max_chars: int = 16384) -> list[str]:
    """Mastra's ``chunkText``: greedy word packing into chunks of at most ``max_chars`` UTF-16 units.

    Whitespace runs become single spaces, leading whitespace disappears and trailing whitespace leaves one
    trailing space; a word longer than the budget flushes the chunk and is hard-split. No empty chunks.
    """
    if 2 * len(text) <= max_chars:  # fits whatever its UTF-16 length: one chunk, whitespace collapsed
        # isprintable() is False for every JS whitespace but the ASCII space, so printable text without a
        # double space has nothing to collapse (the common case; skips a regex pass per message).
        collapsed = text if text.isprintable() and "  " not in text else _SPLIT.sub(" ", text)
        collapsed = collapsed[1:] if collapsed.startswith(" ") else collapsed
        return [collapsed] if collapsed else []
    return _pack_words(text, max_chars)


def _pack_words(text: str, max_chars: int) -> list[str]:
    chunks: list[str] = []
    current = ""
    current_len = 0
    for word in _SPLIT.split(text):
        word_len = _u16len(word)
        if word_len > max_chars:
            if current:
                chunks.append(current)
                current, current_len = "", 0
            chunks.extend(_hard_split(word, max_chars))
            continue
        piece_len = word_len + 1 if current else word_len
        if current_len + piece_len > max_chars:
            chunks.append(current)
            current, current_len = word, word_len
        else:
            current = f"{current} {word}" if current else word
            current_len += piece_len
    if current:
        chunks.append(current)
    return chunks


# ---------------------------------------------------------------------------------------- records


class VectorHit(msgspec.Struct, frozen=True):
    """One semantic recall hit: the message and its best chunk's score."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of an :class:`IndexActor`, for tests and tracing (never read private fields)."""

    vectors: int
    batches: int
    add_items_calls: int
    embed_calls: int
    pending: int
    queries: int
    brute_force_queries: int
    ann_queries: int
    snapshot_loads: int
    rebuilds: int
    #: Vectors searchable exactly but not yet inserted into HNSW (insertion waits for a quiet index).
    staged: int = 0
    #: Memory held by the index: the hnswlib graph and vectors plus the exact-search matrix, in bytes.
    memory_bytes: int = 0
    #: SQL writes of write-behind vector rows; the rows of many batches share one (SQLite stores only).
    row_writes: int = 0


class _Item(msgspec.Struct, kw_only=True):
    """One message to index: its scope and its chunks (empty: the message has no text any more)."""

    message_id: str
    thread_id: str
    resource_id: str
    role: str
    created_at: str
    chunks: list[str]


# Per-operation events are asyncio's: an anyio Event costs a backend lookup per creation (~3 µs) and a
# checkpoint per wait (~7 µs), several times per save. threadmind runs on anyio's asyncio backend (the store
# and the actors park callers on asyncio futures too).
_Event = asyncio.Event

_NATIVE_LE = sys.byteorder == "little"


class _Prepared:
    """A batch's vectors in the forms they are stored in: rows for the index, little-endian bytes for SQL.

    Built as soon as the batch is embedded, so that for gated saves the numeric work runs while the saves
    commit, and what is left once they have committed is bookkeeping.
    """

    __slots__ = ("position", "raw", "unit")

    def __init__(self, index: _HnswIndex, vectors: Mapping[str, F32]) -> None:
        self.position = {chunk: i for i, chunk in enumerate(vectors)}
        matrix = np.asarray(np.stack(list(vectors.values())), dtype=np.float32)
        self.unit = index.prepare(matrix)
        blob = matrix.tobytes() if _NATIVE_LE else matrix.astype("<f4").tobytes()
        stride = matrix.shape[1] * 4
        self.raw = [blob[i * stride:(i + 1) * stride] for i in range(len(matrix))]

    def rows(self, positions: list[int]) -> F32:
        """The index rows at ``positions`` (the whole matrix when they are all of it, in order)."""
        if positions == list(range(len(self.raw))):
            return self.unit
        return self.unit[positions]


_COMMAND_OPERATIONS = {"delete_messages": "delete_memory", "delete_thread": "delete_memory"}


class _Op:
    """A queued command with a reply slot and the caller's span context (for batch span links)."""

    __slots__ = ("done", "error", "link")

    def __init__(self) -> None:
        self.done = _Event()
        self.error: BaseException | None = None
        self.link: Link | None = None
        if tracing_enabled():
            context = trace.get_current_span().get_span_context()
            self.link = Link(context) if context.is_valid else None


class _Upsert(_Op):
    __slots__ = ("committed", "created", "gate", "items", "read_seq", "usage", "vectors")

    def __init__(self, items: list[_Item], read_seq: int | None = None, *, gated: bool = False) -> None:
        super().__init__()
        self.items = items
        self.read_seq = read_seq  # set when the items were read from the store (retry, reindex)
        self.usage = 0.0
        self.vectors = 0
        # Gated: queued as its messages' save starts; staged only once ``gate`` is set with the save's outcome.
        self.gate: asyncio.Event | None = _Event() if gated else None
        self.committed: Sequence[Message] | None = None
        self.created: list[datetime] = []  # gated: each item's created_at as given to the save

    @property
    def n_texts(self) -> int:
        return sum(len(i.chunks) for i in self.items) or 1


class _Command(_Op):
    __slots__ = ("kind", "args")

    def __init__(self, kind: str, *args: Any) -> None:
        super().__init__()
        self.kind = kind
        self.args = args


class _Stages:
    """Ordering points of one pipelined batch: its SQL writes are queued; its vectors are applied.

    It also holds the batch's pipeline slot, given back once the batch needs no more work from the actor:
    when its rows go to the write-behind buffer (waiting there must not hold new batches back), or at the end.
    """

    __slots__ = ("_slot", "applied", "durable", "queued")

    def __init__(self, slot: anyio.Semaphore | None = None) -> None:
        self.queued = _Event()
        self.applied = _Event()
        self.durable = _Event()
        self._slot = slot

    def release_slot(self) -> None:
        """Give the pipeline slot back (once)."""
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()


class CommitGatedUpsert:
    """Indexes one save while it commits: the thread actor queues it as the save starts and reports the outcome.

    The embedding (batched with other callers') overlaps the commit; the vectors are staged only after the
    commit succeeded, so a hit never names a message that is not durable, and a failed save leaves no vector.
    Queued in the thread's commit order, so a message re-saved twice ends with the text stored last.
    """

    __slots__ = ("_actor", "_op", "_queued")

    def __init__(self, actor: IndexActor, op: _Upsert) -> None:
        self._actor = actor
        self._op = op
        self._queued = False

    async def started(self) -> None:
        """(thread actor) The save is about to commit: queue the upsert. Never raises; errors reach ``result``."""
        try:
            await self._actor._submit(self._op)
        except ConfigError as exc:  # the index closed: the save still commits, its marks make it pending
            self._op.error = exc
            return
        self._queued = True

    def finished(self, saved: Sequence[Message] | None) -> None:
        """(thread actor) The save committed (``saved``), or failed or ended unknown (None: index nothing)."""
        self._op.committed = saved
        assert self._op.gate is not None
        self._op.gate.set()

    async def result(self) -> int:
        """Wait until the vectors are queryable; the embedding usage tokens. Call only after a successful save.

        :raises EmbedderError: the texts could not be embedded; the messages are pending.
        """
        if self._queued:
            await self._op.done.wait()
        else:
            await anyio.lowlevel.checkpoint()
        if self._op.error is not None:
            raise _fresh(self._op.error)
        return round(self._op.usage)


_PIPELINE = 8  # upsert batches being embedded or staged at once (buffered rows no longer hold a slot)
_FLUSH_IDLE = 0.5  # seconds without upserts before staged vectors go into HNSW
_FLUSH_BACKLOG = 16_384  # ... or as soon as this many are staged


class _State(Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


def _fresh(error: BaseException) -> BaseException:
    """A new exception object per caller (one failure may reach many tasks), keeping the cause."""
    if type(error) is EmbedderError:
        copy: BaseException = EmbedderError(error.message, code=error.code)
    elif isinstance(error, EmbeddingDimensionMismatch):
        copy = EmbeddingDimensionMismatch(error.expected, error.actual)
    else:
        return error
    copy.__cause__ = error.__cause__
    return copy


class IndexActor:
    """Owns one message vector index: batched upserts, scoped queries, deletes, snapshots and retries."""

    def __init__(
        self,
        *,
        store: Store,
        vector: HnswVectorStore,
        embedder: Embedder,
        embedding_dimension: int | None = None,
        max_chunk_chars: int = 16384,
        batch_size: int = 256,
        linger: float = 0.0005,
        cache_size: int = 1000,
        retry_interval: float | None = 5.0,
    ) -> None:
        if embedding_dimension is not None and (isinstance(embedding_dimension, bool) or embedding_dimension < 1):
            raise ConfigError("`embedding_dimension` must be a positive integer or None")
        if max_chunk_chars < 1:
            raise ConfigError("`max_chunk_chars` must be ≥ 1")
        if batch_size < 1:
            raise ConfigError("`batch_size` must be ≥ 1")
        if linger < 0:
            raise ConfigError("`linger` must be ≥ 0 seconds")
        self._store = store
        self._vector = vector
        self._embedder = embedder
        self._embedding_dimension = embedding_dimension
        self._max_chunk_chars = max_chunk_chars
        self._batch_size = batch_size
        self._linger = linger
        self._last_batch_ops = 1  # ops in recent batches: jumps up, decays by one per batch (see _collect)
        self._retry_interval = retry_interval
        self._cache = EmbeddingCache(cache_size)
        records = store.vector_records()
        self._sql_records = records if isinstance(records, SQLiteVectorRecords) else None
        # SQL rows of background upserts share one write every few batches (see _write_behind).
        self._coalescing = CoalescingRecords(records) if self._sql_records is not None else None
        self._records: VectorRecords = self._coalescing if self._coalescing is not None else records
        self._limiter = anyio.CapacityLimiter(1)
        self._dim: int | None = None
        self._dim_lock = anyio.Lock()
        self._load_lock = anyio.Lock()
        self._index: _HnswIndex | None = None
        # The queue exists only between start() and aclose(), so an actor never started leaks nothing.
        self._send: MemoryObjectSendStream[_Op]
        self._receive: MemoryObjectReceiveStream[_Op]
        self._state = _State.NEW
        self._task_group: anyio.abc.TaskGroup | None = None
        self._retry_scope: anyio.CancelScope | None = None
        self._writer_done = anyio.Event()
        self._started_at = 0.0
        self._flush_wanted = anyio.Event()
        self._flusher_done = anyio.Event()
        self._flush_stop = False
        # Store reads (retry, reindex) race deletes and moves; changes made after a read make it stale.
        self._change_counter = 0
        self._store_reads = 0
        self._changed_messages: dict[str, int] = {}
        self._changed_threads: dict[str, int] = {}
        self._batches = 0
        self._embed_calls = 0
        self._queries = 0
        self._pending = 0
        self._snapshot_loads = 0
        self._rebuilds = 0

    # lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the writer and the pending-retry loop (the actor's task group)."""
        if self._state is not _State.NEW:
            raise ConfigError(f"the index actor cannot start: it is {self._state.value}")
        self._vector._claim(self)
        self._started_at = time.time()
        if self._sql_records is not None:
            await self._sql_records.ensure_tables()
        self._send, self._receive = anyio.create_memory_object_stream[_Op](max_buffer_size=4096)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = _State.RUNNING
        task_group.start_soon(self._writer)
        task_group.start_soon(self._flusher)
        await task_group.start(self._retry_loop)

    async def aclose(self) -> None:
        """Flush queued batches, save a snapshot and stop; idempotent."""
        if self._state is not _State.RUNNING:
            self._state = _State.CLOSED
            return
        self._state = _State.CLOSING
        try:
            with anyio.CancelScope(shield=True):
                if self._retry_scope is not None:
                    self._retry_scope.cancel()
                self._send.close()
                await self._writer_done.wait()
                self._flush_stop = True
                self._flush_wanted.set()
                await self._flusher_done.wait()
                await self._save_snapshot()
        finally:
            self._receive.close()
            self._vector._release(self)
            self._state = _State.CLOSED
            assert self._task_group is not None
            # Both tasks have finished; exiting the group (outside the shield, as scopes must nest) is instant.
            await self._task_group.__aexit__(None, None, None)

    async def __aenter__(self) -> IndexActor:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if getattr(self, "_state", None) is _State.RUNNING:
            warnings.warn(f"unclosed {self!r}; use `async with` or await aclose()", ResourceWarning, stacklevel=1)

    def _check_running(self) -> None:
        if self._state is not _State.RUNNING:
            raise ConfigError(f"the index actor is {self._state.value}; start it (or the Memory) first",
                              code="THREADMIND_INDEX_CLOSED")

    async def _submit(self, op: _Op) -> None:
        """Queue ``op``; waits only while the queue is full (no checkpoint otherwise: callers wait on ``done``)."""
        self._check_running()
        try:
            try:
                self._send.send_nowait(op)
            except anyio.WouldBlock:
                await self._send.send(op)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise ConfigError("the index actor is closed", code="THREADMIND_INDEX_CLOSED") from None

    async def _call(self, op: _Op) -> None:
        await self._submit(op)
        await op.done.wait()
        if op.error is not None:
            raise _fresh(op.error)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run hnswlib work in a worker thread; the limiter makes it the index's only user."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def pending_marker(self) -> Callable[[Any, Sequence[Message]], None] | None:
        """A hook for the message save's own transaction that marks its messages as awaiting vectors.

        Vectors are written behind the caller's back (after they are queryable); the mark makes that crash-safe.
        None when the vector records are not in the message store's database.
        """
        return SQLiteVectorRecords.pending_marker if self._sql_records is not None else None

    # dimension and index -------------------------------------------------------------------------
    async def dimension(self) -> int:
        """The embedding dimension: known from the embedder, else probed once with ``embed(["a"])``.

        :raises EmbeddingDimensionMismatch: ``embedding_dimension`` differs (no index is created).
        :raises EmbedderError: the probe failed (code ``MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED``);
            the next call probes again.
        """
        if self._dim is not None:
            await anyio.lowlevel.checkpoint()
            return self._dim
        async with self._dim_lock:
            if self._dim is not None:
                return self._dim
            known = self._embedder.dimension
            if known is None:
                self._embed_calls += 1
                try:
                    result = await self._embedder.embed(["a"])
                except Exception as exc:
                    raise EmbedderError(_PROBE_FAILED_TEXT, code=PROBE_FAILED_CODE) from exc
                vectors = np.asarray(result.vectors, dtype=np.float32)
                if vectors.ndim != 2 or vectors.shape[0] < 1 or vectors.shape[1] < 1:
                    raise EmbedderError(_PROBE_FAILED_TEXT, code=PROBE_FAILED_CODE) from EmbedderError(
                        _PROBE_EMPTY_TEXT, code=PROBE_FAILED_CODE
                    )
                known = int(vectors.shape[1])
                self._cache.put(self._embedder.model_id, "a", vectors[0])
            if self._embedding_dimension is not None and known != self._embedding_dimension:
                raise EmbeddingDimensionMismatch(self._embedding_dimension, known)
            self._dim = known
            return known

    async def index_name(self) -> str:
        """``memory_messages`` for 1536 dimensions, else ``memory_messages_<dim>``."""
        dim = await self.dimension()
        return "memory_messages" if dim == 1536 else f"memory_messages_{dim}"

    async def _ensure_index(self) -> _HnswIndex:
        if self._index is not None:
            return self._index
        async with self._load_lock:
            return await self._load_locked()

    async def _load_locked(self) -> _HnswIndex:
        """Load the snapshot and replay newer SQL changes, or rebuild from SQL (caller holds the load lock)."""
        if self._index is not None:
            return self._index
        name = await self.index_name()
        index = await self._run(self._vector._open_index, name, await self.dimension())
        reason = await self._run(index.load_snapshot)
        if reason is None:
            records, deleted, seq = await self._records.load(name, since_seq=index.applied_seq)
            if seq < index.applied_seq:
                reason = "snapshot is newer than the database"
            else:
                await self._run(index.replay, records, deleted, seq)
                self._snapshot_loads += 1
        if reason is not None:
            if reason != "no path":
                logger.info("rebuilding vector index %s from SQL: %s", name, reason)
            records, _, seq = await self._records.load(name, 0)
            await self._run(index.rebuild, records, seq)
            self._rebuilds += 1
        self._pending = await self._records.pending_count(self._started_at)
        self._index = index
        return index

    async def _save_snapshot(self) -> None:
        index = self._index
        if index is None or not index.dirty or self._vector.path is None:
            return
        try:
            if await self._run(index.save_snapshot) and index.snapshot_seq is not None:
                await self._records.prune_tombstones(index.name, index.snapshot_seq)
        except Exception:  # a failed snapshot only costs a rebuild at the next start
            logger.exception("could not save the vector index snapshot")

    # public operations ---------------------------------------------------------------------------
    def _item(self, message: Message) -> _Item:
        if not message.thread_id or not message.resource_id:
            raise ValidationError(f"message {message.id!r} needs `thread_id` and `resource_id` to be indexed")
        text = message_text(message)
        return _Item(
            message_id=message.id,
            thread_id=message.thread_id,
            resource_id=message.resource_id,
            role=message.role,
            created_at=to_iso(message.created_at),
            chunks=chunk_text(text, self._max_chunk_chars) if text else [],
        )

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int:
        """Embed and index messages (replacing their old vectors); returns embedding usage tokens.

        Returns once the vectors are queryable, or right after queueing when ``wait`` is False (then 0).

        :raises EmbedderError: this caller's texts could not be embedded; the messages are pending.
        """
        self._check_running()
        items = [self._item(m) for m in messages]
        if not items:
            await anyio.lowlevel.checkpoint()
            return 0
        # No span per call on this hot path: the batch span links to the caller's (Memory's) span.
        op = _Upsert(items)
        if not wait:
            await self._submit(op)
            await anyio.lowlevel.checkpoint()
            return 0
        await self._call(op)
        return round(op.usage)

    def upsert_on_commit(self, messages: Sequence[Message]) -> CommitGatedUpsert:
        """An upsert that embeds ``messages`` while their save commits (pass it to the thread actor's save).

        The messages must be one thread's batch as given to the save; their ids and texts are what is stored.
        """
        op = _Upsert([self._item(m) for m in messages], gated=True)
        op.created = [m.created_at for m in messages]
        return CommitGatedUpsert(self, op)

    async def query(
        self,
        text: str,
        *,
        top_k: int,
        resource_id: str | None = None,
        thread_id: str | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` messages most similar to ``text`` within the scope, best first, one hit per message.

        :raises EmbedderError: the query could not be embedded.
        """
        self._check_running()
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValidationError(f"`top_k` must be a positive integer, got {top_k!r}")
        if not text or not _TRIM.sub("", text):
            await anyio.lowlevel.checkpoint()
            return []
        with operation_span("threadmind.index.query", "search_memory", thread_id=thread_id, resource_id=resource_id):
            index = await self._ensure_index()
            vector = self._cache.get(self._embedder.model_id, text)
            if vector is None:
                vectors, _ = await self._embed([text])
                vector = vectors[0]
                self._cache.put(self._embedder.model_id, text, vector)
            self._queries += 1
            hits = await self._search(index, vector, top_k, resource_id, thread_id)
            if threshold is not None:
                hits = [h for h in hits if h.score >= threshold]
            return [VectorHit(h.message_id, h.thread_id, h.resource_id, h.score) for h in hits]

    async def _search(
        self, index: _HnswIndex, vector: F32, top_k: int, resource_id: str | None, thread_id: str | None
    ) -> list[SearchHit]:
        """Exact over small scopes on the loop; large scopes ask hnswlib (worker thread) for candidates and
        filter them here. The maps only change on the loop, so a search always sees one consistent state."""
        scope, size = index.scope_rows(resource_id, thread_id)
        if size == 0:
            return []
        fetch = index.ann_fetch(top_k, size)
        if fetch is not None:
            candidates = await self._run(index.knn, vector, fetch)
            scope, size = index.scope_rows(resource_id, thread_id)  # it may have changed meanwhile
            staged = index.staged_in(scope)  # not in hnswlib yet: searched exactly beside it
            hits = index.ann_hits(candidates, top_k, scope, size - len(staged)) if candidates is not None else None
            if hits is not None:
                if staged:
                    hits = index.merge(hits, index.exact(vector, top_k, staged, len(staged)), top_k)
                return hits
        return index.exact(vector, top_k, scope, size, index.scope_key(resource_id, thread_id))

    def _note_change(self, messages: Sequence[str] = (), thread: str | None = None) -> None:
        """Remember a delete/move while store reads are in flight, so their stale results are dropped."""
        self._change_counter += 1
        if self._store_reads:
            for message_id in messages:
                self._changed_messages[message_id] = self._change_counter
            if thread is not None:
                self._changed_threads[thread] = self._change_counter

    async def delete_messages(self, message_ids: Sequence[str]) -> None:
        """Delete the messages' vectors (in SQL and in the index), after everything queued before."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            self._check_running()
            await anyio.lowlevel.checkpoint()
            return
        self._note_change(messages=ids)
        with operation_span("threadmind.index.delete", "delete_memory"):
            await self._call(_Command("delete_messages", ids))

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every vector of the thread."""
        self._note_change(thread=thread_id)
        with operation_span("threadmind.index.delete", "delete_memory", thread_id=thread_id):
            await self._call(_Command("delete_thread", thread_id))

    async def move_thread(self, thread_id: str, resource_id: str) -> None:
        """Re-scope the thread's vectors to another resource."""
        self._note_change(thread=thread_id)
        with operation_span("threadmind.index.move", "update_memory", thread_id=thread_id, resource_id=resource_id):
            await self._call(_Command("move_thread", thread_id, resource_id))

    async def copy_messages(self, id_map: Mapping[str, str], *, thread_id: str, resource_id: str) -> None:
        """Give cloned messages (``id_map`` old → new id) copies of the originals' vectors, without embedding."""
        if not id_map:
            self._check_running()
            await anyio.lowlevel.checkpoint()
            return
        with operation_span("threadmind.index.copy", "upsert_memory", thread_id=thread_id, resource_id=resource_id):
            await self._call(_Command("copy", dict(id_map), thread_id, resource_id))

    async def flush(self) -> int:
        """Hand every staged vector to HNSW now (normally done when the index is quiet); returns how many."""
        self._check_running()
        await self._call(_Command("barrier"))
        index = self._index
        if index is None or not (index.staged or index.marks):
            return 0
        with anyio.CancelScope(shield=True):
            added: int = await self._run(index.apply_flush, index.take_flush())
        return added

    async def retry_pending(self) -> int:
        """Embed messages recorded as pending; returns the number of vectors made."""
        self._check_running()
        await self._call(_Command("barrier"))  # earlier write-behind upserts have cleared their marks
        made = 0
        while True:
            batch = await self._records.take_pending(self._batch_size, self._started_at)
            if not batch:
                break
            self._store_reads += 1
            try:
                read_seq = self._change_counter
                found = {m.id: m for m in await self._store.get_messages_by_id([p.message_id for p in batch])}
                items = [
                    item for p in batch if p.message_id in found and (item := self._item(found[p.message_id])).chunks
                ]
                indexed = {item.message_id for item in items}
                gone = [p.message_id for p in batch if p.message_id not in indexed]  # deleted, or no text any more
                if gone:
                    await self._records.clear_pending(gone)
                op = _Upsert(items, read_seq=read_seq)
                if items:
                    await self._submit(op)
                    await op.done.wait()
            finally:
                self._end_store_read()
            made += op.vectors
            if op.error is not None or len(batch) < self._batch_size:
                break
        self._pending = await self._records.pending_count(self._started_at)
        return made

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Make vectors for every stored message that has text but no vector; returns vectors made.

        ``progress(done, total)`` is called after each batch (messages). Messages that fail are pending and
        the first error is raised at the end.
        """
        self._check_running()
        index = await self._ensure_index()
        await self._call(_Command("barrier"))  # earlier write-behind upserts are in SQL before we look
        self._store_reads += 1
        try:
            read_seq = self._change_counter
            have = await self._records.message_ids_with_vectors(index.name)
            todo: list[_Item] = []
            threads = await self._store.list_threads(per_page=False)
            for thread in threads.threads:
                page = await self._store.list_messages(
                    MessageQuery(thread_id=thread.id, per_page=False, include_total=False)
                )
                todo.extend(
                    item for m in page.messages if m.id not in have and (item := self._item(m)).chunks
                )
            made = done = 0
            first_error: BaseException | None = None
            for start in range(0, len(todo), self._batch_size):
                op = _Upsert(todo[start : start + self._batch_size], read_seq=read_seq)
                await self._submit(op)
                await op.done.wait()
                made += op.vectors
                done += len(op.items)
                first_error = first_error or op.error
                if progress is not None:
                    progress(done, len(todo))
        finally:
            self._end_store_read()
        self._pending = await self._records.pending_count(self._started_at)
        if first_error is not None:
            raise _fresh(first_error)
        return made

    def _end_store_read(self) -> None:
        self._store_reads -= 1
        if not self._store_reads:
            self._changed_messages.clear()
            self._changed_threads.clear()

    def statistics(self) -> IndexStatistics:
        """Counters: live vectors, batches, add_items and embed calls, pending messages, queries, loads."""
        index = self._index
        return IndexStatistics(
            vectors=index.count if index else 0,
            batches=self._batches,
            add_items_calls=index.add_items_calls if index else 0,
            embed_calls=self._embed_calls,
            pending=self._pending,
            queries=self._queries,
            brute_force_queries=index.brute_force_queries if index else 0,
            ann_queries=index.ann_queries if index else 0,
            snapshot_loads=self._snapshot_loads,
            rebuilds=self._rebuilds,
            staged=index.staged if index else 0,
            memory_bytes=index.memory_bytes() if index else 0,
            row_writes=self._coalescing.writes if self._coalescing is not None else 0,
        )

    # the writer ----------------------------------------------------------------------------------
    async def _embed(self, texts: list[str]) -> tuple[F32, int]:
        """One embedder call, validated; any failure becomes ``EmbedderError`` (cause chained)."""
        # Known after the first call: skip dimension()'s checkpoint (the embedder call is one).
        dim = self._dim if self._dim is not None else await self.dimension()
        self._embed_calls += 1
        try:
            result = await self._embedder.embed(texts)
        except Exception as exc:
            raise EmbedderError(f"the embedder {self._embedder.model_id!r} failed: {exc}") from exc
        vectors = np.asarray(result.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EmbedderError(f"the embedder returned {vectors.shape[0] if vectors.ndim else 0} vectors "
                                f"for {len(texts)} texts")
        if vectors.shape[1] != dim:
            raise EmbeddingDimensionMismatch(dim, int(vectors.shape[1]))
        if not np.isfinite(vectors).all():
            raise EmbedderError("the embedder returned non-finite values")
        return vectors, int(result.usage_tokens)

    async def _writer(self) -> None:
        """Drain the FIFO. Upsert batches are pipelined (up to ``_PIPELINE`` in flight): batch N+1 embeds and
        queues its SQL write while batch N waits for its commit; SQL writes are queued, and vectors staged, in
        batch order. A command (delete, move, copy) first waits until every earlier batch is applied.
        """
        carry: _Op | None = None
        try:
            async with anyio.create_task_group() as pipeline:
                slots = anyio.Semaphore(_PIPELINE)
                previous: _Stages | None = None
                while True:
                    if carry is None:
                        try:
                            carry = await self._receive.receive()
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            break
                    op, carry = carry, None
                    if isinstance(op, _Upsert):
                        batch, carry = await self._collect(op)
                        await slots.acquire()
                        stages = _Stages(slots)
                        pipeline.start_soon(self._pipelined, batch, previous, stages)
                        previous = stages
                    else:
                        assert isinstance(op, _Command)
                        if previous is not None:  # a command sees every earlier upsert committed
                            if self._coalescing is not None:
                                await self._coalescing.flush()  # without waiting out the write-behind delay
                            await previous.durable.wait()
                        await self._guarded([op], self._process_command(op))
        finally:
            closed = ConfigError("the index actor closed before this operation ran", code="THREADMIND_INDEX_CLOSED")
            leftovers = [carry] if carry is not None else []
            while True:
                try:
                    leftovers.append(self._receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
            for op in leftovers:
                if not op.done.is_set():
                    op.error = closed
                    op.done.set()
            self._writer_done.set()

    async def _pipelined(self, batch: list[_Upsert], previous: _Stages | None, stages: _Stages) -> None:
        try:
            await self._guarded(batch, self._process_upserts(batch, previous, stages))
        finally:
            stages.queued.set()
            if previous is not None:
                await previous.applied.wait()
            stages.applied.set()
            if previous is not None:
                await previous.durable.wait()
            stages.durable.set()
            stages.release_slot()

    async def _flusher(self) -> None:
        """Hand staged vectors to hnswlib when the index is quiet, or when the backlog grows large.

        Building HNSW costs ~2 000 vectors/s per core (M=16, ef_construction=64, 384 dims) and only serves
        scopes too large for exact search; until a vector is added, queries search it exactly beside HNSW.
        So insertion waits for ``_FLUSH_IDLE`` seconds without upserts (or ``_FLUSH_BACKLOG`` staged vectors),
        keeping that CPU off bursts of saves.
        """
        try:
            while True:
                await self._flush_wanted.wait()
                self._flush_wanted = anyio.Event()
                index = self._index
                if not self._flush_stop and index is not None and index.staged < _FLUSH_BACKLOG:
                    with anyio.move_on_after(_FLUSH_IDLE) as quiet:
                        await self._flush_wanted.wait()  # another upsert: wait for quiet again
                    if not quiet.cancelled_caught:
                        continue
                if index is not None and (index.staged or index.marks):
                    try:
                        with anyio.CancelScope(shield=True):
                            await self._run(index.apply_flush, index.take_flush())
                    except Exception:  # those vectors stay exactly searchable; HNSW misses them until rebuild
                        logger.exception("adding staged vectors to the hnswlib index failed")
                if self._flush_stop:
                    return
        finally:
            self._flusher_done.set()

    async def _collect(self, first: _Upsert) -> tuple[list[_Upsert], _Op | None]:
        """Consecutive queued upserts up to ``batch_size`` texts, lingering once for late arrivals.

        Only while recent batches held several ops: a lone caller's save would otherwise wait the linger
        (about a millisecond once the event loop rounds the timer up) before its embedding could start.
        """
        batch = [first]
        texts = first.n_texts
        lingered = self._linger == 0 or self._last_batch_ops <= 1
        try:
            return await self._fill(batch, texts, lingered)
        finally:
            self._last_batch_ops = max(len(batch), self._last_batch_ops - 1)

    async def _fill(self, batch: list[_Upsert], texts: int, lingered: bool) -> tuple[list[_Upsert], _Op | None]:
        while texts < self._batch_size:
            try:
                nxt = self._receive.receive_nowait()
            except anyio.WouldBlock:
                if lingered:
                    break
                lingered = True
                await anyio.sleep(self._linger)
                continue
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if not isinstance(nxt, _Upsert):
                return batch, nxt
            batch.append(nxt)
            texts += nxt.n_texts
        return batch, None

    async def _guarded(self, ops: Sequence[_Op], work: Any) -> None:
        """Run one batch or command; an unexpected failure fails its callers, never the writer."""
        try:
            await work
        except Exception as exc:
            logger.exception("index actor operation failed")
            for op in ops:
                if op.error is None and not op.done.is_set():
                    op.error = exc
        finally:
            for op in ops:
                op.done.set()

    def _stale(self, op: _Upsert, item: _Item) -> bool:
        if op.read_seq is None:
            return False
        changed = max(self._changed_messages.get(item.message_id, -1), self._changed_threads.get(item.thread_id, -1))
        return changed > op.read_seq

    async def _process_upserts(
        self, ops: list[_Upsert], previous: _Stages | None = None, stages: _Stages | None = None
    ) -> None:
        self._batches += 1
        if not tracing_enabled():  # no SDK: skip even the no-op span on this per-batch path
            await self._process_batch(ops, previous, stages)
            return
        links = [op.link for op in ops if op.link is not None]
        tracer = trace.get_tracer("threadmind")
        attributes: dict[str, str | int] = {ATTR_OPERATION: "embeddings", "threadmind.batch.size": len(ops)}
        # Shared work: linked to every caller, and a child of the first so it is never a new root.
        parent = trace.set_span_in_context(trace.NonRecordingSpan(links[0].context)) if links else None
        with tracer.start_as_current_span("threadmind.index.batch", context=parent, links=links,
                                          attributes=attributes):
            await self._process_batch(ops, previous, stages)

    async def _process_batch(self, ops: list[_Upsert], previous: _Stages | None, stages: _Stages | None) -> None:
        try:
            index = await self._ensure_index()
        except Exception as exc:
            await self._await_commits(ops)
            for op in ops:
                op.error = exc
            await self._add_pending([(i, exc) for op in ops if self._committed(op) for i in op.items if i.chunks])
            return
        await self._apply_upserts(index, ops, previous, stages)

    @staticmethod
    async def _await_commits(ops: Sequence[_Upsert]) -> None:
        """Wait for the saves of gated upserts; take the stored ``created_at`` of re-saved messages."""
        for op in ops:
            if op.gate is None:
                continue
            await op.gate.wait()
            if op.committed is not None:
                created = {m.id: m.created_at for m in op.committed}
                for item, before in zip(op.items, op.created, strict=True):
                    when = created.get(item.message_id)
                    if when is not None and when != before:  # a re-saved message keeps its stored time
                        item.created_at = to_iso(when)

    @staticmethod
    def _committed(op: _Upsert) -> bool:
        """Whether the op's messages are stored: ungated ops always, gated ops once their save committed."""
        return op.gate is None or op.committed is not None

    async def _apply_upserts(
        self, index: _HnswIndex, ops: list[_Upsert], previous: _Stages | None = None, stages: _Stages | None = None
    ) -> None:
        # Embed while gated ops' saves commit; then the latest stored version of each message wins, and
        # stale store reads and failed saves are dropped.
        gated = any(op.gate is not None for op in ops)
        prepared: _Prepared | None = None
        if gated:
            vectors, usage, failures = await self._embed_texts([c for op in ops for i in op.items for c in i.chunks])
            prepared = _Prepared(index, vectors) if vectors else None
            await self._await_commits(ops)
        latest: dict[str, tuple[_Upsert, _Item]] = {}
        for op in ops:
            if not self._committed(op):
                continue
            for item in op.items:
                if not self._stale(op, item):
                    latest.pop(item.message_id, None)
                    latest[item.message_id] = (op, item)
        if not gated:
            vectors, usage, failures = await self._embed_texts(
                [c for _, item in latest.values() for c in item.chunks]
            )
            prepared = _Prepared(index, vectors) if vectors else None
        records: list[VectorRecord] = []
        entries: list[_Entry] = []
        positions: list[int] = []
        cleared: list[str] = []
        failed: list[tuple[_Item, BaseException]] = []
        owners: list[_Upsert] = []
        for op, item in latest.values():
            if not item.chunks:
                if index.has_message(item.message_id):
                    cleared.append(item.message_id)
                continue
            error = next((failures[c] for c in item.chunks if c in failures), None)
            if error is not None:
                failed.append((item, error))
                op.error = op.error or error
                continue
            assert prepared is not None  # every chunk of this item was embedded
            single = len(item.chunks) == 1
            for i, chunk in enumerate(item.chunks):
                vector_id = item.message_id if single else f"{item.message_id}#{i}"
                position = prepared.position[chunk]
                positions.append(position)
                records.append(VectorRecord(
                    vector_id=vector_id, message_id=item.message_id, thread_id=item.thread_id,
                    resource_id=item.resource_id, role=item.role, created_at=item.created_at,
                    embedding=prepared.raw[position],
                ))
                entries.append(_Entry(0, vector_id, item.message_id, item.thread_id, item.resource_id))
                op.usage += usage.get(chunk, 0.0)
            op.vectors += len(item.chunks)
            owners.append(op)
        if records:
            # Write-behind: stage first (exact search sees the vectors at once), answer the callers, then make
            # the rows durable. Each message's pending marker was written with the message itself (see
            # `pending_marker`), so a crash before this SQL write is repaired by `retry_pending` at the next start.
            assert prepared is not None
            matrix = prepared.rows(positions)
            if previous is not None:  # vectors are applied in batch order
                await previous.applied.wait()
            index.upsert(entries, matrix, index.applied_seq, True, prepared=True)
            self._flush_wanted.set()
            if stages is not None and not cleared:
                stages.applied.set()  # the next batch may stage now, before this one's rows are durable
            for op in owners:
                if op.error is None and op.read_seq is None:  # retries and reindex wait for durability
                    op.done.set()
        if previous is not None:  # SQL writes are queued in batch order (the store commits in queue order)
            await previous.queued.wait()
        if stages is not None and not cleared:
            stages.queued.set()  # set before the call: its job is queued before the call first suspends
        if records:
            try:
                # Write-behind when every caller already has its answer: it may share the next commit.
                background = all(op.read_seq is None for op in owners)
                if background and stages is not None and not cleared:
                    stages.release_slot()  # the buffered write must not hold the next batches back
                seq = await self._records.upsert(index.name, records, background=background)
            except Exception as exc:
                logger.exception("vectors stay in memory but could not be stored; they are pending")
                failed.extend((item, exc) for _, item in latest.values() if item.chunks)
                await self._add_pending(failed)
                return
            index.applied_seq = max(index.applied_seq, seq)
        if cleared:
            if previous is not None:
                await previous.applied.wait()
            seq = await self._records.delete_by_message_ids(index.name, cleared)
            if stages is not None:
                stages.queued.set()
            index.delete_messages(cleared, seq)
            self._flush_wanted.set()
        if failed:
            await self._add_pending(failed)
        elif self._pending and records:
            self._pending = await self._records.pending_count(self._started_at)

    async def _embed_texts(
        self, chunks: list[str]
    ) -> tuple[dict[str, F32], dict[str, float], dict[str, BaseException]]:
        """Vectors for ``chunks`` (cache first, then one call; per-text retry when the batch call fails)."""
        model = self._embedder.model_id
        vectors: dict[str, F32] = {}
        usage: dict[str, float] = {}
        failures: dict[str, BaseException] = {}
        need: list[str] = []
        for chunk in dict.fromkeys(chunks):
            cached = self._cache.get(model, chunk)
            if cached is None:
                need.append(chunk)
            else:
                vectors[chunk] = cached

        async def _one_call(texts: list[str]) -> None:
            got, tokens = await self._embed(texts)
            total = sum(len(t) for t in texts) or 1
            for text, vector in zip(texts, got, strict=True):
                vectors[text] = vector
                usage[text] = tokens * len(text) / total
                self._cache.put(model, text, vector)

        if need:
            try:
                await _one_call(need)
            except (EmbedderError, EmbeddingDimensionMismatch) as exc:
                if len(need) == 1:
                    failures[need[0]] = exc
                else:
                    for text in need:
                        try:
                            await _one_call([text])
                        except (EmbedderError, EmbeddingDimensionMismatch) as one:
                            failures[text] = one
        return vectors, usage, failures

    async def _add_pending(self, failed: Sequence[tuple[_Item, BaseException]]) -> None:
        if not failed:
            return
        try:
            await self._records.add_pending(
                [PendingVector(message_id=i.message_id, thread_id=i.thread_id, resource_id=i.resource_id)
                 for i, _ in failed],
                str(failed[0][1])[:500],
            )
            self._pending = await self._records.pending_count(self._started_at)
        except Exception:
            logger.exception("could not record %d messages as pending", len(failed))

    async def _process_command(self, op: _Command) -> None:
        if op.kind == "barrier":  # nothing to do: reaching here means every earlier op has finished
            return
        if op.link is None:  # no SDK, or no caller span: nothing to attach
            await self._run_command(op)
            return
        # Work for one caller: a descendant of that caller's span, though it runs in the index's own task.
        parent = trace.set_span_in_context(trace.NonRecordingSpan(op.link.context))
        with trace.get_tracer("threadmind").start_as_current_span(
            f"threadmind.index.{op.kind}", context=parent, attributes={ATTR_OPERATION: _COMMAND_OPERATIONS.get(
                op.kind, "update_memory")},
        ):
            await self._run_command(op)

    async def _run_command(self, op: _Command) -> None:
        # The load lock keeps a concurrent first load from missing this change.
        async with self._load_lock:
            index = self._index
            if op.kind == "delete_messages":
                (ids,) = op.args
                seq = await self._records.delete_by_message_ids(None, ids)
                if index is not None:
                    index.delete_messages(ids, seq)
            elif op.kind == "delete_thread":
                (thread_id,) = op.args
                seq = await self._records.delete_by_thread(thread_id)
                if index is not None:
                    index.delete_thread(thread_id, seq)
            elif op.kind == "move_thread":
                thread_id, resource_id = op.args
                seq = await self._records.move_thread(thread_id, resource_id)
                if index is not None:
                    index.move_thread(thread_id, resource_id, seq)
            elif op.kind == "copy":
                id_map, thread_id, resource_id = op.args
                index = await self._load_locked()
                copies = [
                    msgspec.structs.replace(
                        r,
                        vector_id=id_map[r.message_id] + r.vector_id[len(r.message_id):],
                        message_id=id_map[r.message_id],
                        thread_id=thread_id,
                        resource_id=resource_id,
                    )
                    for r in await self._records.records_for_messages(index.name, list(id_map))
                ]
                if copies:
                    seq = await self._records.upsert(index.name, copies)
                    index.upsert_records(copies, seq, defer=True)
            else:  # pragma: no cover - every kind is listed above
                raise ThreadmindError(f"unknown index command {op.kind!r}")
            self._flush_wanted.set()
            if self._pending and op.kind != "copy":
                self._pending = await self._records.pending_count(self._started_at)

    async def _retry_loop(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Retry pending messages at start, then every ``retry_interval`` seconds with backoff while any remain."""
        with anyio.CancelScope() as scope:
            self._retry_scope = scope
            task_status.started()
            try:
                self._pending = await self._records.pending_count(self._started_at)
            except Exception:
                logger.exception("could not read pending vectors")
            delay = self._retry_interval or 0.0
            while True:
                if self._pending:
                    try:
                        await self.retry_pending()
                    except Exception:
                        logger.exception("retrying pending vectors failed")
                if self._retry_interval is None:
                    return
                delay = min(delay * 2, _MAX_RETRY_DELAY) if self._pending else self._retry_interval
                await anyio.sleep(delay)
