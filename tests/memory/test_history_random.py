"""Threads, history and working memory against the stored truth, over random sequences of every write ``Memory``
takes (saves, re-saves, updates, deletions, threads created, renamed, moved, cloned and deleted, working memory
written) through two ``Memory`` objects on one database, as two worker processes would make them: after each
write, what either one reads (a thread, its whole history, its last messages, working memory) is what the store
holds, whatever either cached (SPEC §10: caches are validated, not trusted)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from threadmind import Memory, Message
from threadmind.stores import InMemoryStore, PostgresStore, SQLiteStore, Store

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = "dog cat harbour marathon parrot violin river coffee novel chess".split()
RESOURCES = ("r1", "r2")
LAST = 4
OPTIONS = {"lastMessages": LAST, "workingMemory": {"enabled": True}, "generateTitle": False}


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Memory, Memory, Store]]:
    """Two Memory objects on one database and a plain store object on it (the truth: no cache of Memory's)."""
    if request.param == "memory":
        store = InMemoryStore()
        async with Memory(storage=store, options=OPTIONS) as only:
            yield only, only, store
        return
    make: Any
    if request.param == "sqlite":
        def make() -> Any:
            return SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL")
    else:
        dsn = request.getfixturevalue("pg_dsn")

        def make() -> Any:
            return PostgresStore(dsn, max_size=2)
    async with Memory(storage=make(), options=OPTIONS) as one, Memory(storage=make(), options=OPTIONS) as two:
        async with make() as truth:
            yield one, two, truth


class _Run:
    def __init__(self, seed: int, setup: tuple[Memory, Memory, Store]) -> None:
        self.rng = random.Random(seed)
        self.memories = setup[:2]
        self.truth = setup[2]
        self.threads: dict[str, str] = {}
        self.messages: dict[str, str] = {}  # message -> thread
        self.clock = 0
        self.notes: dict[str, str] = {}  # resource -> its working memory as last written (resource scope)

    def memory(self) -> Memory:
        return self.rng.choice(self.memories)

    def say(self, message_id: str, thread: str) -> Message:
        self.clock += 1
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 5))) + f" #{self.clock}"
        role = self.rng.choice(["user", "assistant"])
        return Message(id=message_id, role=role, content=Message.user(text).content,  # type: ignore[arg-type]
                       thread_id=thread, resource_id=self.threads[thread],
                       created_at=BASE + timedelta(seconds=self.clock))

    async def write(self) -> str:
        rng = self.rng
        kind = rng.choice(["create", "save", "save", "save", "resave", "update", "delete", "delete_thread", "move",
                           "clone", "rename", "working"])
        if kind == "create" or not self.threads:
            thread = f"t{len(self.threads)}-{rng.randrange(10**6)}"
            self.threads[thread] = rng.choice(RESOURCES)
            await self.memory().create_thread(thread_id=thread, resource_id=self.threads[thread])
            return "create"
        thread = rng.choice(list(self.threads))
        if kind == "save":
            batch = [self.say(f"m{self.clock}-{i}", thread) for i in range(rng.randint(1, 3))]
            await self.memory().save_messages(batch)
            self.messages.update((m.id, thread) for m in batch)
        elif kind == "resave" and self.messages:
            message_id = rng.choice(list(self.messages))
            await self.memory().save_messages([self.say(message_id, self.messages[message_id])])
        elif kind == "update" and self.messages:
            message_id = rng.choice(list(self.messages))
            await self.memory().update_messages([{"id": message_id, "content": {"content": f"edited {self.clock}"}}])
            self.clock += 1
        elif kind == "delete" and self.messages:
            gone = rng.sample(list(self.messages), min(len(self.messages), rng.randint(1, 2)))
            await self.memory().delete_messages(gone)
            for message_id in gone:
                del self.messages[message_id]
        elif kind == "delete_thread":
            await self.memory().delete_thread(thread)
            del self.threads[thread]
            self.messages = {m: t for m, t in self.messages.items() if t != thread}
        elif kind == "move":
            self.threads[thread] = rng.choice(RESOURCES)
            await self.memory().update_thread_resource_id(thread, resource_id=self.threads[thread])
        elif kind == "clone":
            owner = rng.choice(RESOURCES)
            result = await self.memory().clone_thread(thread, resource_id=owner)
            self.threads[result.thread.id] = owner
            self.messages.update((m.id, result.thread.id) for m in result.messages)
        elif kind == "rename":
            await self.memory().update_thread(thread, title=f"title {self.clock}", metadata={"n": self.clock})
            self.clock += 1
        elif kind == "working":
            text = f"# Notes\n- {self.clock}"
            await self.memory().update_working_memory(thread_id=thread, resource_id=self.threads[thread],
                                                      working_memory=text)
            self.notes[self.threads[thread]] = text
            self.clock += 1
        return kind

    async def check(self) -> None:
        for thread in self.rng.sample(list(self.threads), min(2, len(self.threads))):
            stored = await self.truth.get_thread(thread)
            assert stored is not None
            every = sorted(await self.truth.get_messages_by_id([m for m, t in self.messages.items() if t == thread]),
                           key=lambda m: m.created_at)
            want = [(m.id, m.text) for m in every]
            for memory in self.memories:
                seen = await memory.get_thread_by_id(thread)
                assert seen is not None
                assert (seen.resource_id, seen.title, seen.metadata) == (stored.resource_id, stored.title,
                                                                         stored.metadata)
                whole = await memory.recall(thread, resource_id=stored.resource_id, per_page=False)
                assert [(m.id, m.text) for m in whole.messages] == want
                last = await memory.recall(thread, resource_id=stored.resource_id)
                assert [(m.id, m.text) for m in last.messages] == want[-LAST:]
                notes = await memory.get_working_memory(thread_id=thread, resource_id=stored.resource_id)
                if stored.resource_id in self.notes:
                    assert notes == self.notes[stored.resource_id]


@pytest.mark.parametrize("seed", [5, 6])
async def test_every_read_is_what_the_store_holds_after_every_write(setup: tuple[Memory, Memory, Store],
                                                                   seed: int) -> None:
    run = _Run(seed, setup)
    kinds: set[str] = set()
    for _ in range(60):
        kinds.add(await run.write())
        await run.check()
    assert {"save", "resave", "update", "delete", "delete_thread", "move", "clone", "rename", "working"} <= kinds
