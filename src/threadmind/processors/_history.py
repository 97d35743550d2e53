"""MessageHistory (load recent history; persist the turn) and the memory-only token limiter.

Reference §3.2 and §3.4. With a token budget, MessageHistory loads what fits plus the overflow of the
last page, and ``memory-token-limiter`` trims whole tool-call groups oldest-first, advancing the
per-thread boundary so the same messages stay out of later turns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from .._config import MessageHistoryConfig
from .._history_window import (
    CONVERSATION_OVERHEAD,
    Boundary,
    advance_boundary,
    group_by_tool_calls,
    is_transient_signal,
    load_token_window,
    read_boundary,
)
from ..codecs import Message, Thread
from ..codecs._time import utc_now
from ..errors import ThreadNotFound
from ..stores import MessageQuery, Store
from ..tokens import DefaultTokenCounter, TokenCounter, TokenLimiterCounter
from ._access import MemoryAccess, as_access
from ._hygiene import persistable
from ._protocol import ProcessInputArgs, ProcessInputStepArgs, ProcessOutputArgs, RequestContext

__all__ = ("MemoryTokenLimiter", "MessageHistory", "persist_turn")

BoundaryWriter = Callable[[str, Callable[[Thread], Boundary | None]], Awaitable[Thread | None]]



class MessageHistory:
    """Processor ``message-history``: loads the last N (or a token window) and persists the turn."""

    id = "message-history"
    name = "MessageHistory"

    def __init__(
        self,
        storage: Store | MemoryAccess,
        last_messages: int | bool | None = None,
        token_limit: MessageHistoryConfig | None = None,
        *,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.storage = as_access(storage)

        self.last_messages = last_messages
        self.token_limit = token_limit
        self.token_counter = token_counter or DefaultTokenCounter()

    def _max_messages(self) -> int | None:
        if self.last_messages is False:
            return 0
        if self.last_messages is None or self.last_messages is True:
            return None
        return int(self.last_messages)

    async def process_input(self, args: ProcessInputArgs) -> None:
        thread_id, resource_id = args.ids()
        if not thread_id:
            return None
        limit = self.token_limit
        boundary: Boundary | None = None
        thread = args.context.thread
        if limit is not None and thread is not None:
            boundary = read_boundary(thread.metadata, limit.max_tokens, limit.remove_tokens)
        if limit is not None:
            loaded = await load_token_window(
                self.storage, thread_id, resource_id, limit, self._max_messages() or None,
                counter=self.token_counter, boundary=boundary, use_stored_boundary=False, include_overflow=True,
            )
        else:
            size = self._max_messages()
            if size == 0:
                return None
            page = await self.storage.list_messages(
                MessageQuery(thread_id=thread_id, resource_id=resource_id, per_page=size if size else False,
                             direction="DESC" if size else "ASC", include_total=False)
            )
            loaded = page.messages[::-1] if size else page.messages
        history = [
            m for m in loaded
            if m.role != "system" and not is_transient_signal(m) and (boundary is None or boundary.is_after(m))
        ]
        if history:
            args.message_list.add(history, "memory")
        return None

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        await persist_turn(self.storage, args)
        return None


async def persist_turn(storage: MemoryAccess, args: ProcessOutputArgs) -> list[Message]:
    """Save the run's input and response messages (reference ``persistMessages``); returns what was saved.

    Nothing when the run has no thread or is read-only, or after an error finish with no response (no orphan
    user message). System messages, transient signals, partial calls and working-memory parts and tags are
    dropped. One step of the thread's owner makes sure the thread exists (the reference's ensure: a thread
    deleted meanwhile is made again) and saves, embedding while it commits when semantic recall asked for it
    (``RequestContext.embed_with_save``).
    """
    context = args.context
    thread_id, resource_id = args.ids()
    if not thread_id or context.memory_config.read_only:
        return []
    message_list = args.message_list
    response = message_list.get_response()
    if context.finish_reason == "error" and not response:
        return []
    kept: list[Message] = []
    for message in sorted([*message_list.get_input(), *response], key=lambda m: m.created_at):
        clean = persistable(message, history_step=True)
        if clean is not None:
            kept.append(clean)
    if not kept:
        return []
    thread = context.thread
    if thread is None or thread.id != thread_id:
        now = utc_now()
        thread = context.thread = Thread(thread_id, resource_id or thread_id, "", {}, now, now)
    saved = await storage.persist_turn(thread, kept, mark_pending=context.mark_pending, embed=context.embed_with)
    context.persisted = saved
    return kept


class MemoryTokenLimiter:
    """Processor ``memory-token-limiter``: trims remembered messages to the budget, never the current turn."""

    id = "memory-token-limiter"
    name = "MemoryTokenLimiter"

    def __init__(
        self,
        max_tokens: float,
        at_max_remove_tokens: float,
        *,
        token_counter: TokenCounter | None = None,
        on_trim: BoundaryWriter | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.at_max_remove_tokens = at_max_remove_tokens
        self.token_counter = token_counter or DefaultTokenCounter()
        self._system_counter = TokenLimiterCounter()
        self._on_trim = on_trim

    async def process_input(self, args: ProcessInputArgs) -> None:
        message_list = args.message_list
        conversation = message_list.get_all()

        def removable(message: Message) -> bool:
            sources = message_list.sources_of(message.id)
            return "memory" in sources and not (sources & {"input", "response", "context"}) \
                and message.role != "system"

        total = float(CONVERSATION_OVERHEAD)
        total += sum(self._system_counter.system_tokens(text) for text in message_list.get_system_messages())
        counts = {m.id: self.token_counter.count_message(m) for m in conversation}
        total += sum(counts.values())
        if total <= self.max_tokens:
            return None
        target = self.max_tokens - self.at_max_remove_tokens
        removed: list[Message] = []
        for group in group_by_tool_calls(conversation):
            if total <= target:
                break
            if not all(removable(m) for m in group):
                continue
            removed.extend(group)
            total -= sum(counts[m.id] for m in group)
        if not removed:
            return None
        await self._record(args.context, removed)
        message_list.remove_by_ids([m.id for m in removed])
        return None

    async def process_input_step(self, args: ProcessInputStepArgs) -> None:
        """Before each later model call, trim remembered messages again (tool results count too)."""
        if args.step_number > 0:
            await self.process_input(args)
        return None

    async def _record(self, context: RequestContext, removed: Sequence[Message]) -> None:
        thread = context.thread
        if thread is None or context.memory_config.read_only or self._on_trim is None:
            return
        own = [m for m in removed if m.thread_id in (None, thread.id)]
        if not own:
            return

        def _advance(current: Thread) -> Boundary | None:
            previous = read_boundary(current.metadata, self.max_tokens, self.at_max_remove_tokens)
            new = advance_boundary(previous, own, self.max_tokens, self.at_max_remove_tokens)
            return None if new is previous else new

        try:
            updated = await self._on_trim(thread.id, _advance)
        except ThreadNotFound:
            return
        if updated is not None:
            context.thread = updated
