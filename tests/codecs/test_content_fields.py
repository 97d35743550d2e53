"""Every content field round-trips through the codecs: the keys Mastra writes (reference §4.1) and unknown ones."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.codecs._content_strategies import MASTRA_CONTENT_KEYS, PROPERTY, canonical, contents, messages

from threadmind.codecs import (
    Message,
    MessageContent,
    TextPart,
    decode_message,
    encode_json,
    message_from_dict,
    message_to_dict,
)
from threadmind.codecs._json import checked_message, decode_content, encode_content
from threadmind.errors import InvalidMessage

ATTACHMENTS = [{"name": "cat.png", "contentType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="}]
MASTRA_ROW: dict[str, Any] = {
    "id": "m1",
    "content": {"format": 2, "parts": [{"type": "text", "text": "what is on this picture?"}],
                "content": "what is on this picture?", "experimental_attachments": ATTACHMENTS},
    "role": "user",
    "createdAt": "2025-03-01T09:00:00.000Z",
    "threadId": "t1",
    "resourceId": "r1",
}


class TestExperimentalAttachments:
    def test_message_from_dict_keeps_them(self) -> None:
        message = message_from_dict(MASTRA_ROW)
        assert message.content.experimental_attachments == ATTACHMENTS
        assert message_to_dict(message)["content"] == MASTRA_ROW["content"]

    def test_decode_message_keeps_them(self) -> None:
        message = decode_message(json.dumps(MASTRA_ROW).encode())
        assert message.content.experimental_attachments == ATTACHMENTS
        assert json.loads(encode_json(message)) == MASTRA_ROW

    def test_the_stored_column_keeps_them(self) -> None:
        content = decode_content(json.dumps(MASTRA_ROW["content"]))
        assert content.experimental_attachments == ATTACHMENTS
        assert json.loads(encode_content(content)) == MASTRA_ROW["content"]

    def test_written_under_mastras_name(self) -> None:
        # Mastra and the AI SDK read `experimental_attachments`, never a camel-cased spelling.
        content = MessageContent(parts=[TextPart(text="hi")], experimental_attachments=ATTACHMENTS)
        written = json.loads(encode_content(content))
        assert written["experimental_attachments"] == ATTACHMENTS and "experimentalAttachments" not in written
        message = Message("m1", "user", content, message_from_dict(MASTRA_ROW).created_at)
        assert message_to_dict(message)["content"]["experimental_attachments"] == ATTACHMENTS
        assert checked_message(message).content == content


class TestUnknownContentKeys:
    CONTENT: dict[str, Any] = {"format": 2, "parts": [{"type": "text", "text": "x"}], "content": "x",
                               "futureKey": {"nested": [1, 2.5, None, "é"]}, "extra": None, "flag": False}

    def test_kept_in_extra_and_written_back(self) -> None:
        content = decode_content(json.dumps(self.CONTENT))
        assert content.extra == {"futureKey": {"nested": [1, 2.5, None, "é"]}, "extra": None, "flag": False}
        assert canonical(json.loads(encode_content(content))) == canonical(self.CONTENT)

    def test_message_from_dict_and_to_dict(self) -> None:
        row = {**MASTRA_ROW, "content": self.CONTENT}
        assert canonical(message_to_dict(message_from_dict(row))) == canonical(row)
        assert canonical(json.loads(encode_json(decode_message(json.dumps(row))))) == canonical(row)

    def test_survive_a_change_of_a_modelled_field(self) -> None:
        content = decode_content(json.dumps(self.CONTENT))
        changed = msgspec.structs.replace(content, content="y", parts=[TextPart(text="y")])
        assert json.loads(encode_content(changed))["futureKey"] == self.CONTENT["futureKey"]

    @pytest.mark.parametrize(("extra", "needle"), [
        pytest.param({"parts": []}, "modelled key 'parts'", id="modelled-key"),
        pytest.param({"experimental_attachments": []}, "modelled key", id="modelled-attachments"),
        pytest.param({1: "x"}, "keys must be strings", id="int-key"),
        pytest.param(["x"], "must be a dict", id="not-a-dict"),
        pytest.param({"x": object()}, "cannot be stored as JSON", id="not-json"),
    ])
    def test_a_bad_extra_is_refused_naming_the_field(self, extra: Any, needle: str) -> None:
        content = MessageContent(parts=[TextPart(text="x")], extra=extra)
        message = Message("m1", "user", content, message_from_dict(MASTRA_ROW).created_at)
        with pytest.raises(InvalidMessage, match=needle) as caught:
            checked_message(message, "messages[0]")
        assert "messages[0].content" in caught.value.message
        with pytest.raises(InvalidMessage):
            encode_json(message)
        with pytest.raises(InvalidMessage):
            message_to_dict(message)


def test_the_codec_models_exactly_the_reference_keys() -> None:
    from threadmind.codecs._json import CONTENT_KEYS

    assert CONTENT_KEYS == MASTRA_CONTENT_KEYS


class TestRoundTripProperty:
    """Any content Mastra may write comes back as equivalent JSON through every codec path."""

    @PROPERTY
    @given(contents)
    def test_content_column(self, content: dict[str, Any]) -> None:
        decoded = decode_content(json.dumps(content).encode())
        assert canonical(json.loads(encode_content(decoded))) == canonical(content)
        assert decode_content(encode_content(decoded)) == decoded
        assert decode_content(json.dumps(content, ensure_ascii=False)) == decoded  # text as well as bytes

    @PROPERTY
    @given(messages())
    def test_message_from_dict_to_dict(self, row: dict[str, Any]) -> None:
        message = message_from_dict(row)
        assert canonical(message_to_dict(message)) == canonical(row)
        assert message_from_dict(message_to_dict(message)) == message

    @PROPERTY
    @given(messages())
    def test_decode_message_encode_json(self, row: dict[str, Any]) -> None:
        message = decode_message(json.dumps(row).encode())
        assert canonical(json.loads(encode_json(message))) == canonical(row)
        assert decode_message(encode_json(message)) == message == message_from_dict(row)

    @PROPERTY
    @given(st.lists(messages(), max_size=4, unique_by=lambda r: r["id"]))
    def test_decode_messages_encode_json(self, rows: list[dict[str, Any]]) -> None:
        from threadmind.codecs import decode_messages

        decoded = decode_messages(json.dumps(rows).encode())
        assert canonical(json.loads(encode_json(decoded))) == canonical(rows)

    @PROPERTY
    @given(messages())
    def test_checked_message_what_stores_write(self, row: dict[str, Any]) -> None:
        message = message_from_dict(row)
        assert checked_message(message) == message
        assert canonical(json.loads(encode_content(checked_message(message).content))) == canonical(row["content"])
