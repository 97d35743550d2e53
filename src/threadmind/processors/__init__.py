"""Memory processors: the per-run MessageList, the processor protocol and the built-in processors.

The public names are SPEC's; the rest of this ``__init__`` is what ``memory`` and ``agent`` use of the
package (the processors' access protocol, history windows, message hygiene, the texts of working and
observational memory, the processor runner), so no other package imports this package's modules directly.
"""

from __future__ import annotations

from ._access import AccessBase as AccessBase
from ._access import MemoryAccess as MemoryAccess
from ._access import MessageReader as MessageReader
from ._access import StoreAccess as StoreAccess
from ._access import as_access as as_access
from ._history import MemoryTokenLimiter as MemoryTokenLimiter
from ._history import MessageHistory as MessageHistory
from ._history import persist_turn as persist_turn
from ._hygiene import WM_TOOL_NAME as WM_TOOL_NAME
from ._hygiene import is_transient_signal as is_transient_signal
from ._hygiene import persistable as persistable
from ._input_filter import MemoryInputFilter as MemoryInputFilter
from ._merge import has_client_outcome as has_client_outcome
from ._merge import is_system_reminder as is_system_reminder
from ._merge import should_merge as should_merge
from ._message_list import MessageList as MessageList
from ._observation_groups import message_range as message_range
from ._observation_groups import reconcile_after_reflection as reconcile_after_reflection
from ._observation_groups import render_groups as render_groups
from ._observation_groups import wrap_in_group as wrap_in_group
from ._observation_text import CONTINUATION_ID as CONTINUATION_ID
from ._observation_text import CONTINUATION_REMINDER as CONTINUATION_REMINDER
from ._observation_text import OBSERVATIONS_PREAMBLE as OBSERVATIONS_PREAMBLE
from ._observation_text import OBSERVER_CORE as OBSERVER_CORE
from ._observation_text import OBSERVER_INSTRUCTIONS as OBSERVER_INSTRUCTIONS
from ._observation_text import REFLECTOR_INSTRUCTIONS as REFLECTOR_INSTRUCTIONS
from ._observation_text import THREAD_TITLE_INSTRUCTIONS as THREAD_TITLE_INSTRUCTIONS
from ._observation_text import ObservationEngine as ObservationEngine
from ._observation_text import block_after_tokens as block_after_tokens
from ._observation_text import date_header as date_header
from ._observation_text import observations_system_message as observations_system_message
from ._observation_text import observer_attachments as observer_attachments
from ._observation_text import observer_transcript as observer_transcript
from ._observation_text import sealed_updates as sealed_updates
from ._observation_text import split_observer_output as split_observer_output
from ._observational import ObservationalMemory as ObservationalMemory
from ._om_triggers import chunks_to_activate as chunks_to_activate
from ._protocol import AfterPersist as AfterPersist
from ._protocol import ProcessInputArgs as ProcessInputArgs
from ._protocol import ProcessInputStepArgs as ProcessInputStepArgs
from ._protocol import Processor as Processor
from ._protocol import ProcessOutputArgs as ProcessOutputArgs
from ._protocol import RequestContext as RequestContext
from ._protocol import processor_id as processor_id
from ._protocol import run_input_processors as run_input_processors
from ._protocol import run_input_step_processors as run_input_step_processors
from ._protocol import run_output_processors as run_output_processors
from ._semantic import RecallIndex as RecallIndex
from ._semantic import SemanticRecall as SemanticRecall
from ._semantic import render_remembered as render_remembered
from ._signals import for_model as for_model
from ._token_limiter import TokenLimiter as TokenLimiter
from ._token_window import BOUNDARY_KEY as BOUNDARY_KEY
from ._token_window import Boundary as Boundary
from ._token_window import load_token_window as load_token_window
from ._working_memory import WorkingMemory as WorkingMemory
from ._working_memory_state import WORKING_MEMORY_STATE_ID as WORKING_MEMORY_STATE_ID
from ._working_memory_state import WorkingMemoryState as WorkingMemoryState
from ._working_memory_text import deep_merge as deep_merge
from ._working_memory_text import drop_optional_nulls as drop_optional_nulls
from ._working_memory_text import instruction as instruction
from ._working_memory_text import normalize_ws as normalize_ws
from ._working_memory_text import readonly_instruction as readonly_instruction
from ._working_memory_text import template_for as template_for
from ._working_memory_text import validate_schema as validate_schema

__all__ = (
    "BOUNDARY_KEY",
    "CONTINUATION_ID",
    "CONTINUATION_REMINDER",
    "OBSERVATIONS_PREAMBLE",
    "OBSERVER_CORE",
    "OBSERVER_INSTRUCTIONS",
    "REFLECTOR_INSTRUCTIONS",
    "THREAD_TITLE_INSTRUCTIONS",
    "WM_TOOL_NAME",
    "WORKING_MEMORY_STATE_ID",
    "AccessBase",
    "AfterPersist",
    "Boundary",
    "MemoryAccess",
    "MemoryInputFilter",
    "MemoryTokenLimiter",
    "MessageHistory",
    "MessageList",
    "MessageReader",
    "ObservationEngine",
    "ObservationalMemory",
    "ProcessInputArgs",
    "ProcessInputStepArgs",
    "ProcessOutputArgs",
    "Processor",
    "RecallIndex",
    "RequestContext",
    "SemanticRecall",
    "StoreAccess",
    "TokenLimiter",
    "WorkingMemory",
    "WorkingMemoryState",
    "as_access",
    "block_after_tokens",
    "chunks_to_activate",
    "date_header",
    "deep_merge",
    "drop_optional_nulls",
    "for_model",
    "has_client_outcome",
    "instruction",
    "is_system_reminder",
    "is_transient_signal",
    "load_token_window",
    "message_range",
    "normalize_ws",
    "observations_system_message",
    "observer_attachments",
    "observer_transcript",
    "persist_turn",
    "persistable",
    "processor_id",
    "readonly_instruction",
    "reconcile_after_reflection",
    "render_groups",
    "render_remembered",
    "run_input_processors",
    "run_input_step_processors",
    "run_output_processors",
    "sealed_updates",
    "should_merge",
    "split_observer_output",
    "template_for",
    "validate_schema",
    "wrap_in_group",
)
