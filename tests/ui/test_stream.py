"""ui_message_stream: SSE framing, finish-reason mapping, [DONE], errors mid-stream, early close stops the source."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from threadmind.errors import ModelError, ThreadBusy
from threadmind.events import (
    AbortEvent,
    ErrorEvent,
    FinishEvent,
    FinishStepEvent,
    StartEvent,
    StartStepEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThreadTitleEvent,
)
from threadmind.ui import UI_MESSAGE_STREAM_HEADERS, ui_finish_reason, ui_message_stream

from ._scripted import ScriptedEventStream, Step

DONE = b"data: [DONE]\n\n"
HELLO: list[Step] = [
    StartEvent(message_id="m-1"), StartStepEvent(), TextStartEvent(id="t"), TextDeltaEvent(id="t", delta="Hello"),
    TextDeltaEvent(id="t", delta=" world"), TextEndEvent(id="t"), FinishStepEvent(), FinishEvent(finish_reason="stop"),
]


async def collect(stream: ScriptedEventStream) -> list[bytes]:
    return [chunk async for chunk in ui_message_stream(stream)]


def decode(frames: list[bytes]) -> list[dict[str, Any]]:
    """The JSON chunks of SSE frames, checking the framing on the way."""
    assert frames[-1] == DONE
    chunks = []
    for frame in frames[:-1]:
        assert frame.startswith(b"data: ") and frame.endswith(b"\n\n") and frame.count(b"\n") == 2, frame
        chunks.append(json.loads(frame[6:]))
    return chunks


def test_headers_are_those_of_create_ui_message_stream_response() -> None:
    # ai 7.0.173 src/ui-message-stream/ui-message-stream-headers.ts
    assert dict(UI_MESSAGE_STREAM_HEADERS) == {
        "content-type": "text/event-stream",
        "cache-control": "no-cache",
        "connection": "keep-alive",
        "x-vercel-ai-ui-message-stream": "v1",
        "x-accel-buffering": "no",
    }
    with pytest.raises(TypeError):
        UI_MESSAGE_STREAM_HEADERS["x-extra"] = "1"  # type: ignore[index]


class TestFinishReason:
    @pytest.mark.parametrize(("agent", "wire"), [
        ("stop", "stop"), ("length", "length"), ("content-filter", "content-filter"), ("tool-calls", "tool-calls"),
        ("error", "error"), ("interrupted", "interrupted"), ("other", "other"),
        ("tripwire", "other"), ("aborted", "other"),
        ("tool_calls", "tool-calls"), ("function_call", "tool-calls"), ("content_filter", "content-filter"),
        ("max_tokens", "length"), ("end_turn", "stop"), ("something-new", "other"), (None, "other"),
    ])
    def test_maps_onto_the_ai_sdk_values(self, agent: str | None, wire: str) -> None:
        assert ui_finish_reason(agent) == wire

    @pytest.mark.parametrize("reason", ["tripwire", "aborted", "tool_calls", "stop"])
    async def test_the_finish_chunk_carries_the_mapped_reason(self, reason: str) -> None:
        chunks = decode(await collect(ScriptedEventStream([StartEvent(), FinishEvent(finish_reason=reason)])))
        assert chunks[-1] == {"type": "finish", "finishReason": ui_finish_reason(reason)}


class TestNormalRun:
    async def test_one_frame_per_event_then_done(self) -> None:
        source = ScriptedEventStream(HELLO)
        chunks = decode(await collect(source))
        assert [c["type"] for c in chunks] == [
            "start", "start-step", "text-start", "text-delta", "text-delta", "text-end", "finish-step", "finish",
        ]
        assert chunks[0] == {"type": "start", "messageId": "m-1"}
        assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Hello world"
        assert source.entered and source.exited.is_set() and source.exit_type is None
        assert not source.iterator_closed  # ran to its end: nothing to close

    async def test_a_tripwire_is_the_agents_error_chunk_then_finish_other(self) -> None:
        script: list[Step] = [StartEvent(message_id="m"), ErrorEvent(error_text="blocked: rude words"),
                              FinishEvent(finish_reason="tripwire")]
        chunks = decode(await collect(ScriptedEventStream(script)))
        assert chunks == [{"type": "start", "messageId": "m"}, {"type": "error", "errorText": "blocked: rude words"},
                          {"type": "finish", "finishReason": "other"}]

    async def test_the_title_data_part_and_abort_pass_through(self) -> None:
        script: list[Step] = [StartEvent(), ThreadTitleEvent.of("th", "Title"), AbortEvent(reason="stopped")]
        chunks = decode(await collect(ScriptedEventStream(script)))
        assert chunks[1:] == [
            {"type": "data-thread-title", "data": {"threadId": "th", "title": "Title"}, "transient": True},
            {"type": "abort", "reason": "stopped"},
        ]

    async def test_an_empty_stream_is_just_done(self) -> None:
        assert await collect(ScriptedEventStream([])) == [DONE]


class TestErrors:
    async def test_an_error_mid_stream_becomes_an_error_chunk_and_a_clean_finish(self) -> None:
        source = ScriptedEventStream([*HELLO[:4], ModelError("the model connection dropped")])
        chunks = decode(await collect(source))
        assert chunks[-2:] == [{"type": "error", "errorText": "the model connection dropped"},
                               {"type": "finish", "finishReason": "error"}]
        assert [c["type"] for c in chunks[:4]] == ["start", "start-step", "text-start", "text-delta"]
        assert source.exit_type is ModelError
        assert "Traceback" not in json.dumps(chunks)

    async def test_an_error_after_finish_is_reported_without_a_second_finish(self) -> None:
        class FailsOnExit(ScriptedEventStream):
            async def __aexit__(self, *exc: Any) -> None:
                await super().__aexit__(*exc)
                raise RuntimeError("could not save the reply")

        chunks = decode(await collect(FailsOnExit(HELLO)))
        assert chunks[-2:] == [{"type": "finish", "finishReason": "stop"},
                               {"type": "error", "errorText": "could not save the reply"}]

    async def test_a_refusal_while_entering_propagates_before_any_byte(self) -> None:
        source = ScriptedEventStream(HELLO, fail_on_enter=ThreadBusy("th-1"))
        body = ui_message_stream(source)
        with pytest.raises(ThreadBusy):
            await body.__anext__()
        assert not source.entered

    async def test_a_task_groups_single_failure_reports_the_failure_itself(self) -> None:
        group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("bad tool arguments")])
        chunks = decode(await collect(ScriptedEventStream([StartEvent(), group])))
        assert chunks[1] == {"type": "error", "errorText": "bad tool arguments"}

    async def test_an_error_without_text_is_named_by_its_type(self) -> None:
        chunks = decode(await collect(ScriptedEventStream([StartEvent(), KeyError()])))
        assert chunks[1] == {"type": "error", "errorText": "KeyError"}

    async def test_something_that_is_not_an_event_is_an_error(self) -> None:
        chunks = decode(await collect(ScriptedEventStream([StartEvent(), {"type": "text-delta"}])))  # type: ignore[list-item]
        assert chunks[1]["type"] == "error" and "dict" in chunks[1]["errorText"]

    async def test_a_non_stream_is_a_type_error(self) -> None:
        with pytest.raises(TypeError, match="event stream"):
            await ui_message_stream([StartEvent()]).__anext__()  # type: ignore[arg-type]


class TestConsumerStops:
    async def test_closing_the_body_early_closes_the_source(self) -> None:
        never = anyio.Event()
        source = ScriptedEventStream([*HELLO[:4], never, *HELLO[4:]])
        async with aclosing(ui_message_stream(source)) as body:
            first = [await body.__anext__(), await body.__anext__()]
        assert json.loads(first[0][6:])["type"] == "start"
        assert source.exited.is_set() and source.exit_type is GeneratorExit
        assert source.iterator_closed

    async def test_a_cancelled_consumer_cancels_the_waiting_source(self) -> None:
        never = anyio.Event()
        source = ScriptedEventStream([StartEvent(), never, FinishEvent()])
        received: list[bytes] = []

        async def consume() -> None:
            async for chunk in ui_message_stream(source):
                received.append(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await source.waiting.wait()
            tg.cancel_scope.cancel()
        assert source.exit_type is not None and issubclass(source.exit_type, anyio.get_cancelled_exc_class())
        assert len(received) == 1  # the start chunk; no error chunk, no [DONE] for a consumer that left
