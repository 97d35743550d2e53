"""Four tasks writing and searching at once through two ``Memory`` objects on one database (random saves, updates,
deletions, threads moved, cloned and deleted, searches by words and by vectors in between): every call ends in its
answer or in the error it names (a thread deleted meanwhile), and once they are done, both objects' searches by
words answer what the stored messages answer, and searches by vectors answer with stored messages of the resource
asked for, whatever the writes raced with.

Vectors are held to scope and to what is stored, not to the text: a vector write of one object racing with an
edit of the same message's text through the other is not ordered with it (the older text's vector can land last).
Rows take the thread and resource their message has when they are written, a message deleted meanwhile gets none,
and a clone's copies yield to the rows an edit of the copy wrote."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.errors import ResourceMismatch, ThreadNotFound, ValidationError
from threadmind.stores import HnswVectorStore, PgVectorStore, VectorStore
from threadmind.stores._keywords import indexed_text, lexemes_of, query_terms, text_tokens

from ._random_writes import BASE, WORDS, stores_on_one_database

RESOURCES = ("r1", "r2")
OPTIONS = {"lastMessages": False, "semanticRecall": {"scope": "resource"}, "generateTitle": False}


@pytest.fixture(params=["sqlite", "postgres", "postgres-hnsw"])
async def memories(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Memory, Memory]]:
    store = stores_on_one_database(request.param.split("-")[0], request, tmp_path)

    def vectors(name: str) -> VectorStore:  # postgres-hnsw: hnswlib indexes over the vector rows in PostgreSQL
        return (PgVectorStore(request.getfixturevalue("pg_dsn")) if request.param == "postgres"
                else HnswVectorStore(tmp_path / name))

    async with Memory(storage=store(), vector=vectors("a"), embedder=HashEmbedder(dim=32), options=OPTIONS) as one, \
            Memory(storage=store(), vector=vectors("b"), embedder=HashEmbedder(dim=32), options=OPTIONS) as two:
        yield one, two


class _Race:
    def __init__(self, memories: tuple[Memory, Memory]) -> None:
        self.memories = memories
        self.threads: list[str] = []  # every thread ever created
        self.ids: list[str] = []  # every message id ever saved
        self.count = 0

    async def worker(self, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            memory = rng.choice(self.memories)
            self.count += 1
            n = self.count
            try:
                await self._one(rng, memory, n)
            except (ThreadNotFound, ResourceMismatch):  # a thread deleted or moved by another task meanwhile
                pass

    async def _one(self, rng: random.Random, memory: Memory, n: int) -> None:
        kind = rng.choice(["create", "save", "save", "save", "update", "delete", "move", "clone", "delete_thread",
                           "search", "search"])
        if kind == "create" or not self.threads:
            thread = f"t{n}"
            self.threads.append(thread)
            await memory.create_thread(thread_id=thread, resource_id=rng.choice(RESOURCES))
            return
        thread = rng.choice(self.threads)
        if kind == "save":
            owner = await memory.get_thread_by_id(thread)
            if owner is None:
                return
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) + f" n{n}"
            message = Message.user(text, id=f"m{n}", thread_id=thread, resource_id=owner.resource_id,
                                   created_at=BASE + timedelta(seconds=n))
            self.ids.append(message.id)
            await memory.save_messages([message])
        elif kind == "update" and self.ids:
            try:
                await memory.update_messages([{"id": rng.choice(self.ids),
                                               "content": {"content": f"{rng.choice(WORDS)} edited {n}"}}])
            except ValidationError as exc:  # deleted meanwhile (with its thread, or alone)
                assert "does not exist" in str(exc) or "not found" in str(exc)
        elif kind == "delete" and self.ids:
            await memory.delete_messages([rng.choice(self.ids)])
        elif kind == "move":
            await memory.update_thread_resource_id(thread, resource_id=rng.choice(RESOURCES))
        elif kind == "clone":
            result = await memory.clone_thread(thread, new_thread_id=f"c{n}", resource_id=rng.choice(RESOURCES))
            self.threads.append(result.thread.id)
            self.ids.extend(m.id for m in result.messages)
        elif kind == "delete_thread":
            await memory.delete_thread(thread)
        else:
            query = " ".join(rng.sample(WORDS, 2))
            await memory.search(query, resource_id=rng.choice(RESOURCES), top_k=3)
            await memory.search_vectors(query, top_k=3, resource_id=rng.choice(RESOURCES))

    async def settled_check(self) -> None:
        """Both objects' searches by words against the stored messages (read through the first)."""
        reader = self.memories[0]
        stored = await reader.list_messages_by_id(self.ids)
        owners = {t: row.resource_id for t in self.threads if (row := await reader.get_thread_by_id(t)) is not None}
        stored = [m for m in stored if m.thread_id in owners]
        scopes = {m.id: m.resource_id or owners.get(m.thread_id or "", "") for m in stored}
        for word in WORDS[:6]:
            for resource in RESOURCES:
                in_scope = [i for i, m in enumerate(stored)
                            if (m.resource_id or owners.get(m.thread_id or "")) == resource]
                lexemes = set(lexemes_of(query_terms(word)))
                holding = {stored[i].id for i in in_scope if lexemes & set(text_tokens(indexed_text(stored[i])))}
                for memory in self.memories:
                    hits = await memory.search(word, resource_id=resource, top_k=100, search="keyword")
                    found = {h.message.id for h in hits if h.keyword_score is not None}
                    assert found == holding, (word, resource)
                    assert all(h.message.resource_id in (None, resource) for h in hits)
                    for near in await memory.search_vectors(word, top_k=10, resource_id=resource):
                        # a stored message of this resource: never another's, nor one deleted meanwhile
                        assert scopes.get(near.message_id) == resource, (near, resource)


# A second seed in CI's slow tier: the README's command keeps one (the suite's time on two cores).
@pytest.mark.parametrize("seed", [31, pytest.param(32, marks=pytest.mark.slow)])
async def test_racing_writes_leave_both_objects_searching_what_is_stored(memories: tuple[Memory, Memory],
                                                                         seed: int) -> None:
    race = _Race(memories)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for k in range(4):
                tg.start_soon(race.worker, seed * 10 + k)
    for memory in memories:
        await memory.settled()
    await race.settled_check()
