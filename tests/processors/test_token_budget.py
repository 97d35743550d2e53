"""Token budgets through Agent.generate: messageHistory with the persisted boundary (reference §3.4) and the
general TokenLimiter processor (reference §3.5)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests._factories import RESOURCE, THREAD, base_time, msg, open_memory, seed, stored, text_msg, texts, tool_part

from threadmind import Message
from threadmind.agent import Agent
from threadmind.codecs import TextPart
from threadmind.codecs._time import from_iso
from threadmind.models import ModelRequest, ScriptedModel
from threadmind.processors import TokenLimiter
from threadmind.tokens import DefaultTokenCounter, TokenLimiterCounter

BUDGET = {"messageHistory": {"maxTokens": 300, "atMaxRemoveTokens": 100}}
INSTRUCTIONS = "You are a careful assistant. " * 8  # about 40 tokens that the budget must account for


def _long_history(n: int = 30) -> list[Message]:
    t0 = base_time()
    return [text_msg("user" if i % 2 == 0 else "assistant", f"message {i} " + "lorem ipsum dolor " * 5,
                     id=f"m{i:02d}", at=t0 + timedelta(seconds=i)) for i in range(n)]


def _context_tokens(request: ModelRequest) -> float:
    """The whole prompt as the memory limiter counts it: 24 + system messages + conversation."""
    system = sum(TokenLimiterCounter().system_tokens(s) for s in request.system)
    counter = DefaultTokenCounter()
    return 24 + system + sum(counter.count_message(m) for m in request.messages)


def _boundary(metadata: dict[str, Any] | None) -> dict[str, Any]:
    assert metadata is not None
    value = metadata["memoryTokenLimiter"]
    assert isinstance(value, dict)
    return value


async def test_the_model_sees_only_what_fits_and_the_boundary_is_persisted(tmp_path: Path) -> None:
    history = _long_history()
    async with open_memory(tmp_path, BUDGET) as memory:
        await seed(memory, history)
        model = ScriptedModel(["ok"])
        await Agent("a", INSTRUCTIONS, model, memory=memory).generate("now", thread_id=THREAD,
                                                                      resource_id=RESOURCE)
        request = model.requests[0]
        seen = [m.id for m in request.messages]
        kept = seen[:-1]
        assert texts(request.messages)[-1] == "now"
        assert kept == [m.id for m in history][-len(kept):]  # a contiguous newest suffix
        assert 0 < len(kept) < len(history)
        total = _context_tokens(request)
        assert total <= 300 - 100  # trimmed down to maxTokens - atMaxRemoveTokens ...
        oldest_dropped = history[len(history) - len(kept) - 1]
        assert total + DefaultTokenCounter().count_message(oldest_dropped) > 300 - 100  # ... and no further

        thread = await memory.get_thread_by_id(THREAD)
        assert thread is not None
        boundary = _boundary(thread.metadata)
        assert set(boundary) == {"createdAt", "messageIds", "maxTokens", "atMaxRemoveTokens"}
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", boundary["createdAt"])
        assert from_iso(boundary["createdAt"]) == oldest_dropped.created_at
        assert boundary["messageIds"] == [oldest_dropped.id]
        assert (boundary["maxTokens"], boundary["atMaxRemoveTokens"]) == (300, 100)
        # Trimming never deletes rows.
        assert [m.id for m in await stored(memory)][:30] == [m.id for m in history]


async def test_a_later_turn_excludes_trimmed_rows_and_the_boundary_only_moves_forward(tmp_path: Path) -> None:
    async with open_memory(tmp_path, BUDGET) as memory:
        await seed(memory, _long_history())
        answers = [f"answer {i} " + "words that take up space " * 6 for i in range(6)]
        model = ScriptedModel(answers)
        agent = Agent("a", INSTRUCTIONS, model, memory=memory)
        boundaries = []
        for turn in range(6):
            await agent.generate(f"question {turn} " + "filler text here " * 6, thread_id=THREAD,
                                 resource_id=RESOURCE)
            thread = await memory.get_thread_by_id(THREAD)
            assert thread is not None
            boundaries.append(_boundary(thread.metadata))
        times = [from_iso(b["createdAt"]) for b in boundaries]
        assert times == sorted(times)
        assert times[-1] > times[0]  # later turns trimmed again
        rows = await stored(memory)
        by_id = {m.id: m for m in rows}
        for index, request in enumerate(model.requests[1:], start=1):
            boundary_time = times[index - 1]
            boundary_ids = set(boundaries[index - 1]["messageIds"])
            for message in request.messages:
                if message.id in by_id:
                    stored_at = by_id[message.id].created_at
                    assert stored_at > boundary_time or (stored_at == boundary_time
                                                         and message.id not in boundary_ids)
            assert _context_tokens(request) <= 300
        assert len(rows) == 30 + 12


async def test_the_boundary_is_ignored_when_the_budget_changes(tmp_path: Path) -> None:
    history = _long_history()
    async with open_memory(tmp_path, BUDGET) as memory:
        await seed(memory, history)
        model = ScriptedModel(["first", "second"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("now", thread_id=THREAD, resource_id=RESOURCE)
        assert len(model.requests[0].messages) < 31
        thread = await memory.get_thread_by_id(THREAD)
        assert thread is not None
        before = _boundary(thread.metadata)
        await agent.generate("wider", thread_id=THREAD, resource_id=RESOURCE,
                             memory_options={"messageHistory": {"maxTokens": 100_000}})
        seen = [m.id for m in model.requests[1].messages]
        assert seen[:30] == [m.id for m in history]
        thread = await memory.get_thread_by_id(THREAD)
        assert thread is not None
        assert _boundary(thread.metadata) == before  # not deleted, not rewritten


async def test_read_only_turns_do_not_persist_the_boundary(tmp_path: Path) -> None:
    async with open_memory(tmp_path, BUDGET) as memory:
        await seed(memory, _long_history())
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE,
                                                             memory_options={"readOnly": True})
        assert len(model.requests[0].messages) < 31
        thread = await memory.get_thread_by_id(THREAD)
        assert thread is not None and "memoryTokenLimiter" not in (thread.metadata or {})


async def test_tool_call_and_result_messages_are_removed_together(tmp_path: Path) -> None:
    t0 = base_time()
    pair_dropped = pair_kept = 0
    async with open_memory(tmp_path) as memory:
        for budget in range(100, 260, 16):
            thread_id = f"t{budget}"
            history = [
                msg("assistant", tool_part("call", "c1", args={"city": "Paris"}), id=f"{thread_id}-call", at=t0,
                    thread_id=thread_id),
                msg("assistant", TextPart(text="looked it up"),
                    tool_part("result", "c1", args={"city": "Paris"}, result="sunny and warm today " * 10),
                    id=f"{thread_id}-result", at=t0 + timedelta(seconds=1), thread_id=thread_id),
            ]
            history += [text_msg("user" if i % 2 == 0 else "assistant", f"message {i} lorem ipsum dolor sit",
                                 id=f"{thread_id}-m{i}", at=t0 + timedelta(seconds=2 + i), thread_id=thread_id)
                        for i in range(6)]
            await seed(memory, history, thread_id=thread_id)
            model = ScriptedModel(["ok"])
            await Agent("a", "i", model, memory=memory).generate(
                "now", thread_id=thread_id, resource_id=RESOURCE,
                memory_options={"messageHistory": {"maxTokens": budget, "atMaxRemoveTokens": 10}})
            seen = {m.id for m in model.requests[0].messages}
            assert (f"{thread_id}-call" in seen) == (f"{thread_id}-result" in seen), budget
            if f"{thread_id}-call" in seen:
                pair_kept += 1
            elif f"{thread_id}-m0" in seen:
                pair_dropped += 1
    assert pair_kept and pair_dropped  # the budgets straddle the pair


async def test_current_input_is_never_removed(tmp_path: Path) -> None:
    async with open_memory(tmp_path, BUDGET) as memory:
        await seed(memory, _long_history())
        model = ScriptedModel(["ok"])
        huge = "an enormous question " * 200
        result = await Agent("a", "i", model, memory=memory).generate(huge, thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "ok"
        assert texts(model.requests[0].messages) == [huge]  # every remembered message went, the input stayed
        assert texts(await stored(memory))[-2:] == [huge, "ok"]


# --- TokenLimiter (general modes) ------------------------------------------------------------------------


async def _limited(tmp_path: Path, limiter: TokenLimiter, *, instructions: str = "i",
                   user_input: Any = "now") -> tuple[ScriptedModel, Any, list[Message]]:
    t0 = base_time()
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", "short q", id="u1", at=t0),
                            text_msg("assistant", "x" * 1200, id="a1", at=t0 + timedelta(seconds=1))])
        model = ScriptedModel(["a fine answer"])
        result = await Agent("a", instructions, model, memory=memory, input_processors=[limiter]).generate(
            user_input, thread_id=THREAD, resource_id=RESOURCE)
        return model, result, await stored(memory)


async def test_token_limiter_best_fit_skips_what_does_not_fit_and_continues(tmp_path: Path) -> None:
    model, _, _ = await _limited(tmp_path, TokenLimiter(100))
    assert [m.id for m in model.requests[0].messages][:-1] == ["u1"]
    assert texts(model.requests[0].messages)[-1] == "now"


async def test_token_limiter_contiguous_stops_at_the_first_miss(tmp_path: Path) -> None:
    model, _, _ = await _limited(tmp_path, TokenLimiter({"limit": 100, "trimMode": "contiguous"}))
    assert texts(model.requests[0].messages) == ["now"]


async def test_token_limiter_keeps_everything_under_the_limit(tmp_path: Path) -> None:
    model, _, _ = await _limited(tmp_path, TokenLimiter(10_000))
    assert [m.id for m in model.requests[0].messages][:2] == ["u1", "a1"]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"instructions": "very long instructions " * 100},
         "TokenLimiterProcessor: System messages alone exceed token limit. Requests cannot be completed by "
         "removing system messages."),
        ({"user_input": "y" * 3000},
         "TokenLimiterProcessor: No messages fit within the remaining token budget. Cannot send LLM a request "
         "with no messages."),
    ],
)
async def test_token_limiter_tripwires_persist_nothing(tmp_path: Path, kwargs: dict[str, Any], reason: str) -> None:
    limiter = TokenLimiter({"limit": 100, "trimMode": "contiguous"})
    model, result, rows = await _limited(tmp_path, limiter, **kwargs)
    assert result.tripwire is not None and result.tripwire.reason == reason
    assert model.calls == 0
    assert [m.id for m in rows] == ["u1", "a1"]


async def test_token_limiter_with_no_messages_trips() -> None:
    model = ScriptedModel(["never"])
    result = await Agent("a", "i", model, input_processors=[TokenLimiter(100)]).generate([])
    assert result.tripwire is not None
    assert result.tripwire.reason == ("TokenLimiterProcessor: No messages to process. Cannot send LLM a request "
                                      "with no messages.")
    assert model.calls == 0


async def test_token_limiter_truncates_the_response_and_the_result(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        answer = " ".join(f"word{i}" for i in range(200))
        model = ScriptedModel([answer])
        result = await Agent("a", "i", model, memory=memory, output_processors=[TokenLimiter(20)]).generate(
            "talk", thread_id=THREAD, resource_id=RESOURCE)
        saved = (await stored(memory))[-1]
        saved_text = " ".join(p.text for p in saved.content.parts if isinstance(p, TextPart))
        assert saved_text and answer.startswith(saved_text) and len(saved_text) < len(answer)
        assert memory.estimate_tokens(saved_text) <= 20
        assert result.text == saved_text  # the caller gets what the output processors made of it


async def test_token_limiter_abort_strategy_on_output(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        answer = " ".join(f"word{i}" for i in range(200))
        limiter = TokenLimiter({"limit": 20, "strategy": "abort"})
        result = await Agent("a", "i", ScriptedModel([answer]), memory=memory, output_processors=[limiter]).generate(
            "talk", thread_id=THREAD, resource_id=RESOURCE)
        assert result.tripwire is not None
        assert re.fullmatch(r"Token limit of 20 exceeded \(current: \d+\)", result.tripwire.reason)
        assert await stored(memory) == []


async def test_estimator_numbers_through_memory(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        assert memory.estimate_tokens("hello") == 1
        assert memory.estimate_tokens("hello world") == 2
        assert memory.estimate_tokens("x" * 400) == 67
        assert memory.estimate_tokens("The quick brown fox jumps over the lazy dog.") == 10
        assert memory.estimate_tokens("") == 0


async def test_token_limiter_memory_only_mode_removes_tool_groups_together(tmp_path: Path) -> None:
    t0 = base_time()
    history = [
        msg("assistant", tool_part("call", "c1", args={"city": "Paris, the capital of France " * 8}), id="call",
            at=t0),
        msg("assistant", tool_part("result", "c1", args={}, result="sunny"), id="result",
            at=t0 + timedelta(seconds=1)),
    ] + [text_msg("user" if i % 2 == 0 else "assistant", f"message {i} lorem ipsum dolor sit", id=f"m{i}",
                  at=t0 + timedelta(seconds=2 + i)) for i in range(6)]
    counter = TokenLimiterCounter()
    total = 24 + counter.system_tokens("i") + sum(counter.message_tokens(m) for m in history)
    async with open_memory(tmp_path, {"lastMessages": 20}) as memory:
        await seed(memory, history)
        # Over the limit by less than the call message alone weighs: trimming the call must take its result too.
        limiter = TokenLimiter({"limit": int(total), "trimMode": "memory-only", "atMaxRemoveTokens": 0})
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory, input_processors=[limiter]).generate(
            "now", thread_id=THREAD, resource_id=RESOURCE)
        seen = [m.id for m in model.requests[0].messages]
        assert "call" not in seen and "result" not in seen
        assert seen[:6] == [f"m{i}" for i in range(6)]
