"""Mastra-compatible JSON for messages, threads and resources, with reusable msgspec codecs.

Decoding goes through private wire records whose ``parts`` are decoded one by one, so that an
unmodelled part type falls back to :class:`UnknownPart` instead of failing the whole message, and
content keys threadmind does not model land in ``MessageContent.extra``. Any malformed input (a failed
validation, bad syntax, invalid UTF-8, nesting too deep) becomes :class:`~threadmind.errors.InvalidMessage`
naming the JSON path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import msgspec

from ..errors import InvalidMessage
from ._paths import DECODE_ERRORS, at, invalid, join, malformed
from ._time import to_iso, to_utc_ms, utc_now
from ._types import (
    FilePart,
    KnownPart,
    Message,
    MessageContent,
    Part,
    ReasoningPart,
    Resource,
    Role,
    SourcePart,
    StepStartPart,
    TextPart,
    Thread,
    ToolInvocationPart,
    UnknownPart,
)

__all__ = (
    "CONTENT_KEYS",
    "checked_message",
    "content_from_text",
    "decode_content",
    "decode_message",
    "decode_messages",
    "encode_content",
    "encode_json",
    "message_from_dict",
    "message_to_dict",
    "new_id",
    "part_from_dict",
    "resource_to_dict",
    "thread_to_dict",
)

T = TypeVar("T")

CONTENT_KEYS: frozenset[str] = frozenset(
    f.encode_name for f in msgspec.structs.fields(MessageContent) if f.name != "extra"
)
"""The content keys :class:`MessageContent` models, by their JSON names; any other key goes to ``extra``."""

_PART_TYPES = (TextPart, ReasoningPart, ToolInvocationPart, StepStartPart, FilePart, SourcePart, UnknownPart)


class _WireContent(msgspec.Struct, Generic[T], rename="camel", forbid_unknown_fields=True):
    # forbid_unknown_fields: an unmodelled key fails the one-pass decode, and the slow path keeps it in `extra`.
    format: int = 2
    parts: list[T] | None = None
    content: str | None = None
    metadata: dict[str, Any] | None = None
    tool_invocations: list[Any] | None = None
    reasoning: str | None = None
    experimental_attachments: list[Any] | None = msgspec.field(default=None, name="experimental_attachments")
    provider_metadata: dict[str, Any] | None = None
    annotations: list[Any] | None = None


class _WireMessage(msgspec.Struct, Generic[T], rename="camel"):
    id: str
    role: Role
    content: T
    created_at: datetime | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    type: str | None = None


class _MessageOut(msgspec.Struct, rename="camel", omit_defaults=True):
    # Mastra's key order: id, content, role, createdAt, threadId, resourceId, type.
    id: str
    content: Any  # a MessageContent, or its JSON as msgspec.Raw when it carries `extra` keys
    role: str
    created_at: str
    thread_id: str | None = None
    resource_id: str | None = None
    type: str | None = None


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, UnknownPart):
        return obj.to_dict()
    if isinstance(obj, datetime):  # only reached inside free-form dicts handed to to_builtins
        return to_iso(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_part_json = msgspec.json.Decoder(KnownPart)
_any_json = msgspec.json.Decoder()
_object_json = msgspec.json.Decoder(dict[str, msgspec.Raw])
_content_json = msgspec.json.Decoder(_WireContent[msgspec.Raw])
# The fast path: every part of a known type and every key modelled, decoded in one pass. Any validation failure
# (an unknown part type or content key, or a real error) falls back to the path above, which tells them apart.
_content_typed_json = msgspec.json.Decoder(_WireContent[KnownPart])
_message_json = msgspec.json.Decoder(_WireMessage[msgspec.Raw])
_messages_json = msgspec.json.Decoder(list[msgspec.Raw])
_BYTES = (bytes, bytearray, memoryview, str)
_JSON_KINDS = {list: "array", int: "int", float: "float", bool: "bool", type(None): "null"}  # msgspec's names
_DICT_MESSAGE = _WireMessage[_WireContent[Any] | str]  # built once: msgspec.convert caches by the type object


# -- content keys threadmind does not model -------------------------------------------------------------


def _checked_extra(extra: Any) -> dict[str, Any]:
    if not isinstance(extra, Mapping):
        raise InvalidMessage(f"invalid message: `content.extra` must be a dict or None, got {type(extra).__name__}")
    for key in extra:
        if not isinstance(key, str):
            raise InvalidMessage(f"invalid message: `content.extra` keys must be strings, got {key!r}")
        if key in CONTENT_KEYS:
            raise InvalidMessage(f"invalid message: `content.extra` may not hold the modelled key {key!r}; "
                                 "set the MessageContent field instead")
    return dict(extra)


def _content_bytes(content: MessageContent) -> bytes:
    """The content's JSON object: its modelled fields, then its ``extra`` keys."""
    extra = content.extra if isinstance(content, MessageContent) else None
    if extra is None:
        return _encoder.encode(content)
    body = _encoder.encode(msgspec.structs.replace(content, extra=None))
    keys = _checked_extra(extra)
    if not keys:
        return body
    return body[:-1] + b"," + _encoder.encode(keys)[1:]  # the body always holds `format` and `parts`


def _content_out(content: Any) -> Any:
    """What a message's ``content`` encodes as: the struct itself, or its JSON when it has ``extra`` keys."""
    if isinstance(content, MessageContent) and content.extra is not None:
        return msgspec.Raw(_content_bytes(content))
    return content


# -- decoding --------------------------------------------------------------------------------------------


def _is_extension(exc: msgspec.ValidationError) -> bool:
    """True when the part is well-formed but of a type or shape we do not model (keep it verbatim)."""
    text = str(exc)
    return "unknown field" in text or (text.startswith("Invalid value") and text.endswith("at `$.type`"))


def _part_path(path: str, index: int) -> str:
    return join(path, f"parts[{index}]")


def _part_from_raw(raw: msgspec.Raw, index: int, path: str) -> Part:
    try:
        part: Part = _part_json.decode(raw)
    except msgspec.ValidationError as exc:
        if not _is_extension(exc):
            raise invalid(exc, _part_path(path, index)) from exc
        try:
            value = _any_json.decode(raw)
        except DECODE_ERRORS as inner:  # the typed decode stopped before the bad bytes
            raise malformed(inner, raw, _part_path(path, index)) from inner
        if not isinstance(value, dict):  # pragma: no cover - the typed decode rejects non-objects first
            raise invalid(exc, _part_path(path, index)) from exc
        return UnknownPart(value)
    except DECODE_ERRORS as exc:
        raise malformed(exc, raw, _part_path(path, index)) from exc
    return part


def part_from_dict(value: Any, index: int = 0, prefix: str = "content.") -> Part:
    """Convert one part object (a dict, or an existing part) into a typed part.

    ``prefix`` is the path of the part list's owner as it appears in error messages (``content.``).
    """
    if isinstance(value, _PART_TYPES):
        return value
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"invalid message: Expected `object`, got `{type(value).__name__}` - at "
                             f"`{at(_part_path(prefix.rstrip('.'), index))}`")
    try:
        part: Part = msgspec.convert(value, KnownPart, str_keys=True)
    except msgspec.ValidationError as exc:
        if not _is_extension(exc):
            raise invalid(exc, _part_path(prefix.rstrip("."), index)) from exc
        return UnknownPart(value)
    except (RecursionError, UnicodeError) as exc:  # a lone surrogate in a key, or nesting too deep
        raise malformed(exc, b"", _part_path(prefix.rstrip("."), index)) from exc
    return part


def _content(wire: _WireContent[Any], build: Callable[[Any, int, str], Part], path: str,
             extra: dict[str, Any] | None = None) -> MessageContent:
    if wire.format != 2:
        raise InvalidMessage(f"invalid message: content format must be 2, got {wire.format} - at "
                             f"`{at(join(path, 'format'))}`")
    parts = [build(p, i, path) for i, p in enumerate(wire.parts)] if wire.parts else []
    return MessageContent(
        2, parts, wire.content, wire.metadata, wire.tool_invocations, wire.reasoning,
        wire.experimental_attachments, wire.provider_metadata, wire.annotations, extra,
    )


def content_from_text(text: str) -> MessageContent:
    """Up-convert plain text to format 2: one text part and the ``content`` mirror."""
    return MessageContent(parts=[TextPart(text=text)], content=text)


def _is_unknown_key(exc: msgspec.ValidationError) -> bool:
    # Parts are Raw and the other fields free-form, so an unknown field can only be a content key.
    return str(exc).startswith("Object contains unknown field")


def _split_extra(buf: Any, path: str) -> tuple[_WireContent[msgspec.Raw], dict[str, Any]]:
    """The modelled keys of a content object as a wire record, and the others decoded (``extra``)."""
    try:
        fields = _object_json.decode(buf)
    except DECODE_ERRORS as exc:  # the first decode stopped at the unknown key, before the bad bytes
        raise malformed(exc, buf, path) from exc
    extra: dict[str, Any] = {}
    known: dict[str, msgspec.Raw] = {}
    for key, raw in fields.items():
        if key in CONTENT_KEYS:
            known[key] = raw
            continue
        try:
            extra[key] = _any_json.decode(raw)
        except DECODE_ERRORS as exc:
            raise malformed(exc, raw, join(path, key)) from exc
    try:
        wire = _content_json.decode(_encoder.encode(known))
    except msgspec.ValidationError as exc:
        raise invalid(exc, path) from exc
    except DECODE_ERRORS as exc:
        raise malformed(exc, buf, path) from exc
    return wire, extra


def _decode_content(buf: Any, path: str) -> MessageContent:
    """A content object's JSON; errors name paths below ``path`` (``content`` inside a message)."""
    try:
        typed = _content_typed_json.decode(buf)
    except msgspec.ValidationError:
        pass  # decoded again below, part by part
    except DECODE_ERRORS as exc:
        raise malformed(exc, buf, path) from exc
    else:
        if typed.format == 2:
            return MessageContent(
                2, list(typed.parts) if typed.parts else [], typed.content, typed.metadata, typed.tool_invocations,
                typed.reasoning, typed.experimental_attachments, typed.provider_metadata, typed.annotations,
            )
    extra: dict[str, Any] | None = None
    try:
        wire = _content_json.decode(buf)
    except msgspec.ValidationError as exc:
        if not _is_unknown_key(exc):
            raise invalid(exc, path) from exc
        wire, extra = _split_extra(buf, path)
    except DECODE_ERRORS as exc:
        raise malformed(exc, buf, path) from exc
    return _content(wire, _part_from_raw, path, extra)


def _check_input(buf: Any) -> None:
    if not isinstance(buf, _BYTES):
        raise InvalidMessage(f"invalid message: expected JSON bytes or text, got {type(buf).__name__}")


def decode_content(buf: bytes | memoryview | str) -> MessageContent:
    """Decode a stored ``content`` JSON object (the ``mastra_messages.content`` column).

    :raises InvalidMessage: naming the bad field by its path inside the content (``$.parts[2]``).
    """
    try:
        return _decode_content(buf, "")
    except TypeError:  # msgspec refuses anything but bytes-like and str
        _check_input(buf)
        raise


def _raw_content(raw: msgspec.Raw, path: str) -> MessageContent:
    """A message's ``content``: a format-2 object, or a plain string up-converted."""
    first = memoryview(raw)[:1].tobytes()
    if first == b'"':
        try:
            return content_from_text(_any_json.decode(raw))
        except DECODE_ERRORS as exc:
            raise malformed(exc, raw, path) from exc
    if first != b"{":
        try:
            value = _any_json.decode(raw)
        except DECODE_ERRORS as exc:
            raise malformed(exc, raw, path) from exc
        kind = _JSON_KINDS.get(type(value), "value")
        raise InvalidMessage(f"invalid message: Expected `object | str`, got `{kind}` - at `{at(path)}`")
    return _decode_content(raw, path)


def _message(wire: _WireMessage[Any], content: MessageContent, path: str) -> Message:
    if not wire.id:
        raise InvalidMessage(f"invalid message: `id` must be a non-empty string - at `{at(join(path, 'id'))}`")
    try:
        created = utc_now() if wire.created_at is None else to_utc_ms(wire.created_at)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+01:00 has no UTC equivalent
        raise InvalidMessage(f"invalid message: `createdAt` {wire.created_at} is out of range ({exc}) - at "
                             f"`{at(join(path, 'createdAt'))}`") from exc
    return Message(wire.id, wire.role, content, created, wire.thread_id, wire.resource_id,
                   None if wire.type == "v2" else wire.type)


def _decode_message(buf: Any, path: str) -> Message:
    try:
        wire = _message_json.decode(buf)
    except msgspec.ValidationError as exc:
        raise invalid(exc, path) from exc
    except DECODE_ERRORS as exc:
        raise malformed(exc, buf, path) from exc
    return _message(wire, _raw_content(wire.content, join(path, "content")), path)


def decode_message(buf: bytes | memoryview | str) -> Message:
    """Decode one message in Mastra's JSON shape.

    :raises InvalidMessage: naming the bad field by its JSON path (``$.content.parts[2]``).
    """
    _check_input(buf)
    return _decode_message(buf, "")


def decode_messages(buf: bytes | memoryview | str) -> list[Message]:
    """Decode a JSON array of messages (what ``encode_json`` writes for a list of them).

    :raises InvalidMessage: naming the bad field by its JSON path (``$[3].content``).
    """
    _check_input(buf)
    try:
        items = _messages_json.decode(buf)
    except msgspec.ValidationError as exc:
        raise invalid(exc, "") from exc
    except DECODE_ERRORS as exc:
        raise malformed(exc, buf, "") from exc
    return [_decode_message(raw, f"[{i}]") for i, raw in enumerate(items)]


def _split_dict(content: Mapping[Any, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A content dict's modelled keys, and the others (``extra``)."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, item in content.items():
        if not isinstance(key, str):
            raise InvalidMessage(f"invalid message: content keys must be strings, got {key!r} - at `{at(path)}`")
        (known if key in CONTENT_KEYS else extra)[key] = item
    return known, extra


def message_from_dict(value: Mapping[str, Any] | Message) -> Message:
    """Build a :class:`Message` from Mastra's JSON shape as Python objects (camelCase keys).

    :raises InvalidMessage: naming the bad field by its JSON path.
    """
    if isinstance(value, Message):
        return value
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"invalid message: expected an object, got {type(value).__name__}")
    fields = value if type(value) is dict else dict(value)
    content = fields.get("content")
    extra: dict[str, Any] | None = None
    if (type(content) is dict or isinstance(content, Mapping)) and not CONTENT_KEYS.issuperset(content):
        known, extra = _split_dict(content, "content")
        fields = {**fields, "content": known}
    try:
        wire = _dict_message(fields)
    except msgspec.ValidationError as exc:
        raise invalid(exc, "") from exc
    except (RecursionError, UnicodeError) as exc:  # a lone surrogate in a key, or nesting too deep
        raise malformed(exc, b"", "") from exc
    if isinstance(wire.content, str):
        return _message(wire, content_from_text(wire.content), "")
    return _message(wire, _content(wire.content, part_from_dict, "content", extra), "")


def _dict_message(fields: Mapping[str, Any]) -> _WireMessage[_WireContent[Any] | str]:
    return msgspec.convert(fields, _DICT_MESSAGE, str_keys=True)


# -- encoding --------------------------------------------------------------------------------------------


def _out(message: Message, content: Any) -> _MessageOut:
    return _MessageOut(message.id, content, message.role, to_iso(message.created_at),
                       message.thread_id, message.resource_id, message.type)


def message_to_dict(message: Message) -> dict[str, Any]:
    """Mastra's JSON shape as Python objects: camelCase keys, ``createdAt`` ISO with ms and ``Z``."""
    if not isinstance(message, Message):
        raise InvalidMessage(f"invalid message: expected a Message, got {type(message).__name__}")
    content = message.content
    extra = content.extra if isinstance(content, MessageContent) else None
    if extra is not None:
        content = msgspec.structs.replace(content, extra=None)
    try:
        result: dict[str, Any] = msgspec.to_builtins(_out(message, content), enc_hook=_enc_hook)
        if extra:
            result["content"].update(msgspec.to_builtins(_checked_extra(extra), enc_hook=_enc_hook))
    except InvalidMessage:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError, NotImplementedError, RecursionError) as exc:
        raise InvalidMessage(f"invalid message: message {message.id!r} cannot be converted: {exc}") from exc
    return result


def thread_to_dict(thread: Thread) -> dict[str, Any]:
    """``{id, resourceId, title, metadata, createdAt, updatedAt}`` as Mastra reports a thread."""
    return {"id": thread.id, "resourceId": thread.resource_id, "title": thread.title,
            "metadata": thread.metadata, "createdAt": to_iso(thread.created_at),
            "updatedAt": to_iso(thread.updated_at)}


def resource_to_dict(resource: Resource) -> dict[str, Any]:
    """``{id, workingMemory, metadata, createdAt, updatedAt}`` as Mastra reports a resource."""
    return {"id": resource.id, "workingMemory": resource.working_memory, "metadata": resource.metadata,
            "createdAt": to_iso(resource.created_at), "updatedAt": to_iso(resource.updated_at)}


_ROLES = ("user", "assistant", "system", "signal")


def checked_message(message: Message, where: str = "message") -> Message:
    """A ``Message`` built in Python, proven to store and read back: msgspec does not type-check ``__init__``,
    so ``parts=[1]``, a bad tool state, ``format=3`` or a lone surrogate would otherwise be written and break
    every later read of the thread. Returns the message with its content as a read would give it (parts given
    as dicts become typed parts).

    :raises InvalidMessage: naming the field (``where`` prefixes it, e.g. ``messages[3]``).
    """
    if not isinstance(message.role, str) or message.role not in _ROLES:
        raise InvalidMessage(f"invalid message: {where}.role must be one of {', '.join(_ROLES)}, got "
                             f"{message.role!r}")
    if not isinstance(message.created_at, datetime):
        raise InvalidMessage(f"invalid message: {where}.created_at must be a datetime, got "
                             f"{type(message.created_at).__name__}")
    if message.type is not None and not isinstance(message.type, str):
        raise InvalidMessage(f"invalid message: {where}.type must be a string or None")
    content = message.content
    if not isinstance(content, MessageContent):
        raise InvalidMessage(f"invalid message: {where}.content must be a MessageContent, got "
                             f"{type(content).__name__}")
    try:
        raw = _content_bytes(content)
    except InvalidMessage as exc:  # a bad `extra`
        raise InvalidMessage(f"{exc.message} (at {where}.content)") from exc
    except (TypeError, ValueError, OverflowError, NotImplementedError, RecursionError) as exc:  # lone surrogates, depth
        raise InvalidMessage(f"invalid message: {where}.content cannot be stored as JSON: {exc}") from exc
    try:
        decoded = decode_content(raw)
    except InvalidMessage as exc:
        text = exc.message  # decode_content names paths inside the content: `$`, `$.parts[0].text`
        if "`$" in text:
            text = text.replace("`$", f"`$.{where}.content", 1)
        else:  # pragma: no cover - every decode_content error names a path
            text = f"{text} (at {where}.content)"
        raise InvalidMessage(text) from exc
    if decoded != content:
        message = msgspec.structs.replace(message, content=decoded)
    return message


def encode_content(content: MessageContent) -> bytes:
    """Compact JSON of a content object, as stored in ``mastra_messages.content`` (``extra`` keys included).

    :raises InvalidMessage: ``extra`` is not a dict keyed by unmodelled content keys.
    """
    return _content_bytes(content)


def _wire(obj: Any) -> Any:
    if isinstance(obj, Message):
        return _out(obj, _content_out(obj.content))
    if isinstance(obj, MessageContent):
        return _content_out(obj)
    if isinstance(obj, Thread):
        return thread_to_dict(obj)
    if isinstance(obj, Resource):
        return resource_to_dict(obj)
    if isinstance(obj, (list, tuple)):
        return [_wire(o) for o in obj]
    return obj


def encode_json(obj: Any) -> bytes:
    """JSON bytes in Mastra's shapes (messages, threads, resources, lists of them, or any msgspec value).

    :raises InvalidMessage: something in ``obj`` has no JSON form (an arbitrary object, a lone surrogate).
    """
    try:
        return _encoder.encode(_wire(obj))
    except InvalidMessage:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError, NotImplementedError, RecursionError) as exc:
        raise InvalidMessage(f"invalid message: cannot encode as JSON: {exc}") from exc


def new_id() -> str:
    """A fresh message/thread id: a random UUID v4 string, as Mastra generates (``crypto.randomUUID()``).

    Formatted directly from 16 random bytes (version and variant bits set), which is what ``uuid.uuid4()``
    does without building a ``UUID`` object: less than half the cost, twice per agent turn.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
