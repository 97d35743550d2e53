"""PostgreSQL thread-with-tail reads served from the last answer while the thread row's version is unchanged: never
stale after any write by another store object (another process), threadmind's or Mastra's own statements."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmind.codecs import Message, Thread, message_to_dict
from threadmind.stores._postgres import PostgresStore

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def say(mid: str, text: str, thread: str = "t1", i: int = 0) -> Message:
    return Message.user(text, id=mid, thread_id=thread, resource_id="r1", created_at=BASE + timedelta(seconds=i))


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two processes have: each keeps its own answers."""
    async with PostgresStore(pg_dsn, max_size=2) as a, PostgresStore(pg_dsn, max_size=2) as b:
        await a.create_thread(Thread(id="t1", resource_id="r1", title="first"))
        await a.create_thread(Thread(id="t2", resource_id="r1"))
        await a.save_messages("t1", [say(f"m{i}", f"message {i}", i=i) for i in range(12)])
        yield a, b


def shape(answer: tuple[Thread | None, Any]) -> tuple[object, ...]:
    thread, page = answer
    return (thread, [m.id for m in page.messages], [message_to_dict(m) for m in page.messages], page.total,
            page.has_more)


async def _mastra_save(store: PostgresStore) -> None:
    """What @mastra/pg's saveMessages does: the message row and the thread's updatedAt, in one transaction."""
    m = say("mastra-1", "written by Mastra", i=100)

    async def run(conn: Any) -> None:
        async with conn.transaction():
            await conn.execute(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "createdAtZ", '
                '"resourceId") VALUES ($1, $2, $3, $4, \'v2\', $5, $6, $7)', m.id, m.thread_id,
                json.dumps(message_to_dict(m)["content"]), m.role, m.created_at.replace(tzinfo=None), m.created_at,
                m.resource_id)
            await conn.execute('UPDATE mastra_threads SET "updatedAt" = NOW(), "updatedAtZ" = NOW() WHERE id = $1',
                               m.thread_id)

    await store.run_write(run, "mastra save")


WRITES: dict[str, Callable[[PostgresStore], Awaitable[object]]] = {
    "save": lambda s: s.save_messages("t1", [say("n1", "new", i=50)]),
    "re-save": lambda s: s.save_messages("t1", [say("m11", "changed text", i=11)]),
    "update": lambda s: s.update_messages([{"id": "m10", "content": {"content": "updated"}}]),
    "delete": lambda s: s.delete_messages(["m11"]),
    "thread update": lambda s: s.update_thread("t1", title="renamed", metadata={"k": 1}),
    "thread move": lambda s: s.update_thread_resource_id("t1", "r2"),
    "thread delete": lambda s: s.delete_thread("t1"),
    "Mastra's save": _mastra_save,
}


@pytest.mark.parametrize("kind", list(WRITES))
async def test_a_write_by_another_process_is_read_at_once(stores: tuple[PostgresStore, PostgresStore],
                                                          pg_dsn: str, kind: str) -> None:
    reader, writer = stores
    first = await reader.get_thread_with_tail("t1", 10)
    assert shape(await reader.get_thread_with_tail("t1", 10)) == shape(first)
    assert reader.cache_statistics()["tails_from_memory"] == 1  # unchanged: the version alone came back
    await WRITES[kind](writer)
    async with PostgresStore(pg_dsn, max_size=1) as fresh:
        expected = shape(await fresh.get_thread_with_tail("t1", 10))
    assert shape(await reader.get_thread_with_tail("t1", 10)) == expected != shape(first)
    assert reader.cache_statistics()["tails_from_memory"] == 1


async def test_each_size_and_thread_is_kept_apart_and_answers_are_copies(
        stores: tuple[PostgresStore, PostgresStore]) -> None:
    reader, _ = stores
    ten, four, other = (await reader.get_thread_with_tail("t1", 10), await reader.get_thread_with_tail("t1", 4),
                        await reader.get_thread_with_tail("t2", 10))
    assert [len(page.messages) for _, page in (ten, four, other)] == [10, 4, 0]
    ten[1].messages.clear()  # a caller changing its list changes nothing kept
    again = await reader.get_thread_with_tail("t1", 10)
    assert len(again[1].messages) == 10 and again[0] is not None and again[0].title == "first"
    assert shape(await reader.get_thread_with_tail("t1", 4)) == shape(four)
    assert reader.cache_statistics()["tails_from_memory"] == 2
    assert (await reader.get_thread_with_tail("ghost", 10))[0] is None  # no thread: nothing kept, nothing failed
    assert (await reader.get_thread_with_tail("ghost", 10))[0] is None
    assert reader.cache_statistics()["tails_from_memory"] == 2
