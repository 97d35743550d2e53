"""Stored messages back into AI SDK ``UIMessage`` dicts, so a front end can load a thread.

Follows Mastra's ``AIV6Adapter.toUIMessage`` (``@mastra/core`` 1.71): ``metadata`` carries the message's
``createdAt`` (ISO-8601), ``threadId`` and ``resourceId`` next to ``content.metadata``; a part's ``created_at``
travels as ``providerMetadata.mastra.createdAt``; tool invocations become ``tool-<name>`` parts in the matching
state. The output passes the ``ai`` package's ``validateUIMessages`` (7.0.173), and
:func:`~threadmind.ui.messages_from_ui` reads it back to the same parts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..codecs import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    SourcePart,
    StepStartPart,
    TextPart,
    ToolInvocationPart,
    UnknownPart,
)
from ..codecs._time import to_iso
from ..errors import ValidationError

__all__ = ("messages_to_ui",)

_UI_STATES = {
    "partial-call": "input-streaming",
    "call": "input-available",
    "approval-requested": "approval-requested",
    "approval-responded": "approval-responded",
    "result": "output-available",
    "output-error": "output-error",
    "output-denied": "output-denied",
}
# Kept parts the AI SDK's UIMessage schema knows; other unmodelled parts (Mastra's `error`) are not sent.
_KEPT_TYPES = frozenset({"source-document", "custom", "reasoning-file", "steering-message"})


def _provider(metadata: dict[str, Any] | None, created_at: int | None) -> dict[str, Any] | None:
    if created_at is None:
        return metadata
    merged = dict(metadata or {})
    mastra = merged.get("mastra")
    merged["mastra"] = {**mastra, "createdAt": created_at} if isinstance(mastra, dict) else {"createdAt": created_at}
    return merged


def _with(target: dict[str, Any], **fields: Any) -> dict[str, Any]:
    for key, value in fields.items():
        if value is not None:
            target[key] = value
    return target


def _file_url(part: FilePart, media_type: str) -> str:
    data = part.data
    if data.startswith("data:") or "://" in data[:32]:
        return data
    return f"data:{media_type};base64,{data}"


def _tool(part: ToolInvocationPart) -> dict[str, Any]:
    inv = part.tool_invocation
    ui: dict[str, Any] = _with({"type": f"tool-{inv.tool_name}", "toolCallId": inv.tool_call_id},
                               providerExecuted=part.provider_executed, title=part.title,
                               callProviderMetadata=_provider(part.provider_metadata, part.created_at))
    ui["state"] = _UI_STATES[inv.state]
    ui["input"] = {} if inv.args is None else inv.args
    approval = inv.approval or {}
    approval_id = approval.get("id") or inv.tool_call_id
    if inv.state == "approval-requested":
        ui["approval"] = {"id": approval_id}
    elif inv.state in ("approval-responded", "output-denied"):
        approved = bool(approval.get("approved", False)) if inv.state == "approval-responded" else False
        ui["approval"] = _with({"id": approval_id, "approved": approved}, reason=approval.get("reason"))
    elif inv.state in ("result", "output-error"):
        if inv.state == "result":
            ui["output"] = inv.result
            _with(ui, preliminary=part.preliminary)
        else:
            ui["errorText"] = inv.error_text or ""
            _with(ui, rawInput=inv.raw_input)
        if approval.get("approved") is True:
            ui["approval"] = _with({"id": approval_id, "approved": True}, reason=approval.get("reason"))
    return ui


def _unknown(part: UnknownPart) -> dict[str, Any] | None:
    fields = part.to_dict()
    if part.type.startswith("data-"):
        return _with({"type": part.type, "data": fields.get("data")}, id=fields.get("id"))
    if part.type not in _KEPT_TYPES:
        return None
    stamp = fields.pop("createdAt", None)
    provider = _provider(part.provider_metadata, stamp if isinstance(stamp, int) else None)
    fields.pop("providerMetadata", None)
    return _with(fields, providerMetadata=provider)


def _ui_part(part: Part) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return _with({"type": "text", "text": part.text},
                     providerMetadata=_provider(part.provider_metadata, part.created_at))
    if isinstance(part, ToolInvocationPart):
        return _tool(part)
    if isinstance(part, ReasoningPart):
        text = part.reasoning or "".join(str(d.get("text", "")) for d in part.details if d.get("type") == "text")
        if not text and not part.details:
            return None
        return _with({"type": "reasoning", "text": text, "state": "done"},
                     providerMetadata=_provider(part.provider_metadata, part.created_at))
    if isinstance(part, StepStartPart):
        return {"type": "step-start"}
    if isinstance(part, FilePart):
        media_type = part.mime_type or part.media_type or "application/octet-stream"
        return _with({"type": "file", "mediaType": media_type, "url": _file_url(part, media_type)},
                     filename=part.filename, providerMetadata=_provider(part.provider_metadata, part.created_at))
    if isinstance(part, SourcePart):
        url = part.source.get("url")
        if not isinstance(url, str):
            return None
        source_id = part.source.get("id")
        title = part.source.get("title")
        return _with({"type": "source-url", "sourceId": source_id if isinstance(source_id, str) else url, "url": url},
                     title=title if isinstance(title, str) else None,
                     providerMetadata=_provider(part.provider_metadata, part.created_at))
    return _unknown(part)


def _ui_message(message: Message) -> dict[str, Any] | None:
    if message.role == "signal":
        return None
    content = message.content
    metadata: dict[str, Any] = dict(content.metadata or {})
    metadata["createdAt"] = to_iso(message.created_at)
    if message.thread_id is not None:
        metadata["threadId"] = message.thread_id
    if message.resource_id is not None:
        metadata["resourceId"] = message.resource_id
    parts = [ui for ui in (_ui_part(p) for p in content.parts) if ui is not None]
    if content.content and not any(isinstance(p, TextPart) for p in content.parts):
        parts.append({"type": "text", "text": content.content})
    if not parts and message.role != "assistant":
        parts.append({"type": "text", "text": ""})
    return {"id": message.id, "role": message.role, "metadata": metadata, "parts": parts}


def messages_to_ui(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """``UIMessage`` dicts for stored messages (e.g. ``(await memory.recall(thread_id)).messages``).

    Signal messages are left out (they are not part of a chat's visible history).

    :raises ValidationError: an item is not a :class:`~threadmind.codecs.Message`.
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ValidationError(f"messages[{i}] must be a Message, got {type(message).__name__}")
        ui = _ui_message(message)
        if ui is not None:
            out.append(ui)
    return out
