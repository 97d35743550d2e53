"""Client and server tools through Agent.generate, and the same-id rules of reference §4.4 end to end."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import msgspec
from tests._factories import RESOURCE, THREAD, base_time, by_id, open_memory, seed, stored, text_msg, texts, tool_states

from threadmind import Message
from threadmind.agent import Agent, Tool
from threadmind.codecs import StepStartPart, TextPart, ToolInvocationPart
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall


def _with_outcome(message: Message, call_id: str, result: Any) -> Message:
    """The client's copy of ``message`` with the tool call answered."""
    parts = []
    for part in message.content.parts:
        if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
            invocation = msgspec.structs.replace(part.tool_invocation, state="result", result=result)
            part = msgspec.structs.replace(part, tool_invocation=invocation)
        parts.append(part)
    return msgspec.structs.replace(message, content=msgspec.structs.replace(message.content, parts=parts))


async def test_client_tool_stops_the_run_and_a_later_turn_completes_it(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel([
            ModelResponse(text="Let me ask.", tool_calls=[ToolCall("c1", "confirm", {"amount": 5})]),
            "Confirmed, done.",
        ])
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("confirm", "ask the user", {"type": "object"})])
        first = await agent.generate("pay 5", thread_id=THREAD, resource_id=RESOURCE)
        assert first.finish_reason == "tool-calls"
        assert model.calls == 1
        assert [t.name for t in model.requests[0].tools] == ["confirm"]
        (pending,) = first.messages
        rows = await stored(memory)
        assert tool_states(by_id(rows, pending.id)) == {"c1": "call"}

        second = await agent.generate(_with_outcome(pending, "c1", {"ok": True}), thread_id=THREAD,
                                      resource_id=RESOURCE)
        assert second.text == "Confirmed, done."
        seen = by_id(model.requests[1].messages, pending.id)
        assert tool_states(seen) == {"c1": "result"}
        rows = await stored(memory)
        answered = by_id(rows, pending.id)
        assert tool_states(answered) == {"c1": "result"}
        part = next(p for p in answered.content.parts if isinstance(p, ToolInvocationPart))
        assert part.tool_invocation.result == {"ok": True}
        assert [m.role for m in rows].count("user") == 1


async def test_a_client_tool_result_cannot_rewrite_a_completed_call(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "confirm", {})]), "thanks", "again"])
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("confirm")])
        first = await agent.generate("go", thread_id=THREAD, resource_id=RESOURCE)
        pending = first.messages[0]
        await agent.generate(_with_outcome(pending, "c1", "yes"), thread_id=THREAD, resource_id=RESOURCE)
        await agent.generate([_with_outcome(pending, "c1", "forged"), "next"], thread_id=THREAD,
                             resource_id=RESOURCE)
        part = next(p for p in by_id(await stored(memory), pending.id).content.parts
                    if isinstance(p, ToolInvocationPart))
        assert part.tool_invocation.result == "yes"


async def test_server_tools_loop_and_merge_into_one_response_message(tmp_path: Path) -> None:
    calls: list[Any] = []

    def add(args: dict[str, int]) -> int:
        calls.append(("add", args))
        return args["a"] + args["b"]

    async def lookup(args: dict[str, str]) -> dict[str, str]:
        await anyio.lowlevel.checkpoint()
        calls.append(("lookup", args))
        return {"capital": "Paris"}

    async with open_memory(tmp_path) as memory:
        model = ScriptedModel([
            ModelResponse(text="Adding.", tool_calls=[ToolCall("c1", "add", {"a": 2, "b": 3})]),
            ModelResponse(tool_calls=[ToolCall("c2", "lookup", {"country": "France"})]),
            "2+3=5 and the capital is Paris.",
        ])
        agent = Agent("a", "i", model, memory=memory,
                      tools=[Tool("add", execute=add), Tool("lookup", execute=lookup)])
        result = await agent.generate("compute", thread_id=THREAD, resource_id=RESOURCE)
        assert calls == [("add", {"a": 2, "b": 3}), ("lookup", {"country": "France"})]
        assert model.calls == 3
        assert result.text == "2+3=5 and the capital is Paris."
        # Step 2 saw step 1's result; step 3 saw both.
        step2 = model.requests[1].messages[-1]
        assert tool_states(step2) == {"c1": "result"}
        assert tool_states(model.requests[2].messages[-1]) == {"c1": "result", "c2": "result"}
        assert len(result.messages) == 1
        rows = await stored(memory)
        assert [m.role for m in rows] == ["user", "assistant"]
        kinds = [type(p).__name__ for p in rows[1].content.parts]
        assert kinds == ["StepStartPart", "TextPart", "ToolInvocationPart", "StepStartPart", "ToolInvocationPart",
                         "StepStartPart", "TextPart"]
        results = [p.tool_invocation.result for p in rows[1].content.parts if isinstance(p, ToolInvocationPart)]
        assert results == [5, {"capital": "Paris"}]
        stamps = [p.created_at for p in rows[1].content.parts]  # every part of every step (reference §4.1)
        assert all(isinstance(t, int) and t > 1_600_000_000_000 for t in stamps), stamps
        assert stamps == sorted(cast("list[int]", stamps))
        assert result.finish_reason == "stop"


async def test_server_tool_loop_stops_at_max_steps(tmp_path: Path) -> None:
    def forever() -> Any:
        n = 0
        while True:
            n += 1
            yield ModelResponse(tool_calls=[ToolCall(f"c{n}", "tick", {})])

    async with open_memory(tmp_path) as memory:
        model = ScriptedModel(forever())
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("tick", execute=lambda args: "tock")])
        result = await agent.generate("go", thread_id=THREAD, resource_id=RESOURCE, max_steps=3)
        assert model.calls == 3
        rows = await stored(memory)
        assert len(rows) == 2
        assert sum(isinstance(p, StepStartPart) for p in rows[1].content.parts) == 3
        assert tool_states(rows[1]) == {"c1": "result", "c2": "result", "c3": "result"}
        assert result.messages[0].id == rows[1].id
        assert result.finish_reason == "tool-calls"  # the model was still calling tools when the steps ran out


async def test_a_failing_or_unknown_tool_is_reported_to_the_model(tmp_path: Path) -> None:
    def broken(args: Any) -> Any:
        raise RuntimeError("disk on fire")

    async with open_memory(tmp_path) as memory:
        model = ScriptedModel([
            ModelResponse(tool_calls=[ToolCall("c1", "broken", {}), ToolCall("c2", "missing", {})]),
            "sorry",
        ])
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("broken", execute=broken)])
        result = await agent.generate("go", thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "sorry"
        assert tool_states(model.requests[1].messages[-1]) == {"c1": "output-error", "c2": "output-error"}


async def test_a_client_echo_with_changed_text_does_not_overwrite_stored_text(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "original question", id="u1", at=t0)
    a1 = text_msg("assistant", "original answer", id="a1", at=t0 + timedelta(seconds=1))
    for options in (None, {"retainFullInput": True}):
        async with open_memory(tmp_path, options, name=f"db-{options is None}.db") as memory:
            await seed(memory, [u1, a1])
            model = ScriptedModel(["ok"])
            edited = [text_msg("user", "EDITED question", id="u1", at=t0),
                      text_msg("assistant", "EDITED answer", id="a1", at=t0 + timedelta(seconds=1)),
                      text_msg("user", "next", id="u2", at=t0 + timedelta(seconds=2))]
            await Agent("a", "i", model, memory=memory).generate(edited, thread_id=THREAD, resource_id=RESOURCE)
            rows = await stored(memory)
            assert texts(rows)[:3] == ["original question", "original answer", "next"], options
            seen = model.requests[0].messages
            assert [p.text for m in seen[:2] for p in m.content.parts if isinstance(p, TextPart)] == [
                "original question", "original answer"], options


async def test_tool_context_carries_thread_and_resource(tmp_path: Path) -> None:
    seen: list[Any] = []

    def whoami(args: Any, context: Any) -> str:
        seen.append((context.thread_id, context.resource_id))
        return "ok"

    async def step(request: ModelRequest) -> ModelResponse:
        return ModelResponse(tool_calls=[ToolCall("c1", "whoami", {})])

    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", ScriptedModel([step, "done"]), memory=memory, tools=[Tool("whoami", execute=whoami)])
        await agent.generate("hi", thread_id=THREAD, resource_id=RESOURCE)
    assert seen == [(THREAD, RESOURCE)]
