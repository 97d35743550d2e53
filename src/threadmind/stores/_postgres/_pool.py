"""The connection layer of ``PostgresStore``: an asyncpg pool, retries where they are safe, errors as ours.

asyncpg is imported on first use (``import threadmind`` never imports it); without the ``[postgres]`` extra the
store raises ``ConfigError`` with the pip command.

**Retries.** A read is retried (three tries, short backoff) on a transient connection failure: the server
restarting or refusing connections for now, a dropped connection, too many clients, a serialization failure
or a deadlock. A write is retried only when it provably was not applied: the connection could not be had
(nothing was sent), or the server rolled the transaction back (serialization failure, deadlock). A write whose
connection broke mid-statement is not retried: the caller gets a ``StorageError`` saying so.

**Cancellation.** A write runs shielded from cancellation once its connection is in hand, so it is applied fully
or not at all and the connection goes back to the pool in a known state; a cancelled caller still gets the
cancellation afterwards.

**PgBouncer.** Every statement is parameterised; nothing relies on session state: no session-level advisory
locks, no temporary tables, no ``SET``, settings only as startup parameters (``TimeZone`` is UTC), so
``statement_cache_size=0`` (no named prepared statements) works behind transaction pooling. For the same reason
a connection going back to the pool is not reset (asyncpg's reset would cost a round trip per operation).
"""

from __future__ import annotations

import enum
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.lowlevel

from ...errors import ConfigError, StorageError
from ...tracing import ATTR_DB_SYSTEM, get_tracer, tracing_enabled
from ._schema import migrate

__all__ = ("IDLE_IN_TRANSACTION", "PgPool", "check_connection", "check_int", "import_asyncpg", "masked",
           "storage_error", "transaction")

T = TypeVar("T")
Conn = Any  # an asyncpg connection (asyncpg ships no type information)

_TRIES = 3
_BACKOFF = (0.05, 0.25)  # seconds before the 2nd and 3rd try (with jitter)
# SQLSTATEs after which the server has applied nothing of the statement or transaction.
_ROLLED_BACK = frozenset({"40001", "40P01"})
# Refused before any work: retried for every operation.
_REFUSED = frozenset({"57P03", "53300"})
# The connection went away (class 08, shutdown): reads are retried, writes are not (they may have been applied).
_DROPPED_PREFIXES = ("08", "57P01", "57P02")
PIP_HINT = "pip install 'threadmind[postgres]'"
#: A session idle inside one of the store's transactions for this long is ended by the server (its locks go with
#: it): a client frozen between two statements of a read-modify-write cannot hold a thread's row for ever.
IDLE_IN_TRANSACTION = "30s"
_BEGIN = f"BEGIN; SET LOCAL idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION}'"


def masked(dsn: str) -> str:
    """The DSN with its password replaced by ``***`` (for errors, logs and reprs)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def check_int(value: Any, name: str, low: int) -> int:
    """``value`` when it is an integer (not a bool) of at least ``low``; else ``ConfigError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def check_connection(dsn: Any, min_size: Any, max_size: Any, statement_cache_size: Any) -> None:
    """Validate what every PostgreSQL component takes to open its pool; ``ConfigError`` names the bad one."""
    if not isinstance(dsn, str) or urlsplit(dsn).scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"dsn must be a postgresql:// URL, got {masked(dsn) if isinstance(dsn, str) else dsn!r}")
    check_int(min_size, "min_size", 0)
    check_int(max_size, "max_size", 1)
    if min_size > max_size:
        raise ConfigError(f"min_size ({min_size}) must not exceed max_size ({max_size})")
    if statement_cache_size is not None:
        check_int(statement_cache_size, "statement_cache_size", 0)


def import_asyncpg() -> ModuleType:
    """The asyncpg module, or ``ConfigError`` naming the extra to install."""
    try:
        import asyncpg  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise ConfigError(f"PostgresStore needs the asyncpg driver: {PIP_HINT}") from exc
    module: ModuleType = asyncpg
    return module


def storage_error(exc: BaseException, doing: str) -> StorageError:
    """``exc`` (an asyncpg/OS error) as a ``StorageError`` naming the operation and the SQLSTATE; cause chained."""
    state = getattr(exc, "sqlstate", None)
    detail = f"{type(exc).__name__}: {exc}" if state is None else f"{exc} (SQLSTATE {state})"
    err = StorageError(f"PostgreSQL {doing} failed: {detail}")
    err.__cause__ = exc
    return err


def _transient(exc: BaseException, *, write: bool) -> bool:
    """Whether retrying ``exc`` is safe: always when nothing was applied; for reads, also a dropped connection."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        if state in _ROLLED_BACK or state in _REFUSED:
            return True
        return not write and state.startswith(_DROPPED_PREFIXES)
    return not write and isinstance(exc, (OSError, TimeoutError))


def _is_driver_error(exc: BaseException, asyncpg: ModuleType) -> bool:
    return isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError))


async def _backoff(attempt: int) -> None:
    delay = _BACKOFF[min(attempt, len(_BACKOFF) - 1)]
    await anyio.sleep(delay * (0.5 + random.random()))


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class PgPool:
    """An asyncpg pool opened lazily, with the schema migrated on first open.

    :param dsn: a ``postgresql://`` URL.
    :param min_size: connections kept open.
    :param max_size: most connections at once.
    :param statement_cache_size: asyncpg's prepared-statement cache per connection (0 behind PgBouncer in
        transaction mode); None keeps asyncpg's default.
    :param setup: run once on the first connection after the pool opened (default: the store's schema
        migration); None for nothing.
    :param init: run on every new connection before it is used (e.g. to register type codecs).
    """

    def __init__(self, dsn: str, *, min_size: int, max_size: int, statement_cache_size: int | None,
                 setup: Callable[[Conn], Awaitable[None]] | None = migrate,
                 init: Callable[[Conn], Awaitable[None]] | None = None) -> None:
        self._asyncpg = import_asyncpg()
        self.dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._cache = statement_cache_size
        self._setup = setup
        self._init = init
        self._pool: Any = None
        self._state = _State.NEW
        self._lock = anyio.Lock()
        # Connections borrowed from the asyncpg pool and kept between operations, last used on top: an operation
        # that ended cleanly puts its connection here instead of asyncpg's release, which runs in a task of its
        # own (asyncio.shield); any other ending (an error, a cancellation) releases it to asyncpg, which resets
        # or discards it. Only while no operation waits in asyncpg's pool: those wait for released connections.
        self._warm: list[Any] = []
        self._acquiring = 0  # operations waiting in asyncpg's pool

    def _is(self, state: _State) -> bool:
        return self._state is state

    @property
    def state(self) -> str:
        """``new``, ``open`` or ``closed``."""
        return self._state.value

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    async def open(self, label: str) -> None:
        """Create the pool and migrate the schema; idempotent. ``label`` names the store in errors."""
        if self._state is _State.OPEN:
            await anyio.lowlevel.checkpoint()
            return
        async with self._lock:
            if self._is(_State.OPEN):
                return
            if self._is(_State.CLOSED):
                raise StorageError(f"{label} is closed")
            kwargs: dict[str, Any] = {
                "min_size": self._min_size, "max_size": self._max_size, "reset": _keep_session,
                **self._connect_kwargs(),
            }
            if self._init is not None:
                kwargs["init"] = self._init
            pool = None
            try:
                for attempt in range(_TRIES):
                    try:
                        pool = await self._asyncpg.create_pool(self.dsn, **kwargs)
                        break
                    except Exception as exc:
                        if isinstance(exc, self._asyncpg.ClientConfigurationError) or isinstance(exc, ValueError):
                            raise ConfigError(f"dsn is not a usable PostgreSQL URL ({exc})") from exc
                        if attempt + 1 < _TRIES and _is_driver_error(exc, self._asyncpg) \
                                and _transient(exc, write=False):
                            await _backoff(attempt)
                            continue
                        raise
                assert pool is not None
                if self._setup is not None:
                    async with pool.acquire() as conn:
                        await self._setup(conn)
            except BaseException as exc:
                if pool is not None:
                    with anyio.CancelScope(shield=True):
                        await _close_pool(pool)
                if isinstance(exc, Exception) and _is_driver_error(exc, self._asyncpg):
                    raise storage_error(exc, f"open of {label}") from exc
                raise
            self._pool = pool
            self._state = _State.OPEN

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"server_settings": {"TimeZone": "UTC", "application_name": "threadmind"}}
        if self._cache is not None:
            kwargs["statement_cache_size"] = self._cache
        return kwargs

    async def connect(self) -> Any:
        """A new connection outside the pool, with the pool's settings (for session state such as ``LISTEN``)."""
        return await self._asyncpg.connect(self.dsn, **self._connect_kwargs())

    async def close(self) -> None:
        """Close every connection (waits for borrowed ones briefly, then terminates); idempotent."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                pool, self._pool, self._state = self._pool, None, _State.CLOSED
                warm, self._warm = self._warm, []
                if pool is not None:
                    for conn in warm:
                        await _release(pool, conn)
                    await _close_pool(pool)

    async def _ready(self, label: str) -> Any:
        if self._state is not _State.OPEN:
            await self.open(label)
        pool = self._pool
        if pool is None:
            raise StorageError(f"{label} is closed")
        return pool

    async def read(self, fn: Callable[[Conn], Awaitable[T]], label: str, doing: str) -> T:
        """Run ``fn(conn)`` on a pooled connection; transient failures are retried (reads are always safe to)."""
        return await self._run(fn, label, doing, write=False)

    async def write(self, fn: Callable[[Conn], Awaitable[T]], label: str, doing: str) -> T:
        """Run ``fn(conn)`` shielded from cancellation; retried only when it provably was not applied."""
        return await self._run(fn, label, doing, write=True)

    async def _run(self, fn: Callable[[Conn], Awaitable[T]], label: str, doing: str, *, write: bool) -> T:
        if not tracing_enabled():  # no SDK: not even a no-op span on the hot path
            return await self._attempts(fn, label, doing, write)
        name = "threadmind.store.write" if write else "threadmind.store.read"
        with get_tracer().start_as_current_span(
                name, attributes={ATTR_DB_SYSTEM: "postgresql", "db.operation.name": doing}):
            return await self._attempts(fn, label, doing, write)

    async def _attempts(self, fn: Callable[[Conn], Awaitable[T]], label: str, doing: str, write: bool) -> T:
        pool = await self._ready(label)
        for attempt in range(_TRIES):
            last = attempt + 1 == _TRIES
            try:
                conn = await self._borrow(pool)
            except Exception as exc:  # nothing was sent: safe to retry for writes too
                if self._state is _State.CLOSED:
                    raise StorageError(f"{label} is closed") from exc
                if not _is_driver_error(exc, self._asyncpg):
                    raise
                if last or not _transient(exc, write=False):
                    raise storage_error(exc, doing) from exc
                await _backoff(attempt)
                continue
            error: Exception | None = None
            clean = False
            try:
                if write:
                    with anyio.CancelScope(shield=True):
                        result = await fn(conn)
                else:
                    result = await fn(conn)
                clean = True
            except Exception as exc:
                error = exc
            finally:
                if not (clean and self._keep(pool, conn)):
                    await _release(pool, conn)
            if error is None:
                if write:
                    await anyio.lowlevel.checkpoint_if_cancelled()
                return result
            if not _is_driver_error(error, self._asyncpg):
                raise error
            if last or not _transient(error, write=write):
                raise self._failure(error, doing, write) from error
            await _backoff(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _borrow(self, pool: Any) -> Any:
        """The connection used last, unless the server closed it meanwhile (then asyncpg discards it); else one
        from the asyncpg pool."""
        while self._warm:
            conn = self._warm.pop()
            try:
                closed = conn.is_closed()
            except self._asyncpg.InterfaceError:  # asyncpg took it back when the server closed it
                continue
            if not closed:
                return conn
            await _release(pool, conn)
        self._acquiring += 1
        try:
            return await pool.acquire()
        finally:
            self._acquiring -= 1

    def _keep(self, pool: Any, conn: Any) -> bool:
        """Keep a connection whose operation ended cleanly for the next one (see ``_warm``), unless an operation
        waits for one in asyncpg's pool (it gets this one)."""
        if self._acquiring or pool is not self._pool or conn.is_closed() or conn.is_in_transaction():
            return False
        self._warm.append(conn)
        return True

    @staticmethod
    def _failure(exc: Exception, doing: str, write: bool) -> StorageError:
        err = storage_error(exc, doing)
        state = getattr(exc, "sqlstate", None)
        dropped = state.startswith(_DROPPED_PREFIXES) if isinstance(state, str) else isinstance(exc, OSError)
        if write and dropped:
            err = StorageError(f"{err.message}; the connection broke, so the write may or may not have been applied")
            err.__cause__ = exc
        return err


@asynccontextmanager
async def transaction(conn: Any) -> AsyncIterator[None]:
    """A transaction on ``conn`` that the server ends if its client stops sending for ``IDLE_IN_TRANSACTION``
    (``BEGIN`` and the transaction-scoped setting in one round trip; PgBouncer-safe). Rolled back on any error."""
    await conn.execute(_BEGIN)
    try:
        yield
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                await conn.execute("ROLLBACK")
            except Exception:  # a broken connection: the server rolls back itself, the pool discards it
                pass
        raise
    await conn.execute("COMMIT")


async def _keep_session(conn: Any) -> None:
    """The pool's reset on release: nothing to send. asyncpg's default (``RESET ALL``, ``UNLISTEN *``, unlocking
    session advisory locks, ``CLOSE ALL``) is one more round trip per operation, and undoes nothing here: the store
    never changes session state (an open transaction is still rolled back by asyncpg itself)."""


async def _release(pool: Any, conn: Any) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await pool.release(conn)
        except Exception:  # pragma: no cover - a broken connection is discarded by the pool
            pass


async def _close_pool(pool: Any) -> None:
    with anyio.move_on_after(10.0) as scope:
        await pool.close()
    if scope.cancelled_caught:
        pool.terminate()
