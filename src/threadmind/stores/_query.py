"""Validation, filtering and paging rules shared by ``SQLiteStore`` and ``InMemoryStore``.

Both stores call these helpers so that they raise the same errors (reference §5.3 codes) and compute the
same ``total``/``has_more``; only the row access differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import msgspec

from ..codecs import Message, MessageContent, Resource, Thread, encode_json
from ..codecs._json import checked_message, decode_content, encode_content
from ..codecs._time import from_iso, to_utc_ms, utc_now
from ..errors import InvalidMessage, ResourceMismatch, ValidationError
from ._protocol import UNSET, DateRange, Include, MessageQuery, UnsetType

__all__ = (
    "MessageFilter",
    "parse_date_range",
    "parse_include",
    "MessageUpdate",
    "ThreadListArgs",
    "apply_update",
    "as_stored",
    "assemble",
    "check_owner",
    "check_resource_args",
    "content_metadata_matches",
    "encode_content_text",
    "encode_metadata",
    "merge_content",
    "messages_has_more",
    "ms",
    "parse_updates",
    "saved",
    "sql_scalar",
    "stored_thread",
    "thread_metadata_matches",
    "updated_resource",
    "updated_thread",
    "validate_delete_ids",
    "validate_message_query",
    "validate_messages",
    "validate_thread",
    "validate_thread_list",
)

K = TypeVar("K")

_LIBSQL = "MASTRA_STORAGE_LIBSQL_"
_KEY_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RESERVED_KEYS = frozenset({"__proto__", "prototype", "constructor"})
_ROLES = frozenset({"user", "assistant", "system", "signal"})
_UTC = UTC
_json_any = msgspec.json.Decoder()
_MISSING: Any = object()


def ms(value: datetime) -> datetime:
    """``value`` as aware UTC at millisecond precision (fast path when it already is)."""
    if value.tzinfo is _UTC and not value.microsecond % 1000:
        return value
    return to_utc_ms(value)


def as_stored(message: Message) -> Message:
    """The message as a store hands it back: ms-precision UTC ``created_at``, ``type`` 'v2' dropped."""
    created = ms(message.created_at)
    if created is message.created_at and message.type != "v2":
        return message
    return msgspec.structs.replace(message, created_at=created, type=None if message.type == "v2" else message.type)


def encode_content_text(content: MessageContent) -> str:
    """The ``mastra_messages.content`` text (compact JSON, non-ASCII unescaped)."""
    return encode_content(content).decode()


def encode_metadata(metadata: Mapping[str, Any] | None, field: str) -> str | None:
    """Metadata as compact JSON text (what we write to ``metadata`` columns), or None."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"{field} must be a mapping or None, got {type(metadata).__name__}")
    try:
        return encode_json(dict(metadata)).decode()
    except (ValidationError, TypeError, msgspec.EncodeError) as exc:  # encode_json raises InvalidMessage
        raise ValidationError(f"{field} is not JSON-serializable: {exc}") from exc


def _roundtrip(metadata: Mapping[str, Any] | None, field: str) -> tuple[str | None, dict[str, Any] | None]:
    """The JSON text we store and the value a later read returns (so both stores hand back the same)."""
    text = encode_metadata(metadata, field)
    return text, None if text is None else _json_any.decode(text)


# -- threads -----------------------------------------------------------------------------------------


def validate_thread(thread: Any) -> None:
    """A thread to insert needs a non-empty ``id`` and ``resource_id``."""
    from ..codecs import Thread

    if not isinstance(thread, Thread):
        raise ValidationError(f"thread must be a Thread, got {type(thread).__name__}")
    if not isinstance(thread.id, str) or not thread.id.strip():
        raise ValidationError("thread.id must be a non-empty string")
    if not isinstance(thread.resource_id, str) or not thread.resource_id.strip():
        raise ValidationError("thread.resource_id must be a non-empty string")
    if not isinstance(thread.title, str):
        raise ValidationError("thread.title must be a string")
    for name in ("id", "resource_id", "title"):
        _check_utf8(getattr(thread, name), f"thread.{name}")


def _check_utf8(text: str, field: str) -> None:
    """SQLite stores text as UTF-8: a lone surrogate cannot be stored (nor round-trip through JSON)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{field} is not valid text: {exc}") from exc


def stored_thread(thread: Thread) -> tuple[Thread, str | None]:
    """The thread as stored (ms UTC timestamps, JSON-normalised metadata) and its metadata JSON text."""
    text, metadata = _roundtrip(thread.metadata, "thread.metadata")
    stored = msgspec.structs.replace(thread, metadata=metadata, created_at=ms(thread.created_at),
                                     updated_at=ms(thread.updated_at))
    return stored, text


def updated_thread(old: Thread, title: str | None, metadata: Mapping[str, Any] | None) -> Thread:
    """Title replaced when given, metadata shallow-merged when given, ``updated_at`` = now."""
    merged = old.metadata
    if metadata is not None:
        merged = _roundtrip({**(old.metadata or {}), **metadata}, "metadata")[1]
    return msgspec.structs.replace(old, title=old.title if title is None else title, metadata=merged,
                                   updated_at=utc_now())


class ThreadListArgs(msgspec.Struct, frozen=True):
    """Validated ``list_threads`` arguments: SQL column to order by and the metadata filter pairs."""

    offset: int
    limit: int | None
    order_column: Literal["createdAt", "updatedAt"]
    descending: bool
    metadata: list[tuple[str, Any]]


# The largest integer accepted for paging, windows and filter values: JavaScript's safe integer (Mastra's
# bound too); SQLite's own limit is 2**63 - 1, past which binding raises OverflowError.
MAX_INT = 2**53 - 1
_MAX_FILTER_KEYS = 64  # a metadata filter is one AND term per key; SQLite refuses very deep expressions


def _check_metadata_filter(metadata: Mapping[str, Any] | None, code_prefix: str) -> list[tuple[str, Any]]:
    if metadata is None:
        return []
    if not isinstance(metadata, Mapping):
        raise ValidationError("metadata filter must be a mapping", code=f"{code_prefix}INVALID_METADATA_VALUE")
    if len(metadata) > _MAX_FILTER_KEYS:
        raise ValidationError(f"metadata filter has {len(metadata)} keys; at most {_MAX_FILTER_KEYS} are allowed",
                              code=f"{code_prefix}INVALID_METADATA_VALUE")
    pairs: list[tuple[str, Any]] = []
    for key, value in metadata.items():
        if (not isinstance(key, str) or len(key) > 128 or not _KEY_RE.fullmatch(key)
                or key in _RESERVED_KEYS):
            raise ValidationError(
                f'Invalid metadata key: "{key}". Keys must start with a letter or underscore and contain only '
                "alphanumeric characters and underscores.",
                code=f"{code_prefix}INVALID_METADATA_KEY",
            )
        if value is not None and not isinstance(value, (str, int, float)):
            raise ValidationError(
                f'Invalid metadata value for key "{key}": only strings, numbers, booleans and null can be '
                f"filtered on, got {type(value).__name__}",
                code=f"{code_prefix}INVALID_METADATA_VALUE",
            )
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ValidationError(f'Invalid metadata value for key "{key}": integers beyond ±{MAX_INT} cannot be '
                                  "filtered on", code=f"{code_prefix}INVALID_METADATA_VALUE")
        pairs.append((key, value))
    return pairs


def _check_paging(page: Any, per_page: Any, code: str) -> None:
    if isinstance(page, bool) or not isinstance(page, int) or page < 0:
        raise ValidationError(f"page must be a non-negative integer, got {page!r}", code=code)
    if per_page is True or (per_page is not False and (not isinstance(per_page, int) or per_page < 0)):
        raise ValidationError(f"per_page must be a non-negative integer or False (all), got {per_page!r}",
                              code=code)
    if page > MAX_INT or (per_page is not False and per_page > MAX_INT) \
            or (per_page is not False and page * per_page > MAX_INT):
        raise ValidationError(f"page and per_page must keep the offset within {MAX_INT}, got page={page!r}, "
                              f"per_page={per_page!r}", code=code)


def validate_thread_list(
    page: int, per_page: int | bool, order_by: str, direction: str, metadata: Mapping[str, Any] | None
) -> ThreadListArgs:
    """Check ``list_threads`` arguments (reference §5.3) and normalise them."""
    code = f"{_LIBSQL}LIST_THREADS_INVALID_PAGE"
    _check_paging(page, per_page, code)
    if per_page is False and page != 0:
        raise ValidationError("page must be 0 when perPage is false", code=code)
    column: Literal["createdAt", "updatedAt"]
    if order_by in ("created_at", "createdAt"):
        column = "createdAt"
    elif order_by in ("updated_at", "updatedAt"):
        column = "updatedAt"
    else:
        raise ValidationError(f"order_by must be 'created_at' or 'updated_at', got {order_by!r}")
    if direction not in ("ASC", "DESC"):
        raise ValidationError(f"direction must be 'ASC' or 'DESC', got {direction!r}")
    pairs = _check_metadata_filter(metadata, f"{_LIBSQL}LIST_THREADS_")
    limit = None if per_page is False else int(per_page)
    return ThreadListArgs(0 if limit is None else page * limit, limit, column, direction == "DESC", pairs)


def sql_scalar(value: Any) -> Any:
    """What ``json_extract`` yields for a JSON value: booleans as 1/0, containers as compact JSON text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (dict, list)):
        return encode_json(value).decode()
    return value


def thread_metadata_matches(metadata: Mapping[str, Any] | None, pairs: Sequence[tuple[str, Any]]) -> bool:
    """In-memory twin of ``json_extract(metadata, '$.k') = ?`` (null → IS NULL, booleans as 1/0)."""
    for key, wanted in pairs:
        stored = sql_scalar(metadata.get(key) if metadata else None)
        want = sql_scalar(wanted)
        if want is None:
            if stored is not None:
                return False
        elif isinstance(want, str):
            if not isinstance(stored, str) or stored != want:
                return False
        elif isinstance(stored, str) or stored is None or stored != want:
            return False
    return True


# -- messages ----------------------------------------------------------------------------------------


class MessageFilter(msgspec.Struct, frozen=True):
    """A validated ``list_messages`` query."""

    thread_ids: list[str]
    resource_id: str | None
    offset: int
    limit: int | None  # None = all rows; 0 = only include windows
    descending: bool
    start: datetime | None
    start_exclusive: bool
    end: datetime | None
    end_exclusive: bool
    metadata: list[tuple[str, Any]]
    include: list[Include]


_INCLUDE_KEYS = {"id", "with_previous_messages", "withPreviousMessages", "with_next_messages", "withNextMessages"}
_DATE_KEYS = {"start", "end", "start_exclusive", "end_exclusive", "startExclusive", "endExclusive"}


def parse_include(item: Any, index: int) -> Include:
    """``include[index]``: an ``Include`` or a dict with ``id`` and snake- or camelCase window sizes."""
    if isinstance(item, Include):
        inc = item
    elif isinstance(item, Mapping):
        unknown = set(item) - _INCLUDE_KEYS
        if unknown:
            raise ValidationError(f"include[{index}] has unknown keys {sorted(map(str, unknown))}; use id, "
                                  "with_previous_messages, with_next_messages")
        get = item.get
        inc = Include(
            id=get("id"),  # type: ignore[arg-type]
            with_previous_messages=get("with_previous_messages", get("withPreviousMessages", 0)),
            with_next_messages=get("with_next_messages", get("withNextMessages", 0)),
        )
    else:
        raise ValidationError(f"include[{index}] must be a dict with a string 'id', got {type(item).__name__}")
    if not isinstance(inc.id, str) or not inc.id:
        raise ValidationError(f"include[{index}] must be a dict with a string 'id'")
    for name in ("with_previous_messages", "with_next_messages"):
        count = getattr(inc, name)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0 or count > MAX_INT:
            raise ValidationError(f"include[{index}].{name} must be a non-negative integer up to {MAX_INT}, got "
                                  f"{count!r}")
    return inc


def parse_date_range(value: Any) -> DateRange | None:
    """A ``DateRange`` or a dict ``{start, end, start_exclusive, end_exclusive}`` (camelCase flags too)."""
    if value is None or isinstance(value, DateRange):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError(f"date_range must be a dict with start/end datetimes, got {type(value).__name__}")
    unknown = set(value) - _DATE_KEYS
    if unknown:
        raise ValidationError(f"date_range has unknown keys {sorted(map(str, unknown))}; use start, end, "
                              "*_exclusive")
    for key in ("start", "end"):
        if value.get(key) is not None and not isinstance(value[key], datetime):
            raise ValidationError(f"date_range.{key} must be a datetime or None")
    return DateRange(
        start=value.get("start"),
        end=value.get("end"),
        start_exclusive=bool(value.get("start_exclusive", value.get("startExclusive", False))),
        end_exclusive=bool(value.get("end_exclusive", value.get("endExclusive", False))),
    )


def validate_message_query(query: MessageQuery) -> MessageFilter:
    """Check a ``list_messages`` query (reference §5.3 codes) and normalise it."""
    if not isinstance(query, MessageQuery):
        raise ValidationError(f"query must be a MessageQuery, got {type(query).__name__}")
    raw_ids = query.thread_id
    ids = [raw_ids] if isinstance(raw_ids, str) else raw_ids
    if (not isinstance(ids, list) or not ids
            or not all(isinstance(t, str) and t.strip() for t in ids)):
        raise ValidationError("threadId must be a non-empty string or array of non-empty strings",
                              code=f"{_LIBSQL}LIST_MESSAGES_INVALID_THREAD_ID")
    _check_paging(query.page, query.per_page, f"{_LIBSQL}LIST_MESSAGES_INVALID_PAGE")
    if query.direction not in ("ASC", "DESC"):
        raise ValidationError(f"direction must be 'ASC' or 'DESC', got {query.direction!r}")
    if query.resource_id is not None and not isinstance(query.resource_id, str):
        raise ValidationError("resource_id must be a string or None")
    dates = parse_date_range(query.date_range)
    pairs = _check_metadata_filter(query.metadata, f"{_LIBSQL}LIST_MESSAGES_")
    includes = [parse_include(item, i) for i, item in enumerate(query.include or ())]

    limit = None if query.per_page is False else int(query.per_page)
    offset = 0 if limit is None else query.page * limit
    return MessageFilter(
        list(dict.fromkeys(ids)), query.resource_id, offset, limit, query.direction == "DESC",
        ms(dates.start) if dates and dates.start else None, bool(dates and dates.start_exclusive),
        ms(dates.end) if dates and dates.end else None, bool(dates and dates.end_exclusive),
        pairs, includes,
    )


def content_metadata_matches(content: MessageContent, pairs: Sequence[tuple[str, Any]]) -> bool:
    """Scalar equality on ``content.metadata.<key>`` with an exact JSON type match."""
    metadata = content.metadata
    for key, wanted in pairs:
        value = metadata.get(key, _MISSING) if isinstance(metadata, dict) else _MISSING
        if value is _MISSING:
            return False
        if wanted is None or isinstance(wanted, bool):
            if value is not wanted:
                return False
        elif isinstance(wanted, str):
            if not isinstance(value, str) or value != wanted:
                return False
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value != wanted:
            return False
    return True


def assemble(page: Iterable[tuple[K, Message]], extra: Iterable[tuple[K, Message]], descending: bool) -> list[Message]:
    """Union the page rows and include windows by id and sort them by (created_at, sequence) key."""
    rows: dict[str, tuple[K, Message]] = {}
    for key, message in page:
        rows[message.id] = (key, message)
    for key, message in extra:
        rows.setdefault(message.id, (key, message))
    ordered = sorted(rows.values(), key=lambda row: row[0], reverse=descending)  # type: ignore[arg-type,return-value]
    return [message for _, message in ordered]


def messages_has_more(flt: MessageFilter, page_count: int, total: int, messages: Sequence[Message]) -> bool:
    """Reference §5.3: false for ``per_page=False``; otherwise more rows exist past this page."""
    if flt.limit is None or flt.limit == 0:
        return False
    if flt.metadata:
        return flt.offset + page_count < total
    threads = set(flt.thread_ids)
    returned = sum(1 for m in messages if m.thread_id in threads)
    return returned < total and flt.offset + flt.limit < total


def validate_messages(thread_id: str, messages: Sequence[Message]) -> list[Message]:
    """Checks on a batch for ``thread_id`` before anything is written: Message instances with ids, this thread,
    a resource id, and content that stores and reads back (``checked_message``). Returns the messages to store
    (content as a read gives it)."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise ValidationError("thread_id must be a non-empty string")
    checked: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ValidationError(f"messages[{i}] must be a Message, got {type(message).__name__}")
        if not isinstance(message.id, str) or not message.id:
            raise ValidationError(f"messages[{i}].id must be a non-empty string")
        if message.thread_id != thread_id:
            raise ValidationError(
                f"messages[{i}].thread_id is {message.thread_id!r} but the batch is for thread {thread_id!r}"
            )
        if not isinstance(message.resource_id, str) or not message.resource_id:
            raise ValidationError(f"messages[{i}].resource_id is required (the thread's resource id)")
        checked.append(checked_message(message, f"messages[{i}]"))
    return checked


def check_owner(thread_id: str, owner: str, messages: Sequence[Message]) -> None:
    """Every message must carry the thread's resource id (``ResourceMismatch`` otherwise)."""
    for message in messages:
        if message.resource_id != owner:
            raise ResourceMismatch(thread_id, owner, str(message.resource_id))


def saved(messages: Sequence[Message], kept: Mapping[str, datetime]) -> list[Message]:
    """What ``save_messages`` returns: one entry per id (first position, last content), original times kept."""
    out: dict[str, Message] = {}
    for message in messages:
        first = out.get(message.id)
        created = kept.get(message.id) or (first.created_at if first is not None else None)
        stored = as_stored(message)
        if created is not None and created != stored.created_at:
            stored = msgspec.structs.replace(stored, created_at=created)
        out[message.id] = stored
    return list(out.values())


def validate_delete_ids(ids: Sequence[str]) -> list[str]:
    """Every id must be a non-empty string (reference wording); duplicates collapse."""
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise ValidationError("Invalid input: must be an array of message IDs")
    if not all(isinstance(i, str) and i for i in ids):
        raise ValidationError("All message IDs must be non-empty strings")
    return list(dict.fromkeys(ids))


# -- updates -----------------------------------------------------------------------------------------


class MessageUpdate(msgspec.Struct, frozen=True):
    """One parsed ``update_messages`` entry; UNSET fields are left untouched."""

    id: str
    content: Mapping[str, Any] | MessageContent | msgspec.UnsetType = msgspec.UNSET
    role: str | msgspec.UnsetType = msgspec.UNSET
    type: str | None | msgspec.UnsetType = msgspec.UNSET
    thread_id: str | msgspec.UnsetType = msgspec.UNSET
    resource_id: str | None | msgspec.UnsetType = msgspec.UNSET
    created_at: datetime | msgspec.UnsetType = msgspec.UNSET


_UPDATE_KEYS = {
    "id": "id", "content": "content", "role": "role", "type": "type",
    "thread_id": "thread_id", "threadId": "thread_id", "resource_id": "resource_id", "resourceId": "resource_id",
    "created_at": "created_at", "createdAt": "created_at",
}


def parse_updates(updates: Sequence[Mapping[str, Any]]) -> list[MessageUpdate]:
    """Validate ``update_messages`` input: dicts with an ``id`` and known fields (snake or camel case)."""
    if isinstance(updates, (str, Mapping)) or not isinstance(updates, Sequence):
        raise ValidationError("updates must be a list of dicts with an 'id'")
    parsed: list[MessageUpdate] = []
    for i, update in enumerate(updates):
        if not isinstance(update, Mapping):
            raise ValidationError(f"updates[{i}] must be a dict, got {type(update).__name__}")
        fields: dict[str, Any] = {}
        for key, value in update.items():
            name = _UPDATE_KEYS.get(key)
            if name is None:
                raise ValidationError(f"updates[{i}] has an unknown field {key!r}")
            fields[name] = value
        mid = fields.get("id")
        if not isinstance(mid, str) or not mid:
            raise ValidationError(f"updates[{i}].id must be a non-empty string")
        content = fields.get("content", msgspec.UNSET)
        if content is not msgspec.UNSET and not isinstance(content, (Mapping, MessageContent)):
            raise ValidationError(f"updates[{i}].content must be a dict or MessageContent")
        role = fields.get("role", msgspec.UNSET)
        if role is not msgspec.UNSET and (not isinstance(role, str) or role not in _ROLES):
            raise ValidationError(f"updates[{i}].role must be one of {sorted(_ROLES)}, got {role!r}")
        mtype = fields.get("type", msgspec.UNSET)
        if mtype is not msgspec.UNSET and mtype is not None and not isinstance(mtype, str):
            raise ValidationError(f"updates[{i}].type must be a string or None")
        thread_id = fields.get("thread_id", msgspec.UNSET)
        if thread_id is not msgspec.UNSET and not isinstance(thread_id, str):
            raise ValidationError(f"updates[{i}].thread_id must be a string")
        resource_id = fields.get("resource_id", msgspec.UNSET)
        if resource_id is not msgspec.UNSET and resource_id is not None and not isinstance(resource_id, str):
            raise ValidationError(f"updates[{i}].resource_id must be a string or None")
        created = fields.get("created_at", msgspec.UNSET)
        if isinstance(created, str):
            try:
                created = from_iso(created)
            except OverflowError as exc:
                raise ValidationError(f"updates[{i}].created_at {created!r} has no UTC equivalent to store") from exc
            except ValueError as exc:
                raise ValidationError(f"updates[{i}].created_at is not an ISO-8601 timestamp") from exc

        if created is not msgspec.UNSET and not isinstance(created, datetime):
            raise ValidationError(f"updates[{i}].created_at must be a datetime or ISO string")
        if isinstance(created, datetime):
            try:
                created = ms(created)
            except (OverflowError, ValueError) as exc:  # e.g. year 1 at +01:00: no UTC instant to store
                raise ValidationError(f"updates[{i}].created_at {created!r} has no UTC equivalent to store") from exc
        parsed.append(MessageUpdate(mid, content, role, mtype, thread_id, resource_id, created))

    return parsed


def _content_dict(value: Mapping[str, Any] | MessageContent) -> dict[str, Any]:
    buf = encode_content(value) if isinstance(value, MessageContent) else encode_json(dict(value))
    decoded = _json_any.decode(buf)
    if not isinstance(decoded, dict):  # pragma: no cover - both inputs encode to an object
        raise ValidationError("content must encode to a JSON object")
    return decoded


def merge_content(old: MessageContent, new: Mapping[str, Any] | MessageContent) -> MessageContent:
    """``{...old, ...new}`` one level deep, with ``metadata`` merged one level too (reference §1)."""
    try:
        old_d = _content_dict(old)
        new_d = _content_dict(new)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"content is not JSON-serializable: {exc}") from exc
    merged = {**old_d, **new_d}
    old_meta, new_meta = old_d.get("metadata"), new_d.get("metadata")
    if isinstance(old_meta, dict) and isinstance(new_meta, dict):
        merged["metadata"] = {**old_meta, **new_meta}
    try:
        return decode_content(encode_json(merged))
    except InvalidMessage as exc:
        raise ValidationError(f"merged content is invalid: {exc.message}") from exc


def apply_update(old: Message, update: MessageUpdate) -> Message:
    """The message after ``update``; a message never moves to another thread (``ValidationError``)."""
    if update.thread_id is not msgspec.UNSET and update.thread_id != old.thread_id:
        raise ValidationError(
            f"message {old.id!r} belongs to thread {old.thread_id!r}; update_messages cannot move it to "
            f"thread {update.thread_id!r}"
        )
    changes: dict[str, Any] = {}
    if update.content is not msgspec.UNSET:
        changes["content"] = merge_content(old.content, update.content)
    if update.role is not msgspec.UNSET:
        changes["role"] = update.role
    if update.type is not msgspec.UNSET:
        changes["type"] = None if update.type in (None, "v2") else update.type
    if update.resource_id is not msgspec.UNSET:
        changes["resource_id"] = update.resource_id
    if update.created_at is not msgspec.UNSET:
        changes["created_at"] = update.created_at
    if not changes:
        return old
    # The merged content must store and read back like any saved message (checked before anything is written).
    return checked_message(msgspec.structs.replace(old, **changes), f"update of message {old.id!r}")


# -- resources ---------------------------------------------------------------------------------------


def check_resource_args(resource_id: str, working_memory: Any, metadata: Any) -> None:
    """``update_resource`` arguments: a non-empty id, a string/None/UNSET working memory, mapping metadata."""
    if not isinstance(resource_id, str) or not resource_id.strip():
        raise ValidationError("resource_id must be a non-empty string")
    if working_memory is not UNSET and working_memory is not None and not isinstance(working_memory, str):
        raise ValidationError("working_memory must be a string or None")
    encode_metadata(metadata, "metadata")


def updated_resource(
    resource_id: str, old: Resource | None, working_memory: str | None | UnsetType, metadata: Mapping[str, Any] | None
) -> Resource:
    """The resource after an update; a missing row is created with metadata ``{}`` merged with ``metadata``."""
    now = utc_now()
    if old is None:
        merged = _roundtrip({**(metadata or {})}, "metadata")[1]
        memory = None if isinstance(working_memory, UnsetType) else working_memory
        return Resource(resource_id, memory, merged, now, now)
    new_meta = old.metadata
    if metadata is not None:
        new_meta = _roundtrip({**(old.metadata or {}), **metadata}, "metadata")[1]
    memory = old.working_memory if isinstance(working_memory, UnsetType) else working_memory
    return Resource(resource_id, memory, new_meta, old.created_at, now)
