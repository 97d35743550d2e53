"""SemanticRecall: bring similar older messages into context, and embed the turn's new messages.

Reference §3.6. Same-thread hits (with their context windows) join the list as remembered messages;
hits from other threads of the resource are rendered into one system message. Errors never break a turn. The hits
come from the retrieval pipeline ``Memory.recall`` uses (``threadmind.search``), in the configured ``search`` mode.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .._config import MessageRange, SearchMode
from .._metadata_filter import MetadataFilter
from ..codecs import Message, TextPart
from ..stores import Include, MessageQuery, Store
from ._access import MemoryAccess, as_access, embed_stored
from ._protocol import ProcessInputArgs, ProcessOutputArgs

if TYPE_CHECKING:
    from ..actors._index_actor import VectorHit


class RecallIndex(Protocol):
    """What the processor needs of the retrieval pipeline (Memory's handle to its own: ``threadmind.search``) and
    of the index that embeds the turn's messages."""

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None, search: SearchMode = "vector",
                    keyword_weight: float | None = None, metadata_filter: MetadataFilter | None = None,
                    ) -> list[VectorHit]: ...

    async def upsert_messages(self, messages: Sequence[Message], *, wait: bool = True) -> int: ...

    @property
    def embeds(self) -> bool:
        """Whether messages get vectors (False: keyword recall without a vector store)."""
        ...

__all__ = ("SemanticRecall", "render_remembered")

_log = logging.getLogger("threadmind.semantic_recall")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2, "tool": 3}


def _query_text(messages: Sequence[Message]) -> str | None:
    for message in reversed(messages):
        is_user_signal = False
        if message.role == "signal":
            signal = (message.content.metadata or {}).get("signal")
            is_user_signal = isinstance(signal, dict) and signal.get("type") in ("user", "user-message")
        if message.role == "user" or is_user_signal:
            if message.content.content:
                return message.content.content
            text = " ".join(p.text for p in message.content.parts if isinstance(p, TextPart))
            return text or None
    return None


def _clock(message: Message) -> str:
    hour = message.created_at.hour
    suffix = "AM" if hour < 12 else "PM"
    return f"{hour % 12 or 12}:{message.created_at.minute:02d} {suffix}"


def render_remembered(messages: Sequence[Message]) -> str:
    """The cross-conversation recall block (reference §6.4, entries separated by newlines per SPEC §9)."""
    ordered = sorted(
        messages,
        key=lambda m: (m.created_at, m.thread_id or "", _ROLE_ORDER.get(m.role, 9), m.id),
    )
    body: list[str] = []
    last_date = None
    for message in ordered:
        date = message.created_at.date()
        if date != last_date:
            body.append(f"\nthe following messages are from {date.year}, {_MONTHS[date.month - 1]}, {date.day}")
            last_date = date
        text = " ".join(p.text for p in message.content.parts if isinstance(p, TextPart)) or message.text
        body.append(f"Message from previous conversation at {_clock(message)}: {message.role.capitalize()}: {text}")
    return (
        "The following messages were remembered from a different conversation:\n"
        "<remembered_from_other_conversation>\n" + "\n".join(body) + "\n<end_remembered_from_other_conversation>"
    )


class SemanticRecall:
    """Processor ``semantic-recall`` over an :class:`~threadmind.actors.IndexActor`."""

    id = "semantic-recall"
    name = "SemanticRecall"

    def __init__(
        self,
        storage: Store | MemoryAccess,
        index: RecallIndex,
        *,
        top_k: int = 4,
        message_range: int | MessageRange = 1,
        scope: str = "resource",
        threshold: float | None = None,
        index_name: str | None = None,
        search: SearchMode = "hybrid",
        keyword_weight: float | None = None,
        metadata_filter: MetadataFilter | None = None,
    ) -> None:
        self.storage = as_access(storage)
        self.search = search
        self.keyword_weight = keyword_weight
        self.metadata_filter = metadata_filter
        self.index = index
        self.top_k = top_k
        self.message_range = (
            message_range if isinstance(message_range, MessageRange)
            else MessageRange(before=message_range, after=message_range)
        )
        self.scope = scope
        self.threshold = threshold
        self.index_name = index_name or "memory_messages"

    async def process_input(self, args: ProcessInputArgs) -> None:
        context = args.context
        thread_id = context.thread_id or args.message_list.thread_id
        if not thread_id:
            return None
        query = _query_text(args.messages)
        if not query:
            return None
        resource_id = context.resource_id or args.message_list.resource_id
        try:
            resource_scope = self.scope == "resource" and resource_id is not None
            hits = await self.index.query(
                query,
                top_k=self.top_k,
                resource_id=resource_id if resource_scope else None,
                thread_id=None if resource_scope else thread_id,
                threshold=self.threshold,
                search=self.search,
                keyword_weight=self.keyword_weight,
                **({"metadata_filter": self.metadata_filter} if self.metadata_filter is not None else {}),
            )
            if not hits:
                return None
            window = self.message_range
            page = await self.storage.list_messages(MessageQuery(
                thread_id=thread_id,
                resource_id=resource_id,
                per_page=0,
                include=[Include(id=h.message_id, with_previous_messages=window.before,
                                 with_next_messages=window.after) for h in hits],
            ))
        except Exception:  # recall must never break the turn
            _log.warning("semantic recall failed; continuing without it", exc_info=True)
            return None
        message_list = args.message_list
        same_thread: list[Message] = []
        other_threads: list[Message] = []
        for message in page.messages:
            if message.id in message_list or message.role == "system":
                continue
            if message.thread_id in (None, thread_id):
                same_thread.append(message)
            else:
                other_threads.append(message)
        if same_thread:
            message_list.add(same_thread, "memory")
        if other_threads:
            message_list.add_system(render_remembered(other_threads), "memory")
        return None

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        """Embed the turn's messages exactly as stored, searchable soon after the turn (``upsert_on_commit``).

        Before the turn is persisted (memory's own order: this step, then ``message-history``) the save itself
        embeds them while it commits (``RequestContext.embed_with_save``), as ``Memory.save_messages`` does: the
        vectors are staged only once the commit succeeded (a failed or cancelled persist leaves none), and the
        save marks the messages as awaiting vectors in its transaction, so a crash before the vectors are written
        leaves them for the index's retry. After it (a user's ``MessageHistory`` placed first) they are queued at
        once. An embedding failure never fails the turn.
        """
        context = args.context
        if context.memory_config.read_only or not (context.thread_id or args.message_list.thread_id):
            return None
        if not self.index.embeds:  # keyword recall without a vector store: the save's keyword rows are enough
            return None
        if context.persisted is None:
            context.embed_with_save(self.index)
        else:
            await embed_stored(self.index, context.persisted)
        return None
