"""Running one tool call of a step: its ``ToolInvocation`` with the outcome."""

from __future__ import annotations

import json
from typing import Any

from ..codecs import ToolInvocation
from ..errors import TripWire
from ..tools import Tool, ToolContext
from ..tracing import operation_span

__all__ = ("invoke",)


async def invoke(call_id: str, name: str, args: Any, tools: dict[str, Tool],
                  context: ToolContext) -> tuple[ToolInvocation, bool]:
    """Run one tool call: its invocation with the outcome, and whether it is a client tool's (no outcome yet)."""
    tool = tools.get(name)
    if tool is None:
        return ToolInvocation(state="output-error", tool_call_id=call_id, tool_name=name, args=args,
                              error_text=f"Tool {name} not found"), False
    if tool.execute is None:
        return ToolInvocation(state="call", tool_call_id=call_id, tool_name=name, args=args), True
    with operation_span("threadmind.tool.execute", "execute_tool", gen_ai__tool__name=name):
        try:
            result = await tool.run(args, context)
        except TripWire:  # a guardrail inside a tool ends the run like any other (SPEC §4: "anywhere")
            raise
        except Exception as exc:  # a failing tool is reported to the model, not to the caller
            return ToolInvocation(state="output-error", tool_call_id=call_id, tool_name=name, args=args,
                                  error_text=f"{type(exc).__name__}: {exc}"), False
    return ToolInvocation(state="result", tool_call_id=call_id, tool_name=name, args=args,
                          result=_json_safe(result)), False


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
