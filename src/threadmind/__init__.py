"""threadmind: durable, fast, correct conversational memory for AI agents.

Layout: ``codecs`` (msgspec message records and Mastra JSON), ``stores`` (SQLite, in-memory, hnswlib),
``actors`` (mailboxes; one actor per thread, per resource, per index), ``processors`` (the agent memory
pipeline), ``embedders``, ``models``, ``agent``, ``tokens``, ``tracing`` and ``errors``. The names below
are the public surface of the top-level package.
"""

from __future__ import annotations

from ._config import GenerateTitleConfig as GenerateTitleConfig
from ._config import IndexConfig as IndexConfig
from ._config import MemoryConfig as MemoryConfig
from ._config import MessageHistoryConfig as MessageHistoryConfig
from ._config import MessageRange as MessageRange
from ._config import ObservationalMemoryConfig as ObservationalMemoryConfig
from ._config import SemanticRecallConfig as SemanticRecallConfig
from ._config import WorkingMemoryConfig as WorkingMemoryConfig
from ._results import CloneResult as CloneResult
from ._results import RecallResult as RecallResult
from ._results import SaveResult as SaveResult
from ._results import Usage as Usage
from ._results import WorkingMemoryTemplate as WorkingMemoryTemplate
from .agent import Agent as Agent
from .codecs import FilePart as FilePart
from .codecs import Message as Message
from .codecs import MessageContent as MessageContent
from .codecs import Part as Part
from .codecs import ReasoningPart as ReasoningPart
from .codecs import Resource as Resource
from .codecs import SourcePart as SourcePart
from .codecs import StepStartPart as StepStartPart
from .codecs import TextPart as TextPart
from .codecs import Thread as Thread
from .codecs import ToolInvocation as ToolInvocation
from .codecs import ToolInvocationPart as ToolInvocationPart
from .codecs import UnknownPart as UnknownPart
from .codecs import decode_message as decode_message
from .codecs import encode_json as encode_json
from .codecs import message_from_dict as message_from_dict
from .codecs import message_to_dict as message_to_dict
from .errors import ConfigError as ConfigError
from .errors import EmbedderError as EmbedderError
from .errors import EmbeddingDimensionMismatch as EmbeddingDimensionMismatch
from .errors import InvalidMessage as InvalidMessage
from .errors import LeaseLost as LeaseLost
from .errors import ModelError as ModelError
from .errors import ResourceMismatch as ResourceMismatch
from .errors import StorageError as StorageError
from .errors import ThreadBusy as ThreadBusy
from .errors import ThreadmindError as ThreadmindError
from .errors import ThreadNotFound as ThreadNotFound
from .errors import TripWire as TripWire
from .errors import ValidationError as ValidationError
from .memory import Memory as Memory
from .stores import InMemoryStore as InMemoryStore
from .stores import SQLiteStore as SQLiteStore
from .stores import ThreadPage as ThreadPage

__version__ = "0.1.0"

# The errors are importable from here too (``from threadmind import ValidationError``), and so are the pieces of the
# quick start (``from threadmind import Agent, Memory, SQLiteStore``); ``__all__`` lists SPEC's top-level names, the
# error tree is ``threadmind.errors``'s, ``Agent`` is ``threadmind.agent``'s and the stores ``threadmind.stores``'.

__all__ = (
    "CloneResult",
    "FilePart",
    "GenerateTitleConfig",
    "IndexConfig",
    "Memory",
    "MemoryConfig",
    "Message",
    "MessageContent",
    "MessageHistoryConfig",
    "MessageRange",
    "ObservationalMemoryConfig",
    "Part",
    "ReasoningPart",
    "RecallResult",
    "Resource",
    "SaveResult",
    "SemanticRecallConfig",
    "SourcePart",
    "StepStartPart",
    "TextPart",
    "Thread",
    "ThreadPage",
    "ToolInvocation",
    "ToolInvocationPart",
    "UnknownPart",
    "Usage",
    "WorkingMemoryConfig",
    "WorkingMemoryTemplate",
    "decode_message",
    "encode_json",
    "message_from_dict",
    "message_to_dict",
)
