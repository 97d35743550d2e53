"""Mastra-compatible JSON for messages, threads and resources, with reusable msgspec codecs.

Decoding goes through private wire records whose ``parts`` are decoded one by one, so that an
unmodelled part type falls back to :class:`UnknownPart` instead of failing the whole message. Every
validation failure becomes :class:`~threadmind.errors.InvalidMessage` naming the JSON path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import msgspec

from ..errors import InvalidMessage
from ._time import to_iso, to_utc_ms, utc_now
from ._types import KnownPart, Message, MessageContent, Part, Resource, Role, TextPart, Thread, UnknownPart

__all__ = (
    "content_from_text",
    "decode_content",
    "decode_message",
    "encode_content",
    "encode_json",
    "message_from_dict",
    "message_to_dict",
    "part_from_dict",
    "resource_to_dict",
    "thread_to_dict",
)

T = TypeVar("T")


class _WireContent(msgspec.Struct, Generic[T], rename="camel"):
    format: int = 2
    parts: list[T] | None = None
    content: str | None = None
    metadata: dict[str, Any] | None = None
    tool_invocations: list[Any] | None = None
    reasoning: str | None = None
    experimental_attachments: list[Any] | None = None
    provider_metadata: dict[str, Any] | None = None
    annotations: list[Any] | None = None


class _WireMessage(msgspec.Struct, Generic[T], rename="camel"):
    id: str
    role: Role
    content: _WireContent[T] | str
    created_at: datetime | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    type: str | None = None


class _MessageOut(msgspec.Struct, rename="camel", omit_defaults=True):
    # Mastra's key order: id, content, role, createdAt, threadId, resourceId, type.
    id: str
    content: MessageContent
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
_content_json = msgspec.json.Decoder(_WireContent[msgspec.Raw])
# The fast path: every part of a known type, decoded in one pass. Any validation failure (an unknown part
# type, or a real error) falls back to the part-by-part path above, which tells the two apart.
_content_typed_json = msgspec.json.Decoder(_WireContent[KnownPart])
_message_json = msgspec.json.Decoder(_WireMessage[msgspec.Raw])


def _is_extension(exc: msgspec.ValidationError) -> bool:
    """True when the part is well-formed but of a type or shape we do not model (keep it verbatim)."""
    text = str(exc)
    return "unknown field" in text or (text.startswith("Invalid value") and text.endswith("at `$.type`"))


def _invalid(exc: Exception, prefix: str) -> InvalidMessage:
    text = str(exc).replace("`$", f"`$.{prefix}" if prefix else "`$")
    if "`$" not in text and prefix:
        text = f"{text} - at `$.{prefix}`"
    return InvalidMessage(f"invalid message: {text}")


def _part_from_raw(raw: msgspec.Raw, index: int, prefix: str) -> Part:
    try:
        part: Part = _part_json.decode(raw)
    except msgspec.ValidationError as exc:
        if not _is_extension(exc):
            raise _invalid(exc, f"{prefix}parts[{index}]") from exc
        value = _any_json.decode(raw)
        if not isinstance(value, dict):  # pragma: no cover - the typed decode rejects non-objects first
            raise _invalid(exc, f"{prefix}parts[{index}]") from exc
        return UnknownPart(value)
    return part


def part_from_dict(value: Any, index: int = 0, prefix: str = "content.") -> Part:
    """Convert one part object (a dict, or an existing part) into a typed part."""
    if isinstance(value, (UnknownPart, TextPart)) or isinstance(value, msgspec.Struct):
        return value  # type: ignore[return-value]
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"invalid message: Expected `object`, got `{type(value).__name__}` - at "
                             f"`$.{prefix}parts[{index}]`")
    try:
        part: Part = msgspec.convert(value, KnownPart, str_keys=True)
    except msgspec.ValidationError as exc:
        if not _is_extension(exc):
            raise _invalid(exc, f"{prefix}parts[{index}]") from exc
        return UnknownPart(value)
    return part


def _content(wire: _WireContent[Any] | str, build: Callable[[Any, int, str], Part], prefix: str) -> MessageContent:
    if isinstance(wire, str):
        return content_from_text(wire)
    if wire.format != 2:
        raise InvalidMessage(f"invalid message: content format must be 2, got {wire.format} - at `$.{prefix}format`")
    parts = [build(p, i, prefix) for i, p in enumerate(wire.parts)] if wire.parts else []
    return MessageContent(
        2, parts, wire.content, wire.metadata, wire.tool_invocations, wire.reasoning,
        wire.experimental_attachments, wire.provider_metadata, wire.annotations,
    )


def content_from_text(text: str) -> MessageContent:
    """Up-convert plain text to format 2: one text part and the ``content`` mirror."""
    return MessageContent(parts=[TextPart(text=text)], content=text)


def decode_content(buf: bytes | memoryview | str) -> MessageContent:
    """Decode a stored ``content`` JSON object (the ``mastra_messages.content`` column)."""
    try:
        typed = _content_typed_json.decode(buf)
    except msgspec.ValidationError:
        pass  # decoded again below, part by part
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"invalid message: content is not valid JSON ({exc})") from exc
    else:
        if typed.format == 2:
            return MessageContent(
                2, list(typed.parts) if typed.parts else [], typed.content, typed.metadata, typed.tool_invocations,
                typed.reasoning, typed.experimental_attachments, typed.provider_metadata, typed.annotations,
            )
    try:
        wire = _content_json.decode(buf)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, "content") from exc
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"invalid message: content is not valid JSON ({exc})") from exc
    return _content(wire, _part_from_raw, "")


def _message(wire: _WireMessage[Any], content: MessageContent) -> Message:
    if not wire.id:
        raise InvalidMessage("invalid message: `id` must be a non-empty string - at `$.id`")
    created = utc_now() if wire.created_at is None else to_utc_ms(wire.created_at)
    return Message(wire.id, wire.role, content, created, wire.thread_id, wire.resource_id,
                   None if wire.type == "v2" else wire.type)


def decode_message(buf: bytes | memoryview | str) -> Message:
    """Decode one message in Mastra's JSON shape; raise :class:`InvalidMessage` naming the bad field."""
    if not isinstance(buf, (bytes, bytearray, memoryview, str)):
        raise InvalidMessage(f"invalid message: expected JSON bytes or text, got {type(buf).__name__}")
    try:
        wire = _message_json.decode(buf)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, "") from exc
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"invalid message: not valid JSON ({exc})") from exc
    return _message(wire, _content(wire.content, _part_from_raw, "content."))


def message_from_dict(value: Mapping[str, Any] | Message) -> Message:
    """Build a :class:`Message` from Mastra's JSON shape as Python objects (camelCase keys)."""
    if isinstance(value, Message):
        return value
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"invalid message: expected an object, got {type(value).__name__}")
    try:
        wire = msgspec.convert(value, _WireMessage[Any], str_keys=True)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, "") from exc
    return _message(wire, _content(wire.content, part_from_dict, "content."))


def _out(message: Message) -> _MessageOut:
    return _MessageOut(message.id, message.content, message.role, to_iso(message.created_at),
                       message.thread_id, message.resource_id, message.type)


def message_to_dict(message: Message) -> dict[str, Any]:
    """Mastra's JSON shape as Python objects: camelCase keys, ``createdAt`` ISO with ms and ``Z``."""
    if not isinstance(message, Message):
        raise InvalidMessage(f"invalid message: expected a Message, got {type(message).__name__}")
    try:
        result: dict[str, Any] = msgspec.to_builtins(_out(message), enc_hook=_enc_hook)
    except (TypeError, ValueError, AttributeError, OverflowError, NotImplementedError) as exc:
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
        raw = _encoder.encode(content)
    except (TypeError, ValueError, OverflowError, NotImplementedError) as exc:  # ValueError: lone surrogates
        raise InvalidMessage(f"invalid message: {where}.content cannot be stored as JSON: {exc}") from exc
    try:
        decoded = decode_content(raw)
    except InvalidMessage as exc:
        text = str(exc)  # decode_content names some paths from the content (`$.parts`), some with it (`$.content`)
        if "`$.content" in text:
            text = text.replace("`$.", f"`$.{where}.", 1)
        elif "`$." in text:
            text = text.replace("`$.", f"`$.{where}.content.", 1)
        else:
            text = f"{text} (at {where}.content)"
        raise InvalidMessage(text) from exc
    if decoded != content:
        message = msgspec.structs.replace(message, content=decoded)
    return message


def encode_content(content: MessageContent) -> bytes:
    """Compact JSON of a content object, as stored in ``mastra_messages.content``."""
    return _encoder.encode(content)


def _wire(obj: Any) -> Any:
    if isinstance(obj, Message):
        return _out(obj)
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
    except (TypeError, ValueError, AttributeError, OverflowError, NotImplementedError) as exc:
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
