"""msgspec records for messages, threads and resources, and their Mastra-compatible JSON codecs."""

from __future__ import annotations

from .._public import present_as
from ._json import decode_message as decode_message
from ._json import decode_messages as decode_messages
from ._json import encode_json as encode_json
from ._json import message_from_dict as message_from_dict
from ._json import message_to_dict as message_to_dict
from ._json import resource_to_dict as resource_to_dict
from ._json import thread_to_dict as thread_to_dict
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
    "decode_message",
    "decode_messages",
    "encode_json",
    "message_from_dict",
    "message_to_dict",
    "resource_to_dict",
    "thread_to_dict",
)

present_as(globals(), __name__)
