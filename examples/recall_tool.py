"""Observational memory in retrieval mode: observations name the messages they came from, and the agent's `recall`
tool reads those messages back when the gist is not enough."""

import re

import anyio

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.codecs import ToolInvocationPart
from threadmind.models import ModelRequest, ModelResponse, ScriptedModel, ToolCall
from threadmind.stores import SQLiteStore


def observe(request: ModelRequest) -> str:  # the Observer keeps the gist, not the exact value
    return "* 🔴 Ada shared the door code of the Lisbon flat"


def answer(request: ModelRequest) -> ModelResponse | str:
    """A stand-in for a real model: it looks up what its observations only summarise."""
    if "exact" not in request.messages[-1].text and not isinstance(request.messages[-1].content.parts[-1],
                                                                    ToolInvocationPart):
        return "Noted."
    recalled = [p for m in request.messages for p in m.content.parts if isinstance(p, ToolInvocationPart)]
    if not recalled:  # read the raw messages behind the observation group shown in the context
        system = "\n".join(request.system)
        first, last = re.findall(r"_range: `([^:`]+):([^`]+)`_", system)[0]
        print("the model sees:", re.findall(r"\* 🔴 .*", system)[0])
        print("it recalls the messages before", "the group's last" if last != first else "its only one")
        return ModelResponse(tool_calls=[ToolCall("c1", "recall", {"cursor": last, "page": -1})])
    code = re.search(r"\d{4}-[A-Z]{2}", recalled[0].tool_invocation.result["messages"])
    return f"The door code is {code.group(0) if code else 'not in the messages'}."


async def main() -> None:
    options = {"observationalMemory": {"model": ScriptedModel(iter(lambda: observe, None)), "retrieval": True,
                                       "observation": {"messageTokens": 60}}}
    async with Memory(storage=SQLiteStore("recall.db"), options=options) as memory:
        agent = Agent("assistant", "Be helpful.", ScriptedModel(iter(lambda: answer, None)), memory=memory)
        await agent.generate("The door code of the Lisbon flat is 4821-AB, and the wifi password is on the fridge. "
                             "Please keep that in mind for our trip in April with the whole family.",
                             thread_id="t1", resource_id="ada")
        await memory.settled()  # the observation ran in the background
        result = await agent.generate("What was the exact door code?", thread_id="t1", resource_id="ada")
        print(result.text)


anyio.run(main)
