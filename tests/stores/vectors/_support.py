"""Helpers for the vector tests: a controllable embedder, message factories, exact brute-force top-k."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from threadmind.codecs import Message, Thread
from threadmind.embedders._hash import HashEmbedder
from threadmind.embedders._protocol import Embeddings
from threadmind.stores import HnswVectorStore, PgVectorStore
from threadmind.stores._protocol import Store
from threadmind.stores._vectors._contract import VectorStore, VectorStoreStatistics

WORDS = (
    "agent memory thread resource message search vector index query result context window token budget model "
    "prompt user assistant system tool call return value error retry timeout cache store table column row schema "
    "travel flight hotel booking paris london tokyo berlin monday tuesday friday weekend morning evening today "
    "project deadline meeting report invoice expense team manager recipe dinner coffee garden music movie book"
).split()
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


async def persist(store: Store, messages: Sequence[Message]) -> None:
    """Save messages through the store (creating their threads), as Memory does before indexing."""
    by_thread: dict[str, list[Message]] = {}
    for message in messages:
        by_thread.setdefault(message.thread_id or "", []).append(message)
    for thread_id, group in by_thread.items():
        if await store.get_thread(thread_id) is None:
            await store.create_thread(Thread(id=thread_id, resource_id=group[0].resource_id or ""))
        await store.save_messages(thread_id, group)


class FlakyEmbedder:
    """HashEmbedder behind switches: fail everything, fail batches holding a poisoned text, hold calls."""

    def __init__(self, dim: int = 32, *, known_dimension: bool = True) -> None:
        self.inner = HashEmbedder(dim=dim)
        self.known_dimension = known_dimension
        self.fail = False
        self.empty = False
        self.poison: set[str] = set()
        self.calls: list[list[str]] = []
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()

    @property
    def model_id(self) -> str:
        return "flaky-hash"

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension if self.known_dimension else None

    async def embed(self, texts: list[str]) -> Embeddings:
        self.calls.append(list(texts))
        self.entered.set()
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        if self.fail or self.poison.intersection(texts):
            raise RuntimeError("embedding service unavailable")
        if self.empty:
            return Embeddings(vectors=np.zeros((0, 0), dtype=np.float32))
        return await self.inner.embed(texts)

    def vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.inner.embed_sync(list(texts)).vectors


def random_text(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + f" {rng.random():.12f}"


def make_message(message_id: str, thread_id: str, resource_id: str, text: str, n: int = 0) -> Message:
    return Message.user(
        text, id=message_id, thread_id=thread_id, resource_id=resource_id, created_at=EPOCH + timedelta(seconds=n)
    )


def exact_top_k(
    query: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32], ids: Sequence[str], k: int
) -> list[tuple[str, float]]:
    """Cosine top-k by brute force (one vector per id)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-30)
    q = query / max(float(np.linalg.norm(query)), 1e-30)
    scores = unit @ q
    order = np.argsort(-scores, kind="stable")[:k]
    return [(ids[i], float(scores[i])) for i in order]


VectorFactory = Callable[..., VectorStore]


async def vector_count(vector: VectorStore, statistics: VectorStoreStatistics) -> int:
    """Live vectors of the index in use: hnswlib's count, or the rows of a PgVectorStore's table."""
    if isinstance(vector, PgVectorStore):
        import asyncpg

        name = vector.index_name
        if name is None:
            return 0
        conn = await asyncpg.connect(vector.dsn)
        try:
            return int(await conn.fetchval(f'SELECT count(*) FROM "{name}"'))
        finally:
            await conn.close()
    return statistics.vectors


@pytest.fixture(params=[pytest.param("hnsw", id="hnsw"), pytest.param("pgvector", id="pgvector")])
def vector_kind(request: pytest.FixtureRequest) -> str:
    """The vector store a test runs over: hnswlib over SQL rows, or pgvector in a real PostgreSQL."""
    return str(request.param)


@pytest.fixture
def make_vector(request: pytest.FixtureRequest, vector_kind: str) -> VectorFactory:
    """Fresh vector stores of the parametrized kind; every PgVectorStore of a test shares one fresh database (what
    an HnswVectorStore keeps at ``path``, a PgVectorStore keeps in that database)."""
    if vector_kind == "hnsw":
        def _hnsw(path: Path | None = None, **_: Any) -> HnswVectorStore:
            return HnswVectorStore(path)

        return _hnsw
    dsn = request.getfixturevalue("pg_dsn")

    def _pg(path: Path | None = None, *, exact_limit: int = 4096) -> PgVectorStore:
        return PgVectorStore(dsn, exact_limit=exact_limit, build_hnsw="at_start")

    return _pg


async def vector_rows(vector: VectorStore, store: Store,
                      columns: str = "message_id, thread_id") -> list[tuple[Any, ...]]:
    """Stored vector rows ordered by message id: ``threadmind_vectors`` of the message store (hnswlib's source of
    truth), or the pgvector table's metadata; ``columns`` among message_id, thread_id, resource_id, created_at."""
    names = [c.strip() for c in columns.split(",")]
    if isinstance(vector, PgVectorStore):
        import asyncpg

        fields = ", ".join(f"metadata->>'{n}'" for n in names)
        conn = await asyncpg.connect(vector.dsn)
        try:
            rows = await conn.fetch(f'SELECT {fields} FROM "{vector.index_name}" ORDER BY 1')
        finally:
            await conn.close()
        return [tuple(r) for r in rows]
    records = await store.vector_records().scope_records(vector.index_name or "", resource_id=None, thread_id=None)
    return sorted(tuple(getattr(r, n) for n in names) for r in records)
