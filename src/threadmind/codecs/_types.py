"""Wire records: messages in Mastra's content format 2, threads and resources.

Python names are snake_case; on the wire they are Mastra's camelCase (``rename="camel"``). Parts form a
union tagged by ``type``; a part of any other type (``data-*``, ``source-url``, ``error`` ...) or with
fields we do not model decodes to :class:`UnknownPart`, which re-encodes to exactly the JSON it came from.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, TypeAlias, Union

import msgspec

from ._time import utc_now

__all__ = (
    "FilePart",
    "KnownPart",
    "Message",
    "MessageContent",
    "Part",
    "ReasoningPart",
    "Resource",
    "Role",
    "SourcePart",
    "StepStartPart",
    "TextPart",
    "Thread",
    "ToolInvocation",
    "ToolInvocationPart",
    "ToolState",
    "UnknownPart",
)

Role: TypeAlias = Literal["user", "assistant", "system", "signal"]
ToolState: TypeAlias = Literal[
    "partial-call", "call", "approval-requested", "approval-responded", "result", "output-error", "output-denied"
]


def _format_two() -> Literal[2]:
    # A factory default (not a literal default) keeps ``format: 2`` in the encoded JSON under omit_defaults.
    return 2


def _new_list() -> list[Any]:
    # Likewise: ``parts: []`` is always written, as Mastra does.
    return []


class _Part(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True,
            forbid_unknown_fields=True, tag_field="type"):
    """Fields every part may carry; ``created_at`` is epoch milliseconds as in Mastra."""


class TextPart(_Part, frozen=True, tag="text"):
    """``{"type": "text", "text": ...}``."""

    text: str
    state: str | None = None
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class ReasoningPart(_Part, frozen=True, tag="reasoning"):
    """Model reasoning with its detail blocks."""

    reasoning: str
    details: list[dict[str, Any]] = msgspec.field(default_factory=_new_list)
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class ToolInvocation(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True,
                     forbid_unknown_fields=True):
    """One tool call and, once known, its outcome."""

    state: ToolState
    tool_call_id: str
    tool_name: str
    args: Any = None
    result: Any = None
    is_error: bool | None = None
    error_text: str | None = None
    raw_input: Any = None
    approval: dict[str, Any] | None = None
    step: int | None = None


class ToolInvocationPart(_Part, frozen=True, tag="tool-invocation"):
    """A tool call inside an assistant message."""

    tool_invocation: ToolInvocation
    provider_executed: bool | None = None
    title: str | None = None
    preliminary: bool | None = None
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class StepStartPart(_Part, frozen=True, tag="step-start"):
    """Marks the start of a model step."""

    model: str | None = None
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class FilePart(_Part, frozen=True, tag="file"):
    """Inline file data (base64 or URL) with its media type."""

    data: str
    mime_type: str | None = None
    media_type: str | None = None
    filename: str | None = None
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class SourcePart(_Part, frozen=True, tag="source"):
    """A cited source."""

    source: dict[str, Any]
    created_at: int | None = None
    provider_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


KnownPart: TypeAlias = Union[TextPart, ReasoningPart, ToolInvocationPart, StepStartPart, FilePart, SourcePart]


class UnknownPart(Mapping[str, Any]):
    """A part of a type threadmind does not model; keeps every field and re-encodes unchanged."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any]) -> None:
        if not isinstance(fields.get("type"), str):
            raise TypeError("a part needs a string 'type'")
        self._fields = dict(fields)

    @property
    def type(self) -> str:
        """The part's ``type`` tag, e.g. ``data-progress``."""
        return str(self._fields["type"])

    @property
    def provider_metadata(self) -> dict[str, Any] | None:
        """``providerMetadata`` when present."""
        value = self._fields.get("providerMetadata")
        return value if isinstance(value, dict) else None

    @property
    def created_at(self) -> int | None:
        """``createdAt`` (epoch ms) when present."""
        value = self._fields.get("createdAt")
        return value if isinstance(value, int) else None

    def to_dict(self) -> dict[str, Any]:
        """A copy of the part's JSON object."""
        return dict(self._fields)

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnknownPart):
            return self._fields == other._fields
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"UnknownPart({self._fields!r})"


Part: TypeAlias = Union[KnownPart, UnknownPart]


class MessageContent(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True, gc=False):
    """Content format 2: typed parts plus Mastra's optional mirrors and metadata.

    ``experimental_attachments`` keeps its snake_case name on the wire, as Mastra (and the AI SDK) spell it.
    ``extra`` holds the content keys threadmind does not model, under their JSON names; the codecs write
    them back beside the modelled keys, unchanged. A modelled key whose value is ``null`` reads as absent.
    """

    format: Literal[2] = msgspec.field(default_factory=_format_two)
    parts: list[Part] = msgspec.field(default_factory=_new_list)
    content: str | None = None
    metadata: dict[str, Any] | None = None
    tool_invocations: list[Any] | None = None
    reasoning: str | None = None
    experimental_attachments: list[Any] | None = msgspec.field(default=None, name="experimental_attachments")
    provider_metadata: dict[str, Any] | None = None
    annotations: list[Any] | None = None
    extra: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """``content`` when non-empty, else the text parts joined with a space."""
        if self.content:
            return self.content
        return " ".join(p.text for p in self.parts if isinstance(p, TextPart))


class Message(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True, gc=False):
    """One stored or live message (Mastra's ``MastraDBMessage``).

    Messages and their contents are not tracked by the garbage collector (``gc=False``): every live conversation
    caches its latest messages, and tracking them made full collections walk ~20 objects per conversation.
    Freed by reference counting as ever; only a cycle through a message (one kept inside its own metadata)
    would never be freed. The conversation's cache also untracks the part list of each message it keeps where
    every part is untracked (text, plain data): treat a stored or saved message's parts as read-only.
    """

    id: str
    role: Role
    content: MessageContent
    created_at: datetime
    thread_id: str | None = None
    resource_id: str | None = None
    type: str | None = None

    @classmethod
    def user(cls, text: str, **fields: Any) -> Message:
        """A user message with one text part; ``fields`` override id, created_at, thread_id ..."""
        return cls._of("user", text, fields)

    @classmethod
    def assistant(cls, text: str, **fields: Any) -> Message:
        """An assistant message with one text part."""
        return cls._of("assistant", text, fields)

    @classmethod
    def _of(cls, role: Role, text: str, fields: dict[str, Any]) -> Message:
        content = MessageContent(parts=[TextPart(text=text)], content=text)
        values: dict[str, Any] = {"id": str(uuid.uuid4()), "created_at": utc_now(), "content": content}
        values.update(fields)
        return cls(role=role, **values)

    @property
    def text(self) -> str:
        """The message text: ``content.content`` if set, else its text parts joined."""
        return self.content.text


class Thread(msgspec.Struct, frozen=True, rename="camel", omit_defaults=False, gc=False):
    """A conversation owned by a resource. Not tracked by the garbage collector, as :class:`Message` (every live
    conversation caches its row)."""

    id: str
    resource_id: str
    title: str = ""
    metadata: dict[str, Any] | None = None
    created_at: datetime = msgspec.field(default_factory=utc_now)
    updated_at: datetime = msgspec.field(default_factory=utc_now)


class Resource(msgspec.Struct, frozen=True, rename="camel", omit_defaults=False, gc=False):
    """The owner of threads (a user or tenant); holds resource-scoped working memory. Not tracked by the garbage
    collector, as :class:`Message`."""

    id: str
    working_memory: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime = msgspec.field(default_factory=utc_now)
    updated_at: datetime = msgspec.field(default_factory=utc_now)
