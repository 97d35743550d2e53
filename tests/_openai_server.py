"""A fake OpenAI-compatible HTTP server for tests: real sockets on 127.0.0.1, scripted answers, recorded requests.

Use it as a context manager (or through a fixture)::

    with FakeOpenAI() as server:
        server.script_chat("hello", FakeOpenAI.completion(tool_calls=[("c1", "search", {"q": "x"})]))
        server.fail_next(429, 2, retry_after="0")
        model = OpenAIChatModel("gpt-test", api_key="sk-test", base_url=server.url)

It serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings``. Scripted failures are served first, to any
endpoint; chat answers are consumed in order (``"ok"`` when the script is empty); embeddings are computed from
the input texts with :meth:`FakeOpenAI.vector_for`, optionally returned in shuffled order.

A chat request with ``"stream": true`` is answered as the OpenAI API streams: server-sent events in a chunked
body, one ``chat.completion.chunk`` per word of text or reasoning and per few characters of tool-call
arguments, the finish reason, a usage chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``. A scripted completion is converted that way (:meth:`FakeOpenAI.stream_events`), so one script
serves ``generate`` and ``stream`` alike; :meth:`FakeOpenAI.script_stream` queues exact events instead, and a
:class:`StreamScript` can drop the connection mid-stream or pause until the test lets it go on. Every stream
served is recorded in ``FakeOpenAI.streams`` (events sent, whether the client went away)::

    [stream] = server.script_stream(StreamScript(events, pause_after=1))
    ...  # the client reads one event and stops
    stream.resume.set()
    assert stream.disconnected.wait(5) and stream.sent < len(events)
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import socket
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ("FakeOpenAI", "RecordedRequest", "StreamScript")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it: method, path, lower-cased headers, the decoded JSON body, and the
    client's (host, port), which tells whether requests shared a connection."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    client: tuple[str, int] | None = None


@dataclass
class _Failure:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class StreamScript:
    """A streamed chat answer and, once served, what happened to it.

    ``events`` are sent in order: a dict as ``data: <json>``, a ``str`` as ``data: <str>`` (``"[DONE]"``
    included), each followed by a blank line; ``bytes`` are sent as they are (to split an event, send a
    comment or garbage). ``drop_after=n`` closes the connection after ``n`` events without ending the body.
    ``pause_after=n`` sends ``n`` events, then waits for :attr:`resume` before the rest. ``write_size``
    cuts every write into pieces of that many bytes; ``line_ending`` is ``"\n"`` or ``"\r\n"``.
    """

    events: list[dict[str, Any] | str | bytes]
    drop_after: int | None = None
    pause_after: int | None = None
    write_size: int | None = None
    line_ending: str = "\n"
    resume: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    """How many events reached the socket."""
    disconnected: threading.Event = field(default_factory=threading.Event)
    """Set when a write failed because the client had closed the connection."""
    finished: threading.Event = field(default_factory=threading.Event)
    """Set when the server is done with this stream, however it ended."""

    def encoded(self, event: dict[str, Any] | str | bytes) -> bytes:
        if isinstance(event, bytes):
            return event
        data = json.dumps(event) if isinstance(event, dict) else event
        return f"data: {data}{self.line_ending}{self.line_ending}".encode()


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
        client = (str(self.client_address[0]), int(self.client_address[1]))
        answer = self.server.fake._handle(RecordedRequest("POST", self.path, headers, body, client))
        if isinstance(answer, StreamScript):
            self._stream(answer)
            return
        status, payload, extra = answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, script: StreamScript) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for n, event in enumerate(script.events):
                if n == script.drop_after:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if n == script.pause_after:
                    script.resume.wait(10)
                data = script.encoded(event)
                step = script.write_size or len(data) or 1
                for start in range(0, len(data), step):
                    piece = data[start:start + step]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                script.sent += 1
            if script.drop_after is not None and script.drop_after >= len(script.events):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            self.wfile = io.BytesIO()  # what is still buffered can never be sent: drop it
            script.disconnected.set()
        finally:
            script.finished.set()

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
        self.streams: list[StreamScript] = []
        self._lock = threading.Lock()
        self._chat_script: deque[dict[str, Any] | StreamScript] = deque()
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
        reasoning: str | None = None,
    ) -> dict[str, Any]:
        """A chat completion body; tool call arguments that are not strings are JSON-encoded; ``reasoning``
        goes in ``reasoning_content`` as DeepSeek-style compatible servers send it."""
        calls = [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for cid, name, args in tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
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

    @staticmethod
    def stream_events(completion: dict[str, Any], *, include_usage: bool = True,
                      args_piece: int = 4) -> list[dict[str, Any] | str | bytes]:
        """The events the OpenAI API streams for ``completion``: a role chunk, one chunk per word of reasoning,
        text and refusal (whitespace kept), each tool call opened with its id and name then its arguments in
        ``args_piece``-character pieces, the finish reason, the usage chunk (``choices: []``) when
        ``include_usage``, then ``"[DONE]"``. With ``include_usage`` every other chunk has ``usage: null``."""
        choice = completion["choices"][0]
        message = choice["message"]
        base = {"id": completion.get("id", "chatcmpl-fake"), "object": "chat.completion.chunk", "created": 0,
                "model": completion.get("model", "fake")}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if include_usage:
                event["usage"] = None
            return event

        events: list[dict[str, Any] | str | bytes] = [chunk({"role": "assistant", "content": ""})]
        for word in re.findall(r"\s*\S+\s*", message.get("reasoning_content") or ""):
            events.append(chunk({"reasoning_content": word}))
        for word in re.findall(r"\s*\S+\s*", message.get("content") or ""):
            events.append(chunk({"content": word}))
        for word in re.findall(r"\s*\S+\s*", message.get("refusal") or ""):
            events.append(chunk({"refusal": word}))
        for index, call in enumerate(message.get("tool_calls") or ()):
            function = call["function"]
            events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": function["name"], "arguments": ""}}]}))
            arguments = function["arguments"]
            for start in range(0, len(arguments), args_piece):
                piece = arguments[start:start + args_piece]
                events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        events.append(chunk({}, choice.get("finish_reason") or "stop"))
        if include_usage and completion.get("usage") is not None:
            events.append({**base, "choices": [], "usage": completion["usage"]})
        events.append("[DONE]")
        return events

    def script_stream(self, *streams: StreamScript | list[dict[str, Any] | str | bytes]) -> list[StreamScript]:
        """Queue streamed chat answers sent exactly as given (a list is ``StreamScript(events)``); returns them."""
        scripts = [item if isinstance(item, StreamScript) else StreamScript(item) for item in streams]
        with self._lock:
            self._chat_script.extend(scripts)
        return scripts

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
    def _handle(self, request: RecordedRequest) -> tuple[int, bytes, dict[str, str]] | StreamScript:
        with self._lock:
            self.requests.append(request)
            failure = self._failures.popleft() if self._failures else None
            scripted = self._chat_script.popleft() if (
                failure is None and request.path.endswith("/chat/completions") and self._chat_script) else None
        if failure is not None:
            return failure.status, failure.body, failure.headers
        if request.path == "/v1/chat/completions":
            body = request.body if isinstance(request.body, dict) else {}
            if body.get("stream") is True:
                if not isinstance(scripted, StreamScript):
                    options = body.get("stream_options") or {}
                    scripted = StreamScript(self.stream_events(scripted or self.completion("ok"),
                                                               include_usage=bool(options.get("include_usage"))))
                with self._lock:
                    self.streams.append(scripted)
                return scripted
            if isinstance(scripted, StreamScript):
                return 400, json.dumps({"error": {"message": "this answer is scripted as a stream"}}).encode(), {}
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
