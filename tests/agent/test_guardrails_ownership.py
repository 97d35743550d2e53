"""Guardrail processors (TripWire → nothing persisted), thread ownership, input validation and the
processor lists memory contributes (reference §3.0)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests._factories import RESOURCE, THREAD, base_time, open_memory, seed, stored, text_msg, texts

from threadmind import Message
from threadmind.agent import Agent
from threadmind.codecs import TextPart
from threadmind.embedders import HashEmbedder
from threadmind.errors import ResourceMismatch, ValidationError
from threadmind.models import ScriptedModel
from threadmind.processors import MessageHistory
from threadmind.stores import HnswVectorStore


class _AbortInput:
    id = "no-input"

    async def process_input(self, args: Any) -> None:
        args.abort("no")


class _AbortOutput:
    id = "no-output"

    async def process_output_result(self, args: Any) -> None:
        args.abort("no")


class _Redact:
    id = "redact"

    async def process_output_result(self, args: Any) -> list[Message]:
        out = []
        for message in args.messages:
            parts = [msgspec.structs.replace(p, text=p.text.replace("secret", "[redacted]"))
                     if isinstance(p, TextPart) else p for p in message.content.parts]
            text = (message.content.content or "").replace("secret", "[redacted]")
            out.append(msgspec.structs.replace(message, content=msgspec.structs.replace(
                message.content, parts=parts, content=text)))
        return out


@pytest.mark.parametrize("where", ["input", "output"])
async def test_an_aborting_processor_persists_nothing(tmp_path: Path, where: str) -> None:
    t0 = base_time()
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", "before", id="u0", at=t0)])
        model = ScriptedModel(["answer"])
        kwargs: dict[str, Any] = ({"input_processors": [_AbortInput()]} if where == "input"
                                  else {"output_processors": [_AbortOutput()]})
        result = await Agent("a", "i", model, memory=memory, **kwargs).generate(
            "hello", thread_id=THREAD, resource_id=RESOURCE)
        assert result.tripwire is not None and result.tripwire.reason == "no"
        assert result.messages == [] and result.finish_reason == "tripwire"
        assert model.calls == (0 if where == "input" else 1)
        assert texts(await stored(memory)) == ["before"]


async def test_a_tripwire_raised_inside_a_tool_ends_the_run_and_persists_nothing(tmp_path: Path) -> None:
    from threadmind.agent import Tool
    from threadmind.errors import TripWire
    from threadmind.models import ModelResponse, ToolCall

    def refuse(args: Any) -> str:
        raise TripWire("tool refused")

    t0 = base_time()
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", "before", id="u0", at=t0)])
        model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "refuse", {})]), "never reached"])
        agent = Agent("a", "i", model, memory=memory, tools=[Tool("refuse", "refuses", None, refuse)])
        result = await agent.generate("hello", thread_id=THREAD, resource_id=RESOURCE)
        assert result.tripwire is not None and result.tripwire.reason == "tool refused"
        assert result.messages == [] and result.finish_reason == "tripwire"
        assert model.calls == 1  # the run ended inside the tool step
        assert texts(await stored(memory)) == ["before"]


async def test_an_aborting_processor_on_a_new_thread_stores_no_messages(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        result = await Agent("a", "i", ScriptedModel(["x"]), memory=memory,
                             output_processors=[_AbortOutput()]).generate("hi", thread_id="new",
                                                                          resource_id=RESOURCE)
        assert result.tripwire is not None
        assert await stored(memory, "new") == []


async def test_output_processors_shape_what_is_stored_and_returned(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        result = await Agent("a", "i", ScriptedModel(["the secret is 42"]), memory=memory,
                             output_processors=[_Redact()]).generate("tell", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(await stored(memory)) == ["tell", "the [redacted] is 42"]
        assert result.text == "the [redacted] is 42"


async def test_missing_resource_or_thread_id_is_refused(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", ScriptedModel(["x"]), memory=memory)
        missing: tuple[tuple[dict[str, Any], str], ...] = (
            ({"thread_id": THREAD}, "AGENT_MEMORY_MISSING_RESOURCE_ID"),
            ({"resource_id": RESOURCE}, "AGENT_MEMORY_MISSING_THREAD_ID"),  # the reference says RESOURCE_ID here too
            ({}, "AGENT_MEMORY_MISSING_RESOURCE_ID"),
        )
        for kwargs, code in missing:
            with pytest.raises(ValidationError) as info:
                await agent.generate("hi", **kwargs)
            assert info.value.code == code
        assert await memory.get_thread_by_id(THREAD) is None


async def test_a_thread_of_another_resource_is_refused(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", "mine", id="u0", at=base_time(), resource_id="owner")],
                   resource_id="owner")
        model = ScriptedModel(["x"])
        with pytest.raises(ResourceMismatch) as info:
            await Agent("a", "i", model, memory=memory).generate("hi", thread_id=THREAD, resource_id="intruder")
        assert info.value.code == "AGENT_MEMORY_THREAD_RESOURCE_MISMATCH"
        assert model.calls == 0
        assert texts(await stored(memory, resource_id="owner")) == ["mine"]


async def test_input_naming_another_thread_is_rejected(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel(["x"])
        agent = Agent("a", "i", model, memory=memory)
        foreign = Message.user("hi", thread_id="other-thread")
        with pytest.raises(ValidationError):
            await agent.generate(foreign, thread_id=THREAD, resource_id=RESOURCE)
        with pytest.raises(ValidationError):
            await agent.generate([{"role": "user", "content": "hi", "threadId": "other-thread"}],
                                 thread_id=THREAD, resource_id=RESOURCE)
        assert model.calls == 0
        assert await memory.get_thread_by_id(THREAD) is None  # rejected before any side effect


async def test_a_system_input_message_joins_the_system_prompt_and_is_never_stored(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel(["ok"])
        system = Message(id="sys", role="system", content=Message.user("speak French").content,
                         created_at=base_time() + timedelta(seconds=1))
        await Agent("a", "be brief", model, memory=memory).generate(
            [system, {"role": "system", "content": "no emojis"}, "hello"], thread_id=THREAD, resource_id=RESOURCE)
        request = model.requests[0]
        assert request.system[:3] == ["be brief", "speak French", "no emojis"]
        assert [m.role for m in request.messages] == ["user"]
        assert texts(await stored(memory)) == ["hello", "ok"]


# --- processor lists (reference §3.0) ---------------------------------------------------------------------


def _ids(processors: list[object]) -> list[str]:
    return [p.id for p in processors]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "inputs", "outputs"),
    [
        (None, ["memory-input-filter", "message-history"], ["message-history"]),
        ({"lastMessages": 5}, ["memory-input-filter", "message-history"], ["message-history"]),
        ({"messageHistory": {"maxTokens": 1000}},
         ["memory-input-filter", "message-history", "memory-token-limiter"], ["message-history"]),
        ({"workingMemory": {"enabled": True}},
         ["memory-input-filter", "working-memory", "message-history"], ["message-history"]),
        ({"lastMessages": False}, [], []),
        ({"lastMessages": 0, "workingMemory": {"enabled": True}}, ["working-memory"], []),
        ({"messageHistory": {"maxTokens": 0}}, [], []),
        ({"readOnly": True}, ["memory-input-filter", "message-history"], ["message-history"]),
    ],
)
async def test_processor_ids_and_order(tmp_path: Path, options: dict[str, Any] | None, inputs: list[str],
                                       outputs: list[str]) -> None:
    async with open_memory(tmp_path, options) as memory:
        assert _ids(memory.get_input_processors()) == inputs
        assert _ids(memory.get_output_processors()) == outputs


async def test_processor_names(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"messageHistory": {"maxTokens": 500}, "workingMemory": {"enabled": True}}) \
            as memory:
        names = {p.id: p.name for p in memory.get_input_processors()}  # type: ignore[attr-defined]
        assert names["memory-input-filter"] == "MemoryInputFilter"
        assert names["message-history"] == "MessageHistory"
        assert names["working-memory"] == "WorkingMemory"


async def test_semantic_recall_processors_and_index_name(tmp_path: Path) -> None:
    options = {"semanticRecall": {"topK": 2}, "workingMemory": {"enabled": True},
               "messageHistory": {"maxTokens": 2000}}
    async with open_memory(tmp_path, options, vector=HnswVectorStore(str(tmp_path / "vectors")),
                           embedder=HashEmbedder(dim=384)) as memory:
        inputs = memory.get_input_processors()
        assert _ids(inputs) == ["memory-input-filter", "working-memory", "message-history", "semantic-recall",
                                "memory-token-limiter"]
        assert _ids(memory.get_output_processors()) == ["semantic-recall", "message-history"]
        semantic = inputs[3]
        assert semantic.index_name == "memory_messages_384"  # type: ignore[attr-defined]
        # Per-call options can switch it off.
        assert "semantic-recall" not in _ids(memory.get_input_processors(memory_config={"semanticRecall": False}))
        model = ScriptedModel(["noted", "ok"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("my cat is called Whiskers", thread_id="t-a", resource_id=RESOURCE)
        await agent.generate("what is my cat called", thread_id="t-b", resource_id=RESOURCE)
        assert any("Whiskers" in s for s in model.requests[1].system)  # cross-thread recall block


async def test_configured_processors_replace_memory_ones(tmp_path: Path) -> None:
    async with open_memory(tmp_path) as memory:
        own = MessageHistory(memory.storage, last_messages=2)
        assert _ids(memory.get_input_processors([own])) == ["memory-input-filter"]
        assert _ids(memory.get_output_processors([own])) == []
        await seed(memory, [text_msg("user" if i % 2 == 0 else "assistant", f"m{i}", id=f"m{i}",
                                     at=base_time() + timedelta(seconds=i)) for i in range(6)])
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory, input_processors=[own], output_processors=[own]).generate(
            "now", thread_id=THREAD, resource_id=RESOURCE)
        assert texts(model.requests[0].messages) == ["m4", "m5", "now"]
        assert texts(await stored(memory))[-2:] == ["now", "ok"]
        assert len(await stored(memory)) == 8


async def test_per_call_last_messages_back_to_the_default_is_honoured(tmp_path: Path) -> None:
    async with open_memory(tmp_path, {"lastMessages": 2}) as memory:
        await seed(memory, [text_msg("user" if i % 2 == 0 else "assistant", f"m{i}", id=f"m{i}",
                                     at=base_time() + timedelta(seconds=i)) for i in range(12)])
        model = ScriptedModel(["ok"])
        await Agent("a", "i", model, memory=memory).generate("now", thread_id=THREAD, resource_id=RESOURCE,
                                                             memory_options={"lastMessages": 10})
        assert len(model.requests[0].messages) == 11
