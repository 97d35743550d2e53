"""Coalesced write-behind for vector rows: many staged batches, one SQL write.

A semantic save returns once its vectors are searchable in memory; the vector rows follow later, and the
pending mark written with each message makes that crash-safe (the retry at the next start re-embeds what
was lost). Writing each batch's rows on its own costs a large share of every group commit under load: the
rows of ~16 saves touch ~60 random index leaves, and a later batch touches most of them again. This wrapper
keeps background upserts in one buffer and writes it as one upsert when it holds ``max_records`` rows, when
its first rows have waited ``max_delay`` seconds, or before any other call (a delete must never be
overtaken by an older upsert, and a read must see every accepted row).
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from opentelemetry import trace
from opentelemetry.trace import Link

from ..._lowlevel import FastEvent
from ...errors import StorageError
from ...tracing import ATTR_OPERATION, tracing_enabled
from .._vector_records import PendingVector, VectorRecord, VectorRecords

__all__ = ("CoalescingRecords",)


class _Buffer:
    """Background rows of one index waiting to be written, and the outcome their callers wait for."""

    __slots__ = ("by_message", "count", "done", "error", "index_name", "links", "ready", "seq", "taken")

    def __init__(self, index_name: str) -> None:
        self.index_name = index_name
        self.links: list[Link] = []  # the spans of the batches whose rows it holds (with an SDK installed)
        self.by_message: dict[str, list[VectorRecord]] = {}
        self.count = 0
        self.ready = FastEvent()  # set when the buffer should be written without waiting any longer
        self.done = FastEvent()
        self.taken = False
        self.seq = 0
        self.error: BaseException | None = None

    def add(self, records: Sequence[VectorRecord]) -> None:
        """A later batch's rows for a message replace the earlier batch's (an upsert replaces them all)."""
        fresh: dict[str, list[VectorRecord]] = {}
        for record in records:
            fresh.setdefault(record.message_id, []).append(record)
        for message_id, rows in fresh.items():
            old = self.by_message.pop(message_id, None)
            if old is not None:
                self.count -= len(old)
            self.by_message[message_id] = rows
            self.count += len(rows)

    def records(self) -> list[VectorRecord]:
        return [record for rows in self.by_message.values() for record in rows]


class CoalescingRecords:
    """A :class:`VectorRecords` whose background upserts share one write (see the module docstring).

    Writes through it happen one after another in call order, so the store sees them in the order the index
    actor made them. Every method other than a background upsert first writes the buffer and waits for it.
    """

    def __init__(self, inner: VectorRecords, *, max_records: int = 512, max_delay: float = 0.025) -> None:
        self.inner = inner
        self._max_records = max_records
        self._max_delay = max_delay
        self._buffer: _Buffer | None = None
        self._last: _Buffer | None = None  # the latest buffer taken for writing
        self.writes = 0  # buffer writes, for statistics and tests

    # -- the buffer ---------------------------------------------------------------------------------------------

    async def upsert(self, index_name: str, records: Sequence[VectorRecord], *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        """Background rows join the buffer and return once it is written; others are written at once, after it
        (``written``, ``stored_only``, ``fresh_only``: see :meth:`VectorRecords.upsert`; for those only)."""
        if not background:
            await self.flush()
            return await self.inner.upsert(index_name, records, written=written, stored_only=stored_only,
                                           fresh_only=fresh_only)
        buffer = self._buffer
        while buffer is not None and buffer.index_name != index_name:  # rows of another index: write those first
            await self._write(buffer, background=False)
            buffer = self._buffer
        leader = buffer is None
        if buffer is None:
            buffer = self._buffer = _Buffer(index_name)
        buffer.add(records)
        if tracing_enabled():
            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                buffer.links.append(Link(context))
        if buffer.count >= self._max_records:
            buffer.ready.set()
        if leader:
            # The first caller waits for more rows, then writes them all. Shielded: later callers depend on it.
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self._max_delay):
                    await buffer.ready.wait()
                await self._write(buffer, background=True)
        else:
            await buffer.done.wait()
        if buffer.error is not None:
            raise buffer.error
        return buffer.seq

    async def flush(self) -> None:
        """Write the buffered rows now and wait until they, and every earlier write, are stored."""
        buffer = self._buffer
        if buffer is not None:
            await self._write(buffer, background=False)
        last = self._last
        if last is not None:
            await last.done.wait()

    async def _write(self, buffer: _Buffer, *, background: bool) -> None:
        """Write ``buffer`` once (whoever comes first), after the buffer taken before it."""
        if buffer.taken:
            await buffer.done.wait()
            return
        buffer.taken = True
        buffer.ready.set()  # its first caller stops waiting for more rows
        if self._buffer is buffer:
            self._buffer = None
        previous, self._last = self._last, buffer
        try:
            with anyio.CancelScope(shield=True):  # callers of every batch in it wait for this outcome
                if previous is not None:
                    await previous.done.wait()
                self.writes += 1
                if buffer.links:
                    # Shared by the batches whose rows it holds, whoever writes it (the index's own task, say):
                    # linked to each and a child of the first, so it is never a new root (SPEC §8).
                    links = buffer.links
                    parent = trace.set_span_in_context(trace.NonRecordingSpan(links[0].context))
                    with trace.get_tracer("threadmind").start_as_current_span(
                        "threadmind.index.write_behind", context=parent, links=links,
                        attributes={ATTR_OPERATION: "upsert_memory", "threadmind.vectors.count": buffer.count},
                    ):
                        buffer.seq = await self.inner.upsert(buffer.index_name, buffer.records(),
                                                             background=background)
                else:
                    buffer.seq = await self.inner.upsert(buffer.index_name, buffer.records(), background=background)
        except Exception as exc:
            buffer.error = exc
        except BaseException:  # interrupted: the callers must not take the rows for written
            buffer.error = StorageError("the write of buffered vector rows was interrupted")
            raise
        finally:
            buffer.done.set()

    # -- everything else: after the buffer --------------------------------------------------------------------

    async def delete_by_message_ids(self, index_name: str | None, ids: Sequence[str]) -> int:
        await self.flush()
        return await self.inner.delete_by_message_ids(index_name, ids)

    async def delete_by_thread(self, thread_id: str) -> int:
        await self.flush()
        return await self.inner.delete_by_thread(thread_id)

    async def move_thread(self, thread_id: str, resource_id: str, *, written: list[str] | None = None) -> int:
        await self.flush()
        return await self.inner.move_thread(thread_id, resource_id, written=written)

    async def load(self, index_name: str, since_seq: int = 0) -> tuple[list[VectorRecord], list[str], int]:
        await self.flush()
        return await self.inner.load(index_name, since_seq)

    async def records_for_messages(self, index_name: str, ids: Sequence[str]) -> list[VectorRecord]:
        await self.flush()
        return await self.inner.records_for_messages(index_name, ids)

    async def prune_tombstones(self, index_name: str, upto_seq: int) -> None:
        await self.flush()
        await self.inner.prune_tombstones(index_name, upto_seq)

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        await self.flush()
        await self.inner.add_pending(items, error)

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        await self.flush()
        return await self.inner.take_pending(limit, before)

    async def clear_pending(self, ids: Sequence[str]) -> None:
        await self.flush()
        await self.inner.clear_pending(ids)

    async def pending_count(self, before: float | None = None) -> int:
        await self.flush()
        return await self.inner.pending_count(before)

    async def message_ids_with_vectors(self, index_name: str) -> set[str]:
        await self.flush()
        return await self.inner.message_ids_with_vectors(index_name)

    async def scope_records(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> list[VectorRecord]:
        await self.flush()
        return await self.inner.scope_records(index_name, resource_id=resource_id, thread_id=thread_id)

    async def scope_embeddings(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> dict[str, bytes]:
        await self.flush()
        return await self.inner.scope_embeddings(index_name, resource_id=resource_id, thread_id=thread_id)

    async def load_page(self, index_name: str, after: int, limit: int) -> tuple[list[VectorRecord], int]:
        await self.flush()
        return await self.inner.load_page(index_name, after, limit)

    async def sequence(self, index_name: str) -> tuple[int, int]:
        await self.flush()
        return await self.inner.sequence(index_name)

    async def size_hint(self, index_name: str) -> int:
        return await self.inner.size_hint(index_name)

    async def load_changes(
        self, index_name: str, since_seq: int, after: tuple[int, int], limit: int, until_seq: int | None = None
    ) -> tuple[list[VectorRecord], tuple[int, int]]:
        await self.flush()
        return await self.inner.load_changes(index_name, since_seq, after, limit, until_seq)

    async def deleted_since(self, index_name: str, since_seq: int) -> list[str]:
        await self.flush()
        return await self.inner.deleted_since(index_name, since_seq)
