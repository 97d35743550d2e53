"""One behaviour suite for every ``Store``: SQLiteStore, InMemoryStore and PostgresStore must agree on all of it."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from threadmind.codecs import Message, MessageContent, TextPart, Thread
from threadmind.errors import ResourceMismatch, StorageError, ThreadNotFound, ValidationError
from threadmind.stores._keywords import CreatedTimes
from threadmind.stores._postgres import PostgresStore
from threadmind.stores._protocol import DateRange, Include, MessageQuery, Store

from ._support import parametrize_stores

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
LIBSQL = "MASTRA_STORAGE_LIBSQL_"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_stores(metafunc)


def counts_writes(store: Any) -> bool:
    """Whether the store counts writes per key (one process, or one file's processes that it can watch), rather
    than returning a new version on every call (a database other hosts write)."""
    return not isinstance(store, PostgresStore)


def msg(i: int, thread: str = "t1", resource: str = "r1", *, at: datetime | None = None, text: str | None = None,
        **fields: Any) -> Message:
    return Message.user(text or f"message {i}", id=f"{thread}-m{i:04d}", thread_id=thread, resource_id=resource,
                        created_at=at or BASE + timedelta(seconds=i), **fields)


async def thread(store: Store, tid: str = "t1", resource: str = "r1", **fields: Any) -> Thread:
    return await store.create_thread(Thread(id=tid, resource_id=resource, **fields))


async def ids(store: Store, tid: str | list[str] = "t1", **query: Any) -> list[str]:
    page = await store.list_messages(MessageQuery(thread_id=tid, **query))
    return [m.id for m in page.messages]


class TestThreads:
    through_pgbouncer = True

    async def test_create_get_roundtrip(self, store: Store) -> None:
        created_at = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
        made = await thread(store, title="Trip", metadata={"a": 1, "nested": {"x": [1, "y"]}}, created_at=created_at)
        got = await store.get_thread("t1")
        assert got == made
        assert got is not None and got.created_at == datetime(2025, 1, 2, 1, 4, 5, 678000, tzinfo=UTC)
        assert got.metadata == {"a": 1, "nested": {"x": [1, "y"]}} and got.title == "Trip"
        assert await store.get_thread("nope") is None

    async def test_create_existing_id_is_rejected(self, store: Store) -> None:
        await thread(store, title="first")
        with pytest.raises(ValidationError) as info:
            await thread(store, title="second")
        assert info.value.code == "THREADMIND_THREAD_EXISTS"
        assert (await store.get_thread("t1")).title == "first"  # type: ignore[union-attr]

    @pytest.mark.parametrize("bad", [Thread(id="", resource_id="r"), Thread(id="t", resource_id=" ")])
    async def test_create_requires_ids(self, store: Store, bad: Thread) -> None:
        with pytest.raises(ValidationError):
            await store.create_thread(bad)

    async def test_list_paging_and_order(self, store: Store) -> None:
        for i in range(5):
            await thread(store, f"t{i}", "r1" if i < 4 else "r2", created_at=BASE + timedelta(minutes=i),
                         updated_at=BASE + timedelta(minutes=i))
        page = await store.list_threads(resource_id="r1", per_page=3)
        assert [t.id for t in page.threads] == ["t3", "t2", "t1"]
        assert (page.total, page.has_more, page.page, page.per_page) == (4, True, 0, 3)
        page = await store.list_threads(resource_id="r1", per_page=3, page=1)
        assert [t.id for t in page.threads] == ["t0"] and not page.has_more
        asc = await store.list_threads(direction="ASC", per_page=False)
        assert [t.id for t in asc.threads] == ["t0", "t1", "t2", "t3", "t4"] and not asc.has_more
        await store.update_thread("t0", title="touched")
        by_update = await store.list_threads(order_by="updated_at")
        assert by_update.threads[0].id == "t0"

    async def test_list_equal_created_at_keeps_insertion_order(self, store: Store) -> None:
        for tid in ("c", "a", "b"):
            await thread(store, tid, created_at=BASE)
        assert [t.id for t in (await store.list_threads(direction="ASC")).threads] == ["c", "a", "b"]
        assert [t.id for t in (await store.list_threads()).threads] == ["b", "a", "c"]

    @pytest.mark.parametrize(
        ("kwargs", "code"),
        [
            ({"page": -1}, "LIST_THREADS_INVALID_PAGE"),
            ({"per_page": False, "page": 1}, "LIST_THREADS_INVALID_PAGE"),
            ({"per_page": -5}, "LIST_THREADS_INVALID_PAGE"),
            ({"metadata": {"bad-key": 1}}, "LIST_THREADS_INVALID_METADATA_KEY"),
            ({"metadata": {"__proto__": 1}}, "LIST_THREADS_INVALID_METADATA_KEY"),
            ({"metadata": {"k" * 129: 1}}, "LIST_THREADS_INVALID_METADATA_KEY"),
            ({"metadata": {"k": {"a": 1}}}, "LIST_THREADS_INVALID_METADATA_VALUE"),
            ({"metadata": {"k": [1]}}, "LIST_THREADS_INVALID_METADATA_VALUE"),
        ],
    )
    async def test_list_validation(self, store: Store, kwargs: dict[str, Any], code: str) -> None:
        with pytest.raises(ValidationError) as info:
            await store.list_threads(**kwargs)
        assert info.value.code == LIBSQL + code

    async def test_list_metadata_filters(self, store: Store) -> None:
        await thread(store, "a", metadata={"topic": "travel", "priority": 2, "pinned": True, "gone": None})
        await thread(store, "b", metadata={"topic": "work", "priority": "2", "pinned": False})
        await thread(store, "c")

        async def match(**filters: Any) -> list[str]:
            page = await store.list_threads(metadata=filters, direction="ASC")
            return [t.id for t in page.threads]

        assert await match(topic="travel") == ["a"]
        assert await match(priority=2) == ["a"]
        assert await match(priority="2") == ["b"]
        assert await match(pinned=True) == ["a"]
        assert await match(pinned=False) == ["b"]
        assert await match(gone=None) == ["a", "b", "c"]  # null matches missing keys too (IS NULL)
        assert await match(topic="travel", pinned=False) == []
        assert (await store.list_threads(metadata={"topic": "work"})).total == 1

    async def test_update_thread(self, store: Store) -> None:
        made = await thread(store, title="old", metadata={"a": 1, "b": 2})
        updated = await store.update_thread("t1", metadata={"b": 3, "c": 4})
        assert updated.title == "old" and updated.metadata == {"a": 1, "b": 3, "c": 4}
        assert updated.updated_at >= made.updated_at and updated.created_at == made.created_at
        renamed = await store.update_thread("t1", title="new")
        assert renamed.title == "new" and renamed.metadata == {"a": 1, "b": 3, "c": 4}
        assert await store.get_thread("t1") == renamed

    async def test_update_missing_thread(self, store: Store) -> None:
        with pytest.raises(ThreadNotFound) as info:
            await store.update_thread("ghost", title="x")
        assert info.value.code == LIBSQL + "UPDATE_THREAD_NOT_FOUND" and info.value.thread_id == "ghost"

    async def test_delete_thread_removes_messages(self, store: Store) -> None:
        await thread(store)
        await thread(store, "t2")
        await store.save_messages("t1", [msg(1), msg(2)])
        await store.save_messages("t2", [msg(1, "t2")])
        await store.delete_thread("t1")
        await store.delete_thread("never-existed")
        assert await store.get_thread("t1") is None
        assert await store.get_messages_by_id(["t1-m0001", "t1-m0002", "t2-m0001"]) == [
            (await store.get_messages_by_id(["t2-m0001"]))[0]
        ]

    async def test_move_thread_to_another_resource(self, store: Store) -> None:
        await thread(store)
        await store.save_messages("t1", [msg(1), msg(2)])
        moved = await store.update_thread_resource_id("t1", "r9")
        assert moved.resource_id == "r9"
        assert [t.id for t in (await store.list_threads(resource_id="r9")).threads] == ["t1"]
        assert (await store.list_threads(resource_id="r1")).total == 0
        assert {m.resource_id for m in await store.get_messages_by_id(["t1-m0001", "t1-m0002"])} == {"r9"}
        with pytest.raises(ThreadNotFound):
            await store.update_thread_resource_id("ghost", "r9")

    async def test_create_with_messages(self, store: Store) -> None:
        made = await store.create_thread_with_messages(Thread(id="t1", resource_id="r1"), [msg(1), msg(2)])
        assert made.id == "t1" and await ids(store) == ["t1-m0001", "t1-m0002"]

    async def test_create_with_messages_is_atomic(self, store: Store) -> None:
        await thread(store, "other")
        await store.save_messages("other", [msg(1, "other")])
        clash = Message.user("x", id="other-m0001", thread_id="t1", resource_id="r1", created_at=BASE)
        with pytest.raises(ValidationError):
            await store.create_thread_with_messages(Thread(id="t1", resource_id="r1"), [msg(1), clash])
        assert await store.get_thread("t1") is None
        assert await store.get_messages_by_id(["t1-m0001"]) == []
        with pytest.raises(ValidationError):  # existing thread id: nothing written either
            await store.create_thread_with_messages(Thread(id="other", resource_id="r1"), [msg(5, "other")])
        assert await store.get_messages_by_id(["other-m0005"]) == []
        with pytest.raises(ResourceMismatch):
            await store.create_thread_with_messages(Thread(id="t3", resource_id="r1"), [msg(1, "t3", "r2")])


    async def test_thread_with_tail_is_the_row_and_the_newest_page(self, store: Any) -> None:
        await thread(store, title="Trip")
        await store.save_messages("t1", [msg(i, at=BASE + timedelta(seconds=i // 2)) for i in range(30)])
        row, page = await store.get_thread_with_tail("t1", 8)
        assert row == await store.get_thread("t1")
        assert page == await store.list_messages(MessageQuery(thread_id="t1", per_page=8, direction="DESC"))
        assert [m.id for m in page.messages][:2] == ["t1-m0029", "t1-m0028"] and page.total == 30
        missing, empty = await store.get_thread_with_tail("nope", 8)
        assert missing is None and empty.messages == [] and empty.total == 0


    async def test_thread_version_counts_each_write_call(self, store: Any) -> None:
        if not counts_writes(store):
            await thread(store)
            seen = [store.thread_version("t1"), store.thread_version("t1"), store.resource_version("r1")]
            assert len(set(seen)) == 3  # another host may write at any time: no value is ever handed out twice
            return
        v = store.thread_version
        assert v("t1") == 0
        await thread(store)
        await thread(store, "t2")
        assert (v("t1"), v("t2")) == (1, 1)
        await store.save_messages("t1", [msg(0), msg(1)])
        await store.update_thread("t1", title="x")
        await store.get_thread("t1")
        await store.list_messages(MessageQuery(thread_id="t1"))
        await store.get_thread_with_tail("t1", 5)
        assert v("t1") == 3  # reads do not count
        await store.update_messages([{"id": "t1-m0000", "content": {"content": "edited"}}])
        await store.save_messages("t2", [msg(0, "t2")])
        await store.delete_messages(["t1-m0001", "t2-m0000"])
        assert (v("t1"), v("t2")) == (5, 3)
        await store.update_thread_resource_id("t1", "r9")
        await store.delete_thread("t1")
        assert v("t1") == 7


async def test_created_times_read_back_as_the_messages_do(store: Store) -> None:
    """The date lift's read, which every store of the library offers (an optional capability: a store without it
    is read whole): each message's time as ``get_messages_by_id`` returns it (a time saved with an offset, and with
    microseconds, included), unknown and repeated ids ignored, nothing for no ids."""
    assert isinstance(store, CreatedTimes)
    await thread(store)
    east = timezone(timedelta(hours=9))
    saved = [msg(1), msg(2, at=datetime(2025, 3, 2, 1, 30, 15, 250_000, tzinfo=east))]
    await store.save_messages("t1", saved)
    ids = ["t1-m0002", "ghost", "t1-m0001", "t1-m0002"]
    times = await store.created_times(ids)
    assert times == {m.id: m.created_at for m in await store.get_messages_by_id(ids)}
    assert set(times) == {"t1-m0001", "t1-m0002"} and times["t1-m0002"] == saved[1].created_at
    assert await store.created_times([]) == {}


class TestSaveMessages:
    through_pgbouncer = True

    async def test_roundtrip_fields(self, store: Store) -> None:
        await thread(store)
        at = datetime(2025, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)
        saved = await store.save_messages("t1", [msg(1, at=at, type="v2"), msg(2, type="custom")])
        assert saved[0].created_at == datetime(2025, 3, 1, 9, 0, 0, 123000, tzinfo=UTC)
        assert saved[0].type is None and saved[1].type == "custom"
        got = await store.get_messages_by_id(["t1-m0001", "t1-m0002"])
        assert got == saved
        assert got[0].content == MessageContent(parts=[TextPart(text="message 1")], content="message 1")

    async def test_resave_keeps_created_at_and_position(self, store: Store) -> None:
        await thread(store)
        await store.save_messages("t1", [msg(1), msg(2), msg(3)])
        later = BASE + timedelta(hours=5)
        resaved = await store.save_messages("t1", [msg(2, at=later, text="edited"), msg(4)])
        assert resaved[0].created_at == BASE + timedelta(seconds=2) and resaved[0].text == "edited"
        assert await ids(store) == ["t1-m0001", "t1-m0002", "t1-m0003", "t1-m0004"]
        assert (await store.get_messages_by_id(["t1-m0002"]))[0].text == "edited"

    async def test_duplicate_ids_in_one_batch_collapse(self, store: Store) -> None:
        await thread(store)
        saved = await store.save_messages("t1", [msg(1, text="a"), msg(2), msg(1, text="b", at=BASE)])
        assert [(m.id, m.text) for m in saved] == [("t1-m0001", "b"), ("t1-m0002", "message 2")]
        assert saved[0].created_at == BASE + timedelta(seconds=1)
        assert await ids(store) == ["t1-m0001", "t1-m0002"]

    async def test_equal_created_at_never_reorders(self, store: Store) -> None:
        await thread(store)
        expected: list[str] = []
        for batch in range(4):  # 200 messages, one timestamp, ids deliberately not in insertion order
            chunk = [msg(0, at=BASE, text=f"{batch}-{i}") for i in range(50)]
            chunk = [Message.user(m.text, id=f"id-{(i * 37 + batch) % 200:03d}-{batch}", thread_id="t1",
                                  resource_id="r1", created_at=BASE) for i, m in enumerate(chunk)]
            await store.save_messages("t1", chunk)
            expected.extend(m.id for m in chunk)
        assert await ids(store, per_page=False) == expected
        assert await ids(store, per_page=False, direction="DESC") == expected[::-1]
        paged = [i for p in range(5) for i in await ids(store, per_page=40, page=p)]
        assert paged == expected
        await store.save_messages("t1", [Message.user("again", id=expected[0], thread_id="t1", resource_id="r1",
                                                      created_at=BASE)])
        assert await ids(store, per_page=False) == expected

    async def test_bumps_thread_updated_at(self, store: Store) -> None:
        made = await thread(store, updated_at=BASE)
        await store.save_messages("t1", [msg(1)])
        after = await store.get_thread("t1")
        assert after is not None and after.updated_at > made.updated_at

    async def test_errors(self, store: Store) -> None:
        await thread(store)
        await thread(store, "t2")
        with pytest.raises(ThreadNotFound):
            await store.save_messages("ghost", [msg(1, "ghost")])
        with pytest.raises(ValidationError, match=r"messages\[1\].thread_id"):
            await store.save_messages("t1", [msg(1), msg(2, "t2")])
        with pytest.raises(ValidationError, match=r"messages\[0\].resource_id"):
            await store.save_messages("t1", [Message.user("x", id="x", thread_id="t1", created_at=BASE)])
        with pytest.raises(ResourceMismatch) as info:
            await store.save_messages("t1", [msg(1), msg(2, resource="r2")])
        assert (info.value.owner, info.value.resource_id) == ("r1", "r2")
        await store.save_messages("t2", [msg(7, "t2")])
        moving = Message.user("move", id="t2-m0007", thread_id="t1", resource_id="r1", created_at=BASE)
        with pytest.raises(ValidationError, match="t2-m0007"):
            await store.save_messages("t1", [msg(1), moving])
        assert await ids(store, "t1") == []  # the failed batches wrote nothing
        assert await ids(store, "t2") == ["t2-m0007"]

    async def test_empty_batch(self, store: Store) -> None:
        assert await store.save_messages("t1", []) == []


class TestSaveMessagesMany:
    """One transaction for several threads' parts: all of them or none."""

    through_pgbouncer = True

    async def test_every_part_is_written_and_returned(self, store: Any) -> None:
        await thread(store, "t1", updated_at=BASE)
        await thread(store, "t2", "r2", updated_at=BASE)
        await store.save_messages("t1", [msg(1, text="old")])
        before = (store.thread_version("t1"), store.thread_version("t2"))
        later = BASE + timedelta(hours=1)
        result = await store.save_messages_many({
            "t1": [msg(1, at=later, text="edited"), msg(2)],
            "t2": [msg(1, "t2", "r2"), msg(2, "t2", "r2")],
        })
        assert list(result) == ["t1", "t2"]
        assert [(m.id, m.text) for m in result["t1"]] == [("t1-m0001", "edited"), ("t1-m0002", "message 2")]
        assert result["t1"][0].created_at == BASE + timedelta(seconds=1)  # a re-saved id keeps its time
        assert [m.id for m in result["t2"]] == ["t2-m0001", "t2-m0002"]
        assert await ids(store, "t1") == ["t1-m0001", "t1-m0002"]
        assert await ids(store, "t2") == ["t2-m0001", "t2-m0002"]
        for tid in ("t1", "t2"):
            row = await store.get_thread(tid)
            assert row is not None and row.updated_at > BASE
        if counts_writes(store):
            assert (store.thread_version("t1"), store.thread_version("t2")) == (before[0] + 1, before[1] + 1)

    @pytest.mark.parametrize("bad_part", ["first", "last"])
    async def test_one_refused_part_writes_no_part(self, store: Any, bad_part: str) -> None:
        await thread(store, "t1")
        await thread(store, "t2")
        await thread(store, "t3", "r3")
        await store.save_messages("t2", [msg(9, "t2")])
        good = {"t1": [msg(1)], "t2": [msg(1, "t2")]}
        refusals: list[tuple[dict[str, list[Message]], type[Exception], str]] = [
            ({"ghost": [msg(1, "ghost")]}, ThreadNotFound, "ghost"),
            ({"t3": [msg(1, "t3", "r1")]}, ResourceMismatch, "t3"),
            # an id stored in another thread cannot move
            ({"t3": [Message.user("x", id="t2-m0009", thread_id="t3", resource_id="r3", created_at=BASE)]},
             ValidationError, "t2-m0009"),
            # nor can a new id that an earlier part of the same batch claims
            ({"t3": [Message.user("x", id="t1-m0001", thread_id="t3", resource_id="r3", created_at=BASE)]},
             ValidationError, "t1-m0001"),
        ]
        for bad, error, needle in refusals:
            parts = {**good, **bad} if bad_part == "last" or "t1-m0001" in needle else {**bad, **good}
            with pytest.raises(error, match=needle):
                await store.save_messages_many(parts)
            assert await ids(store, "t1") == [] and await ids(store, "t2") == ["t2-m0009"]
            assert await ids(store, "t3") == []
            got = await store.get_messages_by_id(["t1-m0001", "t2-m0001"])
            assert got == []

    async def test_static_checks_and_empty_parts(self, store: Any) -> None:
        await thread(store, "t1")
        with pytest.raises(ValidationError, match=r"messages\[0\].thread_id"):
            await store.save_messages_many({"t1": [msg(1)], "t2": [msg(1)]})
        assert await store.save_messages_many({"t1": []}) == {"t1": []}
        assert await ids(store, "t1") == []


class TestListMessages:
    @pytest.fixture
    async def filled(self, store: Store) -> Store:
        await thread(store)
        await store.save_messages("t1", [msg(i) for i in range(1, 51)])
        return store

    async def test_paging(self, filled: Store) -> None:
        page = await filled.list_messages(MessageQuery(thread_id="t1"))
        assert len(page.messages) == 40 and page.total == 50 and page.has_more and page.per_page == 40
        page = await filled.list_messages(MessageQuery(thread_id="t1", page=1))
        assert [m.id for m in page.messages] == [f"t1-m{i:04d}" for i in range(41, 51)] and not page.has_more
        page = await filled.list_messages(MessageQuery(thread_id="t1", per_page=5, direction="DESC"))
        assert [m.id for m in page.messages] == [f"t1-m{i:04d}" for i in range(50, 45, -1)] and page.has_more
        page = await filled.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert len(page.messages) == 50 and not page.has_more and page.total == 50
        page = await filled.list_messages(MessageQuery(thread_id="t1", per_page=0))
        assert (page.messages, page.total, page.has_more) == ([], 0, False)

    @pytest.mark.parametrize("direction", ["ASC", "DESC"])
    async def test_without_total_the_pages_and_has_more_are_the_same(self, filled: Store, direction: str) -> None:
        # include_total=False lets a store skip counting; the rows and has_more must not change.
        for per_page in (1, 7, 25, 49, 50, 51, False):
            for page_no in range(0, 9 if per_page else 1):
                query: dict[str, Any] = {"thread_id": "t1", "per_page": per_page, "page": page_no,
                                         "direction": direction}
                counted = await filled.list_messages(MessageQuery(**query))
                uncounted = await filled.list_messages(MessageQuery(**query, include_total=False))
                assert [m.id for m in uncounted.messages] == [m.id for m in counted.messages], query
                assert uncounted.has_more == counted.has_more, query
                assert uncounted.total <= counted.total or not counted.messages, query

    async def test_only_includes_with_per_page_zero(self, filled: Store) -> None:
        page = await filled.list_messages(MessageQuery(
            thread_id="t1", per_page=0, include=[Include(id="t1-m0010", with_previous_messages=1)]))
        assert [m.id for m in page.messages] == ["t1-m0009", "t1-m0010"]
        assert (page.total, page.has_more) == (0, False)

    @pytest.mark.parametrize(
        ("query", "code"),
        [
            ({"thread_id": ""}, "LIST_MESSAGES_INVALID_THREAD_ID"),
            ({"thread_id": "   "}, "LIST_MESSAGES_INVALID_THREAD_ID"),
            ({"thread_id": []}, "LIST_MESSAGES_INVALID_THREAD_ID"),
            ({"thread_id": ["t1", ""]}, "LIST_MESSAGES_INVALID_THREAD_ID"),
            ({"thread_id": "t1", "page": -1}, "LIST_MESSAGES_INVALID_PAGE"),
        ],
    )
    async def test_validation(self, store: Store, query: dict[str, Any], code: str) -> None:
        with pytest.raises(ValidationError) as info:
            await store.list_messages(MessageQuery(**query))
        assert info.value.code == LIBSQL + code

    async def test_date_range(self, filled: Store) -> None:
        start, end = BASE + timedelta(seconds=10), BASE + timedelta(seconds=13)

        async def between(**flags: bool) -> list[str]:
            got = await ids(filled, per_page=False, date_range=DateRange(start=start, end=end, **flags))
            return [i[-2:] for i in got]

        assert await between() == ["10", "11", "12", "13"]
        assert await between(start_exclusive=True) == ["11", "12", "13"]
        assert await between(end_exclusive=True) == ["10", "11", "12"]
        page = await filled.list_messages(MessageQuery(thread_id="t1", date_range=DateRange(start=end), per_page=10))
        assert page.total == 38 and page.has_more

    async def test_content_metadata_filter_exact_type(self, store: Store) -> None:
        await thread(store)
        values: list[Any] = ["1", 1, True, None, 1.5]
        batch = [msg(i, content=MessageContent(parts=[TextPart(text="x")], metadata={"k": v, "src": "kb"}))
                 for i, v in enumerate(values)]
        await store.save_messages("t1", [*batch, msg(9)])  # msg 9 has no metadata at all

        async def match(value: Any) -> list[int]:
            got = await ids(store, per_page=False, metadata={"k": value})
            return [int(i[-4:]) for i in got]

        assert await match("1") == [0]
        assert await match(1) == [1]
        assert await match(True) == [2]
        assert await match(None) == [3]
        assert await match(1.5) == [4]
        assert await match(False) == []
        page = await store.list_messages(MessageQuery(thread_id="t1", per_page=2, metadata={"src": "kb"}))
        assert page.total == 5 and page.has_more and len(page.messages) == 2

    async def test_include_windows_at_edges(self, filled: Store) -> None:
        async def window(*includes: Include, **query: Any) -> list[int]:
            got = await ids(filled, per_page=0, include=list(includes), **query)
            return [int(i[-4:]) for i in got]

        assert await window(Include(id="t1-m0001", with_previous_messages=3, with_next_messages=2)) == [1, 2, 3]
        assert await window(Include(id="t1-m0050", with_previous_messages=2, with_next_messages=5)) == [48, 49, 50]
        assert await window(Include(id="t1-m0020")) == [20]
        assert await window(Include(id="t1-m0020", with_next_messages=1),
                            Include(id="t1-m0022", with_previous_messages=2),
                            Include(id="unknown", with_previous_messages=2)) == [20, 21, 22]
        assert await window(Include(id="t1-m0020", with_previous_messages=1), resource_id="r2") == []
        assert await window(Include(id="t1-m0020", with_previous_messages=1), direction="DESC") == [20, 19]

    async def test_many_overlapping_windows_across_threads(self, store: Store) -> None:
        """300 includes (more windows than one SQLite statement takes), overlapping, repeated ids, two threads,
        equal timestamps: the union must match windows computed by hand."""
        rng = random.Random(5)
        order: dict[str, list[str]] = {}
        for tid in ("t1", "t2"):
            await thread(store, tid)
            batch = [msg(i, tid, at=BASE + timedelta(seconds=i // 3)) for i in range(400)]  # runs of equal times
            await store.save_messages(tid, batch)
            order[tid] = [m.id for m in batch]
        includes = [Include(id=f"{rng.choice(['t1', 't2'])}-m{rng.randrange(400):04d}",
                            with_previous_messages=rng.randrange(4), with_next_messages=rng.randrange(4))
                    for _ in range(300)]
        includes.append(Include(id="nope", with_previous_messages=2))
        expected: set[str] = set()
        for inc in includes:
            if inc.id == "nope":
                continue
            seq = order[inc.id[:2]]
            at = seq.index(inc.id)
            expected.update(seq[max(0, at - inc.with_previous_messages): at + inc.with_next_messages + 1])
        page = await store.list_messages(MessageQuery(thread_id="t1", per_page=0, include=includes))
        got = [m.id for m in page.messages]
        assert set(got) == expected and len(got) == len(expected)  # each row once
        times = [m.created_at for m in page.messages]
        assert times == sorted(times)
        for tid in ("t1", "t2"):  # equal times keep each thread's save order
            mine = [i for i in got if i.startswith(tid)]
            assert mine == sorted(mine)

    async def test_wide_windows_over_runs_of_equal_times_saved_out_of_order(self, store: Store) -> None:
        """Windows of up to six on either side in a thread whose messages share times in runs of one to five and
        were saved out of their time order (their save order settles ties), read within the resource and without:
        each window is the N (M) messages nearest by (time, save order), ties at its target's time and at its far
        end included, as computed by hand."""
        rng = random.Random(11)
        await thread(store)
        times: list[int] = []
        while len(times) < 120:
            times += [len(times)] * rng.randint(1, 5)
        batch = [msg(i, at=BASE + timedelta(seconds=times[i])) for i in range(120)]
        saved = batch[:]
        rng.shuffle(saved)
        for start in range(0, 120, 7):  # saves of seven, in shuffled order: the save order differs from time order
            await store.save_messages("t1", saved[start:start + 7])
        rank = {m.id: at for at, m in enumerate(saved)}
        order = [m.id for m in sorted(batch, key=lambda m: (m.created_at, rank[m.id]))]
        for attempt in range(50):  # one window alone (none covers another's edge), or several
            includes = [Include(id=rng.choice(order), with_previous_messages=rng.randrange(7),
                                with_next_messages=rng.randrange(7)) for _ in range(1 if attempt < 30 else 3)]
            expected = set()
            for inc in includes:
                at = order.index(inc.id)
                expected.update(order[max(0, at - inc.with_previous_messages): at + inc.with_next_messages + 1])
            for resource in (None, "r1"):
                got = await ids(store, per_page=0, include=includes, resource_id=resource)
                assert got == [mid for mid in order if mid in expected]

    async def test_include_window_with_equal_timestamps(self, store: Store) -> None:
        await thread(store)
        await store.save_messages("t1", [msg(i, at=BASE) for i in range(5)])
        got = await ids(store, per_page=0, include=[Include(id="t1-m0002", with_previous_messages=1,
                                                             with_next_messages=1)])
        assert got == ["t1-m0001", "t1-m0002", "t1-m0003"]

    async def test_includes_from_other_threads_are_added(self, filled: Store) -> None:
        await thread(filled, "t2")
        await filled.save_messages("t2", [msg(i, "t2", at=BASE + timedelta(seconds=i, milliseconds=500))
                                          for i in range(1, 4)])
        page = await filled.list_messages(MessageQuery(
            thread_id="t1", per_page=2, include=[Include(id="t2-m0002", with_previous_messages=1)]))
        assert [m.id for m in page.messages] == ["t1-m0001", "t2-m0001", "t1-m0002", "t2-m0002"]
        assert page.total == 50 and page.has_more

    async def test_several_threads(self, filled: Store) -> None:
        await thread(filled, "t2")
        await filled.save_messages("t2", [msg(1, "t2", at=BASE + timedelta(seconds=1)), msg(60, "t2")])
        got = await ids(filled, ["t1", "t2"], per_page=3)
        assert got == ["t1-m0001", "t2-m0001", "t1-m0002"]
        assert (await filled.list_messages(MessageQuery(thread_id=["t1", "t2"]))).total == 52

    async def test_resource_filter(self, filled: Store) -> None:
        assert (await filled.list_messages(MessageQuery(thread_id="t1", resource_id="r1"))).total == 50
        assert (await filled.list_messages(MessageQuery(thread_id="t1", resource_id="r2"))).total == 0

    async def test_get_messages_by_id(self, filled: Store) -> None:
        got = await filled.get_messages_by_id(["t1-m0009", "nope", "t1-m0003", "t1-m0009"])
        assert [m.id for m in got] == ["t1-m0003", "t1-m0009"]
        assert await filled.get_messages_by_id([]) == []


class TestUpdateAndDelete:
    through_pgbouncer = True

    async def test_update_merges_content(self, store: Store) -> None:
        await thread(store, updated_at=BASE)
        original = msg(1, content=MessageContent(parts=[TextPart(text="old")], content="old",
                                                 metadata={"a": 1, "b": 2}, reasoning="why"))
        await store.save_messages("t1", [original, msg(2)])
        [updated] = await store.update_messages([{
            "id": "t1-m0001",
            "content": {"parts": [{"type": "text", "text": "new"}], "content": "new", "metadata": {"b": 3}},
            "role": "assistant",
        }])
        assert updated.text == "new" and updated.role == "assistant"
        assert updated.content.metadata == {"a": 1, "b": 3} and updated.content.reasoning == "why"
        assert updated.created_at == original.created_at
        assert (await store.get_messages_by_id(["t1-m0001"]))[0] == updated
        assert await ids(store) == ["t1-m0001", "t1-m0002"]
        thread_after = await store.get_thread("t1")
        assert thread_after is not None and thread_after.updated_at > BASE

    async def test_update_with_message_content_and_type(self, store: Store) -> None:
        await thread(store)
        await store.save_messages("t1", [msg(1)])
        [updated] = await store.update_messages([
            {"id": "t1-m0001", "content": MessageContent(parts=[TextPart(text="typed")], content="typed"),
             "type": "custom", "threadId": "t1"}])
        assert updated.text == "typed" and updated.type == "custom"
        assert (await store.get_messages_by_id(["t1-m0001"]))[0].type == "custom"

    async def test_update_errors_change_nothing(self, store: Store) -> None:
        await thread(store)
        await thread(store, "t2")
        await store.save_messages("t1", [msg(1)])
        before = await store.get_messages_by_id(["t1-m0001"])
        with pytest.raises(ValidationError, match="unknown"):
            await store.update_messages([{"id": "t1-m0001", "content": {"content": "x"}}, {"id": "unknown"}])
        with pytest.raises(ValidationError, match="cannot move"):
            await store.update_messages([{"id": "t1-m0001", "content": {"content": "x"}, "thread_id": "t2"}])
        with pytest.raises(ValidationError, match="unknown field"):
            await store.update_messages([{"id": "t1-m0001", "colour": "red"}])
        assert await store.get_messages_by_id(["t1-m0001"]) == before
        assert await store.update_messages([]) == []

    async def test_delete_messages(self, store: Store) -> None:
        await thread(store, updated_at=BASE)
        await thread(store, "t2", updated_at=BASE)
        await thread(store, "t3", updated_at=BASE)
        await store.save_messages("t1", [msg(1), msg(2)])
        await store.save_messages("t2", [msg(1, "t2")])
        affected = await store.delete_messages(["t1-m0001", "t2-m0001", "missing"])
        assert affected == {"t1", "t2"}
        assert await ids(store, ["t1", "t2"]) == ["t1-m0002"]
        assert await store.delete_messages([]) == set()
        with pytest.raises(ValidationError):
            await store.delete_messages(["ok", ""])
        t3 = await store.get_thread("t3")
        assert t3 is not None and t3.updated_at == BASE


class TestResources:
    async def test_create_update_merge(self, store: Store) -> None:
        assert await store.get_resource("r1") is None
        created = await store.update_resource("r1", working_memory="# notes")
        assert created.metadata == {} and created.working_memory == "# notes"
        updated = await store.update_resource("r1", metadata={"plan": "pro"})
        assert updated.working_memory == "# notes" and updated.metadata == {"plan": "pro"}
        updated = await store.update_resource("r1", metadata={"locale": "fr"})
        assert updated.metadata == {"plan": "pro", "locale": "fr"}
        cleared = await store.update_resource("r1", working_memory=None)
        assert cleared.working_memory is None and cleared.created_at == created.created_at
        assert await store.get_resource("r1") == cleared
        with_meta = await store.update_resource("r2", metadata={"x": 1})
        assert with_meta.metadata == {"x": 1} and with_meta.working_memory is None


class TestLifecycle:
    through_pgbouncer = True

    async def test_closed_store_raises(self, store: Store) -> None:
        await store.aclose()
        await store.aclose()
        with pytest.raises(StorageError):
            await store.get_thread("t1")
        with pytest.raises(StorageError):
            await thread(store)

    async def test_iter_messages_and_stats(self, store: Store) -> None:
        await thread(store, "a", created_at=BASE)
        await thread(store, "b", created_at=BASE + timedelta(seconds=1))
        await store.save_messages("b", [msg(2, "b"), msg(1, "b")])
        await store.save_messages("a", [msg(1, "a")])
        await store.update_resource("r1", working_memory="x")
        got = [m.id async for m in store.iter_messages()]  # type: ignore[attr-defined]
        assert got == ["a-m0001", "b-m0001", "b-m0002"]
        assert [m.id async for m in store.iter_messages(["b"])] == ["b-m0001", "b-m0002"]  # type: ignore[attr-defined]
        stats = await store.stats()  # type: ignore[attr-defined]
        assert {k: stats[k] for k in ("threads", "messages", "resources")} == {
            "threads": 2, "messages": 3, "resources": 1}
