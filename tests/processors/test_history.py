"""MessageHistory through Agent.generate (reference §3.2): the window loaded and what the turn persists."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests._factories import (
    RESOURCE,
    THREAD,
    base_time,
    by_id,
    msg,
    open_memory,
    seed,
    stored,
    text_msg,
    texts,
    tool_part,
)

from threadmind.agent import Agent, Tool
from threadmind.codecs import TextPart, ToolInvocationPart
from threadmind.codecs._time import utc_now
from threadmind.errors import ModelError
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall


def _history(n: int) -> list:  # type: ignore[type-arg]
    t0 = base_time()
    return [text_msg("user" if i % 2 == 0 else "assistant", f"m{i}", id=f"m{i}", at=t0 + timedelta(seconds=i))
            for i in range(n)]


async def test_last_n_are_shown_oldest_first(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"lastMessages": 3}) as memory:
        await seed(memory, _history(8))
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(model.requests[0].messages) == ["m5", "m6", "m7", "now"]


async def test_system_rows_are_never_loaded(tmp_path: Path) -> None:
    t0 = base_time()
    async with open_memory(tmp_path, {"lastMessages": 3}) as memory:
        await seed(memory, _history(4))
        # A system row written by an old client straight into the store (save_messages would drop it).
        await memory.storage.save_messages(THREAD, [text_msg("system", "old system row", id="s1",
                                                             at=t0 + timedelta(seconds=10))])
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE)
        request = model.requests[0]
        assert all(m.role != "system" for m in request.messages)
        assert "old system row" not in request.system
        assert texts(request.messages)[-1] == "now"
        assert "m3" in texts(request.messages)


async def test_read_only_per_call_saves_nothing(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        await seed(memory, _history(2))
        model = ScriptedModel(["ok"])
        result = await Agent("a", "i", model, memory=memory).generate(
            "now", thread_id=THREAD, resource_id=RESOURCE, memory_options={"readOnly": True})
        assert result.text == "ok"
        assert texts(model.requests[0].messages) == ["m0", "m1", "now"]  # history still loads
        assert texts(await stored(memory)) == ["m0", "m1"]


async def test_last_messages_false_neither_loads_nor_saves(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"lastMessages": False}) as memory:
        await seed(memory, _history(2))
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(model.requests[0].messages) == ["now"]
        assert texts(await stored(memory)) == ["m0", "m1"]


async def test_partial_calls_working_memory_tool_and_tags_are_not_persisted(tmp_path: Path) -> None:
    t0 = base_time()
    options = {"workingMemory": {"enabled": True, "scope": "thread"}, "retainFullInput": True}
    async with open_memory(tmp_path, options) as memory:
        await seed(memory, _history(2))
        echoed = msg("assistant", TextPart(text="streamed"), tool_part("partial-call", "p1"),
                     id="a-partial", at=t0 + timedelta(seconds=5), text="streamed")
        model = ScriptedModel([
            ModelResponse(tool_calls=[ToolCall("wm1", "updateWorkingMemory", {"memory": "# Notes\n- likes tea"})]),
            "Sure. <working_memory>secret notes</working_memory> Done.",
        ])
        agent = Agent("a", "i", model, memory=memory)
        result = await agent.generate([echoed, text_msg("user", "remember tea", id="u-new",
                                                        at=t0 + timedelta(seconds=6))],
                                      thread_id=THREAD, resource_id=RESOURCE)
        assert "<working_memory>" in result.text  # the caller sees the raw answer
        rows = await stored(memory)
        partial = by_id(rows, "a-partial")
        assert [type(p).__name__ for p in partial.content.parts] == ["TextPart"]
        response = rows[-1]
        assert response.role == "assistant"
        names = [p.tool_invocation.tool_name for p in response.content.parts if isinstance(p, ToolInvocationPart)]
        assert "updateWorkingMemory" not in names
        joined = " ".join(p.text for p in response.content.parts if isinstance(p, TextPart))
        assert "secret notes" not in joined and "<working_memory>" not in joined
        assert "Done." in joined
        assert "secret notes" not in (response.content.content or "")
        wm = await memory.get_working_memory(thread_id=THREAD, resource_id=RESOURCE)
        assert wm is not None and "likes tea" in wm


async def test_missing_thread_is_created_before_the_model_runs(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        seen: list[object] = []

        async def step(request: ModelRequest) -> str:
            seen.append(await memory.get_thread_by_id("fresh", resource_id=RESOURCE))
            return "ok"

        await Agent("a", "i", ScriptedModel([step]), memory=memory).generate(
            "hi", thread_id="fresh", resource_id=RESOURCE)
        thread = await memory.get_thread_by_id("fresh")
        assert thread is not None and thread.resource_id == RESOURCE and thread.title == ""
        assert seen and seen[0] is not None
        assert texts(await stored(memory, "fresh")) == ["hi", "ok"]


@pytest.mark.parametrize("failure", [RuntimeError("boom"), ModelError("upstream down")])
async def test_a_model_that_raises_persists_nothing(tmp_path: Path, failure: BaseException) -> None:
    async with open_memory(tmp_path) as memory:
        await seed(memory, _history(2))
        model = ScriptedModel([failure])
        with pytest.raises(ModelError):
            await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(await stored(memory)) == ["m0", "m1"]
        # The thread stays usable.
        model2 = ScriptedModel(["fine"])
        await Agent("a", "i", model2, memory=memory).generate("again", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(await stored(memory)) == ["m0", "m1", "again", "fine"]


async def test_a_model_failing_on_the_second_step_persists_nothing(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "echo", {"x": 1})]), RuntimeError("late")])
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("echo", execute=lambda args: args)])
        with pytest.raises(ModelError):
            await agent.generate("go", thread_id=THREAD, resource_id=RESOURCE)
        assert await stored(memory) == []


async def test_the_new_question_sorts_after_history_dated_ahead(tmp_path: Path) -> None:
    """The input gets its time before memory loads the history; a stored row dated at or after that time (the
    previous answer, bumped 1 ms past its question within one millisecond, or a clock running ahead) still
    comes first, in the prompt and in storage."""
    ahead = utc_now() + timedelta(seconds=3)
    async with open_memory(tmp_path, {"lastMessages": 10}) as memory:
        await seed(memory, [text_msg("user", "q1", id="q1", at=ahead - timedelta(milliseconds=1)),
                            text_msg("assistant", "a1", id="a1", at=ahead)])
        model = ScriptedModel(["a2"])
        await Agent("a", "i", model, memory=memory).generate("q2", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(model.requests[0].messages) == ["q1", "a1", "q2"]
        assert texts(await stored(memory)) == ["q1", "a1", "q2", "a2"]


async def test_back_to_back_turns_keep_their_order(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"lastMessages": 40}) as memory:
        model = ScriptedModel([f"a{i}" for i in range(20)])
        agent = Agent("a", "i", model, memory=memory)
        for i in range(20):  # fast enough that several turns share a millisecond
            await agent.generate(f"q{i}", thread_id=THREAD, resource_id=RESOURCE)
        expected = [t for i in range(20) for t in (f"q{i}", f"a{i}")]
        assert texts(await stored(memory)) == expected
        assert texts(model.requests[-1].messages) == [*expected[:-2], "q19"]


class TestHistoryEdgeRules:
    """Reference §3.2 steps 3–4 and §1.1 step 8 at their edges."""

    async def test_an_error_finish_with_no_output_saves_nothing(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            model = ScriptedModel([ModelResponse(text=None, finish_reason="error")])
            result = await Agent("a", "i", model, memory=memory).generate(
                "hello", thread_id=THREAD, resource_id=RESOURCE)
            assert result.messages == [] and result.finish_reason == "error"
            assert await stored(memory) == []  # no orphan user message, no step-start-only response
            await Agent("a", "i", ScriptedModel([ModelResponse(text=None)]), memory=memory).generate(
                "again", thread_id=THREAD, resource_id=RESOURCE)
            assert [(m.role, m.text) for m in await stored(memory)] == [("user", "again")]  # nothing to answer with

    async def test_a_message_whose_parts_were_all_removed_is_not_saved(self, tmp_path: Path) -> None:
        t0 = base_time()
        u1 = text_msg("user", "plan it", id="u1", at=t0)
        a1 = msg("assistant", tool_part("partial-call", "c0"), id="a1", at=t0 + timedelta(seconds=1), text="thinking")
        u2 = text_msg("user", "go on", id="u2", at=t0 + timedelta(seconds=2))
        async with open_memory(tmp_path) as memory:  # an empty thread is seeded with the whole input
            await Agent("a", "i", ScriptedModel(["done"]), memory=memory).generate(
                [u1, a1, u2], thread_id=THREAD, resource_id=RESOURCE)
            assert "a1" not in [m.id for m in await stored(memory)]  # its only part was a partial call

    async def test_a_token_budget_recall_is_in_time_order_across_split_tool_groups(self, tmp_path: Path) -> None:
        t0 = base_time()
        async with open_memory(tmp_path, {"messageHistory": {"maxTokens": 1000}}) as memory:
            await seed(memory, [
                msg("assistant", tool_part("call", "c1"), id="a1", at=t0 + timedelta(seconds=1)),
                text_msg("user", "meanwhile", id="u2", at=t0 + timedelta(seconds=2)),
                msg("assistant", tool_part("result", "c1", result=1), id="a3", at=t0 + timedelta(seconds=3)),
                text_msg("user", "and then", id="u4", at=t0 + timedelta(seconds=4)),
            ])
            result = await memory.recall(THREAD)
            assert [m.id for m in result.messages] == ["a1", "u2", "a3", "u4"]
