"""The vector store protocol: the layer under the index actor that ``Memory(vector=...)`` accepts.

The index actor owns everything about *making* vectors (chunking, batching callers, the embedder, commit-gated
upserts, pending retries, spans). A vector store owns *keeping and searching* them: where the vectors of one
index live (SQL rows plus an hnswlib cache for :class:`~threadmind.stores.HnswVectorStore`; a pgvector table
for a Postgres store), the scoped top-k query, deletes and moves, catching up with other processes, and
persistence. Every method runs on the event loop; none blocks it.

Call order: :meth:`VectorStore.open` once, :meth:`VectorStore.use_index` once the dimension is known (before
any index operation), then any mix of the operations, then :meth:`VectorStore.close`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt

from .._protocol import SaveHook, Store
from .._vector_records import PendingVector, VectorRecord

__all__ = ("Metric", "RowsForSave", "VectorHit", "VectorStore", "VectorStoreStatistics", "as_vector_store")

Metric = Literal["cosine", "euclidean", "dotproduct"]
F32 = npt.NDArray[np.float32]


class VectorHit(msgspec.Struct, frozen=True):
    """One semantic recall hit: the message and its best chunk's score."""

    message_id: str
    thread_id: str
    resource_id: str
    score: float


class VectorStoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of an opened vector store (zeros where a store has no such thing)."""

    #: Live vectors of the index in use.
    vectors: int = 0
    #: Calls that added vectors to the ANN structure.
    add_items_calls: int = 0
    #: Queries answered exactly (scope scored in full) and by the ANN structure.
    brute_force_queries: int = 0
    ann_queries: int = 0
    #: Queries answered from the stored rows while the in-memory index was still loading.
    sql_queries: int = 0
    #: Index loads from a snapshot, and rebuilds from the stored rows.
    snapshot_loads: int = 0
    rebuilds: int = 0
    #: Snapshots written.
    snapshot_saves: int = 0
    #: Times the index replayed rows that another process committed.
    catch_ups: int = 0
    #: Vectors searchable exactly but not yet in the ANN structure; the most there ever were.
    staged: int = 0
    max_staged: int = 0
    #: Bytes held in memory: the ANN structure (for hnswlib its graph and vectors), staged vectors, scope blocks.
    memory_bytes: int = 0
    #: Of ``memory_bytes``, the ANN library's own share.
    ann_bytes: int = 0
    #: SQL writes of write-behind vector rows (the rows of many batches share one).
    row_writes: int = 0
    #: Exact searches whose scope was read from the stored rows (its block not cached), and the vectors copied
    #: out of the ANN library instead (hnswlib's ``get_items``, ~35 µs per 384-d vector).
    stored_scope_reads: int = 0
    ann_vector_copies: int = 0
    #: Whether the in-memory index is still loading (queries are answered from the stored rows meanwhile).
    loading: bool = False
    #: Whether a snapshot of the index is being written now (in the background, or by ``persist``).
    snapshot_saving: bool = False


@runtime_checkable
class VectorStore(Protocol):
    """What the index actor needs from the place vectors are kept (see the module docstring)."""

    def adopt(self, metric: Metric, m: int, ef_construction: int, ef_search: int) -> None:
        """Take ``semanticRecall.indexConfig``'s values for the parameters the store left at their defaults;
        one given differently on both sides raises ``ConfigError``."""

    async def open(self, store: Store, *, owner: object) -> None:
        """Bind to the message store (create tables); one ``owner`` (index actor) at a time.

        :raises ConfigError: another running owner holds this vector store.
        """

    async def close(self) -> None:
        """Make accepted vectors durable and stop background work, in bounded time whatever the index size."""

    def pending_marker(self) -> SaveHook | None:
        """A hook for a message save's own transaction that marks its messages as awaiting vectors, when the
        vectors live in the message store's database (so write-behind is crash-safe); else None."""

    async def use_index(self, name: str, dimension: int) -> None:
        """Select (load, or start loading) the index ``name`` of ``dimension``; idempotent."""

    async def wait_loaded(self) -> int:
        """Wait until the index selected by :meth:`use_index` is loaded (a store that loads in the background reads
        its snapshot and adds the rows it lacked; queries meanwhile are answered another way); a store that loads
        nothing returns at once, and so does every store once it is closing or its load failed. Returns how many
        vectors the loaded index holds (0 when nothing was loaded)."""

    @property
    def index_name(self) -> str | None:
        """The index in use, None before :meth:`use_index`."""

    def prepare(self, vectors: F32) -> F32:
        """Rows as the index scores them (unit length for cosine): numeric work a caller may do early."""

    def has_message(self, message_id: str) -> bool:
        """Whether the message may have a vector (True when the store cannot tell: deleting nothing is harmless)."""

    def stage(self, records: Sequence[VectorRecord], rows: F32) -> bool:
        """Make ``records`` (their vectors in ``rows``, from :meth:`prepare`) searchable now, replacing each
        message's older vectors; False when the store can search them only once :meth:`write` returned, or when
        other processes query the stored rows (a save is then acknowledged once its rows are committed, so every
        process's next query finds it)."""

    async def write(self, records: Sequence[VectorRecord], *, background: bool = False, staged: bool = True) -> None:
        """Store ``records`` durably (replacing each message's vectors, clearing their pending marks), and
        make them searchable if :meth:`stage` did not (``staged`` False). ``background``: nobody waits for it,
        the write may share a later one."""

    async def query(
        self, vector: F32, *, top_k: int, resource_id: str | None, thread_id: str | None
    ) -> list[VectorHit]:
        """The ``top_k`` messages nearest ``vector`` in the scope (one hit per message, best chunk), best first;
        a hit outside the scope is never returned. Sees every vector committed before it, by any process."""

    async def delete_messages(self, message_ids: Sequence[str]) -> None:
        """Delete the messages' vectors in every index, and their pending marks."""

    async def delete_thread(self, thread_id: str) -> None:
        """Delete every vector and pending mark of a thread."""

    async def move_thread(self, thread_id: str, resource_id: str) -> None:
        """Give the thread's vectors a new resource."""

    async def copy_messages(self, id_map: Mapping[str, str], *, thread_id: str, resource_id: str) -> None:
        """Copy the vectors of ``id_map``'s messages (old → new id) into the given thread, without embedding."""

    async def catch_up(self) -> int:
        """Apply vectors other processes committed since the last look; returns how many changes were applied."""

    async def barrier(self) -> None:
        """Wait until every accepted write is durable."""

    async def flush(self) -> int:
        """Move staged vectors into the ANN structure now; returns how many."""

    async def persist(self) -> bool:
        """Save what a restart needs to start fast (a snapshot), if anything changed; True when saved."""

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        """Record messages whose vectors could not be made."""

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        """Up to ``limit`` pending messages, least attempted first (``before``: skip newer in-flight marks)."""

    async def clear_pending(self, message_ids: Sequence[str]) -> None:
        """Forget pending marks."""

    async def pending_count(self, before: float | None = None) -> int:
        """How many messages are pending."""

    async def message_ids_with_vectors(self) -> set[str]:
        """Ids of the messages that have a vector in the index in use."""

    def statistics(self) -> VectorStoreStatistics:
        """Counters, for tests, benchmarks and operators."""


@runtime_checkable
class RowsForSave(Protocol):
    """A vector store whose rows the message store's save can write in its own statement (``PgVectorStore`` with a
    ``PostgresStore`` of the same database): a save's vectors then commit with its messages, in one round trip."""

    @property
    def rows_go_with_saves(self) -> bool:
        """Whether the message store it was opened with writes its rows in its saves (checked before embedding)."""

    def rows_for_save(self, records: Sequence[VectorRecord]) -> object | None:
        """What the message store's ``save_messages_with_vectors`` writes for ``records``; None when this store
        cannot have its rows written so (then they are written apart)."""


def as_vector_store(value: Any) -> VectorStore:
    """``value`` if it implements :class:`VectorStore`, else ``ConfigError`` naming what is missing."""
    from ...errors import ConfigError

    missing = [name for name in _REQUIRED if not callable(getattr(value, name, None))]
    if missing:
        raise ConfigError(f"`vector` must be a vector store; {type(value).__name__} lacks {', '.join(missing)}")
    return value  # type: ignore[no-any-return]


_REQUIRED = (
    "open", "close", "use_index", "wait_loaded", "prepare", "stage", "write", "query", "delete_messages",
    "delete_thread", "move_thread", "copy_messages", "catch_up", "barrier", "flush", "persist", "statistics",
)
