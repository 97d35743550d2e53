"""Working memory: reads, serialized read-modify-writes, and the ``updateWorkingMemory`` tool (three modes).

Resource scope keeps the text on the resource row (shared by its threads), thread scope in the thread's
metadata (``workingMemory``). Every write is a read-modify-write run by the scope's actor, so concurrent turns
never lose an update. A call that names a thread of another resource reads as absent and may not write
(SPEC §6 scope isolation). The tool follows the reference (§7.4): template mode replaces the Markdown
document (never with the bare template), schema mode deep-merges JSON into the stored document and stores
the result only when the whole validates through the schema (a JSON Schema, a Pydantic model or a msgspec
Struct), vNext appends or replaces one entry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig
from .._working_memory_schema import CompiledSchema, tool_parameters
from ..actors._resource_actor import ModifyResource
from ..actors._system import current_fence
from ..actors._thread_actor import GetThread, ModifyThread
from ..codecs import Resource, Thread
from ..errors import ResourceMismatch, ThreadNotFound, ValidationError
from ..processors._hygiene import WM_TOOL_NAME
from ..processors._working_memory_text import deep_merge, drop_optional_nulls, normalize_ws, template_for
from ..stores import ResourceChange, ThreadChange
from ..tools import Tool, ToolContext
from ..tracing import operation_span
from ._threads import ensure_thread
from ._validation import require_id

if TYPE_CHECKING:
    from ._core import MemoryCore
    from ._gateway import Door

__all__ = (
    "VNEXT_REASONS",
    "mirror_into_resource",
    "owned_by",
    "read_working_memory",
    "scope_key",
    "working_memory_tool",
    "write_working_memory",
)

_log = logging.getLogger("threadmind.memory")


SET_WORKING_MEMORY = "setWorkingMemory"
"""The tool's name with ``useStateSignals`` (its calls are kept in the thread, unlike ``updateWorkingMemory``'s)."""
STATE_SIGNALS_PREAMBLE = (
    "The current working memory state is delivered to you each turn by the system inside a "
    "<working-memory>...</working-memory> block. That block is system-emitted state, NOT something the user typed "
    "— never describe it as the user sharing it. Read from it directly when answering. Only call this tool when the "
    "user provides genuinely NEW or CHANGED facts that should be persisted; do NOT call it to re-save unchanged "
    "data.")
VNEXT_REASONS = ("append-new-memory", "clarify-existing-memory", "replace-irrelevant-memory")
Update = Callable[[str | None], str | None]


def scope_key(config: MemoryConfig, thread_id: str, resource_id: str | None) -> tuple[str, str]:
    """(scope, key): the resource id for resource scope (required), else the thread id."""
    scope = config.working_memory.scope
    if scope == "resource":
        if not resource_id:
            raise ValidationError(
                "Memory error: Resource-scoped working memory is enabled but no resourceId was provided. "
                "Either provide a resourceId or explicitly set workingMemory.scope to 'thread'."
            )
        return scope, resource_id
    require_id(thread_id, "thread_id")
    return scope, thread_id


async def owned_by(door: Door, thread_id: str | None, resource_id: str | None) -> bool:
    """False when ``thread_id`` names an existing thread of another resource than ``resource_id``.

    A thread that does not exist yet passes: resource-scoped working memory may precede its first thread.
    """
    if not thread_id or resource_id is None:
        return True
    thread: Thread | None = await door.ask(thread_id, GetThread())
    return thread is None or thread.resource_id == resource_id


async def read_working_memory(door: Door, config: MemoryConfig, thread_id: str,
                              resource_id: str | None) -> str | None:
    """The stored text, or None (disabled, empty, or the thread belongs to another resource)."""
    scope, key = scope_key(config, thread_id, resource_id)
    if scope == "resource":
        if not await owned_by(door, thread_id, resource_id):
            return None
        resource = await door.get_resource(key)
        return resource.working_memory if resource is not None else None
    thread = await door.get_thread(key)
    if thread is None or (resource_id is not None and thread.resource_id != resource_id):
        return None  # another resource's thread reads as absent, as in get_thread_by_id
    value = (thread.metadata or {}).get("workingMemory")
    return value if isinstance(value, str) else None


async def write_working_memory(
    door: Door, scope: str, key: str, update: Update, *, owner: str | None = None,
    thread_id: str | None = None,
) -> str | None:
    """Read-modify-write working memory under the scope's actor; ``update`` returns None to skip the write.

    ``owner``: the resource the caller acts as; a ``thread_id`` of another resource is refused
    (``ResourceMismatch``) before anything is written. Every write (the public call, the tool, thread
    metadata mirrored into the resource) has its ``update_memory`` span.
    """
    with operation_span("threadmind.memory.update_working_memory", "update_memory", thread_id=thread_id,
                        resource_id=owner if owner is not None else (key if scope == "resource" else None),
                        threadmind__working_memory__scope=scope):
        fence = current_fence(thread_id)  # written during an agent turn: only while the turn holds the thread
        written: list[str] = []
        if scope == "resource":
            if not await owned_by(door, thread_id, owner):
                raise await _mismatch(door, str(thread_id), str(owner))

            def change_resource(resource: Resource | None) -> ResourceChange | None:
                new = update(resource.working_memory if resource is not None else None)
                if new is None:
                    return None
                written.append(new)
                return ResourceChange(working_memory=new)

            await door.modify_resource(key, ModifyResource(change_resource, "working_memory", fence))
            return written[-1] if written else None

        def change_thread(thread: Thread) -> ThreadChange | None:
            if owner is not None and thread.resource_id != owner:
                raise ResourceMismatch(key, thread.resource_id, owner)
            old = (thread.metadata or {}).get("workingMemory")
            new = update(old if isinstance(old, str) else None)
            if new is None:
                return None
            written.append(new)
            return ThreadChange(metadata={"workingMemory": new})

        try:
            await door.ask(key, ModifyThread(change_thread, "working_memory", fence))
        except ThreadNotFound:
            raise ThreadNotFound(key, message=f"Thread {key} not found") from None
        return written[-1] if written else None


async def _mismatch(door: Door, thread_id: str, resource_id: str) -> ResourceMismatch:
    thread: Thread | None = await door.ask(thread_id, GetThread())
    return ResourceMismatch(thread_id, thread.resource_id if thread else "?", resource_id)


async def mirror_into_resource(core: MemoryCore, resource_id: str, metadata: Mapping[str, Any] | None) -> None:
    """Thread metadata carrying a string ``workingMemory`` also sets the resource's, when working memory is
    resource-scoped (reference §7.1: saveThread/updateThread)."""
    text = metadata.get("workingMemory") if metadata else None
    wm = core.options.working_memory
    if isinstance(text, str) and wm.enabled and wm.scope == "resource":
        await write_working_memory(core.door, "resource", resource_id, lambda _old: text)


# the tool ----------------------------------------------------------------------------------------
def working_memory_tool(core: MemoryCore, config: MemoryConfig) -> Tool | None:
    """The ``updateWorkingMemory`` tool for ``config`` (None when working memory is off, read-only, or not the
    agent's to manage: ``agentManaged`` false)."""
    template = template_for(config.working_memory)
    if template is None or config.read_only or not config.working_memory.managed_by_agent:
        return None
    compiled = config.working_memory.compiled_schema
    if compiled is not None:
        parameters: dict[str, Any] = tool_parameters(compiled.json_schema)
        description = (
            "Update the working memory with new information. Data is merged with existing memory - only "
            "include fields you want to add or update. To preserve existing data, omit the field entirely. "
            "Arrays are replaced entirely when provided, so include every item you want to keep. Set a "
            "field to null to remove it."
        )
    elif config.working_memory.version == "vnext":
        parameters = {
            "type": "object",
            "properties": {
                "newMemory": {"type": "string", "description": "The Markdown text to add to working memory, "
                              "or to put in place of searchString."},
                "searchString": {"type": "string", "description": "Exact text of working memory to replace "
                                 "(with updateReason clarify-existing-memory or replace-irrelevant-memory)."},
                "updateReason": {"type": "string", "enum": list(VNEXT_REASONS),
                                 "description": "Why working memory changes; append-new-memory by default."},
            },
        }
        description = (
            "Update the working memory with new information: add what is new, or replace an existing entry "
            "by sending the exact text to replace as searchString. Existing data not mentioned is kept."
        )
    else:
        parameters = {
            "type": "object",
            "properties": {"memory": {"type": "string", "description": "The Markdown formatted working memory "
                                      "content to store. This MUST be a string. Never pass an object."}},
            "required": ["memory"],
        }
        description = (
            "Update the working memory with new information. Any data not included will be overwritten. "
            "Always pass data as string to the memory field. Never pass an object."
        )

    if config.working_memory.state_signals:  # Mastra's wording on that path, and its tool name
        description = STATE_SIGNALS_PREAMBLE + (
            " Data is merged with existing memory — only include fields you want to add or update."
            if compiled is not None else " Pass the full updated Markdown blob as a string in the memory field.")

    async def _execute(args: Any, context: ToolContext) -> dict[str, Any]:
        return await _run_tool(core, args, context, config)

    name = SET_WORKING_MEMORY if config.working_memory.state_signals else WM_TOOL_NAME
    return Tool(name, description, parameters, _execute)


async def _run_tool(core: MemoryCore, args: Any, context: ToolContext, config: MemoryConfig) -> dict[str, Any]:
    scope = config.working_memory.scope
    thread_id, resource_id = context.thread_id, context.resource_id
    if scope == "thread" and not thread_id:
        raise ValidationError("Thread ID is required for thread-scoped working memory updates")
    if scope == "resource" and not resource_id:
        raise ValidationError("Resource ID is required for resource-scoped working memory updates")
    if thread_id:
        # The row the turn holds, from the thread's actor (the write below reads it again in its transaction).
        thread: Thread | None = await core.door.ask(thread_id, GetThread())
        if thread is None:
            thread = await ensure_thread(core, thread_id, resource_id or thread_id)
        if resource_id and thread.resource_id != resource_id:
            raise ResourceMismatch(thread_id, thread.resource_id, resource_id, message=(
                f"Thread with id {thread_id} resourceId does not match the current resourceId {resource_id}"))
    key = resource_id if scope == "resource" else thread_id
    assert key is not None
    template = template_for(config.working_memory)
    assert template is not None

    async def write(update: Update) -> str | None:
        return await write_working_memory(core.door, scope, key, update, owner=resource_id, thread_id=thread_id)

    if template.format == "markdown" and config.working_memory.version == "vnext":
        try:
            return await _vnext(args, scope, template.content, write)
        except Exception:  # the reference's vNext tool reports every failure this way
            _log.warning("working memory vNext update failed", exc_info=True)
            return {"success": False, "reason": "Tool error."}
    compiled = config.working_memory.compiled_schema
    if compiled is None:
        return await _replace_markdown(args, template.content, write)
    return await _merge_json(args, compiled, write)


async def _replace_markdown(args: Any, template: str, write: Callable[[Update], Any]) -> dict[str, Any]:
    """Template mode: the whole document, unless it would replace real data with the bare template."""
    value = args.get("memory") if isinstance(args, Mapping) else None
    if not isinstance(value, str):
        return {"error": True, "message": "Tool input validation failed for update-working-memory: "
                                          "memory must be a string"}
    skipped = False

    def _replace(old: str | None) -> str | None:
        nonlocal skipped
        empty = normalize_ws(template)
        if old and normalize_ws(value) == empty and normalize_ws(old) != empty:
            skipped = True
            return None
        return value

    await write(_replace)
    if skipped:
        return {"success": False, "message": "Attempted to replace existing working memory with empty "
                                             "template. Update skipped to prevent data loss."}
    return {"success": True}


async def _merge_json(args: Any, schema: CompiledSchema, write: Callable[[Update], Any]) -> dict[str, Any]:
    """Schema mode: only what changed, deep-merged into the stored document (a null deletes a key); the merged
    document is stored only when it validates as a whole, else nothing is written and the errors name paths."""
    payload = args.get("memory", args) if isinstance(args, Mapping) else args
    if payload is None:
        return {"success": True, "message": "No memory data provided, existing memory unchanged."}
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError as exc:
            return {"success": False, "message": f"Failed to parse working memory input as JSON: {exc}. "
                                                 f"Raw input: {payload[:500]}"}
    payload = drop_optional_nulls(payload, schema.json_schema)
    if not isinstance(payload, dict):
        return _invalid(schema.errors(payload))
    update = payload
    problems: list[str] = []

    def _merge(old: str | None) -> str | None:
        try:
            existing = json.loads(old) if old else {}
        except ValueError:
            existing = {}
        merged = deep_merge(existing, update)
        text = json.dumps(merged, separators=(",", ":"), ensure_ascii=False)
        problems[:] = schema.errors(merged, text)
        return None if problems else text

    await write(_merge)
    return _invalid(problems) if problems else {"success": True}


def _invalid(problems: list[str]) -> dict[str, Any]:
    return {"error": True, "message": f"Tool input validation failed for update-working-memory: {'; '.join(problems)}"}


async def _vnext(args: Any, scope: str, template: str, write: Callable[[Update], Any]) -> dict[str, Any]:
    """The vNext tool (reference §7.4): append, or replace ``searchString``, never rewrite the whole text."""
    values = args if isinstance(args, Mapping) else {}
    new = values.get("newMemory")
    new = new if isinstance(new, str) else ""
    search = values.get("searchString")
    search = search if isinstance(search, str) and search else None
    reason = values.get("updateReason") or "append-new-memory"
    if reason not in VNEXT_REASONS:
        return {"error": True, "message": "Tool input validation failed for update-working-memory: "
                                          f"updateReason must be one of {', '.join(VNEXT_REASONS)}"}
    if reason == "append-new-memory":
        search = None
    elif search is None:
        return {"success": False, "reason": f"updateReason was {reason} but no searchString was provided. "
                                            f'Unable to replace undefined with "{new}"'}
    if scope == "resource" and reason == "replace-irrelevant-memory":
        search = None  # resource-scoped memory is shared by threads: an append, as in the reference
    is_template = new == template or normalize_ws(new) == normalize_ws(template)
    outcome: dict[str, Any] = {}

    def _apply(old: str | None) -> str | None:
        if not old:
            if is_template:
                outcome.update(success=False, reason="try again when you have data to add. newMemory was "
                                                     "equal to the working memory template")
                return None
            outcome.update(success=True, reason="started new working memory")
            text = new
        elif search is not None and search in old:
            outcome.update(success=True, reason="found and replaced searchString with newMemory")
            text = old.replace(search, new, 1)
        elif new in old or is_template:
            outcome.update(success=False, reason="attempted to insert duplicate data into working memory. this "
                                                 "entry was skipped")
            return None
        else:
            outcome.update(success=True, reason="attempted to replace working memory string that doesn't exist. "
                           "Appending to working memory instead." if search is not None
                           else "appended newMemory to end of working memory")
            text = f"{old}\n{new}"
        return text.replace(template, "") if template else text  # the template itself is never stored

    await write(_apply)
    return outcome
