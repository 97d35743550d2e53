"""Working memory: the default template, the system instructions, schema validation and deep merge.

Reference §7. Markdown mode replaces the whole text (guarded against an empty template overwriting real
data); schema mode validates a JSON object against the schema and deep-merges it (null deletes, arrays
replace, objects merge).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .._config import WorkingMemoryConfig
from .._results import WorkingMemoryTemplate

__all__ = (
    "DEFAULT_TEMPLATE",
    "deep_merge",
    "drop_optional_nulls",
    "instruction",
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
    if config.schema is not None:
        schema = dict(config.schema)
        schema.setdefault("$schema", "http://json-schema.org/draft-07/schema#")
        return WorkingMemoryTemplate(format="json", content=json.dumps(schema, separators=(",", ":")))
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


def drop_optional_nulls(value: Any, schema: Mapping[str, Any]) -> Any:
    """Remove ``None`` values of properties the schema does not require (strict providers pad with nulls)."""
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        required = set(schema.get("required") or ())
        props: Mapping[str, Any] = schema["properties"]
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is None and key not in required:
                continue
            sub = props.get(key)
            out[key] = drop_optional_nulls(item, sub) if isinstance(sub, Mapping) else item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [drop_optional_nulls(item, schema["items"]) for item in value]
    return value


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def validate_schema(value: Any, schema: Mapping[str, Any], path: str = "memory") -> list[str]:
    """Errors of ``value`` against a JSON Schema subset (type, properties, required, items, enum)."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = False
        for name in kinds:
            types = _TYPES.get(str(name))
            if types is None:
                ok = True
                break
            if isinstance(value, types) and not (name in ("integer", "number") and isinstance(value, bool)):
                ok = True
                break
        if not ok:
            return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                errors.append(f"{path}.{key}: is required")
        for key, item in value.items():
            sub = props.get(key)
            if isinstance(sub, Mapping):
                if item is None:
                    continue  # null deletes a key during merge
                errors.extend(validate_schema(item, sub, f"{path}.{key}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}.{key}: is not allowed")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            errors.extend(validate_schema(item, schema["items"], f"{path}[{i}]"))
    return errors


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
