"""Observational memory's commits racing turns, on every store: turns activate buffered chunks with no claim (in any
process), so each compare-and-set of a cycle (a chunk, an observation, a reflection, an activation) may lose to
one. Each race is made to happen at the worst moment (inside the commit, between its read and its write) and the
cycle must keep what still fits, never hand the Observer or the Reflector the same work twice, and never leave a
turn on a stale record."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from threadmind import Message
from threadmind.agent import Agent
from threadmind.memory import Memory, ObservationalMemoryConfig
from threadmind.memory._observational import ObservationalMemoryEngine
from threadmind.models import ModelRequest
from threadmind.processors._observation_text import REFLECTOR_INSTRUCTIONS
from threadmind.processors._om_triggers import chunks_to_activate
from threadmind.stores._om import OMRecord
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import observational_engine
from threadmind.ui import messages_from_ui

from ._om_support import endless, long_text, observer_step, om_memory, om_records


class Setup(msgspec.Struct, kw_only=True):
    """A memory with buffered observational memory on thread t1 of r1, its config and engine, and every Observer
    and Reflector call made (the observed text, or ``"reflect"``)."""

    memory: Memory
    config: ObservationalMemoryConfig
    engine: ObservationalMemoryEngine
    calls: list[str]
    model: Any

    async def save(self, tag: str, words: int = 30) -> None:
        await self.memory.save_messages([Message.user(long_text(tag, words), thread_id="t1", resource_id="r1")])

    async def buffered(self, tag: str, tokens: int, words: int = 30) -> None:
        """Save a message ``tag`` and buffer a chunk of what is unobserved (a cycle that runs to its end)."""
        await self.save(tag, words)
        assert self.engine.buffer(self.config, "t1", "r1", tokens)
        await self.memory.settled()

    async def records(self) -> list[OMRecord]:
        return await om_records(self.memory)


@asynccontextmanager
async def buffering(store: Any) -> AsyncIterator[Setup]:
    """:class:`Setup` on ``store`` (``messageTokens`` 200, ``bufferTokens`` 50)."""
    calls: list[str] = []
    model = endless(observer_step(calls))
    options = {"observationalMemory": {"observation": {"model": model, "messageTokens": 200, "bufferTokens": 50}}}
    async with Memory(storage=store, options=options) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        config = memory.options.observational_memory_config
        memory.get_input_processors()  # makes the memory's engine, as a turn does
        engine = observational_engine(memory)
        assert config is not None and engine is not None
        yield Setup(memory=memory, config=config, engine=engine, calls=calls, model=model)


def racing(monkeypatch: pytest.MonkeyPatch, setup: Setup, turn: Callable[[], Awaitable[object]]) -> list[object]:
    """Make the next compare-and-set of the records lose a race: ``turn`` (a turn of another process, which takes no
    claim) changes the record between the cycle's read and its write. What ``turn`` returned is listed."""
    records = setup.engine.records
    real = records.replace
    ran: list[object] = []

    async def replace(record: OMRecord, *, expected: OMRecord | None) -> bool:
        if not ran:
            ran.append("running")
            ran[0] = await turn()
        return await real(record, expected=expected)

    monkeypatch.setattr(records, "replace", replace)
    return ran


def another_cycle(setup: Setup, tokens: int) -> Callable[[], Awaitable[int]]:
    """A buffering cycle of another process that runs to its end; returns how many chunks the record then holds."""

    async def cycle() -> int:
        assert setup.engine.buffer(setup.config, "t1", "r1", tokens)
        await setup.memory.settled()
        return len((await setup.records())[-1].buffered_chunks)

    return cycle


def activating(setup: Setup, tokens: int | None = None) -> Callable[[], Awaitable[bool]]:
    """Another turn's activation (every chunk, or as many as ``tokens`` unobserved tokens call for)."""
    return lambda: setup.engine.activate(setup.config, "t1", "r1", tokens)


async def test_a_chunk_committed_while_a_turn_activates_older_chunks_is_kept(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn activates the chunks computed so far between a buffering cycle's read of the record and its
    compare-and-set. The cycle's chunk still fits the record (its messages are neither observed nor in another
    chunk), so the cycle reads again and keeps it: the Observer is never given the same messages twice."""
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60)
        await setup.save("two")
        ran = racing(monkeypatch, setup, activating(setup))
        assert setup.engine.buffer(setup.config, "t1", "r1", 120)
        await setup.memory.settled()
        assert ran == [True]  # the turn's activation landed inside the cycle's commit
        assert setup.engine.buffer(setup.config, "t1", "r1", 180)  # nothing is left to buffer: no Observer call
        await setup.memory.settled()
        [record] = (await setup.records())[-1:]
    calls = setup.calls
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
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60, words=90)
        await setup.buffered("two", 120, words=90)
        await setup.save("three", words=90)
        [record] = (await setup.records())[-1:]
        chunks, threshold = record.buffered_chunks, setup.config.message_threshold(0)
        assert len(chunks) == 2 and len(setup.calls) == 2
        # the unobserved messages a stale read would hand the Observer cross the threshold
        unobserved = (await setup.memory.recall("t1", per_page=False)).messages
        assert setup.engine.counter.count_messages(unobserved[1:]) >= threshold
        ratio = setup.config.activation_ratio
        pending = next(p for p in range(2000) if chunks_to_activate(chunks, p, threshold, ratio) == 1)
        ran = racing(monkeypatch, setup, activating(setup, pending))
        await setup.engine.ensure_below_block(setup.config, "t1", "r1", 10_000)
        [record] = (await setup.records())[-1:]
    assert ran == [True]  # the turn activated the oldest chunk inside the round's own activation
    given = collections.Counter(tag for call in setup.calls for tag in ("one", "two", "three")
                                if f"{tag}: word0" in call)
    assert max(given.values()) == 1, setup.calls
    assert not record.buffered_chunks and record.active_observations.count("observation 1") == 1 and \
        record.active_observations.count("observation 2") == 1


async def test_a_turns_activation_racing_a_new_chunk_still_activates(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffering cycle adds a chunk between a turn's read of the record and its activation's compare-and-set: the
    chunks the turn read are still there, so it reads again and activates, rather than going on with every buffered
    message still in its context."""
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60)
        await setup.save("two")
        ran = racing(monkeypatch, setup, another_cycle(setup, 120))
        assert await setup.engine.activate(setup.config, "t1", "r1", None)
        [record] = (await setup.records())[-1:]
    assert ran == [2]  # the second chunk landed inside the activation's commit
    assert not record.buffered_chunks and len(setup.calls) == 2
    assert [record.active_observations.count(f"observation {n}") for n in (1, 2)] == [1, 1]


@pytest.mark.parametrize("door", ["generate", "chat"])
async def test_a_turn_whose_activation_another_turn_made_first_sees_the_observations(
        om_store: Any, monkeypatch: pytest.MonkeyPatch, door: str) -> None:
    """Two turns at the threshold at once: the other one activates the chunks between this turn's read of the
    record and its activation's commit. This turn then has nothing left to activate, and reads the record again:
    its model sees the observations, not the messages they replaced. By ``generate(text)`` and by a chat request
    (a ``messages_from_ui`` body streamed by ``Agent.stream``)."""
    seen: list[tuple[list[str], list[str]]] = []

    def reply(request: ModelRequest) -> str:
        seen.append((list(request.system), [m.text for m in request.messages]))
        return "ok"

    async with buffering(om_store) as setup:
        for n, tag in enumerate(("one", "two", "three")):
            await setup.buffered(tag, 90 * (n + 1), words=60)
        ran = racing(monkeypatch, setup, activating(setup))
        agent = Agent("a", "i", endless(reply), memory=setup.memory)
        if door == "generate":
            await agent.generate(long_text("four", words=60), thread_id="t1", resource_id="r1")
        else:
            body = {"id": "t1", "trigger": "submit-message", "messages": [
                {"id": "u4", "role": "user", "parts": [{"type": "text", "text": long_text("four", words=60)}]}]}
            async with agent.stream(messages_from_ui(body), thread_id="t1", resource_id="r1") as stream:
                async for _ in stream:
                    pass
            assert (await stream.result()).text == "ok"
    assert ran == [True]  # the other turn's activation landed inside this turn's
    [(system, texts)] = seen
    blocks = [text for text in system if "<observations>" in text]
    assert len(blocks) == 1 and all(f"observation {n}" in blocks[0] for n in (1, 2, 3)), system
    assert not any(f"{tag}: word0" in text for text in texts for tag in ("one", "two", "three")), texts


async def test_a_reflection_racing_a_new_chunk_is_kept_and_carries_the_chunk(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffering cycle adds a chunk between a reflection's read and its commit: the observations it condensed are
    unchanged, so the new generation is written (one Reflector call, not a second one later) and keeps the chunk,
    whose messages are still to be activated."""
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60)
        assert await activating(setup)()
        await setup.save("two")
        [base] = (await setup.records())[-1:]
        ran = racing(monkeypatch, setup, another_cycle(setup, 120))
        assert await setup.engine.reflections.now(setup.config, "t1", "r1", base, setup.model)
        history = await setup.records()
    assert ran == [1] and setup.calls.count("reflect") == 1
    assert [r.generation_count for r in history] == [0, 1] and history[-1].active_observations == "* condensed"
    assert len(history[-1].buffered_chunks) == 1
    assert [c["messageIds"] for c in history[-1].buffered_chunks] == [c["messageIds"] for c in
                                                                      history[0].buffered_chunks]


async def test_a_reflection_racing_an_observation_keeps_what_was_observed_meanwhile(
        om_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines are observed (a turn activates a chunk) between a reflection's read and its commit: the reflection of
    the lines it read is kept, and the lines observed meanwhile follow it in the new generation, as they follow a
    reflection computed ahead. One Reflector call, none wasted."""
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60)
        assert await activating(setup)()
        await setup.buffered("two", 120)  # a second chunk, not active yet
        [base] = (await setup.records())[-1:]
        ran = racing(monkeypatch, setup, activating(setup))
        assert await setup.engine.reflections.now(setup.config, "t1", "r1", base, setup.model)
        history = await setup.records()
    assert ran == [True] and setup.calls.count("reflect") == 1
    last = history[-1]
    assert last.generation_count == 1 and last.active_observations.startswith("* condensed\n\n")
    assert "observation 2" in last.active_observations and "observation 1" not in last.active_observations
    assert not last.buffered_chunks


async def test_a_reflection_of_observations_reflected_meanwhile_makes_no_model_call(om_store: Any) -> None:
    """The Reflector is not called for observations another holder reflected (or observed past) since they were
    read: the result could not be kept."""
    async with buffering(om_store) as setup:
        await setup.buffered("one", 60)
        assert await activating(setup)()
        [base] = (await setup.records())[-1:]
        reflect = setup.engine.reflections.now
        assert await reflect(setup.config, "t1", "r1", base, setup.model)
        assert not await reflect(setup.config, "t1", "r1", base, setup.model)  # a stale read of the same record
        history = await setup.records()
    assert setup.calls.count("reflect") == 1 and [r.generation_count for r in history] == [0, 1]


async def test_two_processes_waiting_on_one_reflection_make_one_reflector_call(tmp_path: Path) -> None:
    """Two turns (two Memory objects on one SQLite file, as two processes have) need the same reflection past its
    blocking point at once: the second waits for the first one's Reflector (the ``reflector`` claim) and then finds
    the observations reflected, instead of calling the Reflector again."""
    armed, release, entered = False, anyio.Event(), anyio.Event()
    reflections: list[str] = []

    async def step(request: ModelRequest) -> str:
        if request.system[0] != REFLECTOR_INSTRUCTIONS:
            return "* 🔴 observed"
        reflections.append(request.messages[0].text)
        if armed:
            entered.set()
            with anyio.fail_after(10):
                await release.wait()
        return f"* condensed {len(reflections)}"

    model = endless(step)
    path = tmp_path / "shared.db"
    async with om_memory(SQLiteStore(path), model, observation_tokens=8) as first, \
            om_memory(SQLiteStore(path), model, observation_tokens=8) as second:
        await first.create_thread(thread_id="t1", resource_id="r1")
        await first.save_messages([Message.user(long_text("one", 60), thread_id="t1", resource_id="r1")])
        engines = []
        for memory in (first, second):
            memory.get_input_processors()
            engine = observational_engine(memory)
            assert engine is not None
            engines.append(engine)
        config = first.options.observational_memory_config
        assert config is not None and config.reflection_block_at is None  # every reflection is waited for
        assert await engines[0].ensure_below_block(config, "t1", "r1", 10_000)  # observes, then reflects
        [base] = (await om_records(first))[-1:]
        assert base.generation_count == 1 and len(reflections) == 1
        armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(engines[0].reflections.at_threshold, config, "t1", "r1", base, model)
            with anyio.fail_after(10):
                await entered.wait()
            tg.start_soon(engines[1].reflections.at_threshold, config, "t1", "r1", base, model)
            await anyio.sleep(0.3)  # the second turn is waiting, not reflecting
            assert len(reflections) == 2
            release.set()
        history = await om_records(first)
    assert len(reflections) == 2 and [r.generation_count for r in history] == [0, 1, 2]
    assert history[-1].active_observations == "* condensed 2"
