"""Working-memory schemas: Pydantic models, msgspec Structs and JSON Schemas (draft-07, 2020-12).

Each kind of schema: the model sees its JSON Schema, a partial update merges into the stored document and the
whole is validated (invalid updates are refused naming the path, and nothing is stored), and the typed read
returns the model/struct instance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest
from pydantic import BaseModel, Field
from tests._factories import working_memory

from threadmind.agent import Agent, ToolContext
from threadmind.codecs import ToolInvocationPart
from threadmind.errors import ConfigError, ValidationError
from threadmind.memory import Memory, MemoryConfig, WorkingMemoryConfig
from threadmind.models import ModelResponse, ToolCall
from threadmind.models._scripted import ScriptedModel
from threadmind.stores import Store
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore


# The same profile, four ways -------------------------------------------------------------------------
class PAddress(BaseModel):
    city: str
    zip: Annotated[str, Field(pattern=r"^\d{5}$")] | None = None


class PProfile(BaseModel):
    name: Annotated[str, Field(pattern="^[A-Z]")] | None = None
    age: Annotated[int, Field(ge=0)] | None = None
    contact: Annotated[str, Field(pattern="@")] | Annotated[int, Field(ge=1000)] | None = None
    address: PAddress | None = None
    tags: Annotated[list[str], Field(min_length=1)] | None = None
    mood: Literal["happy", "sad"] | None = None


class MAddress(msgspec.Struct, kw_only=True):
    city: str
    zip: Annotated[str, msgspec.Meta(pattern=r"^\d{5}$")] | None = None


class MProfile(msgspec.Struct, kw_only=True):
    name: Annotated[str, msgspec.Meta(pattern="^[A-Z]")] | None = None
    age: Annotated[int, msgspec.Meta(ge=0)] | None = None
    contact: Annotated[str, msgspec.Meta(pattern="@")] | Annotated[int, msgspec.Meta(ge=1000)] | None = None
    address: MAddress | None = None
    tags: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    mood: Literal["happy", "sad"] | None = None


class Node(msgspec.Struct):
    """A recursive type: its schema cannot be inlined."""

    label: str
    children: list[Node] = []


def json_profile(draft: str) -> dict[str, Any]:
    """The profile as a JSON Schema; draft-07 names no ``$schema`` (the default) and keeps ``definitions``."""
    defs = "definitions" if draft == "draft-07" else "$defs"
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z]"},
            "age": {"type": "integer", "minimum": 0},
            "email": {"type": "string", "format": "email"},
            "contact": {"anyOf": [{"type": "string", "pattern": "@"}, {"type": "integer", "minimum": 1000}]},
            "address": {"$ref": f"#/{defs}/Address"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "mood": {"enum": ["happy", "sad"]},
        },
        defs: {"Address": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"}, "zip": {"type": "string", "pattern": r"^\d{5}$"}}}},
    }
    if draft == "2020-12":
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return schema


class Case:
    def __init__(self, source: Any, raw: dict[str, Any], typed: Callable[[dict[str, Any]], Any], dialect: str):
        self.source = source
        self.raw = raw  # the JSON Schema the kind itself writes
        self.typed = typed
        self.dialect = dialect


DRAFT_07 = "http://json-schema.org/draft-07/schema#"
DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
CASES = {
    "pydantic": Case(PProfile, PProfile.model_json_schema(), PProfile.model_validate, DRAFT_2020),
    "msgspec": Case(MProfile, msgspec.json.schema(MProfile), lambda doc: msgspec.convert(doc, MProfile), DRAFT_2020),
    "draft-07": Case(json_profile("draft-07"), json_profile("draft-07"), lambda doc: doc, DRAFT_07),
    "2020-12": Case(json_profile("2020-12"), json_profile("2020-12"), lambda doc: doc, DRAFT_2020),
}
KINDS = [pytest.param(name, id=name) for name in CASES]


def inlined(node: Any, root: dict[str, Any] | None = None) -> Any:
    """A test oracle: the schema with each ``$ref`` replaced by its target (no recursion in these schemas)."""
    root = node if root is None else root
    if isinstance(node, list):
        return [inlined(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        _, group, name = node["$ref"].split("/")
        rest = {k: inlined(v, root) for k, v in node.items() if k not in ("$ref", "$defs", "definitions")}
        return {**inlined(root[group][name], root), **rest}
    return {k: inlined(v, root) for k, v in node.items() if k not in ("$defs", "definitions", "$schema")}


# helpers -----------------------------------------------------------------------------------------------
def _memory(schema: Any, store: Store | None = None, **wm: Any) -> Memory:
    return working_memory(store, schema=schema, **wm)


def _wm_call(memory: Any, call_id: str = "c1") -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(call_id, "updateWorkingMemory", {"memory": memory})])


def _tool_results(result: Any) -> list[Any]:
    return [part.tool_invocation.result for message in result.messages for part in message.content.parts
            if isinstance(part, ToolInvocationPart)]


async def _stored(memory: Memory) -> Any:
    raw = await memory.get_working_memory(thread_id="t1", resource_id="r1")
    return None if raw is None else json.loads(raw)


async def _update(memory: Memory, payload: Any) -> Any:
    """One updateWorkingMemory call with the tool's own context (as an agent turn makes it)."""
    tool = memory.list_tools()["updateWorkingMemory"]
    return await tool.run({"memory": payload}, ToolContext(thread_id="t1", resource_id="r1", memory=memory))


VALID = {"name": "Ada", "age": 36, "contact": "ada@example.org", "address": {"city": "London", "zip": "12345"},
         "tags": ["math"], "mood": "happy"}


# what the model sees -------------------------------------------------------------------------------
class TestWhatTheModelSees:
    @pytest.mark.parametrize("kind", KINDS)
    async def test_tool_parameters_are_the_schema(self, kind: str) -> None:
        case = CASES[kind]
        model = ScriptedModel(["ok"])
        async with _memory(case.source) as memory:
            await Agent("a", "i", model, memory=memory).generate("hi", thread_id="t1", resource_id="r1")
        (spec,) = [tool for tool in model.requests[0].tools if tool.name == "updateWorkingMemory"]
        assert spec.parameters["required"] == ["memory"]
        shown = spec.parameters["properties"]["memory"]
        assert shown == inlined(case.raw)  # the kind's own JSON Schema, its $refs inlined
        assert "$ref" not in json.dumps(spec.parameters)
        assert shown["properties"]["address"] != {}
        assert set(shown["properties"]) >= {"name", "age", "contact", "address", "tags", "mood"}

    @pytest.mark.parametrize("kind", KINDS)
    async def test_template_and_instruction(self, kind: str) -> None:
        case = CASES[kind]
        async with _memory(case.source) as memory:
            template = memory.get_working_memory_template()
            assert template is not None and template.format == "json"
            content = json.loads(template.content)
            assert content.pop("$schema") == case.dialect
            assert content == inlined(case.raw)
            await _update(memory, {"name": "Ada"})
            text = await memory.get_system_message(thread_id="t1", resource_id="r1")
        assert text is not None
        assert "When working with json data, the object format below represents the template:" in text
        assert '"tags":' in text  # the skeleton of the inlined schema
        assert '<working_memory_data>\n{"name":"Ada"}\n</working_memory_data>' in text


# updates -------------------------------------------------------------------------------------------------
class TestUpdates:
    @pytest.mark.parametrize("kind", KINDS)
    @pytest.mark.parametrize("backend", ["memory", "sqlite"])
    async def test_partial_updates_merge_store_and_read_typed(self, kind: str, backend: str, tmp_path: Path) -> None:
        case = CASES[kind]
        store = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "wm.db")
        model = ScriptedModel([
            _wm_call({"name": "Ada", "age": 36, "address": {"city": "London"}}), "ok",
            # a strict provider pads optional keys with nulls: they change nothing (nested ones too)
            _wm_call({"name": None, "address": {"zip": "12345"}, "tags": ["math"], "mood": None}), "ok",
        ])
        async with _memory(case.source, store) as memory:
            agent = Agent("a", "i", model, memory=memory)
            first = await agent.generate("1", thread_id="t1", resource_id="r1")
            assert _tool_results(first) == [{"success": True}]
            assert await _stored(memory) == {"name": "Ada", "age": 36, "address": {"city": "London"}}
            second = await agent.generate("2", thread_id="t1", resource_id="r1")
            assert _tool_results(second) == [{"success": True}]
            doc = {"name": "Ada", "age": 36, "address": {"city": "London", "zip": "12345"}, "tags": ["math"]}
            assert await _stored(memory) == doc
            typed = await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
            assert typed == case.typed(doc)
            assert type(typed) is type(case.typed(doc))
            assert isinstance(await memory.get_working_memory(thread_id="t1", resource_id="r1"), str)

    INVALID = [
        pytest.param({"age": -1}, "memory.age", id="minimum"),
        pytest.param({"name": "ada"}, "memory.name", id="pattern"),
        pytest.param({"contact": "no-at-sign"}, "memory.contact", id="anyOf"),
        pytest.param({"contact": 12}, "memory.contact", id="anyOf-other-branch"),
        pytest.param({"address": {"zip": "N1"}}, "memory.address.zip", id="ref-sub-object"),
        pytest.param({"tags": []}, "memory.tags", id="minItems"),
        pytest.param({"tags": ["a", 2]}, "memory.tags[1]", id="item-type"),
        pytest.param({"mood": "angry"}, "memory.mood", id="enum"),
        pytest.param({"age": "old"}, "memory.age", id="wrong-type"),
        pytest.param({"address": "London"}, "memory.address", id="object-expected"),
    ]

    @pytest.mark.parametrize("kind", KINDS)
    @pytest.mark.parametrize(("payload", "path"), INVALID)
    async def test_invalid_update_is_refused_and_nothing_stored(self, kind: str, payload: Any, path: str) -> None:
        case = CASES[kind]
        model = ScriptedModel([_wm_call(VALID), "ok", _wm_call(payload), "ok"])
        async with _memory(case.source) as memory:
            agent = Agent("a", "i", model, memory=memory)
            await agent.generate("1", thread_id="t1", resource_id="r1")
            before = await memory.get_working_memory(thread_id="t1", resource_id="r1")
            assert before is not None and json.loads(before) == VALID
            (outcome,) = _tool_results(await agent.generate("2", thread_id="t1", resource_id="r1"))
            assert outcome["error"] is True
            assert outcome["message"].startswith("Tool input validation failed for update-working-memory: ")
            assert path in outcome["message"], outcome["message"]
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == before

    @pytest.mark.parametrize("kind", KINDS)
    async def test_first_invalid_update_stores_nothing(self, kind: str) -> None:
        async with _memory(CASES[kind].source) as memory:
            outcome = await _update(memory, {"name": "Ada", "age": -5})
            assert outcome["error"] is True and "memory.age" in outcome["message"]
            assert await memory.get_working_memory(thread_id="t1", resource_id="r1") is None

    @pytest.mark.parametrize("kind", ["draft-07", "2020-12"])
    async def test_format_is_checked(self, kind: str) -> None:
        async with _memory(CASES[kind].source) as memory:
            bad = await _update(memory, {"email": "not an address"})
            assert bad["error"] is True and "memory.email" in bad["message"] and "email" in bad["message"]
            assert await _update(memory, {"email": "ada@example.org"}) == {"success": True}
            assert await _stored(memory) == {"email": "ada@example.org"}

    @pytest.mark.parametrize("kind", ["draft-07", "2020-12"])
    async def test_a_json_schema_tolerates_missing_required_keys(self, kind: str) -> None:
        """Working memory fills in over turns: a JSON Schema's required key may be missing, and a null on it
        deletes it; every other keyword still applies."""
        async with _memory(CASES[kind].source) as memory:
            assert await _update(memory, {"address": {"zip": "12345"}}) == {"success": True}
            assert await _update(memory, {"address": {"city": "Paris"}}) == {"success": True}
            assert await _update(memory, {"address": {"city": None}}) == {"success": True}
            assert await _stored(memory) == {"address": {"zip": "12345"}}

    @pytest.mark.parametrize("kind", ["pydantic", "msgspec"])
    async def test_a_type_keeps_its_required_fields(self, kind: str) -> None:
        """The merged document must load as the type: a sub-object without its required field is refused,
        and so is a null that would delete one."""
        async with _memory(CASES[kind].source) as memory:
            missing = await _update(memory, {"address": {"zip": "12345"}})
            assert missing["error"] is True and "memory.address" in missing["message"]
            assert "city" in missing["message"]
            assert await _update(memory, {"address": {"city": "Paris"}}) == {"success": True}
            deleted = await _update(memory, {"address": {"city": None}})
            assert deleted["error"] is True and "city" in deleted["message"]
            assert await _stored(memory) == {"address": {"city": "Paris"}}

    async def test_the_merged_document_is_validated_not_only_the_update(self) -> None:
        """The stored document is checked as a whole: an invalid stored value refuses the next update."""
        async with _memory(PProfile) as memory:
            await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory='{"age": -3}')
            outcome = await _update(memory, {"name": "Ada"})
            assert outcome["error"] is True and "memory.age" in outcome["message"]
            assert await _update(memory, {"name": "Ada", "age": 3}) == {"success": True}
            assert await _stored(memory) == {"name": "Ada", "age": 3}


# the typed read ------------------------------------------------------------------------------------------
class TestTypedRead:
    @pytest.mark.parametrize("kind", KINDS)
    async def test_nothing_stored_reads_none(self, kind: str) -> None:
        async with _memory(CASES[kind].source) as memory:
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1") is None

    async def test_instances(self) -> None:
        async with _memory(PProfile) as memory:
            await _update(memory, VALID)
            profile = await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
        assert isinstance(profile, PProfile) and isinstance(profile.address, PAddress)
        assert profile.address.zip == "12345" and profile.tags == ["math"]
        async with _memory(MProfile) as memory:
            await _update(memory, VALID)
            struct = await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
        assert isinstance(struct, MProfile) and struct.address == MAddress(city="London", zip="12345")

    @pytest.mark.parametrize("kind", KINDS)
    async def test_stored_text_that_does_not_match_raises(self, kind: str) -> None:
        async with _memory(CASES[kind].source) as memory:
            await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory='{"age": -1}')
            with pytest.raises(ValidationError, match=r"memory\.age"):
                await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
            await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="not json")
            with pytest.raises(ValidationError):
                await memory.get_working_memory_object(thread_id="t1", resource_id="r1")

    async def test_markdown_and_disabled(self) -> None:
        async with Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True}}) as memory:
            with pytest.raises(ConfigError, match="get_working_memory"):
                await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
        async with Memory(storage=InMemoryStore()) as memory:
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1") is None

    async def test_thread_scope(self) -> None:
        async with _memory(MProfile, scope="thread") as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            await _update(memory, {"name": "Ada"})
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1") == MProfile(name="Ada")
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r2") is None


# configuration -----------------------------------------------------------------------------------------
class TestConfig:
    @pytest.mark.parametrize("kind", KINDS)
    async def test_schema_in_dict_options(self, kind: str) -> None:
        source = CASES[kind].source
        model = ScriptedModel([_wm_call({"name": "Ada"}), "ok"])
        options = {"workingMemory": {"enabled": True, "schema": source}, "lastMessages": 5}
        async with Memory(storage=InMemoryStore(), options=options) as memory:
            assert memory.options.working_memory.schema == source
            await Agent("a", "i", model, memory=memory).generate("1", thread_id="t1", resource_id="r1")
            assert await _stored(memory) == {"name": "Ada"}
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1") == \
                CASES[kind].typed({"name": "Ada"})

    def test_repr_names_the_type(self) -> None:
        text = repr(WorkingMemoryConfig(enabled=True, schema=PProfile))
        assert f"schema={PProfile.__module__}.PProfile" in text and "<class" not in text
        assert text.startswith("WorkingMemoryConfig(enabled=True, template=None, schema=")
        assert "scope='resource'" in text
        nested = repr(MemoryConfig(working_memory=WorkingMemoryConfig(enabled=True, schema=MProfile)))
        assert f"schema={MProfile.__module__}.MProfile" in nested
        plain = repr(WorkingMemoryConfig(enabled=True, schema={"type": "object"}))
        assert "schema={'type': 'object'}" in plain

    def test_equality_and_defaults(self) -> None:
        assert WorkingMemoryConfig(enabled=True, schema=PProfile) == WorkingMemoryConfig(enabled=True, schema=PProfile)
        assert WorkingMemoryConfig(enabled=True, schema=PProfile) != WorkingMemoryConfig(enabled=True, schema=MProfile)
        assert WorkingMemoryConfig().schema is None and WorkingMemoryConfig().compiled_schema is None

    async def test_per_call_merge(self) -> None:
        """A per-call schema replaces the instance's (a type, a dict, in a dict or a MemoryConfig) and other
        per-call options keep the instance's type."""
        model = ScriptedModel([_wm_call({"name": "Ada", "age": -1}), "ok", _wm_call({"name": "Ada"}), "ok"])
        async with _memory(json_profile("2020-12")) as memory:
            tools = memory.list_tools(memory_config={"workingMemory": {"schema": PProfile}})
            shown = tools["updateWorkingMemory"].parameters["properties"]["memory"]
            assert shown["title"] == "PProfile"
            again = memory.list_tools(memory_config={"workingMemory": {"schema": PProfile}})
            assert again["updateWorkingMemory"].parameters == tools["updateWorkingMemory"].parameters
            agent = Agent("a", "i", model, memory=memory)
            (refused,) = _tool_results(await agent.generate(
                "1", thread_id="t1", resource_id="r1",
                memory_options={"workingMemory": {"schema": MProfile}}))
            assert refused["error"] is True and "Expected `int` >= 0" in refused["message"]
            options = MemoryConfig(working_memory=WorkingMemoryConfig(enabled=True, schema=MProfile))
            await agent.generate("2", thread_id="t1", resource_id="r1", memory_options=options)
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1",
                                                          memory_config=options) == MProfile(name="Ada")
            assert await memory.get_working_memory_object(thread_id="t1", resource_id="r1") == {"name": "Ada"}
        async with _memory(PProfile) as typed:
            read_only = typed.list_tools(memory_config={"readOnly": True})
            assert read_only == {}
            template = typed.get_working_memory_template(memory_config={"lastMessages": 3})
            assert template is not None and json.loads(template.content)["title"] == "PProfile"
            swapped = typed.get_working_memory_template(memory_config={"workingMemory": {"schema": MProfile}})
            assert swapped is not None and json.loads(swapped.content)["title"] == "MProfile"

    BAD = [
        pytest.param(5, "must be a JSON Schema dict, a Pydantic model class or a msgspec Struct type", id="int"),
        pytest.param(str, "must be a JSON Schema dict, a Pydantic model class or a msgspec Struct type", id="str"),
        pytest.param(PProfile(), "pass the class, not an instance", id="model-instance"),
        pytest.param(MProfile(), "pass the class, not an instance", id="struct-instance"),
        pytest.param({"type": "objekt"}, "not a valid JSON Schema", id="bad-type"),
        pytest.param({"properties": {"age": {"minimum": "zero"}}}, "properties.age.minimum", id="bad-keyword"),
        pytest.param({"type": "string"}, "must describe a JSON object", id="not-an-object"),
        pytest.param({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "points at nothing", id="dangling-ref"),
        pytest.param({"properties": {"a": {"$ref": "https://example.org/a.json"}}}, "not a local reference",
                     id="remote-ref"),
        pytest.param({"$schema": "https://example.org/my-draft"}, "unknown $schema", id="unknown-draft"),
        pytest.param({"properties": {"a": {"default": object()}}}, "JSON values only", id="not-json"),
    ]

    @pytest.mark.parametrize(("schema", "message"), BAD)
    def test_invalid_schema_is_a_config_error_at_construction(self, schema: Any, message: str) -> None:
        with pytest.raises(ConfigError) as caught:
            Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "schema": schema}})
        assert message in str(caught.value)
        with pytest.raises(ConfigError, match=message.replace("$", r"\$").replace(".", r"\.")):
            WorkingMemoryConfig(enabled=True, schema=schema)

    def test_array_like_struct_is_refused(self) -> None:
        class Pair(msgspec.Struct, array_like=True):
            a: int
            b: int

        with pytest.raises(ConfigError, match="must describe a JSON object"):
            WorkingMemoryConfig(enabled=True, schema=Pair)

    def test_template_and_schema_exclusive(self) -> None:
        with pytest.raises(ConfigError, match="either a template or a schema"):
            WorkingMemoryConfig(enabled=True, template="# Me", schema=PProfile)

    def test_without_jsonschema_a_json_schema_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema raises ImportError
        unique = {"type": "object", "properties": {"only-in-this-test": {"type": "string"}}}
        with pytest.raises(ConfigError, match=r"pip install 'threadmind\[schema\]'"):
            Memory(storage=InMemoryStore(), options={"workingMemory": {"enabled": True, "schema": unique}})
        WorkingMemoryConfig(enabled=True, schema=MProfile)  # a type needs no validator package

    def test_optional_dependencies_stay_unloaded(self) -> None:
        code = (
            "import sys, msgspec\n"
            "from threadmind import Memory, WorkingMemoryConfig\n"
            "assert 'jsonschema' not in sys.modules\n"
            "class P(msgspec.Struct):\n    name: str | None = None\n"
            "Memory(options={'workingMemory': {'enabled': True, 'schema': P}})\n"
            "assert 'jsonschema' not in sys.modules\n"
            "Memory(options={'workingMemory': {'enabled': True, 'schema': {'type': 'object'}}})\n"
            "print(sorted(m for m in ('pydantic', 'jsonschema') if m in sys.modules))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "['jsonschema']"


# JSON Schema drafts and references ---------------------------------------------------------------------
class TestDrafts:
    TUPLE = {"type": "object", "properties": {"pair": {"type": "array", "items": [{"type": "string"},
                                                                                   {"type": "integer"}]}}}

    async def test_draft07_by_default(self) -> None:
        """Without ``$schema`` a schema is draft-07 (the reference's draft): array ``items`` is a tuple."""
        async with _memory(self.TUPLE) as memory:
            template = memory.get_working_memory_template()
            assert template is not None and json.loads(template.content)["$schema"] == DRAFT_07
            refused = await _update(memory, {"pair": ["a", "b"]})
            assert refused["error"] is True and "memory.pair[1]" in refused["message"]
            assert await _update(memory, {"pair": ["a", 1]}) == {"success": True}

    def test_2020_12_when_named(self) -> None:
        with pytest.raises(ConfigError, match="2020-12"):
            WorkingMemoryConfig(enabled=True, schema={"$schema": DRAFT_2020, **self.TUPLE})

    async def test_2020_12_prefix_items(self) -> None:
        schema = {"$schema": DRAFT_2020, "type": "object", "properties": {
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}}}
        async with _memory(schema) as memory:
            refused = await _update(memory, {"pair": ["a", "b"]})
            assert refused["error"] is True and "memory.pair[1]" in refused["message"]

    async def test_ref_siblings_follow_the_draft(self) -> None:
        """Keywords beside a ``$ref`` are ignored up to draft-07 and apply from 2019-09 on."""
        def schema(draft: str | None) -> dict[str, Any]:
            body: dict[str, Any] = {"type": "object", "$defs": {"n": {"type": "integer"}},
                                    "properties": {"n": {"$ref": "#/$defs/n", "maximum": 9}}}
            return body if draft is None else {"$schema": draft, **body}

        async with _memory(schema(None)) as legacy:
            assert await _update(legacy, {"n": 50}) == {"success": True}
        async with _memory(schema(DRAFT_2020)) as modern:
            shown = modern.list_tools()["updateWorkingMemory"].parameters["properties"]["memory"]
            assert shown["properties"]["n"] == {"type": "integer", "maximum": 9}
            refused = await _update(modern, {"n": 50})
            assert refused["error"] is True and "memory.n" in refused["message"]

    async def test_property_names_are_not_keywords(self) -> None:
        """A property called ``default`` or ``enum`` is a schema like any other: its ``$ref`` is inlined."""
        schema = {"type": "object", "$defs": {"pos": {"type": "integer", "minimum": 1}},
                  "properties": {"default": {"$ref": "#/$defs/pos"}, "enum": {"type": "string"}}}
        async with _memory(schema) as memory:
            shown = memory.list_tools()["updateWorkingMemory"].parameters["properties"]["memory"]
            assert shown["properties"] == {"default": {"type": "integer", "minimum": 1}, "enum": {"type": "string"}}
            refused = await _update(memory, {"default": 0})
            assert refused["error"] is True and "memory.default" in refused["message"]

    async def test_recursive_schema_keeps_its_defs(self) -> None:
        async with _memory(Node) as memory:
            params = memory.list_tools()["updateWorkingMemory"].parameters
            assert params["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
            assert params["properties"]["memory"]["properties"]["label"] == {"type": "string"}
            refused = await _update(memory, {"label": "root", "children": [{"label": 1}]})
            assert refused["error"] is True and "memory.children[0].label" in refused["message"]
            assert await _update(memory, {"label": "root", "children": [{"label": "leaf"}]}) == {"success": True}
            tree = await memory.get_working_memory_object(thread_id="t1", resource_id="r1")
            assert tree == Node("root", [Node("leaf")])

