"""Several OS processes on one store (a SQLite file, a PostgreSQL database), through the public Memory/Agent API:
working-memory merges, enqueued turns on one thread, read-your-writes between processes, ties, fresh schemas."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.multiprocess._harness import note, workers
from tests.multiprocess._worker import make_memory, make_store
from tests.stores.test_keywords import write_behind_the_index

from threadmind import Message
from threadmind.codecs import Thread

PROCS = 4


def _config(backend: dict[str, Any], scenario: str, proc: int, **fields: Any) -> dict[str, Any]:
    return {"store": backend, "scenario": scenario, "proc": proc, "lease_ttl": 2.0, **fields}


# The schema and vnext modes (the tool path) run in CI's slow tier; template (the enqueue path) here too.
@pytest.mark.parametrize("mode", ["template", pytest.param("schema", marks=pytest.mark.slow),
                                  pytest.param("vnext", marks=pytest.mark.slow)])
@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_working_memory_updates_from_four_processes_are_all_kept(backend: dict[str, Any], mode: str) -> None:
    """template: every process takes turns on one thread (enqueue), each appending a line to the document it was
    shown; schema and vnext: a thread per process, running at once, each turn adding a key or a line to the one
    resource's working memory through the tool."""
    turns = 5
    wm: dict[str, Any] = {"template": "# Log"} if mode != "schema" else {
        "schema": {"type": "object", "properties": {"seen": {"type": "object"}}}}
    if mode == "vnext":
        wm["version"] = "vnext"
    configs = [_config(backend, "wm", p, mode=mode, turns=turns, working_memory=wm) for p in range(PROCS)]
    async with workers(configs) as running:
        for worker in running:
            await worker.event("done", limit=50)
    async with make_memory({"store": backend, "lease_ttl": 2.0, "working_memory": wm}) as memory:
        text = await memory.get_working_memory(thread_id="t-wm", resource_id="r-wm")
    assert text is not None
    expected = {f"p{p} t{j}" for p in range(PROCS) for j in range(turns)}
    if mode == "schema":
        kept = {key.replace("_", " ") for key in json.loads(text)["seen"]}
    else:
        lines = re.findall(r"^- (p\d+ t\d+)$", text, re.M)
        assert len(lines) == len(set(lines))  # none twice
        kept = set(lines)
    note(test="working_memory", backend=backend["kind"], mode=mode, updates=len(expected), kept=len(kept))
    assert kept == expected


@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_enqueued_turns_from_four_processes_alternate_and_see_every_earlier_turn(
        backend: dict[str, Any]) -> None:
    turns = 5
    configs = [_config(backend, "turns", p, turns=turns, last_messages=1000) for p in range(PROCS)]
    async with workers(configs) as running:
        reports = [await worker.event("done", limit=50) for worker in running]
    async with make_memory({"store": backend, "lease_ttl": 2.0}) as memory:
        stored = (await memory.recall("t-shared", resource_id="r1", per_page=False)).messages
    assert len(stored) == 2 * PROCS * turns
    inputs = [m.text for m in stored[0::2]]
    assert [m.role for m in stored] == ["user", "assistant"] * PROCS * turns  # strict alternation
    assert [m.text for m in stored[1::2]] == [f"reply to {text}" for text in inputs]
    assert sorted(inputs) == sorted(f"p{p} t{j}" for p in range(PROCS) for j in range(turns))
    texts = [m.text for m in stored]
    for report in reports:
        for turn in report["seen"]:
            position = texts.index(turn["input"])
            assert turn["history"] == texts[:position], turn["input"]  # it saw every earlier turn, in order
    for earlier, later in zip(stored, stored[1:], strict=False):
        assert earlier.created_at <= later.created_at
    switches = sum(1 for a, b in zip(inputs, inputs[1:], strict=False) if a.split()[0] != b.split()[0])
    note(test="enqueue", backend=backend["kind"], turns=len(inputs), interleavings=switches)
    assert switches > 0  # the processes really took turns with each other


@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_overlapping_chat_requests_from_four_processes_each_get_their_own_reply(
        backend: dict[str, Any]) -> None:
    """The chat server's door (``messages_from_ui`` + ``Agent.stream``) in four worker processes on one chat id: every
    question is answered by the reply after it, stored under the id its client got in ``start``."""
    turns = 4
    configs = [_config(backend, "chat", p, turns=turns, last_messages=1000) for p in range(PROCS)]
    async with workers(configs) as running:
        reports = [await worker.event("done", limit=50) for worker in running]
    starts = {question: start for report in reports for question, start in report["starts"].items()}
    async with make_memory({"store": backend, "lease_ttl": 2.0}) as memory:
        stored = (await memory.recall("t-chat", resource_id="r1", per_page=False)).messages
    assert [m.role for m in stored] == ["user", "assistant"] * PROCS * turns
    for question, reply in zip(stored[0::2], stored[1::2], strict=True):
        assert reply.text == f"answer to user: {question.text}"
        assert starts[question.id] == reply.id
    assert sorted(m.id for m in stored[0::2]) == sorted(starts)
    assert [m.created_at for m in stored] == sorted(m.created_at for m in stored)


async def test_a_write_by_one_process_is_seen_by_the_others_next_read(backend: dict[str, Any]) -> None:
    async with make_memory({"store": backend, "lease_ttl": 2.0, "working_memory": {"template": "# Log"}}) as memory:
        await memory.create_thread(thread_id="t-vis", resource_id="r1")
        config = _config(backend, "serve", 0, working_memory={"template": "# Log"})
        async with workers([config]) as (child,):
            for i in range(4):
                assert [m.id for m in (await memory.recall("t-vis", resource_id="r1")).messages] == \
                    [f"c{k}" for k in range(i)] + []  # read (and cached) before the child writes
                await child.send(f"save c{i} from the child {i}")
                await child.event("saved")
                page = await memory.recall("t-vis", resource_id="r1")
                assert [m.id for m in page.messages] == [f"c{k}" for k in range(i + 1)]
                await child.send(f"wm child {i}")
                await child.event("wm")
                assert await memory.get_working_memory(thread_id="t-vis", resource_id="r1") == f"child {i}"
                await memory.update_working_memory(thread_id="t-vis", resource_id="r1", working_memory=f"parent {i}")
                await child.send("recall")
                seen = await child.event("recalled")
                assert seen["wm"] == f"parent {i}" and seen["ids"] == [f"c{k}" for k in range(i + 1)]
            await child.send("quit")
            await child.event("done")


@pytest.mark.slow  # a tree of processes: CI's slow tier
async def test_equal_timestamps_from_several_processes_read_back_in_one_order(backend: dict[str, Any]) -> None:
    at = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    count = 6
    async with make_memory({"store": backend, "lease_ttl": 2.0}) as memory:
        await memory.create_thread(thread_id="t-ties", resource_id="r1")
        configs = [_config(backend, "ties", p, at=at.isoformat(), count=count) for p in range(PROCS)]
        async with workers(configs) as running:
            for worker in running:
                await worker.event("saved", limit=50)
            for worker in running:
                await worker.send("read")
            reports = [await worker.event("done") for worker in running]
        ours = [m.id for m in (await memory.recall("t-ties", resource_id="r1", per_page=False)).messages]
    assert len(ours) == PROCS * count and len(set(ours)) == len(ours)
    for report in reports:
        assert report["asc"] == ours and report["recalled"] == ours
        assert report["desc"] == ours[::-1]
    for p in range(PROCS):  # each process's saves keep their order
        own = [mid for mid in ours if mid.startswith(f"p{p}-")]
        assert own == sorted(own)
    switches = sum(1 for a, b in zip(ours, ours[1:], strict=False) if a[:2] != b[:2])
    note(test="ties", backend=backend["kind"], messages=len(ours), interleavings=switches)


@pytest.mark.slow  # a tree of processes: CI's slow tier
async def test_several_processes_open_a_fresh_store_at_once(backend: dict[str, Any]) -> None:
    procs = 6
    configs = [_config(backend, "opening", p) for p in range(procs)]
    async with workers(configs) as running:
        for worker in running:
            await worker.event("done", limit=50)
    async with make_memory({"store": backend, "lease_ttl": 2.0}) as memory:
        page = await memory.list_threads(resource_id="r1")
        assert sorted(t.id for t in page.threads) == sorted(f"t-open-{p}" for p in range(procs))
        for p in range(procs):
            assert [m.text for m in (await memory.recall(f"t-open-{p}", resource_id="r1")).messages] == \
                [f"hello from p{p}"]


@pytest.mark.slow  # a tree of processes: CI's slow tier
async def test_processes_opening_a_database_mastra_wrote_index_its_words_once(backend: dict[str, Any]) -> None:
    """Messages written without the keyword index (by Mastra) are indexed once, whichever of the processes that
    open the store at once gets each batch."""
    rows = 2400
    store = make_store(backend)
    await store.open()
    try:
        await store.create_thread(Thread(id="t1", resource_id="r1"))
        await write_behind_the_index(store, [
            Message.user(f"note {i} about a parrot", id=f"m{i}", thread_id="t1", resource_id="r1",
                         created_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=i)) for i in range(rows)])
    finally:
        await store.aclose()
    procs = 3
    async with workers([_config(backend, "catch_up", p) for p in range(procs)]) as running:
        reports = [await worker.event("done", limit=60) for worker in running]
    written = [report["written"] for report in reports]
    note(test="catch_up", backend=backend["kind"], processes=procs, written=written)
    assert sum(written) == rows  # each message indexed by one process
    assert all(report["found"] == rows for report in reports)


async def test_semantic_recall_finds_another_processs_message_at_the_next_query(backend: dict[str, Any],
                                                                                 tmp_path: Path) -> None:
    """Round after round, what the other process's ``save_messages`` acknowledged is found by this process's very
    next query (SPEC §10), with each process's own HNSW index on one SQLite file or one PostgreSQL database."""
    base = {"store": backend, "lease_ttl": 2.0, "semantic": True, "hnsw_path": str(tmp_path / "index.hnsw")}
    topics = ["zebra crossing", "harbour tanker", "violin lesson", "glacier hike", "pottery wheel", "chess opening"]
    async with make_memory(base) as memory:
        await memory.create_thread(thread_id="t-vis", resource_id="r1")
        assert await memory.search_vectors("zebra crossing", top_k=3, resource_id="r1") == []
        async with workers([{**base, "scenario": "serve", "proc": 0}]) as (child,):
            for n, topic in enumerate(topics):
                await child.send(f"save c{n} the {topic} on main street")
                await child.event("saved")
                hits = await memory.search_vectors(f"the {topic} on main street", top_k=3, resource_id="r1")
                assert [hit.message_id for hit in hits][:1] == [f"c{n}"], f"round {n}"
            await child.send("quit")
            await child.event("done")



async def test_a_message_another_process_saved_is_found_by_its_words_at_once(backend: dict[str, Any]) -> None:
    """The keyword index is written with the rows (SQLite: queued in the save's transaction, folded before any
    search reads): the very next keyword search of another process finds what a save acknowledged, both ways."""
    async with make_memory({"store": backend, "lease_ttl": 2.0}) as memory:
        await memory.create_thread(thread_id="t-vis", resource_id="r1")
        async with workers([{"store": backend, "scenario": "serve", "proc": 0, "lease_ttl": 2.0}]) as (child,):
            for n, word in enumerate(["zeppelin", "quokka", "marimba", "fjord"]):
                await child.send(f"save c{n} a note about the {word} trip")
                await child.event("saved")
                hits = await memory.search(f"{word} trip", resource_id="r1", top_k=1, search="keyword")
                assert [h.message.id for h in hits] == [f"c{n}"], word
                await memory.save_messages([Message.user(f"parent {word} echo", id=f"p{n}", thread_id="t-vis",
                                                         resource_id="r1", created_at=datetime.now(UTC))])
                await child.send(f"words {word} echo")
                assert (await child.event("found"))["ids"][:1] == [f"p{n}"]
            # Changes the other process indexed itself (its search folded them): this one's cached scope is stale.
            await child.send("update c0 nothing left of that trip")
            await child.event("updated")
            await child.send("delete c1")
            await child.event("deleted")
            await child.send("words trip")
            assert (await child.event("found"))["ids"][:1] == ["c0"]
            for n, gone in enumerate(("zeppelin", "quokka")):  # found by its words: the parent's echo alone
                hits = await memory.search(gone, resource_id="r1", search="keyword")
                assert [h.message.id for h in hits if h.keyword_score is not None] == [f"p{n}"], gone
            await child.send("quit")
            await child.event("done")
