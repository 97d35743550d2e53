"""UTC timestamps at millisecond precision, formatted exactly as Mastra stores them."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ("UTC", "from_iso", "from_epoch_ms", "to_epoch_ms", "to_iso", "to_utc_ms", "utc_now")



def utc_now() -> datetime:
    """Now, timezone-aware UTC, truncated to milliseconds (what the database can hold)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def to_utc_ms(value: datetime) -> datetime:
    """``value`` as aware UTC truncated to milliseconds; naive datetimes are taken as UTC."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def to_iso(value: datetime) -> str:
    """``2025-01-01T00:00:00.000Z``: the fixed-width form that sorts correctly as text."""
    if value.tzinfo is not None and value.utcoffset():
        value = value.astimezone(UTC)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
        f"{value.second:02d}.{value.microsecond // 1000:03d}Z"
    )


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
