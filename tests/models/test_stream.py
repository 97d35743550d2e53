"""stream_model and collect_response over user-written models: with and without ``stream``, failing, closed early."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from threadmind._results import Usage
from threadmind.errors import ConfigError, ModelError, TripWire
from threadmind.models import (
    LanguageModel,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    OpenAIChatModel,
    ScriptedModel,
    StreamingLanguageModel,
    ToolCall,
    ToolInputDelta,
    stream_model,
)
from threadmind.models._stream import collect_response

USAGE = Usage(tokens=9, input_tokens=4, output_tokens=5)
FULL = ModelResponse(text="It is sunny.", tool_calls=[ToolCall("c1", "weather", {"city": "Paris"}),
                                                      ToolCall("c2", "clock", {})],
                     finish_reason="tool_calls", usage=USAGE, reasoning="Check the weather first.")


class GenerateOnly:
    """A model as a user writes it before streaming exists: ``model_id`` and ``generate``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.model_id = "generate-only"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await anyio.lowlevel.checkpoint()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]


class Streaming:
    """A model whose ``stream`` yields the given items, then raises ``fail`` if set; records its closing."""

    model_id = "streaming"

    def __init__(self, items: list[Any], fail: BaseException | None = None) -> None:
        self.items = items
        self.fail = fail
        self.closed = anyio.Event()
        self.yielded = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await collect_response(self.stream(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        try:
            for item in self.items:
                await anyio.lowlevel.checkpoint()
                self.yielded += 1
                yield item
            if self.fail is not None:
                raise self.fail
        finally:
            self.closed.set()


async def _all(model: LanguageModel, request: ModelRequest | None = None) -> list[ModelChunk]:
    async with aclosing(stream_model(model, request or ModelRequest())) as chunks:
        return [chunk async for chunk in chunks]


class TestProtocols:
    def test_streaming_is_optional(self) -> None:
        plain = GenerateOnly(ModelResponse())
        assert isinstance(plain, LanguageModel) and not isinstance(plain, StreamingLanguageModel)
        assert isinstance(Streaming([]), StreamingLanguageModel)
        assert isinstance(ScriptedModel([]), StreamingLanguageModel)
        assert isinstance(OpenAIChatModel("m", api_key="k", base_url="http://127.0.0.1:1/v1"), StreamingLanguageModel)

    def test_chunk_defaults_and_shape(self) -> None:
        chunk = ModelChunk()
        assert (chunk.text, chunk.reasoning, chunk.tool_call, chunk.finish_reason, chunk.usage, chunk.tool_input) == (
            "", "", None, None, None, None)
        assert ModelChunk("Hi").text == "Hi"
        with pytest.raises(AttributeError):
            chunk.text = "x"  # type: ignore[misc]
        delta = ToolInputDelta("c1", "weather", '{"ci')
        assert (delta.tool_call_id, delta.tool_name, delta.delta) == ("c1", "weather", '{"ci')

    def test_response_keeps_its_positional_fields(self) -> None:
        response = ModelResponse("text", [], "length", USAGE)
        assert (response.text, response.finish_reason, response.usage, response.reasoning) == (
            "text", "length", USAGE, None)


class TestModelWithoutStream:
    async def test_streamed_as_one_chunk_of_each_kind(self) -> None:
        assert await _all(GenerateOnly(FULL)) == [
            ModelChunk(reasoning="Check the weather first."),
            ModelChunk(text="It is sunny."),
            ModelChunk(tool_call=ToolCall("c1", "weather", {"city": "Paris"})),
            ModelChunk(tool_call=ToolCall("c2", "clock", {})),
            ModelChunk(finish_reason="tool_calls", usage=USAGE),
        ]

    async def test_text_only_is_a_text_chunk_and_a_finish_chunk(self) -> None:
        assert await _all(GenerateOnly(ModelResponse(text="hi"))) == [ModelChunk(text="hi"),
                                                                        ModelChunk(finish_reason="stop")]

    @pytest.mark.parametrize("response", [
        pytest.param(FULL, id="everything"),
        pytest.param(ModelResponse(text="plain"), id="text"),
        pytest.param(ModelResponse(finish_reason="length"), id="empty"),
        pytest.param(ModelResponse(tool_calls=[ToolCall("c", "t", "raw args")]), id="call-with-stop"),
    ])
    async def test_collected_stream_equals_generate(self, response: ModelResponse) -> None:
        model = GenerateOnly(response)
        assert await collect_response(stream_model(model, ModelRequest())) == await model.generate(ModelRequest())

    async def test_generate_failures_become_model_errors_with_the_cause(self) -> None:
        with pytest.raises(ModelError, match="model generate-only failed: RuntimeError: boom") as info:
            await _all(GenerateOnly(RuntimeError("boom")))
        assert isinstance(info.value.__cause__, RuntimeError)
        with pytest.raises(ModelError, match="failed: bad option") as info:
            await _all(GenerateOnly(ConfigError("bad option")))
        assert isinstance(info.value.__cause__, ConfigError)

    async def test_model_errors_and_tripwires_pass_unchanged(self) -> None:
        error = ModelError("provider down", code="X_DOWN")
        with pytest.raises(ModelError) as info:
            await _all(GenerateOnly(error))
        assert info.value is error
        with pytest.raises(TripWire, match="blocked"):
            await _all(GenerateOnly(TripWire("blocked")))

    async def test_a_wrong_return_type_is_a_model_error(self) -> None:
        with pytest.raises(ModelError, match="returned str, not ModelResponse"):
            await _all(GenerateOnly("just text"))


class TestModelWithStream:
    async def test_chunks_pass_through_unchanged(self) -> None:
        items = [ModelChunk(reasoning="hm"), ModelChunk(text="a"),
                 ModelChunk(tool_input=ToolInputDelta("c1", "t", "")),
                 ModelChunk(tool_input=ToolInputDelta("c1", "t", "{}")),
                 ModelChunk(tool_call=ToolCall("c1", "t", {})), ModelChunk(finish_reason="tool_calls", usage=USAGE)]
        assert await _all(Streaming(items)) == items

    @pytest.mark.parametrize(("items", "finish"), [
        pytest.param([ModelChunk(text="a")], "stop", id="text"),
        pytest.param([ModelChunk(tool_call=ToolCall("c", "t", {}))], "tool_calls", id="tool-call"),
        pytest.param([], "stop", id="nothing"),
    ])
    async def test_a_stream_without_finish_chunk_gets_one(self, items: list[ModelChunk], finish: str) -> None:
        assert await _all(Streaming(items)) == [*items, ModelChunk(finish_reason=finish)]

    async def test_an_exception_mid_stream_is_a_model_error_after_the_chunks_before_it(self) -> None:
        model = Streaming([ModelChunk(text="partial")], fail=ConnectionResetError("peer went away"))
        received: list[ModelChunk] = []
        with pytest.raises(ModelError, match="model streaming failed while streaming: ConnectionResetError") as info:
            async with aclosing(stream_model(model, ModelRequest())) as chunks:
                async for chunk in chunks:
                    received.append(chunk)
        assert received == [ModelChunk(text="partial")]
        assert isinstance(info.value.__cause__, ConnectionResetError)
        assert model.closed.is_set()

    async def test_model_errors_pass_unchanged(self) -> None:
        error = ModelError("quota", code="X_QUOTA")
        with pytest.raises(ModelError) as info:
            await _all(Streaming([], fail=error))
        assert info.value is error

    async def test_a_stream_that_fails_to_start_is_a_model_error(self) -> None:
        class Broken(GenerateOnly):
            def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
                raise ValueError("no stream today")

        with pytest.raises(ModelError, match="failed to start its stream: ValueError: no stream today"):
            await _all(Broken(ModelResponse()))

    async def test_a_coroutine_returning_an_iterator_is_accepted(self) -> None:
        inner = Streaming([ModelChunk(text="x")])

        class Indirect(GenerateOnly):
            async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
                return inner.stream(request)

        assert await _all(Indirect(ModelResponse())) == [ModelChunk(text="x"), ModelChunk(finish_reason="stop")]

    @pytest.mark.parametrize(("items", "match"), [
        pytest.param(["text"], "streamed a str; a stream yields ModelChunks", id="not-a-chunk"),
        pytest.param([ModelChunk(finish_reason="stop"), ModelChunk(text="late")], "after its finish chunk",
                     id="after-finish"),
    ])
    async def test_protocol_violations_are_model_errors(self, items: list[Any], match: str) -> None:
        model = Streaming(items)
        with pytest.raises(ModelError, match=match) as info:
            await _all(model)
        assert info.value.code == "THREADMIND_MODEL_BAD_RESPONSE"
        assert model.closed.is_set()

    async def test_breaking_out_closes_the_model_stream_at_once(self) -> None:
        model = Streaming([ModelChunk(text=str(i)) for i in range(100)])
        async with aclosing(stream_model(model, ModelRequest())) as chunks:
            async for chunk in chunks:
                assert chunk.text == "0"
                break
            assert not model.closed.is_set()
        assert model.closed.is_set()
        assert model.yielded == 1

    async def test_cancelling_the_consumer_closes_the_model_stream(self) -> None:
        model = Streaming([ModelChunk(text=str(i)) for i in range(100)])
        received: list[str] = []
        with anyio.CancelScope() as scope:
            async with aclosing(stream_model(model, ModelRequest())) as chunks:
                async for chunk in chunks:
                    received.append(chunk.text)
                    scope.cancel()
        assert scope.cancelled_caught
        assert received == ["0"] and model.closed.is_set() and model.yielded == 1


class TestCollectResponse:
    async def test_joins_deltas_and_keeps_the_last_finish_and_usage(self) -> None:
        later = Usage(tokens=12, input_tokens=4, output_tokens=8)
        chunks = [ModelChunk(reasoning="a "), ModelChunk(text="Hel"), ModelChunk(reasoning="b"),
                  ModelChunk(text="lo", usage=USAGE), ModelChunk(tool_input=ToolInputDelta("c1", "t", '{"x"')),
                  ModelChunk(tool_call=ToolCall("c1", "t", {"x": 1})), ModelChunk(finish_reason="length", usage=later)]
        assert await collect_response(chunks) == ModelResponse(
            text="Hello", tool_calls=[ToolCall("c1", "t", {"x": 1})], finish_reason="length", usage=later,
            reasoning="a b")

    async def test_defaults_without_a_finish_chunk(self) -> None:
        assert await collect_response([]) == ModelResponse()
        call = ToolCall("c1", "t", {})
        assert await collect_response([ModelChunk(tool_call=call)]) == ModelResponse(
            tool_calls=[call], finish_reason="tool_calls")

    async def test_closes_an_async_generator_and_lets_its_error_through(self) -> None:
        model = Streaming([ModelChunk(text="a")], fail=KeyError("inner"))
        with pytest.raises(KeyError):
            await collect_response(model.stream(ModelRequest()))
        assert model.closed.is_set()

    async def test_rejects_what_is_not_a_chunk(self) -> None:
        model = Streaming([ModelChunk(text="a"), 42, ModelChunk(text="b")])
        with pytest.raises(ModelError, match="collect_response got a int"):
            await collect_response(model.stream(ModelRequest()))
        assert model.closed.is_set() and model.yielded == 2
