"""Semantic recall against a model, over random sequences of every write ``Memory`` takes (saves, re-saves,
updates, deletions, threads deleted, moved and cloned) made through two ``Memory`` objects on one database, as two
worker processes would make them: after each write, ``search_vectors`` through either answers what an exact search
of the stored messages' vectors answers, within the scope asked for."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.embedders._chunking import message_text
from threadmind.stores import HnswVectorStore, InMemoryStore, PgVectorStore, PostgresStore, SQLiteStore

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = "dog cat harbour marathon parrot violin river coffee novel chess garden bakery sunrise museum".split()
RESOURCES = ("r1", "r2", "r3")
TOP = 4


@pytest.fixture(params=["sqlite", "memory", "postgres", "postgres-hnsw"])
async def memories(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Memory, Memory]]:
    """Two Memory objects on one database, each with its own index (one Memory in memory: nothing to share)."""
    options = {"semanticRecall": {"scope": "resource"}}
    if request.param == "memory":
        async with Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=32),
                          options=options) as only:
            yield only, only
        return
    make: Any
    if request.param == "sqlite":
        def make(name: str) -> Memory:
            return Memory(storage=SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL"),
                          vector=HnswVectorStore(tmp_path / name), embedder=HashEmbedder(dim=32), options=options)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        hnsw = request.param == "postgres-hnsw"  # hnswlib indexes, one per Memory, over the vector rows in PostgreSQL

        def make(name: str) -> Memory:
            vector = HnswVectorStore(tmp_path / name) if hnsw else PgVectorStore(dsn)
            return Memory(storage=PostgresStore(dsn, max_size=2), vector=vector, embedder=HashEmbedder(dim=32),
                          options=options)
    async with make("a") as one, make("b") as two:
        yield one, two


class _Run:
    def __init__(self, seed: int, memories: tuple[Memory, Memory]) -> None:
        self.rng = random.Random(seed)
        self.memories = memories
        self.threads: dict[str, str] = {}
        self.messages: dict[str, str] = {}  # message -> thread
        self.clock = 0
        self.embedder = HashEmbedder(dim=32)

    def memory(self) -> Memory:
        return self.rng.choice(self.memories)

    def say(self, message_id: str, thread: str) -> Message:
        self.clock += 1
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(2, 7))) + f" {self.clock}"
        return Message.user(text, id=message_id, thread_id=thread, resource_id=self.threads[thread],
                            created_at=BASE + timedelta(seconds=self.clock))

    async def write(self) -> str:
        rng = self.rng
        kind = rng.choice(["create", "save", "save", "save", "resave", "update", "delete", "delete_thread", "move",
                           "clone"])
        if kind == "create" or not self.threads:
            thread = f"t{len(self.threads)}-{rng.randrange(10**6)}"
            self.threads[thread] = rng.choice(RESOURCES)
            await self.memory().create_thread(thread_id=thread, resource_id=self.threads[thread])
            return "create"
        if kind == "save":
            thread = rng.choice(list(self.threads))
            batch = [self.say(f"m{self.clock}-{i}", thread) for i in range(rng.randint(1, 3))]
            await self.memory().save_messages(batch)
            self.messages.update((m.id, thread) for m in batch)
        elif kind == "resave" and self.messages:
            message_id = rng.choice(list(self.messages))
            await self.memory().save_messages([self.say(message_id, self.messages[message_id])])
        elif kind == "update" and self.messages:
            message_id = rng.choice(list(self.messages))
            fresh = self.say("unused", self.messages[message_id]).text
            await self.memory().update_messages([{"id": message_id, "content": {"content": fresh}}])
        elif kind == "delete" and self.messages:
            gone = rng.sample(list(self.messages), min(len(self.messages), rng.randint(1, 2)))
            await self.memory().delete_messages(gone)
            for message_id in gone:
                del self.messages[message_id]
        elif kind == "delete_thread":
            thread = rng.choice(list(self.threads))
            await self.memory().delete_thread(thread)
            del self.threads[thread]
            self.messages = {m: t for m, t in self.messages.items() if t != thread}
        elif kind == "move":
            thread = rng.choice(list(self.threads))
            self.threads[thread] = rng.choice(RESOURCES)
            await self.memory().update_thread_resource_id(thread, resource_id=self.threads[thread])
        elif kind == "clone":
            source = rng.choice(list(self.threads))
            owner = rng.choice(RESOURCES)
            result = await self.memory().clone_thread(source, resource_id=owner)
            self.threads[result.thread.id] = owner
            self.messages.update((m.id, result.thread.id) for m in result.messages)
        return kind

    async def check(self) -> None:
        rng = self.rng
        stored = await self.memories[0].list_messages_by_id(list(self.messages))
        owners = {t: row.resource_id for t in self.threads
                  if (row := await self.memories[0].get_thread_by_id(t)) is not None}
        texts = [message_text(m) for m in stored]
        vectors = (await self.embedder.embed(texts)).vectors if texts else np.zeros((0, 32), np.float32)
        for _ in range(2):
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            if self.threads and rng.random() < 0.4:
                resource, thread = None, rng.choice(list(self.threads))
            else:
                resource, thread = rng.choice(RESOURCES), None
            want = (await self.embedder.embed([query])).vectors[0]
            scored = sorted(((float(np.dot(vectors[i], want)), m.id) for i, m in enumerate(stored)
                             if (m.thread_id == thread if thread is not None
                                 else (m.resource_id or owners.get(m.thread_id or "")) == resource)),
                            reverse=True)
            for memory in self.memories:
                hits = await memory.search_vectors(query, top_k=TOP, resource_id=resource, thread_id=thread)
                assert [h.score for h in hits] == pytest.approx([s for s, _ in scored[:TOP]], abs=1e-5)
                sure = {mid for s, mid in scored[:TOP] if len(scored) <= TOP or s > scored[TOP][0] + 1e-5}
                assert sure <= {h.message_id for h in hits}, (query, resource, thread)


@pytest.mark.parametrize("seed", [3, 4])
async def test_every_vector_search_answers_what_an_exact_search_of_the_stored_messages_answers(
        memories: tuple[Memory, Memory], seed: int) -> None:
    run = _Run(seed, memories)
    kinds: set[str] = set()
    for _ in range(50):
        kinds.add(await run.write())
        await run.check()
    assert {"save", "resave", "update", "delete", "delete_thread", "move", "clone"} <= kinds
