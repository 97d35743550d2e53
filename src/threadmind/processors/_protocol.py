"""The processor protocol, the per-run request context, and the runner that applies processors in order.

A processor is any object with an ``id`` and at least one of ``async process_input(args)``,
``async process_input_step(args)`` and ``async process_output_result(args)`` (duck typing, as in the
reference's guardrail examples). ``process_input`` runs once before the model/tool loop;
``process_input_step`` before every model call of the loop (``args.step_number`` 0, 1, ...; step 0 right
after ``process_input``), as the reference's ``processInputStep`` does, so a step can trim what tool
results added. A method returns None (the list was changed in place, or not at all), a list of messages
(the new messages of that phase), or the ``MessageList``. ``args.abort(reason)`` raises
:class:`~threadmind.errors.TripWire`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NoReturn, Protocol, runtime_checkable

from .._config import MemoryConfig
from ..codecs import Message, Thread
from ..errors import TripWire, ValidationError
from ._access import TurnEmbedder
from ._message_list import MessageList

__all__ = (
    "ProcessInputArgs",
    "ProcessInputStepArgs",
    "ProcessOutputArgs",
    "Processor",
    "RequestContext",
    "processor_id",
    "run_input_processors",
    "run_input_step_processors",
    "run_output_processors",
)


@runtime_checkable
class Processor(Protocol):
    """Anything with an ``id``; it may also have ``name``, ``process_input`` and ``process_output_result``."""

    @property
    def id(self) -> str:
        """A stable identifier (memory processors de-duplicate by it)."""
        ...


class RequestContext:
    """What memory processors know about the run: the thread, the resource and the effective options.

    ``persisted`` is None until the run's messages are saved, then what was stored. Embedding the turn is the
    save's own work (:meth:`embed_with_save`): a turn is saved with semantic recall on through the pipeline of
    ``Memory.save_messages`` (see ``IndexActor.upsert_on_commit`` for when its vectors are searchable).
    """

    __slots__ = ("data_parts", "embed_with", "finish_reason", "mark_pending", "memory_config",
                 "model_id", "persisted", "resource_id", "run_state", "thread")

    def __init__(
        self,
        *,
        thread: Thread | None = None,
        resource_id: str | None = None,
        memory_config: MemoryConfig | None = None,
    ) -> None:
        self.thread = thread
        self.resource_id = resource_id if resource_id is not None else (thread.resource_id if thread else None)
        self.memory_config = memory_config or MemoryConfig()
        self.run_state: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.persisted: list[Message] | None = None
        #: Whether the turn's save also marks its messages as awaiting vectors (semantic recall embeds them).
        self.mark_pending = False
        #: What embeds the turn's messages as the save commits (set by :meth:`embed_with_save`), or None.
        self.embed_with: TurnEmbedder | None = None
        #: Transient ``data-*`` parts written for the stream's consumer, not yet sent (the run drains them).
        self.data_parts: list[tuple[str, dict[str, Any]]] = []
        #: The agent's model (its ``model_id``), when an agent runs the turn.
        self.model_id: str | None = None

    def write_data(self, kind: str, data: Mapping[str, Any]) -> None:
        """Send a transient ``data-*`` part (``kind``, e.g. ``data-om-status``) to the stream's consumer before
        the next model call (Mastra's ``writer.custom``); ``generate`` has no consumer and drops it."""
        self.data_parts.append((kind, dict(data)))

    def embed_with_save(self, embedder: TurnEmbedder) -> None:
        """(the ``semantic-recall`` processor, before the turn is persisted) Have the turn's save embed its messages
        while it commits and mark them as awaiting vectors in its transaction."""
        self.embed_with = embedder
        self.mark_pending = True

    @property
    def thread_id(self) -> str | None:
        """The thread id, when the run has a thread."""
        return self.thread.id if self.thread is not None else None


class _Args:
    __slots__ = ("context", "message_list", "messages", "processor_id")

    def __init__(self, messages: list[Message], message_list: MessageList, context: RequestContext,
                 processor_id: str) -> None:
        self.messages = messages
        self.message_list = message_list
        self.context = context
        self.processor_id = processor_id

    def ids(self) -> tuple[str | None, str | None]:
        """The run's thread and resource ids (request context first, then the list's own)."""
        return (self.context.thread_id or self.message_list.thread_id,
                self.context.resource_id or self.message_list.resource_id)

    def abort(self, reason: str = "Aborted by processor") -> NoReturn:
        """Stop the run: nothing is persisted and ``result.tripwire.reason`` is ``reason``."""
        raise TripWire(reason, processor_id=self.processor_id)


class ProcessInputArgs(_Args):
    """Arguments of ``process_input``: the conversation so far (``messages``) and the list itself."""

    __slots__ = ()


class ProcessInputStepArgs(ProcessInputArgs):
    """Arguments of ``process_input_step``: as ``process_input``'s, plus which model call comes next."""

    __slots__ = ("step_number",)

    def __init__(self, messages: list[Message], message_list: MessageList, context: RequestContext,
                 processor_id: str, step_number: int) -> None:
        super().__init__(messages, message_list, context, processor_id)
        self.step_number = step_number


class ProcessOutputArgs(_Args):
    """Arguments of ``process_output_result``: ``messages`` are the run's response messages."""

    __slots__ = ()


def processor_id(processor: object) -> str:
    """The processor's id, validated."""
    value = getattr(processor, "id", None)
    if not isinstance(value, str) or not value:
        raise ValidationError(f"processor {processor!r} needs a non-empty string `id`")
    return value


def _apply_result(result: object, message_list: MessageList, phase_ids: set[str], source: str) -> MessageList:
    if result is None:
        return message_list
    if isinstance(result, MessageList):
        return result
    if isinstance(result, Sequence) and not isinstance(result, (str, bytes)):
        keep: list[Message] = []
        for item in result:
            if not isinstance(item, Message):
                raise ValidationError(f"a processor returned {type(item).__name__} in its message list")
            keep.append(item)
        kept_ids = {m.id for m in keep}
        message_list.remove_by_ids([i for i in phase_ids if i not in kept_ids])
        for message in keep:
            if message.id in message_list:
                if message_list.get(message.id) != message:
                    message_list.replace(message)
            else:
                message_list.add(message, source, merge=False)  # type: ignore[arg-type]
        return message_list
    raise ValidationError(f"a processor must return None, a list of messages or the MessageList, "
                          f"not {type(result).__name__}")


async def _run(
    processors: Sequence[object], message_list: MessageList, context: RequestContext, phase: Literal["input", "output"]
) -> MessageList:
    method_name = "process_input" if phase == "input" else "process_output_result"
    args_type = ProcessInputArgs if phase == "input" else ProcessOutputArgs
    for processor in processors:
        method = getattr(processor, method_name, None)
        if method is None:
            continue
        pid = processor_id(processor)
        # input processors see the conversation; output processors the run's response messages
        messages = message_list.get_all() if phase == "input" else message_list.get_response()
        result = await method(args_type(messages, message_list, context, pid))
        message_list = _apply_result(result, message_list, {m.id for m in messages},
                                     "input" if phase == "input" else "response")
    return message_list


async def run_input_processors(
    processors: Sequence[object], message_list: MessageList, context: RequestContext
) -> MessageList:
    """Run ``process_input`` of each processor in order; a TripWire propagates."""
    return await _run(processors, message_list, context, "input")


async def run_input_step_processors(
    processors: Sequence[object], message_list: MessageList, context: RequestContext, step_number: int
) -> MessageList:
    """Run ``process_input_step`` of each processor that has one, before model call ``step_number``."""
    for processor in processors:
        method = getattr(processor, "process_input_step", None)
        if method is None:
            continue
        pid = processor_id(processor)
        messages = message_list.get_all()
        result = await method(ProcessInputStepArgs(messages, message_list, context, pid, step_number))
        message_list = _apply_result(result, message_list, {m.id for m in messages}, "input")
    return message_list


async def run_output_processors(
    processors: Sequence[object], message_list: MessageList, context: RequestContext
) -> MessageList:
    """Run ``process_output_result`` of each processor in order; a TripWire propagates."""
    return await _run(processors, message_list, context, "output")
