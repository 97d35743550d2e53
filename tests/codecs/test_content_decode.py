"""``decode_content``: the one-pass typed decode and the part-by-part path must give the same result."""

from __future__ import annotations

import msgspec
import pytest

from threadmind.codecs import (
    MessageContent,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.codecs._json import _content, _content_json, _part_from_raw, decode_content, encode_content
from threadmind.errors import InvalidMessage


def _slow(buf: bytes) -> MessageContent:
    """The part-by-part path on its own (what every row took before the typed fast path)."""
    return _content(_content_json.decode(buf), _part_from_raw, "")


KNOWN = MessageContent(
    parts=[StepStartPart(), TextPart(text="héllo 🌍"), ReasoningPart(reasoning="because"),
           ToolInvocationPart(tool_invocation=ToolInvocation(state="result", tool_call_id="c1", tool_name="ask",
                                                             args={"q": 1}, result=[1, 2]))],
    content="héllo 🌍", metadata={"k": [1, {"x": None}]},
)


def test_known_parts_decode_in_one_pass_equal_to_part_by_part() -> None:
    buf = encode_content(KNOWN)
    assert decode_content(buf) == _slow(buf) == KNOWN
    assert decode_content(buf.decode()) == KNOWN and decode_content(memoryview(buf)) == KNOWN


def test_an_unknown_part_type_is_kept_beside_typed_parts() -> None:
    buf = b'{"format":2,"parts":[{"type":"text","text":"a"},{"type":"data-chart","data":{"v":[1,2]}}]}'
    content = decode_content(buf)
    assert content.parts[0] == TextPart(text="a")
    assert isinstance(content.parts[1], UnknownPart)
    assert msgspec.json.decode(encode_content(content)) == msgspec.json.decode(buf)  # unchanged on the way out


@pytest.mark.parametrize(
    "buf, where",
    [
        (b'{"format":2,"parts":[{"type":"text","text":5}]}', "parts[0]"),
        (b'{"format":3,"parts":[]}', "format"),
        (b'{"format":2,"parts":[{"type":"text","text":"ok"},{"type":"tool-invocation","toolInvocation":{}}]}',
         "parts[1]"),
    ],
)
def test_invalid_content_names_the_field(buf: bytes, where: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        decode_content(buf)
    assert f"$.{where}" in caught.value.message


def test_not_json_is_an_invalid_message() -> None:
    with pytest.raises(InvalidMessage, match="not valid JSON"):
        decode_content(b'{"format":2,')
