"""OpenAIChatModel against a real local HTTP server: the exact JSON sent, response parsing, retries, errors."""

from __future__ import annotations

import gc
import socket
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anyio
import httpx
import pytest
from tests._factories import msg
from tests._openai_server import FakeOpenAI

from threadmind._results import Usage
from threadmind.codecs import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
)
from threadmind.errors import ConfigError, ModelError
from threadmind.models import (
    LanguageModel,
    ModelRequest,
    ModelResponse,
    OpenAIChatModel,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    resolve_model,
)
from threadmind.models._http import RetryPolicy

KEY = "sk-test-secret-0123456789"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _msg(role: Role, *parts: Part, content: str | None = None) -> Message:
    return msg(role, *parts, id=f"m-{role}-{len(parts)}", at=T0, text=content, thread_id=None, resource_id=None)


def _inv(state: Any, call_id: str, name: str, args: Any = None, **extra: Any) -> ToolInvocationPart:
    return ToolInvocationPart(tool_invocation=ToolInvocation(state=state, tool_call_id=call_id, tool_name=name,
                                                             args=args, **extra))


def _model(server: FakeOpenAI, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", api_key=KEY, base_url=server.url, **kwargs)


class TestRequestConversion:
    async def test_exact_json_sent_for_a_full_conversation(self, fake_openai: FakeOpenAI) -> None:
        conversation = [
            Message.user("What's the weather in Paris?", created_at=T0),
            _msg(
                "assistant",
                StepStartPart(),
                TextPart(text="Let me check."),
                _inv("result", "c1", "weather", {"city": "Paris"}, result={"temp": 21}),
                ReasoningPart(reasoning="not sent"),
                StepStartPart(),
                TextPart(text="It is 21°C."),
            ),
            _msg("assistant", _inv("output-error", "c2", "forecast", {"days": 3}, error_text="upstream timeout"),
                 _inv("result", "c3", "echo", {"s": "x"}, result="plain text result")),
            _msg("assistant", TextPart(text="Deleting now."), _inv("call", "c4", "delete_all", {})),
            _msg("user", TextPart(text="What is in these pictures?"),
                 FilePart(data="iVBORw0KGgo=", mime_type="image/png"),
                 FilePart(data="https://example.com/cat.jpg", media_type="image/jpeg"),
                 FilePart(data="JVBERi0=", mime_type="application/pdf")),
            _msg("signal", TextPart(text="bookkeeping")),
        ]
        tools = [ToolSpec(name="weather", description="Current weather",
                          parameters={"type": "object", "properties": {"city": {"type": "string"}}}),
                 ToolSpec(name="noop", parameters={"type": "object", "properties": {}})]
        async with _model(fake_openai) as model:
            await model.generate(ModelRequest(system=["You are helpful.", "Be brief."], messages=conversation,
                                              tools=tools))
        [sent] = fake_openai.requests
        assert sent.path == "/v1/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.headers["content-type"] == "application/json"
        assert sent.body == {
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are helpful."},
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": "Let me check.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp":21}'},
                {"role": "assistant", "content": "It is 21°C."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c2", "type": "function", "function": {"name": "forecast", "arguments": '{"days":3}'}},
                    {"id": "c3", "type": "function", "function": {"name": "echo", "arguments": '{"s":"x"}'}},
                ]},
                {"role": "tool", "tool_call_id": "c2", "content": "upstream timeout"},
                {"role": "tool", "tool_call_id": "c3", "content": "plain text result"},
                {"role": "assistant", "content": "Deleting now."},  # the pending call c4 is left out
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in these pictures?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                ]},
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "weather", "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
            ],
        }

    async def test_text_after_a_tool_call_starts_a_new_step_without_step_start(self, fake_openai: FakeOpenAI) -> None:
        message = _msg("assistant", _inv("result", "c1", "t", None, result=[1, 2]), TextPart(text="done"),
                       _inv("output-denied", "c2", "t", {"a": 1}, approval={"id": "x", "reason": "not allowed"}))
        async with _model(fake_openai) as model:
            await model.generate(ModelRequest(messages=[message]))
        assert fake_openai.requests[0].body["messages"] == [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "[1,2]"},
            {"role": "assistant", "content": "done", "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "t", "arguments": '{"a":1}'}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "Tool execution denied: not allowed"},
        ]
        assert "tools" not in fake_openai.requests[0].body

    async def test_content_only_messages_and_system_role(self, fake_openai: FakeOpenAI) -> None:
        messages = [_msg("user", content="from content"), _msg("system", TextPart(text="inline system")),
                    _msg("assistant", content="legacy text"), _msg("user")]
        async with _model(fake_openai) as model:
            await model.generate(ModelRequest(messages=messages))
        assert fake_openai.requests[0].body["messages"] == [
            {"role": "user", "content": "from content"},
            {"role": "system", "content": "inline system"},
            {"role": "assistant", "content": "legacy text"},
        ]


class TestResponseParsing:
    async def test_text_finish_reason_and_usage(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_chat(FakeOpenAI.completion("Hello there", finish_reason="length", usage=(12, 4)))
        async with _model(fake_openai) as model:
            response = await model.generate(ModelRequest(messages=[Message.user("hi")]))
        assert response == ModelResponse(text="Hello there", finish_reason="length",
                                         usage=Usage(tokens=16, input_tokens=12, output_tokens=4))

    async def test_tool_calls_with_valid_invalid_and_empty_arguments(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.script_chat(FakeOpenAI.completion(
            tool_calls=[("call_1", "weather", {"city": "Paris"}), ("call_2", "broken", "{not json"),
                        ("call_3", "noargs", "")], usage=(11, 7)))
        async with _model(fake_openai) as model:
            response = await model.generate(ModelRequest(messages=[Message.user("weather?")]))
        assert response == ModelResponse(
            text=None,
            tool_calls=[ToolCall("call_1", "weather", {"city": "Paris"}), ToolCall("call_2", "broken", "{not json"),
                        ToolCall("call_3", "noargs", {})],
            finish_reason="tool_calls",
            usage=Usage(tokens=18, input_tokens=11, output_tokens=7),
        )

    async def test_missing_usage_and_finish_reason(self, fake_openai: FakeOpenAI) -> None:
        body = FakeOpenAI.completion("x", usage=None)
        body["choices"][0]["finish_reason"] = None
        fake_openai.script_chat(body)
        async with _model(fake_openai) as model:
            response = await model.generate(ModelRequest())
        assert (response.text, response.finish_reason, response.usage) == ("x", "stop", None)

    @pytest.mark.parametrize("body", [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"choices": []}', id="no-choices"),
        pytest.param(b'{"choices": [{"message": {"tool_calls": [{"id": 1}]}}]}', id="bad-tool-call"),
    ])
    async def test_malformed_body_is_a_model_error(self, fake_openai: FakeOpenAI, body: bytes) -> None:
        fake_openai.fail_next(200, body=body)
        async with _model(fake_openai) as model:
            with pytest.raises(ModelError) as info:
                await model.generate(ModelRequest())
        assert info.value.code == "THREADMIND_MODEL_BAD_RESPONSE"

    async def test_concurrent_calls_share_one_client(self, fake_openai: FakeOpenAI) -> None:
        results: list[str | None] = []
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=16)) as client:
            model = _model(fake_openai, client=client)

            async def ask(i: int) -> None:
                results.append((await model.generate(ModelRequest(messages=[Message.user(f"q{i}")]))).text)

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(ask, i)
            await model.aclose()
        assert results == ["ok"] * 100
        assert sorted(r.body["messages"][0]["content"] for r in fake_openai.requests) == sorted(
            f"q{i}" for i in range(100))


class TestRetries:
    async def test_429_honours_retry_after_then_succeeds(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(429, 2, retry_after="1.5")
        fake_openai.script_chat("finally")
        async with _model(fake_openai) as model:
            response = await model.generate(ModelRequest())
        assert response.text == "finally"
        assert sleeps == [1.5, 1.5]
        assert len(fake_openai.requests) == 3

    async def test_retry_after_is_bounded(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(429, 1, retry_after="3600")
        async with _model(fake_openai) as model:
            await model.generate(ModelRequest())
        assert sleeps == [RetryPolicy().max_retry_after]

    async def test_500_backs_off_then_succeeds(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(500, 2)
        async with _model(fake_openai) as model:
            assert (await model.generate(ModelRequest())).text == "ok"
        assert len(sleeps) == 2
        assert 0.375 <= sleeps[0] <= 0.5 and 0.75 <= sleeps[1] <= 1.0  # 0.5 s doubling, minus ≤ 25 % jitter

    async def test_model_error_after_exhausting_retries(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(503, 10)
        async with _model(fake_openai, max_retries=2) as model:
            with pytest.raises(ModelError) as info:
                await model.generate(ModelRequest())
        message = str(info.value)
        assert "HTTP 503 after 3 attempts" in message and "fake failure 503" in message
        assert info.value.code == "THREADMIND_MODEL_HTTP_RETRIES_EXHAUSTED"
        assert len(fake_openai.requests) == 3 and len(sleeps) == 2

    async def test_400_fails_at_once(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(400, body={"error": {"message": "Invalid 'messages[0].role'"}})
        async with _model(fake_openai) as model:
            with pytest.raises(ModelError, match=r"HTTP 400: Invalid 'messages\[0\].role'") as info:
                await model.generate(ModelRequest())
        assert info.value.code == "THREADMIND_MODEL_HTTP_ERROR"
        assert len(fake_openai.requests) == 1 and sleeps == []

    async def test_api_key_never_in_errors_or_reprs(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(401, body={"error": {"message": f"Incorrect API key provided: {KEY}."}})
        async with _model(fake_openai) as model:
            with pytest.raises(ModelError) as info:
                await model.generate(ModelRequest())
            texts = [str(info.value), repr(info.value), repr(model), str(vars(model))]
        assert "[redacted]" in str(info.value)
        assert all(KEY not in text for text in texts)

    async def test_connection_errors_retry_then_fail(self, sleeps: list[float]) -> None:
        with socket.socket() as sock:  # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        async with OpenAIChatModel("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1) as model:
            with pytest.raises(ModelError) as info:
                await model.generate(ModelRequest())
        assert info.value.code == "THREADMIND_MODEL_CONNECTION_FAILED"
        assert isinstance(info.value.__cause__, httpx.ConnectError)
        assert len(sleeps) == 1 and KEY not in str(info.value)

    def test_retry_after_http_date_and_ms(self) -> None:
        policy = RetryPolicy()
        soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
        assert 25 <= policy.delay_for(0, httpx.Headers({"Retry-After": soon})) <= 30
        assert policy.delay_for(0, httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"})) == 0.25
        assert 0.375 <= policy.delay_for(0, httpx.Headers({"Retry-After": "soon-ish"})) <= 0.5
        assert policy.backoff(10) <= policy.max_delay


class TestLifecycleAndConfig:
    async def test_given_client_is_used_and_left_open(self, fake_openai: FakeOpenAI) -> None:
        async with httpx.AsyncClient(headers={"x-tenant": "acme"}) as client:
            model = _model(fake_openai, client=client)
            await model.generate(ModelRequest())
            await model.aclose()
            assert not client.is_closed
            with pytest.raises(ModelError, match="closed") as info:
                await model.generate(ModelRequest())
            assert info.value.code == "THREADMIND_MODEL_CLOSED"
        assert fake_openai.requests[0].headers["x-tenant"] == "acme"

    async def test_unclosed_model_warns(self, fake_openai: FakeOpenAI) -> None:
        model = _model(fake_openai)
        await model.generate(ModelRequest())
        client = model._http._client
        assert client is not None
        with pytest.warns(ResourceWarning, match="OpenAIChatModel was never closed"):
            del model
            gc.collect()
        await client.aclose()

    async def test_environment_fallbacks(self, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url + "/")
        async with OpenAIChatModel("gpt-env") as model:
            await model.generate(ModelRequest())
            assert model.base_url == fake_openai.url
        assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-from-env"
        assert fake_openai.requests[0].body["model"] == "gpt-env"

    async def test_openai_without_key_is_a_config_error_at_the_first_request(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The router string builds a model without a key (hermetic construction); a request needs one and
        fails before anything is sent (no server listens here, so a sent request would fail otherwise)."""
        from threadmind.embedders import OpenAIEmbedder
        from threadmind.models import resolve_model

        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        model = resolve_model("openai/gpt-4o-mini")
        assert isinstance(model, OpenAIChatModel) and model.model_id == "openai/gpt-4o-mini"
        async with model:
            with pytest.raises(ConfigError, match="OPENAI_API_KEY") as info:
                await model.generate(ModelRequest())
        assert info.value.code == "THREADMIND_MISSING_API_KEY"
        async with OpenAIEmbedder() as embedder:
            assert embedder.dimension == 1536
            with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
                await embedder.embed(["hello"])

    async def test_local_server_needs_no_key(self, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        async with OpenAIChatModel("llama", base_url=fake_openai.url) as model:
            await model.generate(ModelRequest())
        assert "authorization" not in fake_openai.requests[0].headers

    @pytest.mark.parametrize("kwargs", [
        pytest.param({"max_retries": -1}, id="negative-retries"),
        pytest.param({"timeout": 0}, id="zero-timeout"),
        pytest.param({"base_url": "ftp://x"}, id="bad-scheme"),
    ])
    def test_invalid_arguments(self, kwargs: dict[str, Any]) -> None:
        kwargs.setdefault("base_url", "http://127.0.0.1:1/v1")
        with pytest.raises(ConfigError):
            OpenAIChatModel("m", api_key=KEY, **kwargs)

    def test_missing_httpx_gives_install_hint(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "httpx", None)
        with pytest.raises(ConfigError, match=r"pip install 'threadmind\[openai\]'"):
            OpenAIChatModel("m", api_key=KEY)

    def test_repr_and_model_id(self) -> None:
        model = OpenAIChatModel("gpt-4o", api_key=KEY, base_url="https://user:pw@llm.example/v1")
        assert model.model_id == "openai/gpt-4o"
        assert repr(model) == "OpenAIChatModel(model='gpt-4o', base_url='https://llm.example/v1')"
        assert isinstance(model, LanguageModel)


class TestResolveModel:
    def test_openai_string(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        model = resolve_model("openai/gpt-4o-mini")
        assert isinstance(model, OpenAIChatModel)
        assert (model.model, model.model_id) == ("gpt-4o-mini", "openai/gpt-4o-mini")

    def test_model_objects_pass_through(self) -> None:
        scripted = ScriptedModel([])
        assert resolve_model(scripted) is scripted

    @pytest.mark.parametrize("spec", [
        pytest.param("anthropic/claude-3-5-sonnet", id="unknown-provider"),
        pytest.param("gpt-4o", id="no-provider"),
        pytest.param("openai/", id="no-model"),
    ])
    def test_bad_strings(self, spec: str) -> None:
        with pytest.raises(ConfigError, match="'openai/<model>'"):
            resolve_model(spec)

    def test_other_objects(self) -> None:
        with pytest.raises(ConfigError, match="not int"):
            resolve_model(42)  # type: ignore[arg-type]
