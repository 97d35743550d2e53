"""Text for embedding: which text of a message is embedded, and Mastra's ``chunkText`` word packing."""

from __future__ import annotations

import re

from ..codecs import Message, TextPart

__all__ = ("chunk_text", "is_blank", "message_text")

# JavaScript's \s: what Mastra's `text.split(/\s+/)` and `trim()` treat as whitespace.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_SPACE_CHARS = "".join(chr(c) for c in (*range(9, 14), 32, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                                            0x202F, 0x205F, 0x3000, 0xFEFF))  # the same set, for str.strip
_SPLIT = re.compile(f"[{_JS_SPACE}]+")
_TRIM = re.compile(f"^[{_JS_SPACE}]+|[{_JS_SPACE}]+$")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def message_text(message: Message) -> str:
    """The text a message is embedded by (reference §6.3): ``content.content`` if non-blank, else text parts.

    Text parts are joined with a space and trimmed; an empty result means the message gets no vector.
    """
    content = message.content.content
    if content and content.strip(_JS_SPACE_CHARS):
        return content
    return " ".join(p.text for p in message.content.parts if isinstance(p, TextPart)).strip(_JS_SPACE_CHARS)


def _u16len(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript counts it."""
    return len(text) + len(_ASTRAL.findall(text)) if not text.isascii() else len(text)


def _hard_split(word: str, budget: int) -> list[str]:
    """Budget-sized slices of an over-long word (never splitting a surrogate pair)."""
    if word.isascii() or not _ASTRAL.search(word):
        return [word[i : i + budget] for i in range(0, len(word), budget)]
    out: list[str] = []
    current: list[str] = []
    size = 0
    for ch in word:
        width = 2 if ord(ch) > 0xFFFF else 1
        if current and size + width > budget:
            out.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += width
    if current:
        out.append("".join(current))
    return out


def chunk_text(text: str, max_chars: int = 16384) -> list[str]:
    """Mastra's ``chunkText``: greedy word packing into chunks of at most ``max_chars`` UTF-16 units.

    Whitespace runs become single spaces, leading whitespace disappears and trailing whitespace leaves one
    trailing space; a word longer than the budget flushes the chunk and is hard-split. No empty chunks.
    """
    if 2 * len(text) <= max_chars:  # fits whatever its UTF-16 length: one chunk, whitespace collapsed
        # isprintable() is False for every JS whitespace but the ASCII space, so printable text without a
        # double space has nothing to collapse (the common case; skips a regex pass per message).
        collapsed = text if text.isprintable() and "  " not in text else _SPLIT.sub(" ", text)
        collapsed = collapsed[1:] if collapsed.startswith(" ") else collapsed
        return [collapsed] if collapsed else []
    return _pack_words(text, max_chars)


def _pack_words(text: str, max_chars: int) -> list[str]:
    chunks: list[str] = []
    current = ""
    current_len = 0
    for word in _SPLIT.split(text):
        word_len = _u16len(word)
        if word_len > max_chars:
            if current:
                chunks.append(current)
                current, current_len = "", 0
            chunks.extend(_hard_split(word, max_chars))
            continue
        piece_len = word_len + 1 if current else word_len
        if current_len + piece_len > max_chars:
            chunks.append(current)
            current, current_len = word, word_len
        else:
            current = f"{current} {word}" if current else word
            current_len += piece_len
    if current:
        chunks.append(current)
    return chunks


def is_blank(text: str) -> bool:
    """Whether ``text`` is empty or only JavaScript whitespace (such a query finds nothing)."""
    return not text or not _TRIM.sub("", text)

