"""``SharedEmbedCalls``: concurrent callers share embedder calls, each gets its own texts' vectors and usage, and
cancellation (of a caller waiting, or of the caller whose call is running) leaves the others answered."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from threadmind.actors._shared_embeds import MAX_SHARED_TEXTS, SHARED_CALLS, SharedEmbedCalls
from threadmind.errors import EmbedderError

F32 = np.float32


class Calls:
    """A stand-in for one embedder call: each text's vector is its length; 10 usage tokens a call; each call waits
    on ``gate`` when one is set; a call holding ``bad`` fails."""

    def __init__(self) -> None:
        self.made: list[list[str]] = []
        self.gate: anyio.Event | None = None
        self.bad = "bad"

    async def __call__(self, texts: list[str]) -> tuple[np.ndarray, int]:
        self.made.append(list(texts))
        if self.gate is not None:
            await self.gate.wait()
        else:
            await anyio.sleep(0.01)
        if self.bad in texts:
            raise EmbedderError("refused")
        return np.asarray([[len(t)] for t in texts], dtype=F32), 10


async def test_callers_share_calls_and_get_their_own_vectors_and_usage() -> None:
    calls = Calls()
    shared = SharedEmbedCalls(calls)
    got: dict[int, tuple[dict[str, np.ndarray], dict[str, float]]] = {}

    async def caller(i: int) -> None:
        got[i] = await shared.embed([f"text {i}", "x" * (i + 1)])

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(caller, i)
    assert len(calls.made) <= SHARED_CALLS + 1
    for i in range(20):
        vectors, usage = got[i]
        assert set(vectors) == {f"text {i}", "x" * (i + 1)}
        assert float(vectors["x" * (i + 1)][0]) == i + 1
        assert all(0 < share <= 10 for share in usage.values())
    shared_call = next(call for call in calls.made if len(call) > 2)
    total = sum(len(t) for t in shared_call)
    i = next(i for i in range(20) if f"text {i}" in shared_call)
    assert got[i][1][f"text {i}"] == pytest.approx(10 * len(f"text {i}") / total)  # its share of the call


async def test_a_failed_shared_call_fails_each_of_its_callers() -> None:
    calls = Calls()
    shared = SharedEmbedCalls(calls)
    outcome: dict[str, str] = {}

    async def caller(text: str) -> None:
        try:
            await shared.embed([text])
            outcome[text] = "ok"
        except EmbedderError:
            outcome[text] = "failed"

    async with anyio.create_task_group() as tg:
        for text in ("a", "b", "c", "bad", "d"):
            tg.start_soon(caller, text)
    assert outcome["a"] == outcome["b"] == "ok"  # the two calls at once
    assert outcome["bad"] == "failed" and outcome["c"] == outcome["d"] == "failed"  # they shared its call


async def test_a_caller_cancelled_while_waiting_leaves_and_the_others_are_answered() -> None:
    calls = Calls()
    calls.gate = anyio.Event()
    shared = SharedEmbedCalls(calls, calls=1)
    got: dict[str, object] = {}

    async def caller(text: str, scope: anyio.CancelScope | None = None) -> None:
        if scope is None:
            got[text] = (await shared.embed([text]))[0][text]
            return
        with scope:
            got[text] = (await shared.embed([text]))[0][text]

    doomed = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(caller, "waits", doomed)
        tg.start_soon(caller, "also")
        await anyio.wait_all_tasks_blocked()
        doomed.cancel()
        await anyio.wait_all_tasks_blocked()
        gate, calls.gate = calls.gate, None
        gate.set()
    assert set(got) == {"first", "also"}
    assert calls.made[1] == ["waits", "also"]  # the call went with the texts it had (the extra one is harmless)


async def test_a_call_whose_callers_all_left_passes_its_slot_on() -> None:
    calls = Calls()
    calls.gate = anyio.Event()
    shared = SharedEmbedCalls(calls, calls=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(shared.embed, ["first"])
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await shared.embed(["left"])  # waits (the slot is taken), cancelled at once
        gate, calls.gate = calls.gate, None
        gate.set()
    with anyio.fail_after(2):
        vectors, _ = await shared.embed(["after"])
    assert float(vectors["after"][0]) == len("after")
    assert ["left"] not in calls.made


async def test_when_the_caller_sending_a_call_is_cancelled_the_others_call_for_themselves() -> None:
    calls = Calls()
    calls.gate = anyio.Event()
    shared = SharedEmbedCalls(calls, calls=1)
    got: dict[str, float] = {}
    sender = anyio.CancelScope()

    async def caller(text: str, scope: anyio.CancelScope) -> None:
        with scope:
            got[text] = float((await shared.embed([text]))[0][text][0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(shared.embed, ["first"])  # holds the one slot until the gate opens
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(caller, "sender", sender)  # the first to wake sends the shared call
        tg.start_soon(caller, "other", anyio.CancelScope())
        await anyio.wait_all_tasks_blocked()
        calls.gate.set()  # "first" finishes; the shared call starts and waits on the next gate
        calls.gate = anyio.Event()
        await anyio.wait_all_tasks_blocked()
        assert calls.made[-1] == ["sender", "other"]
        sender.cancel()
        await anyio.wait_all_tasks_blocked()
        calls.gate.set()
        calls.gate = None
    assert got == {"other": len("other")}
    assert calls.made[-1] == ["other"]  # asked for alone once the shared call was abandoned


async def test_a_crowd_forms_calls_of_at_most_the_most_texts() -> None:
    calls = Calls()
    shared = SharedEmbedCalls(calls, calls=1)
    async with anyio.create_task_group() as tg:
        for i in range(2 * MAX_SHARED_TEXTS + 10):
            tg.start_soon(shared.embed, [f"t{i}"])
    assert max(len(call) for call in calls.made) == MAX_SHARED_TEXTS
    assert sorted(t for call in calls.made for t in call) == sorted(f"t{i}" for i in range(2 * MAX_SHARED_TEXTS + 10))
