"""How many frames a SQLite WAL holds right now, read from its wal-index (the ``-shm`` file), without a statement.

The wal-index header is part of SQLite's documented file format (https://www.sqlite.org/walformat.html, §2.1): its
first copy starts at offset 0 of the ``-shm`` file, and the 32-bit ``mxFrame`` at offset 16, in the machine's byte
order, is the index of the last valid frame of the WAL. SQLite checkpoints the WAL itself in the COMMIT that takes
it past ``wal_autocheckpoint`` frames (1 000): the writer reads this to keep such a commit off the event loop.
A racy read is fine: the header changes only under the write lock, which the reader holds or is about to take.
"""

from __future__ import annotations

import mmap
import os
import struct

__all__ = ("WalIndex",)

_MX_FRAME = struct.Struct("=I")
_MX_FRAME_OFFSET = 16


class WalIndex:
    """A read-only view of one database's wal-index header (see the module docstring)."""

    def __init__(self, database: str) -> None:
        self._path = database + "-shm"
        self._map: mmap.mmap | None = None

    def frames(self) -> int | None:
        """The frames in the WAL now; None when the wal-index cannot be read (not in WAL mode, not created yet)."""
        view = self._map
        if view is None:
            view = self._map = self._open()
            if view is None:
                return None
        frames: int = _MX_FRAME.unpack_from(view, _MX_FRAME_OFFSET)[0]
        return frames

    def _open(self) -> mmap.mmap | None:
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < _MX_FRAME_OFFSET + _MX_FRAME.size:
                return None
            return mmap.mmap(fd, _MX_FRAME_OFFSET + _MX_FRAME.size, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
