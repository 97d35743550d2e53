"""A chat server's clients are browsers: what they send is checked before the model runs, what they are told never
names another user's ids, what fails after a reply started is logged for the operator, and memory's own tool calls
can stay on the server. Through the chat path (``messages_from_ui`` + ``Agent.stream`` + ``ui_message_stream``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.errors import MessageIdTaken
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.processors import ProcessOutputArgs
from threadmind.stores import InMemoryStore, PostgresStore, SQLiteStore, Store
from threadmind.ui import MEMORY_TOOLS, messages_from_ui, ui_message_stream


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    kind = request.param
    if kind == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return lambda: PostgresStore(dsn, max_size=2)
    if kind == "sqlite":
        return lambda: SQLiteStore(tmp_path / "chat.db", synchronous="NORMAL")
    return InMemoryStore


def body(chat: str, message_id: str, text: str) -> dict[str, Any]:
    return {"id": chat, "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}]}


async def chunks(agent: Agent, request: dict[str, Any], user: str, **options: Any) -> list[dict[str, Any]]:
    stream = agent.stream(messages_from_ui(request), thread_id=request["id"], resource_id=user)
    raw = b"".join([chunk async for chunk in ui_message_stream(stream, **options)])
    return [json.loads(frame.removeprefix(b"data: ")) for frame in raw.split(b"\n\n")[:-2]]


async def test_a_message_id_of_another_users_thread_is_refused_before_anything_runs(
        make_store: Callable[[], Store]) -> None:
    model = ScriptedModel(["to alice", "never"])
    async with Memory(storage=make_store()) as memory:
        agent = Agent("chat", "You answer.", model, memory=memory)
        await chunks(agent, body("c-7f3", "m-1", "alice's secret"), "alice")
        with pytest.raises(MessageIdTaken) as refused:
            await chunks(agent, body("c-m01", "m-1", "overwrite it"), "mallory")
        assert model.calls == 1
        assert await memory.get_thread_by_id("c-m01") is None  # not even an empty thread is left
        rows = (await memory.recall("c-7f3", resource_id="alice", per_page=False)).messages
    assert [m.text for m in rows] == ["alice's secret", "to alice"]
    assert "c-7f3" in refused.value.message and "c-7f3" not in refused.value.public_message


def _boom(request: ModelRequest) -> str:
    raise RuntimeError("the provider said: alice's card is 4111")


class _RefusingSave:
    """An output processor standing in for a save the store refuses."""

    id = "refusing-save"

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        raise RuntimeError("refused: alice's card is 4111")


@pytest.mark.parametrize("failure", ["model", "save"])
async def test_a_failure_after_the_reply_started_is_logged_and_marks_the_span(
        tmp_path: Path, failure: str, caplog: pytest.LogCaptureFixture, span_exporter: InMemorySpanExporter) -> None:
    model = ScriptedModel([_boom] if failure == "model" else ["fine"])
    async with Memory(storage=SQLiteStore(tmp_path / "chat.db")) as memory:
        agent = Agent("chat", "You answer.", model, memory=memory,
                      output_processors=[_RefusingSave()] if failure == "save" else [])
        with caplog.at_level(logging.ERROR, logger="threadmind.agent"):
            sent = await chunks(agent, body("c-1", "u-1", "hello"), "u-42")
    assert sent[0]["type"] == "start" and sent[-2]["type"] == "error" and sent[-1]["finishReason"] == "error"
    (record,) = [r for r in caplog.records if r.name == "threadmind.agent"]
    assert "c-1" in record.getMessage() and "u-42" in record.getMessage()
    assert record.getMessage().endswith("THREADMIND_MODEL_FAILED" if failure == "model" else "RuntimeError")
    assert "4111" not in record.getMessage()  # no message text in the log line
    (span,) = [s for s in span_exporter.get_finished_spans() if s.name == "threadmind.agent.stream"]
    assert span.status.status_code is StatusCode.ERROR


def _remember(request: ModelRequest) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall("wm-1", "updateWorkingMemory", {"memory": "# User\n- likes tea"})])


async def test_memory_tools_can_be_kept_out_of_the_ui_stream(tmp_path: Path) -> None:
    options = {"workingMemory": {"enabled": True}}
    async with Memory(storage=SQLiteStore(tmp_path / "chat.db"), options=options) as memory:
        agent = Agent("chat", "You answer.", ScriptedModel([_remember, "noted", _remember, "noted"]), memory=memory)
        shown = await chunks(agent, body("c-1", "u-1", "I like tea"), "u-1")
        hidden = await chunks(agent, body("c-1", "u-2", "I still like tea"), "u-1", hide_tools=MEMORY_TOOLS)
        remembered = await memory.get_working_memory(thread_id="c-1", resource_id="u-1")
    assert any(c["type"] == "tool-input-available" and "likes tea" in json.dumps(c) for c in shown)
    assert not any(c["type"].startswith("tool-") for c in hidden)
    assert "".join(c.get("delta", "") for c in hidden) == "noted"
    assert remembered is not None and "likes tea" in remembered  # the run is the same, only the stream differs
