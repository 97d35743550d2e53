"""Signals (``role: "signal"`` messages) as the model reads them, and the state signals' bookkeeping.

A signal is stored as Mastra 1.71 stores it: ``type`` its tag name, ``content.parts`` its contents and
``content.metadata.signal`` its id, type, tag name, time, attributes and metadata. The model reads a signal as
Mastra hands it over (``signalToLLMMessage``): a user message whose text is the contents wrapped in the signal's
XML tag with its attributes (``<working-memory format="markdown" scope="resource">…</working-memory>``); a plain
``user`` signal without attributes is the user's text as is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..codecs import FilePart, Message, MessageContent, TextPart
from ..codecs._time import to_iso

if TYPE_CHECKING:
    from ._message_list import MessageList

__all__ = ("add_signal", "for_model", "signal_metadata", "signal_xml", "state_of", "state_tracking",
           "with_state_tracking")

STATE_SIGNALS_KEY = "stateSignals"


def signal_metadata(message: Message) -> dict[str, Any] | None:
    """``content.metadata.signal`` of a signal message (None: not a signal, or none stored)."""
    if message.role != "signal":
        return None
    signal = (message.content.metadata or {}).get("signal")
    return signal if isinstance(signal, dict) else None


def state_of(message: Message, state_id: str, thread_id: str) -> dict[str, Any] | None:
    """The ``metadata.state`` of a state signal of ``state_id`` in ``thread_id`` (None: any other message)."""
    signal = signal_metadata(message)
    if signal is None or signal.get("type") != "state":
        return None
    inner = signal.get("metadata")
    state = inner.get("state") if isinstance(inner, dict) else None
    if not isinstance(state, dict) or state.get("id") != state_id or state.get("threadId") != thread_id:
        return None
    return state


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def signal_xml(tag: str, attributes: Mapping[str, Any] | None, contents: str | None) -> str:
    """``<tag a="v">contents</tag>`` (``<tag a="v" />`` without contents), escaped as Mastra escapes it."""
    shown = " ".join(f'{key}="{_escape(_attribute(value)).replace(chr(34), "&quot;")}"'
                     for key, value in (attributes or {}).items() if value is not None)
    opening = f"{tag} {shown}" if shown else tag
    return f"<{opening}>{_escape(contents)}</{tag}>" if contents else f"<{opening} />"


def _attribute(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def for_model(messages: Iterable[Message]) -> list[Message]:
    """``messages`` with each signal as the user message the model reads in its place (see the module)."""
    return [_signal_for_model(m) if m.role == "signal" else m for m in messages]


def _signal_for_model(message: Message) -> Message:
    signal = signal_metadata(message) or {}
    kind = signal.get("type") if isinstance(signal.get("type"), str) else (message.type or "user-message")
    if kind == "user-message":
        kind = "user"
    tag = signal.get("tagName") if isinstance(signal.get("tagName"), str) else _default_tag(kind)
    attributes = signal.get("attributes") if isinstance(signal.get("attributes"), dict) else None
    parts = [p for p in message.content.parts if isinstance(p, (TextPart, FilePart))]
    if not parts and message.content.content:
        parts = [TextPart(text=message.content.content)]
    shown = {key: value for key, value in (attributes or {}).items() if value is not None}
    if kind == "user" and not shown:
        new_parts: Sequence[TextPart | FilePart] = parts
    elif all(isinstance(p, TextPart) for p in parts):
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
        new_parts = [TextPart(text=signal_xml(str(tag), attributes, text))]
    else:  # files kept beside the first text part wrapped in the tag (or a bare marker first)
        wrapped = False
        out: list[TextPart | FilePart] = []
        for part in parts:
            if not wrapped and isinstance(part, TextPart):
                out.append(TextPart(text=signal_xml(str(tag), attributes, part.text)))
                wrapped = True
            else:
                out.append(part)
        if not wrapped:
            out.insert(0, TextPart(text=signal_xml(str(tag), attributes, None)))
        new_parts = out
    text = "\n".join(p.text for p in new_parts if isinstance(p, TextPart))
    return Message(id=message.id, role="user", created_at=message.created_at, thread_id=message.thread_id,
                   resource_id=message.resource_id,
                   content=MessageContent(format=2, parts=list(new_parts), content=text or None))


def _default_tag(kind: object) -> str:
    return {"reactive": "system-reminder", "user": "user", "state": "state", "notification": "notification",
            "system-reminder": "system-reminder"}.get(str(kind), str(kind))


def state_tracking(metadata: Mapping[str, Any] | None, state_id: str) -> dict[str, Any] | None:
    """A thread's tracking of one state (``metadata.mastra.stateSignals[state_id]``), or None."""
    mastra = (metadata or {}).get("mastra")
    signals = mastra.get(STATE_SIGNALS_KEY) if isinstance(mastra, dict) else None
    tracking = signals.get(state_id) if isinstance(signals, dict) else None
    return tracking if isinstance(tracking, dict) else None


def with_state_tracking(metadata: Mapping[str, Any] | None, state_id: str,
                        tracking: Mapping[str, Any]) -> dict[str, Any]:
    """``{"mastra": {..., "stateSignals": {..., state_id: tracking}}}``: the patch that records ``tracking``
    (the rest of ``mastra`` kept, as Mastra's ``setStateSignalMetadata`` keeps it)."""
    mastra = (metadata or {}).get("mastra")
    mastra = dict(mastra) if isinstance(mastra, dict) else {}
    signals = mastra.get(STATE_SIGNALS_KEY)
    signals = dict(signals) if isinstance(signals, dict) else {}
    signals[state_id] = dict(tracking)
    mastra[STATE_SIGNALS_KEY] = signals
    return {"mastra": mastra}


def add_signal(message_list: MessageList, signal_id: str, thread_id: str, resource_id: str | None, text: str,
               signal: Mapping[str, Any]) -> Message:
    """Add a signal to the turn as Mastra's ``MessageList.addSignal`` stores it (``signalToDBMessage``): at the
    turn's next time (after every message the model has seen), its tag name as the message's ``type``, ``signal``
    (everything but ``id`` and ``createdAt``) under ``content.metadata.signal`` with the message's time."""
    message_list.add({"id": signal_id, "role": "signal", "threadId": thread_id, "resourceId": resource_id,
                      "type": signal.get("tagName"),
                      "content": {"format": 2, "parts": [{"type": "text", "text": text}],
                                  "metadata": {"signal": {"id": signal_id, **signal}}}}, "input")
    added = message_list.get(signal_id)
    assert added is not None
    stored = {"id": signal_id, **{k: v for k, v in signal.items() if k in ("type", "tagName")},
              "createdAt": to_iso(added.created_at),
              **{k: v for k, v in signal.items() if k not in ("type", "tagName")}}
    content = msgspec.structs.replace(added.content, metadata={**(added.content.metadata or {}), "signal": stored})
    dated = msgspec.structs.replace(added, content=content)
    message_list.replace(dated)
    return dated
