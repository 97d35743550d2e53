"""What observational memory says and reads: the Observer's and Reflector's instructions, the observations
block the model sees, and the pure helpers around them (reference §8.1).

The engine that runs observations lives with ``Memory``; the ``observational-memory`` processor needs only
these texts and an :class:`ObservationEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._config import ObservationalMemoryConfig, WorkingMemoryConfig
from ..codecs import FilePart, Message
from ..codecs._transcript import part_texts
from ..stores import OMRecord
from ..tokens import TokenCounter
from ._observation_groups import render_groups

if TYPE_CHECKING:
    from ._access import MemoryAccess

__all__ = (
    "CONTINUATION_ID",
    "CONTINUATION_REMINDER",
    "OBSERVATIONS_GUIDANCE",
    "OBSERVATIONS_PREAMBLE",
    "OBSERVER_CORE",
    "OBSERVER_INSTRUCTIONS",
    "REFLECTOR_INSTRUCTIONS",
    "THREAD_TITLE_INSTRUCTIONS",
    "ObservationEngine",
    "block_after_tokens",
    "date_header",
    "observations_system_message",
    "observer_attachments",
    "observer_transcript",
    "sealed_updates",
    "split_observer_output",
)


class ObservationEngine(Protocol):
    """What the ``observational-memory`` processor asks of the engine that keeps observations."""

    counter: TokenCounter

    async def load(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                   storage: MemoryAccess) -> tuple[OMRecord | None, list[Message]]:
        """The current record and the messages it has not observed yet."""
        ...

    async def ensure_below_block(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                                 tokens: int, *, failures: list[BaseException] | None = None,
                                 working_memory: WorkingMemoryConfig | None = None) -> bool:
        """Wait for (or run) an observation; True when one completed (else its error appended to ``failures``);
        ``working_memory``: the working memory the Observer also writes (``observation.manageWorkingMemory``)."""
        ...

    def should_buffer(self, config: ObservationalMemoryConfig, record: OMRecord | None, tokens: int) -> bool:
        """Whether ``tokens`` crossed a new ``bufferTokens`` interval since the last buffering."""
        ...

    def buffer(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, tokens: int,
               working_memory: WorkingMemoryConfig | None = None, cycle_id: str | None = None) -> bool:
        """Start computing the next buffered chunk (``cycle_id``: its ``cycleId``) in the background; True when
        started."""
        ...

    def buffering(self, config: ObservationalMemoryConfig, thread_id: str,
                  resource_id: str | None) -> tuple[bool, bool]:
        """Whether observations, and a reflection, are being computed ahead in this process now."""
        ...

    async def activate(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                       tokens: int, working_memory: WorkingMemoryConfig | None = None) -> bool:
        """Make buffered chunks active with no model call; True if any was."""
        ...

    async def activate_reflection(self, config: ObservationalMemoryConfig, thread_id: str,
                                  resource_id: str | None) -> bool:
        """Make the reflection computed ahead the next generation now, with no model call; True if it did."""
        ...

    def schedule(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, *,
                 working_memory: WorkingMemoryConfig | None = None) -> bool:
        """Start a background observation unless one runs; True when started."""
        ...


OBSERVATIONS_PREAMBLE = "The following observations block contains your memory of past conversations with this user."

OBSERVER_CORE = (
    "You are the Observer of a conversational agent's memory. Read the new messages of the conversation and "
    "write concise observations of everything worth remembering: facts about the user, their preferences, goals "
    "and decisions, what was asked and answered, tasks in progress, and any commitments the assistant made. "
    "Write one observation per line starting with '* ' and a priority marker (🔴 important, 🟡 maybe useful, "
    "🟢 minor), include times as (HH:MM) when known, and keep names, numbers and exact values. Do not repeat "
    "observations already listed under previous observations."
)
"""The Observer's task, without what it may add after its observations."""
OBSERVER_INSTRUCTIONS = (
    OBSERVER_CORE + " Output only the observation lines, optionally followed by <current-task>what the user is "
    "working on now</current-task> and <suggested-response>guidance for the assistant's next reply"
    "</suggested-response>."
)

THREAD_TITLE_INSTRUCTIONS = (
    "\n\nAfter them, also output <thread-title>…</thread-title>: a short, noun-phrase title for this conversation "
    "(2-5 words). Examples:\n"
    '- "Auth bug fix" — not "Fixing the auth bug"\n'
    '- "Dark mode toggle" — not "User wants dark mode toggle added"\n'
    '- "Deployment pipeline setup" — not "Setting up deployment pipeline for project"\n'
    "Only update when the topic meaningfully changes."
)
"""What the Observer is also asked with ``observation.threadTitle`` (Mastra's thread-title section)."""

REFLECTOR_INSTRUCTIONS = (
    "You are the Reflector of a conversational agent's memory. The observations below have grown too long. "
    "Rewrite them into a shorter log that keeps every fact still relevant: merge duplicates, drop what was "
    "superseded, keep dates as 'Date:' headers and keep the one-observation-per-line '* ' format with priority "
    "markers. Output only the condensed observations."
)

# Tags the Observer may add after its observations; they go to thread.metadata.mastra.om (reference §8.1).
_OBSERVER_TAGS = (("current-task", "currentTask"), ("suggested-response", "suggestedResponse"),
                  ("thread-title", "threadTitle"))


def split_observer_output(text: str) -> tuple[str, dict[str, str]]:
    """The observation lines, and the tagged extras (``currentTask``, ``suggestedResponse``, ``threadTitle``) cut out
    of them."""
    extras: dict[str, str] = {}
    for tag, key in _OBSERVER_TAGS:
        opening, closing = f"<{tag}>", f"</{tag}>"
        start = text.find(opening)
        end = text.find(closing, start + len(opening)) if start >= 0 else -1
        if start >= 0 and end >= 0:
            value = text[start + len(opening):end].strip()
            if value:
                extras[key] = value
            text = text[:start] + text[end + len(closing):]
    return text.strip(), extras


def sealed_updates(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """``update_messages`` entries that mark observed messages sealed (``content.metadata.mastra.sealed``),
    keeping whatever else their ``mastra`` metadata holds."""
    updates: list[dict[str, Any]] = []
    for message in messages:
        mastra = (message.content.metadata or {}).get("mastra")
        mastra = dict(mastra) if isinstance(mastra, dict) else {}
        if mastra.get("sealed") is True:
            continue
        mastra["sealed"] = True
        updates.append({"id": message.id, "content": {"metadata": {"mastra": mastra}}})
    return updates


def block_after_tokens(config: ObservationalMemoryConfig, threshold: float | None = None) -> float:
    """Unobserved tokens past which a turn waits for the Observer (default 1.2 × the message threshold:
    ``message_tokens``, or ``threshold`` when the budget is shared)."""
    base = config.message_tokens if threshold is None else threshold
    value = config.block_after
    if value is None:
        return 1.2 * base
    return value * base if 1 <= value < 100 else float(value)


# Read after the block: how to weigh what it says against the conversation (the reference places such
# instructions after ``</observations>``).
OBSERVATIONS_GUIDANCE = (
    "When you answer, rely on the most recent observations where they disagree with older ones, treat planned "
    "actions whose dates have passed as done, and let the user's latest message take priority over everything "
    "in this block."
)

# The user-role reminder that opens the remaining history once observations replaced its older part
# (reference §8.1); recall hides it like every <system-reminder> message, and it is never stored.
CONTINUATION_REMINDER = (
    "<system-reminder>This is not a message from the user. The earlier part of this conversation is kept in "
    "the observations above, because it no longer fits in the context. Continue the conversation naturally "
    "from where they leave off: do not greet the user as if it were a new conversation and do not mention "
    "observations or memory. Every message after this reminder is newer than the observations."
    "</system-reminder>"
)
CONTINUATION_ID = "om-continuation"


def observations_system_message(observations: str, retrieval: str | None = None) -> str:
    """The system text the model sees: the preamble, the ``<observations>`` block and how to read it; in
    ``retrieval`` mode the groups shown as ``## Group`` sections with their ranges, then ``retrieval`` (the recall
    tool's instructions)."""
    if retrieval is not None:
        observations = render_groups(observations) or observations
    text = (f"{OBSERVATIONS_PREAMBLE}\n\n<observations>\n{observations.strip()}\n</observations>\n\n"
            f"{OBSERVATIONS_GUIDANCE}")
    return f"{text}\n\n{retrieval}" if retrieval else text


def date_header(messages: Sequence[Message]) -> str:
    first = messages[0].created_at
    last = messages[-1].created_at
    start = f"{first:%b} {first.day}, {first.year}"
    end = f"{last:%b} {last.day}, {last.year}"
    return f"Date: {start}" if start == end else f"Date: {start} - {end}"


_ATTACHMENT_TYPES = ("image/", "application/pdf")
"""What the Observer sees of messages' files when ``observeAttachments`` is not set (Mastra's default list)."""


def observer_attachments(messages: Sequence[Message], setting: bool | str | None) -> list[FilePart]:
    """The messages' files the Observer is shown beside the transcript (``observation.observeAttachments``): images
    and PDFs by default; all with ``True`` or ``"auto"`` (no model capability registry here: a model that takes no
    files says so itself); none with ``False``."""
    if setting is False:
        return []
    out: list[FilePart] = []
    for message in messages:
        for part in message.content.parts:
            if isinstance(part, FilePart):
                mime = (part.media_type or part.mime_type or "").lower()
                if setting is not None or mime.startswith(_ATTACHMENT_TYPES):
                    out.append(part)
    return out


def observer_transcript(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for message in messages:
        stamp = f"{message.created_at:%Y-%m-%d %H:%M}"
        role = {"user": "User", "assistant": "Assistant"}.get(message.role, message.role.capitalize())
        texts = [text if kind == "text" else f"({kind}) {text}" for kind, text in part_texts(message, tool_chars=500)]
        if texts:
            lines.append(f"[{stamp}] {role}: " + "\n".join(texts))
    return "\n".join(lines)
