"""MemoryInputFilter: stored history is authoritative; a request contributes only what storage lacks.

Clients often echo the whole conversation. This processor keeps the trailing user turn (or the client's
new tool outcomes) and drops the echo, step by step as reference §3.1 describes.
"""

from __future__ import annotations

import msgspec

from ..codecs import Message, ToolInvocationPart
from ..stores import MessageQuery, Store
from ._access import MemoryAccess, as_access
from ._merge import CLIENT_UPDATE_STATES, advances, strip_provider_metadata
from ._protocol import ProcessInputArgs

__all__ = ("MemoryInputFilter",)


def _part_type(part: object) -> str:
    value = getattr(part, "type", None)
    if isinstance(value, str):
        return value
    return type(part).__name__


def _client_update_run(message: Message) -> list[ToolInvocationPart]:
    """The trailing run of tool parts in a client-update state (``data-*`` parts skipped)."""
    run: list[ToolInvocationPart] = []
    for part in reversed(message.content.parts):
        if isinstance(part, ToolInvocationPart):
            if part.tool_invocation.state in CLIENT_UPDATE_STATES:
                run.append(part)
                continue
            break
        if _part_type(part).startswith("data-"):
            continue
        break
    run.reverse()
    return run


def _outcome_copy(message: Message, parts: list[ToolInvocationPart]) -> Message:
    content = msgspec.structs.replace(message.content, content="", parts=list(parts))
    return msgspec.structs.replace(message, content=content)


class MemoryInputFilter:
    """Processor ``memory-input-filter``: trims echoed history from the request's input messages."""

    id = "memory-input-filter"
    name = "MemoryInputFilter"

    def __init__(self, storage: Store | MemoryAccess, retain_full_input: bool = False) -> None:
        self.storage = as_access(storage)
        self.retain_full_input = retain_full_input

    async def process_input(self, args: ProcessInputArgs) -> None:
        message_list = args.message_list
        inputs = message_list.get_input()
        if not inputs:
            return None
        if self.retain_full_input or args.context.memory_config.retain_full_input:
            return None
        thread_id = args.context.thread_id or message_list.thread_id
        if not thread_id:
            return None
        resource_id = args.context.resource_id or message_list.resource_id
        last = inputs[-1]
        boundary: Message | None = None
        if last.role == "user":
            last_assistant = max((i for i, m in enumerate(inputs) if m.role == "assistant"), default=-1)
            kept = inputs[last_assistant + 1:]
            boundary = inputs[last_assistant] if last_assistant >= 0 else None
        elif last.role == "assistant":
            run = _client_update_run(last)
            kept = [_outcome_copy(last, run)] if run else []
        else:
            return None
        if len(kept) == len(inputs) and all(a is b for a, b in zip(kept, inputs, strict=True)):
            return None  # nothing would be trimmed: no storage call
        newest = await self.storage.list_messages(
            MessageQuery(thread_id=thread_id, resource_id=resource_id, per_page=1, direction="DESC",
                         include_total=False)
        )
        if not newest.messages:
            # Empty thread: seed it with the whole input, provider metadata stripped from assistant parts.
            seeded = [strip_provider_metadata(m) if m.role == "assistant" else m for m in inputs]
            self._replace_input(args, seeded)
            return None
        if not kept:
            stored = await self.storage.get_messages_by_id([last.id])
            if not any(m.thread_id == thread_id for m in stored):
                return None  # not an echo of a stored message: keep the input as it is
        if boundary is not None:
            stored_copies = await self.storage.get_messages_by_id([boundary.id])
            stored_copy = next((m for m in stored_copies if m.thread_id == thread_id), None)
            if stored_copy is not None:
                advancing = self._advancing_outcomes(boundary, stored_copy)
                if advancing:
                    kept = [_outcome_copy(boundary, advancing), *kept]
        self._replace_input(args, kept)
        return None

    @staticmethod
    def _advancing_outcomes(live: Message, stored: Message) -> list[ToolInvocationPart]:
        stored_states = {
            p.tool_invocation.tool_call_id: p.tool_invocation.state
            for p in stored.content.parts
            if isinstance(p, ToolInvocationPart)
        }
        out: list[ToolInvocationPart] = []
        for part in live.content.parts:
            if not isinstance(part, ToolInvocationPart):
                continue
            state = part.tool_invocation.state
            old = stored_states.get(part.tool_invocation.tool_call_id)
            if state in CLIENT_UPDATE_STATES and old is not None and advances(state, old):
                out.append(part)
        return out

    @staticmethod
    def _replace_input(args: ProcessInputArgs, kept: list[Message]) -> None:
        message_list = args.message_list
        message_list.clear_source("input")
        if kept:
            message_list.add(kept, "input", merge=False)
