"""The server-sent-events decoder: line endings, fields, comments, chunk boundaries anywhere, bounded buffers."""

from __future__ import annotations

import pytest

from threadmind.models._sse import EventTooLarge, SSEDecoder


def _decode_in_pieces(body: bytes, size: int) -> list[str]:
    decoder = SSEDecoder()
    events: list[str] = []
    for start in range(0, len(body), size):
        events += decoder.feed(body[start:start + size])
    return events + decoder.close()


class TestSSEDecoder:
    @pytest.mark.parametrize("eol", [pytest.param(b"\n", id="lf"), pytest.param(b"\r\n", id="crlf"),
                                     pytest.param(b"\r", id="cr")])
    @pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
    def test_events_survive_any_chunking_and_line_ending(self, eol: bytes, size: int) -> None:
        body = eol.join([
            b": keep-alive comment", b"",
            b"event: message", b"id: 7", b'data: {"a": "h\xc3\xa9llo \xf0\x9f\x8c\x8d"}', b"", b"",
            b"data:no-space", b"data:  two spaces", b"",
            b"retry: 100", b"data", b"",
            b"data: [DONE]", b"", b"",
        ])
        assert _decode_in_pieces(body, size) == ['{"a": "héllo 🌍"}', "no-space\n two spaces", "", "[DONE]"]

    def test_only_cr_and_lf_end_lines(self) -> None:
        body = 'data: {"text": "a\u2028b\x85c\x0cd"}\n\n'.encode()
        assert _decode_in_pieces(body, 1) == ['{"text": "a\u2028b\x85c\x0cd"}']

    def test_byte_order_mark_is_skipped_at_the_start_only(self) -> None:
        decoder = SSEDecoder()
        assert decoder.feed(b"\xef\xbb\xbfdata: x\n\n") == ["x"]
        assert decoder.feed(b"\xef\xbb\xbfdata: y\n\n") == []  # not a data field any more

    def test_close_dispatches_an_event_without_its_blank_line(self) -> None:
        decoder = SSEDecoder()
        assert decoder.feed(b"data: one\n\ndata: two") == ["one"]
        assert decoder.close() == ["two"]
        assert decoder.close() == []

    def test_a_line_that_never_ends_is_bounded(self) -> None:
        decoder = SSEDecoder(limit=64)
        decoder.feed(b"data: " + b"x" * 50)
        with pytest.raises(EventTooLarge, match="exceeds 64 bytes"):
            decoder.feed(b"x" * 20)

    def test_an_event_of_many_lines_is_bounded(self) -> None:
        decoder = SSEDecoder(limit=64)
        with pytest.raises(EventTooLarge, match="event exceeds"):
            decoder.feed(b"data: 0123456789\n" * 10)
