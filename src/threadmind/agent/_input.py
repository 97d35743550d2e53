"""What a run is asked to do: the input checked and split into system texts and conversation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..codecs import Message
from ..codecs._json import checked_message
from ..errors import ValidationError
from ..processors._protocol import processor_id

__all__ = ("AgentInput", "ConversationItem", "RunCall", "checked_processors", "client_ids", "prepare_input")

AgentInput = str | Message | Mapping[str, Any] | Sequence[str | Message | Mapping[str, Any]]
ConversationItem = str | Message | Mapping[str, Any]


class RunCall:
    """The arguments of one ``generate``/``stream`` call, as given (checked when the run starts)."""

    __slots__ = ("input", "max_steps", "memory_options", "resource_id", "thread_id")

    def __init__(self, input: AgentInput, thread_id: str | None, resource_id: str | None,
                 memory_options: Any, max_steps: int) -> None:
        self.input = input
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.memory_options = memory_options
        self.max_steps = max_steps


def prepare_input(call: RunCall) -> tuple[list[str], list[ConversationItem]]:
    """The call checked: its system texts and its conversation (Messages proven to store).

    :raises ValidationError: a bad ``max_steps``, id, input item, or an input message of another thread or
        resource.
    """
    max_steps = call.max_steps
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValidationError("max_steps must be a positive integer")
    for field, value in (("thread_id", call.thread_id), ("resource_id", call.resource_id)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValidationError(f"`{field}` must be a non-empty string or None, got {value!r}")
    system, conversation = _split_input(call.input)
    conversation = [checked_message(item, f"input[{i}]") if isinstance(item, Message) else item
                    for i, item in enumerate(conversation)]
    _check_threads(conversation, call.thread_id, call.resource_id)
    return system, conversation


def client_ids(conversation: Sequence[ConversationItem]) -> list[str]:
    """The message ids the caller chose (a string's id, or a dict's without one, is generated in the run)."""
    ids: list[str] = []
    for item in conversation:
        if isinstance(item, Message):
            ids.append(item.id)
        elif isinstance(item, Mapping) and isinstance(item.get("id"), str):
            ids.append(item["id"])
    return ids


def _split_input(value: AgentInput) -> tuple[list[str], list[ConversationItem]]:
    items: list[ConversationItem]
    if isinstance(value, (str, Message, Mapping)):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ValidationError(f"agent input must be a string, a Message or a list of them, not {type(value).__name__}")
    system: list[str] = []
    rest: list[ConversationItem] = []
    for item in items:
        if isinstance(item, Message) and item.role == "system":
            system.append(item.text)
        elif isinstance(item, Mapping) and item.get("role") == "system":
            content = item.get("content")
            if isinstance(content, str):
                system.append(content)
            elif isinstance(content, Mapping) and isinstance(content.get("content"), str):
                system.append(content["content"])
            else:
                raise ValidationError("a system message needs string content", code="INVALID_SYSTEM_MESSAGE_FORMAT")
        elif isinstance(item, (str, Message, Mapping)):
            rest.append(item)
        else:
            raise ValidationError(f"agent input items must be strings, Messages or dicts, not {type(item).__name__}")
    return system, rest


def _check_threads(items: Sequence[ConversationItem], thread_id: str | None, resource_id: str | None) -> None:
    for i, item in enumerate(items):
        if isinstance(item, Message):
            other_thread, other_resource = item.thread_id, item.resource_id
        elif isinstance(item, Mapping):
            other_thread = item.get("threadId", item.get("thread_id"))
            other_resource = item.get("resourceId", item.get("resource_id"))
        else:
            continue
        if thread_id and other_thread and other_thread != thread_id:
            raise ValidationError(f"input[{i}] belongs to thread {other_thread!r}, not {thread_id!r}")
        if resource_id and other_resource and other_resource != resource_id:
            raise ValidationError(f"input[{i}] belongs to resource {other_resource!r}, not {resource_id!r}")


def checked_processors(value: object, field: str) -> list[object]:
    """A list of processors (duck-typed: an ``id`` and a ``process_*`` method), checked at construction."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ValidationError(f"Agent `{field}` must be a list of processors, got {type(value).__name__}")
    for processor in value:
        processor_id(processor)
    return list(value)
