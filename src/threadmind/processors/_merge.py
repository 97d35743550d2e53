"""Same-id rules of the MessageList: cache keys, sealing, assistant merging and stored-over-live layering."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import msgspec

from ..codecs import (
    Message,
    MessageContent,
    Part,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from ._convert import part_type

__all__ = (
    "APPROVAL_ANSWER_STATES",
    "CLIENT_UPDATE_STATES",
    "LIVE_SOURCES",
    "TOOL_STATE_RANK",
    "advances",
    "after_sealed",
    "has_client_outcome",
    "is_response_boundary",
    "is_sealed",
    "is_system_reminder",
    "layer_stored_over_input",
    "layer_stored_over_live",
    "merge_assistant",
    "message_key",
    "messages_equal",
    "part_key",
    "sealed_part_count",
    "should_merge",
    "split_after_seal",
    "strip_provider_metadata",
    "tool_parts",
)

TOOL_STATE_RANK: dict[str, int] = {
    "partial-call": 0,
    "call": 1,
    "approval-requested": 2,
    "approval-responded": 3,
    "result": 4,
    "output-error": 4,
    "output-denied": 4,
}
"""Progress rank of a tool invocation state: a later copy may overwrite only with a higher rank."""

CLIENT_UPDATE_STATES: frozenset[str] = frozenset({"approval-responded", "result", "output-error", "output-denied"})
"""States a client may send back for a tool call (an approval answer or an outcome)."""

APPROVAL_ANSWER_STATES: frozenset[str] = frozenset({"approval-responded", "output-denied"})
"""Client states that answer an approval request (the only updates allowed on provider-executed calls)."""

LIVE_SOURCES: frozenset[str] = frozenset({"input", "response", "context"})
"""Sources of copies produced during the turn (as opposed to ``memory``)."""

_OUTCOME_STATES = frozenset({"approval-requested", "approval-responded", "output-denied", "output-error"})
_ONE_MS = timedelta(milliseconds=1)


# --- small accessors -------------------------------------------------------------------------------------------


def _field(part: Part, camel: str, snake: str | None = None) -> Any:
    if isinstance(part, UnknownPart):
        return part.get(camel)
    return getattr(part, snake or camel, None)


def _mastra_meta(metadata: Any) -> Mapping[str, Any]:
    if isinstance(metadata, Mapping):
        mastra = metadata.get("mastra")
        if isinstance(mastra, Mapping):
            return mastra
    return {}


def _item_id(provider_metadata: Any) -> str:
    if isinstance(provider_metadata, Mapping):
        for value in provider_metadata.values():
            if isinstance(value, Mapping) and value.get("itemId"):
                return f"|{value['itemId']}"
    return ""


def _stable_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


def tool_parts(message: Message) -> list[ToolInvocationPart]:
    """The tool-invocation parts of a message, in order."""
    return [p for p in message.content.parts if isinstance(p, ToolInvocationPart)]


def _find_tool(parts: list[Part], call_id: str) -> int | None:
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
            return index
    return None


def advances(new_state: str, old_state: str) -> bool:
    """True when ``new_state`` is further along than ``old_state`` (a terminal state never advances)."""
    return TOOL_STATE_RANK.get(new_state, -1) > TOOL_STATE_RANK.get(old_state, -1)


# --- equality --------------------------------------------------------------------------------------------------


def part_key(part: Part) -> str:
    """Mastra's per-part cache key: type plus text / call id and state / reasoning / file data / data JSON."""
    kind = part_type(part)
    if kind.startswith("data-"):
        return kind + _stable_json(_field(part, "data"))
    key = kind
    if kind == "text":
        key += str(_field(part, "text") or "") + _item_id(part.provider_metadata)
    elif kind == "tool-invocation":
        invocation = _field(part, "toolInvocation", "tool_invocation")
        if isinstance(invocation, ToolInvocation):
            key += invocation.tool_call_id + invocation.state
        elif isinstance(invocation, Mapping):
            key += str(invocation.get("toolCallId", "")) + str(invocation.get("state", ""))
    elif kind == "reasoning":
        details = _field(part, "details") or []
        size = sum(len(str(d.get("text", ""))) + len(str(d.get("signature") or ""))
                   for d in details if isinstance(d, Mapping) and d.get("type") == "text")
        key += str(_field(part, "reasoning") or "") + str(size) + _item_id(part.provider_metadata)
    elif kind == "file":
        key += str(_field(part, "data") or "") + str(_field(part, "mimeType", "mime_type")
                                                    or _field(part, "mediaType", "media_type") or "")
    return key


def message_key(message: Message) -> str:
    """The concatenated part keys of a message."""
    return "".join(part_key(p) for p in message.content.parts)


def messages_equal(a: Message, b: Message) -> bool:
    """Mastra's equality: same id and same part cache key."""
    return a.id == b.id and message_key(a) == message_key(b)


# --- sealing and merge eligibility -------------------------------------------------------------------------------


def is_sealed(message: Message) -> bool:
    """``content.metadata.mastra.sealed is True`` (observed messages must not be merged into)."""
    return _mastra_meta(message.content.metadata).get("sealed") is True


def sealed_part_count(message: Message) -> int:
    """Parts up to and including the last one stamped ``metadata.mastra.sealedAt`` (else all parts)."""
    parts = message.content.parts
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        meta = _field(part, "metadata") if isinstance(part, UnknownPart) else getattr(part, "metadata", None)
        if _mastra_meta(meta).get("sealedAt") or _mastra_meta(part.provider_metadata).get("sealedAt"):
            return index + 1
    return len(parts)


def is_response_boundary(message: Message) -> bool:
    """``content.metadata.mastra.responseBoundary`` is set: later response text starts a new message."""
    return bool(_mastra_meta(message.content.metadata).get("responseBoundary"))


def _completion(message: Message) -> bool:
    meta = message.content.metadata or {}
    return bool(meta.get("completionResult") or meta.get("isTaskCompleteResult"))


def has_client_outcome(message: Message) -> bool:
    """Does ``message`` carry a tool call in a state only a client sends back (an outcome or an approval answer)?"""
    return any(isinstance(p, ToolInvocationPart) and p.tool_invocation.state in CLIENT_UPDATE_STATES
               for p in message.content.parts)


def should_merge(latest: Message, incoming: Message, source: str) -> bool:
    """Mastra's ``shouldMerge``: may ``incoming`` be folded into the assistant message ``latest``?"""
    if latest.role != "assistant" or incoming.role != "assistant" or source == "memory":
        return False
    if latest.thread_id != incoming.thread_id or is_sealed(latest) or is_response_boundary(latest):
        return False
    if _completion(latest) or _completion(incoming):
        return False
    parts = latest.content.parts
    data_only = bool(parts) and all(part_type(p).startswith("data-") for p in parts)
    return not data_only or latest.id == incoming.id


# --- assistant merge (§4.5) --------------------------------------------------------------------------------------


def _merge_args(old: Any, new: Any) -> Any:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return {**old, **new}
    return old if new is None else new


def _apply_outcome(existing: ToolInvocationPart, incoming: ToolInvocationPart) -> ToolInvocationPart:
    """Fold an incoming tool state into the matching existing part (call/partial-call change nothing)."""
    old, new = existing.tool_invocation, incoming.tool_invocation
    if new.state == "result":
        invocation = msgspec.structs.replace(old, state="result", result=new.result, step=new.step,
                                             args=_merge_args(old.args, new.args))
        provider = existing.provider_metadata
        if incoming.provider_metadata:
            provider = {**(provider or {}), **incoming.provider_metadata}
        return msgspec.structs.replace(existing, tool_invocation=invocation, provider_metadata=provider)
    if new.state in _OUTCOME_STATES:
        invocation = msgspec.structs.replace(
            old, state=new.state,
            approval=new.approval if new.approval is not None else old.approval,
            error_text=new.error_text if new.error_text is not None else old.error_text,
            raw_input=new.raw_input if new.raw_input is not None else old.raw_input,
            args=new.args if new.args is not None else old.args,
        )
        return msgspec.structs.replace(
            existing, tool_invocation=invocation,
            provider_metadata=incoming.provider_metadata or existing.provider_metadata,
            provider_executed=(incoming.provider_executed if incoming.provider_executed is not None
                               else existing.provider_executed),
            title=incoming.title if incoming.title is not None else existing.title,
            preliminary=incoming.preliminary if incoming.preliminary is not None else existing.preliminary,
        )
    return existing


def _update_mirror(mirror: list[Any] | None, invocation: ToolInvocation) -> list[Any]:
    entries = list(mirror or [])
    entry = msgspec.to_builtins(invocation)
    for index, item in enumerate(entries):
        call_id = item.get("toolCallId") if isinstance(item, Mapping) else getattr(item, "tool_call_id", None)
        if call_id == invocation.tool_call_id:
            entries[index] = entry
            return entries
    entries.append(entry)
    return entries


def _last_step_model(parts: list[Part], before: int) -> str | None:
    for index in range(min(before, len(parts)) - 1, -1, -1):
        part = parts[index]
        if isinstance(part, StepStartPart):
            return part.model
    return None


def _push_part(parts: list[Part], incoming: list[Part], index: int, at: int | None, role: str) -> int:
    """Insert ``incoming[index]`` unless ``parts`` already has as many copies; return how many parts went in."""
    part = incoming[index]
    key = part_key(part)
    if sum(1 for p in parts if part_key(p) == key) >= sum(1 for p in incoming if part_key(p) == key):
        return 0
    position = len(parts) if at is None else at
    step_before = index > 0 and isinstance(incoming[index - 1], StepStartPart)
    needs_step = (role == "assistant" and part_type(part) == "text" and not step_before and position > 0
                  and isinstance(parts[position - 1], ToolInvocationPart))
    if needs_step:
        parts.insert(position, StepStartPart(model=_last_step_model(parts, position)))
        parts.insert(position + 1, part)
        return 2
    parts.insert(position, part)
    return 1


def merge_assistant(latest: Message, incoming: Message) -> Message:
    """Fold ``incoming`` into ``latest`` (Mastra's ``MessageMerger.merge``); ``latest`` keeps id and created_at."""
    parts = list(latest.content.parts)
    mirror = latest.content.tool_invocations
    anchors: dict[int, int] = {}
    new_parts = list(incoming.content.parts)
    for index, part in enumerate(new_parts):
        if not isinstance(part, ToolInvocationPart):
            continue
        found = _find_tool(parts, part.tool_invocation.tool_call_id)
        if found is None:
            continue
        existing = parts[found]
        assert isinstance(existing, ToolInvocationPart)
        updated = _apply_outcome(existing, part)
        parts[found] = updated
        if part.tool_invocation.state == "result":
            mirror = _update_mirror(mirror, updated.tool_invocation)
        anchors[index] = found
    for index, part in enumerate(new_parts):
        if index in anchors:
            continue
        if not anchors:
            _push_part(parts, new_parts, index, None, latest.role)
            continue
        left = max((k for k in anchors if k < index), default=-1)
        right = min((k for k in anchors if k > index), default=-1)
        at = (anchors[left] + index - left) if left != -1 else index
        right_at = anchors[right] if right != -1 else len(parts)
        if at < 0 or at > right_at:
            continue
        key = part_key(part)
        if any(part_key(p) == key for p in parts[at:right_at]):
            continue
        inserted = _push_part(parts, new_parts, index, at, latest.role)
        if inserted:
            for k, v in anchors.items():
                if v >= at:
                    anchors[k] = v + inserted
    metadata = latest.content.metadata
    if incoming.content.metadata:
        metadata = {**(metadata or {}), **incoming.content.metadata}
    content = msgspec.structs.replace(
        latest.content, parts=parts, metadata=metadata, tool_invocations=mirror,
        content=incoming.content.content or latest.content.content,
        **_adopted_fields(latest.content, incoming.content),
    )
    return msgspec.structs.replace(latest, content=content)


_KEPT_FIELDS = ("reasoning", "experimental_attachments", "provider_metadata", "annotations")


def _adopted_fields(latest: MessageContent, incoming: MessageContent) -> dict[str, Any]:
    """Content fields only ``incoming`` carries (and its ``extra`` keys ``latest`` lacks): merged, not lost."""
    adopted = {f: getattr(incoming, f) for f in _KEPT_FIELDS
               if getattr(latest, f) is None and getattr(incoming, f) is not None}
    if incoming.extra:
        adopted["extra"] = {**incoming.extra, **(latest.extra or {})}
    return adopted


# --- stored copy over a live copy (§4.4 rule 1) ------------------------------------------------------------------


def layer_stored_over_input(stored: Message, live: Message) -> Message:
    """Stored copy wins; only advancing client tool outcomes of the live input copy are taken."""
    parts = list(stored.content.parts)
    changed = False
    for live_part in tool_parts(live):
        new = live_part.tool_invocation
        found = _find_tool(parts, new.tool_call_id)
        if found is None or new.state not in CLIENT_UPDATE_STATES:
            continue
        stored_part = parts[found]
        assert isinstance(stored_part, ToolInvocationPart)
        old = stored_part.tool_invocation
        if not advances(new.state, old.state):
            continue
        if stored_part.provider_executed and new.state not in APPROVAL_ANSWER_STATES:
            continue
        invocation = msgspec.structs.replace(old, state=new.state, result=new.result, error_text=new.error_text,
                                             approval=new.approval)
        parts[found] = msgspec.structs.replace(stored_part, tool_invocation=invocation)
        changed = True
    if not changed:
        return stored
    return msgspec.structs.replace(stored, content=msgspec.structs.replace(stored.content, parts=parts))


def layer_stored_over_live(stored: Message, live: Message) -> Message:
    """Stored copy as base under a live response/context copy (Mastra's content rules for that case)."""
    if stored.role == "user" and live.role == "user":
        overrides = {f: getattr(live.content, f) for f in live.content.__struct_fields__
                     if f not in ("format", "metadata", "extra") and getattr(live.content, f) is not None}
        metadata = stored.content.metadata
        if live.content.metadata:
            metadata = {**(metadata or {}), **live.content.metadata}
        if live.content.extra:  # unmodelled keys override one by one, like the modelled ones
            overrides["extra"] = {**(stored.content.extra or {}), **live.content.extra}
        content = msgspec.structs.replace(stored.content, metadata=metadata, **overrides)
        return msgspec.structs.replace(stored, content=content)
    live_texts: dict[str, str] = {}
    for part in live.content.parts:
        if isinstance(part, TextPart):
            live_texts.setdefault(part.text.strip(), part.text)
    stored_parts: list[Part] = []
    for part in stored.content.parts:
        if isinstance(part, TextPart) and live_texts.get(part.text.strip(), part.text) != part.text:
            part = msgspec.structs.replace(part, text=live_texts[part.text.strip()])
        stored_parts.append(part)
    live_parts: list[Part] = []
    for part in live.content.parts:
        if isinstance(part, ToolInvocationPart):
            found = _find_tool(stored_parts, part.tool_invocation.tool_call_id)
            if found is not None:
                stored_part = stored_parts[found]
                assert isinstance(stored_part, ToolInvocationPart)
                if not advances(part.tool_invocation.state, stored_part.tool_invocation.state):
                    old = part.tool_invocation
                    part = ToolInvocationPart(tool_invocation=ToolInvocation(
                        state="call", tool_call_id=old.tool_call_id, tool_name=old.tool_name, args=old.args))
        live_parts.append(part)
    base = msgspec.structs.replace(stored, content=msgspec.structs.replace(stored.content, parts=stored_parts))
    overlay = msgspec.structs.replace(live, content=msgspec.structs.replace(live.content, parts=live_parts))
    return merge_assistant(base, overlay)


def split_after_seal(old: Message, new: Message, fresh_id: str) -> Message | None:
    """Parts of ``new`` beyond ``old``'s sealed prefix as a new message (fresh id, after ``old``), or None."""
    count = sealed_part_count(old)
    rest = list(new.content.parts[count:])
    if not rest:
        return None
    created = max(new.created_at, old.created_at + _ONE_MS)
    content = msgspec.structs.replace(new.content, parts=rest)
    return msgspec.structs.replace(new, id=fresh_id, created_at=created, content=content)


def after_sealed(old: Message, new: Message, fresh_id: str) -> Message:
    """``new`` re-identified and dated after ``old`` (it may not land at or before a sealed message)."""
    return msgspec.structs.replace(new, id=fresh_id, created_at=max(new.created_at, old.created_at + _ONE_MS))


# --- helpers other processors use --------------------------------------------------------------------------------


def strip_provider_metadata(message: Message, keep_client_outcomes: bool = True) -> Message:
    """Drop ``providerMetadata``/``providerOptions`` from every part of ``message``.

    With ``keep_client_outcomes`` tool parts in a client-update state keep theirs (MemoryInputFilter applies
    this to assistant messages when a thread has no stored history yet).
    """
    parts: list[Part] = []
    changed = False
    for part in message.content.parts:
        if (keep_client_outcomes and isinstance(part, ToolInvocationPart)
                and part.tool_invocation.state in CLIENT_UPDATE_STATES):
            parts.append(part)
        elif isinstance(part, UnknownPart):
            fields = part.to_dict()
            if "providerMetadata" in fields or "providerOptions" in fields:
                fields.pop("providerMetadata", None)
                fields.pop("providerOptions", None)
                part = UnknownPart(fields)
                changed = True
            parts.append(part)
        elif part.provider_metadata is not None:
            parts.append(msgspec.structs.replace(part, provider_metadata=None))
            changed = True
        else:
            parts.append(part)
    if not changed:
        return message
    return msgspec.structs.replace(message, content=msgspec.structs.replace(message.content, parts=parts))


def is_system_reminder(message: Message) -> bool:
    """True for the system-reminder messages ``recall`` hides by default (reference §4.6)."""
    metadata = message.content.metadata or {}
    if message.role == "user":
        if isinstance(metadata.get("systemReminder"), Mapping) or "dynamicAgentsMdReminder" in metadata:
            return True
        first = next((p for p in message.content.parts if part_type(p) == "text"), None)
        text = _field(first, "text") if first is not None else None
        return isinstance(text, str) and text.startswith("<system-reminder")
    if message.role == "signal":
        signal = metadata.get("signal")
        return isinstance(signal, Mapping) and signal.get("type") in ("system-reminder", "reactive")
    return False

