"""The AI SDK's own client code against a threadmind UI message stream server.

``js/chat_client.mjs`` drives the ``ai`` package's headless chat (``AbstractChat`` with ``DefaultChatTransport``,
what ``useChat`` runs in a browser) against ``_app.create_chat_app`` served by uvicorn on 127.0.0.1, with a scripted
event source standing in for ``Agent.stream``. ``js/read_stream.mjs`` parses raw stream bytes with the package's
``parseJsonEventStream`` + ``uiMessageChunkSchema`` (the transport's own validation) and ``readUIMessageStream``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind.codecs import ToolInvocationPart
from threadmind.events import (
    AbortEvent,
    DataPart,
    ErrorEvent,
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
from threadmind.ui import messages_from_ui, messages_to_ui, ui_message_stream

from ._app import ChatAppState, ChatRequest, create_chat_app, serve
from ._node import AI_VERSION, node_binary
from ._scripted import ScriptedEventStream, Step

pytestmark = pytest.mark.timeout(600)  # a cold `npm ci`; warm runs take a few seconds

CHAT_ID = "chat-1"
WEATHER_QUESTION = "What's the weather in Paris?"


# What observational memory streams before a model call (shapes as the OM processor writes them).
OM_PARTS: list[DataPart] = [
    OMActivationEvent(data={"operationType": "observation", "tokensBefore": 240, "threadId": CHAT_ID,
                            "triggeredBy": "threshold"}),
    OMStatusEvent(data={"windows": {"active": {"messages": {"tokens": 48, "threshold": 200}},
                                    "buffered": {"observations": {"chunks": 1, "status": "complete"}}},
                        "threadId": CHAT_ID, "stepNumber": 0, "generationCount": 0}),
    OMBufferingStartEvent(data={"cycleId": "buffer-obs-1", "operationType": "observation", "tokensToBuffer": 60,
                                "threadId": CHAT_ID, "threadIds": [CHAT_ID]}),
]


def _weather_reply() -> list[Step]:
    """Reasoning, text, a server tool with streamed input and its output, then a client tool's call."""
    return [
        StartEvent(message_id="asst-1"), *OM_PARTS, StartStepEvent(),
        ReasoningStartEvent(id="r1"), ReasoningDeltaEvent(id="r1", delta="The user wants "),
        ReasoningDeltaEvent(id="r1", delta="the weather."), ReasoningEndEvent(id="r1"),
        TextStartEvent(id="t1"), TextDeltaEvent(id="t1", delta="Let me "), TextDeltaEvent(id="t1", delta="check."),
        TextEndEvent(id="t1"),
        ToolInputStartEvent(tool_call_id="call-w", tool_name="weather"),
        ToolInputDeltaEvent(tool_call_id="call-w", input_text_delta='{"city":'),
        ToolInputDeltaEvent(tool_call_id="call-w", input_text_delta='"Paris"}'),
        ToolInputAvailableEvent(tool_call_id="call-w", tool_name="weather", input={"city": "Paris"}),
        ToolOutputAvailableEvent(tool_call_id="call-w", output={"tempC": 21}),
        FinishStepEvent(), StartStepEvent(),
        TextStartEvent(id="t2"), TextDeltaEvent(id="t2", delta="It is 21°C."), TextEndEvent(id="t2"),
        ToolInputAvailableEvent(tool_call_id="call-c", tool_name="confirm", input={"question": "Book a table?"}),
        FinishStepEvent(),
        ThreadTitleEvent.of(CHAT_ID, "Weather in Paris"),
        FinishEvent(finish_reason="tool-calls"),
    ]


def _continuation() -> list[Step]:
    """After the client tool's result: the same assistant message continues."""
    return [StartEvent(message_id="asst-1"), StartStepEvent(), TextStartEvent(id="t3"),
            TextDeltaEvent(id="t3", delta="Booked."), TextEndEvent(id="t3"), FinishStepEvent(),
            FinishEvent(finish_reason="stop")]


class Scenario:
    """The event source of each request, chosen from what the client sent."""

    def __init__(self) -> None:
        self.slow_reply = anyio.Event()  # never set: the model is still thinking when the client stops
        self.slow: ScriptedEventStream | None = None

    def __call__(self, request: ChatRequest) -> ScriptedEventStream:
        if request.messages[-1].role == "assistant":
            return ScriptedEventStream(_continuation())
        text = request.last_user_text
        if text == WEATHER_QUESTION:
            return ScriptedEventStream(_weather_reply())
        if text == "trip":
            return ScriptedEventStream([StartEvent(message_id="asst-2"), ErrorEvent(error_text="Blocked: rude words"),
                                        FinishEvent(finish_reason="tripwire")])
        if text == "boom":
            return ScriptedEventStream([StartEvent(message_id="asst-3"), StartStepEvent(), TextStartEvent(id="t4"),
                                        TextDeltaEvent(id="t4", delta="Partial"),
                                        RuntimeError("model connection dropped")])
        assert text == "slow", text
        self.slow = ScriptedEventStream([StartEvent(message_id="asst-4"), StartStepEvent(), TextStartEvent(id="t5"),
                                         TextDeltaEvent(id="t5", delta="Thinking"), self.slow_reply,
                                         FinishEvent()])
        return self.slow


@dataclass
class Conversation:
    client: dict[str, Any]  # what chat_client.mjs printed
    server: ChatAppState
    slow: ScriptedEventStream


async def _run_conversation(folder: Path) -> Conversation:
    scenario = Scenario()
    app = create_chat_app(scenario, history=lambda: app.state.chat.requests[-1].messages)
    async with serve(app) as url:
        plan = {
            "api": f"{url}/api/chat", "history": f"{url}/api/history",
            "clientTools": {"confirm": {"answer": "yes"}},
            "steps": [{"send": WEATHER_QUESTION}, {"send": "trip"}, {"send": "boom"},
                      {"send": "slow", "stopOnText": "Thinking"}],
        }
        done = await anyio.run_process([node_binary(), "chat_client.mjs", json.dumps(plan)], cwd=folder,
                                       check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert scenario.slow is not None
        with anyio.fail_after(10):
            await scenario.slow.exited.wait()  # the stopped client's run is closed while the server still runs
    return Conversation(json.loads(done.stdout), app.state.chat, scenario.slow)


@pytest.fixture(scope="module")
def conversation(ai_client: Path) -> Conversation:
    return anyio.run(_run_conversation, ai_client, backend_options={"debug": True})


def _message(messages: list[dict[str, Any]], message_id: str) -> dict[str, Any]:
    (found,) = [m for m in messages if m["id"] == message_id]
    return found


class TestTheClientSees:
    def test_the_reply_text_reasoning_and_tool_parts(self, conversation: Conversation) -> None:
        reply = _message(conversation.client["messages"], "asst-1")
        assert reply["role"] == "assistant"
        parts = reply["parts"]
        assert [p["type"] for p in parts] == ["step-start", "reasoning", "text", "tool-weather", "step-start", "text",
                                              "tool-confirm", "step-start", "text"]
        assert parts[1] == {"type": "reasoning", "id": "r1", "text": "The user wants the weather.", "state": "done"}
        assert [p["text"] for p in parts if p["type"] == "text"] == ["Let me check.", "It is 21°C.", "Booked."]
        assert parts[3] == {"type": "tool-weather", "toolCallId": "call-w", "state": "output-available",
                            "input": {"city": "Paris"}, "output": {"tempC": 21}}

    def test_the_client_tools_call_and_the_output_it_added(self, conversation: Conversation) -> None:
        calls = conversation.client["toolCalls"]
        assert {"toolName": "confirm", "toolCallId": "call-c", "input": {"question": "Book a table?"}} in calls
        confirm = _message(conversation.client["messages"], "asst-1")["parts"][6]
        assert confirm == {"type": "tool-confirm", "toolCallId": "call-c", "state": "output-available",
                           "input": {"question": "Book a table?"}, "output": {"answer": "yes"}}

    def test_finish_reasons_as_the_client_reports_them(self, conversation: Conversation) -> None:
        finishes = [(f["messageId"], f["finishReason"], f["isError"], f["isAbort"])
                    for f in conversation.client["finishes"]]
        assert finishes == [("asst-1", "tool-calls", False, False), ("asst-1", "stop", False, False),
                            ("asst-2", None, True, False), ("asst-3", None, True, False),
                            ("asst-4", None, False, True)]

    def test_memory_parts_and_the_title_arrive_as_transient_data_parts(self, conversation: Conversation) -> None:
        """Observational memory's parts and the title reach ``onData`` as sent, and never the message."""
        om = [{"type": event.type, "data": event.data, "transient": True} for event in OM_PARTS]
        assert conversation.client["data"] == [
            *om, {"type": "data-thread-title", "data": {"threadId": CHAT_ID, "title": "Weather in Paris"},
                  "transient": True}]
        for message in conversation.client["messages"]:
            assert not any(p["type"].startswith("data-") for p in message["parts"])

    def test_a_tripwire_and_a_mid_stream_failure_are_errors_with_their_text(self, conversation: Conversation) -> None:
        assert conversation.client["errors"] == ["Blocked: rude words", "model connection dropped"]
        steps = {step["send"]: step for step in conversation.client["steps"]}
        assert (steps["trip"]["status"], steps["trip"]["error"]) == ("error", "Blocked: rude words")
        assert (steps["boom"]["status"], steps["boom"]["error"]) == ("error", "model connection dropped")
        partial = _message(conversation.client["messages"], "asst-3")
        assert [p.get("text") for p in partial["parts"] if p["type"] == "text"] == ["Partial"]

    def test_stopping_the_chat_closes_the_run_on_the_server(self, conversation: Conversation) -> None:
        assert conversation.slow.exit_type is asyncio.CancelledError  # the disconnect cancelled the waiting run
        steps = {step["send"]: step for step in conversation.client["steps"]}
        assert steps["slow"]["status"] == "ready"


class TestTheNextRequest:
    def test_the_echo_carries_the_assistant_id_from_start_and_round_trips(self, conversation: Conversation) -> None:
        requests = conversation.server.requests
        assert [r.body["trigger"] for r in requests] == ["submit-message"] * 5
        first, echo = requests[0], requests[1]
        user_id = first.body["messages"][0]["id"]
        assert [m["id"] for m in echo.body["messages"]] == [user_id, "asst-1"]
        assert [m.id for m in echo.messages] == [user_id, "asst-1"]
        assert echo.body["id"] == CHAT_ID

    def test_the_echoed_tool_parts_become_stored_invocations(self, conversation: Conversation) -> None:
        reply = conversation.server.requests[1].messages[1]
        tools = {p.tool_invocation.tool_call_id: p.tool_invocation for p in reply.content.parts
                 if isinstance(p, ToolInvocationPart)}
        assert (tools["call-w"].state, tools["call-w"].tool_name, tools["call-w"].args, tools["call-w"].result) == (
            "result", "weather", {"city": "Paris"}, {"tempC": 21})
        assert (tools["call-c"].state, tools["call-c"].tool_name, tools["call-c"].result) == (
            "result", "confirm", {"answer": "yes"})
        assert reply.content.content == "Let me check.It is 21°C."

    def test_every_later_request_echoes_the_whole_conversation(self, conversation: Conversation) -> None:
        last = conversation.server.requests[-1]
        assert [(m.role, m.id) for m in last.messages][-1] == ("user", last.body["messages"][-1]["id"])
        ids = [m.id for m in last.messages]
        assert "asst-1" in ids and "asst-3" in ids
        assert "asst-2" not in ids  # useChat keeps an empty reply for the tripwire; there is nothing to store

    def test_the_history_loaded_back_passes_validate_ui_messages(self, conversation: Conversation) -> None:
        history = conversation.client["history"]
        assert history["valid"], history["problem"]
        expected = messages_to_ui(conversation.server.requests[-1].messages)
        assert history["messages"] == expected
        assert [m.id for m in messages_from_ui({"messages": history["messages"]})] == [
            m.id for m in conversation.server.requests[-1].messages]


ALL_EVENTS: list[StreamEvent] = [
    StartEvent(message_id="m-1"), StartStepEvent(),
    ReasoningStartEvent(id="r"), ReasoningDeltaEvent(id="r", delta="hm"), ReasoningEndEvent(id="r"),
    TextStartEvent(id="t"), TextDeltaEvent(id="t", delta="Hi"), TextEndEvent(id="t"),
    ToolInputStartEvent(tool_call_id="c1", tool_name="search"),
    ToolInputDeltaEvent(tool_call_id="c1", input_text_delta='{"q":"x"}'),
    ToolInputAvailableEvent(tool_call_id="c1", tool_name="search", input={"q": "x"}),
    ToolOutputAvailableEvent(tool_call_id="c1", output=[1, None, "three"]),
    ToolInputAvailableEvent(tool_call_id="c2", tool_name="ping", input=None),
    ToolOutputErrorEvent(tool_call_id="c2", error_text="unreachable"),
    FinishStepEvent(), ThreadTitleEvent.of("th-1", "T"),
    OMStatusEvent(data={"windows": {"active": {"messages": {"tokens": 3, "threshold": 30000}}}, "stepNumber": 0}),
    OMObservationStartEvent(data={"cycleId": "c", "operationType": "observation", "tokensToObserve": 36001}),
    OMObservationEndEvent(data={"cycleId": "c", "observations": "* 🔴 noted", "observationTokens": 5}),
    OMObservationFailedEvent(data={"cycleId": "c", "error": "observer down"}),
    OMActivationEvent(data={"operationType": "reflection", "triggeredBy": "ttl"}),
    OMBufferingStartEvent(data={"cycleId": "buffer-obs-2", "tokensToBuffer": 12}),
    ErrorEvent(error_text="guardrail"), AbortEvent(reason="stopped"), AbortEvent(),
    FinishEvent(finish_reason="tripwire"),
]


async def _read_with_the_sdk(folder: Path, script: list[StreamEvent]) -> dict[str, Any]:
    raw = b"".join([chunk async for chunk in ui_message_stream(ScriptedEventStream(list(script)))])
    done = await anyio.run_process([node_binary(), "read_stream.mjs"], input=raw, cwd=folder, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_every_event_type_passes_the_sdks_chunk_schema(ai_client: Path) -> None:
    result = await _read_with_the_sdk(ai_client, ALL_EVENTS)
    assert [c for c in result["chunks"] if not c["ok"]] == []
    assert [c["value"]["type"] for c in result["chunks"]] == [e.type for e in ALL_EVENTS]
    assert result["chunks"][-1]["value"] == {"type": "finish", "finishReason": "other"}
    assert result["errors"] == ["guardrail"]
    message = result["message"]
    assert message["id"] == "m-1"
    assert [p["type"] for p in message["parts"]] == ["step-start", "reasoning", "text", "tool-search", "tool-ping"]
    assert message["parts"][3]["output"] == [1, None, "three"]
    assert message["parts"][4] == {"type": "tool-ping", "toolCallId": "c2", "state": "output-error", "input": None,
                                   "errorText": "unreachable"}


async def test_the_schema_rejects_a_finish_reason_outside_the_sdks_set(ai_client: Path) -> None:
    # the control for the test above: the validation really runs (threadmind never sends this)
    done = await anyio.run_process([node_binary(), "read_stream.mjs"], cwd=ai_client, check=False,
                                   input=b'data: {"type":"finish","finishReason":"tripwire"}\n\ndata: [DONE]\n\n')
    (chunk,) = json.loads(done.stdout)["chunks"]
    assert chunk["ok"] is False


def test_the_pinned_version_is_the_one_quoted_in_the_docstrings() -> None:
    import threadmind.events
    import threadmind.ui

    assert AI_VERSION == "7.0.173"
    assert AI_VERSION in (threadmind.ui.__doc__ or "") and AI_VERSION in (threadmind.events.__doc__ or "")

