"""Buffered observational memory activating before its threshold: after the thread sat idle (``activateAfterIdle``)
or under another model (``activateOnProviderChange``), for observations and for a buffered reflection; and the
previous observations the Observer is shown (``previousObserverTokens``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from threadmind.agent import Agent
from threadmind.memory import Memory
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._om_triggers import activation_trigger, auto_ttl_ms, provider_changed
from threadmind.stores._memory import InMemoryStore
from threadmind.testing import observational_engine

from ._om_support import endless, long_text, om_records


async def _stream_kinds(agent: Agent, text: str) -> list[Any]:
    async with agent.stream(text, thread_id="t1", resource_id="r1") as stream:
        return [event async for event in stream]


def _away(monkeypatch: pytest.MonkeyPatch, minutes: float) -> None:
    """The user comes back ``minutes`` later, as the activation triggers see the clock."""
    from datetime import timedelta

    from threadmind.codecs._time import utc_now

    monkeypatch.setattr("threadmind.processors._om_triggers.utc_now", lambda: utc_now() + timedelta(minutes=minutes))


@pytest.mark.parametrize("idle", [None, "5m"])
async def test_buffered_observations_activate_once_the_thread_sat_idle(idle: str | None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk computed ahead, far below ``messageTokens``: six minutes later the next turn activates it with no
    Observer call when ``activateAfterIdle`` is "5m" (the stream says "ttl"), and leaves it buffered without."""
    observer: ScriptedModel = endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    seen: list[tuple[int, str]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((observer.calls, "\n".join(request.system)))
        return "ok"

    observation: dict[str, Any] = {"model": observer, "messageTokens": 1000, "bufferTokens": 50}
    if idle is not None:
        observation["activateAfterIdle"] = idle
    async with Memory(storage=InMemoryStore(), options={"observationalMemory": {"observation": observation}}) \
            as memory:
        agent = Agent("a", "i", endless(reply), memory=memory)
        await agent.generate(long_text("turn0"), thread_id="t1", resource_id="r1")
        await memory.settled()
        assert len((await om_records(memory))[-1].buffered_chunks) == 1
        _away(monkeypatch, 6)
        events = await _stream_kinds(agent, "a short question")
        calls_at_model, system = seen[-1]
        record = (await om_records(memory))[-1]
    activations = [e for e in events if e.type == "data-om-activation"]
    assert calls_at_model == 1  # the chunk's own call, none for the turn
    if idle is None:
        assert not activations and not record.active_observations and "observed chunk" not in system
    else:
        assert [a.data["triggeredBy"] for a in activations] == ["ttl"]
        assert "observed chunk 1" in record.active_observations and "observed chunk 1" in system


async def test_buffered_observations_activate_when_the_agents_model_changes() -> None:
    """``activateOnProviderChange``: the reply names its model (``metadata.provider``/``modelId``, as Mastra reads
    it); the same model again leaves the chunk buffered, another one activates it before the model call."""
    observer: ScriptedModel = endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    options = {"observationalMemory": {"activateOnProviderChange": True,
                                       "observation": {"model": observer, "messageTokens": 1000, "bufferTokens": 50}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        first = Agent("a", "i", endless(lambda request: "ok", "openai/gpt-4o"), memory=memory)
        second = Agent("a", "i", endless(lambda request: "ok", "anthropic/claude-sonnet-4-5"), memory=memory)
        await first.generate(long_text("turn0"), thread_id="t1", resource_id="r1")
        await memory.settled()
        stored = (await memory.recall("t1", per_page=False)).messages
        assert stored[-1].content.metadata == {"provider": "openai", "modelId": "gpt-4o"}
        same = await _stream_kinds(first, "hello again")
        assert not [e for e in same if e.type == "data-om-activation"]
        assert not (await om_records(memory))[-1].active_observations
        await memory.settled()
        changed = await _stream_kinds(second, "and now?")
        record = (await om_records(memory))[-1]
    assert [e.data["triggeredBy"] for e in changed if e.type == "data-om-activation"] == ["provider_change"]
    assert "observed chunk 1" in record.active_observations


async def test_a_buffered_reflection_activates_once_the_thread_sat_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reflection.activateAfterIdle``: a reflection computed ahead becomes the next generation after the thread
    sat idle, before ``observationTokens``, with no Reflector call of its own."""
    observer: ScriptedModel = endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    reflector = endless(lambda request: "* 🔴 condensed by the reflector")
    options = {"observationalMemory": {
        "observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50},
        "reflection": {"model": reflector, "observationTokens": 60, "activateAfterIdle": "1hr"}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", endless(lambda request: "ok"), memory=memory)
        for n in range(4):
            await agent.generate(long_text(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
        history = await om_records(memory)
        assert len(history) == 1 and history[-1].buffered_reflection is not None and reflector.calls == 1
        _away(monkeypatch, 61)
        events = await _stream_kinds(agent, "back again")
        history = await om_records(memory)
    assert [e.data["operationType"] for e in events if e.type == "data-om-activation"] == ["reflection"]
    assert len(history) == 2 and history[-1].origin_type == "reflection" and reflector.calls == 1
    assert history[-1].active_observations.startswith("* 🔴 condensed by the reflector")


@pytest.mark.parametrize(("budget", "shown"), [(None, ["first", "second", "third"]), (0, []),
                                                (12, ["third"]), (10_000, ["first", "second", "third"])])
async def test_the_observer_sees_the_newest_previous_observations_within_its_budget(
        budget: int | None, shown: list[str]) -> None:
    """``observation.previousObserverTokens``: the previous observations in the Observer's prompt are cut from the
    oldest end to the budget, at a line (0: none)."""
    from threadmind import Message
    from threadmind.codecs._time import utc_now
    from threadmind.stores import OMRecord as Record

    prompts: list[str] = []

    def observe(request: ModelRequest) -> str:
        prompts.append(request.messages[0].text)
        return "* 🔴 fourth observation"

    observation: dict[str, Any] = {"model": endless(observe), "messageTokens": 50}
    if budget is not None:
        observation["previousObserverTokens"] = budget
    async with Memory(storage=InMemoryStore(), options={"observationalMemory": {"observation": observation}}) \
            as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        memory.get_input_processors()  # makes the memory's engine, as a turn does
        engine = observational_engine(memory)
        assert engine is not None
        text = "\n".join(f"* 🔴 {word} observation of the user's long trip to Lisbon" for word in
                         ("first", "second", "third"))
        await engine.records.replace(Record(id="r", lookup_key="thread:t1", scope="thread", resource_id="r1",
                                            thread_id="t1", active_observations=text, origin_type="observation",
                                            created_at=utc_now(), updated_at=utc_now()),
                                     expected=None)
        await memory.save_messages([Message.user(long_text("one") + " " + long_text("two"), thread_id="t1",
                                                 resource_id="r1")])
        config = memory.options.observational_memory_config
        assert config is not None
        assert await engine.ensure_below_block(config, "t1", "r1", 100)
    previous = prompts[0].split("Previous observations:\n", 1)[1].split("\n\nNew messages to observe:", 1)[0]
    assert [word for word in ("first", "second", "third") if f"{word} observation" in previous] == shown
    assert (previous == "(none)") is (not shown)


def test_what_decides_an_early_activation() -> None:
    """Mastra's rules: another model id, or another provider when both name one; ``"auto"`` lifetimes by
    provider; idleness from the newest reply's last timed part."""
    from threadmind.codecs import Message, MessageContent, TextPart

    assert provider_changed("openai/gpt-4o", "anthropic/gpt-4o") and provider_changed("gpt-4o", "gpt-5")
    assert not provider_changed("openai.chat/gpt-4o", "openai/gpt-4o") and not provider_changed("gpt-4o", None)
    assert auto_ttl_ms("openai/gpt-4o") == 300_000 and auto_ttl_ms("openai/o3") == 3_600_000
    assert auto_ttl_ms("google/gemini-2.5-flash") == 86_400_000 and auto_ttl_ms("anthropic/claude") == 300_000
    reply = Message.user("x")
    reply = Message(reply.id, "assistant", MessageContent(parts=[TextPart(text="hi", created_at=1_000)]),
                    reply.created_at, "t1", "r1")
    assert activation_trigger([reply], "m", 500.0, False, now=1_499) is None
    assert activation_trigger([reply], "m", 500.0, False, now=1_500) == "ttl"
    assert activation_trigger([reply], "m", None, False, now=10**12) is None


async def test_the_stream_says_when_buffering_starts_and_the_status_shows_what_is_buffered() -> None:
    """Through ``Agent.stream``: the turn that starts computing a chunk ahead sends ``data-om-buffering-start``
    (the chunk's own ``cycleId``) before ``finish``; the next turn's ``data-om-status`` counts the chunk as
    complete, its message and observation tokens, and what an activation now would take out."""
    observer: ScriptedModel = endless(lambda request: f"* 🔴 observed chunk {observer.calls}")
    options = {"observationalMemory": {"observation": {"model": observer, "messageTokens": 1000,
                                                       "bufferTokens": 50}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", endless(lambda request: "ok"), memory=memory)
        first = await _stream_kinds(agent, long_text("turn0"))
        await memory.settled()
        [chunk] = (await om_records(memory))[-1].buffered_chunks
        second = await _stream_kinds(agent, "and then?")
    kinds = [event.type for event in first]
    started = next(event for event in first if event.type == "data-om-buffering-start")
    assert kinds.index("data-om-buffering-start") < kinds.index("finish")
    assert started.data["cycleId"] == chunk["cycleId"] and started.data["tokensToBuffer"] > 0
    status = next(event for event in second if event.type == "data-om-status").data["windows"]["buffered"]
    assert status["observations"]["chunks"] == 1 and status["observations"]["status"] == "complete"
    assert status["observations"]["messageTokens"] == chunk["messageTokens"] > 0
    assert status["observations"]["observationTokens"] == chunk["tokenCount"] > 0
    assert status["observations"]["projectedMessageRemoval"] == 0  # far below the threshold: nothing yet
    assert status["reflection"]["status"] == "idle"


@pytest.mark.parametrize("block_after", [10, 1])
async def test_a_reflection_below_block_after_runs_while_the_turn_goes_on(block_after: int) -> None:
    """Reflections computed ahead (``reflection.bufferActivation``), none ready when an activation takes the
    observations past ``observationTokens``: below ``reflection.blockAfter`` the Reflector runs in the background
    (here it waits for the turn's model call, so a waiting turn would never get there); past it the turn waits
    and its model reads the new generation."""
    observer: ScriptedModel = endless(lambda request: f"* 🔴 observed chunk {observer.calls}: " + " ".join(
        f"fact{i}" for i in range(12)))
    model_ran = anyio.Event()

    async def reflect(request: ModelRequest) -> str:
        if block_after == 10:
            with anyio.fail_after(5):
                await model_ran.wait()
        return "* 🔴 condensed by the reflector"

    reflector = ScriptedModel(iter(lambda: reflect, None))
    seen: list[tuple[int, str]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((reflector.calls, "\n".join(request.system)))
        model_ran.set()
        return "ok"

    options = {"observationalMemory": {
        "observation": {"model": observer, "messageTokens": 200, "bufferTokens": 50},
        "reflection": {"model": reflector, "observationTokens": 40, "bufferActivation": 1, "blockAfter": block_after}}}
    async with Memory(storage=InMemoryStore(), options=options) as memory:
        agent = Agent("a", "i", endless(reply), memory=memory)
        for n in range(3):
            await agent.generate(long_text(f"turn{n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
        assert len(await om_records(memory)) == 1 and reflector.calls == 0 and len(seen) == 3
        with anyio.fail_after(10):
            await agent.generate(long_text("turn3"), thread_id="t1", resource_id="r1")
            await memory.settled()
        history = await om_records(memory)
    calls_at_model, system = seen[-1]
    assert len(history) == 2 and history[-1].active_observations.startswith("* 🔴 condensed by the reflector")
    if block_after == 10:
        assert "condensed by the reflector" not in system  # the turn did not wait; the next turn reads it
    else:
        assert calls_at_model == 1 and "condensed by the reflector" in system
