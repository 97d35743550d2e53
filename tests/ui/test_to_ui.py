"""messages_to_ui: stored messages as UIMessage dicts, and the round trip through messages_from_ui."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from threadmind.codecs import (
    FilePart,
    Message,
    MessageContent,
    ReasoningPart,
    SourcePart,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.errors import ValidationError
from threadmind.ui import messages_from_ui, messages_to_ui

WHEN = datetime(2025, 3, 1, 10, 0, 0, 123000, tzinfo=UTC)


def stored(*parts: Any, role: str = "assistant", **content: Any) -> Message:
    return Message(id="m-1", role=role, content=MessageContent(parts=list(parts), **content),  # type: ignore[arg-type]
                   created_at=WHEN, thread_id="th-1", resource_id="r-1")


def ui_parts(message: Message) -> list[dict[str, Any]]:
    (ui,) = messages_to_ui([message])
    parts: list[dict[str, Any]] = ui["parts"]
    return parts


def call(state: str, **fields: Any) -> ToolInvocationPart:
    return ToolInvocationPart(tool_invocation=ToolInvocation(state=state, tool_call_id="c-1", tool_name="weather",  # type: ignore[arg-type]
                                                             args={"city": "Paris"}, **fields))


class TestMessage:
    def test_metadata_carries_time_thread_and_resource_next_to_content_metadata(self) -> None:
        (ui,) = messages_to_ui([stored(TextPart(text="Hi"), metadata={"source": "web"})])
        assert ui == {"id": "m-1", "role": "assistant", "parts": [{"type": "text", "text": "Hi"}],
                      "metadata": {"source": "web", "createdAt": "2025-03-01T10:00:00.123Z", "threadId": "th-1",
                                   "resourceId": "r-1"}}

    def test_a_message_with_only_the_text_mirror_gets_a_text_part(self) -> None:
        assert ui_parts(stored(role="user", content="legacy text")) == [{"type": "text", "text": "legacy text"}]

    def test_a_user_message_never_has_zero_parts(self) -> None:
        assert ui_parts(stored(role="user")) == [{"type": "text", "text": ""}]

    def test_signals_are_left_out(self) -> None:
        assert messages_to_ui([stored(TextPart(text="ping"), role="signal")]) == []

    def test_something_that_is_not_a_message_is_rejected(self) -> None:
        with pytest.raises(ValidationError, match=r"messages\[1\]"):
            messages_to_ui([stored(TextPart(text="x")), {"id": "m"}])  # type: ignore[list-item]


class TestParts:
    def test_a_parts_stamp_travels_in_provider_metadata(self) -> None:
        assert ui_parts(stored(TextPart(text="Hi", created_at=17, provider_metadata={"openai": {"id": "x"}}))) == [
            {"type": "text", "text": "Hi", "providerMetadata": {"openai": {"id": "x"}, "mastra": {"createdAt": 17}}}]

    def test_reasoning_from_its_text_or_its_details(self) -> None:
        parts = ui_parts(stored(ReasoningPart(reasoning="hm"),
                                ReasoningPart(reasoning="", details=[{"type": "text", "text": "from details"}]),
                                ReasoningPart(reasoning="")))
        assert parts == [{"type": "reasoning", "text": "hm", "state": "done"},
                         {"type": "reasoning", "text": "from details", "state": "done"}]

    def test_files_become_urls_and_raw_base64_a_data_url(self) -> None:
        parts = ui_parts(stored(FilePart(data="https://x/cat.png", mime_type="image/png", filename="cat.png"),
                                FilePart(data="iVBORw0KGgo=", media_type="image/png"),
                                FilePart(data="data:text/plain;base64,aGk=")))
        assert parts == [
            {"type": "file", "mediaType": "image/png", "url": "https://x/cat.png", "filename": "cat.png"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "file", "mediaType": "application/octet-stream", "url": "data:text/plain;base64,aGk="},
        ]

    def test_sources_and_step_starts(self) -> None:
        parts = ui_parts(stored(StepStartPart(), SourcePart(source={"url": "https://e.com", "id": "s1", "title": "E"}),
                                SourcePart(source={"id": "doc-without-url"})))
        assert parts == [{"type": "step-start"},
                         {"type": "source-url", "sourceId": "s1", "url": "https://e.com", "title": "E"}]

    def test_data_parts_and_kept_ui_parts_and_no_mastra_error_parts(self) -> None:
        parts = ui_parts(stored(
            UnknownPart({"type": "data-weather", "id": "w", "data": {"c": 21}, "createdAt": 5}),
            UnknownPart({"type": "source-document", "sourceId": "d", "mediaType": "application/pdf", "title": "T"}),
            UnknownPart({"type": "error", "error": {"message": "x"}}),
        ))
        assert parts == [{"type": "data-weather", "data": {"c": 21}, "id": "w"},
                         {"type": "source-document", "sourceId": "d", "mediaType": "application/pdf", "title": "T"}]

    @pytest.mark.parametrize(("part", "expected"), [
        (call("partial-call"), {"state": "input-streaming"}),
        (call("call"), {"state": "input-available"}),
        (call("result", result={"c": 21}), {"state": "output-available", "output": {"c": 21}}),
        (call("output-error", error_text="timeout", raw_input="{"),
         {"state": "output-error", "errorText": "timeout", "rawInput": "{"}),
        (call("approval-requested", approval={"id": "ap"}), {"state": "approval-requested", "approval": {"id": "ap"}}),
        (call("approval-responded", approval={"id": "ap", "approved": True, "reason": "fine"}),
         {"state": "approval-responded", "approval": {"id": "ap", "approved": True, "reason": "fine"}}),
        (call("output-denied", approval={"id": "ap", "approved": False}),
         {"state": "output-denied", "approval": {"id": "ap", "approved": False}}),
        (call("result", result=1, approval={"id": "ap", "approved": True}),
         {"state": "output-available", "output": 1, "approval": {"id": "ap", "approved": True}}),
    ], ids=["partial-call", "call", "result", "output-error", "approval-requested", "approval-responded",
            "output-denied", "approved-result"])
    def test_tool_invocations_become_tool_parts(self, part: ToolInvocationPart, expected: dict[str, Any]) -> None:
        (ui,) = ui_parts(stored(part))
        assert ui == {"type": "tool-weather", "toolCallId": "c-1", "input": {"city": "Paris"}, **expected}


# A UI conversation with every part type in the shapes messages_to_ui writes (no streaming state, no reasoning id).
UI_CONVERSATION: list[dict[str, Any]] = [
    {"id": "u-1", "role": "user",
     "metadata": {"createdAt": "2025-03-01T10:00:00.000Z", "threadId": "th-1", "resourceId": "r-1", "tag": "x"},
     "parts": [{"type": "text", "text": "Weather in Paris? Here is a map."},
               {"type": "file", "mediaType": "image/png", "url": "https://x/map.png", "filename": "map.png"}]},
    {"id": "a-1", "role": "assistant",
     "metadata": {"createdAt": "2025-03-01T10:00:01.000Z", "threadId": "th-1", "resourceId": "r-1"},
     "parts": [
         {"type": "step-start"},
         {"type": "reasoning", "text": "Need the weather tool.", "state": "done",
          "providerMetadata": {"mastra": {"createdAt": 1740823201000}}},
         {"type": "tool-weather", "toolCallId": "c-1", "state": "output-available", "input": {"city": "Paris"},
          "output": {"c": 21}, "callProviderMetadata": {"openai": {"itemId": "it"}}},
         {"type": "tool-book", "toolCallId": "c-2", "state": "approval-responded", "input": {"table": 2},
          "approval": {"id": "ap-1", "approved": False, "reason": "not now"}},
         {"type": "tool-confirm", "toolCallId": "c-3", "state": "input-available", "input": {"q": "ok?"}},
         {"type": "tool-fail", "toolCallId": "c-4", "state": "output-error", "input": {}, "errorText": "boom"},
         {"type": "step-start"},
         {"type": "source-url", "sourceId": "s1", "url": "https://meteo.example", "title": "Meteo"},
         {"type": "source-document", "sourceId": "d1", "mediaType": "application/pdf", "title": "Report"},
         {"type": "data-weather", "data": {"c": 21}, "id": "w1"},
         {"type": "text", "text": "It is 21°C."},
     ]},
]


class TestRoundTrip:
    def test_ui_to_stored_to_ui_is_the_same_conversation(self) -> None:
        converted = messages_from_ui({"messages": UI_CONVERSATION})
        assert messages_to_ui(converted) == UI_CONVERSATION

    def test_stored_to_ui_to_stored_is_the_same_messages(self) -> None:
        converted = messages_from_ui({"messages": UI_CONVERSATION})
        assert messages_from_ui({"messages": messages_to_ui(converted)}) == converted
