"""``threadmind import``: a JSON-lines file of Mastra messages read and checked line by line, and saved a thread at a
time in batches (a failing batch retried message by message, so one bad line costs only itself)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from ._cli_output import CliError
from .errors import EmbedderError, InvalidMessage, ThreadmindError

if TYPE_CHECKING:
    from .codecs import Message
    from .memory import Memory

__all__ = ("IMPORT_BATCH", "parse_lines", "read_import_file", "save_lines")

IMPORT_BATCH = 500


def parse_lines(stream: TextIO) -> tuple[list[tuple[int, Message]], list[str]]:
    """Valid messages with their line numbers, and one error text per bad line."""
    import msgspec

    from .codecs import message_from_dict
    from .codecs._paths import DECODE_ERRORS

    good: list[tuple[int, Message]] = []
    bad: list[str] = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:  # strict JSON: no NaN, too-long numbers, lone surrogates or unbounded nesting get through
            value = msgspec.json.decode(line)
        except DECODE_ERRORS as exc:
            bad.append(f"line {number}: invalid JSON: {exc}")
            continue
        try:
            message = message_from_dict(value)
        except InvalidMessage as exc:
            bad.append(f"line {number}: {exc.message}")
            continue
        if not message.thread_id or not message.resource_id:
            missing = "threadId" if not message.thread_id else "resourceId"
            bad.append(f"line {number}: `{missing}` is required to import a message")
            continue
        good.append((number, message))
    return good, bad


def read_import_file(path: str) -> tuple[list[tuple[int, Message]], list[str]]:
    if path == "-":
        return parse_lines(sys.stdin)
    if not os.path.isfile(path):
        raise CliError(f"import file {path!r} " + ("is not a file" if os.path.exists(path) else "does not exist"))
    try:
        with open(path, encoding="utf-8") as stream:
            return parse_lines(stream)
    except UnicodeDecodeError as exc:
        raise CliError(f"import file {path!r} is not UTF-8 text: {exc.reason}") from None


async def save_lines(memory: Memory, lines: list[tuple[int, Message]], bad: list[str]) -> tuple[int, bool]:
    """Save one thread's messages in batches; a failing batch is retried message by message."""
    saved = 0
    pending_vectors = False
    for start in range(0, len(lines), IMPORT_BATCH):
        chunk = lines[start : start + IMPORT_BATCH]
        try:
            saved += len((await memory.save_messages([m for _, m in chunk])).messages)
            continue
        except EmbedderError:
            pending_vectors = True  # the messages are saved; their vectors wait for `threadmind reindex`
            saved += len(chunk)
            continue
        except ThreadmindError:
            pass
        for number, message in chunk:
            try:
                saved += len((await memory.save_messages([message])).messages)
            except EmbedderError:
                pending_vectors = True
                saved += 1
            except ThreadmindError as exc:
                bad.append(f"line {number}: {exc.message}")
    return saved, pending_vectors
