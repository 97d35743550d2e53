"""Tools an agent offers its model: a name, a description, a JSON schema and (for server tools) a function.

``Tool`` and ``ToolContext`` sit below both ``memory`` (whose ``updateWorkingMemory`` is a tool) and
``agent`` (which runs tools); ``threadmind.agent`` re-exports them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from .errors import ValidationError
from .models import ToolSpec

__all__ = ("Tool", "ToolContext")


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """Passed as a second argument to ``execute`` when the function accepts one."""

    thread_id: str | None
    resource_id: str | None
    memory: Any = None
    memory_config: Any = None


class Tool:
    """A tool offered to the model. Without ``execute`` it is a client tool (the run stops at its call)."""

    __slots__ = ("_takes_context", "description", "execute", "name", "parameters")

    def __init__(
        self,
        name: str,
        description: str = "",
        parameters: Mapping[str, Any] | None = None,
        execute: Callable[..., Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("Tool `name` must be a non-empty string")
        self.name = name
        self.description = description
        self.parameters: dict[str, Any] = dict(parameters or {"type": "object", "properties": {}})
        self.execute = execute
        self._takes_context = False
        if execute is not None:
            try:
                params = [p for p in inspect.signature(execute).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                self._takes_context = len(params) >= 2
            except (TypeError, ValueError):  # builtins without a signature
                self._takes_context = False

    @property
    def spec(self) -> ToolSpec:
        """What the model sees of this tool."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    async def run(self, args: Any, context: ToolContext) -> Any:
        """Call ``execute`` (sync or async) with the arguments, and the context when it takes one."""
        assert self.execute is not None
        result = self.execute(args, context) if self._takes_context else self.execute(args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __repr__(self) -> str:
        kind = "client" if self.execute is None else "server"
        return f"Tool(name={self.name!r}, {kind})"
