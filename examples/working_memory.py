"""Working memory: facts about a user that every conversation of that user sees, updated by the model."""

import anyio
import msgspec

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import SQLiteStore


class Profile(msgspec.Struct):  # a Pydantic model or a JSON Schema dict works too
    name: str | None = None
    city: str | None = None
    diet: list[str] = []


async def main() -> None:
    # Template mode (the default): the model rewrites a Markdown document with the updateWorkingMemory tool.
    model = ScriptedModel([
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory",
                                           {"memory": "# User Information\n- **First Name**: Ada\n"})]),
        "Nice to meet you, Ada!",
    ])
    async with Memory(storage=SQLiteStore("wm.db"), options={"workingMemory": {"enabled": True}}) as memory:
        await Agent("assistant", "Be helpful.", model, memory=memory).generate(
            "Hi, I'm Ada", thread_id="t1", resource_id="ada")
        print(await memory.get_working_memory(thread_id="t1", resource_id="ada"))

    # Schema mode: the model sends only what changed; it is validated against the type and merged.
    model = ScriptedModel([
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": {"city": "Lyon"}})]),
        "Noted: Lyon.",
    ])
    options = {"workingMemory": {"enabled": True, "schema": Profile}}
    async with Memory(storage=SQLiteStore("wm-schema.db"), options=options) as memory:
        await memory.update_working_memory(thread_id="t1", resource_id="ada", working_memory='{"name": "Ada"}')
        await Agent("assistant", "Be helpful.", model, memory=memory).generate(
            "I moved to Lyon", thread_id="t1", resource_id="ada")
        print(await memory.get_working_memory_object(thread_id="t1", resource_id="ada"))


anyio.run(main)
