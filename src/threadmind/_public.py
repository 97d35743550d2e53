"""Public names shown where users import them: anyio's practice for re-exports."""

from __future__ import annotations

import inspect
from collections.abc import MutableMapping

import msgspec

__all__ = ("present_as",)


def present_as(namespace: MutableMapping[str, object], package: str) -> None:
    """Give each class and function ``package`` lists in ``__all__`` (and defines in one of its private modules) the
    package as its ``__module__``, so reprs, ``help()`` and tracebacks name the path users import. msgspec Structs
    keep their defining module: msgspec resolves their annotations there."""
    names = namespace.get("__all__", ())
    for name in names if isinstance(names, tuple | list) else ():
        value = namespace.get(str(name))
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or not module.startswith(f"{package}._"):
            continue
        if isinstance(value, type) and issubclass(value, msgspec.Struct):
            continue
        if isinstance(value, type) or inspect.isfunction(value):
            value.__module__ = package
