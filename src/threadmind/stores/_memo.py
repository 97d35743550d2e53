"""A bounded memo of a function of one string, kept where the garbage collector does not walk it.

``functools.lru_cache`` keeps its entries in links that every full collection visits (two references an entry:
65 536 stems, thread ids and scope tokens were ~250 000 visits of each). A plain dict of strings to strings or
ints is never tracked, so this memo costs a collection nothing. When full it starts over: a miss costs one call
of the function (microseconds), and a working set larger than the bound was thrashing an LRU as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ("memo",)

V = TypeVar("V", str, int)


def memo(function: Callable[[str], V], most: int) -> Callable[[str], V]:
    """``function`` memoised for at most ``most`` distinct arguments (its values: strings or ints)."""
    memory: dict[str, V] = {}
    get = memory.get

    def memoised(key: str) -> V:
        value = get(key)
        if value is None:
            value = function(key)
            if len(memory) >= most:
                memory.clear()
            memory[key] = value
        return value

    memoised.__doc__ = function.__doc__
    memoised.__name__ = function.__name__
    return memoised
