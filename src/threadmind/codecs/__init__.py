"""msgspec records for messages, threads and resources, and their Mastra-compatible JSON codecs."""

from __future__ import annotations

from ._json import checked_message as checked_message
from ._json import content_from_text as content_from_text
from ._json import decode_content as decode_content
from ._json import decode_message as decode_message
from ._json import decode_messages as decode_messages
from ._json import encode_content as encode_content
from ._json import encode_json as encode_json
from ._json import message_from_dict as message_from_dict
from ._json import message_to_dict as message_to_dict
from ._json import new_id as new_id
from ._json import part_from_dict as part_from_dict
from ._json import resource_to_dict as resource_to_dict
from ._json import thread_to_dict as thread_to_dict
from ._jsonb import decode_jsonb as decode_jsonb
from ._paths import DECODE_ERRORS as DECODE_ERRORS
from ._time import from_epoch_ms as from_epoch_ms
from ._time import from_iso as from_iso
from ._time import to_epoch_ms as to_epoch_ms
from ._time import to_iso as to_iso
from ._time import to_utc_ms as to_utc_ms
from ._time import utc_now as utc_now
from ._transcript import part_texts as part_texts
from ._types import FilePart as FilePart
from ._types import Message as Message
from ._types import MessageContent as MessageContent
from ._types import Part as Part
from ._types import ReasoningPart as ReasoningPart
from ._types import Resource as Resource
from ._types import Role as Role
from ._types import SourcePart as SourcePart
from ._types import StepStartPart as StepStartPart
from ._types import TextPart as TextPart
from ._types import Thread as Thread
from ._types import ToolInvocation as ToolInvocation
from ._types import ToolInvocationPart as ToolInvocationPart
from ._types import ToolState as ToolState
from ._types import UnknownPart as UnknownPart

__all__ = (
    "DECODE_ERRORS",
    "FilePart",
    "Message",
    "MessageContent",
    "Part",
    "ReasoningPart",
    "Resource",
    "Role",
    "SourcePart",
    "StepStartPart",
    "TextPart",
    "Thread",
    "ToolInvocation",
    "ToolInvocationPart",
    "ToolState",
    "UnknownPart",
    "content_from_text",
    "decode_content",
    "decode_jsonb",
    "decode_message",
    "decode_messages",
    "encode_content",
    "encode_json",
    "from_epoch_ms",
    "from_iso",
    "message_from_dict",
    "message_to_dict",
    "new_id",
    "part_from_dict",
    "part_texts",
    "resource_to_dict",
    "thread_to_dict",
    "to_epoch_ms",
    "to_iso",
    "to_utc_ms",
    "utc_now",
)
