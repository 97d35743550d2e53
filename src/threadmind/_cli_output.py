"""What the ``threadmind`` command prints: tables and key/value pairs (``rich`` on a terminal when installed, else
aligned plain text), a progress callback, and short forms of texts and sizes."""

from __future__ import annotations

import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

__all__ = ("TEXT_WIDTH", "CliError", "human_bytes", "print_pairs", "print_table", "progress", "snippet", "text_width",
           "use_rich")

TEXT_WIDTH = 72
_WRAPPING = frozenset({"title", "text", "value"})


class CliError(Exception):
    """A user-facing failure of a command: printed as one line, exit status 1."""


def use_rich(stream: TextIO) -> bool:
    """Rich output only for a terminal and only when rich is installed."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def text_width(text: str) -> int:
    """Terminal columns of ``text``: East Asian wide and full-width characters take two."""
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None) -> None:
    """A table on stdout: rich on a terminal, else aligned plain-text columns."""
    cells = [[str(c) for c in row] for row in rows]
    if use_rich(sys.stdout):
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for header in headers:  # ids and times never wrap or truncate (users copy them); free text wraps
            table.add_column(header, no_wrap=header not in _WRAPPING, overflow="fold")
        for row in cells:
            table.add_row(*row)
        Console(file=sys.stdout).print(table)
        return
    if title:
        print(title)
    widths = [max([text_width(h), *(text_width(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print("  ".join(c + " " * (w - text_width(c)) for c, w in zip(row, widths, strict=True)).rstrip())


def print_pairs(pairs: Sequence[tuple[str, object]], *, title: str | None = None) -> None:
    print_table(("field", "value"), [(k, v) for k, v in pairs], title=title)


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback: a rich bar on a terminal, else one plain line per update."""
    if use_rich(sys.stdout):
        from rich.progress import Progress

        with Progress() as bar:
            task = bar.add_task(label, total=None)

            def _rich(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield _rich
        return

    last = [-1, 0.0]  # the last tenth printed, and when

    def _plain(done: int, total: int) -> None:
        # Without a terminal: a line per tenth of the way (or every 5 s), never one per batch.
        tenth = 10 * done // total if total else 10
        now = time.monotonic()
        if tenth == last[0] and now - last[1] < 5.0 and done != total:
            return
        last[0], last[1] = tenth, now
        percent = 100 * done // total if total else 100
        print(f"{label}: {done}/{total} messages ({percent}%)", flush=True)

    yield _plain


def snippet(text: str, width: int = TEXT_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
