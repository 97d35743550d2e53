"""Result records returned by ``Memory`` methods."""

from __future__ import annotations

from typing import Literal

import msgspec

from .codecs import Message, Thread

__all__ = ("CloneResult", "RecallResult", "SaveResult", "SearchHit", "Usage", "WorkingMemoryTemplate")


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens billed: ``tokens`` for embeddings; input/output for model calls."""

    tokens: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        def _sum(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(tokens=self.tokens + other.tokens, input_tokens=_sum(self.input_tokens, other.input_tokens),
                      output_tokens=_sum(self.output_tokens, other.output_tokens))


class SaveResult(msgspec.Struct, frozen=True, kw_only=True):
    """The messages as stored, and the embedding usage when vectors were made."""

    messages: list[Message]
    usage: Usage | None = None


class RecallResult(msgspec.Struct, frozen=True, kw_only=True):
    """Messages in chronological order (unless a direction was asked for) plus paging facts."""

    messages: list[Message]
    total: int
    page: int
    per_page: int | bool
    has_more: bool
    usage: Usage | None = None
    degraded: bool = False


class SearchHit(msgspec.Struct, frozen=True):
    """One hit of ``Memory.search``: the message, its rank score (higher is better; the fused, smoothed score of
    hybrid recall), and what each side gave it (None where that side did not find it)."""

    message: Message
    score: float
    vector_score: float | None = None
    keyword_score: float | None = None


class CloneResult(msgspec.Struct, frozen=True, kw_only=True):
    """The new thread, its copied messages (ascending) and the old → new id map."""

    thread: Thread
    messages: list[Message]
    id_map: dict[str, str]


class WorkingMemoryTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """The working-memory template: Markdown text, or a JSON Schema string in ``json`` format."""

    format: Literal["markdown", "json"]
    content: str
