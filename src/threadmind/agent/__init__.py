"""The agent runner: memory input processors → user input processors → model/tool loop → user output
processors → memory output processors.

``Agent.generate`` returns a ``GenerateResult``; ``Agent.stream`` returns an ``AgentStream`` of
``StreamEvent`` s (the AI SDK UI message stream chunks, see :mod:`threadmind.events`) whose ``result()`` is the
same ``GenerateResult``. Both run one protocol. A ``TripWire`` anywhere ends the run with ``result.tripwire``
set and nothing persisted; a model that raises persists nothing and raises ``ModelError``. Turns on one thread
follow the memory's ``thread_concurrency`` policy (``enqueue`` by default: the second turn waits for the first
to persist).
"""

from __future__ import annotations

from .._public import present_as
from ..events import StreamEvent as StreamEvent
from ..tools import Tool as Tool
from ..tools import ToolContext as ToolContext
from ._agent import Agent as Agent
from ._input import AgentInput as AgentInput
from ._results import GenerateResult as GenerateResult
from ._results import TripWireInfo as TripWireInfo
from ._step import ABORTED_TOOL_TEXT as ABORTED_TOOL_TEXT
from ._stream import AgentStream as AgentStream

__all__ = (
    "ABORTED_TOOL_TEXT",
    "Agent",
    "AgentInput",
    "AgentStream",
    "GenerateResult",
    "StreamEvent",
    "Tool",
    "ToolContext",
    "TripWireInfo",
)

present_as(globals(), __name__)
