"""Working memory through the Memory API and through Agent.generate (reference §7)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import StoreFactory, StoreKind, new_store, working_memory

from threadmind.agent import Agent
from threadmind.codecs import ToolInvocationPart
from threadmind.errors import ConfigError, ValidationError
from threadmind.memory import Memory
from threadmind.models import ModelResponse, ToolCall
from threadmind.models._scripted import ScriptedModel
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
    },
}

DEFAULT_TRIMMED = (
    "# User Information\n- **First Name**: \n- **Last Name**: \n- **Location**: \n- **Occupation**: \n"
    "- **Interests**: \n- **Goals**: \n- **Events**: \n- **Facts**: \n- **Projects**:"
)

SCOPES = [pytest.param("resource", id="resource"), pytest.param("thread", id="thread")]


@pytest.fixture(params=["memory", "sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    kind: StoreKind = request.param
    return lambda: new_store(kind, tmp_path / "wm.db")


@pytest.fixture
async def md_memory(store_factory: StoreFactory) -> AsyncIterator[Memory]:
    async with working_memory(store_factory()) as memory:
        yield memory


def _wm_call(memory: Any, call_id: str = "c1") -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(call_id, "updateWorkingMemory", {"memory": memory})])


def _tool_results(result: Any) -> list[Any]:
    out = []
    for message in result.messages:
        for part in message.content.parts:
            if isinstance(part, ToolInvocationPart):
                out.append(part.tool_invocation.result)
    return out


class TestTemplate:
    def test_default_template_trimmed(self) -> None:
        memory = working_memory(InMemoryStore())
        template = memory.get_working_memory_template()
        assert template is not None
        assert template.format == "markdown"
        assert template.content == DEFAULT_TRIMMED

    def test_custom_template_trimmed(self) -> None:
        memory = working_memory(InMemoryStore(), template="\n# Me\n- name: \n")
        template = memory.get_working_memory_template()
        assert template is not None and template.content == "# Me\n- name:"

    def test_schema_template_is_draft07_json(self) -> None:
        memory = working_memory(InMemoryStore(), schema=SCHEMA)
        template = memory.get_working_memory_template()
        assert template is not None and template.format == "json"
        parsed = json.loads(template.content)
        assert parsed["$schema"] == "http://json-schema.org/draft-07/schema#"
        assert parsed["properties"] == SCHEMA["properties"]

    def test_disabled_gives_none(self) -> None:
        memory = Memory(storage=InMemoryStore())
        assert memory.get_working_memory_template() is None
        assert memory.list_tools() == {}

    def test_dict_options(self) -> None:
        memory = Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "scope": "thread"}})
        assert memory.options.working_memory.scope == "thread"
        with pytest.raises(ConfigError):
            Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "use": "text-stream"}})


class TestTools:
    def test_tool_offered_when_enabled(self) -> None:
        tools = working_memory(InMemoryStore()).list_tools()
        assert list(tools) == ["updateWorkingMemory"]
        params = tools["updateWorkingMemory"].parameters
        assert params["properties"]["memory"]["type"] == "string"

    def test_schema_tool_parameters(self) -> None:
        tools = working_memory(InMemoryStore(), schema=SCHEMA).list_tools()
        assert tools["updateWorkingMemory"].parameters["properties"]["memory"]["properties"] == SCHEMA["properties"]

    def test_read_only_has_no_tool(self) -> None:
        memory = Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True}, "readOnly": True})
        assert memory.list_tools() == {}
        assert working_memory(InMemoryStore()).list_tools(memory_config={"readOnly": True}) == {}


class TestMemoryApi:
    @pytest.mark.parametrize("scope", SCOPES)
    async def test_roundtrip(self, store_factory: StoreFactory, scope: str) -> None:
        async with working_memory(store_factory(), scope=scope) as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            await memory.create_thread(resource_id="r1", thread_id="t2")
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") is None
            await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Me\nAda")
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\nAda"
            other = await memory.get_working_memory(thread_id="t2", resource_id="r1")
            # resource scope shares across the resource's threads; thread scope does not
            assert other == ("# Me\nAda" if scope == "resource" else None)

    async def test_resource_scope_requires_resource_id(self, md_memory: Memory) -> None:
        expected = ("Memory error: Resource-scoped working memory is enabled but no resourceId was provided. "
                    "Either provide a resourceId or explicitly set workingMemory.scope to 'thread'.")
        with pytest.raises(ValidationError) as info:
            await md_memory.get_working_memory(thread_id="t1")
        assert info.value.message == expected
        with pytest.raises(ValidationError) as info:
            await md_memory.update_working_memory(thread_id="t1", working_memory="x")
        assert info.value.message == expected

    async def test_thread_scope_stored_in_thread_metadata(self, store_factory: StoreFactory) -> None:
        async with working_memory(store_factory(), scope="thread") as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"k": 1})
            await memory.update_working_memory(thread_id="t1", working_memory="hello")
            thread = await memory.get_thread_by_id("t1")
            assert thread is not None and thread.metadata == {"k": 1, "workingMemory": "hello"}
            assert await memory.get_working_memory(thread_id="t1") == "hello"

    async def test_disabled_update_raises(self, store_factory: StoreFactory) -> None:
        async with Memory(storage=store_factory()) as memory:
            assert await memory.get_working_memory(thread_id="t", resource_id="r") is None
            with pytest.raises(ConfigError):
                await memory.update_working_memory(thread_id="t", resource_id="r", working_memory="x")
            assert await memory.get_system_message(thread_id="t", resource_id="r") is None

    async def test_non_string_rejected(self, md_memory: Memory) -> None:
        with pytest.raises(ValidationError, match="working_memory"):
            await md_memory.update_working_memory(thread_id="t", resource_id="r",
                                                  working_memory={"a": 1})  # type: ignore[arg-type]

    async def test_system_message_standard(self, md_memory: Memory) -> None:
        text = await md_memory.get_system_message(thread_id="t1", resource_id="r1")
        assert text is not None
        assert text.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION:\n")
        assert "updateWorkingMemory" in text
        assert "3. Use Markdown format for all data" in text
        assert f"<working_memory_template>\n{DEFAULT_TRIMMED}\n</working_memory_template>" in text
        assert "<working_memory_data>\nnull\n</working_memory_data>" in text
        assert "- REMEMBER: the way you update your working memory is by calling the updateWorkingMemory tool " \
               "with the entire Markdown content." in text
        await md_memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Me\nAda")
        text = await md_memory.get_system_message(thread_id="t1", resource_id="r1")
        assert text is not None and "<working_memory_data>\n# Me\nAda\n</working_memory_data>" in text

    async def test_system_message_schema(self, store_factory: StoreFactory) -> None:
        async with working_memory(store_factory(), schema=SCHEMA) as memory:
            text = await memory.get_system_message(thread_id="t1", resource_id="r1")
            assert text is not None
            assert "3. Use JSON format for all data" in text
            assert "<working_memory_template>" not in text
            assert "When working with json data, the object format below represents the template:" in text
            assert '{"name":"","age":0,"tags":[],"address":{"city":"","zip":""}}' in text
            assert "<working_memory_data>\nnull\n</working_memory_data>" in text
            assert "DO NOT pass an object" not in text

    async def test_system_message_read_only(self, md_memory: Memory) -> None:
        await md_memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="Ada")
        text = await md_memory.get_system_message(thread_id="t1", resource_id="r1",
                                                  memory_config={"readOnly": True})
        assert text is not None
        assert text.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION (READ-ONLY):")
        assert "<working_memory_data>\nAda\n</working_memory_data>" in text
        assert "updateWorkingMemory" not in text
        empty = await md_memory.get_system_message(thread_id="t9", resource_id="r9",
                                                   memory_config={"readOnly": True})
        assert empty is not None and "No working memory data available." in empty


class TestAgentMarkdown:
    @pytest.mark.parametrize("scope", SCOPES)
    async def test_replace_through_tool(self, store_factory: StoreFactory, scope: str) -> None:
        model = ScriptedModel([_wm_call("# Me\n- name: Ada"), "noted", _wm_call("# Me\n- name: Grace"), "ok"])
        async with working_memory(store_factory(), scope=scope) as memory:
            agent = Agent("a", "be helpful", model, memory=memory)
            first = await agent.generate("I am Ada", thread_id="t1", resource_id="r1")
            assert first.text == "noted"
            assert _tool_results(first) == [{"success": True}]
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\n- name: Ada"
            await agent.generate("Actually Grace", thread_id="t1", resource_id="r1")
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\n- name: Grace"
            # the instruction with the stored data reaches the model as a system text
            system = model.requests[2].system
            assert system[0] == "be helpful"
            wm = [s for s in system if s.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION:")]
            assert len(wm) == 1 and "<working_memory_data>\n# Me\n- name: Ada\n</working_memory_data>" in wm[0]
            assert "updateWorkingMemory" in [t.name for t in model.requests[0].tools]
            # the tool part is never persisted
            stored = (await memory.recall("t1", resource_id="r1")).messages
            assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
            for message in stored:
                for part in message.content.parts:
                    assert not isinstance(part, ToolInvocationPart)

    async def test_empty_template_guard(self, md_memory: Memory) -> None:
        template = md_memory.get_working_memory_template()
        assert template is not None
        model = ScriptedModel([_wm_call("  " + template.content.replace("\n", "\n  ") + "\n"), "done"])
        await md_memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# real data")
        result = await Agent("a", "i", model, memory=md_memory).generate("hi", thread_id="t1", resource_id="r1")
        assert _tool_results(result) == [{
            "success": False,
            "message": "Attempted to replace existing working memory with empty template. "
                       "Update skipped to prevent data loss.",
        }]
        assert await md_memory.get_working_memory(thread_id="t1", resource_id="r1") == "# real data"

    async def test_template_allowed_when_nothing_stored(self, md_memory: Memory) -> None:
        template = md_memory.get_working_memory_template()
        assert template is not None
        model = ScriptedModel([_wm_call(template.content), "done"])
        result = await Agent("a", "i", model, memory=md_memory).generate("hi", thread_id="t1", resource_id="r1")
        assert _tool_results(result) == [{"success": True}]
        assert await md_memory.get_working_memory(thread_id="t1", resource_id="r1") == template.content

    async def test_non_string_memory_fails_validation(self, md_memory: Memory) -> None:
        model = ScriptedModel([_wm_call({"name": "Ada"}), "done"])
        result = await Agent("a", "i", model, memory=md_memory).generate("hi", thread_id="t1", resource_id="r1")
        (outcome,) = _tool_results(result)
        assert outcome["error"] is True
        assert outcome["message"].startswith("Tool input validation failed for update-working-memory")
        assert await md_memory.get_working_memory(thread_id="t1", resource_id="r1") is None

    async def test_read_only_run_offers_no_tool(self, md_memory: Memory) -> None:
        model = ScriptedModel(["hi"])
        await Agent("a", "i", model, memory=md_memory).generate(
            "hi", thread_id="t1", resource_id="r1", memory_options={"readOnly": True})
        request = model.requests[0]
        assert request.tools == []
        (text,) = [s for s in request.system if s.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION (READ-ONLY):")]
        assert text.endswith("\n\nNotes:\n- This system is here so that you can maintain the conversation when "
                             "your context window is very short\n- The user will not see the working memory data "
                             "directly")


class TestAgentSchema:
    @pytest.mark.parametrize("scope", SCOPES)
    async def test_merge_semantics(self, store_factory: StoreFactory, scope: str) -> None:
        steps: list[str | ModelResponse] = [
            _wm_call({"name": "Ada", "age": 36, "tags": ["a", "b"], "address": {"city": "London", "zip": "N1"}}),
            "ok",
            # null for optional props is dropped (strict providers pad), arrays replace, objects merge
            _wm_call({"name": None, "tags": ["c"], "address": {"city": "Paris"}}),
            "ok",
            # the payload may come without the `memory` wrapper
            ModelResponse(tool_calls=[ToolCall("c3", "updateWorkingMemory", {"age": 37})]),
            "ok",
        ]
        model = ScriptedModel(steps)
        async with working_memory(store_factory(), schema=SCHEMA, scope=scope) as memory:
            agent = Agent("a", "i", model, memory=memory)
            first = await agent.generate("1", thread_id="t1", resource_id="r1")
            assert _tool_results(first) == [{"success": True}]
            raw = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert raw is not None
            assert json.loads(raw) == {"name": "Ada", "age": 36, "tags": ["a", "b"],
                                       "address": {"city": "London", "zip": "N1"}}
            await agent.generate("2", thread_id="t1", resource_id="r1")
            raw = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert raw is not None
            assert json.loads(raw) == {"name": "Ada", "age": 36, "tags": ["c"],
                                       "address": {"city": "Paris", "zip": "N1"}}
            await agent.generate("3", thread_id="t1", resource_id="r1")
            raw = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert raw is not None and json.loads(raw)["age"] == 37
            wm = [s for s in model.requests[-1].system if s.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION:")]
            assert len(wm) == 1 and '"tags":["c"]' in wm[0]

    async def test_null_deletes_required_key(self, store_factory: StoreFactory) -> None:
        schema = {**SCHEMA, "required": ["name"]}
        model = ScriptedModel([_wm_call({"name": "Ada", "age": 3}), "ok", _wm_call({"name": None}), "ok"])
        async with working_memory(store_factory(), schema=schema) as memory:
            agent = Agent("a", "i", model, memory=memory)
            await agent.generate("1", thread_id="t1", resource_id="r1")
            await agent.generate("2", thread_id="t1", resource_id="r1")
            raw = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert raw is not None and json.loads(raw) == {"age": 3}

    async def test_invalid_payload_rejected(self, store_factory: StoreFactory) -> None:
        model = ScriptedModel([_wm_call({"age": "old"}), "ok"])
        async with working_memory(store_factory(), schema=SCHEMA) as memory:
            result = await Agent("a", "i", model, memory=memory).generate("1", thread_id="t1", resource_id="r1")
            (outcome,) = _tool_results(result)
            assert outcome["error"] is True and "memory.age" in outcome["message"]
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") is None

    async def test_missing_memory_is_noop(self, store_factory: StoreFactory) -> None:
        model = ScriptedModel([_wm_call(None), "ok"])
        async with working_memory(store_factory(), schema=SCHEMA) as memory:
            result = await Agent("a", "i", model, memory=memory).generate("1", thread_id="t1", resource_id="r1")
            assert _tool_results(result) == [
                {"success": True, "message": "No memory data provided, existing memory unchanged."}]

    async def test_concurrent_updates_one_resource(self, store_factory: StoreFactory) -> None:
        fields = [f"f{i}" for i in range(100)]
        schema = {"type": "object", "properties": {f: {"type": "integer"} for f in fields}}
        async with working_memory(store_factory(), schema=schema) as memory:
            tool = memory.list_tools()["updateWorkingMemory"]
            from threadmind.agent import ToolContext

            for t in range(20):
                await memory.create_thread(resource_id="r1", thread_id=f"t{t}")
            results: list[Any] = []

            async def one(i: int) -> None:
                context = ToolContext(thread_id=f"t{i % 20}", resource_id="r1", memory=memory)
                results.append(await tool.run({"memory": {fields[i]: i}}, context))

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(one, i)
            assert results == [{"success": True}] * 100
            raw = await memory.get_working_memory(thread_id="t0", resource_id="r1")
            assert raw is not None and json.loads(raw) == {f: i for i, f in enumerate(fields)}

    async def test_concurrent_agent_turns_one_resource(self, tmp_path: Path) -> None:
        """100 turns on 20 threads of one resource, each setting its own field: none is lost (SQLite)."""
        fields = [f"f{i}" for i in range(100)]
        schema = {"type": "object", "properties": {f: {"type": "integer"} for f in fields}}

        def step(request: Any) -> ModelResponse:
            last = request.messages[-1]
            if last.role == "user":
                i = int(last.text)
                return _wm_call({fields[i]: i}, call_id=f"c{i}")
            return ModelResponse(text="ok")

        model = ScriptedModel(iter(lambda: step, None))
        async with working_memory(SQLiteStore(tmp_path / "c.db"), schema=schema) as memory:
            agent = Agent("a", "i", model, memory=memory)

            async def turn(i: int) -> None:
                await agent.generate(str(i), thread_id=f"t{i % 20}", resource_id="r1")

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(turn, i)
            raw = await memory.get_working_memory(thread_id="t0", resource_id="r1")
            assert raw is not None and json.loads(raw) == {f: i for i, f in enumerate(fields)}


class TestToolChecks:
    async def test_scope_errors(self, store_factory: StoreFactory) -> None:
        from threadmind.agent import ToolContext

        async with working_memory(store_factory()) as memory:
            tool = memory.list_tools()["updateWorkingMemory"]
            with pytest.raises(ValidationError, match="^Resource ID is required for resource-scoped working memory"):
                await tool.run({"memory": "x"}, ToolContext(thread_id="t1", resource_id=None, memory=memory))
        async with working_memory(store_factory(), scope="thread") as memory:
            tool = memory.list_tools()["updateWorkingMemory"]
            with pytest.raises(ValidationError, match="^Thread ID is required for thread-scoped working memory"):
                await tool.run({"memory": "x"}, ToolContext(thread_id=None, resource_id="r1", memory=memory))

    async def test_creates_missing_thread_and_checks_owner(self, md_memory: Memory) -> None:
        from threadmind.agent import ToolContext
        from threadmind.errors import ResourceMismatch

        tool = md_memory.list_tools()["updateWorkingMemory"]
        assert await tool.run({"memory": "x"}, ToolContext(thread_id="new", resource_id="r1")) == {"success": True}
        created = await md_memory.get_thread_by_id("new")
        assert created is not None and created.resource_id == "r1"
        with pytest.raises(ResourceMismatch) as info:
            await tool.run({"memory": "y"}, ToolContext(thread_id="new", resource_id="r2"))
        assert info.value.message == "Thread with id new resourceId does not match the current resourceId r2"
        assert await md_memory.get_working_memory(thread_id="new", resource_id="r2") is None


def _vnext_call(call_id: str = "c1", **args: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(call_id, "updateWorkingMemory", args)])


class TestVNext:
    """The vNext tool (reference §7.4): append or replace entries instead of rewriting the document."""

    TEMPLATE = "# Notes\n- "

    async def _run(self, memory: Memory, *calls: ModelResponse, resource: str = "r1") -> list[Any]:
        steps: list[str | ModelResponse] = []
        for call in calls:
            steps += [call, "ok"]
        model = ScriptedModel(steps)
        agent = Agent("a", "i", model, memory=memory)
        outcomes: list[Any] = []
        for _ in calls:
            outcomes += _tool_results(await agent.generate("note this", thread_id="t1", resource_id=resource))
        return outcomes

    @pytest.mark.parametrize("scope", SCOPES)
    async def test_the_update_reasons(self, store_factory: StoreFactory, scope: str) -> None:
        async with working_memory(store_factory(), template=self.TEMPLATE, scope=scope, version="vnext") as memory:
            tools = memory.list_tools()
            assert set(tools["updateWorkingMemory"].parameters["properties"]) == {
                "newMemory", "searchString", "updateReason"}
            outcomes = await self._run(
                memory,
                _vnext_call(newMemory="# Notes\n- "),  # the template with no data: nothing to store yet
                _vnext_call(newMemory="- likes tea"),
                _vnext_call(newMemory="- likes tea"),  # already there
                _vnext_call(newMemory="- lives in Lyon", searchString="ignored", updateReason="append-new-memory"),
                _vnext_call(newMemory="- likes green tea", searchString="- likes tea",
                            updateReason="clarify-existing-memory"),
                _vnext_call(newMemory="- works nights", searchString="- not there",
                            updateReason="clarify-existing-memory"),
                _vnext_call(newMemory="- x", updateReason="clarify-existing-memory"),
            )
            assert outcomes == [
                {"success": False, "reason": "try again when you have data to add. newMemory was equal to the "
                                             "working memory template"},
                {"success": True, "reason": "started new working memory"},
                {"success": False, "reason": "attempted to insert duplicate data into working memory. this entry "
                                             "was skipped"},
                {"success": True, "reason": "appended newMemory to end of working memory"},
                {"success": True, "reason": "found and replaced searchString with newMemory"},
                {"success": True, "reason": "attempted to replace working memory string that doesn't exist. "
                                            "Appending to working memory instead."},
                {"success": False, "reason": 'updateReason was clarify-existing-memory but no searchString was '
                                             'provided. Unable to replace undefined with "- x"'},
            ]
            stored = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert stored == "- likes green tea\n- lives in Lyon\n- works nights"

    async def test_replace_irrelevant_appends_in_resource_scope(self, store_factory: StoreFactory) -> None:
        async with working_memory(store_factory(), template=self.TEMPLATE, version="vnext") as memory:
            await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="- old fact")
            outcomes = await self._run(memory, _vnext_call(newMemory="- new fact", searchString="- old fact",
                                                           updateReason="replace-irrelevant-memory"))
            assert outcomes == [{"success": True, "reason": "appended newMemory to end of working memory"}]
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "- old fact\n- new fact"

    async def test_the_instruction_is_the_vnext_variant(self, store_factory: StoreFactory) -> None:
        async with working_memory(store_factory(), template=self.TEMPLATE, version="vnext") as memory:
            text = await memory.get_system_message(thread_id="t1", resource_id="r1")
            assert text is not None and text.startswith("WORKING_MEMORY_SYSTEM_INSTRUCTION:\n")
            assert "5. If your working memory already holds the information, there is no need to call" in text
            assert "<working_memory_data>\nnull\n</working_memory_data>" in text
            assert "Only store information if it's in the working memory template" in text  # a custom template
        async with working_memory(store_factory(), version="vnext") as memory:
            text = await memory.get_system_message(thread_id="t1", resource_id="r1")
            assert text is not None and "Only store information if it's in the working memory template" not in text


class _CountingStore(SQLiteStore):
    """Counts the thread rows read from the file."""

    thread_reads = 0

    async def get_thread(self, thread_id: str) -> Any:
        self.thread_reads += 1
        return await super().get_thread(thread_id)


@pytest.mark.parametrize("scope", SCOPES)
async def test_a_turn_that_updates_working_memory_reads_its_thread_by_one_route(tmp_path: Path, scope: str) -> None:
    """The tool checks the thread through its actor (the row the turn already holds), then writes in one
    transaction: no extra read of the row from the file on the way."""
    store = _CountingStore(tmp_path / "count.db")
    async with working_memory(store, scope=scope) as memory:
        agent = Agent("a", "be helpful", ScriptedModel(["hi", _wm_call("# Me\n- name: Ada"), "noted"]),
                      memory=memory)
        await agent.generate("Hello", thread_id="t1", resource_id="r1")  # the thread exists, its actor is warm
        store.thread_reads = 0
        await agent.generate("I am Ada", thread_id="t1", resource_id="r1")
        assert store.thread_reads == 0
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Me\n- name: Ada"
