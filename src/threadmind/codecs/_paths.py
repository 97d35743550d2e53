"""JSON paths in error messages, and turning any malformed input into :class:`InvalidMessage` that names one.

msgspec names the path of a value that fails validation (``$.content.parts[2]``) but not of one that fails to
decode at all (invalid UTF-8, bad syntax, nesting too deep). :func:`malformed` finds that path by decoding the
input again one container level at a time; it runs only on the error path.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import InvalidMessage

__all__ = ("DECODE_ERRORS", "at", "invalid", "join", "malformed")

DECODE_ERRORS = (msgspec.DecodeError, RecursionError, UnicodeError)
"""What decoding malformed JSON raises besides ``msgspec.ValidationError`` (catch that one first: it is a
``DecodeError``). ``UnicodeError``: text input holding a lone surrogate."""

_MAX_LOCATE_DEPTH = 64
_object = msgspec.json.Decoder(dict[str, msgspec.Raw])
_array = msgspec.json.Decoder(list[msgspec.Raw])
_value = msgspec.json.Decoder()


def join(path: str, key: str) -> str:
    """``path`` extended by an object key (``content``) or an index (``[3]``)."""
    if key.startswith("[") or not path:
        return path + key
    return f"{path}.{key}"


def at(path: str) -> str:
    """The JSONPath spelling msgspec uses: ``$``, ``$.content.parts[2]``, ``$[3].id``."""
    if not path:
        return "$"
    return "$" + path if path.startswith("[") else "$." + path


def invalid(exc: Exception, path: str) -> InvalidMessage:
    """A msgspec validation error re-rooted at ``path`` (its own ``$...`` path kept below it)."""
    text = str(exc)
    if "`$" in text:
        text = text.replace("`$", "`" + at(path))
    else:
        text = f"{text} - at `{at(path)}`"
    return InvalidMessage(f"invalid message: {text}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "JSON is nested too deeply"
    if isinstance(exc, UnicodeError):
        return "text holds a lone surrogate, which JSON cannot carry"
    return f"not valid JSON ({exc})"


def _as_bytes(buf: Any) -> bytes:
    if isinstance(buf, str):
        return buf.encode("utf-8", "surrogatepass")  # a lone surrogate becomes invalid UTF-8, found below
    return bytes(buf)


def _locate(buf: bytes, path: str, depth: int) -> str:
    """The path of the innermost value in ``buf`` that does not decode (``path`` when it is ``buf`` itself)."""
    if depth >= _MAX_LOCATE_DEPTH:
        return path
    items: list[tuple[str, msgspec.Raw]]
    try:
        items = [(k, v) for k, v in _object.decode(buf).items()]
    except msgspec.ValidationError:
        try:
            items = [(f"[{i}]", v) for i, v in enumerate(_array.decode(buf))]
        except msgspec.ValidationError:
            return path  # a scalar: the bad value itself
        except DECODE_ERRORS:
            return path
    except DECODE_ERRORS:
        return path  # the container itself is malformed (syntax, a key, or too deep to split)
    for key, raw in items:
        try:
            _value.decode(raw)
        except DECODE_ERRORS:
            return _locate(bytes(raw), join(path, key), depth + 1)
    return path


def malformed(exc: BaseException, buf: Any, path: str = "") -> InvalidMessage:
    """:class:`InvalidMessage` for input that does not decode, naming where below ``path`` it breaks."""
    where = _locate(_as_bytes(buf), path, 0)
    return InvalidMessage(f"invalid message: {_reason(exc)} - at `{at(where)}`")
