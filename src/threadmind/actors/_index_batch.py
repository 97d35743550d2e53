"""One upsert batch of the index actor: embed the callers' texts, stage the vectors, write the rows.

A batch holds the upserts of several callers. Its texts go to the embedder in one call (cached texts
skipped); when that call fails, each text is retried alone, so only callers whose own texts fail get the
``EmbedderError`` and their messages are recorded as pending. Commit-gated upserts embed while their save
commits and are staged only once it committed; the latest stored version of each message wins.

Write-behind: vectors are staged first (searchable at once), callers are answered, and the rows are written
after; each message's pending mark was written with the message itself, so a crash in between is repaired
at the next start. Batches run pipelined; ``BatchStages`` keep their stagings and SQL writes in batch order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import numpy.typing as npt
from opentelemetry import trace

from ..codecs._time import to_iso
from ..embedders import Embedder
from ..embedders._cache import EmbeddingCache
from ..errors import EmbedderError, EmbeddingDimensionMismatch
from ..stores import PendingVector, VectorRecord, VectorStore
from ..stores._vectors._contract import RowsForSave
from ..tracing import ATTR_OPERATION, tracing_enabled
from ._index_ops import BatchStages, IndexUpsert, PreparedVectors, UpsertItem
from ._shared_embeds import SharedEmbedCalls

__all__ = ("UpsertBatches",)

logger = logging.getLogger("threadmind.index")
F32 = npt.NDArray[np.float32]


class UpsertBatches:
    """Runs upsert batches against a vector store (see the module docstring)."""

    def __init__(
        self, *, vector: VectorStore, embedder: Embedder, cache: EmbeddingCache,
        dimension: Callable[[], int | None], is_stale: Callable[[IndexUpsert, UpsertItem], bool],
    ) -> None:
        self._vector = vector
        self._embedder = embedder
        self._cache = cache
        self._dimension = dimension
        self._is_stale = is_stale
        self.batches = 0
        self.embed_calls = 0
        self._shared = SharedEmbedCalls(self.embed)  # for saves that embed before they commit
        #: Awaited after a batch recorded pending messages (True) or stored vectors that may clear some (False).
        self.on_pending: Callable[[bool], Awaitable[None]] | None = None

    async def embed(self, texts: list[str]) -> tuple[F32, int]:
        """One embedder call, validated; any failure becomes ``EmbedderError`` (cause chained)."""
        dim = self._dimension()
        self.embed_calls += 1
        try:
            result = await self._embedder.embed(texts)
        except Exception as exc:
            raise EmbedderError(f"the embedder {self._embedder.model_id!r} failed: {exc}") from exc
        vectors = np.asarray(result.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EmbedderError(f"the embedder returned {vectors.shape[0] if vectors.ndim else 0} vectors "
                                f"for {len(texts)} texts")
        if dim is not None and vectors.shape[1] != dim:
            raise EmbeddingDimensionMismatch(dim, int(vectors.shape[1]))
        if not np.isfinite(vectors).all():
            raise EmbedderError("the embedder returned non-finite values")
        return vectors, int(result.usage_tokens)

    async def run(self, ops: list[IndexUpsert], previous: BatchStages | None, stages: BatchStages | None,
                  ready: Callable[[], Awaitable[object]]) -> None:
        """Process one batch; ``ready()`` makes sure the index is selected (it may raise)."""
        self.batches += 1
        if not tracing_enabled():  # no SDK: skip even the no-op span on this per-batch path
            await self._process(ops, previous, stages, ready)
            return
        links = [op.link for op in ops if op.link is not None]
        tracer = trace.get_tracer("threadmind")
        attributes: dict[str, str | int] = {ATTR_OPERATION: "embeddings", "threadmind.batch.size": len(ops)}
        # Shared work: linked to every caller, and a child of the first so it is never a new root.
        parent = trace.set_span_in_context(trace.NonRecordingSpan(links[0].context)) if links else None
        with tracer.start_as_current_span("threadmind.index.batch", context=parent, links=links,
                                          attributes=attributes):
            await self._process(ops, previous, stages, ready)

    async def _process(self, ops: list[IndexUpsert], previous: BatchStages | None, stages: BatchStages | None,
                       ready: Callable[[], Awaitable[object]]) -> None:
        try:
            await ready()
        except Exception as exc:
            await self._await_commits(ops)
            for op in ops:
                op.error = exc
            await self.add_pending([(i, exc) for op in ops if _committed(op) for i in op.items if i.chunks])
            return
        await self._apply(ops, previous, stages)

    @staticmethod
    async def _await_commits(ops: Sequence[IndexUpsert]) -> None:
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

    async def _apply(self, ops: list[IndexUpsert], previous: BatchStages | None, stages: BatchStages | None) -> None:
        vector = self._vector
        # Embed while gated ops' saves commit; then the latest stored version of each message wins, and
        # stale store reads and failed saves are dropped.
        gated = any(op.gate is not None for op in ops)
        prepared: PreparedVectors | None = None
        if gated:
            vectors, usage, failures = await self.embed_texts([c for op in ops for i in op.items for c in i.chunks])
            prepared = PreparedVectors(vector, vectors) if vectors else None
            await self._await_commits(ops)
        latest: dict[str, tuple[IndexUpsert, UpsertItem]] = {}
        for op in ops:
            if not _committed(op):
                continue
            for item in op.items:
                if not self._is_stale(op, item):
                    latest.pop(item.message_id, None)
                    latest[item.message_id] = (op, item)
        if not gated:
            vectors, usage, failures = await self.embed_texts([c for _, item in latest.values() for c in item.chunks])
            prepared = PreparedVectors(vector, vectors) if vectors else None
        records: list[VectorRecord] = []
        positions: list[int] = []
        cleared: list[str] = []
        failed: list[tuple[UpsertItem, BaseException]] = []
        owners: list[IndexUpsert] = []
        for op, item in latest.values():
            if not item.chunks:
                if vector.has_message(item.message_id):
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
                position = prepared.position[chunk]
                positions.append(position)
                records.append(VectorRecord(
                    vector_id=item.message_id if single else f"{item.message_id}#{i}", message_id=item.message_id,
                    thread_id=item.thread_id, resource_id=item.resource_id, role=item.role,
                    created_at=item.created_at, embedding=prepared.raw[position],
                ))
                op.usage += usage.get(chunk, 0.0)
            op.vectors += len(item.chunks)
            owners.append(op)
        staged = True
        if records:
            assert prepared is not None
            if previous is not None:  # vectors are applied in batch order
                await previous.applied.wait()
            staged = vector.stage(records, prepared.rows(positions))
            if stages is not None and not cleared:
                stages.applied.set()  # the next batch may stage now, before this one's rows are durable
            if staged:
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
                background = staged and all(op.read_seq is None for op in owners)
                if background and stages is not None and not cleared:
                    stages.release_slot()  # the buffered write must not hold the next batches back
                await vector.write(records, background=background, staged=staged)
            except Exception as exc:
                logger.exception("vectors stay in memory but could not be stored; they are pending")
                failed.extend((item, exc) for _, item in latest.values() if item.chunks)
                await self.add_pending(failed)
                return
        if cleared:
            if previous is not None:
                await previous.applied.wait()
            await vector.delete_messages(cleared)
            if stages is not None:
                stages.queued.set()
        if failed:
            await self.add_pending(failed)
        elif records and self.on_pending is not None:
            await self.on_pending(False)

    async def rows_for_save(self, op: IndexUpsert, vector: RowsForSave) -> object | None:
        """What the save of ``op`` writes itself (``vector.rows_for_save``): what this batch path would have written,
        one row per chunk of each message's last text, the embedder's values; the usage tokens on ``op``. None
        when any text could not be embedded (the batch path then retries and marks them) or the store declines."""
        latest = {item.message_id: item for item in op.items}
        vectors, usage, failures = await self.embed_texts([c for item in latest.values() for c in item.chunks],
                                                          shared=True)
        if failures:
            return None
        records: list[VectorRecord] = []
        chunks: list[str] = []
        for item in latest.values():
            single = len(item.chunks) == 1
            for i, chunk in enumerate(item.chunks):
                chunks.append(chunk)
                records.append(VectorRecord(
                    vector_id=item.message_id if single else f"{item.message_id}#{i}", message_id=item.message_id,
                    thread_id=item.thread_id, resource_id=item.resource_id, role=item.role,
                    created_at=item.created_at, embedding=vectors[chunk].astype("<f4").tobytes()))
        rows = vector.rows_for_save(records)
        if rows is not None:
            op.usage = sum(usage.get(c, 0.0) for c in chunks)
            op.vectors = len(records)
        return rows

    async def embed_texts(
        self, chunks: list[str], *, shared: bool = False
    ) -> tuple[dict[str, F32], dict[str, float], dict[str, BaseException]]:
        """Vectors for ``chunks`` (cache first, then one call, ``shared`` with concurrent saves' texts
        (:mod:`._shared_embeds`); per-text retry when that call fails)."""
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
            got, tokens = await self.embed(texts)
            total = sum(len(t) for t in texts) or 1
            for text, vector in zip(texts, got, strict=True):
                vectors[text] = vector
                usage[text] = tokens * len(text) / total
                self._cache.put(model, text, vector)

        if need:
            try:
                if shared:
                    got, shares = await self._shared.embed(need)
                    for text in need:
                        vectors[text] = got[text]
                        usage[text] = shares[text]
                        self._cache.put(model, text, got[text])
                else:
                    await _one_call(need)
            except (EmbedderError, EmbeddingDimensionMismatch) as exc:
                if len(need) == 1 and not shared:  # (a shared call may have failed for another caller's text)
                    failures[need[0]] = exc
                else:
                    for text in need:
                        try:
                            await _one_call([text])
                        except (EmbedderError, EmbeddingDimensionMismatch) as one:
                            failures[text] = one
        return vectors, usage, failures

    async def add_pending(self, failed: Sequence[tuple[UpsertItem, BaseException]]) -> None:
        if not failed:
            return
        try:
            await self._vector.add_pending(
                [PendingVector(message_id=i.message_id, thread_id=i.thread_id, resource_id=i.resource_id)
                 for i, _ in failed],
                str(failed[0][1])[:500],
            )
        except Exception:
            logger.exception("could not record %d messages as pending", len(failed))
            return
        if self.on_pending is not None:
            await self.on_pending(True)


def _committed(op: IndexUpsert) -> bool:
    """Whether the op's messages are stored: ungated ops always, gated ops once their save committed."""
    return op.gate is None or op.committed is not None
