"""An Agent with memory over OpenAIChatModel against the fake OpenAI-compatible server, end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._openai_server import FakeOpenAI

from threadmind.agent import Agent, Tool
from threadmind.models import OpenAIChatModel

from ._support import RESOURCE, THREAD, open_memory, stored, texts


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
