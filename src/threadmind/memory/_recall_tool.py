"""The agent's ``recall`` tool (observational memory's ``retrieval`` mode): read back the raw messages behind an
observation group by a cursor, page through a thread, list the user's threads, and (``retrieval.vector``) search
them; Mastra 1.71's tool, arguments and wording.

It reads through the public :class:`~threadmind.memory.Memory` API and never outside the turn's resource: a cursor
or a thread of another user reads as one that does not exist. Deliberate differences, written down here and in the
README: ``search`` ranks the messages themselves with the library's retrieval pipeline (keyword and vector; no
separate observation index), pages read in time order, and ``step-start`` parts are not listed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .._config import MemoryConfig
from ..codecs import (
    FilePart,
    Message,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolInvocationPart,
    UnknownPart,
)
from ..errors import ThreadmindError, ValidationError
from ..tokens import estimate_tokens
from ..tools import Tool, ToolContext

if TYPE_CHECKING:
    from ._facade import Memory

__all__ = ("RECALL_TOOL", "recall_tool")

RECALL_TOOL = "recall"
MAX_RESULT_TOKENS = 2000
_LOW_DETAIL_TOKENS, _TEXT_TOKENS, _TOOL_TOKENS, _TOOL_RESULT_TOKENS = 30, 100, 20, 4000
_EXPAND_USER_TEXT, _EXPAND_OTHER = 200, 50
SEARCH_NOT_CONFIGURED = ("Search is not configured. Enable it with `retrieval: { vector: true }` and configure a "
                         "vector store and embedder on your Memory instance.")
_PART_TYPES = ("text", "tool-call", "tool-result", "reasoning", "image", "file")
_TIES = 64  # messages read past a page, so those dated the same millisecond as its cursor keep their order


class RecallError(ThreadmindError):
    """What the model asked of ``recall`` cannot be answered (the tool call ends in an error it reads)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="THREADMIND_RECALL")


class _Part(msgspec.Struct):
    message_id: str
    index: int
    role: str
    type: str
    text: str
    full: str
    tool_name: str | None = None


# -- token budgets ------------------------------------------------------------------------------------
def _safe_end(text: str, end: int) -> int:
    return end - 1 if 0 < end < len(text) and "\ud800" <= text[end - 1] <= "\udbff" else end


def truncate_to_tokens(text: str, budget: int) -> str:
    """``text`` cut to ``budget`` tokens with a ``... [truncated ~N tokens]`` tail (Mastra's
    ``truncateStringByTokens``)."""
    if not text or budget <= 0:
        return ""
    total = estimate_tokens(text)
    if total <= budget:
        return text

    def candidate(end: int) -> str:
        visible = text[:_safe_end(text, end)]
        return f"{visible}\n... [truncated ~{total - estimate_tokens(visible)} tokens]"

    low, high, best = 0, len(text), candidate(0)
    while low <= high:
        middle = (low + high) // 2
        attempt = candidate(middle)
        if estimate_tokens(attempt) <= budget:
            best, low = attempt, middle + 1
        else:
            high = middle - 1
    return best


def _fit(text: str, budget: int, hint: str | None = None) -> str:
    if estimate_tokens(text) <= budget:
        return text
    return truncate_to_tokens(text, budget) + (f" [{hint} for more]" if hint else "")


def chunk_to_tokens(text: str, budget: int, offset: int = 0) -> tuple[str, int, int | None, bool]:
    """The piece of ``text`` from ``offset`` that fits ``budget`` tokens: (piece, offset, next offset or None,
    whether text remains)."""
    start = max(0, min(int(offset), len(text)))
    if start < len(text) and "\udc00" <= text[start] <= "\udfff":
        start += 1
    rest = text[start:]
    if not rest or estimate_tokens(rest) <= budget:
        return rest, start, None, False
    low, high, best = 0, len(rest), ""
    while low <= high:
        middle = (low + high) // 2
        attempt = rest[:_safe_end(rest, middle)]
        if attempt and estimate_tokens(attempt) <= budget:
            best, low = attempt, middle + 1
        else:
            high = middle - 1
    following = start + len(best)
    return best, start, following, following < len(text)


# -- messages as parts --------------------------------------------------------------------------------
def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _make(message: Message, index: int, kind: str, full: str, detail: str, tool: str | None = None) -> _Part:
    if detail == "high":
        return _Part(message.id, index, message.role, kind, full, full, tool)
    budget = _TEXT_TOKENS if kind == "text" else _TOOL_TOKENS if kind in ("tool-call", "tool-result") else \
        _LOW_DETAIL_TOKENS
    hint = f'recall cursor="{message.id}" partIndex={index} detail="high"'
    return _Part(message.id, index, message.role, kind, _fit(full, budget, hint), full, tool)


def message_parts(message: Message, detail: str) -> list[_Part]:
    """A message as the tool shows it: one entry per visible part, with its index in the message."""
    parts = message.content.parts
    if not parts:
        text = message.content.content
        return [_make(message, 0, "text", text, detail)] if text else []
    out: list[_Part] = []
    for index, part in enumerate(parts):
        if isinstance(part, TextPart):
            if part.text:
                out.append(_make(message, index, "text", part.text, detail))
        elif isinstance(part, ToolInvocationPart):
            call = part.tool_invocation
            if call.state != "partial-call" and call.args is not None:
                shown = f"[Tool Call: {call.tool_name}]" + ("" if detail == "low" else f"\n{_stringify(call.args)}")
                out.append(_Part(message.id, index, message.role, "tool-call", shown, shown, call.tool_name))
            if call.state == "result":
                mastra = (part.provider_metadata or {}).get("mastra")
                value = mastra["modelOutput"] if isinstance(mastra, dict) and "modelOutput" in mastra else call.result
                full = f"[Tool Result: {call.tool_name}]\n{truncate_to_tokens(_stringify(value), _TOOL_RESULT_TOKENS)}"
                out.append(_make(message, index, "tool-result", full, detail, call.tool_name))
        elif isinstance(part, ReasoningPart):
            if part.reasoning:
                out.append(_make(message, index, "reasoning", part.reasoning, detail))
        elif isinstance(part, FilePart):
            shown = f"[File: {part.filename}]" if part.filename else "[File]"
            out.append(_Part(message.id, index, message.role, "file", shown, shown))
        elif isinstance(part, StepStartPart):
            continue
        elif isinstance(part, UnknownPart):
            if not part.type.startswith("data-"):
                out.append(_Part(message.id, index, message.role, part.type, f"[{part.type}]", f"[{part.type}]"))
        else:
            kind = str(getattr(part, "type", "part"))
            out.append(_Part(message.id, index, message.role, kind, f"[{kind}]", f"[{kind}]"))
    return out


def _has_visible_parts(message: Message) -> bool:
    parts = message.content.parts
    if not parts:
        return bool(message.content.content)
    return any(not (isinstance(p, UnknownPart) and p.type.startswith("data-")) for p in parts)


def stamp(at: datetime) -> str:
    """Mastra's ``formatTimestamp``: ``2026-12-05 10:05:03Z``."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _rendered(parts: Sequence[_Part], times: dict[str, datetime]) -> str:
    lines: list[str] = []
    current = ""
    for part in parts:
        if part.message_id != current:
            current = part.message_id
            when = times.get(current)
            if lines:
                lines.append("")
            lines.append(f"**{part.role}{f' ({stamp(when)})' if when else ''}** [{current}]:")
        lines.append(f"  [p{part.index}] {part.text}")
    return "\n".join(lines)


def render_parts(parts: list[_Part], times: dict[str, datetime], budget: int) -> tuple[str, bool, int]:
    """The parts as text within ``budget`` tokens, widening cut parts while room is left (user text first):
    (text, truncated, tokens left out)."""
    text = _rendered(parts, times)
    total = estimate_tokens(text)
    if total > budget:
        return truncate_to_tokens(text, budget), True, total - budget

    def priority(part: _Part) -> int:
        if part.role == "user" and part.type == "text":
            return 0
        return {"text": 1, "reasoning": 1, "tool-result": 2, "tool-call": 3}.get(part.type, 4)

    cut = sorted((i for i, p in enumerate(parts) if p.text != p.full), key=lambda i: priority(parts[i]))
    if not cut:
        return text, False, 0
    room = budget - total
    for i in cut:
        if room <= 0:
            break
        part = parts[i]
        most = _EXPAND_USER_TEXT if part.role == "user" and part.type == "text" else _EXPAND_OTHER
        full, now = estimate_tokens(part.full), estimate_tokens(part.text)
        target = min(full, most)
        if target - now <= 0:
            continue
        if target - now <= room and target >= full:
            parts[i] = msgspec.structs.replace(part, text=part.full)
            room -= target - now
        else:
            hint = f'recall cursor="{part.message_id}" partIndex={part.index} detail="high"'
            widened = _fit(part.full, min(now + room, most), hint)
            parts[i] = msgspec.structs.replace(part, text=widened)
            room -= estimate_tokens(widened) - now
    text = _rendered(parts, times)
    total = estimate_tokens(text)
    if total <= budget:
        return text, False, 0
    return truncate_to_tokens(text, budget), True, total - budget


def _filtered(parts: list[_Part], part_type: str | None, tool_name: str | None) -> list[_Part]:
    if tool_name:
        parts = [p for p in parts if p.type in ("tool-call", "tool-result") and p.tool_name == tool_name]
    if part_type:
        parts = [p for p in parts if p.type == part_type]
    return parts


# -- the arguments ------------------------------------------------------------------------------------
class RecallArgs(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """What the model may pass (Mastra's input schema)."""

    mode: Literal["messages", "threads", "search"] = "messages"
    query: str | None = None
    cursor: str | None = None
    thread_id: str | None = None
    anchor: Literal["start", "end"] = "start"
    page: int | None = None
    limit: int | None = None
    detail: Literal["low", "high"] = "low"
    part_type: Literal["text", "tool-call", "tool-result", "reasoning", "image", "file"] | None = None
    tool_name: str | None = None
    part_index: int | None = None
    char_offset: int | None = None
    before: str | None = None
    after: str | None = None


def _date(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise RecallError(f"{name} must be an ISO 8601 date such as 2026-03-15 or 2026-03-10T00:00:00Z") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _page_result(text: str, count: int, cursor: str, page: int, limit: int, detail: str, *, next_page: bool = False,
                 prev_page: bool = False, truncated: bool = False, offset: int = 0) -> dict[str, Any]:
    return {"messages": text, "count": count, "cursor": cursor, "page": page, "limit": limit, "detail": detail,
            "hasNextPage": next_page, "hasPrevPage": prev_page, "truncated": truncated, "tokenOffset": offset}


def _range_hint(cursor: str) -> str | None:
    """The hint for a cursor that is a ``start:end`` range (or a list of them) rather than a message id."""
    if "," in cursor:
        pieces = [piece.strip() for piece in cursor.split(",") if piece.strip()]
        if not pieces:
            return None
        first, last = pieces[0], pieces[-1]
        start = first[:first.index(":")] if first.find(":") > 0 else first
        end = last[last.index(":") + 1:] if last.find(":") > 0 else last
    else:
        colon = cursor.find(":")
        if not 0 < colon < len(cursor) - 1:
            return None
        start, end = cursor[:colon], cursor[colon + 1:]
    return (f'The cursor "{cursor}" looks like a range. Use one of the individual message IDs as the cursor instead: '
            f'start="{start}" or end="{end}".')


class _Recall:
    """One call of the tool, bound to the turn's thread and resource."""

    def __init__(self, memory: Memory, thread_id: str | None, resource_id: str | None, scope: str,
                 search: bool) -> None:
        self.memory = memory
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.resource_scope = scope == "resource"
        self.search = search

    async def _cursor_message(self, cursor: str, thread_scope: str | None, enforce: bool) -> Message | str:
        """The cursor's message (or the hint for a range); a message outside the resource (or, with ``enforce``,
        the thread) reads as missing."""
        cursor = cursor.strip()
        if not cursor:
            raise RecallError("Cursor is required")
        hint = _range_hint(cursor)
        if hint is not None:
            return hint
        found = [m for m in await self.memory.list_messages_by_id([cursor]) if m.id == cursor]
        message = found[0] if found else None
        if message is not None and self.resource_id is not None:
            owner = message.resource_id
            if owner is None and message.thread_id:
                thread = await self.memory.get_thread_by_id(message.thread_id)
                owner = thread.resource_id if thread is not None else None
            if owner != self.resource_id:
                message = None
        if message is not None and enforce and thread_scope and message.thread_id != thread_scope:
            message = None
        if message is None:
            raise RecallError(f"Could not resolve cursor message: {cursor}")
        return message

    async def _window(self, thread_id: str, count: int, direction: Literal["ASC", "DESC"],
                      date_range: dict[str, Any] | None = None) -> list[Message]:
        """Up to ``count`` messages of the thread nearest its start (ASC) or its end (DESC), in thread order."""
        result = await self.memory.recall(thread_id, resource_id=self.resource_id if self.resource_scope else None,
                                          per_page=count, page=0, direction=direction, date_range=date_range)
        return list(result.messages) if direction == "ASC" else list(reversed(result.messages))

    async def _beside(self, anchor: Message, thread_id: str, count: int, forward: bool) -> list[Message]:
        """Up to ``count`` visible messages right after (``forward``) or before the anchor, in thread order; messages
        dated the same millisecond as the anchor keep their place in the thread."""
        window = await self._window(thread_id, count + _TIES, "ASC" if forward else "DESC",
                                    {"start": anchor.created_at} if forward else {"end": anchor.created_at})
        ids = [m.id for m in window]
        if anchor.id in ids:
            at = ids.index(anchor.id)
            side = window[at + 1:] if forward else window[:at]
        else:
            side = [m for m in window if (m.created_at > anchor.created_at if forward else
                                          m.created_at < anchor.created_at)]
        shown = [m for m in side if _has_visible_parts(m)]
        return shown[:count] if forward else shown[-count:]

    async def threads(self, args: RecallArgs) -> dict[str, Any]:
        if not self.resource_scope or args.thread_id == "current":
            thread = await self.memory.get_thread_by_id(self.thread_id) if self.thread_id else None
            if thread is None or (self.resource_id is not None and thread.resource_id != self.resource_id):
                return {"error": "Could not resolve current thread."}
            return {"threads": f"- **{thread.title or '(untitled)'}** ← current\n  id: {thread.id}\n  updated: "
                               f"{stamp(thread.updated_at)} | created: {stamp(thread.created_at)}",
                    "count": 1, "page": 0, "hasMore": False}
        if not self.resource_id:
            raise RecallError("Resource ID is required for recall")
        page, limit = max(0, args.page or 0), min(max(args.limit or 20, 1), 50)
        before, after = _date(args.before, "before"), _date(args.after, "after")
        if before or after:
            listed = await self.memory.list_threads(resource_id=self.resource_id, per_page=False,
                                                    order_by="updated_at", direction="DESC")
            threads = [t for t in listed.threads if (before is None or t.created_at < before)
                       and (after is None or t.created_at > after)]
            more = (page + 1) * limit < len(threads)
            threads = threads[page * limit:(page + 1) * limit]
        else:
            listed = await self.memory.list_threads(resource_id=self.resource_id, page=page, per_page=limit,
                                                    order_by="updated_at", direction="DESC")
            threads, more = listed.threads, listed.has_more
        if not threads:
            return {"threads": "No threads found matching the criteria.", "count": 0, "page": page, "hasMore": False}
        lines = []
        for thread in threads:
            lines += [f"- **{thread.title or '(untitled)'}**{' ← current' if thread.id == self.thread_id else ''}",
                      f"  id: {thread.id}", f"  updated: {stamp(thread.updated_at)} | created: "
                      f"{stamp(thread.created_at)}"]
        return {"threads": "\n".join(lines), "count": len(threads), "page": page, "hasMore": more}

    async def find(self, args: RecallArgs, thread_scope: str | None) -> dict[str, Any]:
        if not self.search:
            return {"results": SEARCH_NOT_CONFIGURED, "count": 0}
        if not args.query:
            raise RecallError('query is required for mode="search"')
        if not self.resource_id:
            raise RecallError("Resource ID is required for recall")
        top_k = min(max(args.limit or 10, 1), 20)
        before, after = _date(args.before, "before"), _date(args.after, "after")
        window = {"start": after, "start_exclusive": True, "end": before, "end_exclusive": True} \
            if before or after else None
        hits = await self.memory.search(args.query, resource_id=self.resource_id, thread_id=thread_scope,
                                        top_k=top_k, date_range=window)
        if not hits:
            return {"results": "No matching messages found.", "count": 0}
        titles: dict[str, Any] = {}
        for hit in hits:
            thread_id = hit.message.thread_id or ""
            if thread_id and thread_id not in titles:
                titles[thread_id] = await self.memory.get_thread_by_id(thread_id, resource_id=self.resource_id)
        blocks = []
        for hit in hits:
            thread_id = hit.message.thread_id or ""
            thread = titles.get(thread_id)
            current = thread_id == self.thread_id
            body = "\n".join(p.full for p in message_parts(hit.message, "high")).strip() or \
                "_Message text unavailable._"
            title = f" ({thread.title or '(untitled)'})" if thread else ""
            lines = [f"### {'Message from the current thread' if current else 'Message from another thread'}", "",
                     "This result came from the current thread." if current else
                     "This result came from another thread of this user.",
                     f"- thread: {thread_id}{title}",
                     f"- source: raw messages from ID {hit.message.id} through ID {hit.message.id}",
                     *([f"- thread updated: {stamp(thread.updated_at)}"] if thread else []),
                     f"- score: {hit.score:.2f}", "", "```text", body, "```"]
            blocks.append("\n".join(lines))
        return {"results": _fit("\n\n".join(blocks), MAX_RESULT_TOKENS), "count": len(hits)}

    async def part(self, args: RecallArgs, message: Message, index: int) -> dict[str, Any]:
        parts = message_parts(message, "high")
        if not parts:
            raise RecallError(f"Message {message.id} has no visible content (it may be an internal system message). "
                              "Try a neighboring message ID instead.")
        target = next((p for p in reversed(parts) if p.index == index), None)
        if target is None:
            if index > max(p.index for p in parts) and message.thread_id:
                later = await self._beside(message, message.thread_id, 1, forward=True)
                following = message_parts(later[0], "high")[:1] if later else []
                if following:
                    first = following[0]
                    text, offset, next_offset, truncated = chunk_to_tokens(
                        f"Part index {index} not found in message {message.id}; showing partIndex {first.index} from "
                        f"next message {first.message_id}.\n\n{first.text}", MAX_RESULT_TOKENS, args.char_offset or 0)
                    return {"text": text, "messageId": first.message_id, "partIndex": first.index, "role": first.role,
                            "type": first.type, "truncated": truncated, "charOffset": offset,
                            **({"nextCharOffset": next_offset, "note": (
                                f'To continue this part, call recall cursor="{message.id}" partIndex={index} '
                                f'detail="high" charOffset={next_offset}.')} if next_offset else {})}
            available = ", ".join(str(p.index) for p in parts)
            raise RecallError(f"Part index {index} not found in message {message.id}. Available indices: {available}")
        text, offset, next_offset, truncated = chunk_to_tokens(target.text, MAX_RESULT_TOKENS, args.char_offset or 0)
        return {"text": text, "messageId": target.message_id, "partIndex": target.index, "role": target.role,
                "type": target.type, "truncated": truncated, "charOffset": offset,
                **({"nextCharOffset": next_offset, "note": (
                    f'To continue this part, call recall cursor="{target.message_id}" partIndex={target.index} '
                    f'detail="high" charOffset={next_offset}.')} if next_offset else {})}

    async def from_edge(self, args: RecallArgs, thread_id: str) -> dict[str, Any]:
        """A page counted from the thread's start (``anchor`` "start") or end ("end")."""
        page, limit = max(min(args.page or 1, 50), 1), min(max(args.limit or 20, 1), 20)
        if self.resource_id is not None:
            thread = await self.memory.get_thread_by_id(thread_id, resource_id=self.resource_id)
            if thread is None:
                raise RecallError("Thread not found")
        skip = (page - 1) * limit
        window = [m for m in await self._window(thread_id, skip + limit + 1, "DESC" if args.anchor == "end" else "ASC")
                  if _has_visible_parts(m)]
        if args.anchor == "end":
            end = len(window) - skip
            messages = window[max(end - limit, 0):max(end, 0)]
            next_page, prev_page = bool(messages) and page > 1, bool(messages) and end - limit > 0
        else:
            messages = window[skip:skip + limit]
            next_page, prev_page = bool(messages) and len(window) > skip + len(messages), page > 1
        parts = _filtered([p for m in messages for p in message_parts(m, args.detail)], args.part_type, args.tool_name)
        text, truncated, offset = render_parts(parts, {m.id: m.created_at for m in messages}, MAX_RESULT_TOKENS)
        if not messages:
            empty = f"(no messages found on page {page} for this thread)" if page > 1 else \
                "(no messages in this thread)"
        else:
            empty = "(no message parts matched the current filters)" if args.part_type or args.tool_name else \
                "(no messages found)"
        return _page_result(text or empty, len(messages), messages[0].id if messages else "", page, limit,
                            args.detail, next_page=next_page, prev_page=prev_page, truncated=truncated, offset=offset)

    async def near(self, args: RecallArgs, anchor: Message, thread_id: str, cursor: str,
                   thread_scope: str | None) -> dict[str, Any]:
        """A page after (``page`` > 0) or before (< 0) the cursor's message."""
        page = max(min(1 if args.page in (None, 0) else int(args.page), 50), -50)
        limit = min(max(args.limit or 20, 1), 20)
        if anchor.thread_id and anchor.thread_id != thread_id and thread_scope:
            return _page_result(
                f'Cursor does not belong to the active thread. Expected thread "{thread_id}" but cursor "{cursor}" '
                f'belongs to "{anchor.thread_id}". Pass threadId="{anchor.thread_id}" to browse that thread.',
                0, cursor, page, limit, args.detail)
        target = anchor.thread_id or thread_id
        forward = page > 0
        skip = (abs(page) - 1) * limit
        window = await self._beside(anchor, target, skip + limit + 1, forward)
        more = len(window) > skip + limit
        if forward:
            messages = window[skip:skip + limit]
        else:
            end = max(len(window) - skip, 0)
            messages = window[max(end - limit, 0):end]
        next_page, prev_page = (more, abs(page) > 1) if forward else (abs(page) > 1, more)
        parts = _filtered([p for m in messages for p in message_parts(m, args.detail)], args.part_type, args.tool_name)
        times = {m.id: m.created_at for m in messages}
        if args.detail == "high" and parts:
            first = parts[0]
            text, truncated, offset = render_parts([first], times, MAX_RESULT_TOKENS)
            same = [p for p in parts if p.message_id == first.message_id]
            others = [p for p in parts if p.message_id != first.message_id]
            hints = []
            if len(same) > 1:
                hints.append(f'next part: partIndex={same[1].index} on cursor="{first.message_id}"')
            if others:
                hints.append(f'next message: partIndex={others[0].index} on cursor="{others[0].message_id}"')
            elif next_page:
                hints.append(f"more messages available on page {page + 1}")
            if hints:
                text += f"\n\nHigh detail returns 1 part at a time. To continue: {', or '.join(hints)}."
            return _page_result(text, 1, cursor, page, limit, args.detail, next_page=bool(others) or next_page,
                                prev_page=prev_page, truncated=truncated, offset=offset)
        text, truncated, offset = render_parts(parts, times, MAX_RESULT_TOKENS)
        empty = "(no messages found)" if parts else "(no message parts matched the current filters)" \
            if args.part_type or args.tool_name else "(no visible message parts found for this page)"
        return _page_result(text or empty, len(messages), cursor, page, limit, args.detail, next_page=next_page,
                            prev_page=prev_page, truncated=truncated, offset=offset)

    async def run(self, args: RecallArgs) -> dict[str, Any]:
        current = self.thread_id
        explicit = current if args.thread_id == "current" else args.thread_id
        if args.thread_id == "current" and not current:
            raise RecallError("Could not resolve current thread.")
        if args.mode == "search":
            return await self.find(args, current if not self.resource_scope else explicit)
        if args.mode == "threads":
            return await self.threads(args)
        used_default = not args.thread_id and not args.cursor and bool(current)
        thread_id = explicit or (current if used_default else None)
        if not thread_id and not args.cursor:
            raise RecallError(
                'No active thread context and no cursor or threadId was provided for mode="messages". Pass a threadId '
                '(use mode="threads" to discover thread IDs) or a message ID as cursor.' if self.resource_scope else
                'No active thread context for mode="messages". This tool is limited to the current thread and no '
                "current thread could be resolved.")
        if not self.resource_scope:
            target, thread_scope = current, current
        elif thread_id:
            thread = await self.memory.get_thread_by_id(thread_id)
            if thread is None or thread.resource_id != self.resource_id:
                raise RecallError("Thread does not belong to the active resource")
            target, thread_scope = thread.id, thread.id
        else:
            target, thread_scope = current, current
        if not args.cursor:
            if not target:
                raise RecallError("Thread ID is required for recall")
            result = await self.from_edge(args, target)
            if used_default and self.resource_scope:
                result["messages"] = f"threadId wasn't passed so used default {current}.\n\n{result['messages']}"
            return result
        anchor = await self._cursor_message(args.cursor, thread_scope, enforce=not self.resource_scope)
        if isinstance(anchor, str):
            return _page_result(anchor, 0, args.cursor, args.page or 1, min(args.limit or 20, 20), args.detail)
        target = target or anchor.thread_id
        if not target:
            raise RecallError("Thread ID is required for recall")
        if args.part_index is not None:
            return await self.part(args, anchor, args.part_index)
        return await self.near(args, anchor, target, args.cursor, thread_scope)


def _schema(resource: bool, search: bool) -> dict[str, Any]:
    modes = ["messages", "threads", "search"] if search else ["messages", "threads"]
    where = "across all threads" if resource else "in this thread"
    mode_text = ('What to retrieve. "messages" (default) pages through message history. ' + (
        '"threads" lists all threads for the current user.' if resource else
        '"threads" returns info about the current thread.') + (
        f' "search" finds messages by semantic similarity {where}.' if search else ""))
    properties: dict[str, Any] = {"mode": {"type": "string", "enum": modes, "description": mode_text}}
    if resource:
        properties |= {
            "threadId": {"type": "string", "minLength": 1, "description": 'Browse a different thread, or "current" for '
                         'the active thread. Use mode="threads" first to discover thread IDs.'},
            "before": {"type": "string", "description": 'For mode="threads": only show threads created before this '
                       'date. ISO 8601 or natural date string (e.g. "2026-03-15", "2026-03-10T00:00:00Z").'},
            "after": {"type": "string", "description": 'For mode="threads": only show threads created after this '
                      'date. ISO 8601 or natural date string (e.g. "2026-03-01", "2026-03-10T00:00:00Z").'},
        }
    if search:
        properties["query"] = {"type": "string", "minLength": 1, "description": 'Search query for mode="search". '
                               "Finds messages semantically similar to this text."}
    properties |= {
        "cursor": {"type": "string", "minLength": 1, "description": 'A message ID to use as the pagination cursor. '
                   'For mode="messages", omit both cursor and threadId to browse the current thread. If only cursor '
                   "is provided, it must belong to the current thread. Extract it from the start or end of an "
                   "observation group range."},
        "anchor": {"type": "string", "enum": ["start", "end"], "description": 'For mode="messages" without a cursor, '
                   'page from the start (oldest-first) or end (newest-first) of the thread. Defaults to "start".'},
        "page": {"type": "integer", "minimum": -50, "maximum": 50, "description": "Pagination offset. For messages: "
                 "positive pages move forward from cursor, negative move backward. For threads: page number "
                 "(0-indexed). 0 is treated as 1 for messages."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Maximum number of items to return "
                  "per page. Defaults to 20."},
        "detail": {"type": "string", "enum": ["low", "high"], "description": 'Detail level for messages. "low" '
                   '(default) returns truncated text and tool names. "high" returns full content with tool '
                   "args/results."},
        "partType": {"type": "string", "enum": list(_PART_TYPES), "description": "Filter results to only include "
                     'parts of this type. Only applies to mode="messages".'},
        "toolName": {"type": "string", "minLength": 1, "description": "Filter results to only include tool-call and "
                     'tool-result parts matching this tool name. Only applies to mode="messages".'},
        "partIndex": {"type": "integer", "minimum": 0, "description": "Fetch a single part from the cursor message by "
                      "its positional index. When provided, returns only that part at high detail. Indices are shown "
                      "as [p0], [p1], etc. in recall results."},
        "charOffset": {"type": "integer", "minimum": 0, "description": "Continue reading a truncated single part "
                       "from this position. Pass the exact nextCharOffset value returned by a previous call; do not "
                       'compute it yourself. Only applies with cursor and partIndex in mode="messages".'},
    }
    return {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": properties}


def _description(resource: bool, search: bool) -> str:
    if resource:
        return ('Browse conversation history. Use mode="threads" to list all threads for the current user. Use '
                'mode="messages" (default) to browse messages in the current thread or pass threadId to browse another '
                'thread in the active resource. When mode="messages" has no cursor or threadId, it defaults to the '
                "current thread and says so at the top of the result. If you pass only a cursor, it must belong to "
                "the current thread." + (' Use mode="search" to find messages by content across all threads.'
                                         if search else ""))
    return ('Browse conversation history in the current thread. Use mode="messages" (default) to page through '
            "messages near a cursor." + (' Use mode="search" to find messages by content in this thread.'
                                         if search else "") +
            ' Use mode="threads" to get the current thread\'s ID and title.')


def recall_tool(config: MemoryConfig) -> Tool | None:
    """The ``recall`` tool when observational memory runs in ``retrieval`` mode, else None; it reads through the
    agent's memory (``ToolContext.memory``)."""
    om = config.observational_memory_config
    if om is None:
        return None
    on, scope, search, _instructions = om.retrieval_options
    if not on:
        return None
    resource = scope == "resource"

    async def _execute(args: Any, context: ToolContext) -> dict[str, Any]:
        try:
            parsed = msgspec.convert(args if isinstance(args, dict) else {}, RecallArgs)
        except msgspec.ValidationError as exc:
            raise ValidationError(f"recall: {exc}") from None
        memory = context.memory
        if memory is None:
            raise RecallError("Memory instance is required for recall")
        return await _Recall(memory, context.thread_id, context.resource_id, scope, search).run(parsed)

    return Tool(RECALL_TOOL, _description(resource, search), _schema(resource, search), _execute)
