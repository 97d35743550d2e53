"""The rows of each scope (a thread, a resource), kept where the garbage collector does not walk them.

A dict of scope name → row set holding the row sets themselves is tracked (its values are dicts), and every full
collection visits each of its values: 100 000 threads' row sets at a million vectors. Each row set is held by a
``gc=False`` struct instead, so the outer dict holds only strings and untracked structs and is never tracked; the
row sets hold only ints, so no reference cycle can pass through them.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

__all__ = ("RowSet", "RowsByScope")

#: A set of rows kept as a dict of ints: never tracked by the collector (a ``set`` is, element by element).
RowSet = dict[int, None]


class _Held(msgspec.Struct, gc=False):
    rows: RowSet


class RowsByScope:
    """Scope name → its rows, out of the collector's sight (see the module docstring)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __eq__(self, other: object) -> bool:
        """The same scopes with the same rows."""
        if not isinstance(other, RowsByScope):
            return NotImplemented
        return self._held == other._held

    __hash__ = None  # type: ignore[assignment]

    def get(self, name: str) -> RowSet | None:
        """The scope's rows, None when it has none."""
        held = self._held.get(name)
        return None if held is None else held.rows

    def of(self, name: str) -> RowSet:
        """The scope's rows, an empty set made for it when it had none (to add rows to)."""
        held = self._held.get(name)
        if held is None:
            held = self._held[name] = _Held({})
        return held.rows

    def discard(self, name: str, row: int) -> None:
        """Take ``row`` out of the scope; a scope left empty is forgotten."""
        held = self._held.get(name)
        if held is None:
            return
        held.rows.pop(row, None)
        if not held.rows:
            del self._held[name]
