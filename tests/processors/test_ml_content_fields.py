"""The MessageList keeps every content field when it converts, merges and layers messages, and refuses what it
cannot convert with InvalidMessage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests._factories import text_msg

from threadmind.codecs import Message, Role, TextPart, message_from_dict
from threadmind.errors import InvalidMessage
from threadmind.processors import MessageList
from threadmind.processors._merge import layer_stored_over_live, merge_assistant

T0 = datetime(2025, 1, 1, tzinfo=UTC)
FILES = [{"name": "a.png", "contentType": "image/png", "url": "https://x/a.png"}]


def message(role: Role, text: str, *, id: str = "m", at: datetime = T0, **content: Any) -> Message:  # noqa: A002
    return text_msg(role, text, id=id, at=at, thread_id="t", resource_id="r", **content)


class TestMergeAssistant:
    def test_fields_only_the_incoming_copy_has_are_kept(self) -> None:
        latest = message("assistant", "one")
        incoming = message("assistant", "two", experimental_attachments=FILES, annotations=[1], reasoning="why",
                           provider_metadata={"p": {"x": 1}}, extra={"futureKey": [1]})
        merged = merge_assistant(latest, incoming).content
        assert merged.experimental_attachments == FILES and merged.annotations == [1]
        assert merged.reasoning == "why" and merged.provider_metadata == {"p": {"x": 1}}
        assert merged.extra == {"futureKey": [1]}
        assert [p.text for p in merged.parts if isinstance(p, TextPart)] == ["one", "two"]

    def test_the_latest_copy_keeps_its_own(self) -> None:
        latest = message("assistant", "one", experimental_attachments=FILES, extra={"k": "latest", "only": 1})
        incoming = message("assistant", "two", experimental_attachments=[], extra={"k": "incoming", "new": 2})
        merged = merge_assistant(latest, incoming).content
        assert merged.experimental_attachments == FILES  # Mastra's merge keeps the latest message's fields
        assert merged.extra == {"k": "latest", "only": 1, "new": 2}


def test_a_live_user_copy_overrides_unknown_keys_one_by_one() -> None:
    stored = message("user", "hi", extra={"a": 1, "b": 2}, experimental_attachments=FILES)
    live = message("user", "hi", extra={"b": 3})
    layered = layer_stored_over_live(stored, live).content
    assert layered.extra == {"a": 1, "b": 3} and layered.experimental_attachments == FILES


def test_a_stored_row_with_unknown_keys_loads_into_the_list_unchanged() -> None:
    row = {"id": "s1", "role": "user", "createdAt": "2025-01-01T00:00:00.000Z", "threadId": "t", "resourceId": "r",
           "content": {"format": 2, "parts": [{"type": "text", "text": "x", "createdAt": 1}],
                       "experimental_attachments": FILES, "futureKey": {"v": 1}}}
    (loaded,) = MessageList(thread_id="t", resource_id="r").add(row, "memory").get_all()
    assert loaded == message_from_dict(row)
    assert loaded.content.experimental_attachments == FILES and loaded.content.extra == {"futureKey": {"v": 1}}


def test_a_ui_message_keeps_reasoning_annotations_and_attachments() -> None:
    ui = {"id": "u1", "role": "assistant", "content": "done", "parts": [{"type": "text", "text": "done"}],
          "reasoning": "thinking", "annotations": [{"a": 1}], "experimental_attachments": FILES,
          "createdAt": (T0 + timedelta(seconds=1)).isoformat()}
    (converted,) = MessageList(thread_id="t", resource_id="r").add(ui, "input").get_all()
    assert converted.content.reasoning == "thinking" and converted.content.annotations == [{"a": 1}]
    assert converted.content.experimental_attachments == FILES


@pytest.mark.parametrize("created", [1e20, float("nan"), float("inf"), 10**30, "0001-01-01T00:00:00+01:00", "soon"])
@pytest.mark.parametrize("content", ["x", {"format": 2, "parts": [{"type": "text", "text": "x"}]}])
def test_a_created_at_no_datetime_holds_is_an_invalid_message(created: Any, content: Any) -> None:
    with pytest.raises(InvalidMessage, match="createdAt"):
        MessageList(thread_id="t", resource_id="r").add({"role": "user", "content": content, "createdAt": created},
                                                        "input")
