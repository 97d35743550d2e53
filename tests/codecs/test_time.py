"""The timestamp codec: Mastra's fixed-width ``...mmmZ`` form, for every datetime shape a caller can pass."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from threadmind.codecs._time import from_iso, to_iso


def _reference(value: datetime) -> str:
    """The straightforward formatting the fast path must equal."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
        f"{value.second:02d}.{value.microsecond // 1000:03d}Z"
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        (datetime(2025, 1, 1, tzinfo=UTC), "2025-01-01T00:00:00.000Z"),
        (datetime(2025, 1, 1, 0, 0, 0, 999, tzinfo=UTC), "2025-01-01T00:00:00.000Z"),  # sub-ms truncated
        (datetime(2025, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC), "2025-01-01T00:00:00.999Z"),
        (datetime(5, 1, 2, 3, 4, 5, 678_901), "0005-01-02T03:04:05.678Z"),  # naive = UTC, 4-digit year
        (datetime(2025, 1, 1, tzinfo=timezone(timedelta(hours=2))), "2024-12-31T22:00:00.000Z"),
        (datetime(2025, 6, 1, 12, tzinfo=timezone(timedelta(hours=-5, minutes=-30))), "2025-06-01T17:30:00.000Z"),
    ],
)
def test_to_iso_fixed_width(value: datetime, expected: str) -> None:
    assert to_iso(value) == expected


def test_to_iso_matches_field_formatting_on_random_values() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        base = datetime(1, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(0, 3_155_000_000_000_000_00))
        offset = timezone(timedelta(minutes=rng.randrange(-720, 721)))
        shapes = (base, base.replace(tzinfo=None), base.astimezone(offset) if base.year > 1 else base)
        for value in shapes:
            assert to_iso(value) == _reference(value)
            assert len(to_iso(value)) == 24


def test_round_trip_keeps_milliseconds() -> None:
    value = datetime(2026, 11, 29, 19, 1, 38, 123_000, tzinfo=UTC)
    assert from_iso(to_iso(value)) == value
