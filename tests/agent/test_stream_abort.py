"""Aborting a stream: what a user saw is what memory keeps, wherever the abort lands, and the thread stays usable.

Every test checks the model stream was closed (no tokens after the abort), what the thread holds (all of the
turn's messages or none of them: never half), and that the next turn runs and sees what was kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import RESOURCE, THREAD, base_time, open_memory, stored, text_msg, texts

from threadmind import Memory, Message
from threadmind.agent import ABORTED_TOOL_TEXT, Agent, AgentStream, Tool
from threadmind.codecs import ToolInvocationPart
from threadmind.errors import ModelError
from threadmind.events import StreamEvent, TextDeltaEvent, ToolInputDeltaEvent
from threadmind.models import ModelChunk, ModelResponse, ScriptedModel, ToolCall, ToolInputDelta
from threadmind.stores import SQLiteStore

from ._streaming import GatedStore, Paced, types

Stop = Callable[[AgentStream], Awaitable[None]]


async def _break_at(stream: AgentStream, until: Callable[[StreamEvent], bool]) -> list[StreamEvent]:
    """Read events until ``until`` says stop, then leave the block (a ``break``)."""
    seen: list[StreamEvent] = []
    async with stream:
        async for event in stream:
            seen.append(event)
            if until(event):
                break
    return seen


async def _cancel_when(stream: AgentStream, ready: anyio.Event) -> list[StreamEvent]:
    """Read events in a task that is cancelled once ``ready`` is set (a client that disconnects)."""
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async with stream:
            async for event in stream:
                seen.append(event)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await ready.wait()
            tg.cancel_scope.cancel()
    return seen


def _is_delta(n: int) -> Callable[[StreamEvent], bool]:
    count = [0]

    def check(event: StreamEvent) -> bool:
        if isinstance(event, TextDeltaEvent):
            count[0] += 1
        return count[0] == n

    return check


async def _next_turn_sees(memory: Memory, model: ScriptedModel, expected: list[str]) -> None:
    """The thread is usable: another turn runs and its model sees what was kept."""
    with anyio.fail_after(10):
        result = await Agent("a", "i", model, memory=memory).generate("again", thread_id=THREAD,
                                                                      resource_id=RESOURCE)
    assert result.text == "after"
    assert texts(model.requests[-1].messages) == [*expected, "again"]


def _aborted(message: Message) -> bool:
    return (message.content.metadata or {}).get("aborted") is True


class TestWhereTheAbortLands:
    async def test_before_the_first_delta(self, tmp_path: Path) -> None:
        paced = Paced()  # the model is still thinking
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory).stream(
                "hello?", thread_id=THREAD, resource_id=RESOURCE)
            seen = await _cancel_when(stream, paced.waiting)
            assert types(seen) == ["start", "start-step"]
            assert paced.closed
            assert texts(await stored(memory)) == ["hello?"]  # the question survives; no empty reply
            assert (await stream.result()).finish_reason == "aborted"
            await _next_turn_sees(memory, ScriptedModel(["after"]), ["hello?"])

    async def test_mid_text(self, tmp_path: Path) -> None:
        paced = Paced(["Once", " upon", " a", " time"], [" there", " was"])
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory).stream(
                "tell me a story", thread_id=THREAD, resource_id=RESOURCE)
            seen = await _break_at(stream, _is_delta(2))
            assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Once", " upon"]
            assert paced.closed and paced.taken <= 3  # closed at once: nothing read past what was shown
            rows = await stored(memory)
            assert texts(rows) == ["tell me a story", "Once upon"]
            assert _aborted(rows[1]) and not _aborted(rows[0])
            result = await stream.result()
            assert (result.finish_reason, result.text) == ("aborted", "Once upon")
            assert [m.id for m in result.messages] == [rows[1].id]
            await _next_turn_sees(memory, ScriptedModel(["after"]), ["tell me a story", "Once upon"])

    async def test_mid_tool_call_while_its_arguments_stream(self, tmp_path: Path) -> None:
        paced = Paced(["Let me look."], [])
        paced.before += [ModelChunk(tool_input=ToolInputDelta("c1", "lookup", "")),
                         ModelChunk(tool_input=ToolInputDelta("c1", "lookup", '{"q": "par'))]
        tool = Tool("lookup", "", None, lambda args: pytest.fail("a call still being written never runs"))
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory, tools=[tool]).stream(
                "find paris", thread_id=THREAD, resource_id=RESOURCE)
            seen = await _break_at(stream, lambda e: isinstance(e, ToolInputDeltaEvent))
            assert types(seen)[-2:] == ["tool-input-start", "tool-input-delta"]
            assert paced.closed
            rows = await stored(memory)
        assert texts(rows) == ["find paris", "Let me look."]
        assert not any(isinstance(p, ToolInvocationPart) for p in rows[1].content.parts)  # no half-written call
        assert _aborted(rows[1])

    async def test_during_a_tools_execution(self, tmp_path: Path) -> None:
        started, cancelled = anyio.Event(), anyio.Event()

        async def slow_search(args: Any) -> str:
            started.set()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()
            return "never"

        model = ScriptedModel([ModelResponse(text="Searching.", tool_calls=[
            ToolCall("c1", "add", {"a": 1, "b": 1}), ToolCall("c2", "search", {"q": "x"}),
            ToolCall("c3", "add", {"a": 2, "b": 2})])])
        tools = [Tool("add", "", None, lambda args: args["a"] + args["b"]), Tool("search", "", None, slow_search)]
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", model, memory=memory, tools=tools).stream(
                "search", thread_id=THREAD, resource_id=RESOURCE)
            seen = await _cancel_when(stream, started)
            assert cancelled.is_set()
            assert types(seen)[-1] == "tool-output-available"  # c1's
            rows = await stored(memory)
            assert texts(rows) == ["search", "Searching."]
            calls = {p.tool_invocation.tool_call_id: p.tool_invocation for p in rows[1].content.parts
                     if isinstance(p, ToolInvocationPart)}
            assert (calls["c1"].state, calls["c1"].result) == ("result", 2)
            for unfinished in ("c2", "c3"):  # complete calls that never returned: errors, never awaiting a result
                assert (calls[unfinished].state, calls[unfinished].error_text) == ("output-error", ABORTED_TOOL_TEXT)
            assert _aborted(rows[1])
            after = ScriptedModel(["after"])
            await _next_turn_sees(memory, after, ["search", "Searching."])
            seen_calls = [p.tool_invocation.state for m in after.requests[0].messages for p in m.content.parts
                          if isinstance(p, ToolInvocationPart)]
            assert seen_calls == ["result", "output-error", "output-error"]

    async def test_a_client_tools_complete_call_keeps_waiting_for_its_result(self, tmp_path: Path) -> None:
        paced = Paced([ModelChunk(text="Please confirm."), ModelChunk(tool_call=ToolCall("c1", "confirm", {}))])
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory, tools=[Tool("confirm")])
            await _cancel_when(agent.stream("book it", thread_id=THREAD, resource_id=RESOURCE), paced.waiting)
            rows = await stored(memory)
        (part,) = [p for p in rows[1].content.parts if isinstance(p, ToolInvocationPart)]
        assert part.tool_invocation.state == "call"  # a client tool's call: a later request may answer it

    async def test_during_persistence_the_save_completes(self, tmp_path: Path) -> None:
        store = GatedStore(SQLiteStore(str(tmp_path / "gated.db")))
        async with Memory(storage=store) as memory:
            await memory.create_thread(thread_id=THREAD, resource_id=RESOURCE)
            stream = Agent("a", "i", ScriptedModel(["The full answer."]), memory=memory).stream(
                "question", thread_id=THREAD, resource_id=RESOURCE)
            store.armed = True

            async def release_later() -> None:
                await anyio.wait_all_tasks_blocked()
                store.gate.set()  # the save goes on after the consumer was cancelled

            seen: list[StreamEvent] = []
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async with stream:
                            async for event in stream:
                                seen.append(event)

                    tg.start_soon(consume)
                    await store.entered.wait()
                    tg.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True), anyio.fail_after(10):
                        await release_later()
            store.armed = False
            assert "finish-step" in types(seen)  # the model had finished when the save began
            rows = await stored(memory)
            assert texts(rows) == ["question", "The full answer."]
            assert not any(_aborted(m) for m in rows)  # the run had finished: a complete turn, not a partial one
            assert (await stream.result()).finish_reason == "stop"  # and the run knows its save completed
            await _next_turn_sees(memory, ScriptedModel(["after"]), ["question", "The full answer."])

    async def test_while_the_title_is_generated_the_turn_is_already_complete(self, tmp_path: Path) -> None:
        asked = anyio.Event()

        async def slow_title(request: Any) -> str:
            asked.set()
            await anyio.sleep_forever()
            return "never"

        options = {"generateTitle": {"model": ScriptedModel([slow_title]), "emitEvent": True}}
        async with open_memory(tmp_path, options) as memory:
            stream = Agent("a", "i", ScriptedModel(["Done."]), memory=memory).stream(
                "q", thread_id=THREAD, resource_id=RESOURCE)
            seen = await _cancel_when(stream, asked)
            assert types(seen)[-1] == "finish-step"  # no title, no finish: the client went away meanwhile
            rows = await stored(memory)
            assert texts(rows) == ["q", "Done."] and not any(_aborted(m) for m in rows)
            assert (await stream.result()).finish_reason == "stop"
            thread = await memory.get_thread_by_id(THREAD)
            assert thread is not None and not thread.title

    async def test_the_partial_save_is_shielded_too(self, tmp_path: Path) -> None:
        store = GatedStore(SQLiteStore(str(tmp_path / "gated.db")))
        paced = Paced(["Half", " a"], [" reply"])
        async with Memory(storage=store) as memory:
            await memory.create_thread(thread_id=THREAD, resource_id=RESOURCE)
            stream = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory).stream(
                "q", thread_id=THREAD, resource_id=RESOURCE)
            store.armed = True
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async with stream:
                            async for _ in stream:
                                pass

                    tg.start_soon(consume)
                    await paced.waiting.wait()
                    tg.cancel_scope.cancel()  # the abort's save starts under a cancelled scope, and waits
                    with anyio.CancelScope(shield=True), anyio.fail_after(10):
                        await store.entered.wait()
                        await anyio.wait_all_tasks_blocked()
                        store.gate.set()
            store.armed = False
            rows = await stored(memory)
        assert texts(rows) == ["q", "Half a"] and _aborted(rows[1])


class TestHowTheConsumerStops:
    @pytest.mark.parametrize("how", ["break", "exception", "aclose", "exit-without-reading"])
    async def test_every_early_exit_saves_the_partial_reply(self, tmp_path: Path, how: str) -> None:
        paced = Paced(["One", " two"], [" three"])
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory).stream(
                "count", thread_id=THREAD, resource_id=RESOURCE)
            if how == "break":
                await _break_at(stream, _is_delta(2))
            elif how == "exception":
                with pytest.raises(LookupError):
                    async with stream:
                        async for event in stream:
                            if isinstance(event, TextDeltaEvent) and event.delta == " two":
                                raise LookupError("the consumer failed")
            elif how == "aclose":  # what ui_message_stream does on an early close, before leaving the block
                async with stream:
                    async for event in stream:
                        if isinstance(event, TextDeltaEvent) and event.delta == " two":
                            await stream.aclose()
                            await stream.aclose()  # idempotent
            else:
                async with stream:
                    pass
            assert paced.closed or how == "exit-without-reading"
            rows = await stored(memory)
        expected = ["count"] if how == "exit-without-reading" else ["count", "One two"]
        assert texts(rows) == expected
        assert all(_aborted(m) for m in rows[1:])

    async def test_discard_keeps_nothing(self, tmp_path: Path) -> None:
        paced = Paced(["Some", " words"])
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory, on_abort="discard")
            stream = agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE)
            await _break_at(stream, _is_delta(1))
            assert paced.closed
            assert await stored(memory) == []
            result = await stream.result()
            assert (result.finish_reason, result.messages) == ("aborted", [])
            await _next_turn_sees(memory, ScriptedModel(["after"]), [])

    async def test_an_abort_while_the_input_processors_run_saves_nothing(self, tmp_path: Path) -> None:
        entered = anyio.Event()

        class SlowRecall:
            id = "slow-recall"

            async def process_input(self, args: Any) -> None:
                entered.set()
                await anyio.sleep_forever()

        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([]), memory=memory, input_processors=[SlowRecall()])
            seen = await _cancel_when(agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE), entered)
            assert seen == []
            assert await stored(memory) == []
            await _next_turn_sees(memory, ScriptedModel(["after"]), [])

    async def test_a_tripwire_then_an_early_exit_persists_nothing(self, tmp_path: Path) -> None:
        class Trip:
            id = "trip"

            async def process_input(self, args: Any) -> None:
                args.abort("no")

        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([]), memory=memory, input_processors=[Trip()])
            await _break_at(agent.stream("hi", thread_id=THREAD, resource_id=RESOURCE), lambda e: True)
            assert await stored(memory) == []

    async def test_an_abort_after_finish_changes_nothing(self, tmp_path: Path) -> None:
        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel(["done"]), memory=memory).stream(
                "hi", thread_id=THREAD, resource_id=RESOURCE)
            await _break_at(stream, lambda e: e.type == "finish")
            rows = await stored(memory)
            assert texts(rows) == ["hi", "done"] and not any(_aborted(m) for m in rows)
            assert (await stream.result()).finish_reason == "stop"


class TestModelErrors:
    async def test_a_model_that_fails_mid_stream_raises_model_error_and_persists_nothing(
            self, tmp_path: Path) -> None:
        async def failing() -> Any:
            yield "Partial"
            yield " answer"
            raise ConnectionResetError("connection dropped")

        async with open_memory(tmp_path) as memory:
            stream = Agent("a", "i", ScriptedModel([failing()]), memory=memory).stream(
                "hi", thread_id=THREAD, resource_id=RESOURCE)
            seen: list[StreamEvent] = []
            with pytest.raises(ModelError, match="connection dropped"):
                async with stream:
                    async for event in stream:
                        seen.append(event)
            assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Partial", " answer"]
            with pytest.raises(ModelError):
                await stream.result()
            assert await stored(memory) == []
            await _next_turn_sees(memory, ScriptedModel(["after"]), [])

    async def test_generate_cancelled_mid_turn_persists_nothing(self, tmp_path: Path) -> None:
        paced = Paced(["Some"])
        async with open_memory(tmp_path) as memory:
            agent = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory)
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: agent.generate("hi", thread_id=THREAD, resource_id=RESOURCE))
                    await paced.waiting.wait()
                    tg.cancel_scope.cancel()
            assert await stored(memory) == []


async def test_what_the_next_request_sends_back_is_not_stored_twice(tmp_path: Path) -> None:
    """A useChat client echoes the aborted reply in its next request: memory recognises it by id."""
    paced = Paced(["Half", " said"])
    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", ScriptedModel([paced.stream(), "Full."]), memory=memory)
        first = agent.stream("q1", thread_id=THREAD, resource_id=RESOURCE)
        seen = await _break_at(first, _is_delta(2))
        start = seen[0]
        partial = (await stored(memory))[1]
        assert start.type == "start" and partial.id == getattr(start, "message_id", None)
        echo = [*(await stored(memory)), Message.user("q2")]
        await agent.generate(echo, thread_id=THREAD, resource_id=RESOURCE)
        rows = await stored(memory)
    assert texts(rows) == ["q1", "Half said", "q2", "Full."]


async def test_a_reply_saved_after_the_next_message_was_written_still_sorts_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client stops a reply and sends its next message at once: that message may be dated before the server
    saves the aborted reply. The reply is dated when it started, so the conversation keeps its order."""
    t0 = base_time()
    clock = [t0 + timedelta(milliseconds=10)]
    monkeypatch.setattr("threadmind.agent._run.utc_now", lambda: clock[0])
    paced = Paced(["Thinking"])
    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", ScriptedModel([paced.stream()]), memory=memory)
        stream = agent.stream(text_msg("user", "q1", id="q1", at=t0), thread_id=THREAD, resource_id=RESOURCE)
        async with stream:
            async for event in stream:
                if isinstance(event, TextDeltaEvent):
                    next_message = text_msg("user", "q2", id="q2", at=t0 + timedelta(milliseconds=50))
                    clock[0] = t0 + timedelta(milliseconds=100)  # the abort lands after q2 was written
                    break
        after = ScriptedModel(["after"])
        await Agent("a", "i", after, memory=memory).generate(next_message, thread_id=THREAD, resource_id=RESOURCE)
        assert texts(after.requests[0].messages) == ["q1", "Thinking", "q2"]
        assert texts(await stored(memory)) == ["q1", "Thinking", "q2", "after"]


async def test_a_stream_abandoned_without_async_with_releases_its_thread(tmp_path: Path) -> None:
    """Iterated without ``async with`` and abandoned mid-reply, the stream is closed by the event loop's
    async-generator finalizer in another task: the thread's turn hold (a semaphore, releasable from any task)
    is given back there, and the next turn runs."""
    async with open_memory(tmp_path) as memory:
        agent = Agent("a", "i", ScriptedModel(["One two three", "after"]), memory=memory)
        async for event in agent.stream("q", thread_id=THREAD, resource_id=RESOURCE):
            if isinstance(event, TextDeltaEvent):
                break
        with anyio.fail_after(5):
            result = await agent.generate("again", thread_id=THREAD, resource_id=RESOURCE)
        assert result.text == "after"
        assert texts(await stored(memory)) == ["q", "One", "again", "after"]
