"""threadmind.events: every event's wire JSON is the AI SDK chunk (camelCase, no nulls), and the union decodes."""

from __future__ import annotations

import json
from typing import Any, get_args

import msgspec
import pytest
from tests.ui._scripted import ScriptedEventStream

from threadmind import events
from threadmind.events import (
    AbortEvent,
    ErrorEvent,
    EventStream,
    FinishEvent,
    FinishStepEvent,
    OMActivationEvent,
    OMBufferingStartEvent,
    OMObservationEndEvent,
    OMObservationFailedEvent,
    OMObservationStartEvent,
    OMStatusEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    StartEvent,
    StartStepEvent,
    StreamEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThreadTitleEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
)

# (event, the JSON object the ai 7 UIMessageChunk type defines for it)
WIRE: list[tuple[Any, dict[str, Any]]] = [
    (StartEvent(message_id="m-1"), {"type": "start", "messageId": "m-1"}),
    (StartEvent(), {"type": "start"}),
    (StartStepEvent(), {"type": "start-step"}),
    (TextStartEvent(id="t"), {"type": "text-start", "id": "t"}),
    (TextDeltaEvent(id="t", delta="Hel"), {"type": "text-delta", "id": "t", "delta": "Hel"}),
    (TextEndEvent(id="t"), {"type": "text-end", "id": "t"}),
    (ReasoningStartEvent(id="r"), {"type": "reasoning-start", "id": "r"}),
    (ReasoningDeltaEvent(id="r", delta="hmm"), {"type": "reasoning-delta", "id": "r", "delta": "hmm"}),
    (ReasoningEndEvent(id="r"), {"type": "reasoning-end", "id": "r"}),
    (ToolInputStartEvent(tool_call_id="c", tool_name="search"),
     {"type": "tool-input-start", "toolCallId": "c", "toolName": "search"}),
    (ToolInputDeltaEvent(tool_call_id="c", input_text_delta='{"q":'),
     {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": '{"q":'}),
    (ToolInputAvailableEvent(tool_call_id="c", tool_name="search", input={"q": "x", "n": None}),
     {"type": "tool-input-available", "toolCallId": "c", "toolName": "search", "input": {"q": "x", "n": None}}),
    (ToolInputAvailableEvent(tool_call_id="c", tool_name="ping", input=None),  # required: sent even when null
     {"type": "tool-input-available", "toolCallId": "c", "toolName": "ping", "input": None}),
    (ToolOutputAvailableEvent(tool_call_id="c", output=[1, "two"]),
     {"type": "tool-output-available", "toolCallId": "c", "output": [1, "two"]}),
    (ToolOutputErrorEvent(tool_call_id="c", error_text="boom"),
     {"type": "tool-output-error", "toolCallId": "c", "errorText": "boom"}),
    (FinishStepEvent(), {"type": "finish-step"}),
    (FinishEvent(finish_reason="tool-calls"), {"type": "finish", "finishReason": "tool-calls"}),
    (FinishEvent(), {"type": "finish", "finishReason": "stop"}),
    (ErrorEvent(error_text="nope"), {"type": "error", "errorText": "nope"}),
    (AbortEvent(reason="client went away"), {"type": "abort", "reason": "client went away"}),
    (AbortEvent(), {"type": "abort"}),
    (ThreadTitleEvent.of("th-1", "Weather in Paris"),
     {"type": "data-thread-title", "data": {"threadId": "th-1", "title": "Weather in Paris"}, "transient": True}),
    (OMStatusEvent(data={"stepNumber": 0}), {"type": "data-om-status", "data": {"stepNumber": 0}, "transient": True}),
    (OMObservationStartEvent(data={"cycleId": "c"}),
     {"type": "data-om-observation-start", "data": {"cycleId": "c"}, "transient": True}),
    (OMObservationEndEvent(data={"cycleId": "c", "observations": "* x"}),
     {"type": "data-om-observation-end", "data": {"cycleId": "c", "observations": "* x"}, "transient": True}),
    (OMObservationFailedEvent(data={"cycleId": "c", "error": "down"}),
     {"type": "data-om-observation-failed", "data": {"cycleId": "c", "error": "down"}, "transient": True}),
    (OMActivationEvent(data={"tokensBefore": 120}),
     {"type": "data-om-activation", "data": {"tokensBefore": 120}, "transient": True}),
    (OMBufferingStartEvent(data={"cycleId": "buffer-obs-1"}),
     {"type": "data-om-buffering-start", "data": {"cycleId": "buffer-obs-1"}, "transient": True}),
]


def _ids(case: tuple[Any, dict[str, Any]]) -> str:
    return json.dumps(case[1])[:60]


class TestWire:
    @pytest.mark.parametrize("case", WIRE, ids=[_ids(c) for c in WIRE])
    def test_encodes_as_the_ai_sdk_chunk(self, case: tuple[Any, dict[str, Any]]) -> None:
        event, expected = case
        assert json.loads(msgspec.json.encode(event)) == expected
        assert event.type == expected["type"]

    @pytest.mark.parametrize("case", WIRE, ids=[_ids(c) for c in WIRE])
    def test_the_union_decodes_the_chunk_back(self, case: tuple[Any, dict[str, Any]]) -> None:
        event, expected = case
        assert msgspec.json.decode(json.dumps(expected), type=StreamEvent) == event

    def test_every_event_class_is_in_the_union_and_covered_here(self) -> None:
        members = set(get_args(StreamEvent))
        assert members == {type(event) for event, _ in WIRE}
        exported = {getattr(events, name) for name in events.__all__
                    if name.endswith("Event") and name != "StreamEvent"}
        assert exported == members

    def test_attributes_are_snake_case_and_frozen(self) -> None:
        event = ToolInputDeltaEvent(tool_call_id="c", input_text_delta="{")
        assert (event.tool_call_id, event.input_text_delta) == ("c", "{")
        with pytest.raises(AttributeError):
            event.tool_call_id = "d"  # type: ignore[misc]


class TestThreadTitle:
    def test_of_builds_the_data_part_and_reads_back(self) -> None:
        event = ThreadTitleEvent.of("th-1", "Trip plans")
        assert event.data == {"threadId": "th-1", "title": "Trip plans"}
        assert event.transient is True
        assert (event.thread_id, event.title) == ("th-1", "Trip plans")

    def test_missing_data_fields_read_as_none(self) -> None:
        event = ThreadTitleEvent(data={})
        assert (event.thread_id, event.title) == (None, None)


class TestEventStreamProtocol:
    def test_a_context_manager_that_iterates_events_is_one(self) -> None:
        assert isinstance(ScriptedEventStream([]), EventStream)

    @pytest.mark.parametrize("value", [[], "text", object()], ids=["list", "str", "object"])
    def test_plain_iterables_and_objects_are_not(self, value: object) -> None:
        assert not isinstance(value, EventStream)

    def test_an_async_generator_alone_is_not(self) -> None:
        async def gen() -> Any:
            yield StartEvent()

        agen = gen()
        assert not isinstance(agen, EventStream)
