"""Starting worker processes (``_worker.py``) and talking to them: JSON lines out, commands in."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

WORKER = Path(__file__).with_name("_worker.py")


def note(**figures: Any) -> None:
    """Measured figures of a test, on stderr (shown with ``-s``; collected for the report)."""
    sys.stderr.write("MULTIPROCESS " + json.dumps(figures) + "\n")


class WorkerFailed(AssertionError):
    """A worker reported a failure or ended early; carries its traceback."""


class Worker:
    """One running ``_worker.py``."""

    def __init__(self, proc: Process, config: dict[str, Any]) -> None:
        self.proc = proc
        self.config = config
        assert proc.stdout is not None
        self._out = BufferedByteReceiveStream(proc.stdout)
        self.pid = proc.pid

    async def event(self, name: str | None = None, *, limit: float = 40.0) -> dict[str, Any]:
        """The next line the worker prints (which must be the event ``name`` when given)."""
        with anyio.fail_after(limit):
            try:
                line = await self._out.receive_until(b"\n", 1 << 22)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                raise WorkerFailed(f"worker {self.config.get('proc')} ended (exit {self.proc.returncode})") from None
        event: dict[str, Any] = json.loads(line)
        if event.get("event") == "failed":
            raise WorkerFailed(f"worker {self.config.get('proc')} failed: {event['detail']}")
        if name is not None and event.get("event") != name:
            raise WorkerFailed(f"worker {self.config.get('proc')} said {event!r}, expected {name!r}")
        return event

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(line.encode() + b"\n")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)


@asynccontextmanager
async def workers(configs: Sequence[dict[str, Any]], *, start: bool = True) -> AsyncIterator[list[Worker]]:
    """Start one worker per config, wait until each is ready, then (``start``) tell them all to go at once.

    Every worker is stopped on the way out (killed if it is still running).
    """
    async with AsyncExitStack() as stack:
        running: list[Worker] = []
        for config in configs:
            proc = await anyio.open_process([sys.executable, str(WORKER), json.dumps(config)], stderr=None)
            stack.push_async_callback(_stop, proc)
            running.append(Worker(proc, config))
        for worker in running:
            await worker.event("ready", limit=60)
        if start:
            for worker in running:
                await worker.send("go")
        yield running


async def _stop(proc: Process) -> None:
    with anyio.CancelScope(shield=True):
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            except ProcessLookupError:
                pass
        await proc.wait()
        await proc.aclose()
