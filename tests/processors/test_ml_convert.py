"""MessageList conversions on add (reference §4.1): strings, AI SDK v4 core, legacy v1 and DB dicts."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmind.codecs import (
    FilePart,
    Message,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.codecs._time import to_epoch_ms
from threadmind.errors import InvalidMessage, ValidationError
from threadmind.processors._message_list import MessageList

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"gen-{next(counter)}"


def make_list(**kwargs: Any) -> MessageList:
    return MessageList(thread_id="t1", resource_id="r1", generate_id=_ids(), now=lambda: T0, **kwargs)


class TestStrings:
    def test_bare_string_becomes_user_message(self) -> None:
        ml = make_list().add("hello", "input")
        (m,) = ml.get_all()
        assert m.role == "user"
        assert m.id == "gen-1"
        assert m.content.content == "hello"
        assert [type(p) for p in m.content.parts] == [TextPart]
        assert m.content.parts[0].text == "hello"  # type: ignore[union-attr]
        assert (m.thread_id, m.resource_id) == ("t1", "r1")
        assert m.created_at == T0

    def test_user_alias_is_input(self) -> None:
        ml = make_list().add("hi", "user")
        assert ml.sources_of(ml.get_all()[0].id) == {"input"}

    def test_unknown_source_rejected(self) -> None:
        with pytest.raises(ValidationError, match="source"):
            make_list().add("hi", "bogus")  # type: ignore[arg-type]


class TestCoreMessages:
    def test_string_content(self) -> None:
        ml = make_list().add({"role": "user", "content": "what's up"}, "input")
        m = ml.get_all()[0]
        assert m.content.content == "what's up"
        assert isinstance(m.content.parts[0], TextPart) and m.content.parts[0].text == "what's up"

    def test_tool_call_and_step_start_before_text_after_tool(self) -> None:
        ml = make_list().add({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "weather", "args": {"city": "Oslo"}},
            {"type": "text", "text": "it is cold"},
        ]}, "input")
        parts = ml.get_all()[0].content.parts
        assert [type(p) for p in parts] == [TextPart, ToolInvocationPart, StepStartPart, TextPart]
        call = parts[1]
        assert isinstance(call, ToolInvocationPart)
        assert (call.tool_invocation.state, call.tool_invocation.args) == ("call", {"city": "Oslo"})

    def test_tool_role_becomes_assistant_result_with_args_from_call_in_same_batch(self) -> None:
        ml = make_list().add([
            {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "w",
                                               "args": {"q": 1}}]},
            {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "w",
                                          "result": {"temp": 3}}]},
        ], "input")
        (m,) = ml.get_all()  # the tool message merged into the assistant call
        (part,) = m.content.parts
        assert isinstance(part, ToolInvocationPart)
        inv = part.tool_invocation
        assert (inv.state, inv.result, inv.args) == ("result", {"temp": 3}, {"q": 1})

    def test_tool_result_args_found_in_earlier_list_messages(self) -> None:
        ml = make_list()
        ml.add({"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c9", "toolName": "w",
                                                  "args": {"a": 2}}]}, "memory")
        ml.add({"role": "user", "content": "x"}, "input")
        ml.add({"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c9", "toolName": "w",
                                             "result": 5}]}, "input")
        last = ml.get_all()[-1]
        assert last.role == "assistant"
        part = last.content.parts[0]
        assert isinstance(part, ToolInvocationPart)
        assert part.tool_invocation.args == {"a": 2} and part.tool_invocation.state == "result"

    def test_unknown_call_args_default_to_empty(self) -> None:
        ml = make_list().add({"role": "tool", "content": [{"type": "tool-result", "toolCallId": "zz",
                                                          "toolName": "w", "result": 1}]}, "input")
        part = ml.get_all()[0].content.parts[0]
        assert isinstance(part, ToolInvocationPart) and part.tool_invocation.args == {}

    def test_empty_text_parts_removed(self) -> None:
        ml = make_list().add({"role": "user", "content": [{"type": "text", "text": ""},
                                                         {"type": "text", "text": "x"}]}, "input")
        parts = ml.get_all()[0].content.parts
        assert len(parts) == 1 and isinstance(parts[0], TextPart) and parts[0].text == "x"

    def test_provider_options_become_provider_metadata(self) -> None:
        ml = make_list().add({"role": "user", "providerOptions": {"openai": {"store": True}},
                              "content": [{"type": "text", "text": "a",
                                           "providerOptions": {"anthropic": {"cache": "x"}}}]}, "input")
        m = ml.get_all()[0]
        assert m.content.provider_metadata == {"openai": {"store": True}}
        assert m.content.parts[0].provider_metadata == {"anthropic": {"cache": "x"}}

    def test_reasoning_file_and_image_parts(self) -> None:
        ml = make_list().add({"role": "assistant", "content": [
            {"type": "reasoning", "text": "think", "signature": "sig"},
            {"type": "file", "data": b"abc", "mimeType": "application/pdf", "filename": "a.pdf"},
            {"type": "image", "image": "iVBORw0KGgoAAA"},
        ]}, "input")
        reasoning, file, image = ml.get_all()[0].content.parts
        assert isinstance(reasoning, ReasoningPart)
        assert reasoning.reasoning == "think" and reasoning.details == [{"type": "text", "text": "think",
                                                                         "signature": "sig"}]
        assert isinstance(file, FilePart) and file.data == "YWJj" and file.mime_type == "application/pdf"
        assert file.filename == "a.pdf"
        assert isinstance(image, FilePart) and image.mime_type == "image/png"

    def test_response_single_text_part_collapses_to_string(self) -> None:
        ml = make_list().add({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}, "response")
        assert ml.get_all()[0].content.content == "hi"
        ml2 = make_list().add({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}, "input")
        assert ml2.get_all()[0].content.content is None

    def test_ui_message_parts_are_used(self) -> None:
        ml = make_list().add({"id": "u1", "role": "assistant", "content": "x", "parts": [
            {"type": "tool-invocation", "toolInvocation": {"state": "call", "toolCallId": "c", "toolName": "n"}},
            {"type": "text", "text": "x"},
        ]}, "input")
        parts = ml.get_all()[0].content.parts
        assert [type(p) for p in parts] == [ToolInvocationPart, StepStartPart, TextPart]


class TestDbAndLegacyShapes:
    def test_db_dict_fills_id_created_at_and_memory_info(self) -> None:
        ml = make_list().add({"role": "user", "content": {"format": 2, "parts": [{"type": "text", "text": "q"}]}},
                             "input")
        m = ml.get_all()[0]
        assert m.id == "gen-1" and m.created_at == T0
        assert (m.thread_id, m.resource_id) == ("t1", "r1")

    def test_db_dict_string_created_at_parsed_and_kept(self) -> None:
        ml = make_list().add({"id": "m1", "role": "assistant", "createdAt": "2024-05-01T10:00:00.250Z",
                              "content": {"format": 2, "parts": [{"type": "data-x", "data": {"k": 1}}]}}, "memory")
        m = ml.get_all()[0]
        assert m.created_at == datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=UTC)
        assert isinstance(m.content.parts[0], UnknownPart)

    def test_legacy_v1_shape(self) -> None:
        ml = make_list().add({"id": "v1", "threadId": "t1", "resourceId": "r1", "role": "assistant", "type": "text",
                              "createdAt": T0 - timedelta(days=1),
                              "content": [{"type": "text", "text": "old"}]}, "memory")
        m = ml.get_all()[0]
        assert m.id == "v1" and m.type is None and m.text == "old"
        assert m.created_at == T0 - timedelta(days=1)

    def test_message_instance_gets_memory_info(self) -> None:
        ml = make_list().add(Message.user("x", id="m", created_at=T0), "input")
        m = ml.get_all()[0]
        assert (m.thread_id, m.resource_id) == ("t1", "r1")


class TestStamping:
    def test_non_memory_parts_stamped_with_now(self) -> None:
        ml = make_list().add(Message.user("x", id="m", created_at=T0), "input")
        assert ml.get_all()[0].content.parts[0].created_at == to_epoch_ms(T0)

    def test_memory_parts_not_stamped(self) -> None:
        ml = make_list().add(Message.user("x", id="m", created_at=T0), "memory")
        assert ml.get_all()[0].content.parts[0].created_at is None

    def test_existing_stamp_kept(self) -> None:
        ml = make_list().add({"role": "user", "content": {"format": 2, "parts": [
            {"type": "text", "text": "a", "createdAt": 7}, {"type": "data-y", "data": 1}]}}, "input")
        first, second = ml.get_all()[0].content.parts
        assert first.created_at == 7
        assert second.created_at == to_epoch_ms(T0)


class TestValidation:
    def test_wrong_thread_rejected_for_live_sources(self) -> None:
        ml = make_list()
        with pytest.raises(ValidationError, match="Received input message with wrong threadId. Input t2, expected t1"):
            ml.add(Message.user("x", thread_id="t2"), "input")
        with pytest.raises(ValidationError, match="wrong resourceId. Input r2, expected r1"):
            ml.add({"role": "user", "content": "x", "resourceId": "r2", "threadId": "t1"}, "response")
        assert len(ml) == 0

    def test_memory_rows_of_other_threads_allowed(self) -> None:
        ml = make_list().add(Message.user("x", thread_id="t2", resource_id="r1"), "memory")
        assert ml.get_all()[0].thread_id == "t2"

    @pytest.mark.parametrize("value", [
        pytest.param({"role": "user"}, id="core-no-content"),
        pytest.param({"role": "user", "content": None}, id="core-none"),
        pytest.param({"role": "user", "content": {"format": 2}}, id="db-no-parts"),
    ])
    def test_no_usable_content(self, value: dict[str, Any]) -> None:
        with pytest.raises(InvalidMessage) as info:
            make_list().add(value, "input")
        assert info.value.code == "INVALID_MESSAGE_CONTENT"

    def test_empty_string_content_allowed(self) -> None:
        ml = make_list().add({"role": "user", "content": ""}, "input")
        assert ml.get_all()[0].content.content == ""

    def test_bad_role_names_the_field(self) -> None:
        with pytest.raises(InvalidMessage, match="role"):
            make_list().add({"role": "robot", "content": "x"}, "input")


class TestSystemRole:
    def test_system_from_memory_ignored(self) -> None:
        ml = make_list().add({"role": "system", "content": "old"}, "memory")
        assert len(ml) == 0 and ml.get_system_messages() == []

    def test_system_from_input_goes_to_untagged_bucket(self) -> None:
        ml = make_list().add([{"role": "system", "content": "be brief"}, "q"], "input")
        assert ml.get_system_messages() == ["be brief"]
        assert [m.role for m in ml.get_all()] == ["user"]


class TestBatches:
    def test_bad_message_leaves_list_untouched(self) -> None:
        ml = make_list()
        with pytest.raises(ValidationError):
            ml.add(["fine", Message.user("bad", thread_id="other")], "input")
        assert len(ml) == 0

    def test_generated_time_follows_explicit_time_earlier_in_batch(self) -> None:
        future = T0 + timedelta(minutes=5)
        ml = make_list().add([Message.user("old", id="s", created_at=future), "new"], "input")
        assert [m.text for m in ml] == ["old", "new"]
        assert ml.get_all()[1].created_at == future + timedelta(milliseconds=1)
