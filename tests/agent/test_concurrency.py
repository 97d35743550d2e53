"""Concurrent agent turns: thread_concurrency policies, many threads at once, and cancelled callers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import RESOURCE, THREAD, open_memory, stored, texts

from threadmind.agent import Agent
from threadmind.errors import ThreadBusy
from threadmind.models import ModelRequest, ScriptedModel


class _Gate:
    """A first model step that blocks until released, so a second turn can be started meanwhile."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, request: ModelRequest) -> str:
        self.entered.set()
        await self.release.wait()
        return "first answer"


async def _two_turns(tmp_path: Path, policy: str) -> tuple[ScriptedModel, list[Any], Any]:
    gate = _Gate()
    model = ScriptedModel([gate, "second answer"])
    outcomes: list[Any] = [None, None]
    second_done = anyio.Event()
    async with open_memory(tmp_path, {"threadConcurrency": policy}) as memory:
        agent = Agent("a", "i", model, memory=memory)

        async def turn(index: int, text: str) -> None:
            try:
                outcomes[index] = await agent.generate(text, thread_id=THREAD, resource_id=RESOURCE)
            except ThreadBusy as exc:
                outcomes[index] = exc
            finally:
                if index == 1:
                    second_done.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, 0, "first question")
                await gate.entered.wait()
                tg.start_soon(turn, 1, "second question")
                if policy == "enqueue":
                    await anyio.wait_all_tasks_blocked()
                else:  # reject and parallel finish the second turn while the first is still blocked
                    await second_done.wait()
                gate.release.set()
        rows = await stored(memory)
    return model, outcomes, rows


async def test_enqueue_runs_the_second_turn_after_the_first_persisted(tmp_path: Path) -> None:
    model, outcomes, rows = await _two_turns(tmp_path, "enqueue")
    assert texts(model.requests[1].messages) == ["first question", "first answer", "second question"]
    assert texts(rows) == ["first question", "first answer", "second question", "second answer"]
    assert outcomes[1].text == "second answer"


async def test_reject_raises_thread_busy(tmp_path: Path) -> None:
    model, outcomes, rows = await _two_turns(tmp_path, "reject")
    assert isinstance(outcomes[1], ThreadBusy)
    assert model.calls == 1
    assert texts(rows) == ["first question", "first answer"]


async def test_parallel_runs_both_turns_at_once(tmp_path: Path) -> None:
    model, outcomes, rows = await _two_turns(tmp_path, "parallel")
    assert texts(model.requests[1].messages) == ["second question"]  # the first turn had not persisted yet
    assert outcomes[0].text == "first answer" and outcomes[1].text == "second answer"
    assert sorted(texts(rows)) == sorted(["first question", "first answer", "second question", "second answer"])


async def test_reject_frees_the_thread_after_the_turn(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"threadConcurrency": "reject"}) as memory:
        agent = Agent("a", "i", ScriptedModel(["one", "two"]), memory=memory)
        await agent.generate("a", thread_id=THREAD, resource_id=RESOURCE)
        await agent.generate("b", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(await stored(memory)) == ["a", "one", "b", "two"]


async def test_a_cancelled_turn_leaves_the_thread_consistent(tmp_path: Path) -> None:
    gate = _Gate()
    model = ScriptedModel([gate, "after"])
    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", model, memory=memory)

        async def doomed() -> None:
            await agent.generate("doomed", thread_id=THREAD, resource_id=RESOURCE)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(doomed)
                await gate.entered.wait()
                tg.cancel_scope.cancel()
        assert await stored(memory) == []
        with anyio.fail_after(10):
            result = await agent.generate("next", thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "after"
        assert texts(model.requests[1].messages) == ["next"]
        assert texts(await stored(memory)) == ["next", "after"]


@pytest.mark.parametrize("policy", ["enqueue", "reject"])
async def test_a_failed_turn_releases_the_thread(tmp_path: Path, policy: str) -> None:
    async with open_memory(tmp_path, {"threadConcurrency": policy}) as memory:
        agent = Agent("a", "i", ScriptedModel([RuntimeError("boom"), "fine"]), memory=memory)
        with pytest.raises(Exception, match="boom"):
            await agent.generate("x", thread_id=THREAD, resource_id=RESOURCE)
        with anyio.fail_after(10):
            result = await agent.generate("y", thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "fine"
