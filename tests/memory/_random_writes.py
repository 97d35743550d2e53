"""What the model tests of ``Memory`` share: store objects on one database, and random writes made through either
of two ``Memory`` objects on it (as two worker processes would make them), with the model of what they wrote."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from threadmind import Memory, Message
from threadmind.stores import PostgresStore, SQLiteStore

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = "dog cat harbour marathon parrot violin river coffee novel chess garden bakery sunrise museum".split()
KINDS = ("create", "save", "save", "save", "resave", "update", "delete", "delete_thread", "move", "clone",
         "rename", "working")


def stores_on_one_database(kind: str, request: pytest.FixtureRequest,
                           tmp_path: Path) -> Callable[[], SQLiteStore | PostgresStore]:
    """A maker of store objects on one database of ``kind`` (``"sqlite"``: one file; ``"postgres"``: one
    database of the session's server), each with caches of its own."""
    if kind == "sqlite":
        return lambda: SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL")
    dsn: str = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn, max_size=2)


class RandomWrites:
    """Seeded random writes through ``memories`` (one picked per write) and what they left: thread -> resource,
    message -> thread, resource -> its working memory as last written.

    :param kinds: the writes to draw from (repeat one to draw it more often); see :data:`KINDS`.
    :param text: a message's text, given the random generator and the write's number.
    :param days: messages are created up to this many days apart (0: one second apart, in write order).
    """

    def __init__(self, seed: int, memories: Sequence[Memory], *, kinds: Sequence[str] = KINDS,
                 text: Callable[[random.Random, int], str] | None = None, resources: Sequence[str] = ("r1", "r2"),
                 days: int = 0) -> None:
        self.rng = random.Random(seed)
        self.memories = memories
        self.kinds = kinds
        self.text = text or (lambda rng, n: " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) + f" n{n}")
        self.resources = resources
        self.days = days
        self.threads: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.clock = 0
        self.done: set[str] = set()

    def memory(self) -> Memory:
        return self.rng.choice(self.memories)

    def say(self, message_id: str, thread: str) -> Message:
        self.clock += 1
        at = BASE + timedelta(days=self.rng.randrange(self.days) if self.days else 0, seconds=self.clock)
        return Message.user(self.text(self.rng, self.clock), id=message_id, thread_id=thread,
                            resource_id=self.threads[thread], created_at=at)

    async def write(self) -> str:
        """One write; returns its kind (one that found nothing to act on counts as none)."""
        rng = self.rng
        kind = rng.choice(self.kinds)
        if kind == "create" or not self.threads:
            thread = f"t{len(self.threads)}-{rng.randrange(10**6)}"
            self.threads[thread] = rng.choice(self.resources)
            await self.memory().create_thread(thread_id=thread, resource_id=self.threads[thread])
            kind = "create"
        else:
            kind = await self._write(kind, rng.choice(list(self.threads)))
        self.done.add(kind)
        return kind

    async def _write(self, kind: str, thread: str) -> str:
        rng = self.rng
        if kind == "save":
            batch = [self.say(f"m{self.clock}-{i}", thread) for i in range(rng.randint(1, 3))]
            await self.memory().save_messages(batch)
            self.messages.update((m.id, thread) for m in batch)
        elif kind == "resave" and self.messages:
            message_id = rng.choice(list(self.messages))
            await self.memory().save_messages([self.say(message_id, self.messages[message_id])])
        elif kind == "update" and self.messages:
            message_id = rng.choice(list(self.messages))
            self.clock += 1
            text = self.text(rng, self.clock)
            await self.memory().update_messages([{"id": message_id, "content": {"content": text}}])
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
            self.threads[thread] = rng.choice(self.resources)
            await self.memory().update_thread_resource_id(thread, resource_id=self.threads[thread])
        elif kind == "clone":
            owner = rng.choice(self.resources)
            result = await self.memory().clone_thread(thread, resource_id=owner)
            self.threads[result.thread.id] = owner
            self.messages.update((m.id, result.thread.id) for m in result.messages)
        elif kind == "rename":
            self.clock += 1
            await self.memory().update_thread(thread, title=f"title {self.clock}", metadata={"n": self.clock})
        elif kind == "working":
            self.clock += 1
            text = f"# Notes\n- {self.clock}"
            await self.memory().update_working_memory(thread_id=thread, resource_id=self.threads[thread],
                                                      working_memory=text)
            self.notes[self.threads[thread]] = text
        else:
            return "none"
        return kind

    async def stored(self) -> tuple[list[Message], dict[str, str]]:
        """The stored messages written (as the first Memory reads them) and each thread's resource."""
        reader = self.memories[0]
        messages = await reader.list_messages_by_id(list(self.messages))
        owners = {t: row.resource_id for t in self.threads if (row := await reader.get_thread_by_id(t)) is not None}
        return messages, owners


def scope_of(message: Message, owners: dict[str, str]) -> str:
    """The resource a message is filed under: its own, else its thread's."""
    return message.resource_id or owners.get(message.thread_id or "", "")

