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
    "check_list",
    "check_metadata",
    "check_recall_args",
    "check_search_args",
    "check_vector_search_args",
    "check_title",
    "coerce_message",
    "configured_ids",
    "require_id",
    "saveable_batch",
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


def check_recall_args(thread_id: object, resource_id: object, page: object, per_page: object, direction: object,
                      include: object) -> None:
    """``Memory.recall``'s arguments, with the reference's codes for a bad thread id or page."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise ValidationError("threadId must be a non-empty string or array of non-empty strings",
                              code="MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_THREAD_ID")
    if resource_id is not None:
        require_id(resource_id, "resource_id")
    if isinstance(page, bool) or not isinstance(page, int) or page < 0:
        raise ValidationError(f"page must be a non-negative integer, got {page!r}",
                              code="MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_PAGE")
    if per_page is not None and per_page is not False and (
        per_page is True or not isinstance(per_page, int) or per_page < 0
    ):
        raise ValidationError(f"per_page must be a non-negative integer, False (all) or None, got {per_page!r}")
    if direction is not None and direction not in ("ASC", "DESC"):
        raise ValidationError(f"direction must be 'ASC' or 'DESC', got {direction!r}")
    if include is not None:
        check_list(include, "include", "{id, with_previous_messages, with_next_messages}")


def check_search_args(query: object, resource_id: object, thread_id: object, top_k: object, search: object,
                      threshold: object) -> None:
    """``Memory.search``'s arguments."""
    from ..search import SEARCH_MODES

    if not isinstance(query, str):
        raise ValidationError(f"`query` must be a string, got {type(query).__name__}")
    require_id(resource_id, "resource_id")
    if thread_id is not None:
        require_id(thread_id, "thread_id")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
        raise ValidationError(f"`top_k` must be an integer from 1 to 1000, got {top_k!r}")
    if search is not None and search not in SEARCH_MODES:
        raise ValidationError(f"`search` must be one of {', '.join(SEARCH_MODES)} or None, got {search!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise ValidationError(f"`threshold` must be a number or None, got {threshold!r}")


def saveable_batch(messages: object) -> list[Message]:
    """``Memory.save_messages``' messages checked (each a Message or a Mastra dict, with its thread and resource),
    cleaned (system messages and transient signals dropped, working-memory tags stripped) and with each id once
    (a repeated id: the last copy wins, in the first slot)."""
    from ..processors._hygiene import persistable

    if type(messages) is not list and (isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence)):
        raise ValidationError("`messages` must be a list of Message objects or dicts")
    batch: list[Message] = []
    seen: dict[str, int] = {}
    for index, value in enumerate(messages):
        message = coerce_message(value, index)
        thread_id, resource_id = message.thread_id, message.resource_id
        # The field names are formatted only on failure (this loop runs for every saved message).
        if not (type(thread_id) is str and thread_id.strip()):
            require_id(thread_id, f"messages[{index}].thread_id")
        if not (type(resource_id) is str and resource_id.strip()):
            require_id(resource_id, f"messages[{index}].resource_id")
        kept = persistable(message)
        if kept is None:
            continue
        if kept.id in seen:
            batch[seen[kept.id]] = kept
            continue
        seen[kept.id] = len(batch)
        batch.append(kept)
    return batch


def check_vector_search_args(text: object, top_k: object, thread_id: object, resource_id: object) -> None:
    """``Memory.search_vectors``' arguments."""
    if not isinstance(text, str):
        raise ValidationError(f"`text` must be a string, got {type(text).__name__}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 10_000:
        raise ValidationError(f"`top_k` must be an integer from 1 to 10000, got {top_k!r}")
    if thread_id is not None:
        require_id(thread_id, "thread_id")
    if resource_id is not None:
        require_id(resource_id, "resource_id")
