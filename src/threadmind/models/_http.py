"""The HTTP plumbing shared by the OpenAI-compatible chat model and embedder: auth, retries, error mapping.

Retries follow the OpenAI client libraries: 408, 429, 5xx and network failures are retried with exponential
backoff and jitter, a ``Retry-After`` / ``retry-after-ms`` header is honoured (capped), and every other 4xx
fails at once. The API key only ever travels in the ``Authorization`` header: it is kept out of reprs and
redacted from any error text a server echoes back.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import warnings
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..errors import ConfigError, ThreadmindError

if TYPE_CHECKING:
    import httpx

__all__ = ("DEFAULT_BASE_URL", "OpenAIHTTP", "RetryPolicy", "import_httpx")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 429})
_EXCERPT_CHARS = 300


def import_httpx(owner: str) -> Any:
    """Import httpx on demand (it is the optional ``[openai]`` extra) with an install hint when it is missing."""
    try:
        import httpx
    except ImportError as exc:
        raise ConfigError(
            f"{owner} needs httpx, which is not installed; install it with: pip install 'threadmind[openai]'",
            code="THREADMIND_MISSING_EXTRA",
        ) from exc
    return httpx


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How often and how long to wait between attempts (``max_retries`` retries after the first try)."""

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        """Exponential delay for the ``retry``-th retry (0-based), minus up to 25 % jitter."""
        delay = min(self.max_delay, self.base_delay * 2.0**retry)
        return delay * (1.0 - 0.25 * random.random())

    def delay_for(self, retry: int, headers: httpx.Headers | None) -> float:
        """The server's ``Retry-After`` (bounded by ``max_retry_after``) when it sent one, else :meth:`backoff`."""
        hinted = _retry_after(headers) if headers is not None else None
        if hinted is None:
            return self.backoff(retry)
        return min(hinted, self.max_retry_after)


def _retry_after(headers: httpx.Headers) -> float | None:
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


async def _sleep(seconds: float) -> None:
    # One seam for tests that record the delays instead of waiting them out.
    await anyio.sleep(seconds)


class OpenAIHTTP:
    """POSTs JSON to an OpenAI-compatible endpoint with retries; failures become ``error`` (a ThreadmindError).

    The httpx client is created on first use unless one is given; only a client created here is closed by
    :meth:`aclose`. ``timeout`` applies to the client created here (a given client keeps its own settings).
    """

    def __init__(
        self,
        *,
        owner: str,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        client: httpx.AsyncClient | None,
        error: type[ThreadmindError],
        code_prefix: str,
    ) -> None:
        self._httpx = import_httpx(owner)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"{owner}: max_retries must be a non-negative integer, got {max_retries!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ConfigError(f"{owner}: timeout must be a positive number of seconds, got {timeout!r}")
        self._owner = owner
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        parsed = self._httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"{owner}: base_url must be an http(s) URL, got {url!r}")
        # Checked at the first request, not here: a Memory or Agent naming "openai/..." can be built (and
        # tested) without a key; nothing is sent without one.
        self._key_missing = self._api_key is None and parsed.host == "api.openai.com"
        self.base_url: str = url
        # What errors and reprs show: the URL without any user:password part.
        self.display_url: str = str(parsed.copy_with(userinfo=b"")) if parsed.userinfo else url
        self._timeout = float(timeout)
        self.policy = RetryPolicy(max_retries=max_retries)
        self._client = client
        self._owns_client = client is None
        self._closed = False
        self._error = error
        self._code_prefix = code_prefix

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    def _get_client(self) -> httpx.AsyncClient:
        if self._closed:
            raise self._error(f"{self._owner} is closed", code=f"{self._code_prefix}_CLOSED")
        if self._client is None:
            self._client = self._httpx.AsyncClient(timeout=self._timeout)
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    async def post(self, path: str, payload: bytes, *, what: str) -> bytes:
        """POST ``payload`` to ``base_url + path`` and return the 2xx body; retries per :attr:`policy`.

        :raises ThreadmindError: (the ``error`` class) on a non-retryable status, after the last retry, or
            when the server cannot be reached.
        """
        response = await self._send(path, payload, what=what, stream=False)
        return response.content

    async def open_stream(self, path: str, payload: bytes, *, what: str) -> httpx.Response:
        """POST ``payload`` and return the 2xx response with its body still unread (server-sent events).

        Connecting and the status line are retried as :meth:`post` does; the body never is. The caller
        reads it (``aiter_lines``) and must ``aclose`` the response, which drops the connection when the body
        was not read to its end.

        :raises ThreadmindError: (the ``error`` class) as :meth:`post`.
        """
        return await self._send(path, payload, what=what, stream=True)

    @property
    def transport_errors(self) -> tuple[type[Exception], ...]:
        """The httpx errors reading a body raises when the connection drops, times out or sends garbage."""
        httpx = self._httpx
        return (httpx.RequestError,)

    def failure(self, message: str, *, code: str) -> ThreadmindError:
        """An ``error``-class exception whose message never contains the API key."""
        return self._error(self._redact(message), code=f"{self._code_prefix}_{code}")

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``[redacted]``."""
        return self._redact(text)

    async def _send(self, path: str, payload: bytes, *, what: str, stream: bool) -> httpx.Response:
        if self._key_missing:
            raise ConfigError(
                f"{self._owner} needs an API key for api.openai.com: pass api_key= or set OPENAI_API_KEY",
                code="THREADMIND_MISSING_API_KEY",
            )
        httpx = self._httpx
        client = self._get_client()
        url = self.base_url + path
        headers = self._headers()
        if stream:
            headers["Accept"] = "text/event-stream"
        attempts = self.policy.max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                request = client.build_request("POST", url, content=payload, headers=headers)
                response = await client.send(request, stream=stream)
                if stream and not 200 <= response.status_code < 300:
                    try:
                        await response.aread()  # the error body, for the message
                    finally:
                        await response.aclose()
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if last:
                    raise self._error(
                        f"{what} to {self.display_url}{path} failed after {attempts} attempt(s): "
                        f"{type(exc).__name__}: {self._redact(str(exc)) or 'connection failed'}",
                        code=f"{self._code_prefix}_CONNECTION_FAILED",
                    ) from exc
                delay = self.policy.delay_for(attempt, None)
            except httpx.HTTPError as exc:
                raise self._error(
                    f"{what} to {self.display_url}{path} failed: {type(exc).__name__}: {self._redact(str(exc))}",
                    code=f"{self._code_prefix}_CONNECTION_FAILED",
                ) from exc
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return response
                retryable = status in _RETRY_STATUSES or status >= 500
                if last or not retryable:
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    raise self._error(
                        f"{what} to {self.display_url}{path} failed with HTTP {status}{tries}: "
                        f"{self._excerpt(response.content)}",
                        code=f"{self._code_prefix}_HTTP_{'RETRIES_EXHAUSTED' if retryable else 'ERROR'}",
                    )
                delay = self.policy.delay_for(attempt, response.headers)
            await _sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _excerpt(self, body: bytes) -> str:
        """The server's ``error.message`` when it sent OpenAI's error shape, else the start of the body."""
        text = body.decode("utf-8", "replace")
        try:
            decoded = msgspec.json.decode(body)
        except msgspec.DecodeError:
            decoded = None
        if isinstance(decoded, dict):
            err = decoded.get("error")
            message = err.get("message") if isinstance(err, dict) else err
            if isinstance(message, str) and message:
                text = message
        text = " ".join(text.split())
        if len(text) > _EXCERPT_CHARS:
            text = text[:_EXCERPT_CHARS] + "…"
        return self._redact(text) or "(empty body)"

    async def aclose(self) -> None:
        """Close the httpx client if this object created it; later calls fail with the ``error`` class."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if getattr(self, "_owns_client", False) and not self._closed and self._client is not None:
            _warn(f"{self._owner} was never closed; call 'await ....aclose()'", ResourceWarning, stacklevel=1)
