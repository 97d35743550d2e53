"""An incremental server-sent-events decoder: bytes in, the ``data`` of each complete event out.

Lines end at ``\\r\\n``, ``\\n`` or ``\\r`` only (as the SSE format defines them; a JSON payload holding a raw
U+2028 stays one line). An event's ``data`` lines are joined with ``\\n``; comments (``:``) and the
``event``, ``id`` and ``retry`` fields are skipped, since the chat API puts everything in ``data``.
"""

from __future__ import annotations

import re

__all__ = ("MAX_EVENT_BYTES", "EventTooLarge", "SSEDecoder")

MAX_EVENT_BYTES = 4 << 20
"""The most an unfinished line or event may hold before the stream is rejected (a server that never
ends a line cannot grow the buffer without bound)."""

_EOL = re.compile(rb"\r\n|\r|\n")


class EventTooLarge(ValueError):
    """A line or an event grew past :data:`MAX_EVENT_BYTES`."""


class SSEDecoder:
    """Feed it the body as it arrives (:meth:`feed`), then :meth:`close` at the end of the body."""

    __slots__ = ("_buffer", "_data", "_data_size", "_limit", "_started")

    def __init__(self, *, limit: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._data_size = 0
        self._limit = limit
        self._started = False

    def feed(self, chunk: bytes) -> list[str]:
        """The ``data`` of every event that ``chunk`` completes, in order.

        :raises EventTooLarge: a line or an event exceeds the limit.
        """
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[str] = []
        pos = 0
        for match in _EOL.finditer(buffer):
            if match.end() == len(buffer) and match.group() == b"\r":
                break  # a "\r\n" may be split across chunks: decide with the next one
            self._line(buffer[pos:match.start()], events)
            pos = match.end()
        self._buffer = buffer[pos:]
        if len(self._buffer) > self._limit:
            raise EventTooLarge(f"a server-sent event line exceeds {self._limit} bytes")
        return events

    def close(self) -> list[str]:
        """The events still pending when the body ends (a last event without its blank line is kept)."""
        events: list[str] = []
        if self._buffer:
            line, self._buffer = self._buffer.rstrip(b"\r"), b""
            self._line(line, events)
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[str]) -> None:
        if not self._started:
            self._started = True
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        if not raw:
            self._dispatch(events)
            return
        if raw[:1] == b":":
            return
        field, sep, value = raw.partition(b":")
        if field != b"data":
            return
        if sep and value[:1] == b" ":
            value = value[1:]
        self._data_size += len(value) + 1
        if self._data_size > self._limit:
            raise EventTooLarge(f"a server-sent event exceeds {self._limit} bytes")
        self._data.append(value.decode("utf-8", "replace"))

    def _dispatch(self, events: list[str]) -> None:
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
            self._data_size = 0
