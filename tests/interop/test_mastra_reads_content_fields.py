"""The real Mastra packages read every content field threadmind stores: ``experimental_attachments`` under
Mastra's own name, ``annotations`` and content keys threadmind does not model, unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from threadmind.codecs import message_from_dict
from threadmind.memory import Memory
from threadmind.stores._sqlite import SQLiteStore

from .test_mastra_reads_threadmind import _read_with_mastra, mastra_dir

__all__ = ("mastra_dir",)  # the fixture, shared with the main interop suite

pytestmark = pytest.mark.timeout(600)  # a cold npm install; warm runs take seconds

ROW: dict[str, Any] = {
    "id": "m1", "role": "user", "createdAt": "2025-03-01T09:00:00.000Z", "threadId": "t1", "resourceId": "r1",
    "content": {"format": 2, "parts": [{"type": "text", "text": "see attached", "createdAt": 1740819600000}],
                "content": "see attached",
                "experimental_attachments": [{"name": "a.png", "contentType": "image/png", "url": "https://x/a.png"}],
                "annotations": [{"k": 1}], "futureKey": {"v": [1, None, "é"]}},
}


async def test_mastra_recalls_every_content_field_threadmind_wrote(mastra_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with Memory(storage=SQLiteStore(db)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([message_from_dict(ROW)])
    (recalled,) = _read_with_mastra(mastra_dir, db)["messages"]["t1"]
    assert json.dumps(recalled["content"], sort_keys=True) == json.dumps(ROW["content"], sort_keys=True)
