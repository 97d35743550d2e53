"""The keyword index every store keeps: found by words as soon as a save returns, exact after every change, never
outside its scope, never a query-syntax error, and built for messages written without it."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadmind.codecs import Message, Thread, message_to_dict
from threadmind.stores._keywords import KeywordSearch, keyword_ranking, query_terms, stem, text_tokens
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._postgres import PostgresStore
from threadmind.stores._protocol import Store
from threadmind.stores._sqlite import SQLiteStore

from ._support import parametrize_stores

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_stores(metafunc)


def say(mid: str, text: str, thread: str = "t1", resource: str = "r1", i: int = 0) -> Message:
    return Message.user(text, id=mid, thread_id=thread, resource_id=resource, created_at=BASE + timedelta(seconds=i))


async def find(store: Store, query: str, *, resource: str | None = "r1", thread: str | None = None,
               limit: int = 10) -> list[str]:
    """The messages a keyword search of the store ranks first (BM25 with the scope's statistics x coverage)."""
    assert isinstance(store, KeywordSearch)
    matches = await store.keyword_search(query_terms(query), resource_id=resource, thread_id=thread, limit=limit)
    assert len(matches.candidates) <= limit
    for candidate in matches.candidates:
        assert candidate.counts and all(matches.frequencies[lexeme] >= 1 for lexeme in candidate.counts)
        assert (resource is None or candidate.resource_id == resource) and \
            (thread is None or candidate.thread_id == thread)
    # Every store scores its candidates as keyword_ranking does from their counts, and returns them best first.
    scores = [candidate.score for candidate in matches.candidates]
    assert scores == sorted(scores, reverse=True) and all(score >= 0 for score in scores)
    rescored = {c.message_id: c.score for c in keyword_ranking(matches, len(matches.candidates))}
    assert rescored == pytest.approx({c.message_id: c.score for c in matches.candidates}, rel=1e-8)
    return [candidate.message_id for candidate in matches.candidates]


async def seeded(store: Store) -> None:
    await store.create_thread(Thread(id="t1", resource_id="r1"))
    await store.create_thread(Thread(id="t2", resource_id="r1"))
    await store.create_thread(Thread(id="t3", resource_id="r2"))
    await store.save_messages("t1", [say("a", "We walked the dog along the harbour at dawn", i=1),
                                     say("b", "The cat sleeps all day", i=2),
                                     say("c", "Dogs, dogs everywhere: the dog show was loud", i=3)])
    await store.save_messages("t2", [say("d", "Running a marathon in Tokyo next spring", "t2", i=4)])
    await store.save_messages("t3", [say("e", "My dog runs in the harbour too", "t3", "r2", i=5)])


class TestWrites:
    through_pgbouncer = True

    async def test_a_save_is_found_by_its_words_at_once_best_first(self, store: Store) -> None:
        await seeded(store)
        assert await find(store, "the dog") == ["c", "a"]  # "dog" three times beats once; "the" is not a word
        assert await find(store, "who runs marathons?") == ["d"]  # stems: runs/running, marathons/marathon
        assert await find(store, "HARBOUR") == ["a"]
        assert await find(store, "submarine") == []

    async def test_no_hit_ever_leaves_its_scope(self, store: Store) -> None:
        await seeded(store)
        assert await find(store, "dog harbour", resource="r2") == ["e"]
        assert set(await find(store, "dog harbour")) == {"a", "c"}
        assert await find(store, "dog", resource=None, thread="t2") == []
        assert await find(store, "marathon", resource="r1", thread="t2") == ["d"]
        assert await find(store, "marathon", resource="r2", thread="t2") == []  # thread and resource both hold

    async def test_updates_deletes_moves_and_clones_keep_it_exact(self, store: Store) -> None:
        await seeded(store)
        await store.update_messages([{"id": "b", "content": {"content": "The cat chased a dog"}}])
        assert set(await find(store, "dog")) == {"a", "b", "c"} and await find(store, "sleeps") == []
        await store.delete_messages(["a"])
        assert set(await find(store, "dog")) == {"b", "c"}
        await store.save_messages("t1", [say("a", "back again, about a parrot", i=1)])  # the id comes back
        assert await find(store, "parrot") == ["a"] and "a" not in await find(store, "dog")
        await store.update_thread_resource_id("t1", "r2")
        assert set(await find(store, "dog", resource="r2")) == {"b", "c", "e"}
        assert await find(store, "dog", resource="r1") == []
        await store.delete_thread("t1")
        assert await find(store, "dog", resource="r2") == ["e"]
        clone = [say("x", "a clone of the marathon plan", "t9", "r1")]
        await store.create_thread_with_messages(Thread(id="t9", resource_id="r1"), clone)
        assert set(await find(store, "marathon")) == {"d", "x"}

    async def test_a_message_without_words_is_stored_and_found_by_what_it_has(self, store: Store) -> None:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [say("e1", "🎉🎉🎉", i=1), say("e2", "日本語 テキスト", i=2),
                                         say("e3", "def f(x): return x**2  # squares", i=3)])
        assert await find(store, "🎉") == []
        assert await find(store, "日本語") == ["e2"]
        assert await find(store, "return squares") == ["e3"]
        assert len(await store.get_messages_by_id(["e1", "e2", "e3"])) == 3


class TestNeighbours:
    async def test_each_message_knows_the_ones_before_and_after_it_in_its_thread(self, store: Store) -> None:
        await seeded(store)
        same_time = [say(f"s{i}", f"tie {i}", "t2", i=9) for i in range(3)]  # equal times keep their save order
        await store.save_messages("t2", same_time)
        assert isinstance(store, KeywordSearch)
        found = await store.neighbours(["a", "b", "c", "d", "s0", "s1", "s2", "e", "ghost"])
        assert found == {"a": (None, "b"), "b": ("a", "c"), "c": ("b", None), "d": (None, "s0"),
                         "s0": ("d", "s1"), "s1": ("s0", "s2"), "s2": ("s1", None), "e": (None, None)}

    async def test_a_search_reads_the_neighbours_of_its_candidates_and_of_the_messages_named(
            self, store: Store) -> None:
        """What hybrid recall asks in one trip: the keyword candidates, and the neighbours of those and of the
        vector side's candidates."""
        await seeded(store)
        assert isinstance(store, KeywordSearch)
        matches = await store.keyword_search(query_terms("dog"), resource_id="r1", thread_id=None, limit=10,
                                             neighbours_of=["d", "ghost"])
        assert [c.message_id for c in matches.candidates] == ["c", "a"]
        assert matches.neighbours == await store.neighbours(["c", "a", "d", "ghost"])
        assert matches.neighbours == {"a": (None, "b"), "c": ("b", None), "d": (None, None)}
        plain = await store.keyword_search(query_terms("dog"), resource_id="r1", thread_id=None, limit=10)
        assert plain.neighbours == {} and plain.candidates == matches.candidates  # not asked: not read
        words_only = await store.keyword_search([], resource_id="r1", thread_id=None, limit=10, neighbours_of=["b"])
        assert words_only.candidates == [] and words_only.neighbours == {"b": ("a", "c")}


    async def test_neighbours_kept_between_searches_follow_every_change_of_a_threads_order(
            self, store: Store) -> None:
        """A store may keep the neighbours a search read (SQLite and PostgreSQL keep them with the scope's words):
        saves, updates and deletions of messages with no words at all, and a thread moving away, still show."""
        await seeded(store)
        assert isinstance(store, KeywordSearch)

        async def searched(resource: str = "r1") -> dict[str, tuple[str | None, str | None]]:
            named = ["a", "b", "c", "d", "q1", "q2"]
            first = await store.keyword_search(query_terms("dog cat"), resource_id=resource, thread_id=None,
                                               limit=10, neighbours_of=named)
            again = await store.keyword_search(query_terms("dog cat"), resource_id=resource, thread_id=None,
                                               limit=10, neighbours_of=named)  # answered from what was kept
            assert again == first
            truth = await store.neighbours([c.message_id for c in first.candidates] + named)
            assert first.neighbours == truth
            return truth

        assert (await searched())["a"] == (None, "b")
        await store.save_messages("t1", [Message.user("🎉", id="q1", thread_id="t1", resource_id="r1",
                                                      created_at=BASE + timedelta(seconds=1.5))])
        assert (await searched())["a"] == (None, "q1")  # a message of no words between a and b
        await store.update_messages([{"id": "q1", "createdAt": BASE + timedelta(seconds=2.5)}])
        now = await searched()
        assert now["a"] == (None, "b") and now["q1"] == ("b", "c")  # it moved between b and c
        await store.save_messages("t1", [Message.user("🎈", id="q2", thread_id="t1", resource_id="r1",
                                                      created_at=BASE + timedelta(seconds=0.5))])
        assert (await searched())["a"] == ("q2", "b")
        await store.delete_messages(["q1", "q2"])
        now = await searched()
        assert now["a"] == (None, "b") and now["c"] == ("b", None) and "q1" not in now
        await store.update_thread_resource_id("t1", "r2")
        assert "a" not in [c.message_id for c in (await store.keyword_search(
            query_terms("dog"), resource_id="r1", thread_id=None, limit=10, neighbours_of=["a"])).candidates]
        await searched("r2")
        await store.delete_thread("t1")
        assert "a" not in await searched()


class TestQueries:
    @pytest.mark.parametrize("query", [
        '"', '"unbalanced', "NEAR(dog harbour, 2)", "dog*", "-dog", "text:dog", "dog OR", "AND NOT", "(dog",
        "dog)", "\x00dog", "\ud800dog", "' OR 1=1 --", "\\", "dog & | ! <->", "🐶" * 3000, "dog " * 3000,
        "scope : x", "*", "^dog", "{text scope}: dog",
    ])
    async def test_a_query_is_text_never_syntax(self, store: Store, query: str) -> None:
        await seeded(store)
        found = await find(store, query)
        assert set(found) <= {"a", "c"}  # dog matches, or nothing: never an error, never another resource

    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.text(max_size=300))
    async def test_any_text_is_a_query(self, store: Store, query: str) -> None:
        if not await store.get_thread("t1"):
            await seeded(store)
        assert set(await find(store, query)) <= {"a", "b", "c", "d"}

    def test_the_python_tokenizer_cuts_words_as_fts5_does(self) -> None:
        """The in-memory and PostgreSQL indexes cut words in Python; they must agree with SQLite's FTS5."""
        text = ("Running runners ran; caresses ponies agreed, conditional rationalization HOPEFULNESS "
                "Café naïve résumé 日本語 x_y 42nd r2d2 generalizations")
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'porter unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
        conn.execute("INSERT INTO f VALUES (?)", (text,))
        expected = [term for term, *_ in conn.execute("SELECT term, doc, col, offset FROM v ORDER BY offset")]
        assert text_tokens(text) == expected
        assert stem("generalizations") == "gener" and stem("42nd") == "42nd"


class TestCatchUp:
    async def test_messages_written_without_the_index_are_indexed_in_batches(self, store: Store,
                                                                            tmp_path: Path) -> None:
        """What Mastra writes into the same database has no index rows until the store builds them."""
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await store.save_messages("t1", [say("m0", "already indexed parrot", i=0)])
        rows = [say(f"m{i}", f"note {i} about a mastra written parrot", i=i) for i in range(1, 1203)]
        await write_behind_the_index(store, rows)
        in_memory = isinstance(store, InMemoryStore)
        assert isinstance(store, KeywordSearch)
        assert in_memory or await store.keyword_backlog() >= 1202
        seen: list[tuple[int, int]] = []
        await store.build_keyword_index(lambda done, total: seen.append((done, total)))
        assert set(await find(store, "parrot", limit=2000)) == {f"m{i}" for i in range(1203)}
        assert await store.build_keyword_index() == 0  # nothing left
        if not in_memory:
            assert len(seen) >= 3 and seen[-1][0] >= 1202  # bounded batches, with progress

    async def test_progress_ends_complete_when_another_indexed_part_meanwhile(
            self, store: Store, tmp_path: Path, request: pytest.FixtureRequest,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """The backlog counted at the start may be indexed partly by someone else (another process; on SQLite the
        background fold of a save's queue): the build's last progress still says the index is complete."""
        if isinstance(store, InMemoryStore):
            pytest.skip("nothing to build: the words are read from the messages themselves")
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await write_behind_the_index(store, [say(f"m{i}", f"note {i} about a parrot", i=i) for i in range(1, 701)])
        other: Any = (SQLiteStore(tmp_path / "memory.db") if isinstance(store, SQLiteStore)
                      else PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2))
        assert isinstance(store, KeywordSearch)
        keywords: Any = store._keywords  # type: ignore[attr-defined]
        counted = keywords.backlog

        async def backlog_then_another_builds_it_all() -> int:
            total = int(await counted())
            async with other:
                assert await other.build_keyword_index() == 700
            return total

        monkeypatch.setattr(keywords, "backlog", backlog_then_another_builds_it_all)
        seen: list[tuple[int, int]] = []
        assert await store.build_keyword_index(lambda done, total: seen.append((done, total))) == 0
        assert seen == [(700, 700)]
        assert len(await find(store, "parrot", limit=1000)) == 700


async def write_behind_the_index(store: Store, messages: list[Message]) -> None:
    """Insert message rows as another program would: straight into Mastra's table."""
    rows = [(m.id, m.thread_id, message_to_dict(m)["content"], m.role, m.created_at, m.resource_id) for m in messages]
    if isinstance(store, SQLiteStore):
        import json

        def insert(conn: sqlite3.Connection) -> None:
            conn.executemany('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", '
                             '"resourceId") VALUES (?, ?, ?, ?, \'v2\', ?, ?)',
                             [(i, t, json.dumps(c), r, at.isoformat().replace("+00:00", "Z"), res)
                              for i, t, c, r, at, res in rows])

        await store.execute_write(insert)
    elif isinstance(store, PostgresStore):
        import json

        async def run(conn: Any) -> None:
            await conn.executemany(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "createdAtZ", '
                '"resourceId") VALUES ($1, $2, $3, $4, \'v2\', $5, $6, $7)',
                [(i, t, json.dumps(c), r, at.replace(tzinfo=None), at, res) for i, t, c, r, at, res in rows])

        await store.run_write(run, "test insert")
    else:
        await store.save_messages("t1", messages)  # the in-memory store has nothing to write behind
