"""The index actor's commands: upserts (plain or commit-gated), index commands, and the batch pipeline's stages.

Each command carries its own reply slot (``done``/``error``) and the caller's span context, so a batch
shared by several callers can link to each of them (SPEC §8) and a failure can reach each caller apart.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import msgspec
import numpy as np
import numpy.typing as npt
from opentelemetry import trace
from opentelemetry.trace import Link

from .._lowlevel import FastEvent
from ..codecs import Message
from ..errors import ConfigError, EmbedderError, EmbeddingDimensionMismatch
from ..tracing import tracing_enabled

if TYPE_CHECKING:
    from ..stores import VectorStore
    from ._index_actor import IndexActor

__all__ = ("BatchStages", "CommitGatedUpsert", "InFlight", "IndexCommand", "IndexOp", "IndexUpsert",
           "PreparedVectors", "UpsertItem", "fresh_error")

F32 = npt.NDArray[np.float32]

# Per-operation events are asyncio's: an anyio Event costs a backend lookup per creation (~3 µs) and a
# checkpoint per wait (~7 µs), several times per save. threadmind runs on anyio's asyncio backend (the store
# and the actors park callers on asyncio futures too).
_Event = FastEvent

_NATIVE_LE = sys.byteorder == "little"


class UpsertItem(msgspec.Struct, kw_only=True):
    """One message to index: its scope and its chunks (empty: the message has no text any more)."""

    message_id: str
    thread_id: str
    resource_id: str
    role: str
    created_at: str
    chunks: list[str]


class PreparedVectors:
    """A batch's vectors in the forms they are stored in: rows for the index, little-endian bytes for SQL.

    Built as soon as the batch is embedded, so that for gated saves the numeric work runs while the saves
    commit, and what is left once they have committed is bookkeeping.
    """

    __slots__ = ("position", "raw", "unit")

    def __init__(self, vector: VectorStore, vectors: Mapping[str, F32]) -> None:
        self.position = {chunk: i for i, chunk in enumerate(vectors)}
        matrix = np.asarray(np.stack(list(vectors.values())), dtype=np.float32)
        self.unit = vector.prepare(matrix)
        blob = matrix.tobytes() if _NATIVE_LE else matrix.astype("<f4").tobytes()
        stride = matrix.shape[1] * 4
        self.raw = [blob[i * stride:(i + 1) * stride] for i in range(len(matrix))]

    def rows(self, positions: list[int]) -> F32:
        """The index rows at ``positions`` (the whole matrix when they are all of it, in order)."""
        if positions == list(range(len(self.raw))):
            return self.unit
        return self.unit[positions]


class IndexOp:
    """A queued command with a reply slot and the caller's span context (for batch span links)."""

    __slots__ = ("done", "error", "link")

    def __init__(self) -> None:
        self.done = _Event()
        self.error: BaseException | None = None
        self.link: Link | None = None
        if tracing_enabled():
            context = trace.get_current_span().get_span_context()
            self.link = Link(context) if context.is_valid else None


class IndexUpsert(IndexOp):
    """Embed and index some messages (batched with the upserts queued next to it)."""

    __slots__ = ("committed", "created", "gate", "items", "read_seq", "usage", "vectors")

    def __init__(self, items: list[UpsertItem], read_seq: int | None = None, *, gated: bool = False) -> None:
        super().__init__()
        self.items = items
        self.read_seq = read_seq  # set when the items were read from the store (retry, reindex)
        self.usage = 0.0
        self.vectors = 0
        # Gated: queued as its messages' save starts; staged only once ``gate`` is set with the save's outcome.
        self.gate: FastEvent | None = _Event() if gated else None
        self.committed: Sequence[Message] | None = None
        self.created: list[datetime] = []  # gated: each item's created_at as given to the save

    @property
    def n_texts(self) -> int:
        return sum(len(i.chunks) for i in self.items) or 1


class IndexCommand(IndexOp):
    """A delete, move, copy or barrier, run after every upsert queued before it."""

    __slots__ = ("args", "kind")

    def __init__(self, kind: str, *args: Any) -> None:
        super().__init__()
        self.kind = kind
        self.args = args


class BatchStages:
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


def fresh_error(error: BaseException) -> BaseException:
    """A new exception object per caller (one failure may reach many tasks), keeping the cause."""
    if type(error) is EmbedderError:
        copy: BaseException = EmbedderError(error.message, code=error.code)
    elif isinstance(error, EmbeddingDimensionMismatch):
        copy = EmbeddingDimensionMismatch(error.expected, error.actual)
    else:
        return error
    copy.__cause__ = error.__cause__
    return copy


class InFlight:
    """The messages of upserts queued or being processed, counted (a message may be in several)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def add(self, op: IndexUpsert) -> None:
        for item in op.items:
            self._counts[item.message_id] = self._counts.get(item.message_id, 0) + 1

    def remove(self, op: IndexUpsert) -> None:
        counts = self._counts
        for item in op.items:
            left = counts.get(item.message_id, 0) - 1
            if left > 0:
                counts[item.message_id] = left
            else:
                counts.pop(item.message_id, None)

    def holds(self, op: IndexUpsert) -> bool:
        """Whether any of ``op``'s messages is in an upsert queued or running."""
        return any(item.message_id in self._counts for item in op.items)


class CommitGatedUpsert:
    """Indexes one save while it commits: the thread actor queues it as the save starts and reports the outcome.

    The embedding (batched with other callers') overlaps the commit; the vectors are staged only after the
    commit succeeded, so a hit never names a message that is not durable, and a failed save leaves no vector.
    Queued in the thread's commit order, so a message re-saved twice ends with the text stored last.

    Where the message store can write the vectors in the save's own statement (:meth:`prepare` found rows, see
    ``IndexActor.rows_for_save``), they commit with the messages instead: nothing is queued, and the save returns
    with its vectors queryable in every process.
    """

    __slots__ = ("_actor", "_inline", "_op", "_queued", "_rows")

    def __init__(self, actor: IndexActor, op: IndexUpsert) -> None:
        self._actor = actor
        self._op = op
        self._queued = False
        self._rows: object | None = None
        self._inline = False

    async def prepare(self) -> None:
        """(caller, before asking for the save) Embed now if the save can write the vectors itself. Never raises:
        an embedder failure leaves the upsert to the batch path, which retries it and marks the messages."""
        try:
            self._rows = await self._actor.rows_for_save(self._op)
        except Exception:  # the batch path meets the same failure and reports it
            self._rows = None

    async def started(self) -> object | None:
        """(thread actor) The save is about to commit: the vector rows it writes itself, or None once the upsert is
        queued (or the index is closed). Never raises; errors reach ``result``."""
        if self._rows is not None and self._actor.claim_for_save(self._op):
            self._inline = True
            return self._rows
        try:
            await self._actor.submit(self._op)
        except ConfigError as exc:  # the index closed: the save still commits, its marks make it pending
            self._op.error = exc
            return None
        self._queued = True
        return None

    def finished(self, saved: Sequence[Message] | None) -> None:
        """(thread actor) The save committed (``saved``), or failed or ended unknown (None: index nothing)."""
        self._op.committed = saved
        if self._inline:
            self._op.done.set()
            return
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
            raise fresh_error(self._op.error)
        return round(self._op.usage)
