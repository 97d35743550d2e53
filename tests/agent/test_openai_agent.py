"""An Agent with memory over OpenAIChatModel against the fake OpenAI-compatible server, end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import RESOURCE, THREAD, open_memory, stored, texts
from tests._openai_server import FakeOpenAI, StreamScript

from threadmind.agent import Agent, Tool
from threadmind.errors import ModelError
from threadmind.events import TextDeltaEvent, ToolInputDeltaEvent, ToolOutputAvailableEvent
from threadmind.models import OpenAIChatModel


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_two_turns_the_second_request_carries_the_first(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat("Nice to meet you, Ada.", "Your name is Ada.")
    async with open_memory(tmp_path) as memory, \
            OpenAIChatModel("gpt-test", api_key="sk-test", base_url=fake_openai.url) as model:
        agent = Agent("a", "You are helpful.", model, memory=memory)
        first = await agent.generate("Hi, I am Ada.", thread_id=THREAD, resource_id=RESOURCE)
        second = await agent.generate("What is my name?", thread_id=THREAD, resource_id=RESOURCE)
        assert (first.text, second.text) == ("Nice to meet you, Ada.", "Your name is Ada.")
        assert texts(await stored(memory)) == ["Hi, I am Ada.", "Nice to meet you, Ada.", "What is my name?",
                                               "Your name is Ada."]
    first_body, second_body = (r.body for r in fake_openai.requests_to("/chat/completions"))
    assert first_body["messages"] == [{"role": "system", "content": "You are helpful."},
                                      {"role": "user", "content": "Hi, I am Ada."}]
    assert second_body["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi, I am Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    assert second_body["model"] == "gpt-test"


async def test_server_tool_round_trip_over_http(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(FakeOpenAI.completion(tool_calls=[("call_1", "add", {"a": 2, "b": 3})]), "It is 5.")
    async with open_memory(tmp_path) as memory, \
            OpenAIChatModel("gpt-test", api_key="sk-test", base_url=fake_openai.url) as model:
        tool = Tool("add", "add two numbers", {"type": "object", "properties": {"a": {"type": "number"},
                                                                              "b": {"type": "number"}}},
                    execute=lambda args: args["a"] + args["b"])
        result = await Agent("a", "i", model, memory=memory, tools=[tool]).generate(
            "2+3?", thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "It is 5."
        assert result.usage is not None
    bodies = [r.body for r in fake_openai.requests_to("/chat/completions")]
    assert bodies[0]["tools"][0]["function"]["name"] == "add"
    assert bodies[1]["messages"][-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]


async def test_a_streamed_turn_over_http_with_tool_argument_deltas(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    first = FakeOpenAI.completion(tool_calls=[("call_1", "add", {"a": 2, "b": 3})])
    second = FakeOpenAI.completion("It is 5.")
    fake_openai.script_stream(FakeOpenAI.stream_events(first), FakeOpenAI.stream_events(second))
    async with open_memory(tmp_path) as memory, \
            OpenAIChatModel("gpt-test", api_key="sk-test", base_url=fake_openai.url) as model:
        tool = Tool("add", "add two numbers", {"type": "object"}, execute=lambda args: args["a"] + args["b"])
        stream = Agent("a", "i", model, memory=memory, tools=[tool]).stream(
            "2+3?", thread_id=THREAD, resource_id=RESOURCE)
        async with stream:
            events = [e async for e in stream]
        result = await stream.result()
        assert result.text == "It is 5." and result.usage is not None
        assert texts(await stored(memory)) == ["2+3?", "It is 5."]
    kinds = [e.type for e in events]
    assert kinds.index("tool-input-start") < kinds.index("tool-input-delta") < kinds.index("tool-input-available")
    deltas = "".join(e.input_text_delta for e in events if isinstance(e, ToolInputDeltaEvent))
    assert json.loads(deltas) == {"a": 2, "b": 3}
    assert ToolOutputAvailableEvent(tool_call_id="call_1", output=5) in events
    assert all(r.body["stream"] is True for r in fake_openai.requests_to("/chat/completions"))


async def test_a_connection_dropped_mid_stream_persists_nothing(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    completion = FakeOpenAI.completion("one two three four five")
    fake_openai.script_stream(StreamScript(FakeOpenAI.stream_events(completion), drop_after=3))
    fake_openai.script_chat("fine")
    async with open_memory(tmp_path) as memory, \
            OpenAIChatModel("gpt-test", api_key="sk-test", base_url=fake_openai.url) as model:
        agent = Agent("a", "i", model, memory=memory)
        stream = agent.stream("count", thread_id=THREAD, resource_id=RESOURCE)
        shown: list[str] = []
        with pytest.raises(ModelError) as caught:
            async with stream:
                async for event in stream:
                    if isinstance(event, TextDeltaEvent):
                        shown.append(event.delta)
        assert caught.value.code == "THREADMIND_MODEL_STREAM_INTERRUPTED"
        assert shown == ["one ", "two "]
        assert await stored(memory) == []
        assert (await agent.generate("again", thread_id=THREAD, resource_id=RESOURCE)).text == "fine"


async def test_a_consumer_that_stops_closes_the_http_stream_and_keeps_what_it_saw(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    events: list[dict[str, Any] | str | bytes] = FakeOpenAI.stream_events(FakeOpenAI.completion("Hello there"))
    third = events[2]
    assert isinstance(third, dict)
    long = events[:3] + [dict(third, choices=[{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}])
                         for i in range(300)] + events[3:]
    [script] = fake_openai.script_stream(StreamScript(long, pause_after=3))
    async with open_memory(tmp_path) as memory, \
            OpenAIChatModel("gpt-test", api_key="sk-test", base_url=fake_openai.url) as model:
        stream = Agent("a", "i", model, memory=memory).stream("hi", thread_id=THREAD, resource_id=RESOURCE)
        async with stream:
            async for event in stream:
                if isinstance(event, TextDeltaEvent) and event.delta == "there":
                    break
        script.resume.set()
        assert await anyio.to_thread.run_sync(script.disconnected.wait, 10), "the server kept sending"
        assert script.sent < len(long) - 2
        rows = await stored(memory)
    assert texts(rows) == ["hi", "Hello there"]
    assert (rows[1].content.metadata or {}).get("aborted") is True
