"""examples/chat_server.py as a user runs it: ``python examples/chat_server.py`` on 127.0.0.1, then HTTP requests
(httpx, and the AI SDK's own client when node is there); the conversation is in its SQLite file afterwards."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from threadmind import Memory
from threadmind.stores import SQLiteStore
from threadmind.ui import UI_MESSAGE_STREAM_HEADERS

from ._node import node_binary

pytestmark = pytest.mark.timeout(600)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_server.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def running_example(database: Path) -> AsyncIterator[str]:
    """The example as a process; yields its URL once uvicorn says it is up, and stops it with SIGINT after."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(PORT=str(port), CHAT_DB=str(database), PYTHONUNBUFFERED="1")
    process: Process = await anyio.open_process([sys.executable, str(EXAMPLE)], env=env)
    try:
        assert process.stderr is not None
        log = ""
        with anyio.fail_after(30):
            async for text in TextReceiveStream(process.stderr):
                log += text
                if "Uvicorn running on" in log:
                    break
        assert "Uvicorn running on" in log, log
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            code = await process.wait()
        await process.aclose()
    assert code == 0  # a clean shutdown: the lifespan closed the Memory


def _body(chat_id: str, *texts: str) -> dict[str, Any]:
    messages = [{"id": f"u-{i}", "role": "user", "parts": [{"type": "text", "text": t}]} for i, t in enumerate(texts)]
    return {"id": chat_id, "messages": messages, "trigger": "submit-message"}


def _chunks(raw: bytes) -> list[Any]:
    frames = raw.split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    return [json.loads(f.removeprefix(b"data: ")) for f in frames[:-2]]


async def test_the_example_streams_remembers_and_maps_refusals(tmp_path: Path) -> None:
    database = tmp_path / "chat.db"
    async with running_example(database) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/api/chat", json=_body("c1", "hello")) as response:
            assert response.status_code == 200
            assert response.headers["x-vercel-ai-ui-message-stream"] == UI_MESSAGE_STREAM_HEADERS[
                "x-vercel-ai-ui-message-stream"]
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        chunks = _chunks(raw)
        assert chunks[0]["type"] == "start" and chunks[-1] == {"type": "finish", "finishReason": "stop"}
        assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "You said: hello"
        reply_id = chunks[0]["messageId"]

        echo = _body("c1", "hello")
        echo["messages"] += [{"id": reply_id, "role": "assistant",
                              "parts": [{"type": "text", "text": "You said: hello"}]},
                             {"id": "u-next", "role": "user", "parts": [{"type": "text", "text": "again"}]}]
        second = await client.post("/api/chat", json=echo)
        assert "You said: again" in "".join(c.get("delta", "") for c in _chunks(second.content))

        other_user = await client.post("/api/chat", json=_body("c1", "mine now"), headers={"x-user-id": "mallory"})
        assert other_user.status_code == 403 and other_user.json()["error"]["code"]
        malformed = await client.post("/api/chat", json={"id": "c1", "messages": [{"id": "x", "role": "robot"}]})
        assert malformed.status_code == 422 and "messages[0].role" in malformed.json()["error"]["message"]
        no_thread = await client.post("/api/chat", json={"messages": _body("x", "hi")["messages"]})
        assert no_thread.status_code == 422
        not_json = await client.post("/api/chat", content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 400

    async with Memory(storage=SQLiteStore(str(database))) as memory:
        rows = (await memory.recall("c1", resource_id="demo-user", per_page=False)).messages
    assert [(m.id, m.text) for m in rows] == [("u-0", "hello"), (reply_id, "You said: hello"), ("u-next", "again"),
                                              (rows[3].id, "You said: again")]


async def test_the_ai_sdk_client_talks_to_the_example(tmp_path: Path, ai_client: Path) -> None:
    database = tmp_path / "chat.db"
    async with running_example(database) as url:
        plan = {"api": f"{url}/api/chat", "chatId": "sdk-chat", "steps": [{"send": "one"}, {"send": "two"}]}
        done = await anyio.run_process([node_binary(), "chat_client.mjs", json.dumps(plan)], cwd=ai_client,
                                       check=False)
        assert done.returncode == 0, done.stderr.decode()
    shown = json.loads(done.stdout)["messages"]
    async with Memory(storage=SQLiteStore(str(database))) as memory:
        rows = (await memory.recall("sdk-chat", resource_id="demo-user", per_page=False)).messages
    assert [m["id"] for m in shown] == [m.id for m in rows]
    assert ["".join(p["text"] for p in m["parts"] if p["type"] == "text") for m in shown] == [
        "one", "You said: one", "two", "You said: two"]
