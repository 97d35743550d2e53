"""Thread titles, and observational memory: old messages condensed into dated observations."""

import anyio

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.models import ScriptedModel
from threadmind.stores import SQLiteStore


async def main() -> None:
    # Titles: after a turn on an untitled thread, a model names it (once; it never retitles).
    titler = ScriptedModel(["Flights to Tokyo"])
    async with Memory(storage=SQLiteStore("titles.db"), options={"generateTitle": {"model": titler}}) as memory:
        await Agent("assistant", "Be helpful.", ScriptedModel(["Sure, when?"]), memory=memory).generate(
            "Find me a flight to Tokyo", thread_id="t1", resource_id="ada")
    # The title is made in the background; closing the memory waited for it.
    async with Memory(storage=SQLiteStore("titles.db")) as memory:
        thread = await memory.get_thread_by_id("t1")
        print("title:", thread.title if thread else None)

    # Observational memory: past `messageTokens` unobserved tokens, an Observer model turns old messages into
    # observations that replace them in the model's context.
    observer = ScriptedModel(["* 🔴 Ada plans a family trip to Tokyo in April",
                              "* 🟡 Ada wants a hotel near the station, breakfast included"] * 5)

    options = {"observationalMemory": {"model": observer, "observation": {"messageTokens": 40}}}
    async with Memory(storage=SQLiteStore("om.db"), options=options) as memory:
        model = ScriptedModel(["Noted."] * 3)
        agent = Agent("assistant", "Be helpful.", model, memory=memory)
        for text in ["I am planning a long trip to Tokyo in April with my family of four people",
                     "We would like a hotel near the station with breakfast included every day",
                     "What should we pack?"]:
            await agent.generate(text, thread_id="t2", resource_id="ada")
        seen = model.requests[-1]  # what the model saw on the last turn
        block = next(text for text in seen.system if "<observations>" in text)
        print(block.split("<observations>")[1].split("</observations>")[0].strip())
        print("sent verbatim:", [m.text for m in seen.messages if not m.text.startswith("<system-reminder>")])


anyio.run(main)
