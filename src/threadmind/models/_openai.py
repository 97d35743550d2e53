"""An OpenAI-compatible ``/chat/completions`` client, and the ``"openai/<model>"`` model-router string.

Requests are built from a :class:`ModelRequest` the way the reference's prompt conversion does it: system
texts first, then each stored message; an assistant message is cut into steps (at ``step-start`` parts and
wherever text follows a tool call), each step becoming an assistant message with ``tool_calls`` followed by
one ``tool`` message per finished call. Calls still waiting for an outcome are left out, as the reference's
``filterIncompleteToolCalls`` default does, because the API rejects a tool call without its result.
Answers, whole or streamed as server-sent events, are read by ``_openai_response``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..codecs import FilePart, Message, StepStartPart, TextPart, ToolInvocation, ToolInvocationPart
from ..errors import ConfigError, ModelError
from ._http import OpenAIHTTP
from ._openai_response import ChatStreamAssembler, parse_chat_response
from ._protocol import LanguageModel, ModelChunk, ModelRequest, ModelResponse, ToolSpec
from ._sse import EventTooLarge, SSEDecoder
from ._stream import response_chunks

if TYPE_CHECKING:
    import httpx

__all__ = ("OpenAIChatModel", "chat_payload", "parse_chat_response", "resolve_model")

_SUPPORTED_PROVIDERS = ("openai",)
_DRAIN_SECONDS = 1.0
_DRAIN_BYTES = 64 << 10
_ANSWERED_STATES = frozenset({"result", "output-error", "output-denied"})


def _json_text(value: Any) -> str:
    """A tool argument or result as JSON text; a string is passed through unchanged (the reference's text output)."""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, enc_hook=str).decode()


# --- request conversion ---------------------------------------------------------------------------------


def _image_url(data: str, mime_type: str) -> str:
    if data.startswith(("http://", "https://", "data:")):
        return data
    return f"data:{mime_type};base64,{data}"


def _user_content(message: Message) -> str | list[dict[str, Any]] | None:
    """The text joined with newlines, or a content-part list when the message carries images."""
    items: list[dict[str, Any]] = []
    has_image = False
    for part in message.content.parts:
        if isinstance(part, TextPart):
            if part.text:
                items.append({"type": "text", "text": part.text})
        elif isinstance(part, FilePart):
            mime = part.mime_type or part.media_type or ""
            if mime.startswith("image/"):
                has_image = True
                items.append({"type": "image_url", "image_url": {"url": _image_url(part.data, mime)}})
    for attachment in message.content.experimental_attachments or ():
        mime = attachment.get("contentType", "") if isinstance(attachment, dict) else ""
        url = attachment.get("url") if isinstance(attachment, dict) else None
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(url, str):
            has_image = True
            items.append({"type": "image_url", "image_url": {"url": _image_url(url, mime)}})
    if not items:
        return message.content.content or None
    if not has_image:
        return "\n".join(item["text"] for item in items)
    return items


def _tool_call(inv: ToolInvocation) -> dict[str, Any]:
    args = {} if inv.args is None else inv.args
    return {
        "id": inv.tool_call_id,
        "type": "function",
        "function": {"name": inv.tool_name, "arguments": _json_text(args)},
    }


def _tool_output(inv: ToolInvocation) -> str:
    if inv.state == "output-error":
        if inv.error_text:
            return inv.error_text
        return _json_text(inv.result) if inv.result is not None else "Tool execution failed."
    if inv.state == "output-denied":
        reason = (inv.approval or {}).get("reason")
        return f"Tool execution denied: {reason}" if isinstance(reason, str) and reason else "Tool execution denied."
    return _json_text(inv.result) if inv.result is not None else "null"


def _assistant_step(texts: list[str], calls: list[ToolInvocation]) -> Iterator[dict[str, Any]]:
    answered = [inv for inv in calls if inv.state in _ANSWERED_STATES]
    if not texts and not answered:
        return
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if answered:
        msg["tool_calls"] = [_tool_call(inv) for inv in answered]
    yield msg
    for inv in answered:
        yield {"role": "tool", "tool_call_id": inv.tool_call_id, "content": _tool_output(inv)}


def _assistant_messages(message: Message) -> Iterator[dict[str, Any]]:
    """One assistant (+ tool results) message per step; text after a tool call starts a new step."""
    texts: list[str] = []
    calls: list[ToolInvocation] = []
    parts = message.content.parts
    if not parts and message.content.content:
        texts.append(message.content.content)
    for part in parts:
        if isinstance(part, StepStartPart):
            yield from _assistant_step(texts, calls)
            texts, calls = [], []
        elif isinstance(part, TextPart):
            if not part.text:
                continue
            if calls:
                yield from _assistant_step(texts, calls)
                texts, calls = [], []
            texts.append(part.text)
        elif isinstance(part, ToolInvocationPart):
            calls.append(part.tool_invocation)
    yield from _assistant_step(texts, calls)


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = spec.parameters
    return {"type": "function", "function": function}


def chat_payload(model: str, request: ModelRequest) -> dict[str, Any]:
    """The ``/chat/completions`` JSON body for ``request`` (pure; exposed for tests and debugging)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": text} for text in request.system]
    for message in request.messages:
        if message.role == "user":
            content = _user_content(message)
            if content is not None:
                messages.append({"role": "user", "content": content})
        elif message.role == "assistant":
            messages.extend(_assistant_messages(message))
        elif message.role == "system":
            if message.text:
                messages.append({"role": "system", "content": message.text})
        # Signals reach a model as the agent renders them (user messages, ``processors.for_model``); a raw one
        # in a request built by hand is skipped.
    payload: dict[str, Any] = {"model": model, "messages": messages}
    if request.tools:
        payload["tools"] = [_tool(spec) for spec in request.tools]
    return payload


# --- the model --------------------------------------------------------------------------------------------


class OpenAIChatModel:
    """A :class:`LanguageModel` speaking the OpenAI-compatible ``/chat/completions`` API (extra ``[openai]``).

    ``api_key`` falls back to ``OPENAI_API_KEY``; ``base_url`` to ``OPENAI_BASE_URL``, then the OpenAI API.
    A key is required only for ``api.openai.com`` (local compatible servers often need none). Close it with
    :meth:`aclose` or ``async with``; a given ``client`` is used as is and never closed here.

    :raises ~threadmind.errors.ConfigError: httpx is missing, or an argument is invalid.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAIChatModel: model must be a non-empty string, got {model!r}")
        self.model = model
        self._http = OpenAIHTTP(
            owner="OpenAIChatModel",
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            client=client,
            error=ModelError,
            code_prefix="THREADMIND_MODEL",
        )

    @property
    def model_id(self) -> str:
        """``openai/<model>``, the model-router string that resolves to this model."""
        return f"openai/{self.model}"

    @property
    def base_url(self) -> str:
        """The API root requests go to (``…/v1``)."""
        return self._http.display_url

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send one chat completion request.

        :raises ~threadmind.errors.ModelError: HTTP 4xx (at once), 429/5xx/network failures after the
            retries, a malformed response, or a closed model. The message names the status and quotes the
            start of the server's answer; it never contains the API key.
        """
        body = msgspec.json.encode(chat_payload(self.model, request), enc_hook=str)
        raw = await self._http.post("/chat/completions", body, what=f"chat completion ({self.model})")
        return parse_chat_response(raw)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
        """Send one chat completion request with ``stream: true`` and yield its pieces as they arrive.

        Server-sent events are read incrementally (see :class:`ChatStreamAssembler` for what each becomes);
        usage is asked for with ``stream_options.include_usage``. A server that answers with a whole JSON
        completion instead is streamed as one chunk. Connecting and the status are retried as in
        :meth:`generate`; once the body is being read nothing is retried. Closing the iterator (or
        cancelling its consumer) closes the HTTP response, so the server stops generating.

        :raises ~threadmind.errors.ModelError: as :meth:`generate` for the status; a malformed event
            (``THREADMIND_MODEL_BAD_RESPONSE``), an error event (``THREADMIND_MODEL_STREAM_ERROR``), or a
            connection dropped before the end of the stream (``THREADMIND_MODEL_STREAM_INTERRUPTED``).
        """
        payload = chat_payload(self.model, request)
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        body = msgspec.json.encode(payload, enc_hook=str)
        what = f"chat completion stream ({self.model})"
        response = await self._http.open_stream("/chat/completions", body, what=what)
        source: AsyncIterator[bytes] | None = None
        try:
            if response.headers.get("content-type", "").startswith("application/json"):
                raw = await self._read_whole(response, what)
                for chunk in response_chunks(parse_chat_response(raw)):
                    yield chunk
                return
            assembler = ChatStreamAssembler(redact=self._http.redact)
            decoder = SSEDecoder()
            source = response.aiter_bytes()
            while not assembler.done:
                try:
                    data = await anext(source)
                except StopAsyncIteration:
                    for chunk in self._events(assembler, decoder.close()):
                        yield chunk
                    for chunk in assembler.end():
                        yield chunk
                    break
                except self._http.transport_errors as exc:
                    raise self._http.failure(
                        f"{what} from {self._http.display_url} was cut off after {assembler.events} event(s): "
                        f"{type(exc).__name__}: {exc or 'connection lost'}",
                        code="STREAM_INTERRUPTED",
                    ) from exc
                try:
                    events = decoder.feed(data)
                except EventTooLarge as exc:
                    raise ModelError(f"{what}: {exc}", code="THREADMIND_MODEL_BAD_RESPONSE") from exc
                for chunk in self._events(assembler, events):
                    yield chunk
            await self._drain(source)
        finally:
            with anyio.CancelScope(shield=True):
                close_source = getattr(source, "aclose", None)
                if close_source is not None:
                    await close_source()
                await response.aclose()

    async def _drain(self, source: AsyncIterator[bytes]) -> None:
        """Read what follows ``[DONE]`` (the end of the chunked body) so the connection goes back to the pool;
        a server that keeps the body open after ``[DONE]`` costs at most :data:`_DRAIN_SECONDS`."""
        read = 0
        with anyio.move_on_after(_DRAIN_SECONDS), contextlib.suppress(*self._http.transport_errors):
            async for piece in source:
                read += len(piece)
                if read > _DRAIN_BYTES:
                    break

    @staticmethod
    def _events(assembler: ChatStreamAssembler, events: list[str]) -> Iterator[ModelChunk]:
        for data in events:
            yield from assembler.feed(data)

    async def _read_whole(self, response: httpx.Response, what: str) -> bytes:
        try:
            return await response.aread()
        except self._http.transport_errors as exc:
            raise self._http.failure(
                f"{what} from {self._http.display_url} was cut off: {type(exc).__name__}: {exc or 'connection lost'}",
                code="STREAM_INTERRUPTED",
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        await self._http.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self._http.display_url!r})"


def resolve_model(spec: str | LanguageModel) -> LanguageModel:
    """A model from a model-router string (``"openai/gpt-4o-mini"``) or a :class:`LanguageModel` as is.

    :raises ~threadmind.errors.ConfigError: an unknown provider prefix, a string without one, or an object
        that is not a language model.
    """
    if isinstance(spec, str):
        provider, sep, name = spec.partition("/")
        supported = ", ".join(f"'{p}/<model>'" for p in _SUPPORTED_PROVIDERS)
        if not sep or not provider or not name:
            raise ConfigError(f"model {spec!r} must be a '<provider>/<model>' string; supported: {supported}")
        if provider == "openai":
            return OpenAIChatModel(name)
        raise ConfigError(f"model provider {provider!r} in {spec!r} is not supported; supported: {supported}")
    if isinstance(spec, LanguageModel):
        return spec
    raise ConfigError(f"model must be a '<provider>/<model>' string or a LanguageModel, not {type(spec).__name__}")
