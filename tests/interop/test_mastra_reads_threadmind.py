"""The real Mastra packages (node) read a threadmind-written SQLite file and report what threadmind wrote.

The packages pinned by ``interop/package-lock.json`` are installed once (``npm ci``, see ``tests/_npm.py``) into a
cache folder outside the package and reused; ``interop/read_db.mjs`` runs there with node. Skipped with the reason
when node, npm or the registry are missing, except in CI, where that fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from threadmind.agent import Agent
from threadmind.codecs import message_from_dict, message_to_dict, thread_to_dict
from threadmind.memory import Memory
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.stores._sqlite import SQLiteStore

from .._npm import install

REPO = Path(__file__).resolve().parents[2]
INTEROP = REPO / "interop"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text()) if FIXTURE.exists() else {}
PINNED = {"@mastra/core": "1.71.0", "@mastra/memory": "1.31.0", "@mastra/libsql": "1.23.1"}

pytestmark = [
    pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available"),
    pytest.mark.timeout(600),  # a cold npm install; warm runs take seconds
]

RESOURCE_WM = "# User Information\n- **First Name**: Zoë\n- **Interests**: 日本語, \"quotes\" and \\backslashes\\\n"
THREAD_WM = "# Scratch\n- line one\n\ttabbed 🚀\n"
RESOURCE_METADATA = {"plan": "pro", "limits": {"daily": 100, "burst": 2.5}, "tags": ["a", "b"], "none": None}


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@pytest.fixture(scope="module")
def mastra_dir() -> Path:
    """A folder whose node_modules holds the pinned Mastra packages (``interop/package-lock.json``), plus
    ``read_db.mjs``."""
    folder = install(INTEROP, "mastra-libsql")
    installed = {name: json.loads((folder / "node_modules" / name / "package.json").read_text())["version"]
                 for name in PINNED}
    assert installed == PINNED
    return folder


def _read_with_mastra(folder: Path, db: Path) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, "read_db.mjs", str(db)], cwd=folder, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _write_with_threadmind(db: Path) -> dict[str, Any]:
    """Threads, messages and working memory of the Mastra fixture, written by threadmind; returns its view."""
    memory = Memory(storage=SQLiteStore(db), options={"workingMemory": {"enabled": True, "scope": "resource"}})
    thread_scope = {"workingMemory": {"enabled": True, "scope": "thread"}}
    view: dict[str, Any] = {"threads": {}, "messages": {}, "resource_wm": {}, "thread_wm": {}}
    async with memory:
        for thread in MANIFEST["threads"]:
            await memory.create_thread(thread_id=thread["id"], resource_id=thread["resourceId"],
                                       title=thread["title"], metadata=thread["metadata"])
        for messages in MANIFEST["messages"].values():
            await memory.save_messages([message_from_dict(m) for m in messages])
        await memory.update_working_memory(thread_id="thread-basic", resource_id="res-alice",
                                           working_memory=RESOURCE_WM)
        await memory.update_working_memory(thread_id="thread-meta", resource_id="res-bob", working_memory=THREAD_WM,
                                           memory_config=thread_scope)
        await memory.storage.update_resource("res-bob", metadata=RESOURCE_METADATA)
        for thread in (await memory.list_threads(per_page=False)).threads:
            view["threads"][thread.id] = thread_to_dict(thread)
            recalled = await memory.recall(thread.id, per_page=False)
            view["messages"][thread.id] = [message_to_dict(m) for m in recalled.messages]
            view["thread_wm"][thread.id] = await memory.get_working_memory(
                thread_id=thread.id, resource_id=thread.resource_id, memory_config=thread_scope)
            view["resource_wm"][thread.resource_id] = await memory.get_working_memory(
                thread_id=thread.id, resource_id=thread.resource_id)
    return view


async def test_mastra_reads_what_threadmind_wrote(mastra_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "threadmind.db"
    mine = await _write_with_threadmind(db)
    theirs = _read_with_mastra(mastra_dir, db)

    # threads: every field, metadata type-exact and in key order; Mastra lists them by createdAt (threads created
    # in one millisecond tie, and SQLite may return a tie either way)
    order = [t["id"] for t in theirs["threads"]]
    assert sorted(order) == sorted(mine["threads"])
    created = [mine["threads"][i]["createdAt"] for i in order]
    assert created == sorted(created)
    for thread in theirs["threads"]:
        expected = mine["threads"][thread["id"]]
        assert set(thread) == set(expected)
        for field in expected:
            assert _canonical(thread[field]) == _canonical(expected[field]), (thread["id"], field)
        assert json.dumps(thread["metadata"]) == json.dumps(expected["metadata"])

    # messages: the same ids in the same order, every field and every content field
    assert set(theirs["messages"]) == set(mine["messages"])
    for thread_id, messages in theirs["messages"].items():
        expected = mine["messages"][thread_id]
        assert [m["id"] for m in messages] == [m["id"] for m in expected], thread_id
        for got, want in zip(messages, expected, strict=True):
            assert set(got) == set(want), got["id"]
            for field in want:
                assert _canonical(got[field]) == _canonical(want[field]), (got["id"], field)
            for key in want["content"]:
                assert _canonical(got["content"][key]) == _canonical(want["content"][key]), (got["id"], key)

    # working memory in both scopes, and the resource row threadmind wrote
    assert theirs["workingMemory"]["resource"] == mine["resource_wm"]
    assert theirs["workingMemory"]["resource"]["res-alice"] == RESOURCE_WM
    assert theirs["workingMemory"]["thread"] == mine["thread_wm"]
    assert theirs["workingMemory"]["thread"]["thread-meta"] == THREAD_WM
    bob = theirs["resources"]["res-bob"]
    assert json.dumps(bob["metadata"]) == json.dumps(RESOURCE_METADATA)
    assert theirs["resources"]["res-alice"]["workingMemory"] == RESOURCE_WM

    # and the file Mastra has opened (it adds its other tables) still reads the same in threadmind
    async with Memory(storage=SQLiteStore(db)) as memory:
        for thread_id, expected in mine["messages"].items():
            again = await memory.recall(thread_id, per_page=False)
            assert [message_to_dict(m) for m in again.messages] == expected


async def test_mastra_reads_working_memory_state_signals_as_its_own(mastra_dir: Path, tmp_path: Path) -> None:
    """Turns with ``useStateSignals`` leave a snapshot and a delta signal and the thread's tracking; Mastra's recall
    returns them field for field, and its own signal parser reads each back as the state signal it is."""
    db = tmp_path / "signals.db"
    options = {"workingMemory": {"enabled": True, "template": "# Me\n- name:", "useStateSignals": True}}
    model = ScriptedModel(["hello", ModelResponse(tool_calls=[ToolCall("c1", "setWorkingMemory",
                                                                       {"memory": "# Me\n- name: Grace"})]), "ok"])
    async with Memory(storage=SQLiteStore(db), options=options) as memory:
        await memory.create_thread(thread_id="t-sig", resource_id="r-sig")
        await memory.update_working_memory(thread_id="t-sig", resource_id="r-sig", working_memory="# Me\n- name: Ada")
        agent = Agent("a", "Be brief.", model, memory=memory)
        await agent.generate("hi", thread_id="t-sig", resource_id="r-sig")
        await agent.generate("call me Grace", thread_id="t-sig", resource_id="r-sig")
        mine = [message_to_dict(m) for m in (await memory.recall("t-sig", per_page=False)).messages]
        thread = await memory.get_thread_by_id("t-sig")
        assert thread is not None
    theirs = _read_with_mastra(mastra_dir, db)
    assert [m["role"] for m in mine].count("signal") == 2
    got = theirs["messages"]["t-sig"]
    assert [m["id"] for m in got] == [m["id"] for m in mine]
    for seen, wrote in zip(got, mine, strict=True):
        for field in wrote:
            assert _canonical(seen[field]) == _canonical(wrote[field]), (wrote["id"], field)
    [listed] = [t for t in theirs["threads"] if t["id"] == "t-sig"]
    assert json.dumps(listed["metadata"]) == json.dumps(thread_to_dict(thread)["metadata"])
    parsed = theirs["signals"]["t-sig"]
    assert [(s["type"], s["tagName"], s["metadata"]["state"]["mode"]) for s in parsed] == [
        ("state", "working-memory", "snapshot"), ("state", "working-memory", "delta")]
    assert parsed[1]["contents"] == "@@ -2,1 +2,1 @@\n-- name: Ada\n+- name: Grace"
