"""Malformed input never escapes a codec as anything but a threadmind error naming where it broke.

Byte-level mutations of valid messages (flipped bytes, invalid UTF-8, lone surrogate escapes, truncation,
deep nesting, spliced fragments) are fed to every entry point: each either decodes (and then re-encodes to
the same message) or raises ``InvalidMessage``/``ValidationError`` with a JSON path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.codecs._content_strategies import PROPERTY, contents, json_values, messages
from tests.codecs._jsonb_writer import encode_jsonb

from threadmind.codecs import Message, decode_message, encode_json, message_from_dict, message_to_dict
from threadmind.codecs._json import checked_message, decode_content, encode_content
from threadmind.codecs._jsonb import decode_jsonb
from threadmind.errors import InvalidMessage, ThreadmindError, ValidationError

ISSUE_EXAMPLE = b'{"role":"assistant","content":{"parts":[{"type":"text","text":"\x80"}]},"id":""}'


@pytest.mark.parametrize(("buf", "path"), [
    pytest.param(ISSUE_EXAMPLE, "$.content.parts[0].text", id="invalid-utf8-in-a-part"),
    pytest.param(b'{"id":"m","role":"user","content":{"format":2,"parts":[{"type":"data-x","data":["\xff"]}]}}',
                 "$.content.parts[0].data[0]", id="invalid-utf8-in-an-unknown-part"),
    pytest.param(b'{"id":"m","role":"user","content":{"format":2,"parts":[],"note":"\xed\xa0\x80"}}',
                 "$.content.note", id="encoded-surrogate-in-an-unknown-key"),
    pytest.param(b'{"id":"\xc3","role":"user","content":"x"}', "$.id", id="truncated-utf8-in-the-id"),
    pytest.param(b'{"id":"m","role":"user","content":"\xff"}', "$.content", id="invalid-utf8-in-string-content"),
    pytest.param(b'{"id":"m","role":"user","content":[1,"\xff"]}', "$.content[1]", id="invalid-utf8-in-an-array"),
    pytest.param(b'{"id":"m","role":"user","content":null}', "$.content", id="null-content"),
    pytest.param(b'{"id":"m","role":"user","content":{"format":2,"parts":[' + b"[" * 5000 + b"]" * 5000 + b"]}}",
                 "$", id="nested-too-deeply"),
    pytest.param(b'{"id":"m","role":"user","content":{"format":2,"parts":[]},"createdAt":"0001-01-01T00:00:00+01:00"}',
                 "$.createdAt", id="created-at-before-year-one-in-utc"),
    pytest.param('{"id":"m","role":"user","content":{"format":2,"parts":[{"type":"text","text":"\ud800"}]}}',
                 "$.content.parts[0].text", id="lone-surrogate-in-text-input"),
])
def test_decode_message_names_the_broken_field(buf: bytes | str, path: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        decode_message(buf)
    assert f"`{path}`" in caught.value.message
    assert caught.value.code == "INVALID_MESSAGE_CONTENT"


def test_decode_content_and_decode_messages_name_the_field() -> None:
    from threadmind.codecs import decode_messages

    with pytest.raises(InvalidMessage, match=r"`\$\.parts\[0\]\.text`"):
        decode_content(b'{"format":2,"parts":[{"type":"text","text":"\x80"}]}')
    good = encode_json(Message.user("hi", id="a"))
    with pytest.raises(InvalidMessage, match=r"`\$\[1\]\.content\.parts\[0\]\.text`"):
        decode_messages(b"[" + good + b"," + ISSUE_EXAMPLE.replace(b'"id":""', b'"id":"b"') + b"]")
    with pytest.raises(InvalidMessage, match=r"`\$\[0\]`"):
        decode_messages(b'[1]')
    with pytest.raises(InvalidMessage, match=r"`\$`"):
        decode_messages(b'{"id": "a"}')


def test_nesting_json_cannot_hold_is_refused_on_the_way_out() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    row = {"id": "m", "role": "user", "content": {"format": 2, "parts": [{"type": "text", "text": "t",
                                                                          "metadata": {"d": deep}}]}}
    message = message_from_dict(row)  # Python objects: nothing to parse yet
    for write in (checked_message, encode_json, message_to_dict):
        with pytest.raises(InvalidMessage):
            write(message)


def test_message_from_dict_names_bad_times_and_keys() -> None:
    with pytest.raises(InvalidMessage, match="createdAt"):
        message_from_dict({"id": "m", "role": "user", "content": "x", "createdAt": "0001-01-01T00:00:00+01:00"})
    with pytest.raises(InvalidMessage, match="lone surrogate"):  # Python's json.loads lets "\\ud800" through
        message_from_dict({"\ud800id": "m", "role": "user", "content": "x"})
    with pytest.raises(InvalidMessage, match="lone surrogate"):
        message_from_dict({"id": "m", "role": "user", "content": {"format": 2, "parts": [
            {"type": "text", "text": "t", "\udc00": 1}]}})
    with pytest.raises(InvalidMessage, match=r"content keys must be strings"):
        message_from_dict({"id": "m", "role": "user", "content": {"format": 2, "parts": [], 7: "x"}})


def test_the_jsonb_decoder_raises_validation_errors_naming_the_value() -> None:
    with pytest.raises(ValidationError, match="thread 't1' metadata is malformed JSONB"):
        decode_jsonb(b"\x0c\x01", "thread 't1' metadata")
    with pytest.raises(ValidationError, match="too long"):  # an INT of more digits than Python converts
        decode_jsonb(b"\xe3" + (5000).to_bytes(4, "big") + b"1" * 5000)
    assert decode_jsonb(b"\xd6" + (402).to_bytes(2, "big") + b"0x" + b"f" * 400) == math.inf  # hex FLOAT5 > double
    with pytest.raises(ValidationError, match="not a JSONB blob"):
        decode_jsonb("{}")  # type: ignore[arg-type]


# -- byte-level fuzzing ----------------------------------------------------------------------------------------

_NASTY = [b"\x80", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\\ud800", b"\\udc00\\ud800", b"\\",
          b'"', b"{", b"}", b"[", b"]", b",", b":", b"null", b"1e999", b"-", b"0" * 30, b"[" * 1500, b"{\"a\":" * 1500,
          b"\x00", b'"format":3', b'"type":"text"', b'"parts":7', b'"createdAt":"0001-01-01T00:00:00+01:00"',
          b'"createdAt":"9999-12-31T23:59:59-01:00"', b'"content":5', b'"x":NaN', b"\xef\xbb\xbf"]


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """``valid`` bytes with one to four random edits."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        pos = draw(st.integers(min_value=0, max_value=len(data)))
        kind = draw(st.sampled_from(["flip", "insert", "insert", "delete", "truncate", "splice"]))
        if kind == "flip" and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(min_value=0, max_value=255))
        elif kind == "insert":
            data[pos:pos] = draw(st.sampled_from(_NASTY) | st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(min_value=1, max_value=8))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice" and data:
            start = draw(st.integers(min_value=0, max_value=len(data) - 1))
            data[pos:pos] = data[start:start + draw(st.integers(min_value=1, max_value=24))]
    return bytes(data)


# Half the documents escape non-ASCII text (`\u00e9`), half carry it as UTF-8.
_message_bytes = st.builds(lambda row, ascii: json.dumps(row, ensure_ascii=ascii).encode(), messages(), st.booleans())


def _threadmind_only(fn: Callable[[Any], Any], value: Any) -> Any:
    """``fn(value)``, or None when it raised a threadmind error naming a JSON path; anything else fails."""
    try:
        return fn(value)
    except ThreadmindError as exc:
        assert isinstance(exc, ValidationError), exc
        assert "`$" in exc.message, exc.message
        return None


class TestFuzz:
    @PROPERTY
    @given(mutated(_message_bytes))
    def test_decode_message(self, buf: bytes) -> None:
        message = _threadmind_only(decode_message, buf)
        if message is not None:  # what decodes re-encodes to the same message
            assert decode_message(encode_json(message)) == message
            assert checked_message(message) == message
        text = buf.decode("utf-8", "surrogateescape")  # text input, lone surrogates where the bytes were bad
        _threadmind_only(decode_message, text)

    @PROPERTY
    @given(st.lists(mutated(_message_bytes), min_size=1, max_size=3))
    def test_decode_messages(self, bufs: list[bytes]) -> None:
        from threadmind.codecs import decode_messages

        decoded = _threadmind_only(decode_messages, b"[" + b",".join(bufs) + b"]")
        if decoded is not None:
            assert decode_messages(encode_json(decoded)) == decoded

    @PROPERTY
    @given(mutated(contents.map(lambda c: json.dumps(c).encode())))
    def test_decode_content(self, buf: bytes) -> None:
        content = _threadmind_only(decode_content, buf)
        if content is not None:
            assert decode_content(encode_content(content)) == content

    @PROPERTY
    @given(mutated(_message_bytes))
    def test_message_from_dict(self, buf: bytes) -> None:
        try:  # Python's json is laxer (NaN, Infinity, lone surrogate escapes, huge numbers): all the better
            value = json.loads(buf)
        except (ValueError, RecursionError):
            return
        try:
            message = message_from_dict(value)
        except InvalidMessage:
            return
        try:
            checked_message(message)  # what a save does next: refuses what cannot be stored
        except InvalidMessage:
            return

    @PROPERTY
    @given(mutated(json_values.map(encode_jsonb)))
    def test_decode_jsonb(self, blob: bytes) -> None:
        try:
            decode_jsonb(blob, "fuzzed blob")
        except ValidationError as exc:
            assert "fuzzed blob" in exc.message


@PROPERTY
@given(json_values)
def test_jsonb_writer_matches_the_decoder(value: Any) -> None:
    assert json.dumps(decode_jsonb(encode_jsonb(value)), sort_keys=True) == json.dumps(value, sort_keys=True)
