"""Observational memory's async buffering: chunks observed ahead and activated at the threshold with no model
call, on every store and across processes; reflections computed ahead; what a buffered chunk carries."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Message
from threadmind.agent import Agent
from threadmind.memory import Memory
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._om_triggers import chunks_to_activate
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._om import OMRecord
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import observational_engine

from ._om_support import endless, long_text, observer_step, om_memory, om_records


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def om_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "postgres":
        from threadmind.stores import PostgresStore

        return PostgresStore(request.getfixturevalue("pg_dsn"))
    return InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "om.db")


async def test_buffered_observations_activate_at_the_threshold_with_no_model_call(om_store: Any) -> None:
    """``observation.bufferTokens``: every interval of unobserved tokens (halved near the threshold) a background
    Observer call adds a chunk to the record, not yet active; the turn that reaches ``messageTokens`` makes the
    chunks active at once (Mastra's boundary: about ``1 - bufferActivation`` of the threshold stays as messages),
    with no Observer call of its own, and tells the stream."""
    observer = endless(lambda request: f"* 🔴 observed chunk {len(observer.requests)}")
    seen: list[tuple[int, list[str]]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((observer.calls, list(request.system)))
        return "ok"

    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        agent = Agent("a", "i", endless(reply), memory=memory)
        chunks = []
        for n in range(3):
            await agent.generate(long_text(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
            [record] = (await om_records(memory))[-1:]
            chunks.append(len(record.buffered_chunks))
            assert not record.active_observations  # computed ahead, not active
        assert chunks == [1, 2, 3] and observer.calls == 3
        async with agent.stream(long_text("turn3"), thread_id="t1", resource_id="r1") as stream:
            kinds = [event.type async for event in stream]
        calls_at_model, system = seen[-1]
        assert calls_at_model == 3  # the threshold was met with what was computed ahead: no Observer call
        block = next(text for text in system if "<observations>" in text)
        assert all(f"observed chunk {i}" in block for i in (1, 2, 3)), block
        assert "data-om-activation" in kinds and kinds.index("data-om-activation") < kinds.index("start-step")
        await memory.settled()
        record = (await om_records(memory))[-1]
        assert record.active_observations.count("observed chunk") == 3 and record.origin_type == "observation"
        remaining = (await memory.recall("t1", per_page=False)).messages
        sealed = [m.id for m in remaining if ((m.content.metadata or {}).get("mastra") or {}).get("sealed")]
        assert len(sealed) == 6  # the three turns the chunks held


async def test_two_processes_buffering_one_thread_make_one_observer_call(tmp_path: Path) -> None:
    """Two Memory objects on one SQLite file (as two processes have) asked to compute the same chunk at once: the
    Observer's claim (a lease on the store) lets one run it; the other leaves the cycle to it. One Observer call,
    one chunk."""
    from threadmind import Message

    release, called = anyio.Event(), anyio.Event()
    calls: list[int] = []

    async def observe(request: ModelRequest) -> str:
        calls.append(1)
        called.set()
        with anyio.fail_after(5):
            await release.wait()
        return f"* 🔴 chunk by call {len(calls)}"

    options = {"observationalMemory": {"observation": {"model": ScriptedModel(iter(lambda: observe, None)),
                                                       "messageTokens": 200, "bufferTokens": 50}}}
    path = tmp_path / "shared.db"
    async with Memory(storage=SQLiteStore(path), options=options) as first, \
            Memory(storage=SQLiteStore(path), options=options) as second:
        await first.create_thread(thread_id="t1", resource_id="r1")
        await first.save_messages([Message.user(long_text("one"), thread_id="t1", resource_id="r1")])
        config = first.options.observational_memory_config
        assert config is not None
        for memory in (first, second):
            memory.get_input_processors()  # makes the memory's engine, as a turn does
            engine = observational_engine(memory)
            assert engine is not None and engine.buffer(config, "t1", "r1", 60)
        with anyio.fail_after(5):
            await called.wait()
        await anyio.sleep(0.1)  # time for the other to try (it was started first)
        release.set()
        await first.settled()
        await second.settled()
        records = await om_records(first)
    assert len(calls) == 1 and len(records) == 1 and len(records[0].buffered_chunks) == 1


async def test_a_reflection_computed_ahead_becomes_the_next_generation_with_no_model_call() -> None:
    """With observations buffered, past ``reflection.bufferActivation`` (0.5) of ``observationTokens`` the
    Reflector runs in the background; reaching the threshold then makes its reflection, followed by the lines
    observed since, the next generation, with no Reflector call of its own. Fast turns (a millisecond apart) keep
    every message: a turn's input is dated after the observed rows it does not load."""
    observer = endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    reflector = endless(lambda request: "* 🔴 condensed by the reflector")
    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50},
                                       "reflection": {"model": reflector, "observationTokens": 60}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", endless(lambda request: "ok"), memory=memory)
        generations: list[tuple[int, int, bool]] = []
        for n in range(7):
            await agent.generate(long_text(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
            history = await om_records(memory)
            generations.append((len(history), reflector.calls, history[-1].buffered_reflection is not None))
        assert generations[3] == (1, 1, True)  # the first activation passed half the threshold: reflected ahead
        assert generations[6][:2] == (2, 1)  # the next activation reached it: a new generation, no new call
        newest = (await om_records(memory))[-1]
        assert newest.origin_type == "reflection" and newest.buffered_reflection is None
        assert newest.active_observations.startswith("* 🔴 condensed by the reflector\n\n")
        assert "observed chunk 4" in newest.active_observations  # observed after the reflection began
        messages = (await memory.recall("t1", per_page=False)).messages
        assert [m.text for m in messages if m.role == "user"] == [long_text(f"turn{n}") for n in range(7)]


async def test_a_turns_input_is_dated_after_the_observed_rows_it_does_not_load() -> None:
    """The newest stored row may be an observed one, which observational memory does not load (here dated 2 s
    ahead, as a clock running ahead or fast turns leave it): the turn's input still sorts after it, so it is
    neither hidden behind the observation cursor nor ever skipped by the Observer."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now

    async with om_memory(InMemoryStore(), endless(lambda request: "* x"), message_tokens=100_000) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        ahead = Message.user("from a clock ahead", id="ahead", thread_id="t1", resource_id="r1",
                             created_at=utc_now() + timedelta(seconds=2))
        await memory.save_messages([ahead])
        memory.get_input_processors()
        engine = observational_engine(memory)
        assert engine is not None
        now = utc_now()
        await engine.records.put(OMRecord(id="om-1", lookup_key="thread:t1", scope="thread", resource_id="r1",
                                          thread_id="t1", active_observations="* 🔴 earlier", created_at=now,
                                          updated_at=now, last_observed_at=ahead.created_at,
                                          observed_message_ids=["ahead"]))
        model = ScriptedModel(["one", "two"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("after it", thread_id="t1", resource_id="r1")
        stored = {m.text: m for m in (await memory.recall("t1", per_page=False)).messages}
        assert stored["after it"].created_at > ahead.created_at
        await agent.generate("again", thread_id="t1", resource_id="r1")
        assert "after it" in [m.text for m in model.requests[1].messages]  # unobserved, so sent verbatim


async def test_buffered_chunks_carry_the_title_and_the_working_memory_to_their_activation() -> None:
    """With observations buffered, what the Observer says beside them (``threadTitle``, and the working memory it
    manages) is kept with the chunk (Mastra's ``threadTitle`` and ``extractedValues``) and applied when the chunk
    becomes active, not before."""
    def observe(request: ModelRequest) -> str:
        n = len(observer.requests)
        return (f"* 🔴 observed chunk {n}\n<thread-title>Trip number {n}</thread-title>\n"
                f"<working-memory>\n# Me\n- trips: {n}\n</working-memory>")

    observer = endless(observe)
    options = {"workingMemory": {"enabled": True, "template": "# Me\n- trips:"},
               "observationalMemory": {"observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50,
                                                       "threadTitle": True, "manageWorkingMemory": True}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1", title="Untitled")
        agent = Agent("a", "i", endless(lambda request: "ok"), memory=memory)
        for n in range(3):
            await agent.generate(long_text(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "Untitled"  # buffered only: nothing applied yet
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") is None
        chunk = (await om_records(memory))[-1].buffered_chunks[-1]
        assert chunk["threadTitle"] == "Trip number 3" and chunk["extractedValues"] == {
            "working-memory": "# Me\n- trips: 3"}
        await agent.generate(long_text("turn3"), thread_id="t1", resource_id="r1")  # reaches the threshold
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "Trip number 3"
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\n- trips: 3"


def _racing(monkeypatch: pytest.MonkeyPatch, memory: Memory, turn: Callable[[], Awaitable[object]]) -> list[object]:
    """Make the next compare-and-set of ``memory``'s records lose a race: ``turn`` (a turn of another process, which
    takes no claim) changes the record between the cycle's read and its write. What ``turn`` returned is listed."""
    engine = observational_engine(memory)
    assert engine is not None
    records = engine.records
    real = records.replace
    ran: list[object] = []

    async def replace(record: OMRecord, *, expected: OMRecord | None) -> bool:
        if not ran:
            ran.append("running")
            ran[0] = await turn()
        return await real(record, expected=expected)

    monkeypatch.setattr(records, "replace", replace)
    return ran


async def test_a_chunk_committed_while_a_turn_activates_older_chunks_is_kept(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn activates the chunks computed so far between a buffering cycle's read of the record and its
    compare-and-set (in another process: activation takes no claim). The cycle's chunk still fits the record (its
    messages are neither observed nor in another chunk), so the cycle reads again and keeps it: the Observer is never
    given the same messages twice."""
    calls: list[str] = []
    options = {"observationalMemory": {"observation": {"model": endless(observer_step(calls)), "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        config = memory.options.observational_memory_config
        memory.get_input_processors()  # makes the memory's engine, as a turn does
        engine = observational_engine(memory)
        assert config is not None and engine is not None
        await memory.save_messages([Message.user(long_text("one"), thread_id="t1", resource_id="r1")])
        assert engine.buffer(config, "t1", "r1", 60)
        await memory.settled()
        await memory.save_messages([Message.user(long_text("two"), thread_id="t1", resource_id="r1")])
        ran = _racing(monkeypatch, memory, lambda: engine.activate(config, "t1", "r1", None))
        assert engine.buffer(config, "t1", "r1", 120)
        await memory.settled()
        assert ran == [True]  # the turn's activation landed inside the cycle's commit
        assert engine.buffer(config, "t1", "r1", 180)  # nothing is left to buffer: no Observer call
        await memory.settled()
        [record] = (await om_records(memory))[-1:]
    assert len(calls) == 2 and "one: word0" in calls[0] and "two: word0" in calls[1], calls
    assert "one: word0" not in calls[1]
    assert record.active_observations.count("observation 1") == 1 and "observation 2" not in \
        record.active_observations
    assert [c["observations"].rsplit("\n", 1)[-1] for c in record.buffered_chunks] == ["* 🔴 observation 2"]


async def test_an_observation_round_racing_a_turns_activation_never_observes_a_chunks_messages(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An observation round makes every buffered chunk active first; a turn activating the oldest chunk at the same
    moment makes that compare-and-set fail. The round reads again and activates what is left, so it never hands the
    Observer messages a chunk was made of (they were observed once, when the chunk was computed)."""
    calls: list[str] = []
    options = {"observationalMemory": {"observation": {"model": endless(observer_step(calls)), "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        config = memory.options.observational_memory_config
        memory.get_input_processors()
        engine = observational_engine(memory)
        assert config is not None and engine is not None
        texts = [long_text(tag, words=90) for tag in ("one", "two", "three")]
        for n, text in enumerate(texts[:2]):
            await memory.save_messages([Message.user(text, thread_id="t1", resource_id="r1")])
            assert engine.buffer(config, "t1", "r1", 60 * (n + 1))
            await memory.settled()
        await memory.save_messages([Message.user(texts[2], thread_id="t1", resource_id="r1")])
        [record] = (await om_records(memory))[-1:]
        chunks, threshold = record.buffered_chunks, config.message_threshold(0)
        assert len(chunks) == 2 and len(calls) == 2
        # the unobserved messages a stale read would hand the Observer cross the threshold
        unobserved = (await memory.recall("t1", per_page=False)).messages
        assert engine.counter.count_messages(unobserved[1:]) >= threshold
        pending = next(p for p in range(2000) if chunks_to_activate(chunks, p, threshold, config.activation_ratio) == 1)
        ran = _racing(monkeypatch, memory, lambda: engine.activate(config, "t1", "r1", pending))
        await engine.ensure_below_block(config, "t1", "r1", 10_000)
        [record] = (await om_records(memory))[-1:]
    assert ran == [True]  # the turn activated the oldest chunk inside the round's own activation
    given = collections.Counter(tag for call in calls for tag in ("one", "two", "three") if f"{tag}: word0" in call)
    assert max(given.values()) == 1, calls
    assert not record.buffered_chunks and record.active_observations.count("observation 1") == 1 and \
        record.active_observations.count("observation 2") == 1


async def test_a_turns_activation_racing_a_new_chunk_still_activates(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffering cycle (another process's) adds a chunk between a turn's read of the record and its activation's
    compare-and-set: the chunks the turn read are still there, so it reads again and activates, rather than going on
    with every buffered message still in its context."""
    calls: list[str] = []
    options = {"observationalMemory": {"observation": {"model": endless(observer_step(calls)), "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        config = memory.options.observational_memory_config
        memory.get_input_processors()
        engine = observational_engine(memory)
        assert config is not None and engine is not None
        await memory.save_messages([Message.user(long_text("one"), thread_id="t1", resource_id="r1")])
        assert engine.buffer(config, "t1", "r1", 60)
        await memory.settled()
        await memory.save_messages([Message.user(long_text("two"), thread_id="t1", resource_id="r1")])

        async def another_cycle() -> int:
            assert engine.buffer(config, "t1", "r1", 120)
            await memory.settled()
            return len((await om_records(memory))[-1].buffered_chunks)

        ran = _racing(monkeypatch, memory, another_cycle)
        assert await engine.activate(config, "t1", "r1", None)
        [record] = (await om_records(memory))[-1:]
    assert ran == [2]  # the second chunk landed inside the activation's commit
    assert not record.buffered_chunks and len(calls) == 2
    assert [record.active_observations.count(f"observation {n}") for n in (1, 2)] == [1, 1]


async def _observed_once(memory: Memory) -> tuple[Any, Any]:
    """``memory``'s config and engine once a first chunk (of the message "one") was buffered and made active."""
    await memory.create_thread(thread_id="t1", resource_id="r1")
    config = memory.options.observational_memory_config
    memory.get_input_processors()
    engine = observational_engine(memory)
    assert config is not None and engine is not None
    await memory.save_messages([Message.user(long_text("one"), thread_id="t1", resource_id="r1")])
    assert engine.buffer(config, "t1", "r1", 60)
    await memory.settled()
    assert await engine.activate(config, "t1", "r1", None)
    return config, engine


async def test_a_reflection_racing_a_new_chunk_is_kept_and_carries_the_chunk(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffering cycle adds a chunk between a reflection's read and its commit: the observations it condensed are
    unchanged, so the new generation is written (one Reflector call, not a second one later) and keeps the chunk,
    whose messages are still to be activated."""
    calls: list[str] = []
    model = endless(observer_step(calls))
    options = {"observationalMemory": {"observation": {"model": model, "messageTokens": 200, "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        config, engine = await _observed_once(memory)
        await memory.save_messages([Message.user(long_text("two"), thread_id="t1", resource_id="r1")])
        [base] = (await om_records(memory))[-1:]

        async def another_cycle() -> int:
            assert engine.buffer(config, "t1", "r1", 120)
            await memory.settled()
            return len((await om_records(memory))[-1].buffered_chunks)

        ran = _racing(monkeypatch, memory, another_cycle)
        assert await engine.reflections.now(config, "t1", "r1", base, model)
        history = await om_records(memory)
    assert ran == [1] and calls.count("reflect") == 1
    assert [r.generation_count for r in history] == [0, 1] and history[-1].active_observations == "* condensed"
    assert [c["messageIds"] for c in history[-1].buffered_chunks] == [c["messageIds"] for c in
                                                                      history[0].buffered_chunks]
    assert len(history[-1].buffered_chunks) == 1


async def test_a_reflection_of_observations_reflected_meanwhile_makes_no_model_call(om_store: Any) -> None:
    """The Reflector is not called for observations another holder reflected (or observed past) since they were
    read: the result could not be kept."""
    calls: list[str] = []
    model = endless(observer_step(calls))
    options = {"observationalMemory": {"observation": {"model": model, "messageTokens": 200, "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        config, engine = await _observed_once(memory)
        [base] = (await om_records(memory))[-1:]
        assert await engine.reflections.now(config, "t1", "r1", base, model)
        assert not await engine.reflections.now(config, "t1", "r1", base, model)  # a stale read of the same record
        history = await om_records(memory)
    assert calls.count("reflect") == 1 and [r.generation_count for r in history] == [0, 1]


async def test_a_turn_whose_activation_another_turn_made_first_sees_the_observations(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two turns at the threshold at once (in two processes): the other one activates the chunks between this turn's
    read of the record and its activation's commit. This turn then has nothing left to activate, and reads the record
    again: its model sees the observations, not the messages they replaced."""
    calls: list[str] = []
    seen: list[tuple[list[str], list[str]]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((list(request.system), [m.text for m in request.messages]))
        return "ok"

    options = {"observationalMemory": {"observation": {"model": endless(observer_step(calls)), "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        config = memory.options.observational_memory_config
        memory.get_input_processors()
        engine = observational_engine(memory)
        assert config is not None and engine is not None
        for n, tag in enumerate(("one", "two", "three")):
            await memory.save_messages([Message.user(long_text(tag, words=60), thread_id="t1", resource_id="r1")])
            assert engine.buffer(config, "t1", "r1", 90 * (n + 1))
            await memory.settled()
        ran = _racing(monkeypatch, memory, lambda: engine.activate(config, "t1", "r1", None))
        agent = Agent("a", "i", endless(reply), memory=memory)
        await agent.generate(long_text("four", words=60), thread_id="t1", resource_id="r1")
    assert ran == [True]  # the other turn's activation landed inside this turn's
    [(system, texts)] = seen
    blocks = [text for text in system if "<observations>" in text]
    assert len(blocks) == 1 and all(f"observation {n}" in blocks[0] for n in (1, 2, 3)), system
    assert not any(f"{tag}: word0" in text for text in texts for tag in ("one", "two", "three")), texts
