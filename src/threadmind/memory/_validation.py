"""Argument checks of the public Memory methods: each raises ``ValidationError`` naming the field.

Checks that stores apply too (paging, include windows, date ranges, metadata filters) live in
``threadmind.stores`` and are used from there, so Memory and every store refuse the same inputs alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..codecs import Message, encode_json, message_from_dict
from ..codecs._json import checked_message
from ..errors import InvalidMessage, ValidationError
from ..processors._protocol import processor_id

__all__ = (
    "check_ids",
    "check_metadata",
    "check_title",
    "coerce_message",
    "configured_ids",
    "require_id",
)


def require_id(value: object, field: str) -> str:
    """A non-empty string id (``ValidationError`` naming ``field`` otherwise)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"`{field}` must be a non-empty string, got {value!r}")
    return value


def check_ids(thread_id: object, resource_id: object) -> None:
    """A thread id and an optional resource id, as working-memory calls take them."""
    require_id(thread_id, "thread_id")
    if resource_id is not None:
        require_id(resource_id, "resource_id")


def check_title(title: object) -> None:
    """A title is a string (or None: unchanged / none)."""
    if title is not None and not isinstance(title, str):
        raise ValidationError(f"`title` must be a string, got {type(title).__name__}")


def check_metadata(metadata: object) -> None:
    """Thread metadata must be a dict that encodes as JSON (msgspec raises NotImplementedError otherwise)."""
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"`metadata` must be a dict, got {type(metadata).__name__}")
    try:
        encode_json(dict(metadata))
    except (TypeError, ValueError, NotImplementedError, msgspec.EncodeError) as exc:
        raise ValidationError(f"`metadata` is not JSON-serializable: {exc}") from exc


def configured_ids(configured: object) -> set[str]:
    """The ids of the processors a caller configured itself (memory skips those)."""
    if configured is None:
        return set()
    if isinstance(configured, (str, bytes, Mapping)) or not isinstance(configured, Iterable):
        raise ValidationError(f"`configured` must be a list of processors, got {type(configured).__name__}")
    return {processor_id(p) for p in configured}


def coerce_message(value: object, index: int) -> Message:
    """``messages[index]`` as a checked ``Message`` (a dict in Mastra's JSON shape is decoded)."""
    if isinstance(value, Message):
        if not isinstance(value.id, str) or not value.id:
            raise ValidationError(f"messages[{index}].id must be a non-empty string, got {value.id!r}")
        # A Message built in Python is not type-checked by msgspec: check it stores and reads back.
        return checked_message(value, f"messages[{index}]")
    if isinstance(value, Mapping):
        for snake, camel in _SNAKE_KEYS:
            if snake in value and camel not in value:
                raise ValidationError(
                    f"messages[{index}] is a dict in Mastra's JSON shape, whose keys are camelCase: use `{camel}`, "
                    f"not `{snake}` (or pass a Message, whose attributes are snake_case)")
        try:
            return message_from_dict(value)
        except InvalidMessage as exc:
            text = exc.message
            text = text.replace("`$.", f"`messages[{index}].") if "`$." in text else f"{text} - at `messages[{index}]`"
            raise InvalidMessage(text) from exc
    raise ValidationError(f"messages[{index}] must be a Message or a dict, not {type(value).__name__}")


_SNAKE_KEYS = (("thread_id", "threadId"), ("resource_id", "resourceId"), ("created_at", "createdAt"))


def check_list(value: object, field: str, what: str) -> Sequence[Any]:

    """A list argument (a str, bytes or dict is refused even though some are sequences)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ValidationError(f"`{field}` must be a list of {what}, got {type(value).__name__}")
    return value
