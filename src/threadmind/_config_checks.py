"""The checks every options record runs in ``__post_init__`` (configs built in Python skip msgspec's type checks,
so they are checked here), and the struct settings they share."""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

__all__ = ("CFG", "instance", "non_negative_int", "num", "one_of", "unsupported")

# Positional arguments follow SPEC's field order (``MessageHistoryConfig(2000)``, ``MessageRange(2, 1)``).
CFG: dict[str, Any] = {"frozen": True, "rename": "camel", "forbid_unknown_fields": True}


def non_negative_int(value: object, name: str) -> None:
    """A count option: an int of 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a finite non-negative integer")


def num(value: float) -> float | int:
    """A number as the reference prints it (JavaScript shows 2000, not 2000.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def one_of(value: object, allowed: tuple[object, ...], name: str) -> None:
    """A literal option (configs built in Python skip msgspec's type checks, so they are checked here)."""
    if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
        raise ConfigError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")


def instance(value: object, types: type | tuple[type, ...], name: str, what: str) -> None:
    """An option of one of ``types`` (``what`` names them in the error)."""
    if not isinstance(value, types):
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def unsupported(value: object, supported: object, name: str, why: str) -> None:
    """A reference option threadmind accepts only at the value whose behaviour it has."""
    if value != supported:
        raise ConfigError(f"{name}={value!r} is not supported by threadmind: {why}")
