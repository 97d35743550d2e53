"""A turn held by another OS process: ``reject`` gives up at once, a killed holder is replaced, a frozen holder
(SIGSTOP) is taken over after ``lease_ttl`` and its late writes are refused with ``LeaseLost``."""

from __future__ import annotations

import signal
import time
from typing import Any

import anyio
import pytest
from tests.multiprocess._harness import Worker, note, workers
from tests.multiprocess._worker import make_memory, texts

from threadmind.agent import Agent
from threadmind.errors import ThreadBusy
from threadmind.memory import Memory
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel

LEASE_TTL = 1.0
MARGIN = 5.0  # generous: the guarantee is lease_ttl + 1 s; a loaded CI machine gets slack, never a flaky failure


def _holder(backend: dict[str, Any], after: int = 0, lease_ttl: float = LEASE_TTL) -> dict[str, Any]:
    return {"store": backend, "scenario": "hold", "proc": 0, "lease_ttl": lease_ttl, "after": after}


def _memory(backend: dict[str, Any], policy: str = "enqueue", lease_ttl: float = LEASE_TTL) -> Memory:
    return make_memory({"store": backend, "lease_ttl": lease_ttl, "policy": policy, "last_messages": 100})


async def _stored(memory: Memory) -> list[tuple[str, str]]:
    page = await memory.recall("t-held", resource_id="r1", per_page=False)
    return [(m.role, m.text) for m in page.messages]


async def _in_model(worker: Worker) -> None:
    await worker.event("in-model", limit=50)


async def test_reject_across_processes_raises_thread_busy_without_calling_the_model(
        backend: dict[str, Any]) -> None:
    async with _memory(backend, "reject") as memory, workers([_holder(backend)]) as (holder,):
        await _in_model(holder)
        model = ScriptedModel(["never"])
        agent = Agent("b", "Answer.", model, memory=memory)
        started = time.monotonic()
        with anyio.fail_after(1.0), pytest.raises(ThreadBusy) as info:  # SPEC: within 1 s
            await agent.generate("mine", thread_id="t-held", resource_id="r1")
        waited = time.monotonic() - started
        assert info.value.thread_id == "t-held" and model.calls == 0
        await holder.send("go")
        report = await holder.event("done")
        assert report["outcomes"] == [{"ok": True}]
        assert await _stored(memory) == [("user", "p0 turn 0"), ("assistant", "held reply of p0")]
    note(test="reject", backend=backend["kind"], seconds=round(waited, 4))


@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_a_holder_killed_mid_turn_is_replaced_within_the_lease_ttl(backend: dict[str, Any]) -> None:
    async with _memory(backend) as memory, workers([_holder(backend)]) as (holder,):
        await _in_model(holder)
        holder.signal(signal.SIGKILL)
        seen: list[list[str]] = []

        def answer(request: ModelRequest) -> str:
            seen.append(texts(request))
            return "after the kill"

        agent = Agent("b", "Answer.", ScriptedModel([answer]), memory=memory)
        started = time.monotonic()
        with anyio.fail_after(LEASE_TTL + MARGIN):
            await agent.generate("mine", thread_id="t-held", resource_id="r1")
        waited = time.monotonic() - started
        assert seen == [["mine"]]  # nothing of the killed turn was written
        assert await _stored(memory) == [("user", "mine"), ("assistant", "after the kill")]
    note(test="sigkill", backend=backend["kind"], takeover_seconds=round(waited, 3), lease_ttl=LEASE_TTL)


async def test_a_killed_holder_is_replaced_within_3_seconds_whatever_the_lease_ttl(backend: dict[str, Any]) -> None:
    """SPEC §10: a holder whose process died is replaced within 3 s on every store, even with the default 30 s
    ``lease_ttl`` (which bounds only a holder that is alive but silent)."""
    async with _memory(backend, lease_ttl=30.0) as memory, workers([_holder(backend, lease_ttl=30.0)]) as (holder,):
        await _in_model(holder)
        holder.signal(signal.SIGKILL)
        agent = Agent("b", "Answer.", ScriptedModel(["after the kill"]), memory=memory)
        started = time.monotonic()
        with anyio.fail_after(3.0):
            await agent.generate("mine", thread_id="t-held", resource_id="r1")
        waited = time.monotonic() - started
        assert await _stored(memory) == [("user", "mine"), ("assistant", "after the kill")]
    note(test="sigkill-long-ttl", backend=backend["kind"], takeover_seconds=round(waited, 3), lease_ttl=30.0)


@pytest.mark.slow_variants("postgres")  # the SQLite variant stays in the default run
async def test_a_frozen_holder_is_taken_over_and_its_late_turn_writes_nothing(backend: dict[str, Any]) -> None:
    async with _memory(backend) as memory, workers([_holder(backend, after=1)]) as (holder,):
        await _in_model(holder)
        holder.signal(signal.SIGSTOP)
        agent = Agent("b", "Answer.", ScriptedModel(["while it was frozen"]), memory=memory)
        started = time.monotonic()
        with anyio.fail_after(LEASE_TTL + MARGIN):
            await agent.generate("mine", thread_id="t-held", resource_id="r1")
        waited = time.monotonic() - started
        assert waited >= LEASE_TTL * 0.9  # it really waited for the lease to lapse (the holder was alive)
        holder.signal(signal.SIGCONT)
        await holder.send("go")  # the frozen turn's model answers now; its save must be refused
        report = await holder.event("done")
        assert report["outcomes"] == [{"error": "LeaseLost", "code": "THREADMIND_LEASE_LOST"}, {"ok": True}]
        assert await _stored(memory) == [
            ("user", "mine"), ("assistant", "while it was frozen"),
            ("user", "p0 turn 1"), ("assistant", "later reply 0 of p0"),  # its next turn works, after ours
        ]
    note(test="sigstop", backend=backend["kind"], takeover_seconds=round(waited, 3), lease_ttl=LEASE_TTL)
