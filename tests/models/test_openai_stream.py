"""OpenAIChatModel.stream against a real local HTTP server streaming as the OpenAI API does (SSE, chunked)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, cast

import anyio
import httpx
import pytest
from tests._openai_server import FakeOpenAI, StreamScript

from threadmind._results import Usage
from threadmind.codecs import Message
from threadmind.errors import ModelError
from threadmind.models import (
    ModelChunk,
    ModelRequest,
    ModelResponse,
    OpenAIChatModel,
    ToolCall,
    ToolInputDelta,
    _openai,
    stream_model,
)
from threadmind.models._stream import collect_response

KEY = "sk-test-secret-0123456789"
REQUEST = ModelRequest(system=["Be brief."], messages=[Message.user("What's the weather in Paris?")])
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake"}


def _model(server: FakeOpenAI, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", api_key=KEY, base_url=server.url, **kwargs)


def _event(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def _usage_event(prompt: int, completion: int) -> dict[str, Any]:
    return {**BASE, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                             "total_tokens": prompt + completion}}


ROLE = _event({"role": "assistant", "content": ""})


async def _chunks(model: OpenAIChatModel, request: ModelRequest = REQUEST) -> list[ModelChunk]:
    async with aclosing(model.stream(request)) as chunks:
        return [chunk async for chunk in chunks]


async def _until_error(model: OpenAIChatModel) -> tuple[list[ModelChunk], ModelError]:
    received: list[ModelChunk] = []
    with pytest.raises(ModelError) as info:
        async with aclosing(model.stream(REQUEST)) as chunks:
            async for chunk in chunks:
                received.append(chunk)
    return received, info.value


def _refusal() -> dict[str, Any]:
    body = FakeOpenAI.completion(None)
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    return body


COMPLETIONS = [
    pytest.param(FakeOpenAI.completion("Hello  big\nworld, héllo 🌍!"), id="text"),
    pytest.param(FakeOpenAI.completion("It is sunny.", reasoning="Look it up, then answer."), id="reasoning"),
    pytest.param(FakeOpenAI.completion(tool_calls=[("call_1", "weather", {"city": "Paris", "days": [1, 2]}),
                                                   ("call_2", "broken", "{not json"), ("call_3", "noargs", "")],
                                       usage=(11, 7)), id="tool-calls"),
    pytest.param(FakeOpenAI.completion("Let me check.", tool_calls=[("c1", "weather", {"city": "Oslo"})]),
                 id="text-and-call"),
    pytest.param(FakeOpenAI.completion("cut", finish_reason="length", usage=None), id="length-no-usage"),
    pytest.param(_refusal(), id="refusal"),
]


class TestStreamRequest:
    async def test_asks_for_a_stream_with_usage(self, fake_openai: FakeOpenAI) -> None:
        async with _model(fake_openai) as model:
            await model.generate(REQUEST)
            await _chunks(model)
        plain, streamed = fake_openai.requests
        assert streamed.body.pop("stream") is True
        assert streamed.body.pop("stream_options") == {"include_usage": True}
        assert streamed.body == plain.body
        assert streamed.headers["accept"] == "text/event-stream"
        assert streamed.headers["authorization"] == f"Bearer {KEY}"


class TestStreamParsing:
    async def test_text_reasoning_and_usage_as_they_arrive(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_chat(FakeOpenAI.completion("Hello  big\nworld", reasoning="Think first.",
                                                      usage=(12, 4)))
        async with _model(fake_openai) as model:
            chunks = await _chunks(model)
        assert chunks == [
            ModelChunk(reasoning="Think "), ModelChunk(reasoning="first."),
            ModelChunk(text="Hello  "), ModelChunk(text="big\n"), ModelChunk(text="world"),
            ModelChunk(finish_reason="stop", usage=Usage(tokens=16, input_tokens=12, output_tokens=4)),
        ]

    async def test_tool_call_arguments_stream_by_index_then_the_complete_calls(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_chat(FakeOpenAI.completion(
            tool_calls=[("call_1", "weather", {"city": "Paris"}), ("call_2", "clock", "")], usage=(5, 9)))
        async with _model(fake_openai) as model:
            chunks = await _chunks(model)
        args = json.dumps({"city": "Paris"})
        pieces = [args[i:i + 4] for i in range(0, len(args), 4)]
        assert chunks == [
            ModelChunk(tool_input=ToolInputDelta("call_1", "weather", "")),
            *(ModelChunk(tool_input=ToolInputDelta("call_1", "weather", piece)) for piece in pieces),
            ModelChunk(tool_input=ToolInputDelta("call_2", "clock", "")),
            ModelChunk(tool_call=ToolCall("call_1", "weather", {"city": "Paris"})),
            ModelChunk(tool_call=ToolCall("call_2", "clock", {})),
            ModelChunk(finish_reason="tool_calls", usage=Usage(tokens=14, input_tokens=5, output_tokens=9)),
        ]
        assert "".join(c.tool_input.delta for c in chunks if c.tool_input and c.tool_input.tool_call_id == "call_1") \
            == args

    async def test_interleaved_calls_a_missing_id_and_a_call_sent_whole(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([
            ROLE,
            _event({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": '{"x":'}}]}),
            _event({"tool_calls": [{"index": 1, "id": "c_b", "function": {"name": "b", "arguments": '{"y": 2}'}}]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
            _event({}, "tool_calls"),
            "[DONE]",
        ])
        async with _model(fake_openai) as model:
            chunks = await _chunks(model)
        opened = chunks[0].tool_input
        assert opened is not None and opened.tool_name == "a" and opened.delta == '{"x":'
        generated_id = opened.tool_call_id
        assert generated_id.startswith("call_")
        assert chunks[1:] == [
            ModelChunk(tool_input=ToolInputDelta("c_b", "b", '{"y": 2}')),
            ModelChunk(tool_input=ToolInputDelta(generated_id, "a", " 1}")),
            ModelChunk(tool_call=ToolCall(generated_id, "a", {"x": 1})),
            ModelChunk(tool_call=ToolCall("c_b", "b", {"y": 2})),
            ModelChunk(finish_reason="tool_calls"),
        ]

    @pytest.mark.parametrize("completion", COMPLETIONS)
    async def test_stream_and_generate_give_equal_responses(self, fake_openai: FakeOpenAI,
                                                            completion: dict[str, Any]) -> None:
        fake_openai.script_chat(completion, completion, completion)
        async with _model(fake_openai) as model:
            generated = await model.generate(REQUEST)
            assert await collect_response(model.stream(REQUEST)) == generated
            assert await collect_response(stream_model(model, REQUEST)) == generated
        assert generated.text or generated.tool_calls

    @pytest.mark.parametrize(("write_size", "line_ending"), [
        pytest.param(1, "\r\n", id="byte-by-byte-crlf"), pytest.param(5, "\n", id="five-bytes-lf"),
    ])
    async def test_events_split_across_any_write(self, fake_openai: FakeOpenAI, write_size: int,
                                                 line_ending: str) -> None:
        completion = FakeOpenAI.completion("héllo 🌍 wörld", reasoning="ü",
                                           tool_calls=[("c1", "t", {"s": "ß"})])
        fake_openai.script_chat(completion)
        fake_openai.script_stream(StreamScript(FakeOpenAI.stream_events(completion), write_size=write_size,
                                               line_ending=line_ending))
        async with _model(fake_openai) as model:
            generated = await model.generate(REQUEST)
            assert await collect_response(model.stream(REQUEST)) == generated
        assert generated.text == "héllo 🌍 wörld"

    async def test_comments_raw_line_separators_and_usage_nulls(self, fake_openai: FakeOpenAI) -> None:
        raw = json.dumps(_event({"content": "a\u2028b"}) | {"usage": None}, ensure_ascii=False)
        fake_openai.script_stream([
            b": OPENROUTER PROCESSING\n\n",
            ROLE | {"usage": None},
            b"event: message\nid: 1\ndata: " + raw.encode() + b"\n\n",
            _event({}, "stop") | {"usage": None},
            _usage_event(2, 3),
            "[DONE]",
        ])
        async with _model(fake_openai) as model:
            assert await _chunks(model) == [
                ModelChunk(text="a\u2028b"),
                ModelChunk(finish_reason="stop", usage=Usage(tokens=5, input_tokens=2, output_tokens=3)),
            ]

    async def test_reasoning_field_of_other_servers(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"reasoning": "hmm"}), _event({"content": "ok"}, "stop"), "[DONE]"])
        async with _model(fake_openai) as model:
            assert await collect_response(model.stream(REQUEST)) == ModelResponse(text="ok", reasoning="hmm")

    async def test_a_body_that_ends_after_the_finish_without_done(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"content": "fine"}), _event({}, "stop"), _usage_event(1, 1)])
        async with _model(fake_openai) as model:
            assert await collect_response(model.stream(REQUEST)) == ModelResponse(
                text="fine", usage=Usage(tokens=2, input_tokens=1, output_tokens=1))

    async def test_consecutive_streams_share_one_connection(self, fake_openai: FakeOpenAI) -> None:
        async with _model(fake_openai) as model:
            for _ in range(3):
                assert (await collect_response(model.stream(REQUEST))).text == "ok"
            await model.generate(REQUEST)
        assert len({r.client for r in fake_openai.requests}) == 1

    async def test_events_after_done_are_ignored(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"content": "kept"}, "stop"), "[DONE]", _event({"content": "late"})])
        async with _model(fake_openai) as model:
            assert await _chunks(model) == [ModelChunk(text="kept"), ModelChunk(finish_reason="stop")]

    async def test_a_body_left_open_after_done_ends_the_stream_anyway(
        self, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_openai, "_DRAIN_SECONDS", 0.01)
        [stream] = fake_openai.script_stream(StreamScript([ROLE, _event({"content": "x"}, "stop"), "[DONE]", ROLE],
                                                          pause_after=3))
        async with _model(fake_openai) as model:
            assert await _chunks(model) == [ModelChunk(text="x"), ModelChunk(finish_reason="stop")]
            assert not stream.finished.is_set()  # the server still holds the body open
        stream.resume.set()

    async def test_a_server_answering_with_a_whole_completion(self, fake_openai: FakeOpenAI) -> None:
        completion = FakeOpenAI.completion("not streamed", tool_calls=[("c1", "t", {})])
        fake_openai.fail_next(200, body=completion)
        fake_openai.script_chat(completion)
        async with _model(fake_openai) as model:
            chunks = await _chunks(model)
            assert await collect_response(chunks) == await model.generate(REQUEST)
        assert chunks[0] == ModelChunk(text="not streamed")


class TestStreamFailures:
    async def test_a_connection_dropped_mid_stream_is_a_clear_model_error(self, fake_openai: FakeOpenAI,
                                                                           sleeps: list[float]) -> None:
        completion = FakeOpenAI.completion("one two three four five")
        fake_openai.script_stream(StreamScript(FakeOpenAI.stream_events(completion), drop_after=3))
        async with _model(fake_openai) as model:
            received, error = await _until_error(model)
        assert received == [ModelChunk(text="one "), ModelChunk(text="two ")]
        assert error.code == "THREADMIND_MODEL_STREAM_INTERRUPTED"
        assert "chat completion stream (gpt-test)" in str(error) and "cut off after 3 event(s)" in str(error)
        assert isinstance(error.__cause__, httpx.RemoteProtocolError)
        assert len(fake_openai.requests) == 1 and sleeps == []  # nothing is retried once the body is read

    async def test_a_connection_dropped_before_the_first_event(self, fake_openai: FakeOpenAI,
                                                                sleeps: list[float]) -> None:
        fake_openai.script_stream(StreamScript([ROLE], drop_after=0))
        async with _model(fake_openai) as model:
            received, error = await _until_error(model)
        assert received == [] and error.code == "THREADMIND_MODEL_STREAM_INTERRUPTED"
        assert len(fake_openai.requests) == 1

    async def test_a_body_that_ends_before_the_finish(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"content": "half"})])
        async with _model(fake_openai) as model:
            received, error = await _until_error(model)
        assert received == [ModelChunk(text="half")]
        assert error.code == "THREADMIND_MODEL_STREAM_INTERRUPTED"
        assert "ended after 2 event(s) without a finish reason" in str(error)

    async def test_a_malformed_event(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"content": "ok"}), b"data: {not json\n\n", "[DONE]"])
        async with _model(fake_openai) as model:
            received, error = await _until_error(model)
        assert received == [ModelChunk(text="ok")]
        assert error.code == "THREADMIND_MODEL_BAD_RESPONSE"
        assert "malformed event" in str(error) and "{not json" in str(error)

    async def test_an_error_event_keeps_the_key_out(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, {"error": {"message": f"overloaded for key {KEY}", "type": "server"}}])
        async with _model(fake_openai) as model:
            _, error = await _until_error(model)
        assert error.code == "THREADMIND_MODEL_STREAM_ERROR"
        assert "overloaded for key [redacted]" in str(error) and KEY not in str(error)

    async def test_a_tool_call_without_a_name(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_stream([ROLE, _event({"tool_calls": [{"index": 0, "id": "c1",
                                                                 "function": {"arguments": "{}"}}]}, "tool_calls")])
        async with _model(fake_openai) as model:
            _, error = await _until_error(model)
        assert error.code == "THREADMIND_MODEL_BAD_RESPONSE" and "without a function name" in str(error)

    async def test_http_errors_are_mapped_as_generate_does(self, fake_openai: FakeOpenAI,
                                                           sleeps: list[float]) -> None:
        fake_openai.fail_next(400, body={"error": {"message": "Invalid 'messages[0].role'"}})
        async with _model(fake_openai) as model:
            with pytest.raises(ModelError, match=r"HTTP 400: Invalid 'messages\[0\].role'") as info:
                await _chunks(model)
        assert info.value.code == "THREADMIND_MODEL_HTTP_ERROR"
        assert len(fake_openai.requests) == 1 and sleeps == []

    async def test_retryable_statuses_are_retried_before_the_body(self, fake_openai: FakeOpenAI,
                                                                  sleeps: list[float]) -> None:
        fake_openai.fail_next(429, 2, retry_after="0.25")
        fake_openai.script_chat("after waiting")
        async with _model(fake_openai) as model:
            assert (await collect_response(model.stream(REQUEST))).text == "after waiting"
        assert sleeps == [0.25, 0.25] and len(fake_openai.requests) == 3

    async def test_retries_run_out(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(503, 5)
        async with _model(fake_openai, max_retries=1) as model:
            with pytest.raises(ModelError, match="HTTP 503 after 2 attempts") as info:
                await _chunks(model)
        assert info.value.code == "THREADMIND_MODEL_HTTP_RETRIES_EXHAUSTED"

    async def test_a_closed_model(self, fake_openai: FakeOpenAI) -> None:
        model = _model(fake_openai)
        await model.aclose()
        with pytest.raises(ModelError, match="closed") as info:
            await _chunks(model)
        assert info.value.code == "THREADMIND_MODEL_CLOSED"


def _long_stream() -> StreamScript:
    """A first text delta, then (once resumed) hundreds more, each written and flushed on its own."""
    events: list[dict[str, Any] | str | bytes] = [ROLE, _event({"content": "Hello"})]
    events += [_event({"content": f" word{i}"}) for i in range(500)]
    events += [_event({}, "stop"), "[DONE]"]
    return StreamScript(events, pause_after=2)


class _RecordingTransport(httpx.AsyncBaseTransport):
    """A real HTTP transport that records when each response body is closed."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.closed: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = cast(httpx.AsyncByteStream, response.stream)
        closed = self.closed

        class Recorded(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for piece in body:
                    yield piece

            async def aclose(self) -> None:
                closed.append(request.url.path)
                await body.aclose()

        return httpx.Response(response.status_code, headers=response.headers, stream=Recorded(),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


class TestConsumerStopsEarly:
    async def _assert_server_saw_the_close(self, stream: StreamScript) -> None:
        stream.resume.set()
        assert await anyio.to_thread.run_sync(stream.disconnected.wait, 10), "the server kept sending"
        assert stream.finished.is_set()
        assert stream.sent < len(stream.events) - 2

    async def test_breaking_out_closes_the_connection(self, fake_openai: FakeOpenAI) -> None:
        [stream] = fake_openai.script_stream(_long_stream())
        async with _model(fake_openai) as model:
            async with aclosing(model.stream(REQUEST)) as chunks:
                async for chunk in chunks:
                    assert chunk == ModelChunk(text="Hello")
                    break
            await self._assert_server_saw_the_close(stream)
            assert (await model.generate(REQUEST)).text == "ok"  # the model stays usable

    async def test_the_response_is_closed_before_aclose_returns(self, fake_openai: FakeOpenAI) -> None:
        [stream] = fake_openai.script_stream(_long_stream())
        transport = _RecordingTransport()
        async with httpx.AsyncClient(transport=transport) as client:
            model = _model(fake_openai, client=client)
            async with aclosing(model.stream(REQUEST)) as chunks:
                async for _ in chunks:
                    break
                assert transport.closed == []
            assert transport.closed == ["/v1/chat/completions"]  # at once, not when garbage is collected
            await self._assert_server_saw_the_close(stream)

    async def test_cancelling_the_consumer_closes_the_connection(self, fake_openai: FakeOpenAI) -> None:
        [stream] = fake_openai.script_stream(_long_stream())
        received: list[str] = []
        async with _model(fake_openai) as model:
            with anyio.CancelScope() as scope:
                async with aclosing(stream_model(model, REQUEST)) as chunks:
                    async for chunk in chunks:
                        received.append(chunk.text)
                        scope.cancel()
            assert scope.cancelled_caught and received == ["Hello"]
            await self._assert_server_saw_the_close(stream)
            assert (await collect_response(model.stream(REQUEST))).text == "ok"

    async def test_a_consumer_cancelled_while_waiting_for_the_next_event(self, fake_openai: FakeOpenAI) -> None:
        [stream] = fake_openai.script_stream(_long_stream())
        first = anyio.Event()
        async with _model(fake_openai) as model:
            async with anyio.create_task_group() as tg:

                async def consume() -> None:
                    async with aclosing(model.stream(REQUEST)) as chunks:
                        async for _ in chunks:
                            first.set()

                tg.start_soon(consume)
                await first.wait()
                await anyio.wait_all_tasks_blocked()  # the consumer is parked reading the socket
                tg.cancel_scope.cancel()
            await self._assert_server_saw_the_close(stream)
