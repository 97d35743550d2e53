"""UTC timestamps at millisecond precision, formatted exactly as Mastra stores them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import msgspec

__all__ = ("UTC", "from_iso", "from_epoch_ms", "to_epoch_ms", "to_iso", "to_utc_ms", "utc_now")

_encode = msgspec.json.encode
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_now() -> datetime:
    """Now, timezone-aware UTC, truncated to milliseconds (what the database can hold).

    Integer milliseconds onto the epoch: exact, and faster than ``now()`` followed by ``replace()``.
    """
    return _EPOCH + timedelta(milliseconds=time.time_ns() // 1_000_000)


def to_utc_ms(value: datetime) -> datetime:
    """``value`` as aware UTC truncated to milliseconds; naive datetimes are taken as UTC."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def to_iso(value: datetime) -> str:
    """``2025-01-01T00:00:00.000Z``: the fixed-width form that sorts correctly as text."""
    if value.tzinfo is not None and value.utcoffset():
        value = value.astimezone(UTC)
    # msgspec's C encoder (~0.6 µs) instead of isoformat (~3 µs) or field formatting (~4.5 µs): this runs for
    # every saved message. It writes ``"YYYY-MM-DDTHH:MM:SS[.ffffff][Z]"``, the fraction only when nonzero.
    raw = _encode(value)
    if raw[20:21] == b".":
        return raw[1:24].decode() + "Z"
    return raw[1:20].decode() + ".000Z"


def from_iso(text: str) -> datetime:
    """Parse an ISO-8601 timestamp (``Z`` or offset; naive means UTC) into aware UTC."""
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def to_epoch_ms(value: datetime) -> int:
    """Milliseconds since the epoch (how Mastra stamps parts)."""
    return int(to_utc_ms(value).timestamp() * 1000)


def from_epoch_ms(ms: float) -> datetime:
    """Aware UTC datetime from epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, UTC)
