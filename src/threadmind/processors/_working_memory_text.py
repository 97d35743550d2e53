"""Working memory: the default template, the system instructions, null-dropping and deep merge.

Reference §7. Markdown mode replaces the whole text (guarded against an empty template overwriting real
data); schema mode deep-merges a JSON object into the stored one (null deletes, arrays replace, objects merge)
and validates the result through the schema (``threadmind._working_memory_schema``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .._config import WorkingMemoryConfig
from .._results import WorkingMemoryTemplate
from .._working_memory_schema import json_schema_errors

__all__ = (
    "DEFAULT_TEMPLATE",
    "deep_merge",
    "drop_optional_nulls",
    "instruction",
    "normalize_ws",
    "readonly_instruction",
    "schema_skeleton",
    "template_for",
    "validate_schema",
)

DEFAULT_TEMPLATE = (
    "\n# User Information\n"
    "- **First Name**: \n"
    "- **Last Name**: \n"
    "- **Location**: \n"
    "- **Occupation**: \n"
    "- **Interests**: \n"
    "- **Goals**: \n"
    "- **Events**: \n"
    "- **Facts**: \n"
    "- **Projects**: \n"
)


def template_for(config: WorkingMemoryConfig) -> WorkingMemoryTemplate | None:
    """``{format, content}`` of the configured template, or None when working memory is off."""
    if not config.enabled:
        return None
    compiled = config.compiled_schema
    if compiled is not None:  # the JSON Schema the model sees, with its draft (draft-07 unless it names one)
        return WorkingMemoryTemplate(format="json", content=compiled.template)
    return WorkingMemoryTemplate(format="markdown", content=(config.template or DEFAULT_TEMPLATE).strip())


def schema_skeleton(schema: Mapping[str, Any]) -> Any:
    """The compact JSON skeleton of a schema: defaults kept, strings → "", arrays → [], numbers → 0,
    booleans → false, objects recursed (Mastra's ``generateEmptyFromSchema``)."""
    if "default" in schema:
        return json.loads(json.dumps(schema["default"]))
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {key: schema_skeleton(value) if isinstance(value, Mapping) else None for key, value in props.items()}
    if kind == "array":
        return []
    return _EMPTY.get(kind) if isinstance(kind, str) else None


_EMPTY: dict[str, Any] = {"string": "", "number": 0, "integer": 0, "boolean": False}


def instruction(template: WorkingMemoryTemplate, data: str | None, *, vnext: bool = False) -> str:
    """The tool-mode instruction the model sees (reference §7.3); ``vnext`` for the Markdown vNext tool."""
    is_json = template.format == "json"
    if vnext and not is_json:
        return _vnext_instruction(template, data)
    fmt = "JSON" if is_json else "Markdown"
    lines = [
        "WORKING_MEMORY_SYSTEM_INSTRUCTION:",
        "Store and update any conversation-relevant information by calling the updateWorkingMemory tool. "
        "If information might be referenced again - store it!",
        "",
        "Guidelines:",
        "1. Store anything that could be useful later in the conversation",
        "2. Update proactively when information changes, no matter how small",
        f"3. Use {fmt} format for all data",
        "4. Act naturally - don't mention this system to users. Even though you're storing this information "
        "that doesn't make it your primary focus. Do not ask them generally for \"information about yourself\"",
    ]
    if not is_json:
        lines += [
            "5. IMPORTANT: When calling updateWorkingMemory, the only valid parameter is the memory field. "
            "DO NOT pass an object.",
            "6. IMPORTANT: ALWAYS pass the data you want to store in the memory field as a string. "
            "DO NOT pass an object.",
            "7. IMPORTANT: Data must only be sent as a string no matter which format is used.",
            "",
            "<working_memory_template>",
            template.content,
            "</working_memory_template>",
        ]
    else:
        skeleton = schema_skeleton(json.loads(template.content))
        if skeleton:
            lines += [
                "",
                "When working with json data, the object format below represents the template:",
                json.dumps(skeleton, separators=(",", ":")),
            ]
    lines += [
        *_data_block(data),
        "Notes:",
        "- Update memory whenever referenced information changes",
        "- If you're unsure whether to store something, store it (eg if the user tells you information about "
        "themselves, call updateWorkingMemory immediately to update it)",
        "- This system is here so that you can maintain the conversation when your context window is very short. "
        "Update your working memory because you may need it to maintain the conversation without the full "
        "conversation history",
        "- Do not remove empty sections - you must include the empty sections along with the ones you're "
        "filling in",
        f"- REMEMBER: the way you update your working memory is by calling the updateWorkingMemory tool with the "
        f"entire {fmt} content. The system will store it for you. The user will not see it.",
        "- IMPORTANT: You MUST call updateWorkingMemory in every response to a prompt where you received "
        "relevant information.",
        f"- IMPORTANT: Preserve the {fmt} formatting structure above while updating the content.",
    ]
    return "\n".join(lines)


def _data_block(data: str | None) -> list[str]:
    """The stored data inside its markers (the literal ``null`` when there is none), between blank lines."""
    return ["", "<working_memory_data>", data if data else "null", "</working_memory_data>", ""]


def _vnext_instruction(template: WorkingMemoryTemplate, data: str | None) -> str:
    """The vNext variant: the model adds or corrects entries (``newMemory``, ``searchString``) instead of
    rewriting the whole document; it need not call the tool when nothing changed."""
    lines = [
        "WORKING_MEMORY_SYSTEM_INSTRUCTION:",
        "Store and update any conversation-relevant information by calling the updateWorkingMemory tool.",
        "",
        "Guidelines:",
        "1. Store anything that could be useful later in the conversation",
        "2. Update proactively when information changes, no matter how small",
        "3. Use Markdown format for all data",
        "4. Act naturally - don't mention this system to users. Even though you're storing this information "
        "that doesn't make it your primary focus. Do not ask them generally for \"information about yourself\"",
        "5. If your working memory already holds the information, there is no need to call updateWorkingMemory",
        "6. Information that seems irrelevant to the current conversation is no reason to delete it from "
        "working memory",
        "",
        "<working_memory_template>",
        template.content,
        "</working_memory_template>",
        *_data_block(data),
        "Notes:",
        "- Send only what is new as newMemory; to correct an entry, also send the exact text to replace as "
        "searchString with updateReason 'clarify-existing-memory' or 'replace-irrelevant-memory'",
        "- REMEMBER: the way you update your working memory is by calling the updateWorkingMemory tool. The "
        "system will store it for you. The user will not see it.",
    ]
    if template.content != DEFAULT_TEMPLATE.strip():
        lines.append("- Only store information if it's in the working memory template, do not store other "
                     "information unless the user asks you to remember it, as that non-template information may "
                     "be irrelevant")
    return "\n".join(lines)


def readonly_instruction(data: str | None) -> str:
    """The read-only variant: the data for context, no tool instructions."""
    return "\n".join([
        "WORKING_MEMORY_SYSTEM_INSTRUCTION (READ-ONLY):",
        "The following is your working memory - persistent information about the user and conversation "
        "collected over previous interactions. This data is provided for context to help you maintain "
        "continuity.",
        "",
        "<working_memory_data>",
        data if data else "No working memory data available.",
        "</working_memory_data>",
        "",
        "Guidelines:",
        "1. Use this information to provide personalized and contextually relevant responses",
        "2. Act naturally - don't mention this system to users. This information should inform your "
        "responses without being explicitly referenced",
        "3. This memory is read-only in the current session - you cannot update it",
        "",
        "Notes:",
        "- This system is here so that you can maintain the conversation when your context window is very short",
        "- The user will not see the working memory data directly",
    ])


_WS = re.compile(r"\s+")


def normalize_ws(text: str) -> str:
    """Whitespace runs collapsed and trimmed (the empty-template guard compares this way)."""
    return _WS.sub(" ", text).strip()


def drop_optional_nulls(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """Remove ``None`` values of properties the schema does not require (strict providers pad with nulls).

    Looks through ``anyOf``/``oneOf``/``allOf`` alternatives (``Optional[Model]`` is ``anyOf [object, null]``)
    and local ``$ref``s (resolved against ``root``, the whole schema).
    """
    root = schema if root is None else root
    schema = _deref(schema, root)
    if isinstance(value, dict):
        props, required = _object_shape(schema, root)
        if props is None:
            return value
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is None and key not in required:
                continue
            sub = props.get(key)
            out[key] = drop_optional_nulls(item, sub, root) if isinstance(sub, Mapping) else item
        return out
    if isinstance(value, list):
        items = _array_items(schema, root)
        if items is not None:
            return [drop_optional_nulls(item, items, root) for item in value]
    return value


def _deref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    for _ in range(32):  # a chain of references, never a loop
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            break
        target: Any = root
        for part in ref[2:].split("/") if len(ref) > 1 else ():
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            break
        schema = target
    return schema


def _branches(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The schema and its ``allOf``/``anyOf``/``oneOf`` alternatives, dereferenced (one level deep)."""
    out = [schema]
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, Mapping):
                out.append(_deref(sub, root))
    return out


def _object_shape(schema: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[dict[str, Any] | None, set[str]]:
    props: dict[str, Any] | None = None
    required: set[str] = set()
    for branch in _branches(schema, root):
        if isinstance(branch.get("properties"), Mapping):
            props = {**branch["properties"], **(props or {})}
            required.update(key for key in branch.get("required") or () if isinstance(key, str))
    return props, required


def _array_items(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for branch in _branches(schema, root):
        if isinstance(branch.get("items"), Mapping):
            return _deref(branch["items"], root)
    return None


def validate_schema(value: Any, schema: Mapping[str, Any], path: str = "memory") -> list[str]:
    """Errors of ``value`` against a JSON Schema, every keyword checked by ``jsonschema`` (the draft its
    ``$schema`` names, draft-07 without one), each naming its path (``memory.address.city: ...``)."""
    return json_schema_errors(value, schema, path)


def deep_merge(existing: Any, update: Any) -> dict[str, Any]:
    """Merge ``update`` into ``existing``: null deletes, arrays replace, objects merge, scalars overwrite."""
    base: dict[str, Any] = dict(existing) if isinstance(existing, dict) else {}
    out: dict[str, Any] = _copy(base)
    if not update:
        return out
    for key, value in update.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = deep_merge(out.get(key) if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
