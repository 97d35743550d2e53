"""Bad arguments to every public entry point get a typed error from threadmind.errors, and the memory keeps
working (found by fuzzing: these raised OverflowError, TypeError, AttributeError or NotImplementedError)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from threadmind import Memory, Message, MessageContent, TextPart, decode_message, message_to_dict
from threadmind.agent import Agent
from threadmind.errors import ConfigError, InvalidMessage, ThreadmindError, ValidationError
from threadmind.models import ScriptedModel

from ._support import BASE, StoreFactory, all_ids, msg

HUGE = 2**70

CALLS: list[Any] = [
    pytest.param(lambda m: m.list_threads(page=2**62), id="list-page"),
    pytest.param(lambda m: m.list_threads(per_page=2**63), id="list-per-page"),
    pytest.param(lambda m: m.list_threads(metadata={"k": HUGE}), id="list-filter-int"),
    pytest.param(lambda m: m.list_threads(metadata={f"k{i}": 1 for i in range(2000)}), id="list-filter-size"),
    pytest.param(lambda m: m.list_threads(resource_id=["a"]), id="list-resource-list"),
    pytest.param(lambda m: m.list_threads(resource_id=HUGE), id="list-resource-int"),
    pytest.param(lambda m: m.recall("t1", per_page=2**63), id="recall-per-page"),
    pytest.param(lambda m: m.recall("t1", per_page=10, page=HUGE), id="recall-page"),
    pytest.param(lambda m: m.recall("t1", per_page=0, include=[{"id": "a", "with_previous_messages": 2**63}]),
                 id="recall-window"),
    pytest.param(lambda m: m.recall("t1", include=1), id="recall-include-int"),
    pytest.param(lambda m: m.recall("t1", include=True), id="recall-include-bool"),
    pytest.param(lambda m: m.update_messages([{"id": "a", "role": []}]), id="update-role"),
    pytest.param(lambda m: m.update_messages([{"id": "a", "content": {"metadata": {"x": object()}}}]),
                 id="update-unencodable"),
    pytest.param(lambda m: m.create_thread(resource_id="r1", title="a\ud800"), id="title-surrogate"),
    pytest.param(lambda m: m.save_messages([{}]), id="save-empty-dict"),
    pytest.param(lambda m: m.save_messages([Message("x", "user", MessageContent(content=5), BASE, "t1", "r1")]),  # type: ignore[arg-type]
                 id="save-content-int"),
    pytest.param(lambda m: m.delete_messages([1]), id="delete-int"),
    pytest.param(lambda m: m.get_working_memory(thread_id="t1", resource_id=["r"]), id="wm-get-list"),
    pytest.param(lambda m: m.get_working_memory(thread_id=5), id="wm-get-thread-int"),
    pytest.param(lambda m: m.update_working_memory(thread_id="t1", resource_id=float("nan"), working_memory="x"),
                 id="wm-update-nan"),
    pytest.param(lambda m: m.get_system_message(thread_id="t1", resource_id=(1, 2)), id="system-tuple"),
    pytest.param(lambda m: Agent("a", "i", ScriptedModel(["x"]), memory=m).generate("hi", thread_id=["t"],  # type: ignore[arg-type]
                                                                                    resource_id="r1"),
                 id="agent-thread-list"),
]


@pytest.mark.parametrize("call", CALLS)
async def test_a_bad_call_is_a_typed_error_and_changes_nothing(
    make_store: StoreFactory, call: Callable[[Memory], Any]
) -> None:
    options = {"workingMemory": {"enabled": True}}
    async with Memory(storage=make_store(), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a", ms=1)])
        with pytest.raises((ValidationError, ConfigError)):
            await call(memory)
        await memory.save_messages([msg("b", ms=2)])
        assert await all_ids(memory, "t1") == ["a", "b"]
        assert [m.id for m in (await memory.recall("t1")).messages] == ["a", "b"]


async def test_parts_none_is_normalised_to_no_parts(memory: Memory) -> None:
    await memory.create_thread(resource_id="r1", thread_id="t1")
    saved = await memory.save_messages([Message("x", "user", MessageContent(parts=None, content="hi"), BASE,  # type: ignore[arg-type]
                                                "t1", "r1")])
    assert saved.messages[0].content.parts == [] and (await memory.recall("t1")).messages[0].text == "hi"


def test_processor_lists_and_agents_are_checked_at_construction() -> None:
    from threadmind.stores import InMemoryStore

    memory = Memory(storage=InMemoryStore())
    assert memory.get_input_processors(None) and memory.get_output_processors(None)  # type: ignore[arg-type]
    for bad in (0, "abc", {"id": "x"}):
        with pytest.raises(ValidationError, match="configured"):
            memory.get_input_processors(bad)  # type: ignore[arg-type]
    model = ScriptedModel(["x"])
    for kwargs, needle in (({"model": None}, "model"), ({"instructions": 1}, "instructions"),
                           ({"name": ""}, "name"), ({"input_processors": 5}, "input_processors"),
                           ({"output_processors": [object()]}, "id"), ({"memory": "m"}, "memory")):
        args: dict[str, Any] = {"name": "a", "instructions": "i", "model": model, **kwargs}
        with pytest.raises(ValidationError, match=needle):
            Agent(args.pop("name"), args.pop("instructions"), args.pop("model"), **args)
    assert Agent("a", "i", model, input_processors=None).input_processors == []  # type: ignore[arg-type]


def test_codec_functions_refuse_what_is_not_a_message() -> None:
    for bad in (None, 1, 1.5):
        with pytest.raises(InvalidMessage, match="expected JSON bytes or text"):
            decode_message(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="expected a Message"):
        message_to_dict(None)  # type: ignore[arg-type]
    odd = Message("x", "user", MessageContent(parts=[TextPart(text="t")], metadata={"o": object()}), BASE)
    with pytest.raises(InvalidMessage, match="cannot be converted"):
        message_to_dict(odd)


async def test_closed_or_storage_less_memory_raises_for_working_memory_reads(make_store: StoreFactory) -> None:
    memory = Memory(storage=make_store())  # working memory off: these returned None without any check
    calls: tuple[Callable[[], Awaitable[object]], ...] = (lambda: memory.get_working_memory(thread_id="t1"),
                                                          lambda: memory.get_system_message(thread_id="t1"))
    for call in calls:
        with pytest.raises(ThreadmindError, match="not started|start"):
            await call()
    async with memory:
        assert await memory.get_working_memory(thread_id="t1") is None
    with pytest.raises(ThreadmindError) as info:
        await memory.get_system_message(thread_id="t1")
    assert info.value.code == "THREADMIND_CLOSED"
    with pytest.raises(ConfigError, match="storage provider"):
        await Memory().get_working_memory(thread_id="t1")


async def test_an_update_to_a_time_without_a_utc_equivalent_is_refused(memory: Memory) -> None:
    """Year 1 at +01:00 is before the earliest UTC datetime: a ValidationError naming the field, not an
    OverflowError, and the message is unchanged."""
    await memory.create_thread(resource_id="r1", thread_id="t1")
    await memory.save_messages([Message.user("hi", id="m1", thread_id="t1", resource_id="r1")])
    for value in ("0001-01-01T00:00:00+01:00", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))):
        with pytest.raises(ValidationError, match=r"updates\[0\]\.created_at"):
            await memory.update_messages([{"id": "m1", "created_at": value}])
    assert [m.text for m in await memory.list_messages_by_id(["m1"])] == ["hi"]


@pytest.mark.parametrize(("snake", "camel"), [("thread_id", "threadId"), ("resource_id", "resourceId"),
                                              ("created_at", "createdAt")])
async def test_a_dict_with_snake_case_keys_is_told_the_camel_case_name(memory: Memory, snake: str, camel: str) -> None:
    await memory.create_thread(resource_id="r1", thread_id="t1")
    wire = message_to_dict(Message.user("hi", thread_id="t1", resource_id="r1"))
    wire[snake] = wire.pop(camel)
    with pytest.raises(ValidationError) as info:
        await memory.save_messages([wire])
    assert f"`{camel}`" in info.value.message and f"`{snake}`" in info.value.message
    assert info.value.message.startswith("messages[0]")
    assert await all_ids(memory, "t1") == []


def test_a_vector_argument_that_is_no_vector_store_is_refused_naming_what_it_lacks() -> None:
    from threadmind.errors import ConfigError
    from threadmind.stores import InMemoryStore

    with pytest.raises(ConfigError, match=r"`vector` must be a vector store; str lacks open, close, use_index"):
        Memory(storage=InMemoryStore(), vector="memory.vectors")  # type: ignore[arg-type]
