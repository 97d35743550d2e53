"""Memory processors: the per-run MessageList, the processor protocol and the built-in processors.

The names here are what a user needs: SPEC's, the arguments a processor receives, and the built-in processors.
What ``memory`` and ``agent`` use besides (the processor runner, history windows, message hygiene, the texts of
working and observational memory) they import from the module that defines it, by a name in its ``__all__``.
"""

from __future__ import annotations

from .._public import present_as
from ._access import MemoryAccess as MemoryAccess
from ._access import TurnEmbedder as TurnEmbedder
from ._history import MemoryTokenLimiter as MemoryTokenLimiter
from ._history import MessageHistory as MessageHistory
from ._input_filter import MemoryInputFilter as MemoryInputFilter
from ._message_list import MessageList as MessageList
from ._observational import ObservationalMemory as ObservationalMemory
from ._protocol import ProcessInputArgs as ProcessInputArgs
from ._protocol import ProcessInputStepArgs as ProcessInputStepArgs
from ._protocol import Processor as Processor
from ._protocol import ProcessOutputArgs as ProcessOutputArgs
from ._protocol import RequestContext as RequestContext
from ._semantic import SemanticRecall as SemanticRecall
from ._token_limiter import TokenLimiter as TokenLimiter
from ._working_memory import WorkingMemory as WorkingMemory
from ._working_memory_state import WorkingMemoryState as WorkingMemoryState

__all__ = (
    "MemoryAccess",
    "MemoryInputFilter",
    "MemoryTokenLimiter",
    "MessageHistory",
    "MessageList",
    "ObservationalMemory",
    "ProcessInputArgs",
    "ProcessInputStepArgs",
    "ProcessOutputArgs",
    "Processor",
    "RequestContext",
    "SemanticRecall",
    "TokenLimiter",
    "TurnEmbedder",
    "WorkingMemory",
    "WorkingMemoryState",
)

present_as(globals(), __name__)
