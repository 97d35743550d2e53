"""Agent.stream: the events of a run, its result (what generate returns), memory and processors as in generate,
refusals raised on entering, backpressure, the title event and tracing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests._factories import RESOURCE, THREAD, by_id, open_memory, stored, texts, tool_states

from threadmind import Message
from threadmind.agent import Agent, AgentStream, GenerateResult, StreamEvent, Tool
from threadmind.codecs import ReasoningPart, StepStartPart, TextPart, ToolInvocationPart
from threadmind.errors import ResourceMismatch, ThreadBusy, ValidationError
from threadmind.events import (
    ErrorEvent,
    FinishEvent,
    StartEvent,
    TextDeltaEvent,
    ThreadTitleEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
)
from threadmind.models import ModelChunk, ModelResponse, ScriptedModel, ToolCall, ToolInputDelta

from ._streaming import Endless, Paced, collect, streamed_text, types


def _shape(result: GenerateResult) -> Any:
    """A result without ids and times: what must be equal between generate and stream."""
    return (result.text, result.finish_reason, result.tripwire, result.usage,
            [(m.role, m.content.content, [(type(p).__name__, getattr(p, "text", None)) for p in m.content.parts])
             for m in result.messages])


class TestEvents:
    async def test_a_text_reply_streams_one_word_per_delta(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel(["Hello big  world"]), memory=memory)
            stream = agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE)
            assert isinstance(stream, AgentStream)
            events = await collect(stream)
            assert types(events) == ["start", "start-step", "text-start", "text-delta", "text-delta", "text-delta",
                                     "text-end", "finish-step", "finish"]
            assert [e.delta for e in events if isinstance(e, TextDeltaEvent)] == ["Hello", " big", "  world"]
            assert events[-1] == FinishEvent(finish_reason="stop")
            result = await stream.result()
            assert result.text == "Hello big  world"
            assert texts(await stored(memory)) == ["hi", "Hello big  world"]

    async def test_the_result_is_what_generate_returns(self, tmp_path: Path) -> None:
        script = [ModelResponse(text="Adding.", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})]),
                  ModelResponse(text="It is 3.", finish_reason="stop")]
        add = Tool("add", "adds", {"type": "object"}, lambda args: args["a"] + args["b"])
        async with open_memory(tmp_path) as memory:
            generated = await Agent("a", "i", ScriptedModel(script), memory=memory, tools=[add]).generate(
                "1+2?", thread_id="t-generate", resource_id=RESOURCE)
            stream = Agent("a", "i", ScriptedModel(script), memory=memory, tools=[add]).stream(
                "1+2?", thread_id="t-stream", resource_id=RESOURCE)
            await collect(stream)
            streamed = await stream.result()
            assert _shape(streamed) == _shape(generated)
            assert [(m.role, m.text) for m in await stored(memory, "t-stream")] == [
                (m.role, m.text) for m in await stored(memory, "t-generate")]

    async def test_start_names_the_id_the_reply_is_stored_under(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel(["ok"]), memory=memory).stream(
                "hi", thread_id=THREAD, resource_id=RESOURCE)
            events = await collect(stream)
            start = events[0]
            assert isinstance(start, StartEvent) and start.message_id
            (reply,) = (await stream.result()).messages
            assert reply.id == start.message_id
            assert by_id(await stored(memory), start.message_id).text == "ok"

    async def test_server_tools_report_their_outputs_and_errors(self, tmp_path: Path) -> None:
        def broken(args: Any) -> None:
            raise RuntimeError("no network")

        calls = [ToolCall("c1", "add", {"a": 2, "b": 2}), ToolCall("c2", "broken", {}), ToolCall("c3", "missing", {})]
        model = ScriptedModel([ModelResponse(tool_calls=calls), "done"])
        tools = [Tool("add", "", None, lambda args: args["a"] + args["b"]), Tool("broken", "", None, broken)]
        async with open_memory(tmp_path) as memory:
            events = await collect(Agent("a", "i", model, memory=memory, tools=tools).stream(
                "go", thread_id=THREAD, resource_id=RESOURCE))
        assert types(events) == [
            "start", "start-step", "tool-input-available", "tool-input-available", "tool-input-available",
            "tool-output-available", "tool-output-error", "tool-output-error", "finish-step",
            "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"]
        assert events[2] == ToolInputAvailableEvent(tool_call_id="c1", tool_name="add", input={"a": 2, "b": 2})
        assert events[5] == ToolOutputAvailableEvent(tool_call_id="c1", output=4)
        assert events[6] == ToolOutputErrorEvent(tool_call_id="c2", error_text="RuntimeError: no network")
        assert events[7] == ToolOutputErrorEvent(tool_call_id="c3", error_text="Tool missing not found")

    async def test_streamed_tool_arguments_become_tool_input_deltas(self, tmp_path: Path) -> None:
        call = ToolCall("c1", "lookup", {"q": "paris"})
        paced = Paced([ModelChunk(tool_input=ToolInputDelta("c1", "lookup", "")),
                       ModelChunk(tool_input=ToolInputDelta("c1", "lookup", '{"q":')),
                       ModelChunk(tool_input=ToolInputDelta("c1", "lookup", '"paris"}')),
                       ModelChunk(tool_call=call)])
        paced.gate.set()
        model = ScriptedModel([paced.stream(), "found"])
        tool = Tool("lookup", "", None, lambda args: {"hits": 1})
        events = await collect(Agent("a", "i", model, tools=[tool]).stream("find"))
        assert events[2:6] == [ToolInputStartEvent(tool_call_id="c1", tool_name="lookup"),
                               ToolInputDeltaEvent(tool_call_id="c1", input_text_delta='{"q":'),
                               ToolInputDeltaEvent(tool_call_id="c1", input_text_delta='"paris"}'),
                               ToolInputAvailableEvent(tool_call_id="c1", tool_name="lookup", input={"q": "paris"})]
        assert events[6] == ToolOutputAvailableEvent(tool_call_id="c1", output={"hits": 1})

    async def test_reasoning_streams_before_the_text_and_is_stored(self, tmp_path: Path) -> None:
        model = ScriptedModel([ModelResponse(text="Yes.", reasoning="The user asks.")])
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", model, memory=memory).stream("really?", thread_id=THREAD, resource_id=RESOURCE)
            events = await collect(stream)
            assert types(events)[2:9] == ["reasoning-start", "reasoning-delta", "reasoning-delta", "reasoning-delta",
                                          "reasoning-end", "text-start", "text-delta"]
            reply = (await stored(memory))[-1]
        assert [type(p) for p in reply.content.parts] == [StepStartPart, ReasoningPart, TextPart]
        reasoning = reply.content.parts[1]
        assert isinstance(reasoning, ReasoningPart) and reasoning.reasoning == "The user asks."

    async def test_without_memory(self) -> None:
        stream = Agent("a", "i", ScriptedModel(["plain"])).stream("hi")
        assert streamed_text(await collect(stream)) == "plain"
        assert (await stream.result()).text == "plain"

    async def test_iterating_without_entering_and_result_without_iterating(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel(["one", "two"]), memory=memory)
            events = [e async for e in agent.stream("a", thread_id=THREAD, resource_id=RESOURCE)]
            assert streamed_text(events) == "one"
            result = await agent.stream("b", thread_id=THREAD, resource_id=RESOURCE).result()
            assert result.text == "two"
            assert texts(await stored(memory)) == ["a", "one", "b", "two"]


class TestClientTools:
    async def test_a_client_tool_finishes_with_tool_calls_and_its_outcome_continues_the_message(
            self, tmp_path: Path) -> None:
        model = ScriptedModel([ModelResponse(text="Let me ask.", tool_calls=[ToolCall("c1", "confirm", {"n": 5})]),
                               "Confirmed."])
        agent_tools = [Tool("confirm", "ask the user", {"type": "object"})]
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", model, memory=memory, tools=agent_tools)
            first = agent.stream("pay 5", thread_id=THREAD, resource_id=RESOURCE)
            events = await collect(first)
            assert events[-1] == FinishEvent(finish_reason="tool-calls")
            assert ToolInputAvailableEvent(tool_call_id="c1", tool_name="confirm", input={"n": 5}) in events
            assert not any(isinstance(e, (ToolOutputAvailableEvent, ToolOutputErrorEvent)) for e in events)
            (pending,) = (await first.result()).messages
            assert tool_states(by_id(await stored(memory), pending.id)) == {"c1": "call"}

            answered = _with_outcome(pending, "c1", {"ok": True})
            second = agent.stream(answered, thread_id=THREAD, resource_id=RESOURCE)
            events = await collect(second)
            start = events[0]
            assert isinstance(start, StartEvent) and start.message_id == pending.id  # the client continues it
            rows = await stored(memory)
        assert [m.role for m in rows] == ["user", "assistant"]
        assert tool_states(rows[1]) == {"c1": "result"}
        assert rows[1].id == pending.id and "Confirmed." in [p.text for p in rows[1].content.parts
                                                           if isinstance(p, TextPart)]


def _with_outcome(message: Message, call_id: str, result: Any) -> Message:
    parts = []
    for part in message.content.parts:
        if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
            invocation = msgspec.structs.replace(part.tool_invocation, state="result", result=result)
            part = msgspec.structs.replace(part, tool_invocation=invocation)
        parts.append(part)
    return msgspec.structs.replace(message, content=msgspec.structs.replace(message.content, parts=parts))


class _Recorder:
    """An input and output processor noting when it ran, into the same log the consumer writes events to."""

    id = "recorder"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def process_input(self, args: Any) -> None:
        self.log.append("input processors")

    async def process_output_result(self, args: Any) -> None:
        self.log.append("output processors")


class _Trip:
    def __init__(self, where: str) -> None:
        self.id = f"trip-{where}"
        self.where = where

    async def process_input(self, args: Any) -> None:
        if self.where == "input":
            args.abort("Blocked: rude words")

    async def process_output_result(self, args: Any) -> None:
        if self.where == "output":
            args.abort("Blocked: secret")


class TestProcessors:
    async def test_input_processors_run_on_entering_and_output_processors_before_finish(
            self, tmp_path: Path) -> None:
        log: list[str] = []
        async with open_memory(tmp_path) as memory:
            recorder = _Recorder(log)
            agent = Agent("a", "i", ScriptedModel(["ok"]), memory=memory, input_processors=[recorder],
                          output_processors=[recorder])
            async with agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE) as stream:
                log.append("entered")
                async for event in stream:
                    log.append(event.type)
                    if isinstance(event, FinishEvent):
                        assert texts(await stored(memory)) == ["hi", "ok"]  # persisted before finish
        assert log == ["input processors", "entered", "start", "start-step", "text-start", "text-delta", "text-end",
                       "finish-step", "output processors", "finish"]

    @pytest.mark.parametrize("where", ["input", "output"])
    async def test_a_tripwire_is_an_error_then_finish_and_nothing_is_persisted(self, tmp_path: Path,
                                                                               where: str) -> None:
        async with open_memory(tmp_path) as memory:
            trip = _Trip(where)
            agent = Agent("a", "i", ScriptedModel(["a secret"]), memory=memory, input_processors=[trip],
                          output_processors=[trip])
            stream = agent.stream("hello", thread_id=THREAD, resource_id=RESOURCE)
            events = await collect(stream)
            reason = "Blocked: rude words" if where == "input" else "Blocked: secret"
            assert events[0].type == "start"
            assert events[-2:] == [ErrorEvent(error_text=reason), FinishEvent(finish_reason="tripwire")]
            result = await stream.result()
            assert result.finish_reason == "tripwire" and result.tripwire is not None
            assert (result.tripwire.reason, result.tripwire.processor_id) == (reason, trip.id)
            assert await stored(memory) == []


class TestRefusals:
    async def test_refusals_are_raised_on_entering_not_by_the_call(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([]), memory=memory)
            await memory.create_thread(thread_id="theirs", resource_id="someone-else")
            cases: list[tuple[AgentStream, type[Exception]]] = [
                (agent.stream("hi", thread_id="theirs", resource_id=RESOURCE), ResourceMismatch),
                (agent.stream("hi", thread_id=THREAD), ValidationError),
                (agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE, max_steps=0), ValidationError),
                (agent.stream(42, thread_id=THREAD, resource_id=RESOURCE), ValidationError),  # type: ignore[arg-type]
            ]
            for stream, error in cases:
                with pytest.raises(error):
                    async with stream:
                        pytest.fail("entered")
            assert await memory.get_thread_by_id(THREAD) is None
            assert await stored(memory, "theirs", "someone-else") == []

    async def test_reject_raises_thread_busy_while_a_stream_holds_the_thread(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path, {"threadConcurrency": "reject"}) as memory:
            agent = Agent("a", "i", ScriptedModel(["first", "third"]), memory=memory)
            refused: list[BaseException] = []

            async def second() -> None:  # another request: another task
                try:
                    async with agent.stream("two", thread_id=THREAD, resource_id=RESOURCE):
                        pytest.fail("entered")
                except ThreadBusy as exc:
                    refused.append(exc)

            async with agent.stream("one", thread_id=THREAD, resource_id=RESOURCE) as holding:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(second)
                assert len(refused) == 1
                assert streamed_text([e async for e in holding]) == "first"
            assert (await agent.stream("three", thread_id=THREAD, resource_id=RESOURCE).result()).text == "third"

    async def test_enqueue_waits_for_the_stream_before_it(self, tmp_path: Path) -> None:
        model = ScriptedModel(["first", "second"])
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", model, memory=memory)
            second_entered = anyio.Event()

            async def second() -> None:
                async with agent.stream("two", thread_id=THREAD, resource_id=RESOURCE) as stream:
                    second_entered.set()
                    await stream.result()

            with anyio.fail_after(10):
                async with agent.stream("one", thread_id=THREAD, resource_id=RESOURCE) as first:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(second)
                        await anyio.wait_all_tasks_blocked()
                        assert not second_entered.is_set()
                        assert streamed_text([e async for e in first]) == "first"
                        await second_entered.wait()
            assert texts(model.requests[1].messages) == ["one", "first", "two"]


class TestBackpressure:
    async def test_the_model_is_read_only_as_fast_as_the_consumer_reads(self, tmp_path: Path) -> None:
        endless = Endless()
        agent = Agent("a", "i", ScriptedModel([endless.stream()]))
        async with agent.stream("talk") as stream:
            deltas = 0
            async for event in stream:
                if isinstance(event, TextDeltaEvent):
                    deltas += 1
                    assert endless.taken <= deltas  # nothing read ahead of the consumer
                    if deltas == 50:
                        break
        assert endless.closed and endless.taken <= 50

    async def test_a_consumer_that_waits_holds_the_model_stream(self) -> None:
        endless = Endless()
        agent = Agent("a", "i", ScriptedModel([endless.stream()]))
        async with agent.stream("talk") as stream:
            async for event in stream:
                if isinstance(event, TextDeltaEvent):
                    break
            taken = endless.taken
            await anyio.wait_all_tasks_blocked()
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            assert endless.taken == taken


class TestTitle:
    async def test_emit_event_sends_the_title_before_finish(self, tmp_path: Path) -> None:
        titler = ScriptedModel(["Paying five"])
        options = {"generateTitle": {"model": titler, "emitEvent": True}}
        async with open_memory(tmp_path, options) as memory:
            agent = Agent("a", "i", ScriptedModel(["ok"]), memory=memory)
            async with agent.stream("pay 5", thread_id=THREAD, resource_id=RESOURCE) as stream:
                events: list[StreamEvent] = []
                async for event in stream:
                    events.append(event)
                    if isinstance(event, ThreadTitleEvent):
                        thread = await memory.get_thread_by_id(THREAD)
                        assert thread is not None and thread.title == "Paying five"
            assert events[-2:] == [ThreadTitleEvent.of(THREAD, "Paying five"), FinishEvent(finish_reason="stop")]

    async def test_without_emit_event_the_title_comes_in_the_background(self, tmp_path: Path) -> None:
        options = {"generateTitle": {"model": ScriptedModel(["Quiet title"])}}
        async with open_memory(tmp_path, options) as memory:
            agent = Agent("a", "i", ScriptedModel(["ok"]), memory=memory)
            events = await collect(agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE))
            assert not any(isinstance(e, ThreadTitleEvent) for e in events)
        async with open_memory(tmp_path) as memory:
            thread = await memory.get_thread_by_id(THREAD)
            assert thread is not None and thread.title == "Quiet title"


class TestTracing:
    async def test_the_callers_span_is_the_parent_of_the_whole_run(self, tmp_path: Path,
                                                                    span_exporter: InMemorySpanExporter) -> None:
        titler = ScriptedModel(["Traced title"])
        tracer = trace.get_tracer("test")
        async with open_memory(tmp_path, {"generateTitle": {"model": titler, "emitEvent": True}}) as memory:
            agent = Agent("traced", "i", ScriptedModel(["a b c"]), memory=memory)
            with tracer.start_as_current_span("caller") as caller:
                stream = agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE)
            # entered and iterated outside the caller's span, with the consumer's own span around each event
            with tracer.start_as_current_span("consumer") as consumer:
                async with stream:
                    async for _ in stream:
                        assert trace.get_current_span() is consumer  # the run's context does not leak out
                        with tracer.start_as_current_span("per-event"):
                            pass
            spans = span_exporter.get_finished_spans()  # the run's (closing the memory writes on its own)
        by_id = {s.context.span_id: s for s in spans}
        (run,) = [s for s in spans if s.name == "threadmind.agent.stream"]
        assert run.parent is not None and run.parent.span_id == caller.get_span_context().span_id

        def under_run(span: Any) -> bool:
            while span.parent is not None:
                if span.parent.span_id == run.context.span_id:
                    return True
                span = by_id.get(span.parent.span_id)
                if span is None:
                    return False
            return False

        def background(span: Any) -> bool:  # the memory's own start-up work (the keyword index catch-up)
            while span is not None:
                if span.name == "threadmind.memory.keyword_catch_up":
                    return True
                span = by_id.get(span.parent.span_id) if span.parent is not None else None
            return False

        ours = [s for s in spans if s.name.startswith("threadmind.") and s is not run and not background(s)]
        names = {s.name for s in ours}
        assert {"threadmind.model.stream", "threadmind.memory.save_messages", "threadmind.memory.generate_title",
                "threadmind.memory.set_title"} <= names  # the model, the save, the title (its model and its write)
        shared = [s for s in ours if s.name == "threadmind.store.group_commit"]  # shared work: linked, not nested
        assert [s.name for s in ours if s not in shared and not under_run(s)] == []
        for commit in shared:
            assert any(under_run(by_id[link.context.span_id]) for link in commit.links if link.context.span_id in by_id)
        for span in spans:
            if span.name == "per-event":
                assert span.parent is not None and span.parent.span_id == consumer.get_span_context().span_id
