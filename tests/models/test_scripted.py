"""ScriptedModel, tested through the LanguageModel protocol like any user-written model."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from threadmind._results import Usage
from threadmind.codecs import Message
from threadmind.errors import ModelError
from threadmind.models import LanguageModel, ModelRequest, ModelResponse, ScriptedModel, ToolCall, ToolSpec


def _request(text: str) -> ModelRequest:
    return ModelRequest(system=["be brief"], messages=[Message.user(text)])


class TestScriptedModel:
    async def test_answers_in_order_and_records_requests(self) -> None:
        call = ModelResponse(tool_calls=[ToolCall("c1", "search", {"q": "x"})], finish_reason="tool_calls",
                             usage=Usage(tokens=3, input_tokens=2, output_tokens=1))
        model: LanguageModel = ScriptedModel(["first", call, "third"])
        requests = [_request(f"q{i}") for i in range(3)]
        answers = [await model.generate(r) for r in requests]
        assert answers == [ModelResponse(text="first"), call, ModelResponse(text="third")]
        assert isinstance(model, ScriptedModel)
        assert model.requests == requests
        assert model.requests[1].messages[0].text == "q1"

    async def test_runs_out_with_model_error(self) -> None:
        model = ScriptedModel(["only"])
        await model.generate(_request("a"))
        with pytest.raises(ModelError, match="ran out of responses on call 2") as info:
            await model.generate(_request("b"))
        assert info.value.code == "THREADMIND_MODEL_SCRIPT_EXHAUSTED"
        assert len(model.requests) == 2  # the failing request is recorded too

    async def test_empty_script_fails_first_call(self) -> None:
        with pytest.raises(ModelError):
            await ScriptedModel([]).generate(ModelRequest())

    async def test_callable_sees_the_request(self) -> None:
        def echo(request: ModelRequest) -> str:
            return f"{len(request.tools)} tools, last: {request.messages[-1].text}"

        async def later(request: ModelRequest) -> ModelResponse:
            await anyio.lowlevel.checkpoint()
            return ModelResponse(text=request.system[0], finish_reason="length")

        model = ScriptedModel([echo, later])
        tools = [ToolSpec(name="t", parameters={"type": "object"})]
        first = await model.generate(ModelRequest(messages=[Message.user("hello")], tools=tools))
        second = await model.generate(_request("ignored"))
        assert first.text == "1 tools, last: hello"
        assert second == ModelResponse(text="be brief", finish_reason="length")

    async def test_scripted_exception_is_raised(self) -> None:
        model = ScriptedModel([ModelError("provider down"), "recovered"])
        with pytest.raises(ModelError, match="provider down"):
            await model.generate(ModelRequest())
        assert (await model.generate(ModelRequest())).text == "recovered"

    async def test_callable_returning_garbage_is_a_model_error(self) -> None:
        model = ScriptedModel([lambda request: 42])  # type: ignore[list-item,return-value]
        with pytest.raises(ModelError, match="return a str or a ModelResponse"):
            await model.generate(ModelRequest())

    async def test_endless_generator_and_concurrent_callers(self) -> None:
        def counter() -> Iterator[str]:
            n = 0
            while True:
                n += 1
                yield f"answer {n}"

        model = ScriptedModel(counter(), model_id="counter")
        texts: list[str | None] = []

        async def ask() -> None:
            texts.append((await model.generate(ModelRequest())).text)

        async with anyio.create_task_group() as tg:
            for _ in range(300):
                tg.start_soon(ask)
        assert sorted(texts, key=lambda t: int((t or "0").split()[-1])) == [f"answer {n}" for n in range(1, 301)]
        assert model.calls == 300
        assert model.model_id == "counter"
        assert "counter" in repr(model)

    def test_request_and_response_defaults(self) -> None:
        request = ModelRequest()
        assert (request.system, request.messages, request.tools) == ([], [], [])
        response = ModelResponse()
        assert (response.text, response.tool_calls, response.finish_reason, response.usage) == (None, [], "stop", None)
        assert ModelResponse().tool_calls is not ModelResponse().tool_calls
        assert ToolSpec(name="x", parameters={}).description == ""
