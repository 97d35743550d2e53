"""Observational memory: observation, reflection, context shaping, concurrency, failures, the SQLite row."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.agent import Agent
from threadmind.errors import ModelError
from threadmind.memory import Memory, MemoryConfig, ObservationalMemoryConfig
from threadmind.models import ModelRequest, ModelResponse
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import (
    CONTINUATION_REMINDER,
    OBSERVATIONS_PREAMBLE,
    OBSERVER_INSTRUCTIONS,
    REFLECTOR_INSTRUCTIONS,
)
from threadmind.processors._protocol import processor_id
from threadmind.stores import MessageQuery
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._om import OMRecord
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import actor_system, observational_engine

OM_COLUMNS = [
    "id", "lookupKey", "scope", "resourceId", "threadId", "activeObservations", "activeObservationsPendingUpdate",
    "originType", "config", "generationCount", "lastObservedAt", "lastReflectionAt", "pendingMessageTokens",
    "totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "observedMessageIds",
    "observedTimezone", "bufferedObservations", "bufferedObservationTokens", "bufferedMessageIds",
    "bufferedReflection", "bufferedReflectionTokens", "bufferedReflectionInputTokens",
    "reflectedObservationLineCount", "bufferedObservationChunks", "isBufferingObservation", "isBufferingReflection",
    "lastBufferedAtTokens", "lastBufferedAtTime", "metadata", "createdAt", "updatedAt",
]


def _long(tag: str) -> str:
    return f"{tag}: " + " ".join(f"word{i}" for i in range(30))


def _observer(calls: list[str], *, reflection: str = "* condensed") -> Callable[[ModelRequest], str]:
    def step(request: ModelRequest) -> str:
        if request.system[0] == REFLECTOR_INSTRUCTIONS:
            calls.append("reflect")
            return reflection
        assert request.system[0] == OBSERVER_INSTRUCTIONS
        calls.append(request.messages[0].text)
        return f"* 🔴 observation {len(calls)}"

    return step


def _endless(step: Callable[[ModelRequest], Any]) -> ScriptedModel:
    return ScriptedModel(iter(lambda: step, None))


def _om_memory(store: Any, model: Any, **om: Any) -> Memory:
    extra = om.pop("extra", {})
    config = ObservationalMemoryConfig(model=model, message_tokens=om.pop("message_tokens", 50), **om)
    return Memory(storage=store, options=MemoryConfig(observational_memory=config, **extra))


async def _records(memory: Memory, key: str = "thread:t1") -> list[OMRecord]:
    engine = observational_engine(memory)
    assert engine is not None
    return await engine.records.history(key)


def test_processors_replace_history() -> None:
    memory = Memory(storage=InMemoryStore(), options={"observationalMemory": True})
    assert [processor_id(p) for p in memory.get_input_processors()] == ["memory-input-filter", "observational-memory"]
    assert [processor_id(p) for p in memory.get_output_processors()] == ["observational-memory"]
    dict_config = Memory(storage=InMemoryStore(), options={"observationalMemory": {
        "observation": {"messageTokens": 123}, "reflection": {"observationTokens": 456}}})
    om = dict_config.options.observational_memory_config
    assert om is not None and (om.message_tokens, om.observation_tokens) == (123, 456)
    assert [processor_id(p) for p in Memory(storage=InMemoryStore()).get_output_processors()] == ["message-history"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_observation_replaces_observed_messages(tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    calls: list[str] = []
    observer = _endless(_observer(calls))
    model = ScriptedModel(["r1", "r2", "r3"])
    async with _om_memory(store, observer) as memory:
        agent = Agent("a", "be brief", model, memory=memory)
        first = await agent.generate(_long("turn one"), thread_id="t1", resource_id="r1")
        await agent.generate(_long("turn two"), thread_id="t1", resource_id="r1")
        await agent.generate("short three", thread_id="t1", resource_id="r1")
        records = await _records(memory)
        assert records, "an observation record exists"
        cursor = records[-1].last_observed_at
        assert cursor is not None and cursor >= first.messages[-1].created_at
        assert records[-1].observed_message_ids
    # the observer saw turn one, in a transcript
    assert "turn one" in calls[0] and "Assistant: r1" in calls[0]
    # turn 3 sees the observations as a system text, and not turn one's messages verbatim
    request = model.requests[2]
    blocks = [s for s in request.system if s.startswith(OBSERVATIONS_PREAMBLE)]
    assert len(blocks) == 1 and "<observations>" in blocks[0] and "Date: " in blocks[0]
    assert "* 🔴 observation 1" in blocks[0]
    assert all("turn one" not in m.text for m in request.messages)
    assert request.messages[-1].text == "short three"
    record = records[-1]
    assert record.origin_type == "observation" and record.generation_count == 0
    assert record.observation_token_count > 0 and record.total_tokens_observed > 50
    assert record.last_observed_at is not None
    assert record.lookup_key == "thread:t1" and record.thread_id == "t1" and record.scope == "thread"


async def test_below_threshold_sends_everything(tmp_path: Path) -> None:
    calls: list[str] = []
    model = ScriptedModel(["r1", "r2"])
    async with _om_memory(InMemoryStore(), _endless(_observer(calls)), message_tokens=10_000) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("hello", thread_id="t1", resource_id="r1")
        await agent.generate("again", thread_id="t1", resource_id="r1")
        assert await _records(memory) == []
    assert calls == []
    assert [m.text for m in model.requests[1].messages] == ["hello", "r1", "again"]
    assert not any(s.startswith(OBSERVATIONS_PREAMBLE) for s in model.requests[1].system)


async def test_reflection_starts_a_new_generation(tmp_path: Path) -> None:
    calls: list[str] = []
    observer = _endless(_observer(calls, reflection="* 🔴 condensed"))
    model = _endless(lambda request: "ok")
    async with _om_memory(SQLiteStore(tmp_path / "om.db"), observer, observation_tokens=8) as memory:
        agent = Agent("a", "i", model, memory=memory)
        for i in range(3):
            await agent.generate(_long(f"turn {i}"), thread_id="t1", resource_id="r1")
        await agent.generate("last", thread_id="t1", resource_id="r1")
        records = await _records(memory)
    assert "reflect" in calls
    origins = [r.origin_type for r in records]
    assert origins[0] == "observation" and "reflection" in origins
    reflected = next(r for r in records if r.origin_type == "reflection")
    assert reflected.generation_count >= 1 and reflected.last_reflection_at is not None
    assert reflected.active_observations.startswith("* 🔴 condensed")
    assert [r.generation_count for r in records] == list(range(len(records)))
    # the newest generation is what the model saw on the last turn
    block = next(s for s in model.requests[-1].system if s.startswith(OBSERVATIONS_PREAMBLE))
    assert records[-1].active_observations.strip() in block


@pytest.mark.parametrize("policy", ["enqueue", "parallel"])
async def test_burst_on_one_thread_observes_each_message_once(tmp_path: Path, policy: str) -> None:
    calls: list[str] = []
    observer = _endless(_observer(calls))
    model = _endless(lambda request: "ok")
    store = SQLiteStore(tmp_path / "om.db")
    async with _om_memory(store, observer, extra={"thread_concurrency": policy}) as memory:
        agent = Agent("a", "i", model, memory=memory)

        async def turn(i: int) -> None:
            await agent.generate(_long(f"msg-{i:03d}"), thread_id="t1", resource_id="r1")

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(turn, i)
        stored = (await memory.recall("t1", per_page=False)).messages
    async with SQLiteStore(tmp_path / "om.db") as reopened:  # after aclose: every observation has committed
        records = await reopened.observational_records().history("thread:t1")
    assert len(stored) == 60
    assert calls, "observations ran"
    assert all("New messages to observe:" in c for c in calls), [c[:300] for c in calls if "New messages" not in c]
    for i in range(30):
        tag = f"msg-{i:03d}"
        assert sum(tag in c.split("New messages to observe:")[1] for c in calls) <= 1, tag
    blocks = records[-1].active_observations.count("* 🔴 observation")
    assert blocks == len(calls)  # every observer result was committed exactly once
    assert len(set(records[-1].observed_message_ids)) == len(records[-1].observed_message_ids)


async def test_turn_does_not_wait_below_block_after(tmp_path: Path) -> None:
    release = anyio.Event()
    started = anyio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        started.set()
        await release.wait()
        return ModelResponse(text="* slow observation")

    observer = _endless(slow)
    model = ScriptedModel(["r1", "r2"])
    async with _om_memory(InMemoryStore(), observer, block_after=100_000) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("one"), thread_id="t1", resource_id="r1")
        await started.wait()
        with anyio.fail_after(5):
            await agent.generate(_long("two"), thread_id="t1", resource_id="r1")
        engine = observational_engine(memory)
        assert engine is not None
        assert engine.inflight(memory.options.observational_memory_config,  # type: ignore[arg-type]
                               "t1", "r1")
        assert len(model.requests[1].messages) == 3  # raw history while the Observer works
        release.set()
    # aclose waited for the observation
    assert observer.calls >= 1
    assert (await engine.records.current("thread:t1")) is not None


async def test_background_work_refused_at_shutdown_leaves_nothing_in_flight() -> None:
    async with _om_memory(InMemoryStore(), _endless(_observer([])), buffer_tokens=10) as memory:
        await Agent("a", "i", ScriptedModel(["r1"]), memory=memory).generate("one", thread_id="t1", resource_id="r1")
        engine = observational_engine(memory)
        config = memory.options.observational_memory_config
    assert engine is not None and config is not None
    assert not engine.schedule(config, "t1", "r1")
    assert not engine.buffer(config, "t1", "r1", 10_000)
    assert not engine.inflight(config, "t1", "r1")  # a key left behind would block every later observation
    assert engine._inflight == {}


async def test_turn_waits_past_block_after(tmp_path: Path) -> None:
    calls: list[str] = []
    observer = _endless(_observer(calls))
    model = ScriptedModel(["r1", "r2"])
    async with _om_memory(InMemoryStore(), observer) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("one") + " " + _long("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")
    assert len(calls) == 1
    # once observations replace the history, a continuation reminder opens what is left (reference §8.1)
    assert [m.text for m in model.requests[1].messages] == [CONTINUATION_REMINDER, "two"]


async def test_failing_observer_does_not_block_the_turn(tmp_path: Path) -> None:
    def raising(request: ModelRequest) -> str:
        raise ModelError("observer down")

    observer = _endless(raising)
    model = ScriptedModel(["r1", "r2", "r3"])
    async with _om_memory(InMemoryStore(), observer) as memory:
        assert observational_engine(memory) is None
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("one"), thread_id="t1", resource_id="r1")
        engine = observational_engine(memory)
        assert engine is not None
        with anyio.fail_after(5):  # retries: 3 attempts, 0.05 s then 0.1 s backoff per observation
            result = await agent.generate(_long("two"), thread_id="t1", resource_id="r1")
        assert result.text == "r2"
        assert await _records(memory) == []
        with anyio.fail_after(5):
            await agent.generate("three", thread_id="t1", resource_id="r1")
    assert observer.calls >= 3 and observer.calls % 3 == 0
    # raw history: every earlier message is still sent verbatim
    assert [m.text for m in model.requests[2].messages][-1] == "three"
    assert len(model.requests[2].messages) == 5


async def test_sqlite_row_has_reference_columns(tmp_path: Path) -> None:
    db = tmp_path / "om.db"
    calls: list[str] = []
    async with _om_memory(SQLiteStore(db), _endless(_observer(calls))) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(_long("one"), thread_id="t1", resource_id="r1")
        await agent.generate(_long("two"), thread_id="t1", resource_id="r1")
    conn = sqlite3.connect(db)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(mastra_observational_memory)")]
        assert columns == OM_COLUMNS
        not_null = {row[1] for row in conn.execute("PRAGMA table_info(mastra_observational_memory)") if row[3]}
        assert {"activeObservations", "config", "lastBufferedAtTokens", "observationTokenCount"} <= not_null
        indexes = [row[1] for row in conn.execute("PRAGMA index_list(mastra_observational_memory)")]
        assert "idx_om_lookup_key" in indexes
        rows = conn.execute('SELECT "lookupKey", "scope", "threadId", "originType", "generationCount", '
                            '"observedMessageIds", "lastObservedAt", "isObserving" '
                            "FROM mastra_observational_memory").fetchall()
    finally:
        conn.close()
    assert len(rows) == 1
    key, scope, thread, origin, generation, ids, last, observing = rows[0]
    assert (key, scope, thread, origin, generation, observing) == ("thread:t1", "thread", "t1", "observation", 0, 0)
    assert ids.startswith("[") and last.endswith("Z")
    # the record survives a restart
    async with _om_memory(SQLiteStore(db), _endless(_observer(calls))) as memory:
        model = ScriptedModel(["r3"])
        await Agent("a", "i", model, memory=memory).generate("three", thread_id="t1", resource_id="r1")
    assert any(s.startswith(OBSERVATIONS_PREAMBLE) for s in model.requests[0].system)


async def test_agent_model_is_the_default_observer(tmp_path: Path) -> None:
    seen: list[str] = []

    def step(request: ModelRequest) -> str:
        if request.system[0] == OBSERVER_INSTRUCTIONS:
            seen.append("observer")
            return "* observed by the agent model"
        return "ok"

    model = _endless(step)
    options = {"observationalMemory": {"observation": {"messageTokens": 50}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("one"), thread_id="t1", resource_id="r1")
        await agent.generate(_long("two"), thread_id="t1", resource_id="r1")
        records = await _records(memory)
    assert seen and records and "observed by the agent model" in records[-1].active_observations


async def test_read_only_turn_neither_persists_nor_observes(tmp_path: Path) -> None:
    calls: list[str] = []
    async with _om_memory(InMemoryStore(), _endless(_observer(calls))) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1"]), memory=memory)
        await agent.generate(_long("one"), thread_id="t1", resource_id="r1", memory_options={"readOnly": True})
        assert (await memory.recall("t1", per_page=False)).messages == []
    assert calls == []


async def test_resource_scope_shares_observations_across_threads(tmp_path: Path) -> None:
    calls: list[str] = []
    model = _endless(lambda request: "ok")
    async with _om_memory(SQLiteStore(tmp_path / "om.db"), _endless(_observer(calls)), scope="resource") as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("on thread one"), thread_id="t1", resource_id="r1")
        await agent.generate(_long("more on thread one"), thread_id="t1", resource_id="r1")
        await agent.generate("now thread two", thread_id="t2", resource_id="r1")
        records = await _records(memory, "resource:r1")
    assert records and records[-1].scope == "resource" and records[-1].resource_id == "r1"
    assert records[-1].thread_id is None
    assert "on thread one" in calls[0]
    block = next(s for s in model.requests[-1].system if s.startswith(OBSERVATIONS_PREAMBLE))
    assert "* 🔴 observation 1" in block  # thread two sees what was observed on thread one


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_delete_thread_removes_its_observations(tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    calls: list[str] = []
    async with _om_memory(store, _endless(_observer(calls))) as memory:
        agent = Agent("a", "i", _endless(lambda request: "ok"), memory=memory)
        await agent.generate(_long("turn one"), thread_id="t1", resource_id="r1")
        await agent.generate(_long("turn two"), thread_id="t1", resource_id="r1")
        with anyio.fail_after(5):
            while not await _records(memory):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        await memory.delete_thread("t1")
        assert await _records(memory) == []


async def test_turns_read_unobserved_messages_from_the_thread_actor(tmp_path: Path) -> None:
    """Below the threshold every turn needs every message since the last observation: after the first turn
    the thread actor's tail holds them, so no turn reads messages or the OM record from the database."""
    from datetime import UTC, datetime, timedelta

    class Counting(SQLiteStore):
        def __init__(self, path: Path) -> None:
            super().__init__(path)
            self.message_reads = 0
            self.reads = 0

        async def list_messages(self, query: Any) -> Any:
            self.message_reads += 1
            return await super().list_messages(query)

        async def execute_read(self, fn: Any) -> Any:
            self.reads += 1
            return await super().execute_read(fn)

    store = Counting(tmp_path / "om.db")
    calls: list[str] = []
    model = _endless(lambda request: "ok")
    async with _om_memory(store, _endless(_observer(calls)), message_tokens=100_000) as memory:
        observed = datetime.now(UTC) - timedelta(minutes=1)  # observed before: reads start from a cursor
        await store.observational_records().put(OMRecord(
            id="om-0", lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
            active_observations="* 🟡 earlier", last_observed_at=observed, created_at=observed, updated_at=observed))
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("first", thread_id="t1", resource_id="r1")
        await agent.generate("second", thread_id="t1", resource_id="r1")
        message_reads, reads = store.message_reads, store.reads
        for i in range(5):
            await agent.generate(f"turn {i}", thread_id="t1", resource_id="r1")
        assert store.message_reads == message_reads and store.reads == reads
        assert [m.text for m in model.requests[-1].messages] == [CONTINUATION_REMINDER,
            "first", "ok", "second", "ok", *[t for i in range(4) for t in (f"turn {i}", "ok")], "turn 4"]
    assert calls == []


async def test_an_observation_keeps_the_thread_actors_tail(tmp_path: Path) -> None:
    from threadmind.actors._thread_actor import Exclusive

    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options={"lastMessages": 5}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.recall("t", resource_id="r")
        threads = actor_system(memory).threads
        assert threads is not None
        actor = threads.get("t")

        async def nothing() -> None:
            return None

        await threads.ask("t", Exclusive(nothing, "om_commit", thread_unchanged=True))
        assert actor._tail is not None and actor._thread is not None
        await threads.ask("t", Exclusive(nothing, "anything"))
        assert actor._tail is None and actor._thread is None  # an arbitrary exclusive trusts neither


async def test_the_observer_runs_at_exactly_the_threshold() -> None:
    """Reference §8.1: observe when unobserved tokens >= messageTokens, counted as the round counts them."""
    from threadmind.tokens import DefaultTokenCounter

    async with _om_memory(InMemoryStore(), _endless(_observer([])), message_tokens=10**6) as memory:
        await Agent("a", "i", ScriptedModel(["r1"]), memory=memory).generate(
            _long("one"), thread_id="t1", resource_id="r1")
        turn = (await memory.recall("t1", per_page=False)).messages
    exactly = DefaultTokenCounter().count_messages(turn)  # what one such turn leaves unobserved
    for threshold, observed in ((exactly, 1), (exactly + 1, 0)):
        calls: list[str] = []
        async with _om_memory(InMemoryStore(), _endless(_observer(calls)), message_tokens=threshold) as memory:
            await Agent("a", "i", ScriptedModel(["r1"]), memory=memory).generate(
                _long("one"), thread_id="t1", resource_id="r1")
        assert len(calls) == observed, (threshold, exactly, calls)


async def test_the_model_sees_how_to_read_observations_and_a_continuation_reminder(tmp_path: Path) -> None:
    calls: list[str] = []
    model = ScriptedModel(["r1", "r2"])
    async with _om_memory(SQLiteStore(tmp_path / "om.db"), _endless(_observer(calls))) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(_long("one") + " " + _long("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")
        system = [s for s in model.requests[1].system if s.startswith(OBSERVATIONS_PREAMBLE)]
        assert len(system) == 1 and "</observations>\n\nWhen you answer" in system[0]
        reminder = model.requests[1].messages[0]
        assert reminder.role == "user" and reminder.text.startswith("<system-reminder>")
        assert reminder.text.endswith("</system-reminder>")
        stored = await memory.recall("t1", per_page=False)
        assert CONTINUATION_REMINDER not in [m.text for m in stored.messages]  # never persisted
        assert await memory.list_messages_by_id(["om-continuation"]) == []


@pytest.mark.parametrize(("observation", "scope", "needle"), [
    pytest.param({"messageTokens": 1000, "bufferTokens": 2000}, "thread",
                 r"^observation\.bufferTokens \(2000\) must be less than messageTokens \(1000\)$", id="buffer-big"),
    pytest.param({"messageTokens": 1000, "blockAfter": 500}, "thread",
                 r"^observation\.blockAfter \(500\) must be >= messageTokens \(1000\)$", id="block-after"),
    pytest.param({"bufferTokens": 0}, "thread", r"^observation\.bufferTokens must be > 0, got 0$", id="buffer-zero"),
    pytest.param({"bufferTokens": -5}, "thread", r"must be > 0, got -5$", id="buffer-negative"),
    pytest.param({"bufferTokens": 0.2}, "resource", r"^Async buffering is not yet supported with scope: 'resource'",
                 id="resource-buffer"),
    pytest.param({"threadTitle": "yes"}, "thread", "threadTitle", id="thread-title-not-a-bool"),
])
def test_observational_options_are_validated_with_the_reference_texts(
    observation: dict[str, Any], scope: str, needle: str
) -> None:
    from threadmind.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        Memory(storage=InMemoryStore(), options={"observationalMemory": {"scope": scope, "observation": observation}})


def test_observational_options_mastra_accepts_are_accepted() -> None:
    memory = Memory(storage=InMemoryStore(), options={"observationalMemory": {
        "scope": "resource", "observation": {"bufferTokens": False, "bufferActivation": 0.8, "threadTitle": True}}})
    om = memory.options.observational_memory_config
    assert om is not None and om.scope == "resource" and om.buffer_activation == 0.8 and om.thread_title


async def test_an_observation_seals_what_it_observed_and_notes_the_thread(tmp_path: Path) -> None:
    """Reference §8.1: observed messages carry content.metadata.mastra.sealed; the thread's
    metadata.mastra.om holds the cursor and what the Observer said of the current task."""
    from threadmind.codecs._time import to_iso

    def observe(request: ModelRequest) -> str:
        return ("* 🔴 user plans a trip\n<current-task>booking the trip</current-task>\n"
                "<suggested-response>ask for dates</suggested-response>")

    async with _om_memory(SQLiteStore(tmp_path / "om.db"), _endless(observe)) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"mastra": {"keep": 1}, "x": 2})
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(_long("one") + " " + _long("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")  # waits past block_after: observed
        records = await _records(memory)
        assert records and "<current-task>" not in records[-1].active_observations
        assert "user plans a trip" in records[-1].active_observations
        observed = set(records[-1].observed_message_ids)
        stored = (await memory.recall("t1", per_page=False)).messages
        sealed = {m.id for m in stored if ((m.content.metadata or {}).get("mastra") or {}).get("sealed") is True}
        assert observed and observed <= sealed
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.metadata is not None
        assert thread.metadata["x"] == 2 and thread.metadata["mastra"]["keep"] == 1  # merged, not replaced
        om = thread.metadata["mastra"]["om"]
        last = max((m for m in stored if m.id in observed), key=lambda m: m.created_at)
        assert om["lastObservedAt"] == to_iso(last.created_at)
        assert om["lastObservedMessageCursor"] == {"createdAt": to_iso(last.created_at), "id": last.id}
        assert (om["currentTask"], om["suggestedResponse"]) == ("booking the trip", "ask for dates")


def test_nested_observational_options_reject_typos_by_name() -> None:
    from threadmind.errors import ConfigError

    for group, key in (("observation", "messageTokenz"), ("reflection", "observationTokenz")):
        with pytest.raises(ConfigError, match=f"observationalMemory.{group} has unknown option.*{key}"):
            Memory(storage=InMemoryStore(), options={"observationalMemory": {group: {key: 40}}})


async def test_the_reflector_can_have_its_own_model() -> None:
    calls: list[str] = []
    observer = _endless(_observer(calls))
    reflector = ScriptedModel(["* condensed by the reflector"])
    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 50},
                                       "reflection": {"model": reflector, "observationTokens": 1}}}
    memory = Memory(storage=InMemoryStore(), options=options)
    om = memory.options.observational_memory_config
    assert om is not None and om.model is observer and om.reflection_model is reflector
    async with memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(_long("one") + " " + _long("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")
    assert "reflect" not in calls  # the observer model only observed
    assert [r.system[0] for r in reflector.requests] == [REFLECTOR_INSTRUCTIONS]


@pytest.mark.parametrize("setting", ["on", "pinned", "off"])
async def test_the_observer_titles_the_thread_when_asked(tmp_path: Path, setting: str) -> None:
    """``observation.threadTitle``: the Observer is asked for a title beside its observations, is shown the one it
    gave last, and its title becomes the thread's unless the thread's title is pinned; off, the title stays."""
    from threadmind.processors._observation_text import THREAD_TITLE_INSTRUCTIONS

    requests: list[ModelRequest] = []

    def observe(request: ModelRequest) -> str:
        requests.append(request)
        return f"* 🔴 user plans a trip\n<thread-title>{'Trip planning' if len(requests) == 1 else 'Kyoto trip'}" \
               "</thread-title>"

    async with _om_memory(SQLiteStore(tmp_path / "om.db"), _endless(observe),
                          thread_title=setting != "off") as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", title="Untitled",
                                   metadata={"titlePinned": True} if setting == "pinned" else None)
        agent = Agent("a", "i", ScriptedModel(["r1", "r2", "r3", "r4"]), memory=memory)
        for text in ("one", "two", "three", "four"):
            await agent.generate(_long(text) + " " + _long("more"), thread_id="t1", resource_id="r1")
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.metadata is not None and len(requests) >= 2
        om = thread.metadata["mastra"]["om"]
        if setting == "off":
            assert all(THREAD_TITLE_INSTRUCTIONS not in r.system[0] for r in requests)
            assert thread.title == "Untitled" and "threadTitle" not in om
            return
        assert requests[0].system[0] == OBSERVER_INSTRUCTIONS + THREAD_TITLE_INSTRUCTIONS
        assert "Prior thread-title: Trip planning" in requests[1].messages[0].text
        assert om["threadTitle"] == "Kyoto trip"
        assert thread.title == ("Untitled" if setting == "pinned" else "Kyoto trip")


async def test_temporal_markers_tell_the_model_how_long_the_user_was_away(tmp_path: Path) -> None:
    """``temporalMarkers``: a turn 2 h 5 min after the previous message gets a stored ``system-reminder`` signal
    before its model call, which the model reads as Mastra renders it; ``recall`` hides it; a turn 3 minutes
    later gets none."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now

    options = {"observationalMemory": {"model": ScriptedModel([]), "temporalMarkers": True,
                                       "observation": {"messageTokens": 100_000}}}
    async with Memory(storage=SQLiteStore(tmp_path / "om.db"), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        before = utc_now() - timedelta(hours=2, minutes=5)
        await memory.save_messages([Message.user("see you later", id="old", thread_id="t1", resource_id="r1",
                                                 created_at=before)])
        model = ScriptedModel(["welcome back", "sure"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("I am back", thread_id="t1", resource_id="r1")
        rendered = [m.text for m in model.requests[0].messages if m.text.startswith("<system-reminder")]
        assert len(rendered) == 1
        assert rendered[0].startswith('<system-reminder type="temporal-gap" gapText="2 hours 5 minutes later" gapMs="')
        assert ">2 hours 5 minutes later — " in rendered[0] and rendered[0].endswith("</system-reminder>")
        stored = await memory.storage.list_messages(MessageQuery(thread_id="t1", per_page=False))
        [marker] = [m for m in stored.messages if m.role == "signal"]
        user = next(m for m in stored.messages if m.text == "I am back")
        signal = (marker.content.metadata or {})["signal"]
        assert marker.id.startswith("__temporal_gap_") and marker.type == "system-reminder"
        assert signal["type"] == "reactive" and signal["attributes"]["precedesMessageId"] == user.id
        assert signal["metadata"]["systemReminder"]["type"] == "temporal-gap"
        assert marker.id not in {m.id for m in (await memory.recall("t1", per_page=False)).messages}
        await agent.generate("one more thing", thread_id="t1", resource_id="r1")  # moments later: no marker
        assert not any(m.text.startswith("<system-reminder") and "one more" in m.text
                       for m in model.requests[1].messages)
        again = await memory.storage.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert [m.role for m in again.messages].count("signal") == 1


@pytest.mark.parametrize(("ms", "text"), [
    (599_999, None), (600_000, "10 minutes later"), (59 * 60_000 + 40_000, "60 minutes later"),
    (3_600_000, "1 hour later"), (2 * 3_600_000 + 5 * 60_000, "2 hours 5 minutes later"),
    (86_400_000 * 3 + 3_600_000, "3 days 1 hour later"), (86_400_000 * 8, "1 week 1 day later"),
    (86_400_000 * 45, "1 month 2 weeks later"), (86_400_000 * 400, "1 year 1 month later"),
])
def test_gaps_read_as_mastra_writes_them(ms: int, text: str | None) -> None:
    from threadmind.processors._temporal_markers import format_gap

    assert format_gap(ms) == text


def test_a_shared_budget_needs_buffering_off_as_in_mastra() -> None:
    from threadmind.errors import ConfigError

    for observation, tail in (({}, "Async buffering is enabled by default"),
                              ({"bufferTokens": 0.2}, "Remove any other async buffering settings")):
        needle = f"shareTokenBudget requires async buffering to be disabled(.|\\n)*{tail}"
        with pytest.raises(ConfigError, match=needle):
            Memory(storage=InMemoryStore(), options={"observationalMemory": {
                "shareTokenBudget": True, "observation": observation}})
    om = ObservationalMemoryConfig(message_tokens=50, observation_tokens=1000, share_token_budget=True,
                                   buffer_tokens=False)
    assert [om.message_threshold(n) for n in (0, 500, 2000)] == [1050, 550, 50]
    assert ObservationalMemoryConfig(message_tokens=50).message_threshold(0) == 50


@pytest.mark.parametrize("shared", [True, False])
async def test_messages_use_what_observations_leave_of_a_shared_budget(shared: bool) -> None:
    calls: list[str] = []
    options: dict[str, Any] = {"observation_tokens": 1000, "buffer_tokens": False, "share_token_budget": shared}
    async with _om_memory(InMemoryStore(), _endless(_observer(calls)), **options) as memory:
        agent = Agent("a", "i", ScriptedModel(["ok"] * 4), memory=memory)
        for text in ("one", "two", "three"):
            await agent.generate(_long(text), thread_id="t1", resource_id="r1")
        await memory.settled()
        # About 150 tokens unobserved: past messageTokens (50), well short of 50 + 1000 with no observations yet.
        assert bool(await _records(memory)) is not shared and bool(calls) is not shared


@pytest.mark.parametrize("outcome", ["observed", "failed"])
async def test_the_stream_tells_the_client_what_observational_memory_does(outcome: str) -> None:
    """Through ``Agent.stream``: an observation the turn waits for is announced (``data-om-observation-start``, then
    ``-end`` or ``-failed`` with the same cycle id) and every model call is preceded by ``data-om-status``; all
    transient, after ``start`` and before the step they precede."""
    from threadmind import Message
    from threadmind.events import DATA_PART_EVENTS

    DATA_KINDS = tuple(DATA_PART_EVENTS.values())

    def observe(request: ModelRequest) -> str:
        if outcome == "failed":
            raise ModelError("observer down")
        return "* 🔴 the user counted words"

    async with _om_memory(InMemoryStore(), _endless(observe)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([Message.user(_long("one") + " " + _long("more"), thread_id="t1",
                                                 resource_id="r1")])
        agent = Agent("a", "i", ScriptedModel(["noted"]), memory=memory)
        with anyio.fail_after(10):
            async with agent.stream("two", thread_id="t1", resource_id="r1") as stream:
                events = [event async for event in stream]
    kinds = [event.type for event in events]
    data = [event for event in events if isinstance(event, DATA_KINDS)]
    assert kinds[0] == "start" and all(getattr(event, "transient", False) for event in data)
    first_step = kinds.index("start-step")
    begun, ended = data[0], data[1]
    finish = "end" if outcome == "observed" else "failed"
    assert (begun.type, ended.type) == ("data-om-observation-start", f"data-om-observation-{finish}")
    assert begun.data["cycleId"] == ended.data["cycleId"] and begun.data["threadId"] == "t1"
    assert kinds.index(ended.type) < first_step
    status = data[2]
    assert status.type == "data-om-status" and kinds.index("data-om-status") < first_step
    window = status.data["windows"]["active"]
    assert window["messages"]["threshold"] == 50 and status.data["stepNumber"] == 0
    if outcome == "observed":
        assert "the user counted words" in ended.data["observations"] and window["observations"]["tokens"] > 0
    else:
        assert "observer down" in ended.data["error"] and window["observations"]["tokens"] == 0


async def test_custom_instructions_follow_the_observers_and_the_reflectors() -> None:
    observer = _endless(lambda request: "* 🔴 the user is planning travel")
    reflector = ScriptedModel(["* condensed"])
    options = {"observationalMemory": {
        "observation": {"model": observer, "messageTokens": 50, "instruction": "Focus on travel plans."},
        "reflection": {"model": reflector, "observationTokens": 1, "instruction": "Keep every date."}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(_long("one") + " " + _long("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")
    assert observer.requests[0].system == [
        f"{OBSERVER_INSTRUCTIONS}\n\n=== CUSTOM INSTRUCTIONS ===\n\nFocus on travel plans."]
    assert [r.system for r in reflector.requests] == [
        [f"{REFLECTOR_INSTRUCTIONS}\n\n=== CUSTOM INSTRUCTIONS ===\n\nKeep every date."]]


@pytest.mark.parametrize(("setting", "seen"), [
    (None, ["image/png", "application/pdf"]), (True, ["image/png", "application/pdf", "text/plain"]),
    ("auto", ["image/png", "application/pdf", "text/plain"]), (False, []),
])
async def test_the_observer_sees_the_attachments_it_is_allowed(setting: object, seen: list[str]) -> None:
    """``observation.observeAttachments``: images and PDFs by default, every file with true or "auto", none with
    false; they follow the transcript in the Observer's message."""
    from threadmind import FilePart, Message, MessageContent, TextPart
    from threadmind.codecs._time import utc_now

    observer = _endless(lambda request: "* 🔴 the user sent three files")
    observation: dict[str, Any] = {"model": observer, "messageTokens": 20}
    if setting is not None:
        observation["observeAttachments"] = setting
    async with Memory(storage=InMemoryStore(), options={"observationalMemory": {"observation": observation}}) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        files = [FilePart(data="iVBORw0KGgo=", media_type="image/png"),
                 FilePart(data="JVBERi0=", media_type="application/pdf"),
                 FilePart(data="aGVsbG8=", media_type="text/plain")]
        await memory.save_messages([Message(id="u1", role="user", thread_id="t1", resource_id="r1",
                                            created_at=utc_now(), content=MessageContent(parts=[
                                                TextPart(text="here are my files " + "please " * 30), *files]))])
        agent = Agent("a", "i", ScriptedModel(["thanks"]), memory=memory)
        await agent.generate("did you get them?", thread_id="t1", resource_id="r1")
        await memory.settled()
    assert observer.requests
    parts = observer.requests[0].messages[0].content.parts
    assert isinstance(parts[0], TextPart) and "here are my files" in parts[0].text
    assert [p.media_type for p in parts[1:] if isinstance(p, FilePart)] == seen


async def test_temporal_markers_through_the_chat_servers_door(tmp_path: Path) -> None:
    """A useChat body through ``messages_from_ui`` and ``Agent.stream``, an hour after the thread's last message:
    the model reads the gap before its answer, and the stream carries no marker to the browser."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now
    from threadmind.ui import messages_from_ui

    options = {"observationalMemory": {"model": ScriptedModel([]), "temporalMarkers": True,
                                       "observation": {"messageTokens": 100_000}}}
    async with Memory(storage=SQLiteStore(tmp_path / "chat.db"), options=options) as memory:
        await memory.create_thread(thread_id="chat-1", resource_id="r1")
        await memory.save_messages([Message.user("bye", id="u0", thread_id="chat-1", resource_id="r1",
                                                 created_at=utc_now() - timedelta(hours=1))])
        model = ScriptedModel(["welcome back"])
        agent = Agent("chat", "You answer.", model, memory=memory)
        body = {"id": "chat-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="r1") as stream:
            kinds = [event.type async for event in stream]
        assert "data-signal" not in kinds
        rendered = [m.text for m in model.requests[0].messages if m.text.startswith("<system-reminder")]
        assert len(rendered) == 1 and 'gapText="1 hour later"' in rendered[0]


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
    observer = _endless(lambda request: f"* 🔴 observed chunk {len(observer.requests)}")
    seen: list[tuple[int, list[str]]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((observer.calls, list(request.system)))
        return "ok"

    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 200,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=om_store, options=options) as memory:
        agent = Agent("a", "i", _endless(reply), memory=memory)
        chunks = []
        for n in range(3):
            await agent.generate(_long(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
            [record] = (await _records(memory))[-1:]
            chunks.append(len(record.buffered_chunks))
            assert not record.active_observations  # computed ahead, not active
        assert chunks == [1, 2, 3] and observer.calls == 3
        async with agent.stream(_long("turn3"), thread_id="t1", resource_id="r1") as stream:
            kinds = [event.type async for event in stream]
        calls_at_model, system = seen[-1]
        assert calls_at_model == 3  # the threshold was met with what was computed ahead: no Observer call
        block = next(text for text in system if "<observations>" in text)
        assert all(f"observed chunk {i}" in block for i in (1, 2, 3)), block
        assert "data-om-activation" in kinds and kinds.index("data-om-activation") < kinds.index("start-step")
        await memory.settled()
        record = (await _records(memory))[-1]
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
        await first.save_messages([Message.user(_long("one"), thread_id="t1", resource_id="r1")])
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
        records = await _records(first)
    assert len(calls) == 1 and len(records) == 1 and len(records[0].buffered_chunks) == 1


async def test_a_reflection_computed_ahead_becomes_the_next_generation_with_no_model_call() -> None:
    """With observations buffered, past ``reflection.bufferActivation`` (0.5) of ``observationTokens`` the
    Reflector runs in the background; reaching the threshold then makes its reflection, followed by the lines
    observed since, the next generation, with no Reflector call of its own. Fast turns (a millisecond apart) keep
    every message: a turn's input is dated after the observed rows it does not load."""
    observer = _endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    reflector = _endless(lambda request: "* 🔴 condensed by the reflector")
    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50},
                                       "reflection": {"model": reflector, "observationTokens": 60}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", _endless(lambda request: "ok"), memory=memory)
        generations: list[tuple[int, int, bool]] = []
        for n in range(7):
            await agent.generate(_long(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
            history = await _records(memory)
            generations.append((len(history), reflector.calls, history[-1].buffered_reflection is not None))
        assert generations[3] == (1, 1, True)  # the first activation passed half the threshold: reflected ahead
        assert generations[6][:2] == (2, 1)  # the next activation reached it: a new generation, no new call
        newest = (await _records(memory))[-1]
        assert newest.origin_type == "reflection" and newest.buffered_reflection is None
        assert newest.active_observations.startswith("* 🔴 condensed by the reflector\n\n")
        assert "observed chunk 4" in newest.active_observations  # observed after the reflection began
        messages = (await memory.recall("t1", per_page=False)).messages
        assert [m.text for m in messages if m.role == "user"] == [_long(f"turn{n}") for n in range(7)]


async def test_a_turns_input_is_dated_after_the_observed_rows_it_does_not_load() -> None:
    """The newest stored row may be an observed one, which observational memory does not load (here dated 2 s
    ahead, as a clock running ahead or fast turns leave it): the turn's input still sorts after it, so it is
    neither hidden behind the observation cursor nor ever skipped by the Observer."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now

    async with _om_memory(InMemoryStore(), _endless(lambda request: "* x"), message_tokens=100_000) as memory:
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

    observer = _endless(observe)
    options = {"workingMemory": {"enabled": True, "template": "# Me\n- trips:"},
               "observationalMemory": {"observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50,
                                                       "threadTitle": True, "manageWorkingMemory": True}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1", title="Untitled")
        agent = Agent("a", "i", _endless(lambda request: "ok"), memory=memory)
        for n in range(3):
            await agent.generate(_long(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "Untitled"  # buffered only: nothing applied yet
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") is None
        chunk = (await _records(memory))[-1].buffered_chunks[-1]
        assert chunk["threadTitle"] == "Trip number 3" and chunk["extractedValues"] == {
            "working-memory": "# Me\n- trips: 3"}
        await agent.generate(_long("turn3"), thread_id="t1", resource_id="r1")  # reaches the threshold
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "Trip number 3"
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\n- trips: 3"
