"""Observational memory's async buffering: chunks observed ahead and activated at the threshold with no model
call, on every store and across processes; reflections computed ahead; what a buffered chunk carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from threadmind import Message
from threadmind.agent import Agent
from threadmind.memory import Memory
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._om import OMRecord
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import observational_engine

from ._om_support import endless, long_text, om_memory, om_records


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
