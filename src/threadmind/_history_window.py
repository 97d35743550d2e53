"""Token-budget history: the paged newest-first loader and the per-thread trim boundary (reference §3.4).

Below both the processors (the ``message-history`` and ``memory-token-limiter`` steps) and the thread actor, which
loads a token window for ``Memory.recall`` as one of its commands (``LoadTokenWindow``).

The boundary lives in ``thread.metadata["memoryTokenLimiter"]`` as ``{createdAt, messageIds, maxTokens,
atMaxRemoveTokens}``; it only moves forward and is ignored when the budget changes. Trimming never deletes
rows, it only excludes them from future context windows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec

from ._config import MessageHistoryConfig
from .codecs import Message, Thread, ToolInvocationPart
from .codecs._time import from_iso, to_iso
from .stores import Include, MessagePage, MessageQuery
from .tokens import DefaultTokenCounter, TokenCounter

__all__ = (
    "BOUNDARY_KEY",
    "Boundary",
    "CONVERSATION_OVERHEAD",
    "advance_boundary",
    "MessageReader",
    "group_by_tool_calls",
    "is_transient_signal",
    "load_token_window",
    "read_boundary",
)

BOUNDARY_KEY = "memoryTokenLimiter"
CONVERSATION_OVERHEAD = 24
_PAGE = 64
# Rows per page of the token-window loader. The thread actor's tail grows to the pages asked (up to
# TAIL_MAX, 4 pages), so a window of up to 256 messages is read from the store once (and after each 2 s
# expiry) and served from memory in between.


class MessageReader(Protocol):
    """Thread rows and pages of messages: what history windows read (a ``Store`` is one, and so is
    ``MemoryAccess``)."""

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread row, or None."""
        ...

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """A page of messages (reference §5.3)."""
        ...


def is_transient_signal(message: Message) -> bool:
    """A signal whose ``content.metadata.signal.transient`` is true is never stored."""
    if message.role != "signal":
        return False
    metadata = message.content.metadata or {}
    signal: Any = metadata.get("signal")
    return isinstance(signal, dict) and signal.get("transient") is True


class Boundary(msgspec.Struct, frozen=True):
    """Messages at or before (``created_at``, ``message_ids``) are trimmed from the context."""

    created_at: datetime
    message_ids: frozenset[str]
    max_tokens: float
    at_max_remove_tokens: float

    def is_after(self, message: Message) -> bool:
        """True when the message is still in context (strictly after the boundary)."""
        if message.created_at != self.created_at:
            return message.created_at > self.created_at
        return message.id not in self.message_ids

    def to_metadata(self) -> dict[str, Any]:
        """The JSON object stored in thread metadata (Mastra's shape)."""
        return {
            "createdAt": to_iso(self.created_at),
            "messageIds": sorted(self.message_ids),
            "maxTokens": _num(self.max_tokens),
            "atMaxRemoveTokens": _num(self.at_max_remove_tokens),
        }


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def read_boundary(metadata: Mapping[str, Any] | None, max_tokens: float, remove_tokens: float) -> Boundary | None:
    """The stored boundary when it was written under the same budget, else None."""
    raw = (metadata or {}).get(BOUNDARY_KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        if float(raw.get("maxTokens", -1)) != float(max_tokens):
            return None
        if float(raw.get("atMaxRemoveTokens", -1)) != float(remove_tokens):
            return None
        created = from_iso(str(raw["createdAt"]))
        ids = frozenset(str(i) for i in raw.get("messageIds") or ())
    except (KeyError, TypeError, ValueError):
        return None
    return Boundary(created, ids, max_tokens, remove_tokens)


def advance_boundary(
    previous: Boundary | None, removed: Sequence[Message], max_tokens: float, remove_tokens: float
) -> Boundary | None:
    """The boundary after trimming ``removed``; monotonic (never moves backwards)."""
    if not removed:
        return previous
    newest = max(m.created_at for m in removed)
    ids = frozenset(m.id for m in removed if m.created_at == newest)
    if previous is not None:
        if newest < previous.created_at:
            return previous
        if newest == previous.created_at:
            ids = ids | previous.message_ids
    return Boundary(newest, ids, max_tokens, remove_tokens)


def _tool_call_ids(message: Message) -> Sequence[str]:
    """The tool-call ids a message carries (typed parts, then legacy ``toolInvocations``); usually none.

    A plain loop that allocates only when it finds one: run over every loaded message on every token-budget
    turn, it costs a quarter of a comprehension per message.
    """
    content = message.content
    ids: list[str] | None = None
    for part in content.parts:
        if isinstance(part, ToolInvocationPart):
            if ids is None:
                ids = []
            ids.append(part.tool_invocation.tool_call_id)
    legacy = content.tool_invocations
    if legacy:
        for item in legacy:
            if isinstance(item, Mapping) and isinstance(item.get("toolCallId"), str):
                if ids is None:
                    ids = []
                ids.append(item["toolCallId"])
    return ids or ()


def group_by_tool_calls(messages: Sequence[Message]) -> list[list[Message]]:
    """Groups of messages that share any tool-call id (union-find); order of first appearance."""
    calls = [_tool_call_ids(message) for message in messages]
    if not any(calls):  # no tool calls at all (most conversations): every message is its own group
        return [[message] for message in messages]
    parent = list(range(len(messages)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for index, call_ids in enumerate(calls):
        for call_id in call_ids:
            if call_id in owner:
                a, b = find(owner[call_id]), find(index)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                owner[call_id] = index
    groups: dict[int, list[Message]] = {}
    for index, message in enumerate(messages):
        groups.setdefault(find(index), []).append(message)
    return list(groups.values())


def _retain(
    newest_first: Sequence[Message], count: Callable[[Message], float], max_messages: int | None, budget: float
) -> tuple[list[Message], str | None]:
    """Keep whole groups newest-first while both limits hold; the limit that stopped retention, if any."""
    kept: list[Message] = []
    tokens = float(CONVERSATION_OVERHEAD)
    for group in group_by_tool_calls(newest_first):
        group_tokens = count(group[0]) if len(group) == 1 else sum(count(m) for m in group)
        if max_messages is not None and len(kept) + len(group) > max_messages:
            return kept, "count"
        if tokens + group_tokens > budget:
            return kept, "tokens"
        kept.extend(group)
        tokens += group_tokens
    return kept, None


async def load_token_window(
    store: MessageReader,
    thread_id: str,
    resource_id: str | None,
    history: MessageHistoryConfig,
    max_messages: int | None,
    includes: Sequence[Include] = (),
    *,
    counter: TokenCounter | None = None,
    boundary: Boundary | None = None,
    use_stored_boundary: bool = True,
    include_overflow: bool = False,
) -> list[Message]:
    """History that fits ``max_tokens − at_max_remove_tokens`` (and the count cap), ascending.

    With ``include_overflow`` and retention stopped by tokens, everything loaded is returned so that the
    memory token limiter can trim it (and record the boundary).
    """
    counter = counter or DefaultTokenCounter()
    budget = history.max_tokens - history.remove_tokens
    if boundary is None and use_stored_boundary:
        thread = await store.get_thread(thread_id)
        if thread is not None:
            boundary = read_boundary(thread.metadata, history.max_tokens, history.remove_tokens)
    loaded: list[Message] = []
    kept: list[Message] = []
    # Retention is re-run over everything loaded after each page (a tool group may straddle pages), so each
    # message's count is remembered for this call: keyed by object id, valid while `loaded` holds them all.
    counted: dict[int, float] = {}

    def count(message: Message) -> float:
        tokens = counted.get(id(message))
        if tokens is None:
            tokens = counted[id(message)] = counter.count_message(message)
        return tokens

    page = 0
    while True:
        result = await store.list_messages(
            MessageQuery(thread_id=thread_id, resource_id=resource_id, page=page, per_page=_PAGE,
                         direction="DESC", include_total=False)
        )
        crossed = False
        for message in result.messages:
            if boundary is not None and not boundary.is_after(message):
                crossed = True
                break
            if message.role == "system" or is_transient_signal(message):
                continue
            loaded.append(message)
        kept, stopped = _retain(loaded, count, max_messages, budget)
        if stopped or crossed or len(result.messages) < _PAGE:
            break
        page += 1
    if include_overflow and stopped == "tokens":
        kept = loaded
    # Oldest first in the store's order (created_at, sequence): a tool group flattened by the retention can
    # hold messages that are not neighbours, so reversing the kept list would misplace them.
    chosen = {id(m) for m in kept}
    kept = [m for m in reversed(loaded) if id(m) in chosen]
    if includes:
        extra = await store.list_messages(
            MessageQuery(thread_id=thread_id, resource_id=resource_id, per_page=0, include=list(includes))
        )
        have = {m.id for m in kept}
        for message in extra.messages:
            if message.id in have or (boundary is not None and message.thread_id == thread_id
                                      and not boundary.is_after(message)):
                continue
            kept.append(message)
            have.add(message.id)
        kept.sort(key=lambda m: m.created_at)
    return kept
