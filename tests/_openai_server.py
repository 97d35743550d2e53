"""A fake OpenAI-compatible HTTP server for tests: real sockets on 127.0.0.1, scripted answers, recorded requests.

Use it as a context manager (or through a fixture)::

    with FakeOpenAI() as server:
        server.script_chat("hello", FakeOpenAI.completion(tool_calls=[("c1", "search", {"q": "x"})]))
        server.fail_next(429, 2, retry_after="0")
        model = OpenAIChatModel("gpt-test", api_key="sk-test", base_url=server.url)

It serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings``. Scripted failures are served first, to any
endpoint; chat answers are consumed in order (``"ok"`` when the script is empty); embeddings are computed from
the input texts with :meth:`FakeOpenAI.vector_for`, optionally returned in shuffled order.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ("FakeOpenAI", "RecordedRequest")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it: method, path, lower-cased headers and the decoded JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class _Failure:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle keep-alive connection never pins a server thread for long
    wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle / delayed-ACK stalls)
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, payload, extra = self.server.fake._handle(RecordedRequest("POST", self.path, headers, body))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logging
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # hundreds of concurrent clients connect without SYN retries

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeOpenAI:
    """A scripted OpenAI-compatible server running in a background thread; see the module docstring."""

    def __init__(self, *, embedding_dim: int = 8, shuffle_embeddings: bool = False) -> None:
        self.embedding_dim = embedding_dim
        self.shuffle_embeddings = shuffle_embeddings
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._chat_script: deque[dict[str, Any]] = deque()
        self._failures: deque[_Failure] = deque()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        """Bind an ephemeral port and serve in a daemon thread."""
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="fake-openai",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The API root to pass as ``base_url`` (``http://127.0.0.1:<port>/v1``)."""
        assert self._server is not None, "FakeOpenAI is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    # --- scripting --------------------------------------------------------------------------------------
    @staticmethod
    def completion(
        text: str | None = None,
        *,
        tool_calls: Iterable[tuple[str, str, Any]] = (),
        finish_reason: str | None = None,
        usage: tuple[int, int] | None = (3, 5),
    ) -> dict[str, Any]:
        """A chat completion body; tool call arguments that are not strings are JSON-encoded."""
        calls = [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for cid, name, args in tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        body: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "fake",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}],
        }
        if usage is not None:
            body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                             "total_tokens": usage[0] + usage[1]}
        return body

    def script_chat(self, *responses: str | dict[str, Any]) -> None:
        """Queue chat answers: a ``str`` is a plain text completion, a dict is sent as the whole body."""
        with self._lock:
            for item in responses:
                self._chat_script.append(self.completion(item) if isinstance(item, str) else item)

    def fail_next(self, status: int, n: int = 1, *, retry_after: str | None = None,
                  body: dict[str, Any] | bytes | None = None, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``n`` requests (any endpoint) with ``status`` and an OpenAI-style error body."""
        if body is None:
            body = {"error": {"message": f"fake failure {status}", "type": "fake_error", "code": status}}
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        extra = dict(headers or {})
        if retry_after is not None:
            extra["Retry-After"] = retry_after
        with self._lock:
            self._failures.extend(_Failure(status, raw, extra) for _ in range(n))

    # --- inspection -------------------------------------------------------------------------------------
    def requests_to(self, endpoint: str) -> list[RecordedRequest]:
        """Recorded requests whose path ends with ``endpoint`` (``"/chat/completions"``, ``"/embeddings"``)."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(endpoint)]

    @staticmethod
    def vector_for(text: str, dim: int) -> list[float]:
        """The deterministic embedding the server returns for ``text``."""
        digest = b"".join(hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(dim // 32 + 1))
        return [(b - 127.5) / 127.5 for b in digest[:dim]]

    # --- serving (called from server threads) -----------------------------------------------------------
    def _handle(self, request: RecordedRequest) -> tuple[int, bytes, dict[str, str]]:
        with self._lock:
            self.requests.append(request)
            failure = self._failures.popleft() if self._failures else None
            scripted = self._chat_script.popleft() if (
                failure is None and request.path.endswith("/chat/completions") and self._chat_script) else None
        if failure is not None:
            return failure.status, failure.body, failure.headers
        if request.path == "/v1/chat/completions":
            return 200, json.dumps(scripted or self.completion("ok")).encode(), {}
        if request.path == "/v1/embeddings":
            return self._embeddings(request.body)
        return 404, json.dumps({"error": {"message": f"no route {request.path}"}}).encode(), {}

    def _embeddings(self, body: Any) -> tuple[int, bytes, dict[str, str]]:
        inputs = body.get("input") if isinstance(body, dict) else None
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            return 400, json.dumps({"error": {"message": "input must be a string or a list of strings"}}).encode(), {}
        dim = body.get("dimensions") or self.embedding_dim
        data = [{"object": "embedding", "index": i, "embedding": self.vector_for(t, dim)} for i, t in enumerate(inputs)]
        if self.shuffle_embeddings:
            random.Random(len(data)).shuffle(data)
        tokens = sum(len(t.split()) for t in inputs)
        answer = {"object": "list", "data": data, "model": body.get("model"),
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        return 200, json.dumps(answer).encode(), {}
