"""Mastra's vector metadata filters (``semanticRecall.filter``), compiled to a predicate over one message's metadata.

A message's metadata is what ``@mastra/memory`` stores with its vectors: its thread's metadata, then
``message_id``, ``thread_id``, ``resource_id``, ``role``, ``content`` (the embedded text) and ``created_at`` (ISO
8601, UTC, milliseconds). threadmind evaluates the filter against the thread's metadata as it is when the query
runs (Mastra copies it into each vector when the message is embedded, so a later change of the thread's metadata
never reaches old vectors there).

The operators are Mastra's (MongoDB's query language): ``{field: value}`` (equality; a list field matches when
it holds the value), ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin``, ``$all``,
``$elemMatch``, ``$size``, ``$exists``, ``$regex`` (with ``$options``: ``i``, ``m``, ``s``, ``x``), ``$contains``
(a substring of a string, elements of a list, a subset of an object), and ``$and``, ``$or``, ``$nor``, ``$not``.
A field is a dotted path into nested objects. Comparisons hold only between numbers, or between strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import ConfigError

__all__ = ("MetadataFilter", "Predicate", "compile_filter")

Predicate = Callable[[Mapping[str, Any]], bool]
_MISSING = object()
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


class MetadataFilter:
    """A compiled filter: ``matches(metadata)``; ``source`` is the filter as given."""

    __slots__ = ("_predicate", "source")

    def __init__(self, source: Mapping[str, Any], predicate: Predicate) -> None:
        self.source = source
        self._predicate = predicate

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return self._predicate(metadata)


def compile_filter(source: Any, where: str = "semanticRecall.filter") -> MetadataFilter:
    """``source`` compiled; a filter that is not one raises ``ConfigError`` naming the place in it."""
    if not isinstance(source, Mapping):
        raise ConfigError(f"{where} must be an object of conditions, got {type(source).__name__}")
    return MetadataFilter(source, _conditions(source, where))


def _conditions(source: Mapping[str, Any], where: str) -> Predicate:
    parts: list[Predicate] = []
    for key, value in source.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where} has a key that is not a non-empty string: {key!r}")
        if key in ("$and", "$or", "$nor"):
            parts.append(_logical(key, value, f"{where}.{key}"))
        elif key == "$not":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.$not must be an object of conditions")
            inner = _conditions(value, f"{where}.$not")
            parts.append(lambda m, inner=inner: not inner(m))  # type: ignore[misc]
        elif key.startswith("$"):
            raise ConfigError(f"{where} has an unknown operator {key!r} where a field or $and/$or/$nor/$not belongs")
        else:
            parts.append(_field(key, value, f"{where}.{key}"))
    return lambda m: all(part(m) for part in parts)


def _logical(op: str, value: Any, where: str) -> Predicate:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        raise ConfigError(f"{where} must be a non-empty list of conditions")
    inner = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}[{i}] must be an object of conditions")
        inner.append(_conditions(item, f"{where}[{i}]"))
    if op == "$and":
        return lambda m: all(p(m) for p in inner)
    if op == "$or":
        return lambda m: any(p(m) for p in inner)
    return lambda m: not any(p(m) for p in inner)


def _path(metadata: Any, path: Sequence[str]) -> Any:
    value = metadata
    for step in path:
        if not isinstance(value, Mapping) or step not in value:
            return _MISSING
        value = value[step]
    return value


def _field(key: str, value: Any, where: str) -> Predicate:
    path = key.split(".")
    if isinstance(value, Mapping) and value and all(isinstance(k, str) and k.startswith("$") for k in value):
        test = _operators(value, where)
    elif isinstance(value, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in value):
        raise ConfigError(f"{where} mixes operators and fields")
    else:
        test = _equals_test(value)
    return lambda m: test(_path(m, path))


def _operators(ops: Mapping[str, Any], where: str) -> Callable[[Any], bool]:
    tests: list[Callable[[Any], bool]] = []
    options = ops.get("$options")
    if options is not None and "$regex" not in ops:
        raise ConfigError(f"{where}.$options needs $regex")
    for op, arg in ops.items():
        at = f"{where}.{op}"
        if op == "$options":
            continue
        if op == "$eq":
            tests.append(_equals_test(arg))
        elif op == "$ne":
            equal = _equals_test(arg)
            tests.append(lambda v, equal=equal: not equal(v))  # type: ignore[misc]
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            tests.append(_compare(op, arg, at))
        elif op in ("$in", "$nin"):
            choices = _list(arg, at)
            tests_ = [_equals_test(choice) for choice in choices]
            if op == "$in":
                tests.append(lambda v, t=tests_: any(test(v) for test in t))  # type: ignore[misc]
            else:
                tests.append(lambda v, t=tests_: not any(test(v) for test in t))  # type: ignore[misc]
        elif op == "$all":
            wanted = _list(arg, at)
            tests.append(lambda v, w=wanted: isinstance(v, list) and all(x in v for x in w))  # type: ignore[misc]
        elif op == "$elemMatch":
            if not isinstance(arg, Mapping):
                raise ConfigError(f"{at} must be an object")
            element = (_operators(arg, at) if all(isinstance(k, str) and k.startswith("$") for k in arg)
                       else _conditions(arg, at))
            tests.append(lambda v, e=element: isinstance(v, list) and any(e(x) for x in v))  # type: ignore[misc]
        elif op == "$size":
            if isinstance(arg, bool) or not isinstance(arg, int) or arg < 0:
                raise ConfigError(f"{at} must be a non-negative integer")
            tests.append(lambda v, n=arg: isinstance(v, list) and len(v) == n)  # type: ignore[misc]
        elif op == "$exists":
            if not isinstance(arg, bool):
                raise ConfigError(f"{at} must be true or false")
            tests.append(lambda v, want=arg: (v is not _MISSING) == want)  # type: ignore[misc]
        elif op == "$regex":
            tests.append(_regex(arg, options, at))
        elif op == "$contains":
            tests.append(lambda v, want=arg: _contains(v, want))  # type: ignore[misc]
        elif op == "$not":
            if not isinstance(arg, Mapping):
                raise ConfigError(f"{at} must be an object of operators")
            inner = _operators(arg, at)
            tests.append(lambda v, inner=inner: not inner(v))  # type: ignore[misc]
        else:
            raise ConfigError(f"{where} has an unknown operator {op!r}")
    return lambda v: all(test(v) for test in tests)


def _list(arg: Any, where: str) -> list[Any]:
    if not isinstance(arg, Sequence) or isinstance(arg, (str, bytes)):
        raise ConfigError(f"{where} must be a list")
    return list(arg)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _equals_test(want: Any) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        if value is _MISSING:
            return want is None
        if _same(value, want):
            return True
        return isinstance(value, list) and not isinstance(want, list) and any(_same(x, want) for x in value)

    return test


def _compare(op: str, arg: Any, where: str) -> Callable[[Any], bool]:
    if isinstance(arg, bool) or not isinstance(arg, (int, float, str)):
        raise ConfigError(f"{where} must be a number or a string")
    numeric = isinstance(arg, (int, float))

    def test(value: Any) -> bool:
        if isinstance(value, bool) or value is _MISSING:
            return False
        if numeric != isinstance(value, (int, float)) or (not numeric and not isinstance(value, str)):
            return False
        if op == "$gt":
            return bool(value > arg)
        if op == "$gte":
            return bool(value >= arg)
        if op == "$lt":
            return bool(value < arg)
        return bool(value <= arg)

    return test


def _regex(pattern: Any, options: Any, where: str) -> Callable[[Any], bool]:
    if not isinstance(pattern, str):
        raise ConfigError(f"{where} must be a string")
    flags = 0
    for letter in options or "":
        if letter not in _FLAGS:
            raise ConfigError(f"{where} $options may hold i, m, s and x, not {letter!r}")
        flags |= _FLAGS[letter]
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise ConfigError(f"{where} is not a valid regular expression: {exc}") from exc
    return lambda v: isinstance(v, str) and compiled.search(v) is not None


def _contains(value: Any, want: Any) -> bool:
    if isinstance(value, str):
        return isinstance(want, str) and want in value
    if isinstance(value, list):
        wanted = want if isinstance(want, list) else [want]
        return all(any(_same(x, w) for x in value) for w in wanted)
    if isinstance(value, Mapping) and isinstance(want, Mapping):
        return all(k in value and (_contains(value[k], w) if isinstance(w, Mapping) else _same(value[k], w))
                   for k, w in want.items())
    return False
