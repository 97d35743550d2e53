"""``process_input_step`` runs before every model call of the tool loop (reference ``processInputStep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._factories import RESOURCE, THREAD, base_time, open_memory, seed, stored, text_msg, texts

from threadmind import Message
from threadmind.agent import Agent, Tool
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.processors import TokenLimiter
from threadmind.tokens import DefaultTokenCounter


def _two_steps(result: str) -> tuple[ScriptedModel, list[Tool]]:
    model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "fetch", {})]), "done"])
    return model, [Tool("fetch", "fetches data", None, lambda args: result)]


class _StepWatcher:
    id = "step-watcher"

    def __init__(self, abort_at: int | None = None) -> None:
        self.steps: list[tuple[int, int]] = []
        self.abort_at = abort_at

    async def process_input_step(self, args: Any) -> None:
        self.steps.append((args.step_number, len(args.messages)))
        if args.step_number == self.abort_at:
            args.abort(f"stopped before step {args.step_number}")


async def test_a_step_processor_runs_before_every_model_call() -> None:
    watcher = _StepWatcher()
    model, tools = _two_steps("42")
    result = await Agent("a", "i", model, tools=tools, input_processors=[watcher]).generate("what is it?")
    assert result.text == "done"
    assert watcher.steps == [(0, 1), (1, 2)]  # step 1 also sees the response holding the tool result


async def test_a_step_processor_can_abort_and_nothing_is_persisted(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", "before", id="u0", at=base_time())])
        model, tools = _two_steps("42")
        result = await Agent("a", "i", model, memory=memory, tools=tools,
                             input_processors=[_StepWatcher(abort_at=1)]).generate(
            "hello", thread_id=THREAD, resource_id=RESOURCE)
        assert result.tripwire is not None and result.tripwire.reason == "stopped before step 1"
        assert model.calls == 1
        assert texts(await stored(memory)) == ["before"]


async def test_token_limiter_trims_again_once_a_tool_result_pushes_the_prompt_over() -> None:
    model, tools = _two_steps("data " * 60)
    history = [Message.user("old " * 20), Message.assistant("older answer " * 5), Message.user("use the tool")]
    limiter = TokenLimiter(60)
    result = await Agent("a", "i", model, tools=tools, input_processors=[limiter]).generate(history)
    first, second = model.requests
    assert [m.text for m in first.messages][-1] == "use the tool"
    counter = limiter.counter
    untrimmed = sum(counter.message_tokens(m) for m in first.messages) + counter.message_tokens(result.messages[0])
    assert untrimmed > 60  # the tool step alone pushed the prompt over the limit...
    assert sum(counter.message_tokens(m) for m in second.messages) <= 60  # ...and step 1 was trimmed to fit
    assert [m.text for m in second.messages][-1] == "use the tool"  # best-fit: the newest that fit stay


async def test_the_memory_token_budget_trims_history_again_after_a_tool_step(tmp_path: Path) -> None:
    t0 = base_time()
    history = [text_msg("user" if i % 2 == 0 else "assistant", f"remembered message number {i} " * 4,
                        id=f"h{i}", at=t0.replace(minute=i)) for i in range(12)]
    async with open_memory(tmp_path, {"messageHistory": {"maxTokens": 400}}) as memory:
        await seed(memory, history)
        model, tools = _two_steps("payload " * 120)
        await Agent("a", "i", model, memory=memory, tools=tools).generate(
            "fetch it", thread_id=THREAD, resource_id=RESOURCE)
        first, second = model.requests
        remembered = {m.id for m in first.messages} & {m.id for m in history}
        kept_later = {m.id for m in second.messages} & {m.id for m in history}
        assert kept_later < remembered  # older remembered messages gave way to the tool result
        counter = DefaultTokenCounter()
        assert sum(counter.count_message(m) for m in second.messages) <= 400
        assert texts(await stored(memory))[-2:] == ["fetch it", "done"]  # the turn itself is saved whole


def test_memory_only_limits_follow_the_reference_rule() -> None:
    import pytest

    from threadmind.errors import ConfigError

    text = "^Memory token limits must be finite, non-negative, and atMaxRemoveTokens cannot exceed limit$"
    for options in ({"limit": float("inf")}, {"limit": -1}, {"limit": 100, "atMaxRemoveTokens": 101},
                    {"limit": 100, "atMaxRemoveTokens": -5}, {"limit": 100, "atMaxRemoveTokens": float("nan")}):
        with pytest.raises(ConfigError, match=text):
            TokenLimiter({**options, "trimMode": "memory-only"})
    assert TokenLimiter({"limit": 100, "trimMode": "memory-only"}).at_max_remove_tokens == 25
    with pytest.raises(ConfigError, match="^TokenLimiter limit must be a non-negative number$"):
        TokenLimiter(-1)
    assert TokenLimiter(100).limit == 100 and isinstance(TokenLimiter(100).limit, int)


def test_model_request_takes_spec_positional_order() -> None:
    from threadmind.models import ModelRequest

    message = Message.user("hi")
    request = ModelRequest(["be kind"], [message], [])
    assert (request.system, request.messages, request.tools) == (["be kind"], [message], [])
