"""One agent turn as an async generator of stream events: the protocol ``generate`` and ``stream`` both run.

Order: the input checked → the thread taken (``Memory.turn``) → memory's and the agent's input processors →
``start`` → per step: the input-step processors, the model (streamed, or one ``generate`` call), the tool calls
→ the output processors (they persist the turn) → the title → ``finish``. Everything up to ``start`` runs
before the first event, so a refusal (a busy thread, a thread of another resource, bad input) is raised before
any event. The generator is driven by its consumer: nothing runs ahead of what was asked for (a slow consumer
slows the model's stream; nothing is buffered).

How a run ends:

* to its end: the output processors run shielded from cancellation (the save completes or does not start),
  ``state.result`` is set, then ``finish``;
* a ``TripWire`` anywhere: ``error`` (its reason) and ``finish`` with ``tripwire``; nothing persisted;
* an exception (a failed model is a ``ModelError``): it propagates; nothing persisted;
* closed or cancelled by the consumer (an abort) once the input processors ran: the model's stream is closed,
  then with ``save_on_abort`` the input and what the assistant produced so far are persisted (shielded) with
  ``content.metadata.aborted = true`` on the assistant message (see :meth:`StepOutput.parts` for the tool
  calls). An abort while the input processors run, or after the turn was persisted, saves nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio

from .._results import Usage
from ..codecs import Part
from ..codecs._json import new_id
from ..codecs._time import utc_now
from ..errors import TripWire, ValidationError, error_code
from ..events import (
    DATA_PART_EVENTS,
    ErrorEvent,
    FinishEvent,
    FinishStepEvent,
    StartEvent,
    StartStepEvent,
    StreamEvent,
    ThreadTitleEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
)
from ..models import ModelRequest
from ..processors import MessageList, RequestContext
from ..processors._protocol import run_input_processors, run_input_step_processors, run_output_processors
from ..processors._signals import for_model
from ..tools import Tool, ToolContext
from ..tracing import mark_error, operation_span
from ._input import RunCall, client_ids, prepare_input
from ._model import model_chunks
from ._reply import final_text, publish, stored_id
from ._results import GenerateResult, TripWireInfo
from ._step import REASONING, TEXT, StepOutput, now_ms
from ._tools import invoke

if TYPE_CHECKING:
    from ..memory import Turn
    from ._agent import Agent

__all__ = ("RunState", "run_turn")

_log = logging.getLogger("threadmind.agent")

_STARTING, _RUNNING, _FINISHING, _PERSISTED = "starting", "running", "finishing", "persisted"
_EPOCH = datetime.fromtimestamp(0, UTC)


class RunState:
    """What a run has produced so far, read by its abort path; ``result`` once it ended."""

    __slots__ = ("message_id", "parts", "phase", "response_id", "result", "started_at", "step", "text", "usage")

    def __init__(self) -> None:
        #: The id the assistant's reply is stored under (the ``start`` event's ``message_id``).
        self.message_id: str | None = None
        self.response_id = new_id()
        #: When the reply started (the ``start`` event): its ``created_at``, so that it sorts before anything the
        #: client sent after seeing it, even when it is saved later (an aborted reply, saved once the abort lands).
        self.started_at = _EPOCH
        self.parts: list[Part] = []  # the parts of the steps that ended
        self.step: StepOutput | None = None  # the step under way
        self.text = ""
        self.usage: Usage | None = None
        self.phase = _STARTING
        self.result: GenerateResult | None = None


async def run_turn(agent: Agent, call: RunCall, state: RunState, *, streaming: bool,
                   save_on_abort: bool) -> AsyncGenerator[StreamEvent, None]:
    """Run one turn of ``agent`` (see the module docstring); ``state`` is filled as it goes.

    ``streaming``: the model is streamed (``stream_model``) and a title is sent as an event when
    ``generateTitle.emitEvent`` is on; otherwise one ``generate`` call per step (``Agent.generate``).
    """
    system_inputs, conversation = prepare_input(call)
    thread_id, resource_id = call.thread_id, call.resource_id
    memory = agent.memory
    with operation_span("threadmind.agent.stream" if streaming else "threadmind.agent.generate", "chat",
                        thread_id=thread_id, resource_id=resource_id, gen_ai__agent__name=agent.name,
                        gen_ai__request__model=agent.model.model_id):
        turn_scope: AbstractAsyncContextManager[Turn | None]
        if memory is None:
            turn_scope = nullcontext(None)
        else:
            if not thread_id or not resource_id:
                # The reference has one code for both; a missing thread (a chat request without its id) is named.
                raise ValidationError(
                    f'A resourceId and a threadId must be provided when using Memory. Saw threadId "{thread_id}" '
                    f'and resourceId "{resource_id}"',
                    code="AGENT_MEMORY_MISSING_THREAD_ID" if resource_id else "AGENT_MEMORY_MISSING_RESOURCE_ID",
                )
            turn_scope = memory.turn(thread_id, resource_id, memory_options=call.memory_options,
                                     input_processors=agent.input_processors,
                                     output_processors=agent.output_processors, input_ids=client_ids(conversation))
        async with turn_scope as turn:
            message_list = MessageList(thread_id=thread_id, resource_id=resource_id)
            # System texts live in the list so processors see them (token budgets count the whole prompt).
            for system_text in (agent.instructions, *system_inputs):
                if system_text:
                    message_list.add_system(system_text)
            if conversation:
                message_list.add(conversation, "input")
            if turn is not None:
                turn.order_input(message_list)
            context = turn.context() if turn is not None else RequestContext(resource_id=resource_id)
            context.model_id = agent.model.model_id
            inputs = [*(turn.input_processors if turn is not None else ()), *agent.input_processors]
            outputs = [*agent.output_processors, *(turn.output_processors if turn is not None else ())]
            tools: dict[str, Tool] = {t.name: t for t in agent.tools}
            if turn is not None:
                tools.update(turn.tools)
            run = _Run(agent, state, message_list, context, tools, inputs, outputs, streaming)
            try:
                run.message_list = await run_input_processors(inputs, message_list, context)
                state.phase = _RUNNING
                steps = run.steps(call.max_steps)
                try:
                    async for event in steps:
                        yield event
                finally:  # closed with this generator (an abort closes the model's stream at once)
                    await steps.aclose()
                state.phase = _FINISHING
                if outputs:
                    with anyio.CancelScope(shield=True):  # the save completes or does not start
                        text = await run.finish()
                else:
                    text = await run.finish()
                state.phase = _PERSISTED
                state.result = GenerateResult(text=text, messages=run.message_list.get_response(), usage=state.usage,
                                              finish_reason=run.finish_reason)
                for event in run.data_parts():  # what the output processors wrote (background work begun)
                    yield event
                if turn is not None:
                    title = await run.title(turn, emit=streaming)
                    if title is not None:
                        yield ThreadTitleEvent.of(turn.thread.id, title)
                yield FinishEvent(finish_reason=run.finish_reason)
            except TripWire as trip:
                state.result = GenerateResult(text="", messages=[], usage=state.usage, finish_reason="tripwire",
                                              tripwire=TripWireInfo(reason=trip.reason,
                                                                    processor_id=trip.processor_id))
                if state.message_id is None:
                    yield StartEvent(message_id=state.response_id)
                yield ErrorEvent(error_text=trip.reason)
                yield FinishEvent(finish_reason="tripwire")
            except BaseException as exc:
                if not isinstance(exc, Exception):  # closed (GeneratorExit) or cancelled by the consumer
                    await run.aborted(save_on_abort)
                elif streaming and state.message_id is not None:  # its client gets an error chunk only
                    _log.error("agent %r: the run failed after its reply started (thread %s, resource %s): %s",
                               agent.name, thread_id, resource_id, error_code(exc))
                raise


class _Run:
    """The steps of one turn and how it ends (used by :func:`run_turn` only)."""

    def data_parts(self) -> list[StreamEvent]:
        """The ``data-*`` parts processors wrote since the last model call, as events (unknown kinds dropped)."""
        parts, self.context.data_parts = self.context.data_parts, []
        return [DATA_PART_EVENTS[kind](data=data) for kind, data in parts if kind in DATA_PART_EVENTS]

    __slots__ = ("agent", "context", "finish_reason", "inputs", "message_list", "outputs", "state", "streaming",
                 "tools")

    def __init__(self, agent: Agent, state: RunState, message_list: MessageList, context: RequestContext,
                 tools: dict[str, Tool], inputs: list[object], outputs: list[object], streaming: bool) -> None:
        self.agent = agent
        self.state = state
        self.message_list = message_list
        self.context = context
        self.tools = tools
        self.inputs = inputs
        self.outputs = outputs
        self.streaming = streaming
        self.finish_reason = "stop"

    @property
    def model_metadata(self) -> dict[str, Any]:
        """The reply's ``content.metadata`` naming the model that wrote it, as Mastra's ``provider`` and
        ``modelId`` (what ``activateOnProviderChange`` compares with the next turn's model)."""
        provider, slash, name = self.agent.model.model_id.partition("/")
        return {"provider": provider, "modelId": name} if slash else {"modelId": provider}

    async def steps(self, max_steps: int) -> AsyncGenerator[StreamEvent, None]:
        """``start``, then each model step with its tool calls, until the model stops calling tools, a client
        tool is called, or ``max_steps`` ran out (``finish_reason`` is then ``tool-calls``)."""
        state, agent = self.state, self.agent
        counter = [0]
        tool_context = ToolContext(thread_id=self.context.thread_id or self.message_list.thread_id,
                                   resource_id=self.context.resource_id, memory=agent.memory,
                                   memory_config=self.context.memory_config)
        for step_number in range(max_steps):
            # Before every model call (reference processInputStep): e.g. a token limit trims what tool results
            # of the previous step added.
            self.message_list = await run_input_step_processors(self.inputs, self.message_list, self.context,
                                                                step_number)
            if step_number == 0:
                state.message_id = stored_id(self.message_list, state.response_id)
                state.started_at = utc_now()
                yield StartEvent(message_id=state.message_id)
            for event in self.data_parts():
                yield event
            request = ModelRequest(system=self.message_list.get_system_messages(),
                                   messages=for_model(self.message_list.get_all()),  # signals as the model reads them
                                   tools=[t.spec for t in self.tools.values()])
            step = state.step = StepOutput(counter)
            yield StartStepEvent()
            chunks = model_chunks(agent.model, request, streaming=self.streaming)
            try:
                async for chunk in chunks:
                    if chunk.reasoning:
                        if step.open is None or step.open.kind != REASONING:
                            for event in step.switch(REASONING):
                                yield event
                        yield step.add(chunk.reasoning)
                    if chunk.text:
                        if step.open is None or step.open.kind != TEXT:
                            for event in step.switch(TEXT):
                                yield event
                        yield step.add(chunk.text)
                    if chunk.tool_input is not None:
                        for event in step.tool_input(chunk.tool_input):
                            yield event
                    if chunk.tool_call is not None:
                        for event in step.tool_call(chunk.tool_call):
                            yield event
                    if chunk.usage is not None:
                        step.usage = chunk.usage
                    if chunk.finish_reason is not None:
                        step.finish_reason = chunk.finish_reason
            finally:
                await chunks.aclose()
            step.stamp = now_ms()
            for event in step.close():
                yield event
            if step.usage is not None:
                state.usage = step.usage if state.usage is None else state.usage + step.usage
            self.finish_reason = step.finish_reason or "stop"
            calls = step.complete_calls()
            pending_client = False
            for pending in calls:
                assert pending.call is not None
                invocation, is_client = await invoke(pending.tool_call_id, pending.tool_name, pending.call.args,
                                                      self.tools, tool_context)
                pending.invocation, pending.created_at = invocation, now_ms()
                pending_client = pending_client or is_client
                if invocation.state == "result":
                    yield ToolOutputAvailableEvent(tool_call_id=pending.tool_call_id, output=invocation.result)
                elif invocation.state == "output-error":
                    yield ToolOutputErrorEvent(tool_call_id=pending.tool_call_id,
                                               error_text=invocation.error_text or "tool failed")
            # The step ends: its parts join the response (no await between, so an abort sees it once).
            produced = step.parts(self.tools)
            if produced:
                state.parts += produced
                state.text = step.text or state.text
                publish(self.message_list, state.response_id, state.started_at, state.parts, state.text,
                        self.model_metadata, continues=state.message_id != state.response_id)
            state.step = None
            yield FinishStepEvent()
            if not calls:
                return
            if pending_client:
                self.finish_reason = "tool-calls"
                return
        self.finish_reason = "tool-calls"  # max_steps ran out while the model was still calling tools

    async def finish(self) -> str:
        """The run ran to its end: the output processors (which persist the turn); returns the run's text."""
        self.context.finish_reason = self.finish_reason
        before = self.message_list.get_response()
        self.message_list = await run_output_processors(self.outputs, self.message_list, self.context)
        return final_text(before, self.message_list.get_response(), self.state.text)

    async def title(self, turn: Turn, *, emit: bool) -> str | None:
        """The work after a turn: the title generated now and returned when ``emit`` and
        ``generateTitle.emitEvent`` are on, else started in the background."""
        title = turn.config.generate_title_config
        if emit and title is not None and title.emit_event:
            return await turn.finish_with_title(self.agent.model, self.message_list)
        turn.finish(self.agent.model, self.message_list)
        return None

    async def aborted(self, save: bool) -> None:
        """The consumer stopped the run: with ``save``, persist what it produced so far (see the module
        docstring); ``state.result`` says what was kept. Shielded: the save completes or does not start."""
        state = self.state
        step = state.step
        parts = state.parts + (step.parts(self.tools, aborted=True) if step is not None else [])
        text = step.text if step is not None and step.text else state.text
        state.step = None
        if not save or state.phase != _RUNNING:
            if state.result is None:
                state.result = GenerateResult(text=text, messages=[], usage=state.usage, finish_reason="aborted")
            return
        with anyio.CancelScope(shield=True):
            if parts:
                publish(self.message_list, state.response_id, state.started_at, parts, text,
                        metadata={**self.model_metadata, "aborted": True},
                        continues=state.message_id != state.response_id)
            self.context.finish_reason = "aborted"
            try:
                self.message_list = await run_output_processors(self.outputs, self.message_list, self.context)
            except TripWire as trip:  # a guardrail still has the last word: nothing persisted
                state.result = GenerateResult(text="", messages=[], usage=state.usage, finish_reason="tripwire",
                                              tripwire=TripWireInfo(reason=trip.reason,
                                                                    processor_id=trip.processor_id))
                return
            except Exception as exc:  # the consumer is gone: nobody to raise to; the turn is left unsaved
                _log.error("agent %r: saving the aborted turn failed (thread %s, resource %s): %s", self.agent.name,
                           self.context.thread_id, self.context.resource_id, error_code(exc))
                mark_error(exc)
                state.result = GenerateResult(text=text, messages=[], usage=state.usage, finish_reason="aborted")
                return
        state.result = GenerateResult(text=text, messages=self.message_list.get_response(), usage=state.usage,
                                      finish_reason="aborted")
