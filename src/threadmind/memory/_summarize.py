"""``Memory.summarize_thread`` (Mastra's ``summarizeThread``): the Observer, run once over a thread's newest
messages (with extractors: the values they ask for beside the summary), its result handed back and nothing
written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..codecs import Message
from ..errors import ModelError, ValidationError
from ..models import LanguageModel, ModelRequest
from ..processors._observation_text import (
    OBSERVER_CORE,
    OBSERVER_INSTRUCTIONS,
    observer_transcript,
    split_observer_output,
)
from ..tracing import operation_span
from ._extractors import Extractor, apply_hooks, extractor_sections, parse_extracted, strip_sections

if TYPE_CHECKING:
    from ._facade import Memory

__all__ = ("MAX_INPUT_TOKENS", "PAGE_SIZE", "ThreadSummary", "check_limits", "newest_messages", "summarize")

PAGE_SIZE = 100
"""Messages read per page while paging back from the newest (as Mastra's ``SUMMARIZE_THREAD_DEFAULTS``)."""
MAX_INPUT_TOKENS = 1_000_000
"""Tokens the summarized messages may hold when ``max_input_tokens`` is not given (Mastra's default)."""


class ThreadSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What ``summarize_thread`` returns: the Observer's summary (its observation lines; empty for a thread with
    no messages), the tagged extras it wrote without extractors (``currentTask``, ``suggestedResponse``), how many
    messages it read, and with ``extract`` the values by extractor slug and the failures (``slug``, ``error``)."""

    summary: str
    extras: dict[str, str] = msgspec.field(default_factory=dict)
    messages: int = 0
    extracted: dict[str, Any] = msgspec.field(default_factory=dict)
    extraction_failures: list[dict[str, str]] = msgspec.field(default_factory=list)


async def newest_messages(memory: Memory, thread_id: str, resource_id: str | None, last_messages: int | None,
                          max_input_tokens: int) -> list[Message]:
    """The thread's newest messages, oldest first: pages of :data:`PAGE_SIZE` read back from the newest until
    ``last_messages`` are kept or the next would take them past ``max_input_tokens`` (the newest is always kept)."""
    if last_messages is not None and last_messages <= 0:
        return []
    counter = memory._core.tokens
    collected: list[Message] = []
    tokens = 0
    page = 0
    while True:
        batch = await memory.recall(thread_id, resource_id=resource_id, per_page=PAGE_SIZE, page=page)
        kept: list[Message] = []
        full = False
        for message in reversed(batch.messages):
            if last_messages is not None and len(collected) + len(kept) >= last_messages:
                full = True
                break
            cost = counter.count_message(message)
            if collected or kept:
                if tokens + cost > max_input_tokens:
                    full = True
                    break
            kept.append(message)
            tokens += cost
        collected[:0] = reversed(kept)
        if full or not batch.has_more or not batch.messages:
            return collected
        page += 1


async def summarize(memory: Memory, thread_id: str, *, model: LanguageModel, resource_id: str | None,
                    instructions: str | None, last_messages: int | None, max_input_tokens: int,
                    extract: Sequence[Extractor] = ()) -> ThreadSummary:
    """(``Memory.summarize_thread``, arguments checked) One Observer call over the newest messages; with
    ``extract``, the extractors' sections asked for after the observations (see ``_extractors``)."""
    messages = await newest_messages(memory, thread_id, resource_id, last_messages, max_input_tokens)
    if not messages:
        return ThreadSummary(summary="")
    if extract:
        base = f"{OBSERVER_CORE} Output the observation lines first."
        sections = extractor_sections(extract)
        system = f"{base}\n\n{sections}" if sections else base
    else:
        system = OBSERVER_INSTRUCTIONS
    if instructions:
        system = f"{system}\n\n{instructions}"
    prompt = f"New messages to observe:\n{observer_transcript(messages)}"
    with operation_span("threadmind.memory.summarize_thread", "chat", thread_id=thread_id,
                        resource_id=resource_id, gen_ai__request__model=model.model_id):
        try:
            response = await model.generate(ModelRequest(system=[system], messages=[Message.user(prompt)]))
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"summarizing thread {thread_id!r} failed: {exc}") from exc
    output = (response.text or "").strip()
    if not extract:
        summary, extras = split_observer_output(output)
        return ThreadSummary(summary=summary, extras=extras, messages=len(messages))
    values, failures = parse_extracted(output, extract)
    summary = strip_sections(output, extract).strip()
    await apply_hooks(extract, values, failures, thread_id=thread_id, resource_id=resource_id, raw=summary)
    return ThreadSummary(summary=summary, messages=len(messages), extracted=values, extraction_failures=failures)


def check_limits(last_messages: int | None, max_input_tokens: int) -> None:
    """``summarize_thread``'s limits: integers, ``max_input_tokens`` positive."""
    if last_messages is not None and (isinstance(last_messages, bool) or not isinstance(last_messages, int)):
        raise ValidationError(f"last_messages must be an integer or None, got {last_messages!r}")
    if isinstance(max_input_tokens, bool) or not isinstance(max_input_tokens, int) or max_input_tokens < 1:
        raise ValidationError(f"max_input_tokens must be a positive integer, got {max_input_tokens!r}")
