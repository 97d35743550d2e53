"""How many frames a SQLite WAL holds right now, read from its wal-index (the ``-shm`` file), without a statement.

The wal-index header is part of SQLite's documented file format (https://www.sqlite.org/walformat.html, §2.1): its
first copy starts at offset 0 of the ``-shm`` file, and the 32-bit ``mxFrame`` at offset 16, in the machine's byte
order, is the index of the last valid frame of the WAL. SQLite checkpoints the WAL itself in the COMMIT that takes
it past ``wal_autocheckpoint`` frames (1 000): the writer reads this to keep such a commit off the event loop.
A racy read is fine: the header changes only under the write lock, which the reader holds or is about to take.

**The descriptor stays open.** SQLite's locks on the ``-shm`` file are POSIX record locks, which belong to the
process and are all dropped when the process closes *any* descriptor of that file. A descriptor opened to read
the header and closed again released every lock this process's connections held there, among them the one that
tells a process opening the file that others are using it: that process then reset the wal-index under them (a
writer died of ``SIGBUS``, another COMMIT failed with ``SQLITE_PROTOCOL``). So one descriptor per file is shared by
every open store of the process on it, and closed only when the last of them closed its connections. The header is
read with ``pread`` (a read of a file reset meanwhile comes back short instead of faulting, as a map would).
"""

from __future__ import annotations

import os
import struct
import threading

__all__ = ("WalIndex",)

_MX_FRAME = struct.Struct("=I")
_MX_FRAME_OFFSET = 16

_lock = threading.Lock()
_shared: dict[tuple[int, int], list[int]] = {}  # (device, inode) of a -shm file -> [its descriptor, its users]


class WalIndex:
    """A read-only view of one database's wal-index header (see the module docstring)."""

    def __init__(self, database: str) -> None:
        self._path = database + "-shm"
        self._key: tuple[int, int] | None = None
        self._fd = -1

    def frames(self) -> int | None:
        """The frames in the WAL now; None when the wal-index cannot be read (not in WAL mode, not created yet,
        being reset)."""
        if self._key is None and not self._attach():
            return None
        try:
            raw = os.pread(self._fd, _MX_FRAME.size, _MX_FRAME_OFFSET)
        except OSError:
            return None
        if len(raw) < _MX_FRAME.size:
            return None
        frames: int = _MX_FRAME.unpack(raw)[0]
        return frames

    def _attach(self) -> bool:
        """Take the process's descriptor of the -shm file (opened once, never closed while in use)."""
        with _lock:
            try:
                info = os.stat(self._path)  # (a stat opens nothing)
            except OSError:
                return False
            key = (info.st_dev, info.st_ino)
            entry = _shared.get(key)
            if entry is None:
                try:
                    fd = os.open(self._path, os.O_RDONLY)
                except OSError:
                    return False
                entry = _shared[key] = [fd, 0]
            entry[1] += 1
            self._key, self._fd = key, entry[0]
            return True

    def close(self) -> None:
        """Stop using the descriptor; the last user of the file closes it (call once the store's connections are
        closed: closing it drops the process's locks on the file)."""
        with _lock:
            key, self._key, self._fd = self._key, None, -1
            if key is None:
                return
            entry = _shared[key]
            entry[1] -= 1
            if entry[1] == 0:
                del _shared[key]
                os.close(entry[0])
