"""An agent with memory, a guardrail and a client tool (the scripted model stands in for a real one)."""

import anyio

from threadmind import Memory
from threadmind.agent import Agent, Tool
from threadmind.codecs import message_to_dict
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.processors import ProcessInputArgs
from threadmind.stores import SQLiteStore


class NoSecrets:
    """A guardrail: any object with an ``id`` and a ``process_input`` method is a processor."""

    id = "no-secrets"

    async def process_input(self, args: ProcessInputArgs) -> None:
        if any("password" in m.text.lower() for m in args.messages if m.role == "user"):
            args.abort("Please don't share passwords.")  # ends the run; nothing is stored


async def main() -> None:
    model = ScriptedModel([  # or OpenAIChatModel("gpt-4o-mini"), or the string "openai/gpt-4o-mini"
        "Hi Ada! Noted.",
        ModelResponse(tool_calls=[ToolCall("call-1", "confirmBooking", {"flight": "NH 106"})]),
        "Booked - have a great trip!",
    ])
    confirm = Tool("confirmBooking", "Ask the user to confirm a booking",
                   {"type": "object", "properties": {"flight": {"type": "string"}}})  # no execute: a client tool
    async with Memory(storage=SQLiteStore("agent.db")) as memory:
        agent = Agent("travel", "You are a travel agent.", model, memory=memory, tools=[confirm],
                      input_processors=[NoSecrets()])

        hello = await agent.generate("Hi, I'm Ada", thread_id="trip-1", resource_id="ada")
        print(hello.text)
        blocked = await agent.generate("my password is hunter2", thread_id="trip-1", resource_id="ada")
        print("blocked:", blocked.tripwire.reason if blocked.tripwire else None)

        pending = await agent.generate("Book flight NH 106", thread_id="trip-1", resource_id="ada")
        print("finish:", pending.finish_reason)  # "tool-calls": the call waits for the client
        answer = message_to_dict(pending.messages[-1])  # the client answers on the same message
        answer["content"]["parts"][-1]["toolInvocation"].update(state="result", result={"confirmed": True})
        done = await agent.generate([answer], thread_id="trip-1", resource_id="ada")
        print(done.text)

        history = await memory.recall("trip-1", resource_id="ada")
        print(len(history.messages), "messages stored;", "the model saw", len(model.requests[-1].messages))


anyio.run(main)
