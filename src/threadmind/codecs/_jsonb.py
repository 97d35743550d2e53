"""Decoder for SQLite's binary JSONB format (SQLite >= 3.45), which Mastra writes for metadata columns.

Python's bundled SQLite here is older than 3.45, so ``json(blob)`` fails ("malformed JSON"); we decode the
blobs ourselves. Format: every element is a header byte (low nibble = type, high nibble = payload size, or
12/13/14/15 meaning a 1/2/4/8-byte big-endian size follows) and then its payload. Containers hold their
children back to back; an object alternates label (a text element) and value.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ValidationError

__all__ = ("decode_jsonb",)

_NULL, _TRUE, _FALSE, _INT, _INT5, _FLOAT, _FLOAT5 = 0, 1, 2, 3, 4, 5, 6
_TEXT, _TEXTJ, _TEXT5, _TEXTRAW, _ARRAY, _OBJECT = 7, 8, 9, 10, 11, 12
_MAX_DEPTH = 1000  # SQLite's JSON_MAX_DEPTH

_INT_RE = re.compile(r"-?[0-9]+")
_INT5_RE = re.compile(r"([+-]?)(?:0[xX]([0-9a-fA-F]+)|([0-9]+))")
_FLOAT_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_FLOAT5_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_ESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|\r\n|[\s\S])|\\\Z")
_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_JSON5_ESCAPES = {**_JSON_ESCAPES, "'": "'", "v": "\v", "0": "\0", "\n": "", "\r\n": "", "\r": "",
                  "\u2028": "", "\u2029": ""}


def _unescape(text: str, json5: bool) -> str:
    """Resolve JSON (TEXTJ) or JSON5 (TEXT5) escapes; surrogate pairs become one code point."""
    table = _JSON5_ESCAPES if json5 else _JSON_ESCAPES
    has_surrogate = False

    def replace(match: re.Match[str]) -> str:
        nonlocal has_surrogate
        esc = match.group(1)
        if esc is None:
            raise ValueError("malformed JSONB: text ends with a lone backslash")
        if len(esc) == 5 and esc[0] == "u":
            code = int(esc[1:], 16)
            has_surrogate = has_surrogate or 0xD800 <= code <= 0xDFFF
            return chr(code)
        if json5 and len(esc) == 3 and esc[0] == "x":
            return chr(int(esc[1:], 16))
        try:
            return table[esc]
        except KeyError:
            raise ValueError(f"malformed JSONB: invalid escape \\{esc!r} in text") from None

    out = _ESCAPE_RE.sub(replace, text)
    if has_surrogate:
        out = out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return out


def _decimal(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise ValueError(f"malformed JSONB: an integer of {len(digits)} digits is too long") from None


def _number(kind: int, raw: bytes) -> Any:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("malformed JSONB: non-ASCII number payload") from None
    if kind == _INT:
        if not _INT_RE.fullmatch(text):
            raise ValueError(f"malformed JSONB: bad INT payload {text[:40]!r}")
        return _decimal(text)
    if kind == _FLOAT:
        if not _FLOAT_RE.fullmatch(text):
            raise ValueError(f"malformed JSONB: bad FLOAT payload {text[:40]!r}")
        return float(text)
    if kind == _INT5:
        match = _INT5_RE.fullmatch(text)
        if match is None:
            raise ValueError(f"malformed JSONB: bad INT5 payload {text[:40]!r}")
        value = int(match.group(2), 16) if match.group(2) else _decimal(match.group(3))
        return -value if match.group(1) == "-" else value
    # FLOAT5: JSON5 spellings (leading '+', '.5', '5.', Infinity, NaN, hex).
    sign = -1.0 if text.startswith("-") else 1.0
    body = text[1:] if text[:1] in "+-" else text
    if body == "Infinity":
        return sign * float("inf")
    if body == "NaN":
        return None  # SQLite's json() renders NaN as null
    if body[:2] in ("0x", "0X") and re.fullmatch(r"[0-9a-fA-F]+", body[2:]):
        try:
            return sign * float(int(body[2:], 16))
        except OverflowError:
            return sign * float("inf")  # what JavaScript's Number gives
    if not _FLOAT5_RE.fullmatch(text):
        raise ValueError(f"malformed JSONB: bad FLOAT5 payload {text[:40]!r}")
    return float(body) * sign


def _text(kind: int, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("malformed JSONB: text is not valid UTF-8") from None
    if kind == _TEXTJ:
        return _unescape(text, json5=False) if "\\" in text else text
    if kind == _TEXT5:
        return _unescape(text, json5=True) if "\\" in text else text
    return text  # TEXT and TEXTRAW hold the characters themselves


class _Frame:
    """An open container: its value, where its payload ends, and (objects) the pending label."""

    __slots__ = ("end", "key", "value")

    def __init__(self, value: list[Any] | dict[str, Any], end: int) -> None:
        self.value = value
        self.end = end
        self.key: str | None = None


def decode_jsonb(blob: bytes | bytearray | memoryview, where: str = "value") -> Any:
    """Decode one SQLite JSONB value into Python (dict/list/str/int/float/bool/None).

    :param where: what the blob is (``thread 't1' metadata``), named in the error.
    :raises ValidationError: (a ``ValueError``) the blob is truncated, has trailing bytes, a reserved type, a
        bad payload or an object label that is not text.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise ValidationError(f"{where} is not a JSONB blob (got {type(blob).__name__})")
    try:
        return _decode(bytes(blob))
    except (ValueError, OverflowError) as exc:  # OverflowError: a hex FLOAT5 too large for a float
        raise ValidationError(f"{where} is {exc}") from exc


def _decode(data: bytes) -> Any:
    size = len(data)
    if size == 0:
        raise ValueError("malformed JSONB: empty blob")
    stack: list[_Frame] = []
    pos = 0
    while True:
        limit = stack[-1].end if stack else size
        # -- header ------------------------------------------------------------------------------
        if pos >= limit:
            raise ValueError(f"malformed JSONB: element expected at offset {pos}")
        head = data[pos]
        kind, code = head & 0x0F, head >> 4
        start = pos + 1
        if code <= 11:
            length = code
        else:
            width = 1 << (code - 12)  # 12→1, 13→2, 14→4, 15→8 bytes
            if start + width > limit:
                raise ValueError(f"malformed JSONB: truncated size at offset {pos}")
            length = int.from_bytes(data[start:start + width], "big")
            start += width
        end = start + length
        if end > limit:
            raise ValueError(f"malformed JSONB: element at offset {pos} overruns its container")
        frame = stack[-1] if stack else None
        if frame is not None and isinstance(frame.value, dict) and frame.key is None and not _TEXT <= kind <= _TEXTRAW:
            raise ValueError(f"malformed JSONB: object label at offset {pos} is not text")
        # -- payload -----------------------------------------------------------------------------
        value: Any
        if kind <= _FALSE:
            if length:
                raise ValueError(f"malformed JSONB: null/true/false with a payload at offset {pos}")
            value = None if kind == _NULL else kind == _TRUE
        elif kind <= _FLOAT5:
            value = _number(kind, data[start:end])
        elif kind <= _TEXTRAW:
            value = _text(kind, data[start:end])
        elif kind <= _OBJECT:
            container: list[Any] | dict[str, Any] = [] if kind == _ARRAY else {}
            if length:
                if len(stack) >= _MAX_DEPTH:
                    raise ValueError("malformed JSONB: nesting deeper than 1000")
                stack.append(_Frame(container, end))
                pos = start
                continue
            value = container
        else:
            raise ValueError(f"malformed JSONB: reserved element type {kind} at offset {pos}")
        pos = end
        # -- attach the finished value, closing every container that ends here --------------------
        while True:
            if not stack:
                if pos != size:
                    raise ValueError(f"malformed JSONB: {size - pos} trailing bytes")
                return value
            top = stack[-1]
            if isinstance(top.value, dict):
                if top.key is None:
                    top.key = value
                else:
                    top.value[top.key] = value
                    top.key = None
            else:
                top.value.append(value)
            if pos != top.end:
                break
            if top.key is not None:
                raise ValueError("malformed JSONB: object label without a value")
            stack.pop()
            value = top.value
