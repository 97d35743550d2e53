"""Memory processors: the per-run MessageList, the processor protocol and the built-in processors."""

from __future__ import annotations

from ._history import MemoryTokenLimiter as MemoryTokenLimiter
from ._history import MessageHistory as MessageHistory
from ._input_filter import MemoryInputFilter as MemoryInputFilter
from ._message_list import MessageList as MessageList
from ._protocol import ProcessInputArgs as ProcessInputArgs
from ._protocol import ProcessInputStepArgs as ProcessInputStepArgs
from ._protocol import Processor as Processor
from ._protocol import ProcessOutputArgs as ProcessOutputArgs
from ._protocol import RequestContext as RequestContext
from ._semantic import SemanticRecall as SemanticRecall
from ._token_limiter import TokenLimiter as TokenLimiter
from ._working_memory import WorkingMemory as WorkingMemory

__all__ = (
    "MemoryInputFilter",
    "MemoryTokenLimiter",
    "MessageHistory",
    "MessageList",
    "ProcessInputArgs",
    "ProcessInputStepArgs",
    "ProcessOutputArgs",
    "Processor",
    "RequestContext",
    "SemanticRecall",
    "TokenLimiter",
    "WorkingMemory",
)
