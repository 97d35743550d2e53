"""IndexActor: the single owner of the message vector index; coalesces upserts into batched embed + write calls.

It runs on the shared :class:`~threadmind.actors.Actor` base: one mailbox, one loop. Consecutive upserts
from every caller form one batch (up to ``batch_size`` texts, lingering ``linger`` seconds for more while
recent batches were shared): one ``embedder.embed`` call for the texts not cached, the vectors staged in the
vector store, and SQL rows written behind (:mod:`._index_batch`). Batches run pipelined in the actor's task
group. Deletes, moves and copies go through the same mailbox and wait for every earlier batch, so a delete
issued after an upsert always ends deleted. Where vectors live and how they are searched is the vector
store's business (:class:`~threadmind.stores.VectorStore`).

A one-thread ``Memory.save_messages`` queues its upsert as the thread actor starts the save
(:class:`CommitGatedUpsert`): the batch embeds while the messages commit and stages the vectors only once
the commit succeeded, so the caller waits for the commit and the staging, not for the embedding as well.

When a batched embed call fails, its texts are retried one by one: only callers whose own texts fail
get the ``EmbedderError``, and their messages are recorded as pending, to be retried by
:meth:`IndexActor.retry_pending` (at start, periodically with backoff) and by :meth:`IndexActor.reindex`.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
import numpy as np
from opentelemetry import trace

from ..codecs import Message
from ..codecs._time import to_iso
from ..embedders import Embedder
from ..embedders._cache import EmbeddingCache
from ..embedders._chunking import chunk_text, is_blank, message_text
from ..errors import ConfigError, EmbedderError, EmbeddingDimensionMismatch, ThreadmindError, ValidationError
from ..stores import MessageQuery, SaveHook, Store, VectorHit, VectorStore, VectorStoreStatistics
from ..stores._vectors._contract import RowsForSave, as_vector_store
from ..tracing import ATTR_OPERATION, operation_span
from ._actor import Actor
from ._index_batch import UpsertBatches
from ._index_ops import (
    BatchStages,
    CommitGatedUpsert,
    IndexCommand,
    IndexOp,
    IndexUpsert,
    InFlight,
    UpsertItem,
    fresh_error,
)
from ._mailbox import MailboxClosed

__all__ = ("CommitGatedUpsert", "IndexActor", "IndexStatistics", "VectorHit", "chunk_text", "message_text")

logger = logging.getLogger("threadmind.index")

PROBE_FAILED_CODE = "MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED"
_PROBE_FAILED_TEXT = (
    "Failed to determine the embedder's output dimension. Semantic recall cannot safely select a vector index "
    "until the embedder returns a usable embedding. Check that the embedder is reachable and correctly configured."
)
_PROBE_EMPTY_TEXT = "Embedder returned no usable embedding for the dimension probe."
_MAX_RETRY_DELAY = 300.0
_PIPELINE = 8  # upsert batches being embedded or staged at once (buffered rows no longer hold a slot)
_COMMAND_OPERATIONS = {"delete_messages": "delete_memory", "delete_thread": "delete_memory"}


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of an :class:`IndexActor` and its vector store, for tests and tracing."""

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
    #: Memory held by the index: the hnswlib graph and vectors, vectors waiting for it, and scope blocks.
    memory_bytes: int = 0
    #: SQL writes of write-behind vector rows; the rows of many batches share one (SQLite stores only).
    row_writes: int = 0
    #: The vector store's own counters (queries answered from SQL while loading, catch-ups, snapshots...).
    store: VectorStoreStatistics = VectorStoreStatistics()


class _State(Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class IndexActor(Actor[IndexOp]):
    """Owns one message vector index: batched upserts, scoped queries, deletes, snapshots and retries."""

    def __init__(
        self,
        *,
        store: Store,
        vector: VectorStore,
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
        super().__init__("index", mailbox_capacity=4096)
        self._store = store
        self._vector = as_vector_store(vector)
        self._row_writer = vector if isinstance(vector, RowsForSave) else None  # checked once: saves ask per call
        self._embedder = embedder
        self._embedding_dimension = embedding_dimension
        self._max_chunk_chars = max_chunk_chars
        self._batch_size = batch_size
        self._linger = linger
        self._last_batch_ops = 1  # ops in recent batches: jumps up, decays by one per batch (see handle)
        self._retry_interval = retry_interval
        self._cache = EmbeddingCache(cache_size)
        self._batches = UpsertBatches(vector=self._vector, embedder=embedder, cache=self._cache,
                                      dimension=lambda: self._dim, is_stale=self._stale)
        self._batches.on_pending = self._refresh_pending
        self._dim: int | None = None
        self._dim_lock = anyio.Lock()
        self._index_lock = anyio.Lock()
        self._index_ready = False
        self._state = _State.NEW
        self._task_group: anyio.abc.TaskGroup | None = None
        self._retry_scope: anyio.CancelScope | None = None
        self._loop_done = anyio.Event()
        self._started_at = 0.0
        # The batch being formed from consecutive upserts, the pipeline's slots, and the last batch's stages.
        self._forming: list[IndexUpsert] = []
        self._forming_texts = 0
        self._lingered = False
        self._slots = anyio.Semaphore(_PIPELINE)
        self._previous: BatchStages | None = None
        # Store reads (retry, reindex) race deletes and moves; changes made after a read make it stale.
        self._change_counter = 0
        self._store_reads = 0
        self._changed_messages: dict[str, int] = {}
        self._changed_threads: dict[str, int] = {}
        # Messages of upserts queued or being processed (a save may write a message's vectors itself only when
        # none is: the batches' writes would otherwise land after it).
        self._in_flight = InFlight()
        self._queries = 0
        self._pending = 0

    # lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the vector store, start the actor loop and the pending-retry loop (the actor's task group)."""
        if self._state is not _State.NEW:
            raise ConfigError(f"the index actor cannot start: it is {self._state.value}")
        self._started_at = time.time()
        await self._vector.open(self._store, owner=self)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = _State.RUNNING
        task_group.start_soon(self._loop)
        await task_group.start(self._retry_loop)

    async def _loop(self) -> None:
        try:
            await self.run()
        finally:
            self._loop_done.set()

    async def aclose(self) -> None:
        """Finish queued batches, make their rows durable, close the vector store and stop; idempotent.

        Bounded whatever the index size: no snapshot of a large index and no HNSW insertion happen here.
        """
        if self._state is not _State.RUNNING:
            self._state = _State.CLOSED
            return
        self._state = _State.CLOSING
        try:
            with anyio.CancelScope(shield=True):
                if self._retry_scope is not None:
                    self._retry_scope.cancel()
                self.close()  # the loop handles what was accepted, then returns
                await self._loop_done.wait()
                await self._dispatch()
                if self._previous is not None:
                    # The last batch's rows may sit in the vector store's write-behind buffer, which would write
                    # them after its delay (25 ms): write them now, once the batch has queued them.
                    await self._previous.queued.wait()
                    await self._vector.barrier()
                    await self._previous.durable.wait()
        finally:
            self._state = _State.CLOSED
            assert self._task_group is not None
            # Every task has finished; exiting the group (outside the shield, as scopes must nest) is instant.
            try:
                await self._task_group.__aexit__(None, None, None)
            finally:
                await self._vector.close()  # opened before the group was entered: closed after it (it shields itself)

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

    async def submit(self, op: IndexOp) -> None:
        """Queue ``op`` in the actor's mailbox; callers wait on ``op.done`` (the commit-gated upsert queues its op
        here as its save starts)."""
        self._check_running()
        upsert = op if isinstance(op, IndexUpsert) else None
        if upsert is not None:
            self._in_flight.add(upsert)
        try:
            await self.tell(op)
        except BaseException as exc:
            if upsert is not None:
                self._in_flight.remove(upsert)
            if isinstance(exc, MailboxClosed):
                raise ConfigError("the index actor is closed", code="THREADMIND_INDEX_CLOSED") from None
            raise

    async def rows_for_save(self, op: IndexUpsert) -> object | None:
        """The vector rows of a gated upsert's messages for its save to write itself (``RowsForSave``), embedded
        now (the index selected first, as a batch does); None when the vector store cannot take them so, a message
        has no text left (the batch path deletes its vectors), or the embedder failed for any of them.

        What the save then commits is what the batch would have written: one row per chunk, the last text of a
        message given twice, the usage tokens on ``op``.
        """
        vector = self._row_writer
        if vector is None or not vector.rows_go_with_saves or self._state is not _State.RUNNING:
            return None
        if not op.items or any(not item.chunks for item in op.items):
            return None
        await self._ensure_index()
        return await self._batches.rows_for_save(op, vector)

    def claim_for_save(self, op: IndexUpsert) -> bool:
        """(thread actor, as the save starts) Whether the save may write ``op``'s vectors itself: no upsert of its
        messages is queued or running. Store reads of retries and reindexing in flight then skip those messages
        (their texts predate the save)."""
        if self._in_flight.holds(op):
            return False
        self._note_change(messages=[item.message_id for item in op.items])
        return True

    async def _call(self, op: IndexOp) -> None:
        await self.submit(op)
        await op.done.wait()
        if op.error is not None:
            raise fresh_error(op.error)

    def pending_marker(self) -> Callable[[Any, Sequence[Message]], None] | None:
        """A hook for the message save's own transaction that marks its messages as awaiting vectors.

        Vectors are written behind the caller's back (after they are queryable); the mark makes that crash-safe.
        None when the vector records are not in the message store's database.
        """
        marker: SaveHook | None = self._vector.pending_marker()
        return marker

    @property
    def vector_store(self) -> VectorStore:
        """The vector store under this actor."""
        return self._vector

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
                self._batches.embed_calls += 1
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


    async def _ensure_index(self) -> None:
        """Select the index in the vector store (it loads, or starts loading, on first use)."""
        if self._index_ready:
            return
        async with self._index_lock:
            if not self._index_ready:
                await self._vector.use_index(await self.index_name(), await self.dimension())
                self._index_ready = True

    # public operations ---------------------------------------------------------------------------
    def _item(self, message: Message) -> UpsertItem:
        if not message.thread_id or not message.resource_id:
            raise ValidationError(f"message {message.id!r} needs `thread_id` and `resource_id` to be indexed")
        text = message_text(message)
        return UpsertItem(
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
        op = IndexUpsert(items)
        if not wait:
            await self.submit(op)
            await anyio.lowlevel.checkpoint()
            return 0
        await self._call(op)
        return round(op.usage)

    def upsert_on_commit(self, messages: Sequence[Message]) -> CommitGatedUpsert:
        """An upsert that embeds ``messages`` while their save commits (pass it to the thread actor's save, or to
        ``SaveAcross`` with the other threads' parts): the one way a save with semantic recall on gets its vectors.

        The rule, for every door: the vectors are staged only once the commit succeeded (a failed save leaves none),
        in the thread's commit order, and are searchable **when ``Memory.save_messages`` returns** (it waits for
        :meth:`CommitGatedUpsert.result`: one thread's batch or several threads' alike) and **soon after an agent
        turn** (the turn does not wait for its embedding; ``Memory.settled()`` does). The save marks the messages as
        awaiting vectors in its transaction, so a crash or an embedder outage leaves them for the index's retry.

        The messages must be one thread's batch as given to the save; their ids and texts are what is stored.
        """
        op = IndexUpsert([self._item(m) for m in messages], gated=True)
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
        if is_blank(text):
            await anyio.lowlevel.checkpoint()
            return []
        with operation_span("threadmind.index.query", "search_memory", thread_id=thread_id, resource_id=resource_id):
            await self._ensure_index()
            vector = self._cache.get(self._embedder.model_id, text)
            if vector is None:
                vectors, _ = await self._batches.embed([text])
                vector = vectors[0]
                self._cache.put(self._embedder.model_id, text, vector)
            self._queries += 1
            hits = await self._vector.query(np.asarray(vector, dtype=np.float32), top_k=top_k,
                                            resource_id=resource_id, thread_id=thread_id)
            if threshold is not None:
                hits = [h for h in hits if h.score >= threshold]
            return hits

    async def search(
        self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None
    ) -> list[VectorHit]:
        """The scored hits for ``text`` in one thread or resource (what ``threadmind search`` shows).

        :raises ValidationError: neither a thread nor a resource names the scope.
        """
        if resource_id is None and thread_id is None:
            raise ValidationError("`resource_id` or `thread_id` must name the scope of a search")
        return await self.query(text, top_k=top_k, resource_id=resource_id, thread_id=thread_id)

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
            await self._call(IndexCommand("delete_messages", ids))

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every vector of the thread."""
        self._note_change(thread=thread_id)
        with operation_span("threadmind.index.delete", "delete_memory", thread_id=thread_id):
            await self._call(IndexCommand("delete_thread", thread_id))

    async def move_thread(self, thread_id: str, resource_id: str) -> None:
        """Re-scope the thread's vectors to another resource."""
        self._note_change(thread=thread_id)
        with operation_span("threadmind.index.move", "update_memory", thread_id=thread_id, resource_id=resource_id):
            await self._call(IndexCommand("move_thread", thread_id, resource_id))

    async def copy_messages(self, id_map: Mapping[str, str], *, thread_id: str, resource_id: str) -> None:
        """Give cloned messages (``id_map`` old → new id) copies of the originals' vectors, without embedding."""
        if not id_map:
            self._check_running()
            await anyio.lowlevel.checkpoint()
            return
        with operation_span("threadmind.index.copy", "upsert_memory", thread_id=thread_id, resource_id=resource_id):
            await self._call(IndexCommand("copy", dict(id_map), thread_id, resource_id))

    async def load(self) -> int:
        """Select the index now and wait until the vector store has loaded it; the vectors it holds.

        The index is otherwise selected by the first operation that needs it, and a large one loads in the
        background while queries read the stored rows (see :meth:`Memory.load_index`).
        """
        self._check_running()
        await self._ensure_index()
        return await self._vector.wait_loaded()

    async def flush(self) -> int:
        """Hand every staged vector to the ANN structure now (normally done when the index is quiet)."""
        self._check_running()
        await self._call(IndexCommand("barrier"))
        if not self._index_ready:
            return 0
        with anyio.CancelScope(shield=True):
            added = await self._vector.flush()
        return added

    async def persist(self) -> bool:
        """Save a snapshot of the index now (flushing staged vectors first); False when there was nothing to save."""
        self._check_running()
        await self._call(IndexCommand("barrier"))
        if not self._index_ready:
            return False
        with anyio.CancelScope(shield=True):
            saved = await self._vector.persist()
        return saved

    async def retry_pending(self) -> int:
        """Embed messages recorded as pending; returns the number of vectors made."""
        self._check_running()
        await self._call(IndexCommand("barrier"))  # earlier write-behind upserts have cleared their marks
        made = 0
        while True:
            batch = await self._vector.take_pending(self._batch_size, self._started_at)
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
                    await self._vector.clear_pending(gone)
                op = IndexUpsert(items, read_seq=read_seq)
                if items:
                    await self.submit(op)
                    await op.done.wait()
            finally:
                self._end_store_read()
            made += op.vectors
            if op.error is not None or len(batch) < self._batch_size:
                break
        self._pending = await self._vector.pending_count(self._started_at)
        return made

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Make vectors for every stored message that has text but no vector; returns vectors made.

        ``progress(done, total)`` is called after each batch (messages). Messages that fail are pending and
        the first error is raised at the end.
        """
        self._check_running()
        await self._ensure_index()
        await self._call(IndexCommand("barrier"))  # earlier write-behind upserts are in SQL before we look
        self._store_reads += 1
        try:
            read_seq = self._change_counter
            have = await self._vector.message_ids_with_vectors()
            todo: list[UpsertItem] = []
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
                op = IndexUpsert(todo[start : start + self._batch_size], read_seq=read_seq)
                await self.submit(op)
                await op.done.wait()
                made += op.vectors
                done += len(op.items)
                first_error = first_error or op.error
                if progress is not None:
                    progress(done, len(todo))
        finally:
            self._end_store_read()
        self._pending = await self._vector.pending_count(self._started_at)
        if first_error is not None:
            raise fresh_error(first_error)
        return made

    def _end_store_read(self) -> None:
        self._store_reads -= 1
        if not self._store_reads:
            self._changed_messages.clear()
            self._changed_threads.clear()

    def statistics(self) -> IndexStatistics:  # type: ignore[override]  # the index's counters, not a mailbox's
        """Counters: live vectors, batches, add_items and embed calls, pending messages, queries, loads."""
        vs = self._vector.statistics()
        return IndexStatistics(
            vectors=vs.vectors,
            batches=self._batches.batches,
            add_items_calls=vs.add_items_calls,
            embed_calls=self._batches.embed_calls,
            pending=self._pending,
            queries=self._queries,
            brute_force_queries=vs.brute_force_queries,
            ann_queries=vs.ann_queries,
            snapshot_loads=vs.snapshot_loads,
            rebuilds=vs.rebuilds,
            staged=vs.staged,
            memory_bytes=vs.memory_bytes,
            row_writes=vs.row_writes,
            store=vs,
        )

    async def _refresh_pending(self, failed: bool) -> None:
        if failed or self._pending:
            self._pending = await self._vector.pending_count(self._started_at)

    # the actor loop --------------------------------------------------------------------------------
    async def handle(self, command: IndexOp) -> None:
        """Collect consecutive upserts into a batch; a command first sends the batch on, then runs."""
        if isinstance(command, IndexUpsert):
            self._forming.append(command)
            self._forming_texts += command.n_texts
            if self._forming_texts < self._batch_size:
                if len(self._mailbox):
                    return  # the loop hands us the next queued op at once
                # Linger once for late arrivals, only while recent batches held several ops: a lone caller's
                # save would otherwise wait the linger (about a millisecond once the loop rounds the timer up).
                if not self._lingered and self._linger > 0 and self._last_batch_ops > 1:
                    self._lingered = True
                    await anyio.sleep(self._linger)
                    if len(self._mailbox):
                        return
            await self._dispatch()
            return
        assert isinstance(command, IndexCommand)
        await self._dispatch()
        previous = self._previous
        if previous is not None and not previous.durable.is_set():  # a command sees earlier upserts committed
            await self._vector.barrier()  # without waiting out the write-behind delay
            await previous.durable.wait()
        await self._guarded([command], self._process_command(command))

    async def _dispatch(self) -> None:
        """Start the formed batch in the pipeline (waiting for a free slot)."""
        batch = self._forming
        if not batch:
            return
        self._forming, self._forming_texts, self._lingered = [], 0, False
        self._last_batch_ops = max(len(batch), self._last_batch_ops - 1)
        await self._slots.acquire()
        stages = BatchStages(self._slots)
        assert self._task_group is not None
        self._task_group.start_soon(self._pipelined, batch, self._previous, stages)
        self._previous = stages

    async def _pipelined(self, batch: list[IndexUpsert], previous: BatchStages | None, stages: BatchStages) -> None:
        try:
            await self._guarded(batch, self._batches.run(batch, previous, stages, self._ensure_index))
        finally:
            for op in batch:
                self._in_flight.remove(op)
            stages.queued.set()
            if previous is not None:
                await previous.applied.wait()
            stages.applied.set()
            if previous is not None:
                await previous.durable.wait()
            stages.durable.set()
            stages.release_slot()

    async def _guarded(self, ops: Sequence[IndexOp], work: Any) -> None:
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

    def _stale(self, op: IndexUpsert, item: UpsertItem) -> bool:
        if op.read_seq is None:
            return False
        changed = max(self._changed_messages.get(item.message_id, -1), self._changed_threads.get(item.thread_id, -1))
        return changed > op.read_seq
    async def _process_command(self, op: IndexCommand) -> None:
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

    async def _run_command(self, op: IndexCommand) -> None:
        vector = self._vector
        if op.kind == "barrier":  # nothing to do: reaching here means every earlier op has finished
            return
        if op.kind == "delete_messages":
            await vector.delete_messages(op.args[0])
        elif op.kind == "delete_thread":
            await vector.delete_thread(op.args[0])
        elif op.kind == "move_thread":
            await vector.move_thread(*op.args)
        elif op.kind == "copy":
            id_map, thread_id, resource_id = op.args
            await self._ensure_index()
            await vector.copy_messages(id_map, thread_id=thread_id, resource_id=resource_id)
        else:  # pragma: no cover - every kind is listed above
            raise ThreadmindError(f"unknown index command {op.kind!r}")
        if self._pending and op.kind != "copy":
            self._pending = await vector.pending_count(self._started_at)

    async def _retry_loop(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Retry pending messages at start, then every ``retry_interval`` seconds with backoff while any remain."""
        with anyio.CancelScope() as scope:
            self._retry_scope = scope
            task_status.started()
            try:
                self._pending = await self._vector.pending_count(self._started_at)
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

