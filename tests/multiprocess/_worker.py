"""One worker process of the multi-process tests: a Memory (and an Agent on a ScriptedModel) over a shared store.

Run: ``python _worker.py CONFIG_JSON``. The worker builds its store and Memory, prints ``{"event": "ready"}``
and waits for a ``go`` line on stdin (so every worker starts at once), then runs its scenario and prints one JSON
object per line; the last one has ``"event": "done"``. Scenarios read further commands from stdin where they
need them (``go`` to end a held model call, commands of ``serve``).

The config: ``store`` (``{"kind": "sqlite"|"postgres", "target": path or DSN}``), ``scenario``, ``proc`` (this
worker's number), ``lease_ttl`` and the scenario's own fields.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from datetime import UTC, datetime
from typing import Any

import anyio

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.embedders import HashEmbedder
from threadmind.errors import ThreadmindError
from threadmind.events import StartEvent
from threadmind.memory import MemoryConfig, ObservationalMemoryConfig, SemanticRecallConfig, WorkingMemoryConfig
from threadmind.models import ModelRequest, ModelResponse, ToolCall
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import REFLECTOR_INSTRUCTIONS
from threadmind.stores import HnswVectorStore, MessageQuery, PostgresStore, SQLiteStore, Store
from threadmind.stores._keywords import supports_keywords
from threadmind.ui import messages_from_ui

DATA = re.compile(r"<working_memory_data>\n(.*?)\n</working_memory_data>", re.S)
SCHEMA = {"type": "object", "properties": {"seen": {"type": "object"}}}
TEMPLATE = "# Log"


def say(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class Lines:
    """stdin, one command per line (read off the event loop)."""

    def __init__(self) -> None:
        self._file = anyio.wrap_file(sys.stdin)

    async def next(self) -> str:
        line: str = await self._file.readline()
        if not line:
            raise SystemExit(0)  # the parent went away
        return line.strip()


def make_store(spec: dict[str, Any]) -> Store:
    if spec["kind"] == "sqlite":
        return SQLiteStore(spec["target"])
    return PostgresStore(spec["target"], max_size=4)


class Observer:
    """The Observer (and Reflector) of the ``om`` scenarios: reports each call (``observing``: the message texts it
    was given; ``reflecting``: the observations), takes ``delay`` seconds, and with ``block`` never answers (its
    process is to be killed mid-cycle)."""

    model_id = "test/observer"

    def __init__(self) -> None:
        self.proc = 0
        self.delay = 0.0
        self.block = False
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        prompt = request.messages[0].text
        if request.system and request.system[0] == REFLECTOR_INSTRUCTIONS:  # the Reflector: its observations
            say(event="reflecting", call=f"p{self.proc}-c{self.calls}", observations=prompt)
            await anyio.sleep(self.delay)
            return ModelResponse(text=f"* 🔴 reflected by p{self.proc}-c{self.calls}")
        new = prompt.split("New messages to observe:\n", 1)[-1]
        observed = re.findall(r"\] (?:User|Assistant): (p\d+ t\d+|reply to p\d+ t\d+)", new)
        say(event="observing", call=f"p{self.proc}-c{self.calls}", texts=observed)
        if self.block:
            await anyio.sleep_forever()
        await anyio.sleep(self.delay)
        return ModelResponse(text=f"* 🔴 obs p{self.proc}-c{self.calls}: " + ", ".join(observed))


OBSERVER = Observer()


def options(config: dict[str, Any]) -> MemoryConfig:
    wm = config.get("working_memory")
    om = config.get("om")
    return MemoryConfig(
        observational_memory=ObservationalMemoryConfig(model=OBSERVER, **om) if om else False,
        last_messages=config.get("last_messages", 10),
        working_memory=WorkingMemoryConfig(enabled=True, scope="resource", **wm) if wm else WorkingMemoryConfig(),
        semantic_recall=SemanticRecallConfig(top_k=3, message_range=0, scope="resource")
        if config.get("semantic") else False,
        thread_concurrency=config.get("policy", "enqueue"),
    )


def make_memory(config: dict[str, Any]) -> Memory:
    extra: dict[str, Any] = {}
    if config.get("semantic"):
        extra = {"vector": HnswVectorStore(config["hnsw_path"]), "embedder": HashEmbedder(64)}
    return Memory(storage=make_store(config["store"]), options=options(config), lease_ttl=config["lease_ttl"],
                  **extra)


def texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role in ("user", "assistant") and m.text]


# -- scenarios ------------------------------------------------------------------------------------------


async def wm(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """``turns`` agent turns, each of which changes working memory with one tool call. ``template``: every worker
    on one thread, each turn appending a line to the document it saw; ``schema``/``vnext``: a thread per worker,
    each turn adding one key / one line (resource scope, so every worker writes the same resource)."""
    mode, proc, turns = config["mode"], config["proc"], config["turns"]
    thread = "t-wm" if mode == "template" else f"t-wm-{proc}"
    done = 0

    def call(request: ModelRequest) -> ModelResponse:
        mark = f"p{proc} t{done}"
        if mode == "template":
            seen = DATA.search("\n".join(request.system))
            old = seen.group(1) if seen and seen.group(1) != "null" else TEMPLATE
            args: dict[str, Any] = {"memory": f"{old}\n- {mark}"}
        elif mode == "schema":
            args = {"memory": {"seen": {mark.replace(" ", "_"): True}}}
        else:
            args = {"newMemory": f"- {mark}", "updateReason": "append-new-memory"}
        return ModelResponse(tool_calls=[ToolCall(f"c{done}", "updateWorkingMemory", args)])

    model = ScriptedModel(step for _ in range(turns) for step in (call, "noted"))
    agent = Agent("wm", "You remember.", model, memory=memory)
    for done in range(turns):  # noqa: B007 - `call` reads it
        await agent.generate(f"turn {done} of p{proc}", thread_id=thread, resource_id="r-wm")
    say(event="done", turns=turns)


async def turns(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """``turns`` enqueued turns on one shared thread; reports what each turn's request held."""
    proc = config["proc"]
    seen: list[dict[str, Any]] = []

    def reply(request: ModelRequest) -> str:
        history = texts(request)
        seen.append({"input": history[-1], "history": history[:-1]})
        return f"reply to {history[-1]}"

    model = ScriptedModel(iter(lambda: reply, None))
    agent = Agent("turns", "Answer.", model, memory=memory)
    for j in range(config["turns"]):
        await agent.generate(f"p{proc} t{j}", thread_id="t-shared", resource_id="r1")
    say(event="done", seen=seen)


async def chat(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """``turns`` chat requests on one chat (t-chat) as a chat server gets them: ``messages_from_ui`` bodies that echo
    only what this process's client saw, streamed with ``Agent.stream``. Reports each question's ``start`` id."""
    proc = config["proc"]

    def reply(request: ModelRequest) -> str:
        last = request.messages[-1]
        return f"answer to {last.role}: {last.text}"

    agent = Agent("chat", "Answer.", ScriptedModel(iter(lambda: reply, None)), memory=memory)
    seen: list[dict[str, Any]] = []
    starts: dict[str, str] = {}
    for j in range(config["turns"]):
        question_id = f"p{proc}-q{j}"
        seen.append({"id": question_id, "role": "user", "parts": [{"type": "text", "text": f"p{proc} q{j}"}]})
        body = {"id": "t-chat", "messages": list(seen), "trigger": "submit-message"}
        async with agent.stream(messages_from_ui(body), thread_id="t-chat", resource_id="r1") as stream:
            async for event in stream:
                if isinstance(event, StartEvent) and event.message_id is not None:
                    starts[question_id] = event.message_id
        result = await stream.result()
        seen.append({"id": starts[question_id], "role": "assistant", "parts": [{"type": "text", "text": result.text}]})
    say(event="done", starts=starts)


async def hold(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """One turn whose model call announces itself (``in-model``) and waits for ``go``; then ``after`` more turns.
    Reports each turn's outcome: ``ok`` or the error's class and code."""
    proc = config["proc"]
    calls = 0

    async def held(request: ModelRequest) -> str:
        say(event="in-model", at=time.time(), history=texts(request))
        if await lines.next() != "go":
            raise RuntimeError("expected go")
        return f"held reply of p{proc}"

    model = ScriptedModel([held, *[f"later reply {i} of p{proc}" for i in range(config.get("after", 0))]])
    agent = Agent("hold", "Answer.", model, memory=memory)
    outcomes: list[dict[str, Any]] = []
    for j in range(1 + config.get("after", 0)):
        try:
            await agent.generate(f"p{proc} turn {j}", thread_id=config.get("thread", "t-held"), resource_id="r1")
        except ThreadmindError as exc:
            outcomes.append({"error": type(exc).__name__, "code": exc.code})
        else:
            outcomes.append({"ok": True})
        calls = model.calls
    say(event="done", outcomes=outcomes, calls=calls)


async def serve(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """Commands: ``save ID TEXT`` (a message into t-vis), ``update ID TEXT``, ``delete ID``, ``wm TEXT`` (working
    memory of r1), ``recall``, ``search TEXT`` (semantic), ``words TEXT`` (by words only), ``quit``. Each answers
    one line."""
    while True:
        command, _, rest = (await lines.next()).partition(" ")
        if command == "save":
            mid, _, text = rest.partition(" ")
            await memory.save_messages([Message.user(text, id=mid, thread_id="t-vis", resource_id="r1",
                                                     created_at=datetime.now(UTC))])
            say(event="saved", id=mid)
        elif command == "wm":
            await memory.update_working_memory(thread_id="t-vis", resource_id="r1", working_memory=rest)
            say(event="wm")
        elif command == "recall":
            page = await memory.recall(thread_id="t-vis", resource_id="r1", per_page=False)
            wm_text = await memory.get_working_memory(thread_id="t-vis", resource_id="r1")
            say(event="recalled", ids=[m.id for m in page.messages], wm=wm_text)
        elif command == "search":
            hits = await memory.search_vectors(rest, top_k=3, resource_id="r1")
            say(event="found", ids=[hit.message_id for hit in hits])
        elif command == "words":
            found = await memory.search(rest, resource_id="r1", top_k=3, search="keyword")
            say(event="found", ids=[hit.message.id for hit in found])
        elif command == "update":
            mid, _, text = rest.partition(" ")
            await memory.update_messages([{"id": mid, "content": {"content": text}}])
            say(event="updated", id=mid)
        elif command == "delete":
            await memory.delete_messages([rest])
            say(event="deleted", id=rest)
        else:
            say(event="done")
            return


async def ties(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """Save ``count`` messages with one shared timestamp into t-ties (a save each), wait for ``read``, and report
    the thread's order both ways."""
    proc, at = config["proc"], datetime.fromisoformat(config["at"])
    for j in range(config["count"]):
        await memory.save_messages([Message.user(f"p{proc} {j}", id=f"p{proc}-{j:03d}", thread_id="t-ties",
                                                 resource_id="r1", created_at=at)])
    say(event="saved")
    await lines.next()
    store = memory.storage
    asc = await store.list_messages(MessageQuery(thread_id="t-ties", per_page=False))
    desc = await store.list_messages(MessageQuery(thread_id="t-ties", per_page=False, direction="DESC"))
    recalled = await memory.recall(thread_id="t-ties", resource_id="r1", per_page=False)
    say(event="done", asc=[m.id for m in asc.messages], desc=[m.id for m in desc.messages],
        recalled=[m.id for m in recalled.messages])


async def opening(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """The store is opened after ``go`` (every worker at once, on a fresh file or an empty database)."""
    proc = config["proc"]
    await memory.create_thread(thread_id=f"t-open-{proc}", resource_id="r1")
    await memory.save_messages([Message.user(f"hello from p{proc}", id=f"open-{proc}", thread_id=f"t-open-{proc}",
                                             resource_id="r1", created_at=datetime.now(UTC))])
    say(event="done")


async def om(memory: Memory, config: dict[str, Any], lines: Lines) -> None:
    """``turns`` enqueued turns on t-om with observational memory computing observations ahead; the Observer reports
    what it is given (``observing``). Waits for ``settle`` before letting its background work finish. ``door``
    "chat": each turn is a chat request as a chat server gets it (a ``messages_from_ui`` body echoing what this
    process's client saw, streamed with ``Agent.stream``) instead of ``generate(text)``."""
    proc = config["proc"]
    OBSERVER.proc, OBSERVER.delay, OBSERVER.block = proc, config.get("observer_delay", 0.0), config.get("block", False)
    agent = Agent("om", "Answer.", ScriptedModel(iter(lambda: lambda request: f"reply to {texts(request)[-1]}",
                                                      None)), memory=memory)
    seen: list[dict[str, Any]] = []
    for j in range(config["turns"]):
        if config.get("door") != "chat":
            await agent.generate(f"p{proc} t{j}", thread_id="t-om", resource_id="r1")
        else:
            seen.append({"id": f"p{proc}-u{j}", "role": "user", "parts": [{"type": "text", "text": f"p{proc} t{j}"}]})
            body = {"id": "t-om", "messages": list(seen), "trigger": "submit-message"}
            started: str | None = None
            async with agent.stream(messages_from_ui(body), thread_id="t-om", resource_id="r1") as stream:
                async for event in stream:
                    if isinstance(event, StartEvent) and event.message_id is not None:
                        started = event.message_id
            result = await stream.result()
            assert started is not None
            seen.append({"id": started, "role": "assistant", "parts": [{"type": "text", "text": result.text}]})
        await anyio.sleep(config.get("pause", 0.0))
    say(event="turns-done")
    await memory.settled()
    say(event="done", observer_calls=OBSERVER.calls)


SCENARIOS = {"wm": wm, "turns": turns, "chat": chat, "hold": hold, "serve": serve, "ties": ties, "opening": opening,
             "om": om}


async def catch_up(config: dict[str, Any], lines: Lines) -> None:
    """The store alone is opened after ``go`` (every worker at once) and indexes what its keyword index lacks;
    reports how many messages this process indexed."""
    store = make_store(config["store"])
    await store.open()
    try:
        keywords = store if supports_keywords(store) else None
        assert keywords is not None
        written = await keywords.build_keyword_index()
        found = await keywords.keyword_search(["parrot"], resource_id="r1", thread_id=None, limit=5000)
    finally:
        await store.aclose()
    say(event="done", written=written, found=len(found.candidates))


async def main(config: dict[str, Any]) -> None:
    lines = Lines()
    if config["scenario"] == "catch_up":
        say(event="ready", pid=__import__("os").getpid())
        if await lines.next() != "go":
            raise SystemExit(2)
        await catch_up(config, lines)
        return
    memory = make_memory(config)
    if config["scenario"] != "opening":
        await memory.start()
    say(event="ready", pid=__import__("os").getpid())
    if await lines.next() != "go":
        raise SystemExit(2)
    try:
        async with memory:
            await SCENARIOS[config["scenario"]](memory, config, lines)
    except BaseException as exc:
        if not isinstance(exc, SystemExit):
            say(event="failed", error=type(exc).__name__, detail="".join(traceback.format_exception(exc))[-4000:])
        raise


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
