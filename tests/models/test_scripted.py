"""ScriptedModel, tested through the LanguageModel protocol like any user-written model."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

import anyio
import pytest

from threadmind._results import Usage
from threadmind.codecs import Message
from threadmind.errors import ConfigError, ModelError
from threadmind.models import (
    LanguageModel,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    stream_model,
)
from threadmind.models._scripted import word_deltas
from threadmind.models._stream import collect_response


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


async def _stream(model: ScriptedModel, request: ModelRequest | None = None) -> list[ModelChunk]:
    async with aclosing(model.stream(request or ModelRequest())) as chunks:
        return [chunk async for chunk in chunks]


class TestWordDeltas:
    @pytest.mark.parametrize(("text", "deltas"), [
        pytest.param("Hello  big\nworld", ["Hello", "  big", "\nworld"], id="inner-whitespace"),
        pytest.param("  lead and trail \n", ["  lead", " and", " trail \n"], id="outer-whitespace"),
        pytest.param("one", ["one"], id="one-word"),
        pytest.param(" \n\t", [" \n\t"], id="whitespace-only"),
        pytest.param("", [], id="empty"),
        pytest.param("héllo\u00a0wörld 🌍", ["héllo", "\u00a0wörld", " 🌍"], id="unicode"),
    ])
    def test_one_word_per_delta_joining_to_the_text(self, text: str, deltas: list[str]) -> None:
        assert word_deltas(text) == deltas
        assert "".join(word_deltas(text)) == text


class TestScriptedStream:
    async def test_text_reasoning_tool_calls_then_finish(self) -> None:
        usage = Usage(tokens=7, input_tokens=3, output_tokens=4)
        call = ToolCall("c1", "search", {"q": "x"})
        model = ScriptedModel([ModelResponse(text="Hello  big\nworld", tool_calls=[call], finish_reason="tool_calls",
                                             usage=usage, reasoning="Think, then act.")])
        assert await _stream(model) == [
            ModelChunk(reasoning="Think,"), ModelChunk(reasoning=" then"), ModelChunk(reasoning=" act."),
            ModelChunk(text="Hello"), ModelChunk(text="  big"), ModelChunk(text="\nworld"),
            ModelChunk(tool_call=call),
            ModelChunk(finish_reason="tool_calls", usage=usage),
        ]

    async def test_a_str_streams_as_words(self) -> None:
        assert await _stream(ScriptedModel(["Hi there"])) == [
            ModelChunk(text="Hi"), ModelChunk(text=" there"), ModelChunk(finish_reason="stop")]

    @pytest.mark.parametrize("response", [
        pytest.param("Hello  big\nworld ", id="str"),
        pytest.param(ModelResponse(text="a b", reasoning=" r  s ", finish_reason="length",
                                   usage=Usage(tokens=1, input_tokens=1, output_tokens=0)), id="reasoning"),
        pytest.param(ModelResponse(tool_calls=[ToolCall("c1", "t", {}), ToolCall("c2", "u", "raw")]), id="calls"),
        pytest.param(ModelResponse(), id="empty"),
    ])
    async def test_stream_and_generate_give_equal_responses(self, response: str | ModelResponse) -> None:
        generated = await ScriptedModel([response]).generate(ModelRequest())
        assert await collect_response(ScriptedModel([response]).stream(ModelRequest())) == generated
        assert await collect_response(stream_model(ScriptedModel([response]), ModelRequest())) == generated

    async def test_a_scripted_async_generator_paces_the_stream(self) -> None:
        gate = anyio.Event()
        waiting = anyio.Event()
        seen: list[ModelRequest] = []

        async def paced(request: ModelRequest) -> AsyncIterator[ModelChunk | str]:
            seen.append(request)
            yield "Hello"
            waiting.set()
            await gate.wait()
            yield ModelChunk(text=" world")
            yield ModelChunk(finish_reason="length", usage=Usage(tokens=2))

        model = ScriptedModel([paced])
        request = _request("go")
        received: list[str] = []

        async def consume() -> None:
            async with aclosing(model.stream(request)) as chunks:
                async for chunk in chunks:
                    received.append(chunk.text or str(chunk.finish_reason))

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await waiting.wait()
            await anyio.wait_all_tasks_blocked()
            assert received == ["Hello"]  # the second delta waits for the gate
            gate.set()
        assert received == ["Hello", " world", "length"]
        assert seen == [request] and model.requests == [request] and model.calls == 1

    async def test_a_scripted_async_iterable_and_its_joined_generate(self) -> None:
        async def deltas() -> AsyncIterator[str]:
            for word in ("a", " b", " c"):
                yield word

        call = ToolCall("c9", "t", {"n": 1})

        async def with_call(request: ModelRequest) -> AsyncIterator[ModelChunk]:
            yield ModelChunk(tool_call=call)

        model = ScriptedModel([deltas(), with_call, deltas()])
        assert await _stream(model) == [ModelChunk(text="a"), ModelChunk(text=" b"), ModelChunk(text=" c"),
                                        ModelChunk(finish_reason="stop")]
        assert await _stream(model) == [ModelChunk(tool_call=call), ModelChunk(finish_reason="tool_calls")]
        assert await model.generate(ModelRequest()) == ModelResponse(text="a b c")

    async def test_generate_on_a_streamed_step_joins_it(self) -> None:
        async def streamed(request: ModelRequest) -> AsyncIterator[ModelChunk]:
            yield ModelChunk(reasoning="why")
            yield ModelChunk(text="be")
            yield ModelChunk(text="cause", finish_reason="stop", usage=Usage(tokens=3))

        assert await ScriptedModel([streamed]).generate(ModelRequest()) == ModelResponse(
            text="because", usage=Usage(tokens=3), reasoning="why")

    async def test_closing_the_stream_closes_the_scripted_generator(self) -> None:
        closed = anyio.Event()

        async def endless(request: ModelRequest) -> AsyncIterator[str]:
            try:
                while True:
                    yield "x"
            finally:
                closed.set()

        async with aclosing(ScriptedModel([endless]).stream(ModelRequest())) as chunks:
            async for _ in chunks:
                break
        assert closed.is_set()

    async def test_stream_failures(self) -> None:
        async def bad(request: ModelRequest) -> AsyncIterator[object]:
            yield 42

        model = ScriptedModel([ModelError("scripted failure"), bad])  # type: ignore[list-item]
        with pytest.raises(ModelError, match="scripted failure"):
            await _stream(model)
        with pytest.raises(ModelError, match="yielded int; yield ModelChunks or str deltas") as info:
            await _stream(model)
        assert info.value.code == "THREADMIND_MODEL_SCRIPT_INVALID"
        with pytest.raises(ModelError, match="ran out of responses on call 3"):
            await _stream(model)
        assert model.calls == 3 and len(model.requests) == 3

    async def test_stream_and_generate_share_one_script(self) -> None:
        model = ScriptedModel(["one", "two", "three"])
        assert (await model.generate(_request("a"))).text == "one"
        assert "".join(c.text for c in await _stream(model, _request("b"))) == "two"
        assert (await model.generate(_request("c"))).text == "three"
        assert [r.messages[0].text for r in model.requests] == ["a", "b", "c"]


class TestRequestLog:
    async def test_keeps_the_newest_requests_and_counts_all_calls(self) -> None:
        model = ScriptedModel(itertools.repeat("ok"), max_requests=3)
        requests = [_request(f"q{i}") for i in range(10)]
        for request in requests[:5]:
            await model.generate(request)
        for request in requests[5:]:
            await _stream(model, request)
        assert model.requests == requests[-3:]
        assert model.requests[-1] is requests[-1] and len(model.requests) == 3
        assert [r.messages[0].text for r in model.requests] == ["q7", "q8", "q9"]
        assert model.calls == 10

    async def test_default_bound_and_unbounded(self) -> None:
        bounded = ScriptedModel(itertools.repeat("ok"))
        unbounded = ScriptedModel(itertools.repeat("ok"), max_requests=None)
        for _ in range(1005):
            await bounded.generate(ModelRequest())
            await unbounded.generate(ModelRequest())
        assert (len(bounded.requests), bounded.calls) == (1000, 1005)
        assert len(unbounded.requests) == 1005

    async def test_zero_keeps_nothing(self) -> None:
        model = ScriptedModel(["a"], max_requests=0)
        await model.generate(ModelRequest())
        assert (model.requests, model.calls) == ([], 1)

    @pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
    def test_invalid_bound_is_a_config_error(self, bad: object) -> None:
        with pytest.raises(ConfigError, match="max_requests must be None or a non-negative integer"):
            ScriptedModel([], max_requests=bad)  # type: ignore[arg-type]
