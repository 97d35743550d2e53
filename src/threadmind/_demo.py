"""The conversation ``threadmind demo`` plays: history, working memory, a title and a semantic hit across
threads, on whatever memory it is given, with scripted models (no network, no API key).

The scripted answers read what memory put in front of the model (the working memory, the messages
remembered from another thread), so what the demo prints is what memory did, not canned text.
"""

from __future__ import annotations

import re
import textwrap

import anyio

from .agent import Agent
from .memory import Memory
from .models import ModelRequest, ModelResponse, ScriptedModel, ToolCall

__all__ = ("DEMO_RESOURCE", "DEMO_THREADS", "demo_options", "play_conversation")

DEMO_RESOURCE = "ada"
DEMO_THREADS = ("demo-trip", "demo-dinner")
_TRIP, _DINNER = DEMO_THREADS
_PROFILE = "# User Information\n- **First Name**: Ada\n- **Plans**: a trip to Tokyo in April\n- **Diet**: vegetarian\n"
_OTHER_THREAD = "<remembered_from_other_conversation>"
_WIDTH = 96
_RECALL_PREFIX = re.compile(r"^Message from previous conversation at [^:]+:\d\d [AP]M: ")


def demo_options() -> dict[str, object]:
    """Memory options of the demo: last 10 messages, resource-wide semantic recall, working memory, titles."""
    return {
        "lastMessages": 10,
        "semanticRecall": {"topK": 2, "messageRange": 0, "scope": "resource"},
        "workingMemory": {"enabled": True, "scope": "resource"},
        "generateTitle": {"model": ScriptedModel(_title_for for _ in iter(int, 1))},
    }


def _title_for(request: ModelRequest) -> str:
    """The title model's answer: a short title for the conversation it was shown."""
    shown = " ".join(m.text for m in request.messages)
    return "Dinner ideas, Tokyo style" if "dinner" in shown.lower() else "Ada's trip to Tokyo"


def _say(who: str, text: str, indent: str = "  ") -> None:
    prefix = f"{indent}{who}: "
    print(textwrap.fill(text, _WIDTH, initial_indent=prefix, subsequent_indent=" " * len(prefix)))


def _remembered(request: ModelRequest) -> list[str]:
    """The messages semantic recall brought from other threads into ``request`` (``User: text`` each)."""
    lines: list[str] = []
    for block in request.system:
        if _OTHER_THREAD in block:
            body = block.split(_OTHER_THREAD, 1)[1].split("<end_remembered", 1)[0]
            lines += [_RECALL_PREFIX.sub("", line.strip()) for line in body.splitlines()
                      if line.strip().startswith("Message from")]
    return lines


def _working_memory_seen(request: ModelRequest) -> bool:
    return any("First Name**: Ada" in block for block in request.system)


def _dinner_answer(request: ModelRequest) -> ModelResponse:
    """Answer from what memory supplied: the profile (vegetarian) and the trip remembered from the other thread."""
    knows_diet = any("vegetarian" in block for block in request.system)
    knows_trip = any("Tokyo" in line for line in _remembered(request))
    if knows_diet and knows_trip:
        return ModelResponse(text="Since Tokyo is coming up in April: a vegetarian ramen night, to get in the mood?")
    return ModelResponse(text="How about pasta?")


def _turns_model() -> ScriptedModel:
    return ScriptedModel([
        ModelResponse(tool_calls=[ToolCall("wm-1", "updateWorkingMemory", {"memory": _PROFILE})]),
        "Lovely, Ada! Tokyo in April is cherry-blossom season. I'll keep in mind that you're vegetarian.",
        "Shinjuku is central and well connected; Asakusa is quieter and close to the old town.",
        _dinner_answer,
    ])


async def _title_of(memory: Memory, thread_id: str) -> str | None:
    """The title the title model gave ``thread_id``; it is written in the background, so wait a little."""
    with anyio.move_on_after(5.0):
        while True:
            thread = await memory.get_thread_by_id(thread_id)
            if thread is not None and thread.title:
                return thread.title
            await anyio.sleep(0.01)
    return None


def _print_given(request: ModelRequest) -> None:
    print("  memory gave the model, besides this thread's messages:")
    print(f"    the working memory of {DEMO_RESOURCE!r}: {'yes' if _working_memory_seen(request) else 'no'}")
    print(f"    messages found by semantic recall in thread {_TRIP!r}:")
    for line in _remembered(request) or ["(none)"]:
        print(textwrap.fill(line, _WIDTH, initial_indent="      ", subsequent_indent="        "))


async def play_conversation(memory: Memory) -> None:
    """Play the demo's two threads on ``memory`` (made with :func:`demo_options`) and print what happened."""
    model = _turns_model()
    agent = Agent("assistant", "You are a friendly travel and cooking assistant.", model, memory=memory)
    print(f"Thread {_TRIP!r} of resource {DEMO_RESOURCE!r}:")
    for text in ("Hi, I'm Ada. I'm planning a trip to Tokyo in April, and I'm vegetarian.",
                 "Which neighbourhood should we stay in?"):
        _say("user", text)
        result = await agent.generate(text, thread_id=_TRIP, resource_id=DEMO_RESOURCE)
        _say("assistant", result.text)
    print(f"  title, given by the title model after the first turn: {await _title_of(memory, _TRIP)!r}")

    profile = await memory.get_working_memory(thread_id=_TRIP, resource_id=DEMO_RESOURCE)
    print(f"\nWorking memory of {DEMO_RESOURCE!r} (the model wrote it with the updateWorkingMemory tool; "
          "every thread of the resource sees it):")
    for line in (profile or "").strip().splitlines():
        print(f"  {line}")

    print(f"\nA new thread {_DINNER!r} of the same resource:")
    question = "Any idea for dinner tonight? Something that fits my trip to Tokyo."
    _say("user", question)
    result = await agent.generate(question, thread_id=_DINNER, resource_id=DEMO_RESOURCE)
    _print_given(model.requests[-1])
    _say("assistant", result.text)
    print(f"  title: {await _title_of(memory, _DINNER)!r}")

    history = await memory.recall(_TRIP, resource_id=DEMO_RESOURCE)
    print(f"\nmemory.recall({_TRIP!r}) returns its last {len(history.messages)} messages, oldest first:")
    for message in history.messages:
        text = message.text or "(a call of the updateWorkingMemory tool)"
        print(textwrap.fill(text, _WIDTH, initial_indent=f"  {message.role:10} ", subsequent_indent=" " * 13))

