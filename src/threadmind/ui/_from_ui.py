"""A ``useChat`` request body (AI SDK ``UIMessage``\\ s) into threadmind messages.

The result is content format 2 as Mastra's ``MessageList`` stores a UI message (``@mastra/core`` 1.71,
``AIV5Adapter.fromUIMessage`` / ``AIV6Adapter.fromUIMessage``): text, reasoning (with one text detail), file
(``data`` = the URL, ``mimeType``), ``source`` for ``source-url``, ``tool-invocation`` for ``tool-<name>`` and
``dynamic-tool`` parts, ``step-start``, and the parts threadmind does not model (``data-*``,
``source-document``, ...) kept as :class:`~threadmind.codecs.UnknownPart`. Ids are kept, so memory recognises
the messages a client echoes. Where Mastra loses information threadmind keeps it: a ``source-url`` keeps its
``sourceId`` and ``title``, a ``data-*`` part its ``id``, and only the AI SDK's tool-output envelope
(``{"type": "json", "value": ...}``) is unwrapped, not every object with a ``value`` key. Files are not also
mirrored into ``experimental_attachments`` (the parts carry them; the mirror would send them twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..codecs import (
    FilePart,
    Message,
    MessageContent,
    Part,
    ReasoningPart,
    SourcePart,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    ToolState,
    UnknownPart,
)
from ..codecs._time import from_epoch_ms, from_iso, to_utc_ms, utc_now
from ..errors import InvalidMessage, ValidationError

__all__ = ("UI_TOOL_STATES", "messages_from_ui")

UI_TOOL_STATES: Mapping[str, ToolState] = {
    "input-streaming": "partial-call",
    "input-available": "call",
    "approval-requested": "approval-requested",
    "approval-responded": "approval-responded",
    "output-available": "result",
    "output-error": "output-error",
    "output-denied": "output-denied",
}
"""AI SDK tool-part states and the ``ToolInvocation`` state each is stored as."""

_APPROVAL_STATES = frozenset({"approval-requested", "approval-responded", "output-denied"})
_UI_ROLES = ("user", "assistant", "system")
_TRIGGERS = ("submit-message", "regenerate-message")
# The AI SDK's ToolResultOutput envelope (`{"type": "json", "value": ...}`), which Mastra stores unwrapped.
_OUTPUT_ENVELOPES = frozenset({"text", "json", "error-text", "error-json", "content", "execution-denied"})
# UI part types kept verbatim (no threadmind record models them); `error` is what Mastra itself sends to UIs.
_KEPT_TYPES = frozenset({"custom", "reasoning-file", "steering-message", "error"})


def _fail(where: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"invalid UI message: `{where}` {problem}")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _required_str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _fail(f"{where}.{key}", f"must be a string, got {_kind(value)}")
    return value


def _optional_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise _fail(f"{where}.{key}", f"must be a string when present, got {_kind(value)}")


def _optional_bool(obj: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise _fail(f"{where}.{key}", f"must be a boolean when present, got {_kind(value)}")


def _optional_object(obj: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _fail(f"{where}.{key}", f"must be an object when present, got {_kind(value)}")
    return dict(value)


def _provider(metadata: dict[str, Any] | None) -> tuple[dict[str, Any] | None, int | None]:
    """Provider metadata without ``mastra.createdAt`` (where Mastra carries a part's stamp), and that stamp."""
    if metadata is None:
        return None, None
    mastra = metadata.get("mastra")
    if not isinstance(mastra, Mapping):
        return metadata, None
    stamp = mastra.get("createdAt")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
        return metadata, None
    rest = {k: v for k, v in mastra.items() if k != "createdAt"}
    stripped = {k: v for k, v in metadata.items() if k != "mastra"}
    if rest:
        stripped["mastra"] = rest
    return stripped or None, int(stamp)


def _merge_provider(call: dict[str, Any] | None, result: dict[str, Any] | None) -> dict[str, Any] | None:
    # A Mastra part has one slot for both halves; per provider the result's keys win (Mastra does the same).
    if call is None or result is None:
        return call if result is None else result
    merged = dict(call)
    for provider, value in result.items():
        before = merged.get(provider)
        merged[provider] = {**before, **value} if isinstance(before, Mapping) and isinstance(value, Mapping) else value
    return merged


def _tool_result(output: Any) -> Any:
    if (isinstance(output, Mapping) and output.get("type") in _OUTPUT_ENVELOPES and "value" in output
            and set(output) <= {"type", "value", "providerOptions"}):
        return output["value"]
    return output


def _approval(part: Mapping[str, Any], state: str, where: str) -> dict[str, Any] | None:
    value = part.get("approval")
    if value is None:
        if state in _APPROVAL_STATES:
            raise _fail(f"{where}.approval", f"is required in state {state!r}")
        return None
    if not isinstance(value, Mapping):
        raise _fail(f"{where}.approval", f"must be an object, got {_kind(value)}")
    approval: dict[str, Any] = {"id": _required_str(value, "id", f"{where}.approval")}
    approved = _optional_bool(value, "approved", f"{where}.approval")
    if approved is not None:
        approval["approved"] = approved
    reason = _optional_str(value, "reason", f"{where}.approval")
    if reason is not None:
        approval["reason"] = reason
    return approval


def _tool_part(part: Mapping[str, Any], part_type: str, where: str) -> ToolInvocationPart:
    if part_type == "dynamic-tool":
        tool_name = _required_str(part, "toolName", where)
    else:
        tool_name = part_type[5:]
    if not tool_name:
        raise _fail(f"{where}.type", "must name the tool after `tool-`")
    tool_call_id = _required_str(part, "toolCallId", where)
    ui_state = part.get("state")
    if not isinstance(ui_state, str) or ui_state not in UI_TOOL_STATES:
        raise _fail(f"{where}.state", f"must be one of {', '.join(UI_TOOL_STATES)}, got {ui_state!r}")
    raw_args = part.get("input")
    args = dict(raw_args) if isinstance(raw_args, Mapping) else {}
    result = _tool_result(part.get("output")) if ui_state == "output-available" else None
    error_text = _required_str(part, "errorText", where) if ui_state == "output-error" else None
    raw_input = part.get("rawInput") if ui_state == "output-error" else None
    provider, stamp = _provider(_merge_provider(_optional_object(part, "callProviderMetadata", where),
                                                _optional_object(part, "resultProviderMetadata", where)))
    invocation = ToolInvocation(
        state=UI_TOOL_STATES[ui_state], tool_call_id=tool_call_id, tool_name=tool_name, args=args, result=result,
        error_text=error_text, raw_input=raw_input, approval=_approval(part, ui_state, where),
    )
    preliminary = _optional_bool(part, "preliminary", where) if ui_state == "output-available" else None
    return ToolInvocationPart(
        tool_invocation=invocation, provider_executed=_optional_bool(part, "providerExecuted", where),
        title=_optional_str(part, "title", where), preliminary=preliminary, created_at=stamp,
        provider_metadata=provider,
    )


def _unknown(fields: dict[str, Any], stamp: int | None, provider: dict[str, Any] | None) -> UnknownPart:
    if provider is not None:
        fields["providerMetadata"] = provider
    if stamp is not None:
        fields["createdAt"] = stamp
    return UnknownPart(fields)


def _part(part: Any, where: str) -> Part:
    if not isinstance(part, Mapping):
        raise _fail(where, f"must be an object, got {_kind(part)}")
    part_type = part.get("type")
    if not isinstance(part_type, str):
        raise _fail(f"{where}.type", f"must be a string, got {_kind(part_type)}")
    if part_type.startswith("tool-") or part_type == "dynamic-tool":
        return _tool_part(part, part_type, where)
    if part_type.startswith("data-"):
        fields: dict[str, Any] = {"type": part_type}
        data_id = _optional_str(part, "id", where)
        if data_id is not None:
            fields["id"] = data_id
        if "data" in part:
            fields["data"] = part["data"]
        return UnknownPart(fields)
    if part_type == "step-start":
        return StepStartPart()
    provider, stamp = _provider(_optional_object(part, "providerMetadata", where))
    if part_type == "text":
        return TextPart(text=_required_str(part, "text", where), created_at=stamp, provider_metadata=provider)
    if part_type == "reasoning":
        text = _required_str(part, "text", where)
        return ReasoningPart(reasoning=text, details=[{"type": "text", "text": text}], created_at=stamp,
                             provider_metadata=provider)
    if part_type == "file":
        return FilePart(data=_required_str(part, "url", where), mime_type=_required_str(part, "mediaType", where),
                        filename=_optional_str(part, "filename", where), created_at=stamp, provider_metadata=provider)
    if part_type == "source-url":
        source: dict[str, Any] = {"url": _required_str(part, "url", where), "sourceType": "url",
                                  "id": _required_str(part, "sourceId", where)}
        title = _optional_str(part, "title", where)
        if title is not None:
            source["title"] = title
        if provider is not None:
            source["providerMetadata"] = provider
        return SourcePart(source=source, created_at=stamp, provider_metadata=provider)
    if part_type == "source-document":
        document: dict[str, Any] = {"type": part_type, "sourceId": _required_str(part, "sourceId", where),
                                    "mediaType": _required_str(part, "mediaType", where),
                                    "title": _required_str(part, "title", where)}
        filename = _optional_str(part, "filename", where)
        if filename is not None:
            document["filename"] = filename
        return _unknown(document, stamp, provider)
    if part_type in _KEPT_TYPES:
        kept = {k: v for k, v in part.items() if k != "providerMetadata"}
        return _unknown(kept, stamp, provider)
    raise _fail(f"{where}.type", f"is not a UI message part type: {part_type!r} (expected text, reasoning, file, "
                "source-url, source-document, step-start, tool-<name>, dynamic-tool or data-<name>)")


def _created_at(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc_ms(value)
    if isinstance(value, str):
        try:
            return to_utc_ms(from_iso(value))
        except ValueError:
            raise _fail(where, f"must be an ISO-8601 timestamp, got {value!r}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return to_utc_ms(from_epoch_ms(value))
        except (OverflowError, OSError, ValueError):
            raise _fail(where, f"is out of range: {value!r}") from None
    raise _fail(where, f"must be an ISO-8601 string or epoch milliseconds, got {_kind(value)}")


def _legacy_invocations(parts: Sequence[Part]) -> list[dict[str, Any]] | None:
    # Mastra's `toolInvocations` mirror: finished and pending calls, in its key order.
    mirror: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, ToolInvocationPart):
            continue
        inv = part.tool_invocation
        if inv.state == "result":
            mirror.append({"args": inv.args, "result": inv.result, "toolCallId": inv.tool_call_id,
                           "toolName": inv.tool_name, "state": "result"})
        elif inv.state in ("call", "partial-call"):
            mirror.append({"args": inv.args, "toolCallId": inv.tool_call_id, "toolName": inv.tool_name,
                           "state": inv.state})
    return mirror or None


def _message(raw: Any, where: str, now: datetime, allow_system: bool) -> Message | None:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be an object, got {_kind(raw)}")
    message_id = raw.get("id")
    if not isinstance(message_id, str) or not message_id:
        raise _fail(f"{where}.id", f"must be a non-empty string, got {message_id!r}")
    role = raw.get("role")
    if role not in _UI_ROLES:
        raise _fail(f"{where}.role", f"must be one of {', '.join(_UI_ROLES)}, got {role!r}")
    if role == "system" and not allow_system:
        raise _fail(f"{where}.role", "is 'system': a client may not send system instructions (the server opts in "
                    "with allow_system=True)")
    raw_parts = raw.get("parts")
    if not isinstance(raw_parts, (list, tuple)):
        raise _fail(f"{where}.parts", f"must be an array, got {_kind(raw_parts)}")
    metadata = _optional_object(raw, "metadata", where) or {}
    created_at = _created_at(metadata.pop("createdAt", None), f"{where}.metadata.createdAt")
    if created_at is None:
        created_at = _created_at(raw.get("createdAt"), f"{where}.createdAt") or now
    thread_id = _optional_str(metadata, "threadId", f"{where}.metadata")
    resource_id = _optional_str(metadata, "resourceId", f"{where}.metadata")
    metadata.pop("threadId", None)
    metadata.pop("resourceId", None)

    parts = [_part(p, f"{where}.parts[{j}]") for j, p in enumerate(raw_parts)]
    if not parts and role == "assistant":
        return None  # what useChat keeps of a reply that failed before its first part: nothing to store
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    reasoning = [p.reasoning for p in parts if isinstance(p, ReasoningPart)]
    if any(not (isinstance(p, TextPart) and p.text == "") for p in parts):
        parts = [p for p in parts if not (isinstance(p, TextPart) and p.text == "")]  # Mastra drops empty text
    content = MessageContent(
        parts=parts, content="".join(texts) if texts else None, metadata=metadata or None,
        tool_invocations=_legacy_invocations(parts), reasoning="\n".join(reasoning) if reasoning else None,
    )
    return Message(id=message_id, role=role, content=content, created_at=created_at, thread_id=thread_id,
                   resource_id=resource_id)


def messages_from_ui(body: Mapping[str, Any], *, allow_system: bool = False) -> list[Message]:
    """The messages of a ``useChat`` request body (``{"id", "messages": [UIMessage...], "trigger", "messageId"}``).

    A body that sends only the newest message as ``"message"`` is accepted too. Each message keeps its id;
    ``created_at`` comes from ``metadata.createdAt`` (ISO-8601 or epoch ms) when present, else now: an agent turn
    dates its new messages again once it holds the thread (after everything stored in it), so a client's clock
    never orders a thread; ``Memory.save_messages`` keeps these times. ``metadata.threadId``/``resourceId`` (as
    :func:`messages_to_ui` writes them) become the message's thread and resource, the rest of ``metadata``
    becomes ``content.metadata``. An assistant message without parts (what ``useChat`` keeps of a reply that
    failed before its first part) is left out.

    A browser is not trusted: a ``system`` message (which would reach the model as an instruction) is refused
    unless ``allow_system=True``, and so is a body with no message.

    :raises ValidationError: the body is malformed, has no message, or carries a system message; the message
        names the field (``messages[2].parts[0].type``, ``messages[0].role``, ``messages``).
    """
    if not isinstance(body, Mapping):
        raise ValidationError(f"invalid useChat request: the body must be a JSON object, got {_kind(body)}")
    trigger = body.get("trigger")
    if trigger is not None and trigger not in _TRIGGERS:
        raise ValidationError(f"invalid useChat request: `trigger` must be one of {', '.join(_TRIGGERS)}, "
                              f"got {trigger!r}")
    for key in ("id", "messageId"):
        value = body.get(key)
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"invalid useChat request: `{key}` must be a string, got {_kind(value)}")
    now = utc_now()
    if "messages" in body:
        raw = body["messages"]
        if not isinstance(raw, (list, tuple)):
            raise ValidationError(f"invalid useChat request: `messages` must be an array of UI messages, got "
                                  f"{_kind(raw)}")
        converted = [_message(m, f"messages[{i}]", now, allow_system) for i, m in enumerate(raw)]
        field = "messages"
    elif "message" in body:
        converted = [_message(body["message"], "message", now, allow_system)]
        field = "message"
    else:
        raise ValidationError("invalid useChat request: `messages` is missing (the body useChat sends has "
                              "`id`, `messages` and `trigger`)")
    messages = [m for m in converted if m is not None]
    if not messages:
        raise ValidationError(f"invalid useChat request: `{field}` holds no message to answer")
    return messages
