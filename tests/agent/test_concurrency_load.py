"""200 concurrent agent turns over 50 threads: every thread's history is its own, alternating and in order."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import RESOURCE, open_memory, stored, texts

from threadmind.agent import Agent
from threadmind.models import ModelRequest, ScriptedModel


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, bool]]:
    """asyncio without debug mode: its per-callback bookkeeping makes this load test 4x slower."""
    return ("asyncio", {"debug": False})


@pytest.mark.parametrize("cached_reads", [True, False], ids=["cached-reads", "mailbox-reads"])
async def test_200_concurrent_turns_over_50_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached_reads: bool
) -> None:
    # Cached reads are on only without an OpenTelemetry SDK, and the test session installs one: switch it
    # off for the registry so both read paths carry this load.
    monkeypatch.setattr("threadmind.actors._registry.tracing_enabled", lambda: not cached_reads)
    order: dict[str, list[str]] = defaultdict(list)

    async def answer(request: ModelRequest) -> str:
        await anyio.lowlevel.checkpoint()
        last = request.messages[-1]
        assert last.role == "user" and last.thread_id is not None
        # Everything the model sees for a thread is that thread's, alternating user/assistant.
        assert all(m.thread_id == last.thread_id for m in request.messages)
        assert [m.role for m in request.messages] == ["user", "assistant"] * (len(request.messages) // 2) + ["user"]
        order[last.thread_id].append(last.text)
        return f"re: {last.text}"

    def endless() -> Any:
        while True:
            yield answer

    async with open_memory(tmp_path, {"lastMessages": 20}) as memory:
        agent = Agent("a", "i", ScriptedModel(endless()), memory=memory)

        async def turn(thread: int, k: int) -> None:
            await agent.generate(f"t{thread} q{k}", thread_id=f"t{thread}", resource_id=RESOURCE)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for k in range(4):
                    for thread in range(50):
                        tg.start_soon(turn, thread, k)
        for thread in range(50):
            rows = await stored(memory, f"t{thread}")
            questions = order[f"t{thread}"]
            assert sorted(questions) == [f"t{thread} q{k}" for k in range(4)]
            expected: list[str] = []
            for question in questions:  # stored in the order the turns ran
                expected += [question, f"re: {question}"]
            assert texts(rows) == expected
            assert [m.role for m in rows] == ["user", "assistant"] * 4
