"""``Memory`` and its options (``from threadmind.memory import Memory``).

The package: ``_facade`` (the public ``Memory``), ``_core`` (the state its parts share), ``_messages``,
``_recall``, ``_working_memory``, ``_clone``, ``_threads``, ``_titles`` (policy per concern), ``_pipeline``
(the memory processors of a run), ``_gateway`` (what those processors read and write through), ``_turn``
(the agent-turn protocol, ``Memory.turn``), ``_observational`` (the observational-memory engine),
``_validation`` (argument checks), ``_context`` (``Memory.get_context``) and ``_summarize``
(``Memory.summarize_thread``).
"""

from __future__ import annotations

from .._config import GenerateTitleConfig as GenerateTitleConfig
from .._config import IndexConfig as IndexConfig
from .._config import MemoryConfig as MemoryConfig
from .._config import MessageHistoryConfig as MessageHistoryConfig
from .._config import MessageRange as MessageRange
from .._config import ObservationalMemoryConfig as ObservationalMemoryConfig
from .._config import SemanticRecallConfig as SemanticRecallConfig
from .._config import WorkingMemoryConfig as WorkingMemoryConfig
from .._public import present_as
from .._results import SearchHit as SearchHit
from ._context import MemoryContext as MemoryContext
from ._extractors import ExtractedValue as ExtractedValue
from ._extractors import Extractor as Extractor
from ._facade import Memory as Memory
from ._observational import ObservationalMemoryEngine as ObservationalMemoryEngine
from ._summarize import ThreadSummary as ThreadSummary
from ._turn import Turn as Turn

__all__ = (
    "ExtractedValue",
    "Extractor",
    "GenerateTitleConfig",
    "IndexConfig",
    "Memory",
    "MemoryConfig",
    "MemoryContext",
    "MessageHistoryConfig",
    "MessageRange",
    "ObservationalMemoryConfig",
    "ObservationalMemoryEngine",
    "SearchHit",
    "SemanticRecallConfig",
    "ThreadSummary",
    "Turn",
    "WorkingMemoryConfig",
)

present_as(globals(), __name__)
