"""Group commit of ``PostgresStore`` saves: saves that wait for a free statement go together as one, and each
caller still gets exactly its own outcome (its messages, or its own error with nothing of it written), in order,
cancellable until sent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.codecs import Message, Thread
from threadmind.embedders import HashEmbedder
from threadmind.errors import LeaseLost, MessageIdTaken, ResourceMismatch, ThreadNotFound
from threadmind.models import ModelRequest, ScriptedModel
from threadmind.stores import PgVectorStore, PostgresStore
from threadmind.stores._postgres._pool import import_asyncpg
from threadmind.stores._postgres._save import Part
from threadmind.stores._postgres._save_groups import MAX_GROUP, SAVE_STATEMENTS, SaveGroups
from threadmind.stores._protocol import Lease, MessageQuery
from threadmind.stores._vector_rows import VectorRows
from threadmind.ui import messages_from_ui

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
BLOCKERS = [f"blocker{i}" for i in range(SAVE_STATEMENTS)]


def say(mid: str, thread: str, i: int = 0, resource: str = "r1") -> Message:
    return Message.user(f"text of {mid}", id=mid, thread_id=thread, resource_id=resource,
                        created_at=BASE + timedelta(seconds=i))


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_dsn, max_size=8) as s:
        for thread in [*BLOCKERS, *(f"t{i}" for i in range(8))]:
            await s.create_thread(Thread(id=thread, resource_id="r1"))
        await s.create_thread(Thread(id="elsewhere", resource_id="r2"))
        yield s


async def until(condition: Callable[[], bool]) -> None:
    """Wait (at most 10 s) until ``condition`` holds: saves queue up between the event loop's turns."""
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 (state changed by other tasks' progress on the server)
            await anyio.sleep(0.005)


def waiting(store: PostgresStore) -> int:
    return store.statistics().queued


async def ids_of(store: PostgresStore, thread: str) -> list[str]:
    return [m.id for m in (await store.list_messages(MessageQuery(thread_id=thread, per_page=False))).messages]


@asynccontextmanager
async def statements_busy(store: PostgresStore, dsn: str) -> AsyncIterator[None]:
    """Every save statement of ``store`` held busy (saves to the blocker threads, waiting on their rows' locks)
    until the block exits: saves made meanwhile wait to go together."""
    conn = await import_asyncpg().connect(dsn)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT 1 FROM mastra_threads WHERE id = ANY($1::text[]) FOR UPDATE", BLOCKERS)
        async with anyio.create_task_group() as tg:
            for i, thread in enumerate(BLOCKERS):
                tg.start_soon(store.save_messages, thread, [say(f"b{i}", thread)])
            await until(lambda: not store._groups._free)  # both statements taken by the blocked saves
            try:
                yield
            finally:
                await tr.commit()
    finally:
        await conn.close()


async def together(store: PostgresStore, dsn: str,
                   saves: dict[str, Callable[[], Awaitable[object]]]) -> dict[str, object]:
    """Run ``saves`` while every statement is busy (so they wait and go as one group); each one's result or
    error."""
    outcome: dict[str, object] = {}

    async def one(name: str, save: Callable[[], Awaitable[object]]) -> None:
        try:
            outcome[name] = await save()
        except Exception as exc:
            outcome[name] = exc

    async with anyio.create_task_group() as tg:
        async with statements_busy(store, dsn):
            for name, save in saves.items():
                tg.start_soon(one, name, save)
            await until(lambda: waiting(store) >= len(saves))
    return outcome


async def test_waiting_saves_go_as_one_statement_each_with_its_own_messages(store: PostgresStore,
                                                                             pg_dsn: str) -> None:
    def saving(i: int) -> Callable[[], Awaitable[object]]:
        return lambda: store.save_messages(f"t{i}", [say(f"m{i}a", f"t{i}", 1), say(f"m{i}b", f"t{i}", 2)])

    before = store.statistics()
    outcome = await together(store, pg_dsn, {f"t{i}": saving(i) for i in range(6)})
    after = store.statistics()
    assert after.commits - before.commits == 3  # the two blocked saves, and the six together
    assert after.jobs - before.jobs == 8
    assert (after.largest_group, after.queued) == (6, 0)
    for i in range(6):
        saved = outcome[f"t{i}"]
        assert isinstance(saved, list)
        assert [m.id for m in saved] == [f"m{i}a", f"m{i}b"]
        assert [m.thread_id for m in saved] == [f"t{i}", f"t{i}"]
        assert await ids_of(store, f"t{i}") == [f"m{i}a", f"m{i}b"]
    assert await ids_of(store, "blocker0") == ["b0"]


async def test_a_failing_save_of_a_group_fails_alone_and_writes_nothing(store: PostgresStore, pg_dsn: str) -> None:
    await store.save_messages("t7", [say("taken", "t7")])
    outcome = await together(store, pg_dsn, {
        "ok": lambda: store.save_messages("t0", [say("ok1", "t0")]),
        "missing thread": lambda: store.save_messages("nope", [say("n1", "nope")]),
        "id of another thread": lambda: store.save_messages("t1", [say("t1-own", "t1"), say("taken", "t1")]),
        "other resource": lambda: store.save_messages("t2", [say("x1", "t2", resource="r2")]),
        "also ok": lambda: store.save_messages("t3", [say("ok3", "t3")]),
    })
    assert isinstance(outcome["missing thread"], ThreadNotFound)
    assert isinstance(outcome["id of another thread"], MessageIdTaken)
    assert isinstance(outcome["other resource"], ResourceMismatch)
    assert [m.id for m in outcome["ok"]] == ["ok1"]  # type: ignore[attr-defined]
    assert [m.id for m in outcome["also ok"]] == ["ok3"]  # type: ignore[attr-defined]
    assert await ids_of(store, "t0") == ["ok1"]
    assert await ids_of(store, "t3") == ["ok3"]
    assert await ids_of(store, "t1") == []  # its own message neither: a save is all or nothing
    assert await ids_of(store, "t2") == []
    assert await ids_of(store, "t7") == ["taken"]


async def test_two_saves_claiming_one_id_keep_their_order(store: PostgresStore, pg_dsn: str) -> None:
    """The first to ask gets the id, as if the two had gone one after the other."""
    outcome = await together(store, pg_dsn, {
        "first": lambda: store.save_messages("t0", [say("same", "t0")]),
        "second": lambda: store.save_messages("t1", [say("same", "t1")]),
    })
    assert [m.id for m in outcome["first"]] == ["same"]  # type: ignore[attr-defined]
    assert isinstance(outcome["second"], MessageIdTaken)
    assert await ids_of(store, "t0") == ["same"]
    assert await ids_of(store, "t1") == []


async def test_a_lost_lease_refuses_only_its_own_save(store: PostgresStore, pg_dsn: str) -> None:
    held = {t: await store.acquire_lease(f"thread:{t}", owner="me", ttl=30, wait=False) for t in ("t0", "t1", "t2")}
    lost = msgspec.structs.replace(held["t1"], token=held["t1"].token + 1)  # taken over since
    outcome = await together(store, pg_dsn, {
        "t0": lambda: store.save_messages("t0", [say("f0", "t0")], fence=held["t0"]),
        "t1": lambda: store.save_messages("t1", [say("f1", "t1")], fence=lost),
        "t2": lambda: store.save_messages("t2", [say("f2", "t2")], fence=held["t2"]),
        "t3": lambda: store.save_messages("t3", [say("f3", "t3")]),
    })
    assert isinstance(outcome["t1"], LeaseLost)
    assert await ids_of(store, "t1") == []
    for t in ("t0", "t2", "t3"):
        assert await ids_of(store, t) == [f"f{t[1]}"]


async def test_saves_of_one_thread_apply_in_the_order_they_were_made(store: PostgresStore, pg_dsn: str) -> None:
    """A group holds a thread once: the second save waits for the next statement, and lands after the first
    (both messages have one time: the order is the order of the saves)."""
    before = store.statistics().commits

    async def second() -> object:
        await anyio.sleep(0.02)
        return await store.save_messages("t0", [say("later", "t0", 5)])

    outcome: dict[str, object] = {}
    async with anyio.create_task_group() as tg, statements_busy(store, pg_dsn):
        async def run(name: str, save: Callable[[], Awaitable[object]]) -> None:
            outcome[name] = await save()

        tg.start_soon(run, "first", lambda: store.save_messages("t0", [say("earlier", "t0", 5)]))
        tg.start_soon(run, "other", lambda: store.save_messages("t1", [say("o1", "t1")]))
        tg.start_soon(run, "second", second)
        await until(lambda: waiting(store) >= 3)
        assert len(store._groups._waiting) == 2  # the thread's second save in a group of its own
    assert await ids_of(store, "t0") == ["earlier", "later"]
    assert store.statistics().commits == before + 4  # two blocked saves, the group, the thread's second save


async def test_a_save_cancelled_before_its_group_went_writes_nothing(store: PostgresStore, pg_dsn: str) -> None:
    outcome: dict[str, object] = {}
    async with anyio.create_task_group() as tg:
        async with statements_busy(store, pg_dsn):
            async def keep(name: str, thread: str) -> None:
                outcome[name] = await store.save_messages(thread, [say(name, thread)])

            tg.start_soon(keep, "k0", "t0")
            tg.start_soon(keep, "k1", "t1")

            cancelled = anyio.CancelScope()

            async def cancelled_save() -> None:
                with cancelled:
                    await store.save_messages("t2", [say("gone", "t2")])
                outcome["gone"] = "cancelled" if cancelled.cancelled_caught else "saved"

            tg.start_soon(cancelled_save)
            await until(lambda: waiting(store) >= 3)
            cancelled.cancel()
            await until(lambda: "gone" in outcome)
    assert outcome["gone"] == "cancelled"
    assert await ids_of(store, "t2") == []
    assert await ids_of(store, "t0") == ["k0"]
    assert await ids_of(store, "t1") == ["k1"]


async def test_a_group_whose_saves_were_all_cancelled_passes_its_statement_on(store: PostgresStore,
                                                                              pg_dsn: str) -> None:
    async with statements_busy(store, pg_dsn), anyio.create_task_group() as tg:
        for thread in ("t0", "t1"):
            tg.start_soon(store.save_messages, thread, [say(f"c-{thread}", thread)])
        await until(lambda: waiting(store) >= 2)
        tg.cancel_scope.cancel()
    assert not store._groups._waiting
    with anyio.fail_after(10):  # both statements are free again: a later save goes at once
        assert [m.id for m in await store.save_messages("t3", [say("after", "t3")])] == ["after"]
    assert store._groups._free == SAVE_STATEMENTS
    assert await ids_of(store, "t0") == [] and await ids_of(store, "t1") == []


async def test_memory_saves_from_many_conversations_share_statements(pg_dsn: str) -> None:
    """Through ``Memory`` (thread actors, fenced saves): 40 conversations saving at once, every message kept, in
    order, and some statements carried several conversations' saves."""
    store = PostgresStore(pg_dsn, max_size=8)
    async with Memory(storage=store, options={"lastMessages": 10}) as memory:
        for t in range(40):
            await memory.create_thread(thread_id=f"c{t}", resource_id=f"u{t % 4}")

        async def talk(t: int) -> None:
            for turn in range(5):
                await memory.save_messages([say(f"c{t}-{turn}-{k}", f"c{t}", 2 * turn + k, f"u{t % 4}")
                                            for k in range(2)])

        async with anyio.create_task_group() as tg:
            for t in range(40):
                tg.start_soon(talk, t)
        for t in range(40):
            got = await memory.recall(f"c{t}", resource_id=f"u{t % 4}", per_page=False)
            assert [m.id for m in got.messages] == [f"c{t}-{turn}-{k}" for turn in range(5) for k in range(2)]
    assert store.statistics().largest_group > 1


@pytest.mark.slow  # 24 chats of three requests; the other doors stay in the default run
async def test_chat_requests_of_many_users_share_statements(pg_dsn: str) -> None:
    """Through the chat server's door (``messages_from_ui`` + ``Agent.stream``): 24 chats answered at once, three
    requests each; every chat holds its questions and replies in order, and statements carried several chats'
    saves."""
    store = PostgresStore(pg_dsn, max_size=8)

    def reply(request: ModelRequest) -> str:
        return f"answer to {request.messages[-1].text}"

    async with Memory(storage=store, options={"lastMessages": 20}) as memory:
        agent = Agent("chat", "You answer.", ScriptedModel([reply] * 72), memory=memory)

        async def chat(c: int) -> None:
            history: list[dict[str, object]] = []
            for turn in range(3):
                history.append({"id": f"q{c}-{turn}", "role": "user",
                                "parts": [{"type": "text", "text": f"question {turn} of chat {c}"}]})
                body = {"id": f"chat{c}", "messages": history}
                async with agent.stream(messages_from_ui(body), thread_id=f"chat{c}",
                                        resource_id=f"user{c}") as stream:
                    async for _ in stream:
                        pass
                stored = await memory.recall(f"chat{c}", resource_id=f"user{c}", per_page=False)
                history = [{"id": m.id, "role": m.role, "parts": [{"type": "text", "text": m.text}]}
                           for m in stored.messages]

        async with anyio.create_task_group() as tg:
            for c in range(24):
                tg.start_soon(chat, c)
        for c in range(24):
            stored = (await memory.recall(f"chat{c}", resource_id=f"user{c}", per_page=False)).messages
            assert [m.text for m in stored] == [
                text for turn in range(3)
                for text in (f"question {turn} of chat {c}", f"answer to question {turn} of chat {c}")]
    assert store.statistics().largest_group > 1


async def test_saves_with_their_vectors_share_statements_and_keep_every_vector(pg_dsn: str) -> None:
    """Semantic saves (``PgVectorStore`` beside the store: the vectors go in the save's statement) from 24
    conversations at once: grouped, every message with its vector, none left pending, each found by its vector."""
    store = PostgresStore(pg_dsn, max_size=8)
    vector = PgVectorStore(pg_dsn)
    options = {"lastMessages": 10, "semanticRecall": {"topK": 1, "messageRange": 0, "search": "vector"}}
    async with Memory(storage=store, vector=vector, embedder=HashEmbedder(dim=32), options=options) as memory:
        for t in range(24):
            await memory.create_thread(thread_id=f"s{t}", resource_id="u1")

        async def talk(t: int) -> None:
            for turn in range(3):
                await memory.save_messages([Message.user(f"conversation {t} turn {turn} about topic{t}x{turn}",
                                                         id=f"s{t}-{turn}", thread_id=f"s{t}", resource_id="u1",
                                                         created_at=BASE + timedelta(seconds=turn))])

        async with anyio.create_task_group() as tg:
            for t in range(24):
                tg.start_soon(talk, t)
        assert await vector.message_ids_with_vectors() == {f"s{t}-{turn}" for t in range(24) for turn in range(3)}
        conn = await import_asyncpg().connect(pg_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM threadmind_vector_pending") == 0
        finally:
            await conn.close()
        hits = await memory.search("conversation 7 turn 2 about topic7x2", resource_id="u1", top_k=1, search="vector")
        assert [hit.message.id for hit in hits] == ["s7-2"]
    assert store.statistics().largest_group > 1


async def test_a_group_statement_span_links_the_callers_spans(store: PostgresStore, pg_dsn: str,
                                                               span_exporter: InMemorySpanExporter) -> None:
    """As on SQLite: one ``threadmind.store.group_commit`` span for the shared statement, linked from every caller's
    span, with the statement's ``threadmind.store.write`` span inside it."""
    tracer = trace.get_tracer("test")
    contexts = []

    def caller(i: int) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            with tracer.start_as_current_span(f"caller-{i}") as span:
                contexts.append(span.get_span_context())
                return await store.save_messages(f"t{i}", [say(f"traced{i}", f"t{i}")])
        return run

    await together(store, pg_dsn, {f"t{i}": caller(i) for i in range(3)})
    spans = span_exporter.get_finished_spans()
    groups = [s for s in spans if s.name == "threadmind.store.group_commit"]
    assert len(groups) == 1
    (group,) = groups
    assert {link.context.span_id for link in group.links} == {c.span_id for c in contexts}
    assert group.attributes is not None
    assert group.attributes["db.system.name"] == "postgresql"
    assert group.attributes["threadmind.store.group_size"] == 3
    assert any(s.name == "threadmind.store.write" and s.parent is not None
               and s.parent.span_id == group.context.span_id for s in spans)


async def test_random_saves_never_overlap_on_a_thread_and_apply_in_call_order() -> None:
    """``SaveGroups`` over a stand-in statement with random durations, random failures and random cancellations:
    no thread is ever in two statements at once, at most two statements run and none carries more than
    ``MAX_GROUP`` saves, each thread's applied saves are in the order they were called, and every caller gets its
    own outcome."""
    rng = random.Random(7)
    applied: dict[str, list[int]] = {}
    in_flight: list[set[str]] = []
    most = largest = 0

    async def save_now(parts: Sequence[Part], mark_pending: bool, fences: Sequence[Lease],
                       vectors: VectorRows | None) -> dict[str, list[Message]]:
        nonlocal most, largest
        threads = {part.thread_id for part in parts}
        assert all(threads.isdisjoint(other) for other in in_flight)
        assert len(parts) <= MAX_GROUP  # (one part a save here)
        largest = max(largest, len(parts))
        in_flight.append(threads)
        most = max(most, len(in_flight))
        try:
            await anyio.sleep(rng.random() / 500)
            if any(m.id.endswith("!") for part in parts for m in part.messages):
                raise ThreadNotFound("refused")  # the whole statement, as a refused part aborts it
            for part in parts:
                applied.setdefault(part.thread_id, []).extend(int(m.id.split("-")[1]) for m in part.messages)
            return {part.thread_id: list(part.messages) for part in parts}
        finally:
            in_flight.remove(threads)

    groups = SaveGroups(save_now)
    called: dict[str, list[int]] = {}
    outcomes: dict[int, str] = {}

    async def caller(n: int, thread: str, failing: bool, cancel_after: float | None) -> None:
        mid = f"{thread}-{n}" + ("!" if failing else "")
        called.setdefault(thread, []).append(n)
        with anyio.CancelScope() as scope:
            if cancel_after is not None:
                scope.deadline = anyio.current_time() + cancel_after
            try:
                stored = await groups.save([Part(thread, [say(mid, thread)])], False, None)
                outcomes[n] = "saved" if [m.id for m in stored[thread]] == [mid] else "wrong"
            except ThreadNotFound:
                outcomes[n] = "refused"
        if scope.cancelled_caught:
            outcomes.setdefault(n, "cancelled")

    async with anyio.create_task_group() as tg:
        for n in range(150):  # a crowd larger than a group carries, at once
            tg.start_soon(caller, n, f"crowd{n}", False, None)
        for n in range(150, 750):
            thread = f"t{rng.randrange(12)}"
            failing = rng.random() < 0.05
            cancel_after = rng.random() / 200 if rng.random() < 0.1 else None
            tg.start_soon(caller, n, thread, failing, cancel_after)
            if rng.random() < 0.3:
                await anyio.sleep(rng.random() / 1000)
    assert most <= SAVE_STATEMENTS and largest == MAX_GROUP
    assert groups.statistics().largest_group > 1
    assert set(outcomes.values()) <= {"saved", "refused", "cancelled"}
    for thread, order in applied.items():
        assert order == [n for n in called[thread] if n in order]  # applied in the order called
        assert all(outcomes[n] in ("saved", "cancelled") for n in order)  # cancelled once sent: applied anyway
    saved = {n for n, outcome in outcomes.items() if outcome == "saved"}
    assert saved <= {n for order in applied.values() for n in order}
    refused = {n for n, outcome in outcomes.items() if outcome == "refused"}
    assert refused and not refused & {n for order in applied.values() for n in order}
    assert groups._free == SAVE_STATEMENTS and not groups._busy and not groups._waiting


_SAVERS = """
import sys, anyio
from datetime import UTC, datetime, timedelta
from threadmind.codecs import Message, Thread
from threadmind.stores import PostgresStore

async def main() -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with PostgresStore(sys.argv[1], max_size=8) as store:
        for t in range(16):
            await store.create_thread(Thread(id=f"k{t}", resource_id="r1"))
        print("ready", flush=True)

        async def saver(t: int) -> None:
            n = 0
            while True:
                await store.save_messages(f"k{t}", [Message.user(f"save {n}", id=f"k{t}-{n:05d}", thread_id=f"k{t}",
                                                                 resource_id="r1",
                                                                 created_at=base + timedelta(seconds=n))])
                print(f"ack {t} {n} {store.statistics().largest_group}", flush=True)
                n += 1

        async with anyio.create_task_group() as tg:
            for t in range(16):
                tg.start_soon(saver, t)

anyio.run(main)
"""


@pytest.mark.slow  # a process tree killed, as the other kill -9 tests
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
async def test_sigkill_keeps_every_acknowledged_grouped_save_and_each_threads_order(pg_dsn: str) -> None:
    """16 savers in one process, their saves going in shared statements, killed with SIGKILL: every acknowledged
    save is stored, and each thread holds a gapless prefix of its saves (a later save never without an earlier)."""
    acked: dict[int, int] = {}
    grouped = 0
    async with await anyio.open_process([sys.executable, "-c", _SAVERS, pg_dsn], stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        buffer = b""

        def take(lines: list[bytes]) -> None:
            nonlocal grouped
            for line in lines:
                if line.startswith(b"ack "):
                    _, t, n, g = line.split()
                    acked[int(t)] = max(acked.get(int(t), -1), int(n))
                    grouped = max(grouped, int(g))

        with anyio.fail_after(60):
            while sum(n + 1 for n in acked.values()) < 400 or grouped < 4:
                buffer += await proc.stdout.receive()
                *lines, buffer = buffer.split(b"\n")
                take(lines)
        os.kill(proc.pid, signal.SIGKILL)  # statements in flight
        await proc.wait()
        async for chunk in proc.stdout:  # acknowledgements already in the pipe count too
            buffer += chunk
        take(buffer.split(b"\n"))
    assert proc.returncode == -signal.SIGKILL
    conn = await import_asyncpg().connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT thread_id, id FROM mastra_messages")
    finally:
        await conn.close()
    stored: dict[str, list[int]] = {}
    for thread, mid in rows:
        stored.setdefault(thread, []).append(int(mid.split("-")[1]))
    for t in range(16):
        numbers = sorted(stored.get(f"k{t}", []))
        assert numbers == list(range(len(numbers))), f"thread k{t} has a gap"
        assert len(numbers) >= acked.get(t, -1) + 1, f"an acknowledged save of k{t} was lost"
        assert len(numbers) <= acked.get(t, -1) + 2  # at most the save in flight beyond
