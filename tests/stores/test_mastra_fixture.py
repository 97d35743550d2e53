"""A real Mastra 1.71 memory.db (copied) must read back exactly as Mastra reports it in manifest.json."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from threadmind.codecs import Message, message_to_dict, resource_to_dict, thread_to_dict
from threadmind.stores._protocol import Include, MessageQuery
from threadmind.stores._sqlite import SQLiteStore

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text()) if FIXTURE.exists() else {}
pytestmark = pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available")


@pytest.fixture
async def mastra(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    copy = tmp_path / "memory.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)  # never open the original
    async with SQLiteStore(copy) as store:
        yield store


def _ddl(path: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE 'mastra_%' OR name LIKE 'idx_%'")
        result = {name: sql for name, sql in rows}
    conn.close()
    return result


@pytest.mark.parametrize("thread", [t["id"] for t in MANIFEST.get("threads", [])])
async def test_threads_match_manifest(mastra: SQLiteStore, thread: str) -> None:
    expected = next(t for t in MANIFEST["threads"] if t["id"] == thread)
    got = await mastra.get_thread(thread)
    assert got is not None
    got_dict = thread_to_dict(got)
    for field, value in expected.items():
        assert got_dict[field] == value, field
    # JSON equality treats 1 == 1.0 == True; check the decoded types too.
    assert json.dumps(got_dict["metadata"], ensure_ascii=False) == json.dumps(expected["metadata"], ensure_ascii=False)


@pytest.mark.parametrize("thread", sorted(MANIFEST.get("messages", {})))
async def test_messages_match_manifest(mastra: SQLiteStore, thread: str) -> None:
    expected = MANIFEST["messages"][thread]
    page = await mastra.list_messages(MessageQuery(thread_id=thread, per_page=False))
    got = [message_to_dict(m) for m in page.messages]
    assert [m["id"] for m in got] == [m["id"] for m in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert set(mine) == set(theirs), mine["id"]
        for field in theirs:  # sort_keys: type-exact (1 vs 1.0 vs true) but blind to key order, see below
            assert _canonical(mine[field]) == _canonical(theirs[field]), (mine["id"], field)
    assert page.total == MANIFEST["counts"]["messages_by_thread"][thread]


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


async def test_only_known_key_order_differences(mastra: SQLiteStore) -> None:
    """Key order survives except inside ``toolInvocation`` (the shared ToolInvocation struct's field order)."""
    differing: set[str] = set()
    for thread, expected in MANIFEST["messages"].items():
        page = await mastra.list_messages(MessageQuery(thread_id=thread, per_page=False))
        for mine, theirs in zip(page.messages, expected, strict=True):
            if json.dumps(message_to_dict(mine)["content"]) != json.dumps(theirs["content"]):
                differing.add(mine.id)
                for part in theirs["content"]["parts"]:
                    if part["type"] != "tool-invocation":
                        continue
                    invocation = part["toolInvocation"]
                    assert list(invocation)[:2] == ["state", "step"]  # Mastra wrote step second; we write it last
    assert differing == {"msg-basic-02", "5fc5d0c0-6783-4cf6-92a1-db9b1823d75d"}


async def test_tied_messages_keep_insertion_order(mastra: SQLiteStore) -> None:
    tie = MANIFEST["scenario"]["identical_createdAt"]
    page = await mastra.list_messages(MessageQuery(thread_id=tie["threadId"], per_page=False))
    tied = [m.id for m in page.messages if m.created_at == datetime(2025, 3, 2, 8, tzinfo=UTC)]
    assert tied == ["msg-tie-c", "msg-tie-a", "msg-tie-b", "msg-tie-0"] == tie["insertion_order"]
    window = await mastra.list_messages(MessageQuery(
        thread_id="thread-untitled", per_page=0,
        include=[Include(id="msg-tie-a", with_previous_messages=1, with_next_messages=1)]))
    assert [m.id for m in window.messages] == ["msg-tie-c", "msg-tie-a", "msg-tie-b"]
    # A new message with the same timestamp lands after every tied row, before the later ones.
    await mastra.save_messages("thread-untitled", [Message.user(
        "late", id="msg-tie-new", thread_id="thread-untitled", resource_id="res-alice",
        created_at=datetime(2025, 3, 2, 8, tzinfo=UTC))])
    page = await mastra.list_messages(MessageQuery(thread_id="thread-untitled", per_page=False))
    assert [m.id for m in page.messages][:6] == [*tie["insertion_order"], "msg-tie-new", "msg-file"]


@pytest.mark.parametrize("resource", MANIFEST.get("resources", []), ids=lambda r: r["id"])
async def test_resources_match_manifest(mastra: SQLiteStore, resource: dict[str, Any]) -> None:
    got = await mastra.get_resource(resource["id"])
    if not resource["stored"]:
        assert got is None
        return
    assert got is not None
    expected = {k: v for k, v in resource.items() if k != "stored"}
    assert resource_to_dict(got) == expected


async def test_metadata_filters_read_jsonb(mastra: SQLiteStore) -> None:
    async def match(**metadata: Any) -> list[str]:
        return [t.id for t in (await mastra.list_threads(metadata=metadata)).threads]

    assert await match(topic="travel") == ["thread-basic"]
    assert await match(priority=2) == ["thread-basic"]
    assert await match(count=42, flag=True, off=False) == ["thread-meta"]
    assert await match(unicode="café ✓ 日本語") == ["thread-meta"]
    assert await match(ratio=0.125, nothing=None) == ["thread-meta"]
    assert await match(channel="cli") == ["thread-wm"]


async def test_schema_is_left_unchanged(tmp_path: Path) -> None:
    copy = tmp_path / "memory.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)
    before = _ddl(copy)
    async with SQLiteStore(copy) as store:
        await store.update_thread("thread-meta", metadata={"extra": "ü"})
        await store.update_resource("res-bob", working_memory="wm")
        thread = await store.get_thread("thread-meta")
        assert thread is not None and thread.metadata is not None
        assert thread.metadata["extra"] == "ü" and thread.metadata["exponent"] == 1.5e-07
    assert _ddl(copy) == before
    for table, ddl in MANIFEST["sqlite"]["ddl"].items():
        if table.startswith("mastra_"):
            assert before[table] == ddl
    with sqlite3.connect(copy) as conn:
        version = conn.execute("SELECT value FROM threadmind_meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert version == ("1",)
