"""A turn of several model steps (tool calls) with observational memory: its input is stored once and every step
sees it once, while observations are computed ahead and activated around it (Mastra duplicated the user message at
each step: mastra-ai/mastra#13089)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from threadmind.agent import Agent, Tool
from threadmind.memory import Memory
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import InMemoryStore, SQLiteStore


def _long(tag: str) -> str:
    return f"{tag}: " + " ".join(f"word{i}" for i in range(20))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_multi_step_turn_stores_and_shows_its_input_once(tmp_path: Path, kind: str) -> None:
    observer = ScriptedModel(iter(lambda: lambda request: f"* 🔴 observed {len(request.messages[0].text)}", None))
    steps: list[ModelResponse | str] = []
    for n in range(6):
        steps += [ModelResponse(tool_calls=[ToolCall(f"c{n}", "lookup", {"n": n})]), f"answer {n}"]
    model = ScriptedModel(steps)
    options: dict[str, Any] = {"observationalMemory": {"observation": {
        "model": observer, "messageTokens": 150, "bufferTokens": 40}}}
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "om.db")
    async with Memory(storage=store, options=options) as memory:
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("lookup", "Look up.", None, lambda args: 42)])
        for n in range(6):
            await agent.generate(_long(f"question {n}"), thread_id="t1", resource_id="r1")
            await memory.settled()
            stored = (await memory.recall("t1", per_page=False)).messages
            assert [m.text for m in stored if m.role == "user"] == [_long(f"question {i}") for i in range(n + 1)]
        requests: list[ModelRequest] = model.requests
    assert observer.calls > 0  # thresholds crossed: observations computed ahead and activated meanwhile
    for n in range(6):
        for request in requests[2 * n:2 * n + 2]:  # both steps of turn n
            texts = [m.text for m in request.messages if m.role == "user"]
            assert texts.count(_long(f"question {n}")) == 1, texts
