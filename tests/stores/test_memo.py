"""The stores' memos of string functions (stems, scope tokens, lock bytes) stay bounded and out of the collector's
sight."""

from __future__ import annotations

import gc

from threadmind.stores._keywords import stem
from threadmind.stores._memo import memo


def test_a_memo_calls_once_per_key_and_starts_over_when_full() -> None:
    calls: list[str] = []

    def upper(value: str) -> str:
        calls.append(value)
        return value.upper()

    cached = memo(upper, 3)
    assert [cached(k) for k in ("a", "b", "a", "c", "b")] == ["A", "B", "A", "C", "B"]
    assert calls == ["a", "b", "c"]
    cached("d")  # the fourth key: the memo starts over with it
    assert cached("a") == "A" and calls == ["a", "b", "c", "d", "a"]
    assert cached("") == "" and cached("") == "" and calls.count("") == 1  # a falsy value is remembered too
    held = [cell.cell_contents for cell in cached.__closure__ or () if isinstance(cell.cell_contents, dict)]
    assert len(held) == 1 and len(held[0]) <= 3
    gc.collect()
    assert not gc.is_tracked(held[0])


def test_stems_are_the_porter_stems() -> None:
    assert [stem(w) for w in ("flying", "flies", "tokyo", "ab", "naïve")] == ["fly", "fli", "tokyo", "ab", "naïve"]
