"""Rows of ``PostgresStore``: the column lists, row decoders, parameter encoders and filter clauses.

Encodings are Mastra's (``@mastra/pg``): message content as compact JSON in a ``TEXT`` column, metadata as ``jsonb``,
every timestamp twice (``"createdAt"`` as UTC ``timestamp`` and ``"createdAtZ"`` as ``timestamptz``). Reads take
the ``…Z`` column first and fall back to the plain one (read as UTC), as Mastra does.

**Order.** Messages sort by (``"createdAt"``, insertion sequence, id): the sequence comes from
``threadmind_message_seq`` (``-1`` for rows written by Mastra, which has none), ids compare bytewise
(``COLLATE "C"``, the order Python compares strings in), so equal timestamps keep their save order and Mastra's
own rows keep Mastra's order (ties by id).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec

from ...codecs import Message, MessageContent, Resource, Thread
from ...codecs._json import content_from_text, decode_content
from ...errors import InvalidMessage, StorageError, ValidationError
from .._query import ms

__all__ = (
    "MSG_COLS",
    "MSG_FROM",
    "MSG_KEY",
    "MSG_SEQ",
    "THREAD_SEQ",
    "THREAD_COLS",
    "as_naive",
    "as_object",
    "check_text",
    "content_filter",
    "decode_json",
    "decode_metadata",
    "from_columns",
    "keyed",
    "message_from_row",
    "metadata_param",
    "order_by",
    "resource_from_row",
    "thread_filter",
    "thread_from_row",
)

# id, content, role, type, createdAt, createdAtZ, thread_id, resourceId, seq
# The sequence as a correlated scalar subquery, not a join: the planner cannot turn it into a hash join over the
# whole sequence table (which it may pick for a generic plan of `thread_id = ANY($1)`), so a page always costs
# one index probe per row it reads.
MSG_SEQ = "COALESCE((SELECT s.seq FROM threadmind_message_seq s WHERE s.message_id = m.id), -1)"
THREAD_SEQ = "COALESCE((SELECT ts.seq FROM threadmind_thread_seq ts WHERE ts.thread_id = t.id), -1)"
MSG_COLS = f'm.id, m.content, m.role, m.type, m."createdAt", m."createdAtZ", m.thread_id, m."resourceId", {MSG_SEQ}'
MSG_FROM = "mastra_messages m"
MSG_KEY = f'(m."createdAt", {MSG_SEQ}, m.id COLLATE "C")'
# id, resourceId, title, metadata, createdAt, createdAtZ, updatedAt, updatedAtZ
THREAD_COLS = ('t.id, t."resourceId", t.title, t.metadata::text, t."createdAt", t."createdAtZ", t."updatedAt", '
               't."updatedAtZ"')
RESOURCE_COLS = ('r.id, r."workingMemory", r.metadata::text, r."createdAt", r."createdAtZ", r."updatedAt", '
                 'r."updatedAtZ"')

Row = Sequence[Any]
SortKey = tuple[datetime, int, str]
_json_any = msgspec.json.Decoder()
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def order_by(descending: bool) -> str:
    """The message ORDER BY clause (the index on (thread_id, "createdAt") serves its first key)."""
    d = "DESC" if descending else "ASC"
    return f'm."createdAt" {d}, {MSG_SEQ} {d}, m.id COLLATE "C" {d}'


def as_naive(value: datetime) -> datetime:
    """An aware datetime as the naive UTC value of a ``timestamp`` column."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def from_columns(zoned: datetime | None, plain: datetime | None) -> datetime:
    """A timestamp read as Mastra reads it: the ``…Z`` column, else the plain one taken as UTC (ms precision)."""
    if zoned is not None:
        return ms(zoned)
    if plain is None:
        raise StorageError("a timestamp column is NULL in both its forms")
    return ms(plain.replace(tzinfo=UTC))


def check_text(value: str | None, field: str) -> None:
    """PostgreSQL text cannot hold NUL characters: refuse them with the field's name before anything is sent."""
    if value is not None and "\x00" in value:
        raise ValidationError(f"{field} contains a NUL character, which PostgreSQL text cannot store")


def metadata_param(text: str | None, field: str) -> str | None:
    """JSON text for a ``jsonb`` parameter; jsonb cannot hold ``\\u0000`` (refused naming the field)."""
    if text is not None and "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValidationError(f"{field} contains a NUL character, which PostgreSQL jsonb cannot store")
    return text


def decode_json(value: str | None, where: str) -> Any:
    """A ``jsonb`` column's value; a JSON string holding JSON is decoded once more, as Mastra reads it (its
    ``saveResource`` stores metadata as a JSON-encoded string)."""
    if value is None:
        return None
    try:
        decoded = _json_any.decode(value)
        if isinstance(decoded, str):
            decoded = _json_any.decode(decoded)
    except msgspec.DecodeError as exc:
        raise StorageError(f"{where} is not valid JSON: {exc}") from exc
    return decoded


def as_object(column: str) -> str:
    """SQL: the ``jsonb`` object in ``column`` (also when stored as a JSON-encoded string), else ``{}``; the base of
    a server-side shallow merge (``as_object(col) || patch``)."""
    inner = f"({column} #>> '{{}}')"
    return (f"(CASE jsonb_typeof({column}) WHEN 'object' THEN {column} WHEN 'string' THEN "
            f"(CASE WHEN {inner} IS JSON OBJECT THEN {inner}::jsonb ELSE '{{}}'::jsonb END) ELSE '{{}}'::jsonb END)")


def decode_metadata(value: Any, where: str) -> dict[str, Any] | None:
    decoded = decode_json(value, f"{where} metadata")
    if decoded is not None and not isinstance(decoded, dict):
        raise StorageError(f"{where} metadata is not a JSON object")
    return decoded


def thread_from_row(row: Row) -> Thread:
    return Thread(row[0], row[1], row[2], decode_metadata(row[3], f"thread {row[0]!r}"),
                  from_columns(row[5], row[4]), from_columns(row[7], row[6]))


def resource_from_row(row: Row) -> Resource:
    return Resource(row[0], row[1], decode_metadata(row[2], f"resource {row[0]!r}"), from_columns(row[4], row[3]),
                    from_columns(row[6], row[5]))


def _content(message_id: str, raw: str) -> MessageContent:
    try:
        return decode_content(raw)
    except InvalidMessage as exc:
        try:
            value = _json_any.decode(raw)
        except msgspec.DecodeError:  # not JSON at all: a plain-text message (Mastra stores string content as is)
            return content_from_text(raw)
        if isinstance(value, str):
            return content_from_text(value)
        raise StorageError(f"message {message_id!r} has invalid content: {exc.message}") from exc


def message_from_row(row: Row) -> Message:
    mid, content, role, mtype, created, created_z, thread_id, resource_id = row[:8]
    return Message(mid, role, _content(mid, content), from_columns(created_z, created), thread_id, resource_id,
                   None if mtype == "v2" else mtype)


def keyed(rows: Iterable[Row]) -> list[tuple[SortKey, Message]]:
    """Messages with their sort key (``"createdAt"``, sequence, id), for ``assemble``."""
    return [((row[4], row[8], row[0]), message_from_row(row)) for row in rows]


class Params:
    """Positional parameters of one statement: ``add(value)`` returns its ``$n`` placeholder."""

    __slots__ = ("values",)

    def __init__(self, *values: Any) -> None:
        self.values: list[Any] = list(values)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def _number(value: Any) -> Decimal:
    return Decimal(int(value)) if isinstance(value, bool) else Decimal(repr(value))


def content_filter(pairs: Sequence[tuple[str, Any]], params: Params) -> list[str]:
    """Clauses for scalar equality on ``content.metadata.<key>`` with an exact JSON type match."""
    clauses: list[str] = []
    for key, value in pairs:
        expr = f"(CASE WHEN m.content IS JSON OBJECT THEN m.content::json -> 'metadata' -> {params.add(key)} END)"
        if value is None:
            clauses.append(f"json_typeof({expr}) = 'null'")
        elif isinstance(value, bool):
            clauses.append(f"json_typeof({expr}) = 'boolean' AND ({expr} #>> '{{}}') = "
                           f"{params.add('true' if value else 'false')}")
        elif isinstance(value, str):
            clauses.append(f"json_typeof({expr}) = 'string' AND ({expr} #>> '{{}}') = {params.add(value)}")
        else:
            clauses.append(f"json_typeof({expr}) = 'number' AND ({expr} #>> '{{}}')::numeric = "
                           f"{params.add(_number(value))}::numeric")
    return clauses


def thread_filter(pairs: Sequence[tuple[str, Any]], params: Params) -> list[str]:
    """Clauses for ``list_threads`` metadata equality, with the SQLite store's rules: null also matches a missing
    key, booleans compare as 1/0 (``json_extract``'s reading), strings only match strings."""
    clauses: list[str] = []
    for key, value in pairs:
        ref = params.add(key)
        if value is None:
            clauses.append(f"(t.metadata -> {ref} IS NULL OR t.metadata -> {ref} = 'null'::jsonb)")
        elif isinstance(value, str):
            clauses.append(f"jsonb_typeof(t.metadata -> {ref}) = 'string' AND t.metadata ->> {ref} = "
                           f"{params.add(value)}")
        else:
            clauses.append(f"(CASE jsonb_typeof(t.metadata -> {ref}) WHEN 'number' THEN "
                           f"(t.metadata ->> {ref})::numeric "
                           f"WHEN 'boolean' THEN (t.metadata ->> {ref})::boolean::int::numeric END) = "
                           f"{params.add(_number(value))}::numeric")
    return clauses
