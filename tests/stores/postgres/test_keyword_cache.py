"""PostgreSQL keyword searches from scopes kept in memory: the same answers as the SQL ranking, and never stale: a
write committed by any other store object (another process) is seen by the next search, whatever kind of write."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmind.codecs import Message, Thread
from threadmind.embedders._chunking import message_text
from threadmind.stores._keyword_blocks import RESOURCE, THREAD, KeywordBlock
from threadmind.stores._keywords import KeywordMatches, query_terms, text_tokens
from threadmind.stores._postgres import PostgresStore
from threadmind.stores._postgres import _keyword_search as _postgres_keyword_search
from threadmind.stores._postgres._pool import import_asyncpg
from threadmind.stores._postgres._tsvector import _tsvector, scope_key

from ..test_keywords import write_behind_the_index

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ("harbour dog cat parrot marathon tokyo spring deadline budget invoice garden piano violin salmon "
         "mountain river bicycle passport visa ticket museum concert recipe oven bread coffee").split()


def say(mid: str, text: str, thread: str = "t1", resource: str = "r1", i: int = 0) -> Message:
    return Message.user(text, id=mid, thread_id=thread, resource_id=resource, created_at=BASE + timedelta(seconds=i))


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[: rng.randint(3, len(WORDS))]) for _ in range(rng.randint(1, 14)))


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two processes have: each keeps its own scopes."""
    async with PostgresStore(pg_dsn, max_size=2) as a, PostgresStore(pg_dsn, max_size=2) as b:
        yield a, b


async def search(store: PostgresStore, query: str, resource: str | None = "r1", thread: str | None = None, *,
                 limit: int = 1000) -> KeywordMatches:
    return await store.keyword_search(query_terms(query), resource_id=resource, thread_id=thread, limit=limit)


def summary(matches: KeywordMatches) -> tuple[object, ...]:
    """What a search answers, ties in one order."""
    ranked = sorted(matches.candidates, key=lambda c: (-c.score, c.message_id))
    return (matches.docs, round(matches.average_length, 9), matches.frequencies,
            [(c.message_id, c.thread_id, c.resource_id, c.length, c.counts, c.score) for c in ranked])


async def seeded(store: PostgresStore, n: int = 240) -> None:
    rng = random.Random(7)
    for t in range(4):
        await store.create_thread(Thread(id=f"t{t}", resource_id="r1" if t < 3 else "r2"))
    for t in range(4):
        await store.save_messages(f"t{t}", [say(f"m{t}-{i}", sentence(rng), f"t{t}", "r1" if t < 3 else "r2", i)
                                            for i in range(n // 4)])


QUERIES = ["dog harbour", "the budget deadline for the museum ticket", "coffee", "violin piano concert",
           "nothing matches zebra", "bread bread oven recipe salmon river"]


async def test_a_scope_in_memory_answers_exactly_what_the_sql_ranking_answers(
        stores: tuple[PostgresStore, PostgresStore], pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cached, _ = stores
    await seeded(cached)
    from_memory = {(q, scope, limit): summary(await search(cached, q, scope[0], scope[1], limit=limit))
                   for q in QUERIES for scope in (("r1", None), (None, "t1"), ("r1", "t1")) for limit in (5, 1000)}
    assert cached.cache_statistics()["keyword_built"] == 2  # r1 and t1, each read once
    monkeypatch.setattr(_postgres_keyword_search, "BLOCK_SCOPE", 0)  # every scope too large: SQL ranks
    async with PostgresStore(pg_dsn, max_size=2) as by_sql:
        for (q, scope, limit), answer in from_memory.items():
            assert summary(await search(by_sql, q, scope[0], scope[1], limit=limit)) == answer, (q, scope, limit)
        statistics = by_sql.cache_statistics()
        assert (statistics["keyword_from_memory"], statistics["keyword_built"], statistics["keyword_kept"]) == (0, 0, 0)


Write = Callable[[PostgresStore], Awaitable[object]]


async def _catch_up(store: PostgresStore) -> None:
    await write_behind_the_index(store, [say("w1", "a parrot Mastra wrote about the dog", "t1", i=500)])
    await store.build_keyword_index()


async def _update_keeping_the_length(store: PostgresStore) -> None:
    """An edit that keeps the message's number of words (the scope's counts stay): only its row's version tells."""
    (message,) = await store.get_messages_by_id(["m1-1"])
    words = len(message_text(message).split())
    await store.update_messages([{"id": "m1-1", "content": {"content": " ".join(["dog"] * words)}}])


WRITES: dict[str, Write] = {
    "save": lambda s: s.save_messages("t1", [say("n1", "a new dog in the harbour", i=300)]),
    "save of another thread": lambda s: s.save_messages("t2", [say("n2", "dog dog dog", "t2", i=301)]),
    "re-save": lambda s: s.save_messages("t1", [say("m1-0", "now about a dog", "t1", i=0)]),
    "update": lambda s: s.update_messages([{"id": "m1-1", "content": {"content": "dog harbour dog"}}]),
    "update keeping the length": _update_keeping_the_length,
    "delete": lambda s: s.delete_messages(["m1-2", "m2-3"]),
    "thread delete": lambda s: s.delete_thread("t2"),
    "thread move": lambda s: s.update_thread_resource_id("t1", "r2"),
    "clone": lambda s: s.create_thread_with_messages(Thread(id="t9", resource_id="r1"),
                                                     [say("c1", "cloned dog harbour", "t9", i=400)]),
    "catch-up": _catch_up,
}


APPENDS = {"save", "save of another thread", "clone", "catch-up"}  # writes that only add messages to scopes


@pytest.mark.parametrize("kind", list(WRITES))
async def test_a_write_by_another_process_is_seen_by_the_next_search(
        stores: tuple[PostgresStore, PostgresStore], pg_dsn: str, kind: str) -> None:
    reader, writer = stores
    await seeded(writer, n=40)
    scopes = [("r1", None), ("r2", None), (None, "t1"), (None, "t2")]
    for scope in scopes:
        await search(reader, "dog harbour", *scope)
    assert reader.cache_statistics()["keyword_built"] == 4
    await WRITES[kind](writer)
    async with PostgresStore(pg_dsn, max_size=2) as fresh:
        for scope in scopes:
            assert summary(await search(reader, "dog harbour", *scope)) == \
                summary(await search(fresh, "dog harbour", *scope)), scope
    statistics = reader.cache_statistics()
    built, followed = statistics["keyword_built"] - 4, statistics["keyword_followed"]
    if kind in APPENDS:  # messages added alone: each scope that gained some took them, none was read whole again
        assert built == 0 and followed >= 1
    else:  # at least one scope changed otherwise and was read again
        assert built >= 1
    assert statistics["keyword_from_memory"] + built + followed == 4


async def test_a_store_keeps_its_scope_across_its_own_saves(stores: tuple[PostgresStore, PostgresStore]) -> None:
    """The chat pattern: search, save the turn, search again: the saved rows join the kept scope (no re-read)."""
    chat, other = stores
    await seeded(chat, n=40)
    await search(chat, "dog")
    await search(chat, "dog", None, "t1")
    for turn in range(5):
        await chat.save_messages("t1", [say(f"u{turn}", f"turn {turn}: my dog likes parrots", i=600 + 2 * turn),
                                        say(f"a{turn}", "parrots are loud", i=601 + 2 * turn)])
        found = await search(chat, "parrot")
        assert {f"u{turn}", f"a{turn}"} <= {c.message_id for c in found.candidates}
        assert {f"u{turn}", f"a{turn}"} <= {c.message_id for c in (await search(chat, "parrot", None, "t1")).candidates}
    assert chat.cache_statistics()["keyword_built"] == 2  # still the two blocks read at first
    # Another process's save in between, to another thread or to this one (the very counters this save bumps
    # next): the next search finds both, the scope brought up to date with what it lacks (the other's message, and
    # this save's too when the other's reached the counter this save bumped), not read again.
    for n, thread in enumerate(("t2", "t1")):
        await other.save_messages(thread, [say(f"o{n}", "their parrot", thread, i=700 + 2 * n)])
        await chat.save_messages("t1", [say(f"u9{n}", "my parrot", i=701 + 2 * n)])
        expected = {("r1", None): {f"o{n}", f"u9{n}"}, (None, "t1"): {f"u9{n}"}}
        expected.setdefault((None, thread), set()).add(f"o{n}")
        for scope, ids in expected.items():
            assert ids <= {c.message_id for c in (await search(chat, "parrot", *scope)).candidates}, scope
    # read: t2 once (its first search); brought up to date: r1 twice, t1 once
    assert (chat.cache_statistics()["keyword_built"], chat.cache_statistics()["keyword_followed"]) == (3, 3)


async def test_concurrent_saves_to_one_resource_leave_every_cached_scope_exact(
        stores: tuple[PostgresStore, PostgresStore]) -> None:
    """Saves in flight at once from two stores (their versions bumped in any order) never leave a kept scope
    missing a committed message."""
    import anyio

    a, b = stores
    await seeded(a, n=40)
    await search(a, "parrot")
    await search(b, "parrot")

    async def saves(store: PostgresStore, thread: str, prefix: str) -> None:
        for i in range(12):
            await store.save_messages(thread, [say(f"{prefix}{i}", f"parrot number {i}", thread, i=800 + i)])

    async with anyio.create_task_group() as tg:
        for store, thread, prefix in ((a, "t0", "x"), (a, "t1", "y"), (b, "t2", "z"), (b, "t0", "w")):
            tg.start_soon(saves, store, thread, prefix)
    expected = {f"{p}{i}" for p in "xyzw" for i in range(12)}
    for store in (a, b):
        found = {c.message_id for c in (await search(store, "parrot")).candidates}
        assert expected <= found


async def test_neighbours_are_kept_with_the_scope_and_follow_every_insert(
        stores: tuple[PostgresStore, PostgresStore]) -> None:
    """Hybrid recall asks each search for its candidates' neighbours: kept with the scope's block, read again once
    the scope changes (another process inserting a message between two), or rows join it (this store's save)."""
    reader, writer = stores
    await seeded(writer, n=40)

    async def around(ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        found = await reader.keyword_search(query_terms("dog"), resource_id="r1", thread_id=None, limit=10,
                                            neighbours_of=ids)
        return found.neighbours

    first = await around(["m1-3", "m1-4", "ghost"])
    assert first["m1-3"] == ("m1-2", "m1-4") and "ghost" not in first
    assert await around(["m1-3", "m1-4", "ghost"]) == first
    assert reader.cache_statistics()["neighbours_from_memory"] >= 3
    between = BASE + timedelta(seconds=3, milliseconds=500)  # after m1-3, before m1-4
    await writer.save_messages("t1", [Message.user("in between", id="mid", thread_id="t1", resource_id="r1",
                                                   created_at=between)])
    moved = await around(["m1-3", "m1-4"])
    assert moved["m1-3"] == ("m1-2", "mid") and moved["m1-4"] == ("mid", "m1-5")
    await reader.save_messages("t1", [Message.user("later", id="late", thread_id="t1", resource_id="r1",
                                                   created_at=BASE + timedelta(seconds=99))])
    last = (await around(["m1-9"]))["m1-9"]
    assert last == ("m1-8", "late")  # this store's own save joined the block: what it kept is read again


async def test_a_kept_scope_takes_what_other_processes_added_without_reading_the_scope_again(
        stores: tuple[PostgresStore, PostgresStore], pg_dsn: str) -> None:
    """Messages another store object (another process) added reach a kept scope by a read of those messages alone,
    between this store's own saves too (their rows' versions are the save's transaction): answers and neighbours are
    the database's (messages of no words, one created between two already there, a new thread), and each scope is
    read whole once."""
    reader, writer = stores
    await seeded(writer, n=40)
    scopes = [("r1", None), (None, "t1"), ("r2", None)]
    for scope in scopes:
        await search(reader, "dog harbour", *scope)
    await writer.create_thread(Thread(id="t7", resource_id="r1"))
    rng = random.Random(5)
    async with PostgresStore(pg_dsn, max_size=2) as fresh:
        for turn in range(4):
            if turn:  # one of no words, alone, right after the previous turn's first message in t1
                await writer.save_messages("t1", [say(f"t1-{turn - 1}-alone", "!!", "t1", i=490 + 10 * turn)])
            for thread in ("t1", "t7", "t0"):
                await writer.save_messages(thread, [
                    say(f"{thread}-{turn}", sentence(rng), thread, i=500 + 10 * turn),
                    say(f"{thread}-{turn}-quiet", "🙂", thread, i=501 + 10 * turn),
                    say(f"{thread}-{turn}-early", "dog harbour early", thread, i=3 * turn + 1)])
            await reader.save_messages("t1", [say(f"mine-{turn}", "my dog", "t1", i=505 + 10 * turn)])
            for query in QUERIES[:3]:
                for scope in scopes:
                    mine = await reader.keyword_search(query_terms(query), resource_id=scope[0], thread_id=scope[1],
                                                       limit=1000, neighbours_of=["t1-0-quiet"])
                    theirs = await search(fresh, query, *scope)
                    assert summary(mine) == summary(theirs), (query, scope)
                    asked = [c.message_id for c in mine.candidates] + ["t1-0-quiet"]
                    assert mine.neighbours == await fresh.neighbours(asked), (query, scope)
        for scope in scopes:  # every neighbour a kept scope holds (brought up to date, not read) is the database's
            owner = (THREAD, scope[1]) if scope[1] else (RESOURCE, scope[0] or "")
            held = reader._keywords.scopes.blocks.held(scope_key(owner), owner)
            assert held is not None
            kept = {mid: pair for mid, pair in held[1].neighbours.items() if pair is not None}
            assert len(kept) >= 10 and kept == await fresh.neighbours(list(kept)), scope
    statistics = reader.cache_statistics()
    assert statistics["keyword_built"] == 3 and statistics["keyword_followed"] >= 8


async def test_a_small_scope_reads_the_order_of_its_threads_once(stores: tuple[PostgresStore, PostgresStore],
                                                                pg_dsn: str) -> None:
    """A kept scope of a few thousand messages reads the order of all its threads at its first miss of a
    neighbour: its later searches find every neighbour kept, whatever their candidates, and they are the database's."""
    reader, writer = stores
    await seeded(writer, n=40)
    await reader.keyword_search(query_terms("dog"), resource_id="r1", thread_id=None, limit=3, neighbours_of=["m0-1"])
    before = reader.cache_statistics()["neighbours_from_memory"]
    ids = [f"m{t}-{i}" for t in range(3) for i in range(10)]
    found = await reader.keyword_search(query_terms("violin coffee"), resource_id="r1", thread_id=None, limit=10,
                                        neighbours_of=ids)
    asked = list(dict.fromkeys([c.message_id for c in found.candidates] + ids))
    assert reader.cache_statistics()["neighbours_from_memory"] - before == len(asked)  # no trip for any of them
    async with PostgresStore(pg_dsn, max_size=2) as fresh:
        assert found.neighbours == await fresh.neighbours(asked)


def grouped_literal(text: str) -> tuple[str, dict[str, int]]:
    """The ``tsvector`` literal of ``text`` with each stem once and its positions listed (at most 256, the first
    16 383 words, stems of at most 255 characters), and each stem's count: the form PostgreSQL stores."""
    positions: dict[str, list[int]] = {}
    for position, token in enumerate(text_tokens(text)[:16383], start=1):
        if len(token) <= 255:
            positions.setdefault(token, []).append(position)
    return (" ".join(f"'{token}':" + ",".join(map(str, spots[:256])) for token, spots in positions.items()),
            {token: len(spots[:256]) for token, spots in positions.items()})


async def test_a_messages_tsvector_literal_is_stored_as_its_grouped_form(pg_dsn: str) -> None:
    """The literal a save writes names a stem again at each of its positions; PostgreSQL stores it as the literal
    listing each stem once with its positions (at most 256 of them), and the counts the store's blocks take are
    those positions' (repeated words, long words left out, more than 16 383 words, other scripts)."""
    rng = random.Random(5)
    words = [*WORDS, "the", "running", "runs", "über", "naïve", "123", "x9", "日本語", "Ωmega"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 60))) for _ in range(300)]
    texts += [" ".join(["the"] * 300), "x" * 300 + " dog dog", " ".join(["cat", "dog"] * 9000), "", "🙂 !!"]
    conn = await import_asyncpg().connect(pg_dsn)
    try:
        for text in texts:
            literal, length, counts = _tsvector(text)
            grouped, grouped_counts = grouped_literal(text)
            assert length == len(text_tokens(text)) and dict(counts) == grouped_counts, text[:40]
            assert await conn.fetchval("SELECT $1::tsvector::text = $2::tsvector::text", literal, grouped), text[:40]
    finally:
        await conn.close()


async def test_a_threads_first_search_after_its_resources_takes_its_words_from_the_resources_block(
        stores: tuple[PostgresStore, PostgresStore], pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread searched (alone, or within its resource) after its resource was: its block is made from the
    resource's (its rows' versions read, not its rows) and answers what a store reading its rows answers. A thread
    holding a row filed under another resource, or one whose row changed since the resource's block read it, is
    read as before."""
    built: list[tuple[str, str]] = []
    def counted(owner: tuple[str, str], rows: Any) -> KeywordBlock:
        built.append(owner)
        return KeywordBlock(owner, rows)

    monkeypatch.setattr(_postgres_keyword_search, "KeywordBlock", counted)
    reader, writer = stores
    await seeded(writer, n=80)
    await write_behind_the_index(writer, [say("stray", "dog harbour from elsewhere", "t2", "r2", i=900)])
    await writer.build_keyword_index()  # t2 (of r1) now holds a row filed under r2
    for resource in ("r1", "r2"):
        await search(reader, "dog", resource)
    assert built == [(RESOURCE, "r1"), (RESOURCE, "r2")]
    await writer.update_messages([{"id": "m1-3", "content": {"content": "a dog changed"}}])  # t1's row, after
    scopes: list[tuple[str | None, str]] = [(None, "t0"), ("r1", "t0"), (None, "t1"), (None, "t2"), ("r2", "t3")]
    answers = {(q, scope): summary(await search(reader, q, *scope)) for q in QUERIES for scope in scopes}
    assert built[2:] == [(THREAD, "t1"), (THREAD, "t2")]  # t0 and t3 made from their resources' blocks
    async with PostgresStore(pg_dsn, max_size=2) as fresh:
        for (q, scope), answer in answers.items():
            assert summary(await search(fresh, q, *scope)) == answer, (q, scope)
    assert built[4:] == [(THREAD, "t0"), (THREAD, "t1"), (THREAD, "t2"), (THREAD, "t3")]  # read from their rows


async def test_a_large_scopes_block_is_built_off_the_event_loop(
        stores: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing and numbering a scope's rows is Python work (about 35 µs a row): past ``BUILD_ON_LOOP`` rows a block
    is built on a worker thread, so the loop keeps serving; a small one is built in place. Both answer alike."""
    import threading

    threads: dict[tuple[str, str], int] = {}

    def counted(owner: tuple[str, str], rows: Any) -> KeywordBlock:
        threads[owner] = threading.get_ident()
        return KeywordBlock(owner, rows)

    monkeypatch.setattr(_postgres_keyword_search, "KeywordBlock", counted)
    monkeypatch.setattr(_postgres_keyword_search, "BUILD_ON_LOOP", 30)
    store, other = stores
    await seeded(store, n=80)  # r1: 60 messages, r2: 20
    loop = threading.get_ident()
    first = {resource: summary(await search(store, "dog harbour coffee", resource)) for resource in ("r1", "r2")}
    assert threads[RESOURCE, "r1"] != loop and threads[RESOURCE, "r2"] == loop
    monkeypatch.setattr(_postgres_keyword_search, "BUILD_ON_LOOP", 10_000)
    for resource, answer in first.items():
        assert summary(await search(other, "dog harbour coffee", resource)) == answer
    assert threads[RESOURCE, "r1"] == loop
