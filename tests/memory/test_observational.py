"""Observational memory: observation, reflection, context shaping, concurrency, failures, the SQLite row."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.agent import Agent
from threadmind.errors import ModelError
from threadmind.memory import Memory, ObservationalMemoryConfig
from threadmind.models import ModelRequest, ModelResponse
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import (
    CONTINUATION_REMINDER,
    OBSERVATIONS_PREAMBLE,
    OBSERVER_INSTRUCTIONS,
    REFLECTOR_INSTRUCTIONS,
)
from threadmind.processors._protocol import processor_id
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._om import OMRecord
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import actor_system, observational_engine

from ._om_support import endless, long_text, observer_step, om_memory, om_records

OM_COLUMNS = [
    "id", "lookupKey", "scope", "resourceId", "threadId", "activeObservations", "activeObservationsPendingUpdate",
    "originType", "config", "generationCount", "lastObservedAt", "lastReflectionAt", "pendingMessageTokens",
    "totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "observedMessageIds",
    "observedTimezone", "bufferedObservations", "bufferedObservationTokens", "bufferedMessageIds",
    "bufferedReflection", "bufferedReflectionTokens", "bufferedReflectionInputTokens",
    "reflectedObservationLineCount", "bufferedObservationChunks", "isBufferingObservation", "isBufferingReflection",
    "lastBufferedAtTokens", "lastBufferedAtTime", "metadata", "createdAt", "updatedAt",
]


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
    observer = endless(observer_step(calls))
    model = ScriptedModel(["r1", "r2", "r3"])
    async with om_memory(store, observer) as memory:
        agent = Agent("a", "be brief", model, memory=memory)
        first = await agent.generate(long_text("turn one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("turn two"), thread_id="t1", resource_id="r1")
        await agent.generate("short three", thread_id="t1", resource_id="r1")
        records = await om_records(memory)
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
    async with om_memory(InMemoryStore(), endless(observer_step(calls)), message_tokens=10_000) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("hello", thread_id="t1", resource_id="r1")
        await agent.generate("again", thread_id="t1", resource_id="r1")
        assert await om_records(memory) == []
    assert calls == []
    assert [m.text for m in model.requests[1].messages] == ["hello", "r1", "again"]
    assert not any(s.startswith(OBSERVATIONS_PREAMBLE) for s in model.requests[1].system)


async def test_reflection_starts_a_new_generation(tmp_path: Path) -> None:
    calls: list[str] = []
    observer = endless(observer_step(calls, reflection="* 🔴 condensed"))
    model = endless(lambda request: "ok")
    async with om_memory(SQLiteStore(tmp_path / "om.db"), observer, observation_tokens=8) as memory:
        agent = Agent("a", "i", model, memory=memory)
        for i in range(3):
            await agent.generate(long_text(f"turn {i}"), thread_id="t1", resource_id="r1")
        await agent.generate("last", thread_id="t1", resource_id="r1")
        records = await om_records(memory)
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
    observer = endless(observer_step(calls))
    model = endless(lambda request: "ok")
    store = SQLiteStore(tmp_path / "om.db")
    async with om_memory(store, observer, extra={"thread_concurrency": policy}) as memory:
        agent = Agent("a", "i", model, memory=memory)

        async def turn(i: int) -> None:
            await agent.generate(long_text(f"msg-{i:03d}"), thread_id="t1", resource_id="r1")

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

    observer = endless(slow)
    model = ScriptedModel(["r1", "r2"])
    async with om_memory(InMemoryStore(), observer, block_after=100_000) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("one"), thread_id="t1", resource_id="r1")
        await started.wait()
        with anyio.fail_after(5):
            await agent.generate(long_text("two"), thread_id="t1", resource_id="r1")
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
    async with om_memory(InMemoryStore(), endless(observer_step([])), buffer_tokens=10) as memory:
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
    observer = endless(observer_step(calls))
    model = ScriptedModel(["r1", "r2"])
    async with om_memory(InMemoryStore(), observer) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("one") + " " + long_text("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")
    assert len(calls) == 1
    # once observations replace the history, a continuation reminder opens what is left (reference §8.1)
    assert [m.text for m in model.requests[1].messages] == [CONTINUATION_REMINDER, "two"]


async def test_failing_observer_does_not_block_the_turn(tmp_path: Path) -> None:
    def raising(request: ModelRequest) -> str:
        raise ModelError("observer down")

    observer = endless(raising)
    model = ScriptedModel(["r1", "r2", "r3"])
    async with om_memory(InMemoryStore(), observer) as memory:
        assert observational_engine(memory) is None
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("one"), thread_id="t1", resource_id="r1")
        engine = observational_engine(memory)
        assert engine is not None
        with anyio.fail_after(5):  # retries: 3 attempts, 0.05 s then 0.1 s backoff per observation
            result = await agent.generate(long_text("two"), thread_id="t1", resource_id="r1")
        assert result.text == "r2"
        assert await om_records(memory) == []
        with anyio.fail_after(5):
            await agent.generate("three", thread_id="t1", resource_id="r1")
    assert observer.calls >= 3 and observer.calls % 3 == 0
    # raw history: every earlier message is still sent verbatim
    assert [m.text for m in model.requests[2].messages][-1] == "three"
    assert len(model.requests[2].messages) == 5


async def test_sqlite_row_has_reference_columns(tmp_path: Path) -> None:
    db = tmp_path / "om.db"
    calls: list[str] = []
    async with om_memory(SQLiteStore(db), endless(observer_step(calls))) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(long_text("one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("two"), thread_id="t1", resource_id="r1")
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
    async with om_memory(SQLiteStore(db), endless(observer_step(calls))) as memory:
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

    model = endless(step)
    options = {"observationalMemory": {"observation": {"messageTokens": 50}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("two"), thread_id="t1", resource_id="r1")
        records = await om_records(memory)
    assert seen and records and "observed by the agent model" in records[-1].active_observations


async def test_read_only_turn_neither_persists_nor_observes(tmp_path: Path) -> None:
    calls: list[str] = []
    async with om_memory(InMemoryStore(), endless(observer_step(calls))) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1"]), memory=memory)
        await agent.generate(long_text("one"), thread_id="t1", resource_id="r1", memory_options={"readOnly": True})
        assert (await memory.recall("t1", per_page=False)).messages == []
    assert calls == []


async def test_resource_scope_shares_observations_across_threads(tmp_path: Path) -> None:
    calls: list[str] = []
    model = endless(lambda request: "ok")
    async with om_memory(SQLiteStore(tmp_path / "om.db"), endless(observer_step(calls)), scope="resource") as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("on thread one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("more on thread one"), thread_id="t1", resource_id="r1")
        await agent.generate("now thread two", thread_id="t2", resource_id="r1")
        records = await om_records(memory, "resource:r1")
    assert records and records[-1].scope == "resource" and records[-1].resource_id == "r1"
    assert records[-1].thread_id is None
    assert "on thread one" in calls[0]
    block = next(s for s in model.requests[-1].system if s.startswith(OBSERVATIONS_PREAMBLE))
    assert "* 🔴 observation 1" in block  # thread two sees what was observed on thread one


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_delete_thread_removes_its_observations(tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    calls: list[str] = []
    async with om_memory(store, endless(observer_step(calls))) as memory:
        agent = Agent("a", "i", endless(lambda request: "ok"), memory=memory)
        await agent.generate(long_text("turn one"), thread_id="t1", resource_id="r1")
        await agent.generate(long_text("turn two"), thread_id="t1", resource_id="r1")
        with anyio.fail_after(5):
            while not await om_records(memory):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        await memory.delete_thread("t1")
        assert await om_records(memory) == []


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
    model = endless(lambda request: "ok")
    async with om_memory(store, endless(observer_step(calls)), message_tokens=100_000) as memory:
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

    async with om_memory(InMemoryStore(), endless(observer_step([])), message_tokens=10**6) as memory:
        await Agent("a", "i", ScriptedModel(["r1"]), memory=memory).generate(
            long_text("one"), thread_id="t1", resource_id="r1")
        turn = (await memory.recall("t1", per_page=False)).messages
    exactly = DefaultTokenCounter().count_messages(turn)  # what one such turn leaves unobserved
    for threshold, observed in ((exactly, 1), (exactly + 1, 0)):
        calls: list[str] = []
        async with om_memory(InMemoryStore(), endless(observer_step(calls)), message_tokens=threshold) as memory:
            await Agent("a", "i", ScriptedModel(["r1"]), memory=memory).generate(
                long_text("one"), thread_id="t1", resource_id="r1")
        assert len(calls) == observed, (threshold, exactly, calls)


async def test_the_model_sees_how_to_read_observations_and_a_continuation_reminder(tmp_path: Path) -> None:
    calls: list[str] = []
    model = ScriptedModel(["r1", "r2"])
    async with om_memory(SQLiteStore(tmp_path / "om.db"), endless(observer_step(calls))) as memory:
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate(long_text("one") + " " + long_text("more"), thread_id="t1", resource_id="r1")
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

    async with om_memory(SQLiteStore(tmp_path / "om.db"), endless(observe)) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"mastra": {"keep": 1}, "x": 2})
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(long_text("one") + " " + long_text("more"), thread_id="t1", resource_id="r1")
        await agent.generate("two", thread_id="t1", resource_id="r1")  # waits past block_after: observed
        records = await om_records(memory)
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
    observer = endless(observer_step(calls))
    reflector = ScriptedModel(["* condensed by the reflector"])
    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 50},
                                       "reflection": {"model": reflector, "observationTokens": 1}}}
    memory = Memory(storage=InMemoryStore(), options=options)
    om = memory.options.observational_memory_config
    assert om is not None and om.model is observer and om.reflection_model is reflector
    async with memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(long_text("one") + " " + long_text("more"), thread_id="t1", resource_id="r1")
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

    async with om_memory(SQLiteStore(tmp_path / "om.db"), endless(observe),
                          thread_title=setting != "off") as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", title="Untitled",
                                   metadata={"titlePinned": True} if setting == "pinned" else None)
        agent = Agent("a", "i", ScriptedModel(["r1", "r2", "r3", "r4"]), memory=memory)
        for text in ("one", "two", "three", "four"):
            await agent.generate(long_text(text) + " " + long_text("more"), thread_id="t1", resource_id="r1")
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
    async with om_memory(InMemoryStore(), endless(observer_step(calls)), **options) as memory:
        agent = Agent("a", "i", ScriptedModel(["ok"] * 4), memory=memory)
        for text in ("one", "two", "three"):
            await agent.generate(long_text(text), thread_id="t1", resource_id="r1")
        await memory.settled()
        # About 150 tokens unobserved: past messageTokens (50), well short of 50 + 1000 with no observations yet.
        assert bool(await om_records(memory)) is not shared and bool(calls) is not shared


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

    async with om_memory(InMemoryStore(), endless(observe)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([Message.user(long_text("one") + " " + long_text("more"), thread_id="t1",
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
    observer = endless(lambda request: "* 🔴 the user is planning travel")
    reflector = ScriptedModel(["* condensed"])
    options = {"observationalMemory": {
        "observation": {"model": observer, "messageTokens": 50, "instruction": "Focus on travel plans."},
        "reflection": {"model": reflector, "observationTokens": 1, "instruction": "Keep every date."}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", ScriptedModel(["r1", "r2"]), memory=memory)
        await agent.generate(long_text("one") + " " + long_text("more"), thread_id="t1", resource_id="r1")
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

    observer = endless(lambda request: "* 🔴 the user sent three files")
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
