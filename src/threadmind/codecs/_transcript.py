"""Readable text of a message's parts, for prompts built from conversations (titles, observations)."""

from __future__ import annotations

import json
from typing import Literal

from ._types import Message, ReasoningPart, TextPart, ToolInvocationPart

__all__ = ("PartText", "part_texts")

PartText = tuple[Literal["text", "reasoning", "tool"], str]


def part_texts(message: Message, *, tool_chars: int) -> list[PartText]:
    """(kind, text) per readable part; tool calls as ``name (state): {args, result}`` cut to ``tool_chars``."""
    out: list[PartText] = []
    for part in message.content.parts:
        if isinstance(part, TextPart) and part.text.strip():
            out.append(("text", part.text))
        elif isinstance(part, ReasoningPart) and part.reasoning.strip():
            out.append(("reasoning", part.reasoning))
        elif isinstance(part, ToolInvocationPart):
            inv = part.tool_invocation
            summary = json.dumps({"args": inv.args, "result": inv.result}, default=str)[:tool_chars]
            out.append(("tool", f"{inv.tool_name} ({inv.state}): {summary}"))
    if not message.content.parts and message.content.content:
        out.append(("text", message.content.content))
    return out
