"""Test doubles for the vector tests: a SQL-job store over a real SQLite file, and a controllable embedder."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from threadmind.codecs import Message, Thread
from threadmind.embedders._hash import HashEmbedder
from threadmind.embedders._protocol import Embeddings
from threadmind.stores._protocol import MessagePage, MessageQuery, ThreadPage

T = TypeVar("T")

WORDS = (
    "agent memory thread resource message search vector index query result context window token budget model "
    "prompt user assistant system tool call return value error retry timeout cache store table column row schema "
    "travel flight hotel booking paris london tokyo berlin monday tuesday friday weekend morning evening today "
    "project deadline meeting report invoice expense team manager recipe dinner coffee garden music movie book"
).split()
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


class JobStore:
    """The slice of ``SQLiteStore`` the vector layer uses (SQL jobs on one DB thread) plus message lookups.

    Messages live in a dict (shared across "restarts" by passing ``messages``); SQL is a real file.
    """

    def __init__(self, path: Path, messages: dict[str, Message] | None = None) -> None:
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._limiter = anyio.CapacityLimiter(1)
        self.messages: dict[str, Message] = {} if messages is None else messages
        self.writes = 0

    def close(self) -> None:
        self._conn.close()

    async def execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def _job() -> T:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return result

        self.writes += 1
        return await anyio.to_thread.run_sync(_job, limiter=self._limiter)

    async def execute_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(fn, self._conn, limiter=self._limiter)

    def add(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.messages[message.id] = message

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        await anyio.lowlevel.checkpoint()
        return [self.messages[i] for i in ids if i in self.messages]

    async def list_threads(self, **_: Any) -> ThreadPage:
        await anyio.lowlevel.checkpoint()
        ids = sorted({(m.thread_id or "", m.resource_id or "") for m in self.messages.values()})
        threads = [Thread(id=t, resource_id=r, created_at=EPOCH, updated_at=EPOCH) for t, r in ids]
        return ThreadPage(threads=threads, total=len(threads), page=0, per_page=False, has_more=False)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        await anyio.lowlevel.checkpoint()
        found = [m for m in self.messages.values() if m.thread_id == query.thread_id]
        return MessagePage(messages=found, total=len(found), page=0, per_page=False, has_more=False)


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
