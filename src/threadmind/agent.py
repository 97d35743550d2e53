"""The agent runner: memory input processors → user input processors → model/tool loop → user output
processors → memory output processors.

A ``TripWire`` anywhere ends the run with ``result.tripwire`` set and nothing persisted; a model that
raises persists nothing and raises ``ModelError``. Turns on one thread follow the memory's
``thread_concurrency`` policy (``enqueue`` by default: the second turn waits for the first to persist).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from ._results import Usage
from .codecs import (
    Message,
    MessageContent,
    Part,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    checked_message,
    new_id,
    utc_now,
)
from .errors import ModelError, ThreadmindError, TripWire, ValidationError
from .models import LanguageModel, ModelRequest, ModelResponse, resolve_model
from .processors import (
    MessageList,
    RequestContext,
    processor_id,
    run_input_processors,
    run_input_step_processors,
    run_output_processors,
)
from .tools import Tool as Tool
from .tools import ToolContext as ToolContext
from .tracing import operation_span

_log = logging.getLogger("threadmind.agent")

if TYPE_CHECKING:
    from ._config import MemoryConfig
    from .memory import Memory, Turn

__all__ = ("Agent", "GenerateResult", "Tool", "ToolContext", "TripWireInfo")

AgentInput = str | Message | Mapping[str, Any] | Sequence[str | Message | Mapping[str, Any]]


class TripWireInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run was aborted and by which processor."""

    reason: str
    processor_id: str | None = None


class GenerateResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one ``Agent.generate`` run."""

    text: str
    messages: list[Message]
    tripwire: TripWireInfo | None = None
    usage: Usage | None = None
    finish_reason: str = "stop"


def _split_input(value: AgentInput) -> tuple[list[str], list[str | Message | Mapping[str, Any]]]:
    items: list[str | Message | Mapping[str, Any]]
    if isinstance(value, (str, Message, Mapping)):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ValidationError(f"agent input must be a string, a Message or a list of them, not {type(value).__name__}")
    system: list[str] = []
    rest: list[str | Message | Mapping[str, Any]] = []
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


def _check_threads(items: Sequence[str | Message | Mapping[str, Any]], thread_id: str | None,
                   resource_id: str | None) -> None:
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


def _final_text(before: list[Message], after: list[Message], text: str) -> str:
    """The run's text; when output processors changed the response, the text of what they left."""
    if len(before) == len(after) and all(a is b for a, b in zip(before, after, strict=True)):
        return text
    last = next((m for m in reversed(after) if m.role == "assistant"), None)
    if last is None:
        return ""
    if last.content.content is not None:
        return last.content.content
    return " ".join(p.text for p in last.content.parts if isinstance(p, TextPart))


def _processors(value: object, field: str) -> list[object]:
    """A list of processors (duck-typed: an ``id`` and a ``process_*`` method), checked at construction."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ValidationError(f"Agent `{field}` must be a list of processors, got {type(value).__name__}")
    for processor in value:
        processor_id(processor)
    return list(value)


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


class Agent:
    """An agent: instructions, a model, tools, processors, and optionally memory."""

    def __init__(
        self,
        name: str,
        instructions: str,
        model: LanguageModel | str,
        *,
        memory: Memory | None = None,
        tools: Sequence[Tool] | None = None,
        input_processors: Sequence[object] = (),
        output_processors: Sequence[object] = (),
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValidationError(f"Agent `name` must be a non-empty string, got {name!r}")
        if not isinstance(instructions, str):
            raise ValidationError(f"Agent `instructions` must be a string, got {type(instructions).__name__}")
        if not isinstance(model, str) and not (isinstance(getattr(model, "model_id", None), str)
                                               and callable(getattr(model, "generate", None))):
            raise ValidationError("Agent `model` must be a LanguageModel (a `model_id` and an async `generate`) "
                                  f"or a model string such as 'openai/gpt-4o-mini', got {type(model).__name__}")
        if memory is not None:
            from .memory import Memory

            if not isinstance(memory, Memory):
                raise ValidationError(f"Agent `memory` must be a Memory, got {type(memory).__name__}")
        self.name = name
        self.instructions = instructions
        self.model: LanguageModel = resolve_model(model) if isinstance(model, str) else model
        self.memory = memory
        if tools is not None and (isinstance(tools, Mapping) or not isinstance(tools, Sequence)):
            raise ValidationError("Agent `tools` must be a list of Tool objects")
        self.tools: list[Tool] = list(tools or ())
        for tool in self.tools:
            if not isinstance(tool, Tool):
                raise ValidationError(f"Agent `tools` must contain Tool objects, not {type(tool).__name__}")
        self.input_processors = _processors(input_processors, "input_processors")
        self.output_processors = _processors(output_processors, "output_processors")

    async def generate(
        self,
        input: AgentInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        memory_options: MemoryConfig | Mapping[str, Any] | None = None,
        max_steps: int = 5,
    ) -> GenerateResult:
        """Run one turn and return the response (``messages`` are the run's response messages)."""
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValidationError("max_steps must be a positive integer")
        for field, value in (("thread_id", thread_id), ("resource_id", resource_id)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValidationError(f"`{field}` must be a non-empty string or None, got {value!r}")
        system_inputs, conversation = _split_input(input)
        conversation = [checked_message(item, f"input[{i}]") if isinstance(item, Message) else item
                        for i, item in enumerate(conversation)]
        _check_threads(conversation, thread_id, resource_id)
        memory = self.memory
        with operation_span("threadmind.agent.generate", "chat", thread_id=thread_id, resource_id=resource_id,
                            gen_ai__agent__name=self.name, gen_ai__request__model=self.model.model_id):
            if memory is None:
                return await self._run(conversation, system_inputs, None, thread_id, resource_id, max_steps)
            if not thread_id or not resource_id:
                raise ValidationError(
                    f'A resourceId and a threadId must be provided when using Memory. Saw threadId "{thread_id}" '
                    f'and resourceId "{resource_id}"',
                    code="AGENT_MEMORY_MISSING_RESOURCE_ID",
                )
            async with memory.turn(thread_id, resource_id, memory_options=memory_options,
                                   input_processors=self.input_processors,
                                   output_processors=self.output_processors) as turn:
                return await self._run(conversation, system_inputs, turn, thread_id, resource_id, max_steps)

    async def _run(
        self,
        conversation: list[str | Message | Mapping[str, Any]],
        system_inputs: list[str],
        turn: Turn | None,
        thread_id: str | None,
        resource_id: str | None,
        max_steps: int,
    ) -> GenerateResult:
        message_list = MessageList(thread_id=thread_id, resource_id=resource_id)
        # System texts live in the list so processors see them (token budgets count the whole prompt).
        for system_text in (self.instructions, *system_inputs):
            if system_text:
                message_list.add_system(system_text)
        if conversation:
            message_list.add(conversation, "input")
        context = turn.context() if turn is not None else RequestContext(resource_id=resource_id)
        memory_inputs = turn.input_processors if turn is not None else []
        memory_outputs = turn.output_processors if turn is not None else []
        tools: dict[str, Tool] = {t.name: t for t in self.tools}
        if turn is not None:
            tools.update(turn.tools)
        usage: Usage | None = None
        try:
            message_list = await run_input_processors([*memory_inputs, *self.input_processors], message_list,
                                                      context)
            text, finish_reason, usage, message_list = await self._loop(
                message_list, tools, context, self.memory, max_steps, [*memory_inputs, *self.input_processors])
            context.finish_reason = finish_reason
            before = message_list.get_response()
            message_list = await run_output_processors([*self.output_processors, *memory_outputs], message_list,
                                                       context)
            text = _final_text(before, message_list.get_response(), text)
        except TripWire as trip:
            return GenerateResult(text="", messages=[], usage=usage, finish_reason="tripwire",
                                  tripwire=TripWireInfo(reason=trip.reason, processor_id=trip.processor_id))
        response = message_list.get_response()
        if turn is not None:
            turn.finish(self.model, message_list)
        return GenerateResult(text=text, messages=response, usage=usage, finish_reason=finish_reason)

    async def _loop(
        self,
        message_list: MessageList,
        tools: dict[str, Tool],
        context: RequestContext,
        memory: Memory | None,
        max_steps: int,
        input_processors: Sequence[object],
    ) -> tuple[str, str, Usage | None, MessageList]:
        response_id = new_id()
        parts: list[Part] = []
        text = ""
        usage: Usage | None = None
        finish_reason = "stop"
        tool_context = ToolContext(thread_id=context.thread_id or message_list.thread_id,
                                   resource_id=context.resource_id, memory=memory,
                                   memory_config=context.memory_config)
        for step in range(max_steps):
            # Before every model call (reference processInputStep): e.g. a token limit trims what tool
            # results of the previous step added.
            message_list = await run_input_step_processors(input_processors, message_list, context, step)
            request = ModelRequest(
                system=message_list.get_system_messages(),
                messages=message_list.get_all(),
                tools=[t.spec for t in tools.values()],
            )
            response = await self._call_model(request)
            if response.usage is not None:
                usage = response.usage if usage is None else usage + response.usage
            finish_reason = response.finish_reason
            # Every part of the response carries its creation time (reference §4.1), each step its own. A step
            # that produced nothing adds nothing: a run whose model said nothing has no response message (so
            # an error finish then saves nothing at all, reference §3.2 step 3).
            stamp = int(time.time() * 1000)
            produced: list[Part] = []
            if response.text:
                produced.append(TextPart(text=response.text, created_at=stamp))
                text = response.text
            pending_client = False
            for call in response.tool_calls:
                invocation, is_client = await self._invoke(call.tool_call_id, call.tool_name, call.args, tools,
                                                           tool_context)
                pending_client = pending_client or is_client
                produced.append(ToolInvocationPart(tool_invocation=invocation, created_at=int(time.time() * 1000)))
            if produced:
                parts += [StepStartPart(created_at=stamp), *produced]
                self._publish(message_list, response_id, parts, text)
            if not response.tool_calls:
                break
            if pending_client:
                finish_reason = "tool-calls"
                break
        else:  # max_steps ran out while the model was still calling tools
            finish_reason = "tool-calls"
        return text, finish_reason, usage, message_list

    async def _call_model(self, request: ModelRequest) -> ModelResponse:
        with operation_span("threadmind.model.generate", "chat", gen_ai__request__model=self.model.model_id):
            try:
                response = await self.model.generate(request)
            except ThreadmindError as exc:
                if isinstance(exc, (ModelError, TripWire)):
                    raise
                raise ModelError(f"model {self.model.model_id} failed: {exc.message}") from exc
            except Exception as exc:
                raise ModelError(f"model {self.model.model_id} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(response, ModelResponse):
            raise ModelError(f"model {self.model.model_id} returned {type(response).__name__}, not ModelResponse")
        return response

    @staticmethod
    async def _invoke(
        call_id: str, name: str, args: Any, tools: dict[str, Tool], context: ToolContext
    ) -> tuple[ToolInvocation, bool]:
        tool = tools.get(name)
        if tool is None:
            return ToolInvocation(state="output-error", tool_call_id=call_id, tool_name=name, args=args,
                                  error_text=f"Tool {name} not found"), False
        if tool.execute is None:
            return ToolInvocation(state="call", tool_call_id=call_id, tool_name=name, args=args), True
        with operation_span("threadmind.tool.execute", "execute_tool", gen_ai__tool__name=name):
            try:
                result = await tool.run(args, context)
            except TripWire:  # a guardrail inside a tool ends the run like any other (SPEC §4: "anywhere")
                raise
            except Exception as exc:  # a failing tool is reported to the model, not to the caller
                return ToolInvocation(state="output-error", tool_call_id=call_id, tool_name=name, args=args,
                                      error_text=f"{type(exc).__name__}: {exc}"), False
        return ToolInvocation(state="result", tool_call_id=call_id, tool_name=name, args=args,
                              result=_json_safe(result)), False

    @staticmethod
    def _publish(message_list: MessageList, response_id: str, parts: list[Part], text: str) -> None:
        content = MessageContent(parts=list(parts), content=text or None)
        existing = message_list.get(response_id)
        if existing is not None:
            message_list.replace(msgspec.structs.replace(existing, content=content))
            return
        created = utc_now()
        newest = max((m.created_at for m in message_list.get_all()), default=None)
        if newest is not None and created <= newest:
            created = newest + timedelta(milliseconds=1)  # the response always sorts after the turn's input
        message = Message(response_id, "assistant", content, created, message_list.thread_id,
                          message_list.resource_id)
        message_list.add(message, "response")

