"""Temporal gap markers (``observationalMemory.temporalMarkers``): when a user comes back after 10 minutes or more,
a ``system-reminder`` signal saying how long it has been joins the turn, stored as Mastra 1.71 stores it.

As ``@mastra/memory``'s ``insertTemporalGapMarkers``: at the turn's start, the gap between the turn's newest input
message and the message before it (markers, the continuation reminder and recalled context left out) is written as
``"2 hours 5 minutes later — 12/05/2026, 9:30 AM UTC"``; nothing under 10 minutes, nothing when the newest input
has its marker already or nothing came before it. The marker is a ``reactive`` signal (``recall`` hides it unless
asked for system reminders) whose attributes and metadata name the gap and the message it precedes; the model
reads it as ``<system-reminder type="temporal-gap" …>…</system-reminder>``.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Any

from ..codecs import Message
from ..codecs._time import to_iso
from ._message_list import MessageList
from ._observation_text import CONTINUATION_ID
from ._signals import add_signal

__all__ = ("add_temporal_gap_marker", "format_gap", "format_timestamp")

MARKER_PREFIX = "__temporal_"
_MINUTE = 60_000
_HOUR, _DAY = 60 * _MINUTE, 24 * 60 * _MINUTE
_WEEK, _MONTH, _YEAR = 7 * _DAY, 30 * _DAY, 365 * _DAY


def format_gap(ms: float) -> str | None:
    """Mastra's ``formatTemporalGap``: None under 10 minutes, else ``"N unit[s] [M unit[s]] later"``."""
    if ms < 600_000:
        return None

    def unit(value: int, name: str) -> str:
        return f"{value} {name}{'' if value == 1 else 's'}"

    if ms < _HOUR:
        return f"{unit(max(1, _js_round(ms / _MINUTE)), 'minute')} later"
    for limit, (big, big_name, small, small_name) in ((_DAY, (_HOUR, "hour", _MINUTE, "minute")),
                                                      (_WEEK, (_DAY, "day", _HOUR, "hour")),
                                                      (_MONTH, (_WEEK, "week", _DAY, "day")),
                                                      (_YEAR, (_MONTH, "month", _WEEK, "week")),
                                                      (float("inf"), (_YEAR, "year", _MONTH, "month"))):
        if ms < limit:
            primary = int(ms // big)
            secondary = int((ms - primary * big) // small)
            parts = [unit(primary, big_name)] + ([unit(secondary, small_name)] if secondary > 0 else [])
            return " ".join(parts) + " later"
    return None  # pragma: no cover - the last limit is infinite


def _js_round(value: float) -> int:
    """JavaScript's ``Math.round`` (halves up)."""
    return math.floor(value + 0.5)


def format_timestamp(ms: int) -> str:
    """``toLocaleString("en-US", {year, month: "2-digit", day: "2-digit", hour: "numeric", minute: "2-digit",
    hour12, timeZoneName: "short"})`` in the process's time zone: ``12/05/2026, 9:30 AM UTC``."""
    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    hour = moment.hour % 12 or 12
    return (f"{moment:%m/%d/%Y}, {hour}:{moment:%M} {'AM' if moment.hour < 12 else 'PM'} "
            f"{moment.tzname() or ''}").rstrip()


def _part_time(message: Message, first: bool) -> int:
    """Mastra's ``getMessagePartTimestamp``: the first (or last) part's ``createdAt``, else the message's."""
    stamps = [p.created_at for p in message.content.parts if isinstance(getattr(p, "created_at", None), int)]
    if stamps:
        return int(stamps[0] if first else stamps[-1])  # type: ignore[arg-type]
    return int(message.created_at.timestamp() * 1000)


def _marks(message: Message, target: str) -> bool:
    if not message.id.startswith(MARKER_PREFIX):
        return False
    signal = (message.content.metadata or {}).get("signal")
    inner = signal.get("metadata") if isinstance(signal, dict) else None
    inner = inner if isinstance(inner, dict) else (message.content.metadata or {})
    reminder = inner.get("systemReminder")
    return inner.get("precedesMessageId") == target or (
        isinstance(reminder, dict) and reminder.get("type") == "temporal-gap"
        and reminder.get("precedesMessageId") == target)


def add_temporal_gap_marker(message_list: MessageList, thread_id: str, resource_id: str | None) -> Message | None:
    """Add the marker of the turn's newest input when the gap calls for one (see the module); returns it."""
    inputs = message_list.get_input()
    latest = inputs[-1] if inputs else None
    if latest is None or latest.id.startswith(MARKER_PREFIX):
        return None
    context = {m.id for m in message_list.get_context()}
    seen = [m for m in message_list.get_all() if m.id != CONTINUATION_ID and m.id not in context]
    at = next((i for i, m in enumerate(seen) if m.id == latest.id), -1)
    if at <= 0 or any(_marks(m, latest.id) for m in seen):
        return None
    previous = next((m for m in reversed(seen[:at]) if not m.id.startswith(MARKER_PREFIX)), None)
    if previous is None:
        return None
    stamp = _part_time(latest, first=True)
    gap = stamp - _part_time(previous, first=False)
    text = format_gap(gap)
    if text is None:
        return None
    when = format_timestamp(stamp)
    details: dict[str, Any] = {"gapText": text, "gapMs": gap, "timestamp": when, "timestampMs": stamp,
                               "precedesMessageId": latest.id}
    reminder = f"{text} — {when}"
    accepted = datetime.fromtimestamp(stamp / 1000).astimezone()
    return add_signal(message_list, f"__temporal_gap_{uuid.uuid4()}", thread_id, resource_id, reminder, {
        "type": "reactive", "tagName": "system-reminder", "acceptedAt": to_iso(accepted),
        "attributes": {"type": "temporal-gap", **details},
        "metadata": {"reminderType": "temporal-gap", **details,
                     "systemReminder": {"type": "temporal-gap", "message": reminder, **details}}})
