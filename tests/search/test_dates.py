"""The dates a query names (``threadmind.search._dates``): the forms read, the words that are no date, and text
that is never an error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadmind.search._dates import MAX_DATES, NamedDate, named_dates


@pytest.mark.parametrize(("query", "dates"), [
    ("What did Caroline paint on October 13, 2023?", [NamedDate(10, 2023, 13)]),
    ("as mentioned on 3 June, 2023", [NamedDate(6, 2023, 3)]),
    ("the 13th of Oct, 2023", [NamedDate(10, 2023, 13)]),
    ("Sept. 2nd 2024 and 2024-09-03", [NamedDate(9, 2024, 3), NamedDate(9, 2024, 2)]),
    ("what happened in May 2023", [NamedDate(5, 2023)]),
    ("When did Melanie go camping in June?", [NamedDate(6)]),
    ("plans for mid-december", [NamedDate(12)]),
    ("dinner on Dec 25", [NamedDate(12, None, 25)]),
    ("13 October 2023, then October 2023", [NamedDate(10, 2023, 13), NamedDate(10, 2023)]),
    ("May 5, 2023", [NamedDate(5, 2023, 5)]),
    ("29 February", [NamedDate(2, None, 29)]),
])
def test_the_forms_read(query: str, dates: list[NamedDate]) -> None:
    assert sorted(named_dates(query), key=repr) == sorted(dates, key=repr)


@pytest.mark.parametrize("query", [
    "may 5 of us come?", "5 may come", "march 3 miles", "a summary of decisions", "I have 3 cats", "in 2023",
    "31 February 2022 was no day", "2023-13-40", "the year 99999", "", "mayday", "octopus in decline",
])
def test_words_that_name_no_date(query: str) -> None:
    assert [d for d in named_dates(query) if d.day is not None or d.year is None] == []


@pytest.mark.parametrize(("at", "holds"), [
    (datetime(2023, 10, 13, 0, 0, tzinfo=UTC), True),
    (datetime(2023, 10, 12, 0, 0, tzinfo=UTC), True),  # the 13th in a time zone ahead of UTC
    (datetime(2023, 10, 14, 23, 59, tzinfo=UTC), True),  # ... and behind it
    (datetime(2023, 10, 11, 23, 59, tzinfo=UTC), False),
    (datetime(2023, 10, 15, 0, 0, tzinfo=UTC), False),
    (datetime(2022, 10, 13, 12, 0, tzinfo=UTC), False),
])
def test_a_day_holds_the_messages_within_a_day_of_it(at: datetime, holds: bool) -> None:
    assert NamedDate(10, 2023, 13).holds(at) is holds


def test_a_time_in_another_zone_is_read_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert NamedDate(10, 2023, 16).holds(datetime(2023, 10, 18, 8, 0, tzinfo=tokyo))  # the 17th, 23:00 UTC
    assert not NamedDate(10, 2023, 19).holds(datetime(2023, 10, 18, 8, 0, tzinfo=tokyo))


def test_the_ends_of_the_calendar() -> None:
    assert NamedDate(1, 1, 1).holds(datetime.min.replace(tzinfo=UTC))
    assert NamedDate(12, 9999, 31).holds(datetime.max.replace(tzinfo=UTC))
    assert not NamedDate(6).holds(datetime.max.replace(tzinfo=UTC))


def test_a_month_of_any_year() -> None:
    june = NamedDate(6)
    assert june.holds(datetime(2019, 6, 30, tzinfo=UTC)) and june.holds(datetime(2023, 7, 1, 8, tzinfo=UTC))
    assert not june.holds(datetime(2023, 7, 2, 8, tzinfo=UTC))


SATURDAY = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("query", "dates"), [
    ("what did we talk about yesterday?", [NamedDate(12, 2026, 4)]),
    ("my notes from today", [NamedDate(12, 2026, 5)]),
    ("the day before yesterday", [NamedDate(12, 2026, 3)]),
    ("3 days ago", [NamedDate(12, 2026, 2)]),
    ("two days ago we talked", [NamedDate(12, 2026, 3)]),
    ("a day ago", [NamedDate(12, 2026, 4)]),
    ("last Friday", [NamedDate(12, 2026, 4)]),
    ("last Saturday", [NamedDate(11, 2026, 28)]),  # said on a Saturday: a week ago
    ("on Saturday", [NamedDate(12, 2026, 5)]),
    ("on Monday in June", [NamedDate(11, 2026, 30), NamedDate(6)]),
    ("40 days ago", [NamedDate(10, 2026, 26)]),
])
def test_days_relative_to_the_time_of_the_query(query: str, dates: list[NamedDate]) -> None:
    assert sorted(named_dates(query, SATURDAY), key=repr) == sorted(dates, key=repr)
    assert [d for d in named_dates(query) if d.year == 2026] == []  # without the time, none of them


@pytest.mark.parametrize("query", ["a sunrise hike", "the monday meeting notes", "days of summer", "ago"])
def test_words_that_name_no_relative_day(query: str) -> None:
    assert named_dates(query, SATURDAY) == ()


@given(st.text(max_size=300))
def test_any_text_gives_real_dates_or_none(query: str) -> None:
    dates = named_dates(query, SATURDAY)
    assert len(dates) <= MAX_DATES
    for date in dates:
        datetime(date.year or 2000, date.month, date.day or 1)  # a real calendar date


def test_a_long_query_is_read_quickly() -> None:
    query = "on 3 June, 2023 and in May " * 2000 + "\ud800 🎉" * 1000
    assert len(named_dates(query)) == 2


@pytest.mark.parametrize(("query", "dates"), [
    ("DINNER ON DEC 25", [NamedDate(12, None, 25)]),  # upper case
    ("dinner on déc 25 or on Dec 25", [NamedDate(12, None, 25)]),  # not ASCII: read by the full scan
    ("«13 October 2023»", [NamedDate(10, 2023, 13)]),
    ("my friend's wedding, decided on a sunny day in june", [NamedDate(6)]),
    ("the_13 october_2023 note", []),  # joined by "_": one word, no date
    ("3\u00a0days ago", [NamedDate(12, 2026, 2)]),  # a no-break space between the words
    ("a call on Friday", [NamedDate(12, 2026, 4)]),
])
def test_a_query_is_read_whatever_starts_like_a_date(query: str, dates: list[NamedDate]) -> None:
    """Only whole words that can start a date send a query to the forms ("friend", "wedding", "sunny" never do),
    and a query that is not ASCII is read as one that is."""
    assert sorted(named_dates(query, SATURDAY), key=repr) == sorted(dates, key=repr)
