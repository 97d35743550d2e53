"""Conversion of what ``MessageList.add`` accepts (text, AI SDK v4 core/UI dicts, legacy v1, DB dicts) to Messages."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from ..codecs import (
    FilePart,
    Message,
    MessageContent,
    Part,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
    message_from_dict,
)
from ..codecs._json import part_from_dict
from ..codecs._time import from_epoch_ms, from_iso, to_utc_ms
from ..errors import InvalidMessage

__all__ = ("ConvertContext", "missing", "part_type", "stamp_parts", "to_message")

_ROLES = frozenset({"user", "assistant", "system", "signal", "tool"})


@dataclass(frozen=True, slots=True)
class ConvertContext:
    """What a conversion needs from the list: ids, clock, memory info and earlier tool calls."""

    source: str
    thread_id: str | None
    resource_id: str | None
    new_id: Callable[[], str]
    new_time: Callable[[], datetime]
    find_tool_args: Callable[[str], Any]


def part_type(part: Part) -> str:
    """The ``type`` tag of a typed or unknown part."""
    if isinstance(part, UnknownPart):
        return part.type
    tag = type(part).__struct_config__.tag
    return str(tag)


def stamp_parts(message: Message, now_ms: int) -> Message:
    """Give every part without ``created_at`` the stamp ``now_ms`` (Mastra stamps non-memory parts)."""
    parts: list[Part] = []
    changed = False
    for part in message.content.parts:
        if part.created_at is not None:
            parts.append(part)
        elif isinstance(part, UnknownPart):
            parts.append(UnknownPart({**part.to_dict(), "createdAt": now_ms}))
            changed = True
        else:
            parts.append(msgspec.structs.replace(part, created_at=now_ms))
            changed = True
    if not changed:
        return message
    return msgspec.structs.replace(message, content=msgspec.structs.replace(message.content, parts=parts))


def to_message(value: str | Message | Mapping[str, Any], ctx: ConvertContext, batch: Sequence[Message] = ()) -> Message:
    """Convert one accepted input into a :class:`Message` with id, created_at, thread and resource filled.

    ``batch`` holds the messages already converted in the same ``add`` call (tool results look up their
    call's args there first).
    """
    if isinstance(value, str):
        return Message(ctx.new_id(), "user", MessageContent(parts=_text_parts(value), content=value),
                       ctx.new_time(), ctx.thread_id, ctx.resource_id)
    if isinstance(value, Message):
        return _fill_memory_info(value, ctx)
    if not isinstance(value, Mapping):
        raise InvalidMessage(f"invalid message: expected a string, Message or dict, got {type(value).__name__}")
    content = value.get("content")
    if isinstance(content, Mapping) and content.get("format") == 2:
        return _from_db_dict(value, content, ctx)
    return _from_core_dict(value, ctx, batch)


def _fill_memory_info(message: Message, ctx: ConvertContext) -> Message:
    changes: dict[str, Any] = {}
    if message.thread_id is None and ctx.thread_id is not None:
        changes["thread_id"] = ctx.thread_id
    if message.resource_id is None and ctx.resource_id is not None:
        changes["resource_id"] = ctx.resource_id
    return msgspec.structs.replace(message, **changes) if changes else message


def _created_at(value: Mapping[str, Any], ctx: ConvertContext) -> datetime:
    raw = value.get("createdAt", value.get("created_at"))
    if raw is None:
        return ctx.new_time()
    try:
        if isinstance(raw, datetime):
            return to_utc_ms(raw)
        if isinstance(raw, str):
            return to_utc_ms(from_iso(raw.replace("Z", "+00:00")))
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return to_utc_ms(from_epoch_ms(raw))
    except (ValueError, OverflowError, OSError) as exc:  # not ISO-8601, NaN, or beyond the years datetime holds
        raise InvalidMessage(f"invalid message: `createdAt` {raw!r} is not a valid time ({exc}) - at "
                             "`$.createdAt`") from exc
    raise InvalidMessage(f"invalid message: `createdAt` must be a datetime or ISO string, got {type(raw).__name__}")


def _id(value: Mapping[str, Any], ctx: ConvertContext) -> str:
    raw = value.get("id")
    if raw is None or raw == "":
        return ctx.new_id()
    if not isinstance(raw, str):
        raise InvalidMessage(f"invalid message: `id` must be a string, got {type(raw).__name__}")
    return raw


def _from_db_dict(value: Mapping[str, Any], content: Mapping[str, Any], ctx: ConvertContext) -> Message:
    if not isinstance(content.get("parts"), list) and not isinstance(content.get("content"), str):
        raise InvalidMessage("invalid message: `content` has neither `parts` nor a `content` string",
                             code="INVALID_MESSAGE_CONTENT")
    filled = dict(value)
    filled["id"] = _id(value, ctx)
    filled["createdAt"] = _created_at(value, ctx)
    filled.pop("created_at", None)
    if filled.get("threadId") is None and ctx.thread_id is not None:
        filled["threadId"] = ctx.thread_id
    if filled.get("resourceId") is None and ctx.resource_id is not None:
        filled["resourceId"] = ctx.resource_id
    return message_from_dict(filled)


def _text_parts(text: str, provider_metadata: dict[str, Any] | None = None) -> list[Part]:
    return [TextPart(text=text, provider_metadata=provider_metadata)] if text else []


def _provider(part: Mapping[str, Any]) -> dict[str, Any] | None:
    value = part.get("providerOptions", part.get("providerMetadata", part.get("experimental_providerMetadata")))
    return dict(value) if isinstance(value, Mapping) else None


def _data_string(data: Any, field: str) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(data)).decode("ascii")
    raise InvalidMessage(f"invalid message: `{field}` must be a string (base64 or URL) or bytes, "
                         f"got {type(data).__name__}")


_IMAGE_SIGNATURES = (("iVBORw0KGgo", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"),
                     ("UklGR", "image/webp"))


def _image_mime(data: str) -> str:
    if data.startswith("data:") and ";" in data:
        return data[5:data.index(";")]
    for prefix, mime in _IMAGE_SIGNATURES:
        if data.startswith(prefix):
            return mime
    return "image/*"


def _tool_result(part: Mapping[str, Any], args: Any) -> ToolInvocation:
    return ToolInvocation(state="result", tool_call_id=_str_field(part, "toolCallId"),
                          tool_name=_str_field(part, "toolName"), args=args, result=part.get("result"),
                          is_error=True if part.get("isError") else None)


def _str_field(part: Mapping[str, Any], name: str) -> str:
    value = part.get(name)
    if not isinstance(value, str):
        raise InvalidMessage(f"invalid message: `{name}` of a {part.get('type')} part must be a string")
    return value


def _core_parts(content: list[Any], role: str, ctx: ConvertContext, batch: Sequence[Message]) -> list[Part]:
    """Core content parts → DB parts (tool results fold into their call; empty text dropped)."""
    parts: list[Part] = []
    for index, raw in enumerate(content):
        if isinstance(raw, str):
            raw = {"type": "text", "text": raw}
        if not isinstance(raw, Mapping):
            raise InvalidMessage(f"invalid message: content[{index}] must be an object, got {type(raw).__name__}")
        kind = raw.get("type")
        provider = _provider(raw)
        if kind == "text":
            text = raw.get("text")
            if not isinstance(text, str):
                raise InvalidMessage(f"invalid message: `text` of content[{index}] must be a string")
            parts.extend(_text_parts(text, provider))
        elif kind == "reasoning":
            text = raw.get("text", raw.get("reasoning", ""))
            detail: dict[str, Any] = {"type": "text", "text": text}
            if raw.get("signature") is not None:
                detail["signature"] = raw["signature"]
            parts.append(ReasoningPart(reasoning=str(text), details=[detail], provider_metadata=provider))
        elif kind == "redacted-reasoning":
            parts.append(ReasoningPart(reasoning="", details=[{"type": "redacted", "data": raw.get("data")}],
                                       provider_metadata=provider))
        elif kind == "tool-call":
            invocation = ToolInvocation(state="call", tool_call_id=_str_field(raw, "toolCallId"),
                                        tool_name=_str_field(raw, "toolName"), args=raw.get("args", raw.get("input")))
            parts.append(ToolInvocationPart(tool_invocation=invocation, provider_metadata=provider,
                                            provider_executed=raw.get("providerExecuted")))
        elif kind == "tool-result":
            _add_tool_result(parts, raw, provider, ctx, batch)
        elif kind in ("file", "image"):
            field = "data" if kind == "file" else "image"
            data = _data_string(raw.get(field), field)
            mime = raw.get("mimeType", raw.get("mediaType"))
            if kind == "image" and not isinstance(mime, str):
                mime = _image_mime(data)
            parts.append(FilePart(data=data, mime_type=mime if isinstance(mime, str) else None,
                                  filename=raw.get("filename"), provider_metadata=provider))
        else:
            parts.append(part_from_dict(raw, index, "content"))
    if role == "assistant":
        parts = _insert_step_starts(parts)
    return parts


def _add_tool_result(parts: list[Part], raw: Mapping[str, Any], provider: dict[str, Any] | None,
                     ctx: ConvertContext, batch: Sequence[Message]) -> None:
    call_id = _str_field(raw, "toolCallId")
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
            invocation = _tool_result(raw, part.tool_invocation.args)
            merged = {**(part.provider_metadata or {}), **(provider or {})} or None
            parts[index] = msgspec.structs.replace(part, tool_invocation=invocation, provider_metadata=merged)
            return
    args = _args_in(batch, call_id)
    if args is _MISSING:
        args = ctx.find_tool_args(call_id)
    parts.append(ToolInvocationPart(tool_invocation=_tool_result(raw, {} if args is _MISSING or args is None else args),
                                    provider_metadata=provider))


_MISSING: Any = object()


def missing() -> Any:
    """The sentinel ``find_tool_args`` returns when no call with that id is known."""
    return _MISSING


def _args_in(messages: Sequence[Message], call_id: str) -> Any:
    for message in reversed(messages):
        for part in reversed(message.content.parts):
            if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
                return part.tool_invocation.args
    return _MISSING


def _insert_step_starts(parts: list[Part]) -> list[Part]:
    """Put a ``step-start`` before each text part that directly follows a tool invocation."""
    out: list[Part] = []
    for part in parts:
        if part_type(part) == "text" and out and isinstance(out[-1], ToolInvocationPart):
            out.append(StepStartPart())
        out.append(part)
    return out


def _from_core_dict(value: Mapping[str, Any], ctx: ConvertContext, batch: Sequence[Message]) -> Message:
    """AI SDK v4 core / UI messages and the legacy v1 shape (``threadId`` key, string or core content)."""
    role = value.get("role")
    if role not in _ROLES:
        raise InvalidMessage(f"invalid message: `role` must be one of user, assistant, system, signal, tool; "
                             f"got {role!r}")
    content = value.get("content")
    ui_parts = value.get("parts")
    if not isinstance(content, (str, list)) and not isinstance(ui_parts, list):
        raise InvalidMessage("invalid message: no usable `content` (a string or a list of parts) and no `parts`",
                             code="INVALID_MESSAGE_CONTENT")
    out_role = "assistant" if role == "tool" else str(role)
    text: str | None = None
    if isinstance(ui_parts, list):
        parts = [part_from_dict(p, i, "") for i, p in enumerate(ui_parts)]
        if out_role == "assistant":
            parts = _insert_step_starts(parts)
        text = content if isinstance(content, str) else None
    elif isinstance(content, str):
        parts = _text_parts(content)
        text = content
    else:
        assert isinstance(content, list)
        if (ctx.source == "response" and len(content) == 1 and isinstance(content[0], Mapping)
                and content[0].get("type") == "text" and isinstance(content[0].get("text"), str)
                and _provider(content[0]) is None):
            text = content[0]["text"]
            parts = _text_parts(content[0]["text"])
        else:
            parts = _core_parts(content, out_role, ctx, batch)
    metadata = value.get("metadata")
    message_provider = _provider(value)
    thread_id = value.get("threadId")
    resource_id = value.get("resourceId")
    kind = value.get("type")
    return Message(
        id=_id(value, ctx),
        role=out_role,  # type: ignore[arg-type]  # checked against _ROLES above
        content=MessageContent(
            parts=parts, content=text, metadata=dict(metadata) if isinstance(metadata, Mapping) else None,
            provider_metadata=message_provider,
            tool_invocations=list(value["toolInvocations"]) if isinstance(value.get("toolInvocations"), list) else None,
            experimental_attachments=(list(value["experimental_attachments"])
                                      if isinstance(value.get("experimental_attachments"), list) else None),
            # AI SDK v4 UI messages carry these beside `parts`; Mastra keeps them in the content
            reasoning=value["reasoning"] if isinstance(value.get("reasoning"), str) and value["reasoning"] else None,
            annotations=list(value["annotations"]) if isinstance(value.get("annotations"), list) else None,
        ),
        created_at=_created_at(value, ctx),
        thread_id=thread_id if isinstance(thread_id, str) else ctx.thread_id,
        resource_id=resource_id if isinstance(resource_id, str) else ctx.resource_id,
        type=kind if isinstance(kind, str) and kind not in ("v2", "text", "tool-call", "tool-result") else None,
    )
