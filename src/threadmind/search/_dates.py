"""The dates a query names, for hybrid recall's date lift (``_rank.lifted``).

"What did Caroline paint on 13 October, 2023?" names the day the answer was said, and no word of the answer
holds that date: the message's time does. A keyword candidate created within a day of a date the query names is
lifted (see ``_rank``). Read here, in English: ``2023-10-13``; ``13 October 2023``, ``13th of Oct, 2023``,
``October 13, 2023`` (with or without the year); ``October 2023``; a month after ``in``, ``during``, ``since``,
``until``, ``early``, ``late``, ``mid`` (``"in June"``: any year). ``May 5`` and ``March 3`` count only with a
year (``"may 5 of us come"`` names no date). Given the time of the query, days relative to it too: ``today``,
``yesterday``, ``the day before yesterday``, ``3 days ago`` (``three``, ``a day ago``), ``last Friday`` (the
latest Friday before today), ``on Friday`` (the latest Friday up to today). Weeks and months relative to now
("last week") are not read: where they begin depends on the asker's calendar.

"Within a day" takes the message's UTC time one day either side of the named day (or month), so a message sent
on that date anywhere on Earth is lifted whatever the asker's time zone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import msgspec

__all__ = ("MAX_DATES", "NamedDate", "named_dates", "utc_day")

MAX_DATES = 8
"""Dates read from one query at most (the first ones)."""
_LAST = date.max.toordinal()
_MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sept", "sep"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
_AMBIGUOUS = frozenset({"may", "mar", "march"})  # words too: a date only with a year
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY_OF = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_WEEKDAYS = {name: number for number, name in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}
# What each form needs, found in one scan: a digit, a month's name, a word of a relative day. Every form below holds
# one of these as a whole word ("monday", not "mon"; "friend" names no day), so a query without any is read no
# further, and the forms needing what a query lacks are not tried.
_TRIGGERS = re.compile(r"(?P<digit>\d)|\b(?:(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True))
                       + r")|(?P<relative>today|yesterday|ago|" + "|".join(_WEEKDAYS) + r"))\b")
# (ASCII text, the common case: its words looked up, three times faster than the scan above; a word "_" joins is
# split here, which only lets a form be tried that then finds nothing)
_TRIGGER_WORDS = {**dict.fromkeys(_MONTHS, "month"), **dict.fromkeys(("today", "yesterday", "ago", *_WEEKDAYS),
                                                                      "relative")}
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_DIGIT = re.compile(r"\d")
_COUNTS = {word: n for n, word in enumerate(
    ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"), start=1)}
_RELATIVE = re.compile(
    r"\b(?:(?P<before>the\s+day\s+before\s+yesterday)|(?P<today>today)|(?P<yesterday>yesterday)"
    r"|(?P<count>\d{1,3}|a|" + "|".join(_COUNTS) + r")\s+days?\s+ago"
    r"|(?P<which>last|on)\s+(?P<weekday>" + "|".join(_WEEKDAYS) + r"))\b")
# (pattern, which groups hold year / month / day, the trigger it needs) in the order they are tried; a match's
# text is then blanked
_FORMS: tuple[tuple[re.Pattern[str], tuple[int | None, int, int | None], str], ...] = (
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), (1, 2, 3), "digit"),
    (re.compile(rf"\b{_DAY_OF}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?(?![\w-])"), (3, 2, 1), "month"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY_OF}(?:,?\s+{_YEAR})?(?![\w-])"), (3, 1, 2), "month"),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b"), (2, 1, None), "month"),
    (re.compile(rf"\b(?:in|during|since|until|early|late|mid)[\s-]+{_MONTH}(?![\w-])"), (None, 1, None), "month"),
)


class NamedDate(msgspec.Struct, frozen=True):
    """A day or a month a query names; ``year`` None: any year, ``day`` None: the whole month."""

    month: int
    year: int | None = None
    day: int | None = None

    def holds(self, at: datetime) -> bool:
        """Whether ``at`` is within a day of the date (see the module docstring)."""
        return self.holds_day(utc_day(at))

    def holds_day(self, day: date) -> bool:
        """Whether the UTC calendar ``day`` is within a day of the date."""
        for moment in (day, *_beside(day)):
            if moment.month == self.month and self.year in (None, moment.year) and self.day in (None, moment.day):
                return True
        return False


def utc_day(at: datetime) -> date:
    """The UTC calendar day of ``at`` (a naive time is taken as UTC; the stores hand back UTC times)."""
    if at.utcoffset():
        try:
            return at.astimezone(UTC).date()
        except OverflowError:  # within a day of the calendar's ends
            pass
    return at.date()


def _beside(day: date) -> tuple[date, ...]:
    """The days before and after ``day`` (those the calendar has: none before 1 January of year 1)."""
    ordinal = day.toordinal()
    return tuple(date.fromordinal(n) for n in (ordinal - 1, ordinal + 1) if 1 <= n <= _LAST)


def named_dates(query: str, now: datetime | Callable[[], datetime] | None = None) -> tuple[NamedDate, ...]:
    """The dates ``query`` names, in the forms of the module docstring (none when it names none); days relative
    to ``now`` (the time of the query, or what tells it: asked only when the query holds such a day) only when it
    is given."""
    text = query.lower()
    needed = _needed(text)
    if not needed:  # most queries
        return ()
    found: list[NamedDate] = []
    if now is not None and "relative" in needed:
        text = _relative(text, utc_day(now() if callable(now) else now), found)
    for pattern, (year_at, month_at, day_at), trigger in _FORMS:
        if trigger not in needed:
            continue
        for match in pattern.finditer(text):
            named = _date(match, year_at, month_at, day_at)
            if named is not None:  # its words name no other date
                if named not in found:
                    found.append(named)
                text = text[:match.start()] + " " * (match.end() - match.start()) + text[match.end():]
    return tuple(found[:MAX_DATES])


def _needed(text: str) -> set[str | None]:
    """What the forms need that ``text`` (lower case) holds: ``"digit"``, ``"month"``, ``"relative"``."""
    if not text.isascii():
        return {match.lastgroup for match in _TRIGGERS.finditer(text)}
    words = _TRIGGER_WORDS.keys() & _ASCII_WORD.findall(text)
    needed: set[str | None] = {_TRIGGER_WORDS[word] for word in words}
    if _DIGIT.search(text) is not None:
        needed.add("digit")
    return needed


def _relative(text: str, today: date, found: list[NamedDate]) -> str:
    """Add the days ``text`` names relative to ``today`` to ``found``; the text with those words blanked."""
    for match in _RELATIVE.finditer(text):
        if match["before"]:
            back = 2
        elif match["today"]:
            back = 0
        elif match["yesterday"]:
            back = 1
        elif match["count"]:
            count = match["count"]
            back = int(count) if count.isdigit() else _COUNTS.get(count, 1)  # "a day ago": 1
        else:
            back = (today.weekday() - _WEEKDAYS[match["weekday"]]) % 7
            if back == 0 and match["which"] == "last":  # "last Friday" said on a Friday: a week ago
                back = 7
        if today.toordinal() - back < 1:
            continue
        day = today - timedelta(days=back)
        named = NamedDate(day.month, day.year, day.day)
        if named not in found:
            found.append(named)
        text = text[:match.start()] + " " * (match.end() - match.start()) + text[match.end():]
    return text


def _date(match: re.Match[str], year_at: int | None, month_at: int, day_at: int | None) -> NamedDate | None:
    """The date ``match`` names, None when it is no date (day 32, month 13, ``may 5`` without a year)."""
    word = match.group(month_at)
    year_text = match.group(year_at) if year_at is not None else None
    day_text = match.group(day_at) if day_at is not None else None
    month = int(word) if word.isdigit() else _MONTHS[word]
    if year_text is None and day_text is not None and word in _AMBIGUOUS:
        return None
    year = int(year_text) if year_text is not None else None
    day = int(day_text) if day_text is not None else None
    try:  # a real date (29 February: in a leap year, or in any year when none is named)
        datetime(year if year is not None else 2000, month, day or 1)
    except ValueError:
        return None
    if year is not None and not 1000 <= year <= 9999:
        return None
    return NamedDate(month, year, day)
