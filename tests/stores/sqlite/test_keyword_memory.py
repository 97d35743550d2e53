"""SQLite keyword searches answered from memory: only while nothing was written to the file since the scope's last
search, through any store object of this process or by any other process (one that came and went included)."""

from __future__ import annotations

import sqlite3
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.codecs import Message, Thread
from threadmind.stores._keywords import query_terms
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._sqlite import _fold as _sqlite_fold
from threadmind.stores._sqlite._fts import queued

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

# Another process: opens the file, saves one message, says so, and (with "hold") keeps the file open until told.
_OTHER = textwrap.dedent("""
    import sys, anyio
    from datetime import UTC, datetime
    from threadmind.codecs import Message
    from threadmind.stores._sqlite import SQLiteStore

    async def main(path, mid, text, hold):
        async with SQLiteStore(path) as store:
            await store.save_messages("t1", [Message.user(text, id=mid, thread_id="t1", resource_id="r1",
                                                          created_at=datetime.now(UTC))])
            print("saved", flush=True)
            if hold:
                await anyio.to_thread.run_sync(sys.stdin.readline)

    anyio.run(main, *sys.argv[1:4], sys.argv[4] == "hold")
""")


def say(mid: str, text: str, i: int) -> Message:
    return Message.user(text, id=mid, thread_id="t1", resource_id="r1", created_at=BASE + timedelta(seconds=i))


async def found(store: SQLiteStore, query: str) -> list[str]:
    matches = await store.keyword_search(query_terms(query), resource_id="r1", thread_id=None, limit=10,
                                         neighbours_of=["m0"])
    return [c.message_id for c in matches.candidates]


async def seeded(path: Path, **options: Any) -> SQLiteStore:
    store = SQLiteStore(str(path), **options)
    await store.create_thread(Thread(id="t1", resource_id="r1"))
    await store.save_messages("t1", [say(f"m{i}", f"a note about the harbour, number {i}", i) for i in range(5)])
    return store


def from_memory(store: SQLiteStore) -> int:
    return store.cache_statistics()["keyword_from_memory"]


async def test_an_unchanged_scope_is_searched_from_memory_with_the_same_answer(tmp_path: Path) -> None:
    async with await seeded(tmp_path / "m.db") as store:
        first = await store.keyword_search(query_terms("harbour note"), resource_id="r1", thread_id=None, limit=3,
                                           neighbours_of=["m0", "m4"])
        assert from_memory(store) == 0
        again = await store.keyword_search(query_terms("harbour note"), resource_id="r1", thread_id=None, limit=3,
                                           neighbours_of=["m0", "m4"])
        assert from_memory(store) == 1 and again == first
        assert again.neighbours == await store.neighbours([c.message_id for c in first.candidates] + ["m0", "m4"])
        await store.save_messages("t1", [say("m9", "the harbour pilot", 9)])
        assert "m9" in await found(store, "harbour pilot")  # a write: read from the database again
        assert from_memory(store) == 1


async def test_a_write_through_another_store_object_on_the_file_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with await seeded(path) as store, SQLiteStore(str(path)) as other:
        assert await found(store, "harbour") and await found(store, "harbour")
        hits = from_memory(store)
        await other.save_messages("t1", [say("p1", "a parrot at the harbour", 7)])
        assert await found(store, "parrot") == ["p1"]
        await other.delete_messages(["p1"])
        assert await found(store, "parrot") == []
        assert from_memory(store) == hits


async def test_a_write_by_another_process_is_seen_after_it_left_and_while_it_is_there(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with await seeded(path) as store:
        assert await found(store, "harbour") and await found(store, "harbour")
        hits = from_memory(store)
        await anyio.run_process([sys.executable, "-c", _OTHER, str(path), "p2", "a puffin", "leave"])
        assert await found(store, "puffin") == ["p2"]  # it came and went: what was kept before is not trusted
        assert await found(store, "puffin") == ["p2"]
        assert from_memory(store) == hits + 1
        async with await anyio.open_process([sys.executable, "-c", _OTHER, str(path), "p1", "a parrot", "hold"]) \
                as other:
            assert other.stdout is not None and other.stdin is not None
            assert (await other.stdout.receive()).startswith(b"saved")
            assert await found(store, "parrot") == ["p1"]  # it is there: every search reads the database
            assert await found(store, "parrot") == ["p1"]
            assert from_memory(store) == hits + 1
            await other.stdin.send(b"go\n")
            assert await other.wait() == 0


async def until_folded(store: SQLiteStore, folds: int) -> None:
    with anyio.fail_after(5):
        while store.cache_statistics()["keyword_folds_in_background"] < folds:  # noqa: ASYNC110 (a background thread)
            await anyio.sleep(0.005)


async def test_a_save_is_folded_in_the_background_and_the_next_search_needs_no_trip(tmp_path: Path) -> None:
    async with await seeded(tmp_path / "m.db") as store:
        await until_folded(store, 1)  # the seed's saves
        assert await found(store, "harbour")
        hits = from_memory(store)
        await store.save_messages("t1", [say("m7", "a seal in the harbour", 7)])
        await until_folded(store, 2)
        assert not await store.execute_read(queued)
        matches = await store.keyword_search(query_terms("seal"), resource_id="r1", thread_id=None, limit=10,
                                             neighbours_of=["m4", "m7"])
        assert from_memory(store) == hits + 1  # the fold left the scope's block current, with its threads' order
        assert [c.message_id for c in matches.candidates] == ["m7"]
        assert matches.neighbours == await store.neighbours(["m7", "m4"]) == {"m4": ("m3", "m7"),
                                                                            "m7": ("m4", None)}


async def test_a_background_fold_that_cannot_lock_leaves_the_queue_to_the_next_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sqlite_fold, "FOLD_DELAY", 0.2)  # time to take the lock before it starts
    path = tmp_path / "m.db"
    async with await seeded(path, busy_timeout_ms=50) as store:
        await until_folded(store, 1)
        assert await found(store, "harbour")
        await store.save_messages("t1", [say("m7", "a seal in the harbour", 7)])
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            await anyio.sleep(0.5)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert store._keywords.background_fold.failures >= 1 and await store.execute_read(queued)
        assert await found(store, "seal") == ["m7"]


async def test_closing_with_a_fold_pending_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with await seeded(path) as store:
        await store.save_messages("t1", [say("m7", "a seal in the harbour", 7)])
    async with SQLiteStore(str(path)) as again:
        assert await found(again, "seal") == ["m7"]



async def test_a_scope_searched_before_a_write_elsewhere_is_current_again_after_the_quiet_fold(tmp_path: Path) -> None:
    """The background fold after a write checks the versions of every scope whose block the store keeps: one the
    write did not touch answers its next search from memory, with what the database holds."""
    async with await seeded(tmp_path / "m.db") as store:
        await store.create_thread(Thread(id="t2", resource_id="r2"))
        await store.save_messages("t2", [Message.user("a lighthouse keeper", id="k1", thread_id="t2",
                                                      resource_id="r2", created_at=BASE)])
        await until_folded(store, 1)
        lighthouse = await store.keyword_search(query_terms("lighthouse"), resource_id="r2", thread_id=None,
                                                limit=5, neighbours_of=["k1"])
        await store.save_messages("t1", [say("m7", "a seal in the harbour", 7)])  # r1 only: r2's stamp is stale
        await until_folded(store, 2)
        hits = from_memory(store)
        again = await store.keyword_search(query_terms("lighthouse"), resource_id="r2", thread_id=None, limit=5,
                                           neighbours_of=["k1"])
        assert from_memory(store) == hits + 1 and again == lighthouse
        assert [c.message_id for c in again.candidates] == ["k1"]


async def test_creation_times_are_kept_with_the_scope_while_it_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The date lift's read of its candidates' times: once per message while the scope's block stays current
    (appends keep what it read); an update of a message's time, through this store or another store object on the
    file, is seen at once (with another process on the file every read goes to the database, as searches do)."""
    from threadmind.stores._sqlite._jobs import created_reader

    asked: list[list[str]] = []

    def counted(ids: list[str]) -> Any:
        asked.append(list(ids))
        return created_reader(ids)

    monkeypatch.setattr("threadmind.stores._sqlite._store.created_reader", counted)
    path = tmp_path / "m.db"
    async with await seeded(path) as store:
        times = {f"m{i}": BASE + timedelta(seconds=i) for i in range(5)}

        async def read(ids: list[str]) -> dict[str, datetime]:
            return await store.created_times(ids, resource_id="r1")

        assert await read(["m1", "m3"]) == {"m1": times["m1"], "m3": times["m3"]}  # no search yet: read
        assert await found(store, "harbour") and await found(store, "harbour")  # the block answers from memory
        assert await read(["m1", "m3", "ghost"]) == {"m1": times["m1"], "m3": times["m3"]}
        assert await read(["m3", "m1"]) == {"m1": times["m1"], "m3": times["m3"]}
        assert await read(["m1", "ghost"]) == {"m1": times["m1"]}
        assert asked == [["m1", "m3"], ["m1", "m3", "ghost"], ["ghost"]]  # a message unknown is asked again
        await store.save_messages("t1", [say("m7", "a seal in the harbour", 7)])  # an append
        assert await found(store, "seal") == ["m7"]
        asked.clear()
        assert await read(["m1", "m7"]) == {"m1": times["m1"], "m7": BASE + timedelta(seconds=7)}
        assert asked == [["m7"]]
        moved = BASE + timedelta(days=3)
        await store.update_messages([{"id": "m1", "createdAt": moved}])
        assert await found(store, "harbour")
        assert await read(["m1", "m3"]) == {"m1": moved, "m3": times["m3"]}  # both kept again
        async with SQLiteStore(str(path)) as other:
            await other.update_messages([{"id": "m3", "createdAt": moved}])
            assert await read(["m3"]) == {"m3": moved}
        assert await read(["m3"]) == {"m3": moved}
        assert await store.created_times(["m3"], thread_id="t1") == {"m3": moved}  # another scope: its own


async def test_a_small_scopes_first_search_reads_every_threads_order_so_other_words_need_no_trip(
        tmp_path: Path) -> None:
    """Each search of a resource names other messages (new words, other vector hits): their neighbours are kept
    from the first search on, for every thread of the scope, so no later search of the unchanged scope needs the
    database, whatever it asks; and the neighbours kept are the store's."""
    async with SQLiteStore(str(tmp_path / "m.db")) as store:
        topics = ("harbour pilot", "violin lesson", "marathon training")
        for t, topic in enumerate(topics):
            await store.create_thread(Thread(id=f"t{t}", resource_id="r1"))
            await store.save_messages(f"t{t}", [
                Message.user(f"{topic} {i}" if i % 2 == 0 else "ok", id=f"t{t}m{i}", thread_id=f"t{t}",
                             resource_id="r1", created_at=BASE + timedelta(seconds=10 * t + i)) for i in range(4)])

        async def search(query: str, others: list[str]) -> list[str]:
            matches = await store.keyword_search(query_terms(query), resource_id="r1", thread_id=None, limit=5,
                                                 neighbours_of=others)
            ids = [c.message_id for c in matches.candidates]
            assert matches.neighbours == await store.neighbours(list(dict.fromkeys(ids + others)))
            return ids

        assert set(await search("harbour", ["t0m1"])) == {"t0m0", "t0m2"}
        assert from_memory(store) == 0
        assert set(await search("violin", ["t2m3"])) == {"t1m0", "t1m2"}  # other threads: kept since the first
        assert set(await search("marathon training", ["t1m1"])) == {"t2m0", "t2m2"}
        assert from_memory(store) == 2
