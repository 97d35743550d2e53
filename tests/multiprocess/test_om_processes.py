"""Observational memory computed ahead by several OS processes on one thread: each Observer cycle runs once (no
message is given to the Observer twice), activations never duplicate an observation, nothing a buffer produced is
stored as a message, and a process killed in the middle of a cycle leaves it to the next."""

from __future__ import annotations

import collections
import signal
from typing import Any

import anyio
import pytest
from tests.multiprocess._harness import note, workers
from tests.multiprocess._worker import make_memory

from threadmind.memory import Memory
from threadmind.stores import OMRecord
from threadmind.testing import observational_engine

LEASE_TTL = 1.0
OM = {"message_tokens": 120, "buffer_tokens": 30}


def _config(backend: dict[str, Any], proc: int, **extra: Any) -> dict[str, Any]:
    return {"store": backend, "scenario": "om", "proc": proc, "lease_ttl": LEASE_TTL, "om": OM, **extra}


def _memory(backend: dict[str, Any]) -> Memory:
    return make_memory({"store": backend, "lease_ttl": LEASE_TTL, "om": OM, "last_messages": 1000})


async def _history(memory: Memory) -> list[OMRecord]:
    memory.get_input_processors()  # makes the memory's engine, as a turn does
    engine = observational_engine(memory)
    assert engine is not None
    return await engine.records.history("thread:t-om")


@pytest.mark.slow  # four worker processes at once
@pytest.mark.parametrize("door", ["generate", "chat"])
async def test_four_processes_buffering_one_thread_observe_each_message_once(backend: dict[str, Any],
                                                                             door: str) -> None:
    """Through ``generate(text)`` and through the chat door (``messages_from_ui`` bodies streamed by
    ``Agent.stream``): the Observer is given each message once, each of its answers is kept at most once."""
    turns = 8
    calls: list[tuple[str, list[str]]] = []
    # Every holder lives here: a lease of 5 s, not 1 s. A live holder starved past the heartbeat's margin (three
    # quarters of lease_ttl) loses its lease by design and the next process runs the cycle again; four interpreters
    # starting at once beside the rest of the slow tier share two cores. The default lease_ttl is 30 s. (The
    # compare-and-set races this test also caught, a turn activating chunks while a cycle commits, are pinned
    # one by one in tests/memory/test_om_races.py.)
    async with workers([_config(backend, proc, turns=turns, observer_delay=0.03, pause=0.01, lease_ttl=5.0,
                                door=door) for proc in range(4)]) as running:
        for worker in running:
            while (event := await worker.event(limit=120))["event"] != "done":
                if event["event"] == "observing":
                    calls.append((event["call"], event["texts"]))
    async with _memory(backend) as memory:
        stored = (await memory.recall("t-om", resource_id="r1", per_page=False)).messages
        history = await _history(memory)
    users = sorted(m.text for m in stored if m.role == "user")
    assert users == sorted(f"p{p} t{j}" for p in range(4) for j in range(turns))
    assert [m.role for m in stored].count("assistant") == 4 * turns and len(stored) == 8 * turns  # no ghost rows
    given = collections.Counter(text for _, texts in calls for text in texts)
    assert given and max(given.values()) == 1, given.most_common(3)  # each cycle once: nobody observed twice
    kept = "\n".join([history[-1].active_observations, *(str(c["observations"]) for c in history[-1].buffered_chunks)])
    written = collections.Counter(call for call, _ in calls if f"obs {call}:" in kept)
    assert written and max(written.values()) == 1  # each Observer answer is kept at most once
    assert sum(f"obs {call}:" in kept for call, _ in calls) >= 2  # thresholds crossed: several cycles kept
    assert "obs p" in history[-1].active_observations  # and activated
    note(test="om_four_processes", backend=backend["kind"], door=door, observer_calls=len(calls), kept=len(written),
         generations=len(history))


@pytest.mark.slow  # four worker processes at once
async def test_four_processes_reflect_each_generation_once(backend: dict[str, Any]) -> None:
    """Observations that outgrow ``reflection.observationTokens`` while four processes buffer one thread: the
    Reflector is given each generation's observations once (ahead of the threshold or at it, in whichever process),
    and the generations follow one another."""
    reflected: list[str] = []
    observed: list[str] = []
    om = {**OM, "observation_tokens": 60}
    async with workers([_config(backend, proc, turns=8, observer_delay=0.03, pause=0.01, lease_ttl=5.0, om=om)
                        for proc in range(4)]) as running:
        for worker in running:
            while (event := await worker.event(limit=120))["event"] != "done":
                if event["event"] == "reflecting":
                    reflected.append(event["observations"])
                elif event["event"] == "observing":
                    observed += event["texts"]
    async with _memory(backend) as memory:
        history = await _history(memory)
    assert len(reflected) >= 2, (len(reflected), len(history))  # the threshold was crossed again and again
    assert max(collections.Counter(reflected).values()) == 1  # no generation reflected twice
    assert max(collections.Counter(observed).values()) == 1
    assert [r.generation_count for r in history] == list(range(len(history))) and len(history) >= 2
    assert all(r.origin_type == "reflection" for r in history[1:])
    # every Reflector call made a generation (or is the reflection the last one holds, computed ahead): none wasted
    assert len(history) - 1 <= len(reflected) <= len(history) - (history[-1].buffered_reflection is None)
    note(test="om_four_processes_reflect", backend=backend["kind"], reflector_calls=len(reflected),
         generations=len(history))


@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_a_process_killed_mid_buffer_leaves_the_cycle_to_the_next(backend: dict[str, Any]) -> None:
    """The first process's Observer never answers and the process is killed (SIGKILL) in the middle of the cycle;
    the next process's turn claims the cycle (the dead holder's claim lapses) and buffers the same messages."""
    async with workers([_config(backend, 0, turns=3, block=True)]) as (doomed,):
        while (event := await doomed.event(limit=60))["event"] != "observing":
            pass
        first = set(event["texts"])
        doomed.signal(signal.SIGKILL)
        await anyio.sleep(0.2)
    assert first
    # a few turns, so a lease the dead process left is retried past its lapse (PostgreSQL: the session ending)
    async with workers([_config(backend, 1, turns=4, observer_delay=0.0, pause=0.15)]) as (heir,):
        seen: list[str] = []
        with anyio.fail_after(60):
            while (event := await heir.event(limit=60))["event"] != "done":
                if event["event"] == "observing":
                    seen += event["texts"]
    assert first <= set(seen)  # the dead process's cycle was taken up by the next owner
    async with _memory(backend) as memory:
        history = await _history(memory)
        stored = (await memory.recall("t-om", resource_id="r1", per_page=False)).messages
    chunked = {mid for chunk in history[-1].buffered_chunks for mid in chunk["messageIds"]}
    assert {m.id for m in stored if m.text in first} <= chunked | set(history[-1].observed_message_ids)
    assert all(m.role in ("user", "assistant") for m in stored)
