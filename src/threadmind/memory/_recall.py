"""``Memory.recall``: the configured history window, a page, or semantic hits merged with their context.

The default window (the last N) is served by the thread's actor from its in-memory tail; a token budget
walks pages newest-first; semantic recall ranks the scope through ``threadmind.search`` (words and vectors, as
configured) and merges each hit's context window (reference §1.1, §5.3). During an embedder outage the result is
history plus keyword hits, ``degraded``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from .._config import MemoryConfig, SearchMode, SemanticRecallConfig
from .._results import RecallResult, SearchHit
from ..actors._thread_actor import GetThread, LoadMessages, LoadTokenWindow, LoadWindow
from ..codecs import Message, Thread
from ..errors import ResourceMismatch, ThreadNotFound, ValidationError
from ..processors._merge import is_system_reminder
from ..stores import DateRange, Include, MessagePage, MessageQuery

if TYPE_CHECKING:
    from ._core import MemoryCore

__all__ = ("recall", "search_messages", "visible")


async def recall(
    core: MemoryCore,
    config: MemoryConfig,
    thread_id: str,
    resource_id: str | None,
    *,
    per_page: int | bool | None,
    page: int,
    direction: Literal["ASC", "DESC"] | None,
    includes: list[Include],
    window: DateRange | None,
    vector_search_string: str | None,
) -> RecallResult:
    """The messages of one recall call (arguments already validated)."""
    door = core.door
    door.check_running()
    semantic = config.semantic_recall_config if vector_search_string and _can_search(core, config) else None
    if not config.history_enabled and per_page is None and semantic is None:
        # Reference §1.1 step 2: no history asked for and no search to run (``include`` or not).
        return RecallResult(messages=[], total=0, page=page, per_page=0, has_more=False)
    # Step 3: resource-scoped semantic recall, as configured, tolerates a thread that does not exist yet.
    configured = config.semantic_recall_config
    tolerate_missing = configured is not None and configured.scope != "thread"
    limit = config.max_messages
    if (per_page is None and page == 0 and direction is None and not includes and window is None
            and semantic is None and config.message_history is None and limit):
        # The default window comes from the thread actor's in-memory tail: no database read when warm.
        tail: MessagePage = await door.ask(thread_id, LoadWindow(limit, resource_id, tolerate_missing))
        return RecallResult(messages=visible(tail.messages), total=tail.total, page=0, per_page=limit,
                            has_more=tail.has_more)
    if resource_id is not None:
        # The owner check reads the row the thread's actor holds (fresh as the actors' caches are).
        thread: Thread | None = await door.ask(thread_id, GetThread())
        if thread is None and not tolerate_missing:
            raise ThreadNotFound(thread_id, message=f"No thread found with id {thread_id}")
        if thread is not None and thread.resource_id != resource_id:
            raise ResourceMismatch(thread_id, thread.resource_id, resource_id)
    degraded = False
    if semantic is not None:
        assert vector_search_string is not None
        hits, degraded = await _semantic_includes(core, vector_search_string, semantic, thread_id=thread_id,
                                                  resource_id=resource_id)
        includes = [*includes, *hits]
    if per_page is None and config.message_history is not None and config.history_enabled:
        return await _token_window(core, thread_id, resource_id, config, includes, degraded)
    size: int | bool = per_page if per_page is not None else (config.max_messages or 0)
    newest_first = direction is None and size is not False
    query = MessageQuery(
        thread_id=thread_id,
        resource_id=resource_id,
        page=page,
        per_page=size,
        direction="DESC" if newest_first else (direction or "ASC"),
        include=includes,
        date_range=window,
    )
    result: MessagePage = await door.ask(thread_id, LoadMessages(query))
    messages = visible(result.messages)
    if newest_first:
        messages.reverse()  # the store returned (created_at, sequence) descending
    return RecallResult(messages=messages, total=result.total, page=result.page, per_page=result.per_page,
                        has_more=result.has_more, degraded=degraded)


async def _semantic_includes(
    core: MemoryCore, text: str, semantic: SemanticRecallConfig, *, thread_id: str, resource_id: str | None
) -> tuple[list[Include], bool]:
    if semantic.scope == "resource" and resource_id is None:
        raise ValidationError(
            "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided. "
            "Either provide a resourceId or explicitly set semanticRecall.scope to 'thread'."
        )
    # The one retrieval pipeline (threadmind.search): the processor and Memory.search rank the same way.
    found = await core.door.searcher().search(
        text, top_k=semantic.top_k, resource_id=resource_id if semantic.scope == "resource" else None,
        thread_id=thread_id if semantic.scope == "thread" else None, mode=semantic.search,
        keyword_weight=semantic.keyword_weight, threshold=semantic.threshold,
        metadata_filter=semantic.metadata_filter(), depth=semantic.top_k)
    window = semantic.range
    return [
        Include(id=hit.message_id, with_previous_messages=window.before, with_next_messages=window.after)
        for hit in found.ranked[:semantic.top_k]
    ], found.degraded


async def _token_window(
    core: MemoryCore, thread_id: str, resource_id: str | None, config: MemoryConfig, includes: list[Include],
    degraded: bool,
) -> RecallResult:
    history = config.message_history
    assert history is not None
    window = LoadTokenWindow(history, config.max_messages, includes, resource_id, core.tokens)
    messages = visible(await core.door.ask(thread_id, window))
    per_page: int | bool = config.max_messages if config.max_messages is not None else False
    return RecallResult(messages=messages, total=len(messages), page=0, per_page=per_page, has_more=False,
                        degraded=degraded)


def _can_search(core: MemoryCore, config: MemoryConfig) -> bool:
    """Whether a search string can be answered: an index, or words only and a store with a keyword index."""
    semantic = config.semantic_recall_config
    if semantic is None:
        return False
    return core.door.index is not None or (semantic.search != "vector" and core.door.keyword_index)


def visible(messages: Iterable[Message]) -> list[Message]:
    """Drop system rows and system reminders, as ``recall`` does by default (reference §4.6)."""
    return [m for m in messages if m.role != "system" and not is_system_reminder(m)]


async def search_messages(core: MemoryCore, query: str, *, resource_id: str, thread_id: str | None, top_k: int,
                          mode: SearchMode | None, threshold: float | None,
                          window: DateRange | None) -> list[SearchHit]:
    """``Memory.search`` (arguments already validated)."""
    door = core.door
    configured = core.options.semantic_recall_config or SemanticRecallConfig()
    mode = mode or configured.search
    if mode == "vector" and core.door.running_index() is None:
        raise ValidationError("search 'vector' needs a vector store and an embedder")
    if thread_id is not None:
        owner: Thread | None = await door.ask(thread_id, GetThread())  # the row the thread's actor holds
        if owner is None:
            raise ThreadNotFound(thread_id, message=f"No thread found with id {thread_id}")
        if owner.resource_id != resource_id:
            raise ResourceMismatch(thread_id, owner.resource_id, resource_id)
    found = await core.door.searcher().search(query, top_k=top_k, resource_id=resource_id, thread_id=thread_id,
                                         mode=mode, keyword_weight=configured.keyword_weight, threshold=threshold,
                                         metadata_filter=configured.metadata_filter())
    ranked = found.ranked
    hits: list[SearchHit] = []
    start = 0
    while len(hits) < top_k and start < len(ranked):  # messages outside the date range, or hidden, make room
        batch = ranked[start:start + max(top_k, 16)]
        start += len(batch)
        messages = {m.id: m for m in visible(await door.get_messages_by_id([r.message_id for r in batch]))}
        for entry in batch:
            message = messages.get(entry.message_id)
            if message is None or (window is not None and not _within(message, window)):
                continue
            if message.resource_id not in (None, resource_id) or (thread_id and message.thread_id != thread_id):
                continue  # never outside the scope, whatever a store returned
            hits.append(SearchHit(message, entry.score, entry.vector_score, entry.keyword_score))
            if len(hits) == top_k:
                break
    return hits


def _within(message: Message, window: DateRange) -> bool:
    at = message.created_at
    if window.start is not None and (at < window.start or (window.start_exclusive and at == window.start)):
        return False
    return not (window.end is not None and (at > window.end or (window.end_exclusive and at == window.end)))
