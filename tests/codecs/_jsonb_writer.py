"""A small SQLite JSONB writer for tests (the bundled SQLite predates ``jsonb()``), following SQLite's layout:
a header byte (type in the low nibble, payload size or a size-width code in the high nibble) and the payload.
Strings that need JSON escapes are written as TEXTJ (escaped, as ``jsonb()`` copies them), others as TEXT."""

from __future__ import annotations

import json
from typing import Any

__all__ = ("encode_jsonb",)


def _element(kind: int, payload: bytes) -> bytes:
    size = len(payload)
    if size <= 11:
        return bytes([(size << 4) | kind]) + payload
    for code, width in ((12, 1), (13, 2), (14, 4), (15, 8)):
        if size < 1 << (8 * width):
            return bytes([(code << 4) | kind]) + size.to_bytes(width, "big") + payload
    raise ValueError("payload too large")  # pragma: no cover


def encode_jsonb(value: Any) -> bytes:
    """One JSON value (dict/list/str/int/float/bool/None) as a JSONB blob."""
    if value is None:
        return b"\x00"
    if value is True:
        return b"\x01"
    if value is False:
        return b"\x02"
    if isinstance(value, int):
        return _element(3, str(value).encode())
    if isinstance(value, float):
        return _element(5, json.dumps(value).encode())
    if isinstance(value, str):
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]
        if escaped == value:
            return _element(7, value.encode())
        return _element(8, escaped.encode())
    if isinstance(value, list):
        return _element(11, b"".join(encode_jsonb(v) for v in value))
    if isinstance(value, dict):
        return _element(12, b"".join(encode_jsonb(str(k)) + encode_jsonb(v) for k, v in value.items()))
    raise TypeError(f"no JSONB form for {type(value).__name__}")
