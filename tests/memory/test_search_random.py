"""``Memory.search`` by words against the stored truth, over random writes through two ``Memory`` objects on one
database: after each write, a search through either ranks what the ranking of ``threadmind.search._rank`` gives
when fed the stored messages (BM25 with the scope's statistics, the date lift, reply smoothing over the stored
neighbours), so nothing between the store and the hits (pools, neighbours, dates, hidden messages, scope) drifts
from what is stored."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from threadmind import Memory, Message
from threadmind.search._dates import named_dates
from threadmind.search._rank import DATE_POOL, fuse, lifted, pools, smoothed
from threadmind.stores import InMemoryStore, PostgresStore, SQLiteStore
from threadmind.stores._keywords import (
    KeywordCandidate,
    KeywordMatches,
    count_words,
    indexed_text,
    keyword_ranking,
    lexemes_of,
    query_terms,
    text_tokens,
)

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = "dog cat harbour marathon parrot violin river coffee novel chess".split()
RESOURCES = ("r1", "r2")
TOP = 3
OPTIONS = {"lastMessages": False, "semanticRecall": {"search": "keyword"}, "generateTitle": False}


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def memories(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Memory, Memory]]:
    if request.param == "memory":
        async with Memory(storage=InMemoryStore(), options=OPTIONS) as only:
            yield only, only
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
        yield one, two


class _Run:
    def __init__(self, seed: int, memories: tuple[Memory, Memory]) -> None:
        self.rng = random.Random(seed)
        self.memories = memories
        self.threads: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.clock = 0

    def memory(self) -> Memory:
        return self.rng.choice(self.memories)

    def say(self, message_id: str, thread: str) -> Message:
        self.clock += 1
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 6))) + f" n{self.clock}"
        return Message.user(text, id=message_id, thread_id=thread, resource_id=self.threads[thread],
                            created_at=BASE + timedelta(days=self.rng.randrange(6), seconds=self.clock))

    async def write(self) -> str:
        rng = self.rng
        kind = rng.choice(["create", "save", "save", "save", "update", "delete", "move", "delete_thread"])
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
        elif kind == "update" and self.messages:
            message_id = rng.choice(list(self.messages))
            text = " ".join(rng.sample(WORDS, 2))
            await self.memory().update_messages([{"id": message_id, "content": {"content": text}}])
        elif kind == "delete" and self.messages:
            gone = rng.choice(list(self.messages))
            await self.memory().delete_messages([gone])
            del self.messages[gone]
        elif kind == "move":
            self.threads[thread] = rng.choice(RESOURCES)
            await self.memory().update_thread_resource_id(thread, resource_id=self.threads[thread])
        elif kind == "delete_thread":
            await self.memory().delete_thread(thread)
            del self.threads[thread]
            self.messages = {m: t for m, t in self.messages.items() if t != thread}
        return kind

    async def expected(self, query: str, resource: str) -> list[tuple[str, float]]:
        stored = await self.memories[0].list_messages_by_id(list(self.messages))
        owners = {t: row.resource_id for t in self.threads
                  if (row := await self.memories[0].get_thread_by_id(t)) is not None}
        in_scope = [m for m in stored if (m.resource_id or owners.get(m.thread_id or "")) == resource]
        lexemes = set(lexemes_of(query_terms(query)))
        docs = [(m, tokens) for m in in_scope if (tokens := text_tokens(indexed_text(m)))]
        words = sum(len(tokens) for _, tokens in docs)
        every = KeywordMatches(len(docs), words / len(docs) if docs else 0.0,
                               {lexeme: sum(1 for _, t in docs if lexeme in t) for lexeme in lexemes},
                               [KeywordCandidate(m.id, m.thread_id or "", resource, len(t), counts)
                                for m, t in docs if (counts := count_words(t, lexemes))])
        keyword_pool, _ = pools(TOP)
        dates = named_dates(query)
        ranked = keyword_ranking(every, 10_000)
        ranked.sort(key=lambda c: -c.score)  # stable: ties in the order the store returns them are not compared
        if dates:  # a dated query reads a pool twice as deep, then lifts
            ranked = ranked[:keyword_pool * DATE_POOL]
        created = {m.id: m.created_at for m in stored}
        candidates, lift = lifted(ranked, {c.message_id for c in ranked
                                           if any(d.holds(created[c.message_id]) for d in dates)}, keyword_pool)
        threads: dict[str, list[Message]] = {}
        for message in sorted(stored, key=lambda m: m.created_at):
            threads.setdefault(message.thread_id or "", []).append(message)
        neighbours: dict[str, tuple[str | None, str | None]] = {}
        for rows in threads.values():
            for at, message in enumerate(rows):
                neighbours[message.id] = (rows[at - 1].id if at else None,
                                          rows[at + 1].id if at + 1 < len(rows) else None)
        hits = smoothed(fuse(candidates, [], 1.0, lift), neighbours)
        return [(h.message_id, h.score) for h in hits]

    async def check(self) -> None:
        rng = self.rng
        for _ in range(2):
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            if rng.random() < 0.3:
                day = BASE + timedelta(days=rng.randrange(6))
                query += f" on {day.day} {day.strftime('%B')} {day.year}"
            resource = rng.choice(RESOURCES)
            want = await self.expected(query, resource)
            for memory in self.memories:
                hits = await memory.search(query, resource_id=resource, top_k=TOP)
                got = [(h.message.id, h.score) for h in hits]
                assert [s for _, s in got] == pytest.approx([s for _, s in want[:TOP]], abs=1e-9), query
                # messages scoring alike may come in either order; those above the cut are the same
                cut = want[TOP][1] if len(want) > TOP else -1.0
                assert {m for m, s in want[:TOP] if s > cut + 1e-9} <= {m for m, _ in got}, query


@pytest.mark.parametrize("seed", [7, 8])
async def test_search_by_words_ranks_what_the_stored_messages_rank(memories: tuple[Memory, Memory],
                                                                  seed: int) -> None:
    run = _Run(seed, memories)
    for _ in range(60):
        await run.write()
        await run.check()
