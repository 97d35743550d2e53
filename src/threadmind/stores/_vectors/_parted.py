"""Maps split into parts, so that growing one never rehashes a million entries in one step.

CPython grows a dict by rehashing every entry at once: 45–59 ms for 1.4 M entries here, and the vector index's
per-vector maps (row, label, vector id, message id; the staged vectors' four) outgrow their tables on the same
insert, which held the event loop 270–380 ms at a million vectors. In parts, a growth rehashes one part. A part
whose keys and values are all untracked (ints, strings, arrays, ``gc=False`` structs) is untracked by the
collector, as the whole dict was. Only the operations the index uses are offered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Generic, TypeVar

import numpy as np

__all__ = ("MAX_BATCH", "PART_BITS", "STR_PARTS", "IntParts", "StrParts")

K = TypeVar("K")
V = TypeVar("V")

#: Integer keys (rows, labels) go to parts of 65 536 consecutive keys.
PART_BITS = 16
#: String keys are spread over this many parts by their (cached) hash.
STR_PARTS = 64


class _Parts(Generic[K, V]):
    """What both kinds share: the parts, their total size, and reads over all of them."""

    __slots__ = ("_parts", "_size")

    _parts: list[dict[K, V]]
    _size: int

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[K]:
        """Keys part by part; an integer map's parts are in key order, each in insertion order."""
        for part in self._parts:
            yield from part

    def values(self) -> Iterator[V]:
        for part in self._parts:
            yield from part.values()

    def items(self) -> Iterator[tuple[K, V]]:
        for part in self._parts:
            yield from part.items()


class IntParts(_Parts[int, V]):
    """``int -> V`` for keys that are dense (rows) or that grow (labels): part ``key >> 16``. A part that
    empties is replaced by a new dict (an emptied dict keeps its table), and leading empty parts are dropped, so
    keys that only grow do not leave a trail of parts behind them."""

    __slots__ = ("_base",)

    def __init__(self) -> None:
        self._parts = []
        self._size = 0
        self._base = 0  # the part number of _parts[0]

    def __getitem__(self, key: int) -> V:
        index = (key >> PART_BITS) - self._base
        if 0 <= index < len(self._parts):
            return self._parts[index][key]
        raise KeyError(key)

    def get(self, key: int, default: V | None = None) -> V | None:
        index = (key >> PART_BITS) - self._base
        parts = self._parts
        return parts[index].get(key, default) if 0 <= index < len(parts) else default

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        index = (key >> PART_BITS) - self._base
        return 0 <= index < len(self._parts) and key in self._parts[index]

    def __setitem__(self, key: int, value: V) -> None:
        number = key >> PART_BITS
        parts = self._parts
        if not parts:
            self._base = number
        elif number < self._base:
            parts[:0] = [{} for _ in range(self._base - number)]
            self._base = number
        index = number - self._base
        while len(parts) <= index:
            parts.append({})
        part = parts[index]
        size = len(part)
        part[key] = value
        self._size += len(part) - size

    def __delitem__(self, key: int) -> None:
        index = (key >> PART_BITS) - self._base
        if not 0 <= index < len(self._parts):
            raise KeyError(key)
        part = self._parts[index]
        del part[key]
        self._size -= 1
        if not part:
            self._emptied(index)

    def pop(self, key: int, default: V | None = None) -> V | None:
        index = (key >> PART_BITS) - self._base
        parts = self._parts
        if not 0 <= index < len(parts):
            return default
        part = parts[index]
        if key not in part:
            return default
        value = part.pop(key)
        self._size -= 1
        if not part:
            self._emptied(index)
        return value

    def _emptied(self, index: int) -> None:
        parts = self._parts
        parts[index] = {}
        if index == 0:
            drop = 0
            while drop < len(parts) and not parts[drop]:
                drop += 1
            del parts[:drop]
            self._base += drop

    def update(self, keys: Sequence[int], values: Sequence[V]) -> None:
        """Set every ``keys[i] -> values[i]``, each run of keys that falls in one part at C speed (see
        :func:`_check_batch`); keys whose parts are not in ascending order are set one by one."""
        n = _check_batch(keys, values)
        if n == 0:
            return
        numbers = np.fromiter(keys, dtype=np.int64, count=n) >> PART_BITS
        if n > 1 and bool((numbers[1:] < numbers[:-1]).any()):
            for key, value in zip(keys, values, strict=True):
                self[key] = value
            return
        first = int(numbers[0])
        cuts = np.searchsorted(numbers, np.arange(first, int(numbers[-1]) + 2)).tolist()
        for number, (a, b) in enumerate(pairwise(cuts), start=first):
            if a == b:
                continue
            self[keys[a]] = values[a]  # makes the part if need be (and counts the key)
            part = self._parts[number - self._base]
            size = len(part)
            part.update(zip(keys[a + 1:b], values[a + 1:b], strict=True))
            self._size += len(part) - size

    def copy(self) -> IntParts[V]:
        """A copy whose parts are copies (the values are shared)."""
        out: IntParts[V] = IntParts()
        out._parts = [part.copy() for part in self._parts]
        out._size, out._base = self._size, self._base
        return out


class StrParts(_Parts[str, V]):
    """``str -> V`` spread over :data:`STR_PARTS` parts by hash (a string caches its hash)."""

    __slots__ = ()

    def __init__(self) -> None:
        self._parts = [{} for _ in range(STR_PARTS)]
        self._size = 0

    def __getitem__(self, key: str) -> V:
        return self._parts[hash(key) % STR_PARTS][key]

    def get(self, key: str, default: V | None = None) -> V | None:
        return self._parts[hash(key) % STR_PARTS].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._parts[hash(key) % STR_PARTS]

    def __setitem__(self, key: str, value: V) -> None:
        part = self._parts[hash(key) % STR_PARTS]
        size = len(part)
        part[key] = value
        self._size += len(part) - size

    def __delitem__(self, key: str) -> None:
        del self._parts[hash(key) % STR_PARTS][key]
        self._size -= 1

    def update(self, keys: Sequence[str], values: Sequence[V]) -> None:
        """Set every ``keys[i] -> values[i]``, the pairs of each part at C speed (see :func:`_check_batch`)."""
        n = _check_batch(keys, values)
        if n == 0:
            return
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=n) % STR_PARTS  # as ``hash(key) % STR_PARTS``
        order = np.argsort(hashes, kind="stable")
        cuts = np.searchsorted(hashes[order], np.arange(STR_PARTS + 1)).tolist()
        sorted_keys = np.fromiter(keys, dtype=object, count=n)[order].tolist()
        sorted_values = np.fromiter(values, dtype=object, count=n)[order].tolist()
        for part, (a, b) in zip(self._parts, pairwise(cuts), strict=True):
            size = len(part)
            part.update(zip(sorted_keys[a:b], sorted_values[a:b], strict=True))
            self._size += len(part) - size


#: The most pairs one ``update`` takes. Each of its steps is a single C call that holds the GIL throughout (a
#: thread switch waits for it); batches of a million held the event loop for 0.2–0.3 s here.
MAX_BATCH = 1 << PART_BITS


def _check_batch(keys: Sequence[K], values: Sequence[V]) -> int:
    """How many pairs ``update`` got. :raises ValueError: more than :data:`MAX_BATCH`, or not a value per key."""
    if len(keys) != len(values):
        raise ValueError(f"update() got {len(keys)} keys and {len(values)} values")
    if len(keys) > MAX_BATCH:
        raise ValueError(f"update() takes at most {MAX_BATCH} pairs at once, got {len(keys)}")
    return len(keys)
