"""The processes sharing one SQLite file, and how they keep out of each other's way: a lock file beside it.

SQLite serializes writers on its own; what it does not do is tell a process that another one changed the
file (so its caches can be trusted or not), or give one process a thread for a whole agent turn. Both go
through ``<database>-threadmind.lock``, with POSIX record locks (held by the kernel for the process, and
released the instant it dies, even by SIGKILL) and a few bytes of shared data:

* **Presence.** Each process holds an exclusive lock on one slot byte for as long as it has the file open, and
  writes its pid and a heartbeat into the slot's data: the time until which it vouches for the holds it has (the
  latest heartbeat plus the longest ``ttl`` renewed then, never moved backwards). Whether another process is
  present is one ``F_GETLK`` over the slot bytes; a slot whose lock is gone is free again.
* **Generation.** A counter every process increments when it arrives (after taking its slot, before its first
  write). A process that found itself alone remembers the generation: while it is unchanged, nobody else has
  had the file open since, so its caches are exact. Otherwise it reads through to the database.
* **Thread holds.** An agent turn holds an exclusive lock on the byte ``TURN_BASE + hash(thread)``. Another
  process's turn on the thread waits for it (polling with backoff; ``reject`` gives up at once).
* **Waiters.** While it waits for a thread, a process holds a shared lock on ``WAIT_BASE + hash(thread)``. A
  process that gives a thread back while another process waits for it lets the waiter have it: for
  ``YIELD_SECONDS`` (longer than a waiter's poll interval) it does not take the thread again itself, so turns of
  several processes on one thread take their turns instead of one process running all of its own first. A holder that
  dies releases it at once; a holder that is alive but frozen (past the time its last heartbeat vouched for) is
  taken over through the database (see ``SQLiteStore.acquire_lease``), and its later writes are refused.

Within one process, locks on the same file are shared by every store object on it (POSIX locks belong to the
process, and closing any descriptor of the file would drop them all), so one ``Peers`` object per file holds
the descriptor and keeps an in-process table of who holds which thread.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
import time
import weakref
from typing import Final

from .._memo import memo

__all__ = ("Peers", "peers_for")

_FLOCK: Final = struct.Struct("hhqqi4x")  # struct flock on Linux (l_type, l_whence, l_start, l_len, l_pid)
_U64: Final = struct.Struct("<Q")
_SLOT: Final = struct.Struct("<Qd")  # pid, alive until (time.time() of the last heartbeat + its ttl)

_MAGIC: Final = b"TMLOCK01"
_GEN_OFFSET: Final = 8  # the generation counter (u64)
_TAKEOVERS_OFFSET: Final = 24  # how many holds were ever taken over through the database (u64)
_HEADER_LOCK: Final = 16  # one byte: held while the header or the slot table is updated
SLOTS: Final = 256  # processes that can share one file at once
_SLOT_LOCKS: Final = 1024  # SLOTS bytes: a process's presence
_SLOT_DATA: Final = 4096  # SLOTS x 16 bytes: pid and heartbeat
_FILE_SIZE: Final = _SLOT_DATA + SLOTS * _SLOT.size
TURN_BASE: Final = 1 << 32  # thread-hold bytes live in [TURN_BASE, TURN_BASE + TURN_SPACE)
TURN_SPACE: Final = 1 << 40
WAIT_BASE: Final = TURN_BASE + TURN_SPACE  # waiter bytes, one per thread-hold byte
YIELD_SECONDS: Final = 0.05


def _flock(kind: int, start: int, length: int = 1) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, start, length, 0)


def _hashed_turn_byte(key: str) -> int:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return TURN_BASE + int.from_bytes(digest, "little") % TURN_SPACE


_turn_byte = memo(_hashed_turn_byte, 65536)


def _wait_byte(key: str) -> int:
    return _turn_byte(key) - TURN_BASE + WAIT_BASE


class Peers:
    """Coordination of the processes on one database file (see the module docstring). Use :func:`peers_for`."""

    def __init__(self, db_path: str) -> None:
        self.lock_path = f"{db_path}-threadmind.lock"
        self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._mutex = threading.Lock()  # store objects of one process may run on different threads
        self._users = 0
        self._slot: int | None = None
        self._held: dict[str, object] = {}  # key -> the in-process holder (one Memory's turn)
        self._waiting: dict[str, int] = {}  # key -> how many of this process's callers wait for it
        self._yield_until: dict[str, float] = {}  # key -> until when it is left to another process's waiter
        self._alone_generation: int | None = None  # the generation when this process last found itself alone
        self.lapsed_at = -math.inf  # when a heartbeat last came after the vouched time (holds before it lapsed)
        self.epoch = 0  # bumped whenever this process starts trusting its caches again
        try:
            self._prepare()
            self._map = mmap.mmap(self._fd, _FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(self._fd)
            raise

    # lifecycle -----------------------------------------------------------------------------------
    def _prepare(self) -> None:
        with self._header_locked():
            head = os.pread(self._fd, len(_MAGIC), 0)
            if head != _MAGIC or os.fstat(self._fd).st_size < _FILE_SIZE:
                os.ftruncate(self._fd, _FILE_SIZE)
                os.pwrite(self._fd, _MAGIC, 0)

    def attach(self) -> None:
        """A store object on this file opened: the first one takes a presence slot and bumps the generation.

        :raises OSError: every slot is taken (more than ``SLOTS`` processes on one file).
        """
        with self._mutex:
            self._users += 1
            if self._slot is not None:
                return
            try:
                with self._header_locked():
                    self._slot = self._claim_slot()
                    os.pwrite(self._fd, _SLOT.pack(os.getpid(), time.time()), _SLOT_DATA + self._slot * _SLOT.size)
                    generation = _U64.unpack(os.pread(self._fd, 8, _GEN_OFFSET))[0] + 1
                    os.pwrite(self._fd, _U64.pack(generation), _GEN_OFFSET)
            except BaseException:
                self._users -= 1
                raise

    def detach(self) -> None:
        """A store object closed: the last one gives the slot (and any hold) back."""
        with self._mutex:
            self._users -= 1
            if self._users > 0 or self._slot is None:
                return
            slot, self._slot = self._slot, None
            os.pwrite(self._fd, _SLOT.pack(0, 0.0), _SLOT_DATA + slot * _SLOT.size)
            self._unlock(_SLOT_LOCKS + slot)
            for key in list(self._held):
                self._unlock(_turn_byte(key))
            self._held.clear()
            for key in list(self._waiting):
                self._unlock(_wait_byte(key))
            self._waiting.clear()
            self._alone_generation = None

    def _claim_slot(self) -> int:
        for slot in range(SLOTS):
            if self._try_lock(_SLOT_LOCKS + slot):
                return slot
        raise OSError(errno.EAGAIN, f"more than {SLOTS} processes have {self.lock_path!r} open")

    # presence and caches -------------------------------------------------------------------------
    def in_process(self) -> int:
        """How many store objects of this process have the file open."""
        return self._users

    def alone(self) -> bool:
        """True while no other process has had the file open since this one last found itself alone.

        Cheap when alone (a read of the shared generation); otherwise one ``F_GETLK`` to see whether the others
        have gone. Going from shared back to alone bumps :attr:`epoch` (caches built meanwhile are dropped).
        """
        generation = _U64.unpack_from(self._map, _GEN_OFFSET)[0]
        if self._alone_generation == generation:
            return True
        # Read the generation before looking for others: an arrival after this read changes it (and is
        # seen next time); one before it holds its slot already (and is seen now).
        if self._holder(_SLOT_LOCKS, SLOTS) is not None:
            self._alone_generation = None
            return False
        with self._mutex:
            if self._alone_generation != generation:
                self._alone_generation = generation
                self.epoch += 1
        return True

    def beat(self, ttl: float, *, lazy: bool = False) -> None:
        """Tell the others this process is alive: its holds stand for ``ttl`` seconds more (the time already
        vouched for is never shortened). A beat that comes after the vouched time has passed (the process was
        frozen or stalled) does not revive the holds it had: they stay lapsed (see :meth:`lapsed`).

        ``lazy`` (a new hold): no write while at least half of ``ttl`` is still vouched for (the heartbeat keeps
        it so), which spares every turn a ``pwrite``.
        """
        with self._mutex:
            if self._slot is None:
                return
            where = _SLOT_DATA + self._slot * _SLOT.size
            vouched = _SLOT.unpack_from(self._map, where)[1]
            now = time.time()
            if lazy and vouched >= now + ttl / 2:
                return
            if vouched < now and self._held:
                self.lapsed_at = now
            os.pwrite(self._fd, _SLOT.pack(os.getpid(), max(vouched, now + ttl)), where)

    def lapsed(self, acquired_at: float) -> bool:
        """Whether a hold taken at ``acquired_at`` lapsed: the time this process vouched for has passed, or had
        passed when it beat again afterwards."""
        if acquired_at < self.lapsed_at:
            return True
        slot = self._slot
        return slot is not None and _SLOT.unpack_from(self._map, _SLOT_DATA + slot * _SLOT.size)[1] < time.time()

    def alive_until(self, pid: int) -> float | None:
        """Until when the present process ``pid`` vouched for its holds (its last heartbeat plus its ttl), or
        None if it holds no slot (it is gone: its locks went with it)."""
        for slot in range(SLOTS):
            found, until = _SLOT.unpack_from(self._map, _SLOT_DATA + slot * _SLOT.size)
            if found == pid and self._holder(_SLOT_LOCKS + slot) == pid:
                return float(until)
        return None

    # takeovers -----------------------------------------------------------------------------------
    def takeovers(self) -> int:
        """How many takeovers through the database were ever begun on this file (0: no lease row exists)."""
        return int(_U64.unpack_from(self._map, _TAKEOVERS_OFFSET)[0])

    def note_takeover(self) -> None:
        """Count a takeover about to be written (so every process checks lease rows from now on)."""
        with self._header_locked():
            count = _U64.unpack(os.pread(self._fd, 8, _TAKEOVERS_OFFSET))[0] + 1
            os.pwrite(self._fd, _U64.pack(count), _TAKEOVERS_OFFSET)

    # thread holds --------------------------------------------------------------------------------
    def try_hold(self, key: str, holder: object) -> int | None:
        """Take ``key`` for ``holder``; None when taken, else the pid of the process holding it (0: another
        holder in this process; -1: nobody, but this process just gave it back and another process waits)."""
        with self._mutex:
            if key in self._held:
                return 0
            until = self._yield_until.get(key)
            if until is not None:
                if time.monotonic() < until and self._holder(_wait_byte(key)) is not None:
                    return -1
                del self._yield_until[key]
            byte = _turn_byte(key)
            if self._try_lock(byte):
                self._held[key] = holder
                return None
        return self._holder(byte) or -1

    def release(self, key: str, holder: object) -> None:
        """Give ``key`` back (no-op unless ``holder`` holds it); when another process waits for it, leave it to
        that process for a moment (see the module docstring)."""
        alone = self.alone()  # alone, nobody can be waiting: no need to look
        with self._mutex:
            if key in self._held and self._held[key] == holder:
                del self._held[key]
                self._unlock(_turn_byte(key))
                if not alone and self._holder(_wait_byte(key)) is not None:
                    self._yield_until[key] = time.monotonic() + YIELD_SECONDS

    def wait_begin(self, key: str) -> None:
        """Tell the other processes that this one waits for ``key`` (until :meth:`wait_end`)."""
        with self._mutex:
            count = self._waiting.get(key, 0)
            if count == 0 and not self._try_lock(_wait_byte(key), fcntl.F_RDLCK):
                return  # cannot happen (nobody takes write locks there); waiting unannounced is still correct
            self._waiting[key] = count + 1

    def wait_end(self, key: str) -> None:
        with self._mutex:
            count = self._waiting.get(key, 0)
            if count <= 1:
                if self._waiting.pop(key, None) is not None:
                    self._unlock(_wait_byte(key))
            else:
                self._waiting[key] = count - 1

    def holds(self, key: str, holder: object) -> bool:
        """Whether ``holder`` holds ``key`` in this process."""
        return key in self._held and self._held[key] == holder

    # locks ---------------------------------------------------------------------------------------
    def _try_lock(self, byte: int, kind: int = fcntl.F_WRLCK) -> bool:
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETLK, _flock(kind, byte))
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def _unlock(self, byte: int) -> None:
        fcntl.fcntl(self._fd, fcntl.F_SETLK, _flock(fcntl.F_UNLCK, byte))

    def _holder(self, start: int, length: int = 1) -> int | None:
        """The pid of another process holding a lock in the range, or None."""
        answer = fcntl.fcntl(self._fd, fcntl.F_GETLK, _flock(fcntl.F_WRLCK, start, length))
        kind, _, _, _, pid = _FLOCK.unpack(answer)
        return None if kind == fcntl.F_UNLCK else int(pid)

    def _header_locked(self) -> _HeaderLock:
        return _HeaderLock(self._fd)

    def __del__(self) -> None:
        mapping = getattr(self, "_map", None)
        if mapping is not None:
            mapping.close()
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)



class _HeaderLock:
    """Blocking exclusive lock on the header byte (held for microseconds while slots or the counter change)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.fcntl(self._fd, fcntl.F_SETLKW, _flock(fcntl.F_WRLCK, _HEADER_LOCK))

    def __exit__(self, *exc: object) -> None:
        fcntl.fcntl(self._fd, fcntl.F_SETLK, _flock(fcntl.F_UNLCK, _HEADER_LOCK))


_BY_FILE: weakref.WeakValueDictionary[tuple[int, int], Peers] = weakref.WeakValueDictionary()
_BY_FILE_LOCK = threading.Lock()


def peers_for(db_path: str, identity: tuple[int, int]) -> Peers:
    """The one ``Peers`` of this process for the database file ``identity`` (device, inode)."""
    with _BY_FILE_LOCK:
        peers = _BY_FILE.get(identity)
        if peers is None:
            peers = _BY_FILE[identity] = Peers(db_path)
        return peers
