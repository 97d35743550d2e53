"""Every content field survives both stores and ``Memory.recall``, including rows Mastra wrote (JSON text and
JSONB blobs); a malformed row reads as a threadmind error, never as a bare decoding exception."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codecs._content_strategies import PROPERTY, canonical, contents, messages
from tests.codecs._jsonb_writer import encode_jsonb
from tests.codecs.test_malformed_input import mutated

from threadmind import Memory
from threadmind.codecs import Thread, message_from_dict, message_to_dict
from threadmind.errors import ThreadmindError
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._protocol import MessageQuery, Store
from threadmind.stores._sqlite import SQLiteStore

ATTACHMENTS = [{"name": "report.pdf", "contentType": "application/pdf", "url": "https://files.example/r.pdf"}]
CONTENT: dict[str, Any] = {
    "format": 2, "parts": [{"type": "text", "text": "summarise this", "createdAt": 1740819600000}],
    "content": "summarise this", "experimental_attachments": ATTACHMENTS,
    "annotations": [{"kind": "note"}], "futureKey": {"keep": [1, None, "é"]},
}
_INSERT = ('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
           "VALUES (?, 't1', ?, 'user', 'v2', ?, 'r1')")
_SHARED = settings(PROPERTY, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow])
_threads = itertools.count()


@pytest.fixture(params=[pytest.param("sqlite", id="sqlite"), pytest.param("memory", id="memory")])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Any = SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL") if request.param == "sqlite" else InMemoryStore()
    async with s:
        yield s


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL") as s:
        await s.create_thread(Thread(id="t1", resource_id="r1"))
        yield s


def _insert(content: str | bytes, mid: str = "m1", created: str = "2025-03-01T09:00:00.000Z") -> Any:
    return lambda conn: conn.execute(_INSERT, (mid, content, created))


def _stored_column(store: SQLiteStore, mid: str) -> Any:
    return store.execute_read(lambda conn: conn.execute("SELECT content FROM mastra_messages WHERE id = ?",
                                                        (mid,)).fetchone()[0])


class TestMastraWrittenRows:
    @pytest.mark.parametrize("encoding", ["json-text", "jsonb-blob"])
    async def test_recall_returns_every_content_field(self, tmp_path: Path, encoding: str) -> None:
        path = tmp_path / "memory.db"
        async with SQLiteStore(path, synchronous="NORMAL") as store:
            await store.create_thread(Thread(id="t1", resource_id="r1"))
            column = json.dumps(CONTENT) if encoding == "json-text" else encode_jsonb(CONTENT)
            await store.execute_write(_insert(column))
            listed = (await store.list_messages(MessageQuery(thread_id="t1"))).messages
            assert listed == await store.get_messages_by_id(["m1"])
            async with Memory(storage=store) as memory:  # the memory owns (and closes) the store
                recalled = (await memory.recall("t1", resource_id="r1")).messages
        assert recalled == listed and len(recalled) == 1
        assert recalled[0].content.experimental_attachments == ATTACHMENTS
        assert canonical(message_to_dict(recalled[0])["content"]) == canonical(CONTENT)

    async def test_a_resave_writes_the_same_content_back(self, sqlite_store: SQLiteStore) -> None:
        await sqlite_store.execute_write(_insert(json.dumps(CONTENT)))
        (message,) = await sqlite_store.get_messages_by_id(["m1"])
        await sqlite_store.save_messages("t1", [message])
        assert canonical(json.loads(await _stored_column(sqlite_store, "m1"))) == canonical(CONTENT)

    async def test_a_partial_update_keeps_the_other_fields(self, sqlite_store: SQLiteStore) -> None:
        await sqlite_store.execute_write(_insert(json.dumps(CONTENT)))
        moved = [{**ATTACHMENTS[0], "url": "https://cdn.example/r.pdf"}]
        (updated,) = await sqlite_store.update_messages(
            [{"id": "m1", "content": {"experimental_attachments": moved, "metadata": {"uploaded": True}}}])
        expected = {**CONTENT, "experimental_attachments": moved, "metadata": {"uploaded": True}}
        assert canonical(message_to_dict(updated)["content"]) == canonical(expected)
        assert canonical(json.loads(await _stored_column(sqlite_store, "m1"))) == canonical(expected)

    async def test_jsonb_text_needing_escapes_and_a_json_text_blob(self, sqlite_store: SQLiteStore) -> None:
        tricky = {**CONTENT, "content": 'quote " back\\slash \n tab\t 🚀'}
        await sqlite_store.execute_write(_insert(encode_jsonb(tricky), "jsonb"))
        await sqlite_store.execute_write(_insert(json.dumps(tricky).encode(), "textblob"))
        got = {m.id: m for m in await sqlite_store.get_messages_by_id(["jsonb", "textblob"])}
        assert canonical(message_to_dict(got["jsonb"])["content"]) == canonical(tricky)
        assert got["textblob"].content == got["jsonb"].content


class TestRoundTripProperty:
    @_SHARED
    @given(rows=st.lists(messages(), min_size=1, max_size=4, unique_by=lambda r: r["id"]))
    async def test_saved_and_read_back_unchanged(self, store: Store, rows: list[dict[str, Any]]) -> None:
        tid = f"t{next(_threads)}"
        await store.create_thread(Thread(id=tid, resource_id="r1"))
        batch = [message_from_dict({**row, "id": f"{tid}-{i}", "threadId": tid}) for i, row in enumerate(rows)]
        saved = await store.save_messages(tid, batch)
        read = await store.get_messages_by_id([m.id for m in batch])
        listed = (await store.list_messages(MessageQuery(thread_id=tid, per_page=False))).messages
        assert sorted(read, key=lambda m: m.id) == sorted(listed, key=lambda m: m.id) == sorted(saved,
                                                                                              key=lambda m: m.id)
        by_id = {m.id: m for m in read}
        for i, row in enumerate(rows):
            assert canonical(message_to_dict(by_id[f"{tid}-{i}"])["content"]) == canonical(row["content"])

    @_SHARED
    @given(content=contents, as_jsonb=st.booleans())
    async def test_mastra_rows_read_unchanged(self, sqlite_store: SQLiteStore, content: dict[str, Any],
                                              as_jsonb: bool) -> None:
        mid = f"row-{next(_threads)}"
        await sqlite_store.execute_write(_insert(encode_jsonb(content) if as_jsonb else json.dumps(content), mid))
        (message,) = await sqlite_store.get_messages_by_id([mid])
        assert canonical(message_to_dict(message)["content"]) == canonical(content)


class TestMalformedRows:
    """What another writer may leave in a row reads as a message or a threadmind error, nothing else."""

    @_SHARED
    @given(blob=mutated(contents.map(encode_jsonb)) | mutated(contents.map(lambda c: json.dumps(c).encode())),
           as_text=st.booleans())
    async def test_content_column(self, sqlite_store: SQLiteStore, blob: bytes, as_text: bool) -> None:
        mid = f"bad-{next(_threads)}"
        column: str | bytes = blob.decode("utf-8", "replace") if as_text else blob
        try:
            await sqlite_store.execute_write(_insert(column, mid))
        except ThreadmindError:  # text with a NUL SQLite refuses, say
            return
        for read in (lambda: sqlite_store.get_messages_by_id([mid]),
                     lambda: sqlite_store.list_messages(MessageQuery(thread_id="t1", per_page=False))):
            try:
                await read()
            except ThreadmindError:
                pass
        await sqlite_store.execute_write(lambda conn: conn.execute("DELETE FROM mastra_messages WHERE id = ?",
                                                                   (mid,)))

    async def test_invalid_utf8_in_a_json_blob_reads_as_a_javascript_reader_sees_it(
        self, sqlite_store: SQLiteStore
    ) -> None:
        blob = b'{"format":2,"parts":[{"type":"data-x","data":"caf\xe9"},{"type":"text","text":"ok"}]}'
        await sqlite_store.execute_write(_insert(blob))
        (message,) = await sqlite_store.get_messages_by_id(["m1"])
        assert dict(message.content.parts[0]) == {"type": "data-x", "data": "caf\ufffd"}  # type: ignore[arg-type]
        assert message.text == "ok"

    @pytest.mark.parametrize("created", ["yesterday", "0001-01-01T00:00:00+01:00", b"\x00", 17])
    async def test_created_at_column(self, sqlite_store: SQLiteStore, created: Any) -> None:
        await sqlite_store.execute_write(_insert(json.dumps(CONTENT), "m1", created))
        with pytest.raises(ThreadmindError, match="m1.*createdAt"):
            await sqlite_store.get_messages_by_id(["m1"])

    @pytest.mark.parametrize("metadata", [b"\x0c\x05", b"\xff\xfe", '{"a": [' * 3000, 5, "[1]"])
    async def test_thread_metadata_column(self, sqlite_store: SQLiteStore, metadata: Any) -> None:
        await sqlite_store.execute_write(lambda conn: conn.execute(
            "UPDATE mastra_threads SET metadata = ? WHERE id = 't1'", (metadata,)))
        with pytest.raises(ThreadmindError, match="thread 't1' metadata"):
            await sqlite_store.get_thread("t1")


def test_sqlite_has_no_jsonb_here_or_the_writer_matches_it() -> None:
    """Where SQLite has ``jsonb()`` (>= 3.45) the test writer must produce what it produces."""
    conn = sqlite3.connect(":memory:")
    try:
        try:
            native = conn.execute("SELECT jsonb(?)", (json.dumps(CONTENT),)).fetchone()[0]
        except sqlite3.OperationalError:
            pytest.skip(f"SQLite {sqlite3.sqlite_version} has no jsonb()")
        assert json.loads(conn.execute("SELECT json(?)", (encode_jsonb(CONTENT),)).fetchone()[0]) == CONTENT
        assert json.loads(conn.execute("SELECT json(?)", (native,)).fetchone()[0]) == CONTENT
    finally:
        conn.close()
