"""SQLite's keyword blocks: a scope searched from memory answers exactly what the FTS5 index answers, follows every
change made through any store object (or process) on the file, and is kept, not rebuilt, when a chat saves and
then searches."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from threadmind.codecs import Message, Thread
from threadmind.stores import SQLiteStore
from threadmind.stores._keyword_blocks import RESOURCE, THREAD, KeywordBlock, KeywordBlocks
from threadmind.stores._keywords import (
    KeywordCandidate,
    KeywordMatches,
    count_words,
    keyword_ranking,
    query_terms,
    stem,
)
from threadmind.stores._sqlite import _fts as sql_keywords

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ("dog cat harbour marathon tokyo parrot garden violin recipe paint sunrise hiking chess bakery train river "
         "museum festival coffee novel").split()


def say(mid: str, text: str, thread: str, resource: str, i: int) -> Message:
    return Message.user(text, id=mid, thread_id=thread, resource_id=resource, created_at=BASE + timedelta(seconds=i))


async def corpus(store: SQLiteStore, seed: int, messages: int = 300) -> list[str]:
    """Messages of random words over two resources and six threads; returns the queries to ask."""
    rng = random.Random(seed)
    threads = [(f"t{i}", f"r{i % 2}") for i in range(6)]
    for thread_id, resource_id in threads:
        await store.create_thread(Thread(id=thread_id, resource_id=resource_id))
    for i in range(messages):
        thread_id, resource_id = rng.choice(threads)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        await store.save_messages(thread_id, [say(f"m{i}", text, thread_id, resource_id, i)])
    return [" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(40)]


def searched(path: Path, query: str, scope: tuple[str | None, str | None], blocks: KeywordBlocks | None,
             limit: int = 25) -> list[tuple[str, float]]:
    conn = sqlite3.connect(path)
    try:
        found = sql_keywords.search_keywords(conn, query_terms(query), scope[0], scope[1], limit, blocks=blocks)
    finally:
        conn.close()
    assert found is not None
    return [(c.message_id, c.score) for c in found.candidates]


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scope tokens whose rows were read whole to build a block, in order."""
    tokens: list[str] = []
    scope_rows = sql_keywords._scope_rows

    def counted(conn: sqlite3.Connection, token: str) -> list[tuple[str, str, str, str]]:
        tokens.append(token)
        return scope_rows(conn, token)

    monkeypatch.setattr(sql_keywords, "_scope_rows", counted)
    return tokens


async def test_a_block_answers_exactly_what_the_index_answers(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as store:
        queries = await corpus(store, seed=7)
        await store.keyword_search(["dog"], resource_id="r0", thread_id=None, limit=1)  # indexes what is queued
    blocks = KeywordBlocks()
    for query in queries:
        for scope in (("r0", None), ("r1", None), (None, "t3"), ("r1", "t3"), ("r0", "t3")):
            from_index = searched(path, query, scope, None)
            assert searched(path, query, scope, blocks) == from_index  # built
            assert searched(path, query, scope, blocks) == from_index  # cached
    assert len(blocks) == 3  # r0, r1, t3 (a thread asked within a resource uses the thread's block)


async def test_blocks_folds_grew_answer_exactly_what_the_index_answers(tmp_path: Path, builds: list[str]) -> None:
    """Blocks built by a first search, then grown by folds of saves of several messages each (ids out of their
    rows' order: x100 sorts before x98), answer as the index does, ties included, and are never read back."""
    path = tmp_path / "memory.db"
    scopes = (("r0", None), ("r1", None), (None, "t3"), ("r0", "t2"), (None, "t1"))
    async with SQLiteStore(path) as store:
        queries = await corpus(store, seed=11, messages=60)
        for resource, thread in scopes:
            await store.keyword_search(["dog"], resource_id=resource, thread_id=thread, limit=1)
        built = len(builds)
        rng = random.Random(3)
        for batch in range(8):  # several messages per save, their ids' order not their rows'
            thread_id = f"t{batch % 6}"
            await store.save_messages(thread_id, [
                say(f"x{100 - 7 * batch - k}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))),
                    thread_id, f"r{batch % 6 % 2}", 1000 + 10 * batch + k) for k in range(3)])
            await store.save_messages("t1", [say(f"quiet{batch}", "🙂", "t1", "r1", 2000 + batch)])  # no words
        await store.keyword_search(["dog"], resource_id="r0", thread_id=None, limit=1)  # folds what is queued
        for query in queries:
            for scope in scopes:
                assert searched(path, query, scope, store._keywords.blocks) == searched(path, query, scope, None)
        assert len(builds) == built  # grown by the folds, never read back


async def test_a_scope_another_store_object_created_is_read_whole(tmp_path: Path) -> None:
    """Rows a fold indexes into a scope that existed before it are not all of the scope: no block is made of them."""
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as first, SQLiteStore(path) as second:
        await first.create_thread(Thread(id="t1", resource_id="r1"))
        await first.save_messages("t1", [say("a", "the parrot sings", "t1", "r1", 0)])
        await first.keyword_search(["parrot"], resource_id="r1", thread_id=None, limit=5)
        await second.save_messages("t1", [say("b", "a parrot again", "t1", "r1", 1)])
        found = await second.keyword_search(["parrot"], resource_id="r1", thread_id="t1", limit=5)
        assert {c.message_id for c in found.candidates} == {"a", "b"} and found.docs == 2


async def test_a_scope_larger_than_a_block_is_searched_in_the_index(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as store:
        queries = await corpus(store, seed=8, messages=120)
        small = [await store.keyword_search(query_terms(q), resource_id="r0", thread_id=None, limit=10)
                 for q in queries]
        monkeypatch.setattr(sql_keywords, "BLOCK_SCOPE", 10)
        monkeypatch.setattr(sql_keywords, "SMALL_SCOPE", 10)
        large = [await store.keyword_search(query_terms(q), resource_id="r0", thread_id=None, limit=10)
                 for q in queries]
    for a, b in zip(small, large, strict=True):
        assert (a.docs, a.frequencies) == (b.docs, b.frequencies)
        # FTS5 picks the large scope's candidates by its own bm25: the best of them agree.
        assert a.candidates[:1] == b.candidates[:1] or a.candidates[0].score == b.candidates[0].score


async def test_every_change_through_another_store_object_is_seen(tmp_path: Path) -> None:
    """Two store objects on one file keep their blocks apart, as two processes do: the scope's version in the
    file tells a block it is out of date."""
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        await writer.create_thread(Thread(id="t1", resource_id="r1"))
        await writer.create_thread(Thread(id="t2", resource_id="r1"))
        await writer.save_messages("t1", [say("a", "the dog in the harbour", "t1", "r1", 1),
                                          say("b", "a cat asleep", "t1", "r1", 2)])

        async def found(query: str, resource: str = "r1") -> list[str]:
            matches = await reader.keyword_search(query_terms(query), resource_id=resource, thread_id=None,
                                                  limit=10)
            return [c.message_id for c in matches.candidates]

        assert await found("dog") == ["a"]
        await writer.save_messages("t2", [say("c", "dog show", "t2", "r1", 3)])
        assert set(await found("dog")) == {"a", "c"}
        await writer.update_messages([{"id": "b", "content": {"content": "a dog asleep"}}])
        assert set(await found("dog")) == {"a", "b", "c"} and await found("cat") == []
        await writer.delete_messages(["a"])
        assert set(await found("dog")) == {"b", "c"}
        await writer.update_thread_resource_id("t2", "r2")
        assert await found("dog") == ["b"] and await found("dog", "r2") == ["c"]
        await writer.delete_thread("t1")
        assert await found("dog") == [] and await found("asleep") == []
        assert len(reader._keywords.blocks) >= 1  # the reader did search from blocks


async def test_a_chat_that_saves_then_searches_keeps_its_block(tmp_path: Path, builds: list[str]) -> None:
    async with SQLiteStore(tmp_path / "memory.db") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        for i in range(20):
            await store.save_messages("t1", [say(f"m{i}", f"turn {i} about the parrot", "t1", "r1", i)])
            matches = await store.keyword_search(["parrot"], resource_id="r1", thread_id=None, limit=50)
            assert {c.message_id for c in matches.candidates} == {f"m{j}" for j in range(i + 1)}
            assert matches.docs == i + 1
        assert len(builds) == 1  # built once, then each fold appended the turn's message
        await store.update_messages([{"id": "m3", "content": {"content": "no bird here"}}])
        matches = await store.keyword_search(["parrot"], resource_id="r1", thread_id=None, limit=50)
        assert len(matches.candidates) == 19 and len(builds) == 2  # an update rebuilds


async def file_without(path: Path, columns: tuple[str, ...]) -> None:
    """A file with one searched message ("a", "the dog"), made before ``columns`` of the scopes' table existed."""
    async with SQLiteStore(path) as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [say("a", "the dog", "t1", "r1", 1)])
        await store.keyword_search(["dog"], resource_id="r1", thread_id=None, limit=1)
    conn = sqlite3.connect(path)
    for column in columns:
        conn.execute(f"ALTER TABLE threadmind_keyword_scopes DROP COLUMN {column}")
    conn.commit()
    conn.close()


async def test_a_file_from_before_scope_versions_opens(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    await file_without(path, ("version", "base", "last_rowid", "stamped"))
    async with SQLiteStore(path) as store:
        await store.save_messages("t1", [say("b", "another dog", "t1", "r1", 2)])
        matches = await store.keyword_search(["dog"], resource_id="r1", thread_id=None, limit=5)
        assert {c.message_id for c in matches.candidates} == {"a", "b"}


def test_blocks_advance_only_from_the_version_they_hold() -> None:
    def row(mid: str, text: str, resource: str = "r1") -> tuple[str, str, str, str]:
        return (mid, "t1", resource, " ".join(text.split()))

    blocks = KeywordBlocks(budget=10)
    blocks.put("k", 1, KeywordBlock((RESOURCE, "r1"), [row("a", "dog cat")]))
    blocks.advance("k", 1, 2, [row("b", "dog"), row("x", "dog", resource="r2")])  # r2's row is not of the scope
    found = blocks.matches("k", 2, (RESOURCE, "r1"), ["dog"], 10)
    assert found is not None and {c.message_id for c in found[0].candidates} == {"a", "b"}
    assert blocks.matches("k", 1, (RESOURCE, "r1"), ["dog"], 10) is None  # the old version is gone
    assert blocks.matches("k", 2, (RESOURCE, "r2"), ["dog"], 10) is None  # another owner under the same token
    blocks.advance("k", 2, 3, None)  # not only additions: dropped
    assert len(blocks) == 0
    blocks.put("k", 5, KeywordBlock((RESOURCE, "r1"), [row("a", "dog")]))
    blocks.advance("k", 4, 6, [row("b", "dog")])  # a change it missed: dropped
    assert len(blocks) == 0
    blocks.put("k", 7, KeywordBlock((RESOURCE, "r1"), [row("a", "dog")]))
    blocks.advance("k", 6, 7, [row("a", "dog")])  # a search built the new version meanwhile: kept
    assert blocks.matches("k", 7, (RESOURCE, "r1"), ["dog"], 10) is not None
    blocks.put("j", 1, KeywordBlock((RESOURCE, "r2"), [row(f"m{i}", "w1 w2", "r2") for i in range(5)]))  # 10 postings
    assert blocks.matches("k", 7, (RESOURCE, "r1"), ["dog"], 10) is None  # over the budget: least recent out
    blocks.put("big", 1, KeywordBlock((RESOURCE, "r1"), [row(f"m{i}", "w1 w2 w3") for i in range(4)]))
    assert blocks.matches("big", 1, (RESOURCE, "r1"), ["w1"], 10) is None  # alone over the budget: not kept


def test_rows_joining_forget_only_the_neighbours_kept_in_their_threads() -> None:
    block = KeywordBlock((RESOURCE, "r1"), [("a", "t1", "r1", "dog"), ("b", "t2", "r1", "cat")])
    for mid in ("a", "b", "x"):  # x is not the block's: not kept
        block.remember(mid, (None, None))
    assert set(block.neighbours) == {"a", "b"}
    epoch = block.epoch
    block.extend([("c", "t1", "r1", "")])  # a message of no words joins t1: not taken, but t1's order changed
    assert set(block.neighbours) == {"b"} and block.epoch == epoch + 1 and "c" not in block


def test_a_block_grown_after_searches_scores_as_one_built_whole() -> None:
    """The scores a block keeps per searched word (idf and saturation, which depend on the block's size and average
    length) are recomputed when messages join it: it then ranks exactly as a block built from all the rows."""
    rng = random.Random(5)
    rows = [(f"m{i}", f"t{i % 3}", "r1", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))))
            for i in range(80)]
    queries = [rng.sample(WORDS, rng.randint(1, 5)) for _ in range(30)]
    grown = KeywordBlock((RESOURCE, "r1"), rows[:40])
    for query in queries:
        grown.matches(query, 10)  # keeps the words' scores for 40 messages
    grown.extend(rows[40:])
    whole = KeywordBlock((RESOURCE, "r1"), rows)
    for query in queries:
        assert grown.matches(query, 10) == whole.matches(query, 10)


def test_a_block_scores_as_keyword_ranking_does() -> None:
    """The block's numpy scoring and ``keyword_ranking`` (which every store uses for candidates it counted itself)
    give the same candidates with the same scores."""
    rng = random.Random(9)
    rows = [(f"m{i}", "t1", "r1", " ".join(stem(rng.choice(WORDS)) for _ in range(rng.randint(1, 12))))
            for i in range(120)]
    block = KeywordBlock((RESOURCE, "r1"), rows)
    compared = 0
    for _ in range(40):
        terms = rng.sample(WORDS, rng.randint(1, 6))
        found = block.matches(terms, 200)
        wanted = frozenset(stem(term) for term in terms)
        every = [KeywordCandidate(mid, tid, rid, len(text.split()), count_words(text.split(), wanted))
                 for mid, tid, rid, text in rows]
        ranked = keyword_ranking(msgspec.structs.replace(found, candidates=[c for c in every if c.counts]), 200)
        assert [(c.message_id, c.score, c.counts) for c in found.candidates] == [
            (c.message_id, c.score, c.counts) for c in ranked]
        compared += len(ranked)
    assert compared > 1000


def test_a_block_asked_without_counts_ranks_the_same_and_counts_nothing() -> None:
    """``counts=False`` (what hybrid recall asks: it reads the scores alone) leaves the candidates' word counts
    empty and changes nothing else: the same candidates, scores and statistics."""
    rng = random.Random(11)
    rows = [(f"m{i}", f"t{i % 4}", "r1", " ".join(stem(rng.choice(WORDS)) for _ in range(rng.randint(1, 12))))
            for i in range(150)]
    block = KeywordBlock((RESOURCE, "r1"), rows)
    for _ in range(40):
        terms = rng.sample(WORDS, rng.randint(1, 6))
        counted, bare = block.matches(terms, 24), block.matches(terms, 24, counts=False)
        assert counted.candidates and all(c.counts for c in counted.candidates)
        assert all(c.counts == {} for c in bare.candidates)
        assert [msgspec.structs.replace(c, counts={}) for c in counted.candidates] == bare.candidates
        assert (bare.docs, bare.average_length, bare.frequencies) == (
            counted.docs, counted.average_length, counted.frequencies)


async def test_a_store_searched_without_counts_answers_as_with_them(tmp_path: Path) -> None:
    """Through the store, from a block built by the read and from memory: the same hits and neighbours with or
    without counts."""
    async with SQLiteStore(tmp_path / "memory.db") as store:
        queries = await corpus(store, seed=3)
        for query in queries:
            for resource_id, thread_id in (("r0", None), ("r1", None), (None, "t2"), ("r1", "t3")):
                terms = query_terms(query)
                bare = await store.keyword_search(terms, resource_id=resource_id, thread_id=thread_id, limit=24,
                                                  neighbours_of=["m1"], counts=False)
                counted = await store.keyword_search(terms, resource_id=resource_id, thread_id=thread_id, limit=24,
                                                     neighbours_of=["m1"])
                assert counted.candidates and all(c.counts for c in counted.candidates)
                assert bare == msgspec.structs.replace(counted, candidates=[
                    msgspec.structs.replace(c, counts={}) for c in counted.candidates])
        assert store.cache_statistics()["keyword_from_memory"] > 0


@pytest.mark.parametrize(("counted", "sparse"), [(False, False), (False, True), (True, False)],
                         ids=["stems", "stems-of-a-large-vocabulary", "counted"])
def test_a_block_built_whole_holds_what_one_grown_row_by_row_holds(counted: bool, sparse: bool) -> None:
    """The rows a block is built with are posted in one pass of numpy, the rows joining it one by one: both hold
    the same postings (PostgreSQL's counted rows as SQLite's stems), skip the same rows (no words, a message twice,
    another scope's) and answer every query alike, counts included. Words are tallied in place when the block's
    vocabulary is small against its postings, sorted when it is large (``sparse``: most words in one message)."""
    rng = random.Random(21 + counted + 2 * sparse)
    vocabulary = [*WORDS, *(f"rare{n}" for n in range(3000))] if sparse else WORDS
    rows: list[tuple[str, str, str, str]] = []
    for i in range(90):
        resource = "r2" if i % 17 == 0 else "r1"  # another scope's rows are left out
        text = "" if i % 13 == 0 else " ".join(stem(rng.choice(vocabulary)) for _ in range(rng.randint(1, 10)))
        rows.append((f"m{i % 80}", f"t{i % 5}", resource, text))  # the last ten repeat earlier messages

    def form(row: tuple[str, str, str, str]) -> tuple[str, str, str, str] | tuple[str, str, str, int, dict[str, int]]:
        if not counted:
            return row
        words = row[3].split()
        return (row[0], row[1], row[2], len(words) + 2, dict(count_words(words, set(words))))  # stored length

    built = KeywordBlock((RESOURCE, "r1"), [form(row) for row in rows])
    grown = KeywordBlock((RESOURCE, "r1"), [])
    for row in rows:
        grown.extend([form(row)])
    assert built.ids == grown.ids and built.size == grown.size and built.words == grown.words
    held = [r[0] for r in rows if (r[3] or counted) and r[2] == "r1"]  # a counted row's stored length is never 0
    assert built.ids == list(dict.fromkeys(held)) and len(built.ids) < len(rows) - 10
    distinct = {word for row in rows if row[2] == "r1" for word in row[3].split()}
    postings = sum(len(set(row[3].split())) for row in rows if row[2] == "r1")
    assert (len(distinct) * len(built.ids) > 8 * postings + 4096) == sparse  # which way the block was tallied
    for _ in range(40):
        terms = rng.sample(WORDS, rng.randint(1, 6)) + ([rng.choice(vocabulary)] if sparse else [])
        assert built.matches(terms, 30) == grown.matches(terms, 30)
    joining = [form((f"n{i}", "t1", "r1", " ".join(stem(rng.choice(WORDS)) for _ in range(5)))) for i in range(20)]
    built.extend(joining)
    grown.extend(joining)
    for _ in range(20):
        terms = rng.sample(WORDS, rng.randint(1, 6))
        assert built.matches(terms, 30) == grown.matches(terms, 30)


def test_the_blocks_most_recently_used_are_named_most_recent_last() -> None:
    blocks = KeywordBlocks()
    for token in ("a", "b", "c", "d"):
        blocks.put(token, 1, KeywordBlock((RESOURCE, token), [(f"m{token}", "t", token, "dog")]))
    assert blocks.get("b", 1, (RESOURCE, "b")) is not None  # used: now the most recent
    assert blocks.tokens(10) == ["a", "c", "d", "b"]
    assert blocks.tokens(2) == ["d", "b"]


async def test_a_threads_first_search_reads_its_words_and_its_order_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread's block is built with the order of all its messages (a message of no words between two of them
    included) read in the same statement: its first search needs no other read of neighbours, and they are what
    the store says."""
    reads: list[list[str]] = []
    neighbours_read = sql_keywords._neighbours_read

    def counted(conn: sqlite3.Connection, block: KeywordBlock, ids: list[str]) -> dict[str, tuple[str | None,
                                                                                                     str | None]]:
        reads.append(list(ids))
        return neighbours_read(conn, block, ids)

    monkeypatch.setattr(sql_keywords, "_neighbours_read", counted)
    async with SQLiteStore(tmp_path / "memory.db") as store:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        texts = ["the dog barked", "!!!", "a cat slept", "the dog again", "🙂", "garden at noon"]
        await store.save_messages("t1", [say(f"m{i}", text, "t1", "r1", i) for i, text in enumerate(texts)])
        found = await store.keyword_search(query_terms("dog cat"), resource_id=None, thread_id="t1", limit=10,
                                           neighbours_of=["m5"])
        assert {c.message_id for c in found.candidates} == {"m0", "m2", "m3"}
        assert reads == []
        assert found.neighbours == await store.neighbours(["m0", "m2", "m3", "m5"]) == {
            "m0": (None, "m1"), "m2": ("m1", "m3"), "m3": ("m2", "m4"), "m5": ("m4", None)}


async def test_the_index_rows_read_from_fts5s_content_table_are_the_rows_of_the_table(tmp_path: Path) -> None:
    """Whole index rows are read from FTS5's content table by rowid (``_fts``): its columns are the table's, in
    order, for every row."""
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as store:
        await corpus(store, seed=3, messages=40)
        await store.keyword_search(query_terms("dog"), resource_id="r0", thread_id=None, limit=5)  # folded
    with sqlite3.connect(path) as conn:
        through_table = conn.execute("SELECT rowid, scope, message_id, words, tokens FROM threadmind_keywords "
                                     "ORDER BY rowid").fetchall()
        content = conn.execute(f"SELECT id, {sql_keywords._C_SCOPE}, {sql_keywords._C_ID}, {sql_keywords._C_WORDS}, "
                               f"{sql_keywords._C_TOKENS} FROM {sql_keywords._CONTENT} ORDER BY id").fetchall()
    assert len(through_table) == 40 and content == through_table


def test_a_block_that_grew_lets_go_of_the_scores_it_was_built_with() -> None:
    """Once rows join a block, its words are scored one by one: the arrays scored for the built rows at once, and
    the words kept from them, are let go (not held beside the new postings)."""
    block = KeywordBlock((RESOURCE, "r1"), [("m1", "t1", "r1", "dog cat"), ("m2", "t1", "r1", "cat")])
    before = block.matches(["dog", "cat"], 5)
    built = block._built
    assert built is not None and built.words and built._scores is not None
    block.extend([("m3", "t1", "r1", "dog dog")])
    assert not built.words and built._scores is None
    after = block.matches(["dog", "cat"], 5)
    assert {c.message_id for c in after.candidates} == {c.message_id for c in before.candidates} | {"m3"}


@pytest.fixture
def thread_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads whose block was built (their rows read whole, or made from their resource's block), in order."""
    threads: list[str] = []
    thread_rows, thread_part = sql_keywords._thread_rows, sql_keywords._thread_part

    def counted(conn: sqlite3.Connection, thread_id: str) -> tuple[list[tuple[str, str, str, str]],
                                                                    dict[str, tuple[str | None, str | None]]]:
        threads.append(thread_id)
        return thread_rows(conn, thread_id)

    def counted_part(conn: sqlite3.Connection, blocks: KeywordBlocks, owner: tuple[str, str], *args: Any,
                     ) -> KeywordBlock | None:
        part = thread_part(conn, blocks, owner, *args)
        if part is not None:
            threads.append(owner[1])
        return part

    monkeypatch.setattr(sql_keywords, "_thread_rows", counted)
    monkeypatch.setattr(sql_keywords, "_thread_part", counted_part)
    return threads


@pytest.fixture
def appended(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scope tokens whose messages past a rowid were read for a block to take them, in order."""
    tokens: list[str] = []
    read = sql_keywords._appended

    def counted(conn: sqlite3.Connection, token: str, threads: list[str], last: int) -> list[tuple[str, str, str,
                                                                                                  str]]:
        tokens.append(token)
        return read(conn, token, threads, last)

    monkeypatch.setattr(sql_keywords, "_appended", counted)
    return tokens


async def fold_in(store: SQLiteStore) -> None:
    """Wait for the store's background fold to index what its writes queued (so the reader does not fold them)."""
    with anyio.fail_after(10):
        while await store.execute_read(sql_keywords.queued):  # noqa: ASYNC110 (a fold on another thread)
            await anyio.sleep(0.005)


@pytest.mark.parametrize("pairs_read", [True, False], ids=["neighbours patched", "threads read again"])
async def test_a_block_takes_what_another_store_object_appended_without_reading_its_scope_again(
        tmp_path: Path, builds: list[str], thread_builds: list[str], appended: list[str], pairs_read: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages another store object (another process) saved into a scope reach a block kept here by a read of those
    messages alone: the block then answers what the index answers, ties and neighbours included (messages of no
    words between them, or saved alone next to one the block keeps, others created before messages already there,
    a new thread, several saves between two searches), and the scope is never read whole again. Past
    ``CAUGHT_UP_PAIRS`` new messages, their neighbours are not read with them: the block forgets those of their
    threads and reads them again at the next miss."""
    if not pairs_read:
        monkeypatch.setattr(sql_keywords, "CAUGHT_UP_PAIRS", 0)
    path = tmp_path / "memory.db"
    scopes = (("r0", None), ("r1", None), (None, "t3"), (None, "t1"))
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        queries = await corpus(writer, seed=5, messages=60)
        for resource, thread in scopes:
            await reader.keyword_search(["dog"], resource_id=resource, thread_id=thread, limit=1)
        assert (len(builds), len(thread_builds)) == (2, 2)
        await writer.create_thread(Thread(id="t9", resource_id="r1"))
        rng = random.Random(4)
        for turn in range(6):
            if turn:  # one of no words, alone, right after the previous turn's first message in t1 (kept by now)
                await writer.save_messages("t1", [say(f"t1-{turn - 1}-alone", "!!", "t1", "r1", 990 + 10 * turn)])
            for thread_id, resource_id in (("t1", "r1"), ("t3", "r1"), ("t9", "r1"), ("t0", "r0")):
                at = 1000 + 10 * turn
                await writer.save_messages(thread_id, [
                    say(f"{thread_id}-{turn}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))),
                        thread_id, resource_id, at),
                    say(f"{thread_id}-{turn}-quiet", "🙂", thread_id, resource_id, at + 1),  # no words
                    say(f"{thread_id}-{turn}-early", "dog garden", thread_id, resource_id, 7 * turn + 3)])  # among
            await fold_in(writer)
            if turn % 2:
                continue
            for query in queries[:10]:
                for resource, thread in scopes:
                    terms = query_terms(query)
                    mine = await reader.keyword_search(terms, resource_id=resource, thread_id=thread, limit=25,
                                                       neighbours_of=["t1-0-quiet"])
                    assert [(c.message_id, c.score) for c in mine.candidates] == searched(
                        path, query, (resource, thread), None)
                    asked = [c.message_id for c in mine.candidates] + ["t1-0-quiet"]
                    assert mine.neighbours == await writer.neighbours(asked)
        assert (len(builds), len(thread_builds)) == (2, 2)  # followed, never read whole again
        assert len(appended) == 3 * len(scopes)  # each scope's first search after the writer's saves read them
        for resource, thread in scopes:  # every neighbour a block keeps (brought up to date, not read) is the file's
            await reader.keyword_search(["dog"], resource_id=resource, thread_id=thread, limit=1)  # (turn 5's)
            held = reader._keywords.blocks.held(sql_keywords.scope_token(resource, thread),
                                                (THREAD, thread) if thread else (RESOURCE, resource or ""))
            assert held is not None
            kept = {mid: pair for mid, pair in held[1].neighbours.items() if pair is not None}
            assert kept == await writer.neighbours(list(kept))
            assert len(kept) > 10 or not pairs_read  # (forgotten, then read again only at misses)
        statistics = reader.cache_statistics()
        assert (statistics["keyword_built"], statistics["keyword_followed"]) == (4, 4 * len(scopes))


async def test_a_block_is_read_whole_again_after_any_other_change_made_elsewhere(
        tmp_path: Path, builds: list[str]) -> None:
    """An update (even one keeping the message's number of words), a deletion, a thread moved, or a row indexed
    below the rows the scope already had (one Mastra wrote, indexed late) is not an append: the block is read whole
    again, and answers as the index does."""
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        for at, (thread, texts) in enumerate({"t1": ["dog harbour", "cat garden"], "t2": ["dog show"]}.items()):
            await writer.create_thread(Thread(id=thread, resource_id="r1"))
            await writer.save_messages(thread, [say("abc"[2 * at + i], text, thread, "r1", 2 * at + i + 1)
                                                for i, text in enumerate(texts)])

        async def found(query: str, fold: bool = True) -> set[str]:
            if fold:
                await fold_in(writer)
            matches = await reader.keyword_search(query_terms(query), resource_id="r1", thread_id=None, limit=10)
            assert [(c.message_id, c.score) for c in matches.candidates] == searched(path, query, ("r1", None), None)
            return {c.message_id for c in matches.candidates}

        assert await found("dog") == {"a", "c"} and len(builds) == 1
        await writer.update_messages([{"id": "b", "content": {"content": "dog violin"}}])  # two words still
        assert await found("dog") == {"a", "b", "c"} and await found("cat") == set() and len(builds) == 2
        await writer.save_messages("t1", [say("d", "dog river", "t1", "r1", 4)])  # an append: followed
        assert await found("river") == {"d"} and len(builds) == 2
        assert await found("river", fold=False) == {"d"}  # (a second search: no write between, no fold)
        await writer.delete_messages(["a"])
        assert await found("dog") == {"b", "c", "d"} and len(builds) == 3
        await writer.update_thread_resource_id("t2", "r2")
        assert await found("dog") == {"b", "d"} and len(builds) == 4
        # A row Mastra wrote (no index row, no queue), then one of threadmind's after it, folded first: the catch-up
        # indexes Mastra's below the scope's highest rowid.
        with sqlite3.connect(path) as conn:
            conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                         'SELECT \'e\', thread_id, replace(content, \'dog violin\', \'dog chess\'), role, type, '
                         '"createdAt", "resourceId" FROM mastra_messages WHERE id = \'b\'')
        conn.close()
        await writer.save_messages("t1", [say("f", "dog museum", "t1", "r1", 5)])
        assert await found("museum") == {"f"} and await found("chess", fold=False) == set() and len(builds) == 4
        assert await writer.build_keyword_index() == 1
        # (a write this process counts, elsewhere: the raw insert above was not, as another process's would be)
        await writer.save_messages("t2", [say("g", "elsewhere", "t2", "r2", 9)])
        assert await found("chess") == {"e"} and len(builds) == 5


async def test_a_restarts_catch_up_of_messages_of_no_words_keeps_the_blocks_elsewhere_following(
        tmp_path: Path, builds: list[str], thread_builds: list[str]) -> None:
    """Messages of no words never get an index row, so a process starting on the file finds them again past its
    catch-up watermark (those this code saved, and one Mastra wrote below the scope's highest rowid): taking them
    moves their scopes' versions but keeps their lineages, so a block kept by another process follows (reads what
    was appended, not the scope) and still answers what the index answers, neighbours included."""
    path = tmp_path / "memory.db"
    scopes = (("r1", None), (None, "t1"))
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        await writer.create_thread(Thread(id="t1", resource_id="r1"))
        await writer.save_messages("t1", [say("a", "dog harbour", "t1", "r1", 1), say("b", "🙂", "t1", "r1", 2),
                                          say("c", "cat garden", "t1", "r1", 3)])
        await fold_in(writer)

        async def answers(query: str) -> None:
            for resource, thread in scopes:
                mine = await reader.keyword_search(query_terms(query), resource_id=resource, thread_id=thread,
                                                   limit=10, neighbours_of=["b"])
                assert [(c.message_id, c.score) for c in mine.candidates] == searched(
                    path, query, (resource, thread), None)
                assert mine.neighbours == await writer.neighbours([c.message_id for c in mine.candidates] + ["b"])

        await answers("dog cat")
        assert (len(builds), len(thread_builds)) == (1, 1)
        with sqlite3.connect(path) as conn:  # Mastra writes a message of no words; threadmind saves after it
            conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                         "SELECT 'q', thread_id, content, role, type, '2025-03-01T09:00:03.500Z', \"resourceId\" "
                         "FROM mastra_messages WHERE id = 'b'")
        conn.close()
        await writer.save_messages("t1", [say("d", "dog river", "t1", "r1", 4), say("e", "!!", "t1", "r1", 5)])
        await fold_in(writer)
        await answers("dog river")
        token = sql_keywords.scope_token("r1", None)

        def lineage(conn: sqlite3.Connection) -> tuple[int, int]:
            base, version = conn.execute("SELECT base, version FROM threadmind_keyword_scopes WHERE token = ?",
                                         (token,)).fetchone()
            return int(base), int(version)

        before = await writer.execute_read(lineage)
        async with SQLiteStore(path) as restarted:  # another process starts: its catch-up takes b, q and e again
            assert await restarted.build_keyword_index() == 0
        after = await writer.execute_read(lineage)
        assert after[0] == before[0] and after[1] != before[1]  # a new version of the same lineage
        await answers("dog cat river")
        assert (len(builds), len(thread_builds)) == (1, 1)  # followed, never read whole again
        assert reader.cache_statistics()["keyword_followed"] >= 4


async def test_a_scope_changed_by_a_writer_that_keeps_no_lineage_is_read_whole_again(
        tmp_path: Path, builds: list[str]) -> None:
    """A writer that does not know the lineage columns (a threadmind older than them) leaves them behind when it
    changes a scope: the change is not taken for an append, even when it keeps the scope's counts."""
    path = tmp_path / "memory.db"
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        await writer.create_thread(Thread(id="t1", resource_id="r1"))
        await writer.save_messages("t1", [say("a", "dog harbour", "t1", "r1", 1),
                                          say("b", "cat garden", "t1", "r1", 2)])
        first = await reader.keyword_search(["cat"], resource_id="r1", thread_id=None, limit=10)
        assert [c.message_id for c in first.candidates] == ["b"] and len(builds) == 1
        token = sql_keywords.scope_token("r1", None)

        def older_writer(conn: sqlite3.Connection) -> None:  # b's words rewritten, counts kept, version alone moved
            rowid, scope = conn.execute(
                "SELECT rowid, scope FROM threadmind_keywords WHERE message_id = 'b'").fetchone()
            conn.execute("DELETE FROM threadmind_keywords WHERE rowid = ?", (rowid,))
            conn.execute("INSERT INTO threadmind_keywords (rowid, text, scope, message_id, words, tokens) "
                         "VALUES (?, 'dog violin', ?, 'b', 2, 'dog violin')", (rowid, scope))
            conn.execute("UPDATE threadmind_keyword_scopes SET version = version + 1 WHERE token = ?", (token,))

        await writer.execute_write(older_writer)
        # then this code appends to the scope (its rowid past the scope's highest): the lineage is not kept
        await writer.save_messages("t1", [say("c", "a parrot", "t1", "r1", 3)])
        await fold_in(writer)
        again = await reader.keyword_search(["dog", "parrot"], resource_id="r1", thread_id=None, limit=10)
        assert {c.message_id for c in again.candidates} == {"a", "b", "c"} and len(builds) == 2


async def test_a_file_from_before_scope_lineages_opens_and_follows_appends(tmp_path: Path, builds: list[str]) -> None:
    path = tmp_path / "memory.db"
    await file_without(path, ("base", "last_rowid", "stamped"))
    async with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        assert {c.message_id for c in (await reader.keyword_search(
            ["dog"], resource_id="r1", thread_id=None, limit=5)).candidates} == {"a"}
        for i in range(3):
            await writer.save_messages("t1", [say(f"b{i}", "another dog", "t1", "r1", 2 + i)])
            await fold_in(writer)
            matches = await reader.keyword_search(["dog"], resource_id="r1", thread_id=None, limit=5)
            assert {c.message_id for c in matches.candidates} == {"a", *(f"b{j}" for j in range(i + 1))}
        # the first change after the columns were added starts a lineage; the appends after it are followed
        assert len(builds) == 3


def test_rows_joining_with_their_neighbours_bring_those_kept_up_to_date() -> None:
    """Given the new messages' neighbours, a block updates what it kept in their threads (a message inserted between
    two, one at the end) instead of forgetting it; a new message whose pair was not read makes its thread forgotten."""
    block = KeywordBlock((RESOURCE, "r1"), [("a", "t1", "r1", "dog"), ("c", "t1", "r1", "cat"),
                                           ("x", "t2", "r1", "owl")])
    for mid, pair in {"a": (None, "c"), "c": ("a", None), "x": (None, None)}.items():
        block.remember(mid, pair)
    block.extend([("b", "t1", "r1", "dog cat"), ("d", "t1", "r1", "")],  # b between a and c; d (no words) after c
                 {"b": ("a", "c"), "d": ("c", None)})
    assert block.neighbours == {"a": (None, "b"), "b": ("a", "c"), "c": ("b", "d"), "x": (None, None)}
    block.extend([("e", "t1", "r1", "dog")], {})
    assert block.neighbours == {"x": (None, None)} and block.unread_threads(10) == ["t1"]


def test_a_threads_part_of_its_resources_block_answers_as_one_built_from_its_rows() -> None:
    """A thread's block made from its resource's block (no rows read) holds what a block built from the thread's
    rows holds (messages, order, lengths, postings) and answers every query alike, counts included; a thread with
    no message in the block, or one a message joined after the build, has no part."""
    rng = random.Random(8)
    rows = [(f"m{i}", f"t{i % 4}", "r1",
             "" if i % 11 == 0 else " ".join(stem(rng.choice(WORDS)) for _ in range(rng.randint(1, 12))))
            for i in range(120)]
    resource = KeywordBlock((RESOURCE, "r1"), rows)
    for thread in ("t0", "t1", "t2", "t3"):
        part = resource.part((THREAD, thread), thread)
        whole = KeywordBlock((THREAD, thread), [row for row in rows if row[1] == thread])
        assert part is not None
        assert (part.ids, part.threads, part.resources, part.words, part.size) == (
            whole.ids, whole.threads, whole.resources, whole.words, whole.size)
        for _ in range(30):
            terms = rng.sample(WORDS, rng.randint(1, 6)) + ["absent"]
            assert part.matches(terms, 40) == whole.matches(terms, 40)
            assert part.matches(terms, 3, counts=False) == whole.matches(terms, 3, counts=False)
    assert resource.part((THREAD, "t9"), "t9") is None
    resource.extend([("n1", "t2", "r1", "dog cat")])
    assert resource.part((THREAD, "t2"), "t2") is None  # a message joined it after the build
    assert resource.part((THREAD, "t1"), "t1") is not None


async def test_a_threads_first_search_after_its_resources_takes_its_words_from_the_resources_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread searched (alone, or within its resource) after its resource was: its block comes from the resource's
    (its rows are not read), and it answers what a store that reads them answers, neighbours included. A thread
    with a message filed under another resource is read as before."""
    thread_reads: list[str] = []
    thread_rows = sql_keywords._thread_rows

    def counted(conn: sqlite3.Connection, thread_id: str) -> Any:
        thread_reads.append(thread_id)
        return thread_rows(conn, thread_id)

    monkeypatch.setattr(sql_keywords, "_thread_rows", counted)
    path = tmp_path / "memory.db"
    scopes: tuple[tuple[str, str | None], ...] = (  # (a thread alone: recall's thread scope)
        ("t0", "r0"), ("t1", None), ("t2", None), ("t3", "r1"))
    answers: dict[tuple[str, str], KeywordMatches] = {}
    async with SQLiteStore(path) as store:
        queries = await corpus(store, seed=5, messages=200)
    with sqlite3.connect(path) as conn:  # a row another writer (Mastra) filed under r1 in r0's thread t2
        columns = [row[1] for row in conn.execute("PRAGMA table_info(mastra_messages)")]
        listed = ", ".join(f'"{c}"' for c in columns)
        picked = ", ".join({"id": "'stray'", "thread_id": "'t2'", "resourceId": "'r1'"}.get(c, f'"{c}"')
                           for c in columns)
        conn.execute(f"INSERT INTO mastra_messages ({listed}) SELECT {picked} FROM mastra_messages WHERE id = 'm0'")
    async with SQLiteStore(path) as store:
        await store.build_keyword_index()  # (indexes the row written without threadmind)
        for owner in ("r0", "r1"):
            await store.keyword_search(query_terms("dog"), resource_id=owner, thread_id=None, limit=5)
        for query in queries[:8]:
            for thread_id, resource_id in scopes:
                answers[query, thread_id] = await store.keyword_search(
                    query_terms(query), resource_id=resource_id, thread_id=thread_id, limit=30,
                    neighbours_of=["m7"])
        assert thread_reads == ["t2"]  # its stray message is not in r0's block
    async with SQLiteStore(path) as fresh:  # no resource searched first: every thread read from its rows
        for query in queries[:8]:
            for thread_id, resource_id in scopes:
                assert answers[query, thread_id] == await fresh.keyword_search(
                    query_terms(query), resource_id=resource_id, thread_id=thread_id, limit=30,
                    neighbours_of=["m7"])
    assert thread_reads == ["t2", "t0", "t1", "t2", "t3"]
