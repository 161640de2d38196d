"""Throwaway servers for the tests and the chaos run (importable as ``servers``).

Each server lives in a temporary directory of its own and is stopped by ``close()`` (every class
here is a context manager, and the fixtures call ``close()`` in a finalizer); ``remove(base)``
deletes the directory. The PostgreSQL servers share one life cycle: ``start()``, ``stop()`` (a
fast shutdown by default), ``running()``, ``dsn()``, ``connect()``, ``create_database()``,
``log()``.

- ``Embedded``: wfctl's own embedded PostgreSQL 18 (``wfctl.embedded.EmbeddedServer``), on a
  Unix socket in its data directory: the suite's server when ``WFCTL_TEST_DSN`` is not set
  (conftest.py), and the chaos run's (tests/chaos.py), which stops and starts it under running
  workers;
- ``Postgres``: Debian's PostgreSQL (``/usr/lib/postgresql/15/bin``, or ``$WFCTL_TEST_PG_BIN``)
  on a free loopback port, made with initdb, trusting every loopback and replication
  connection; ``primary=True`` adds what streaming replication needs, ``standby_of(primary)``
  makes a streaming standby with ``pg_basebackup -R``, and ``promote()`` turns it into a
  primary;
- ``PgBouncer``: Debian's ``pgbouncer`` (1.18) in ``pool_mode = transaction`` in front of a
  server, with a wildcard database entry, so any database of that server is reachable through it.

The Debian servers are for the PgBouncer and failover tests. PostgreSQL and PgBouncer both refuse
to run as root: when the tests run as root (CI), they run as the system user ``postgres`` and
their directories belong to it (the embedded server sees to its own user, ``wfctlpg``). A missing
binary skips the test with the command that installs it, unless ``WFCTL_TEST_REQUIRE_SERVERS=1``
(CI), where it is a failure instead.

Nothing here imports pytest until a binary is missing, so the chaos run works without it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import psycopg
from helpers import FAST, free_port, isolated_env, wait_for
from psycopg import conninfo

PG_BIN = Path(os.environ.get("WFCTL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
PGBOUNCER = Path(shutil.which("pgbouncer") or "/usr/sbin/pgbouncer")
SERVER_USER = "postgres"  # the OS user the servers run as when we are root; also the DB superuser

# FAST (from helpers): for tests where durability is not under test (PgBouncer), speed first.
# DURABLE: where it is (failover): every acknowledged commit is flushed, here and on the
# synchronous standby, before the client hears "COMMIT".
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


# -- requirements -------------------------------------------------------------------------------


def _missing(what: str, install: str) -> None:
    import pytest

    message = f"{what} is not installed (install it with `{install}`)"
    if os.environ.get("WFCTL_TEST_REQUIRE_SERVERS") == "1":
        pytest.fail(message + "; WFCTL_TEST_REQUIRE_SERVERS=1 forbids skipping", pytrace=False)
    pytest.skip(message)


def require_postgres() -> None:
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (PG_BIN / tool).exists():
            _missing(f"PostgreSQL's {PG_BIN / tool}", "apt-get install -y postgresql-15")
    _require_user()


def require_pgbouncer() -> None:
    if not PGBOUNCER.exists():
        _missing("PgBouncer", "apt-get install -y pgbouncer")
    _require_user()


def _require_user() -> None:
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        _missing(
            f"the system user {SERVER_USER!r} (servers refuse to run as root)", "useradd --system postgres"
        )


# -- running as the server user -----------------------------------------------------------------


def _as_server_user() -> dict[str, Any]:
    """subprocess keyword arguments that drop root to the server user (nothing when not root)."""
    if os.geteuid() != 0:
        return {}
    return {"user": SERVER_USER, "group": SERVER_USER, "extra_groups": []}


def _own(path: Path) -> None:
    """Give ``path`` to the server user when we are root (the servers must write there)."""
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def make_base(prefix: str) -> Path:
    """A new temporary directory the server user owns (not under pytest's tmp_path, which is
    private to root and so not traversable by the server user)."""
    # as root, in /tmp: $TMPDIR may be a directory the server user cannot enter
    where = os.environ.get("WFCTL_TEST_SERVER_DIR") or ("/tmp" if os.geteuid() == 0 else None)
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    base.chmod(0o755)
    _own(base)
    return base


def run(cmd: list[str], *, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a server tool as the server user; on failure raise with its output."""
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=_tool_env(),
        **_as_server_user(),
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def _tool_env() -> dict[str, str]:
    env = isolated_env(LC_ALL="C.UTF-8")
    if os.geteuid() == 0:
        env["HOME"] = "/tmp"
    return env


def _conf_value(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


# -- what every server here has ---------------------------------------------------------------


class _Server:
    """The part of the life cycle that does not depend on how the server is run."""

    home: Path
    logfile: Path

    def dsn(self, dbname: str = "postgres") -> str:
        raise NotImplementedError

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=10)

    def create_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the embedded PostgreSQL ----------------------------------------------------------------------


class Embedded(_Server):
    """wfctl's embedded PostgreSQL in ``base/name`` (``wfctl.embedded.EmbeddedServer``: a Unix
    socket in its data directory, TCP too when ``settings`` set ``listen_addresses``). Build it
    with ``Embedded.init``; ``close()`` stops it (fast shutdown)."""

    def __init__(
        self, base: Path, name: str = "embedded", *, settings: dict[str, str] | None = None, port: int = 5432
    ) -> None:
        from wfctl.embedded import EmbeddedServer

        self.base = base
        self.home = base / name
        self.name = name
        self.port = port
        self.server = EmbeddedServer(self.home, settings=settings, port=port)
        self.data = self.server.pgdata
        self.logfile = self.server.log_file

    @classmethod
    def init(
        cls, base: Path, name: str = "embedded", *, settings: dict[str, str] | None = None, port: int = 5432
    ) -> Embedded:
        """initdb (on first use) and start the server."""
        server = cls(base, name, settings=settings, port=port)
        server.start()
        return server

    def start(self) -> None:
        self.server.ensure_running()

    def stop(self, mode: str = "fast") -> None:
        """Fast shutdown (the only one wfctl's server offers); raises when it was not running."""
        if mode != "fast":
            raise ValueError(f"the embedded server stops with a fast shutdown only, not {mode!r}")
        if not self.server.stop().stopped:
            raise RuntimeError(f"the embedded PostgreSQL in {self.home} was not running")

    def running(self) -> bool:
        return self.server.is_running()

    def close(self) -> None:
        """Stop the server if it runs; never raises."""
        with contextlib.suppress(Exception):
            self.server.stop()

    def version(self) -> str:
        return self.server.version()

    def dsn(self, dbname: str = "postgres") -> str:
        return self.server.dsn(dbname)


# -- Debian's PostgreSQL --------------------------------------------------------------------------


class Postgres(_Server):
    """One PostgreSQL server in ``base/name``. Build it with ``Postgres.init`` or
    ``Postgres.standby_of``; ``close()`` stops it (immediate)."""

    def __init__(self, base: Path, name: str, port: int) -> None:
        self.base = base
        self.home = base / name
        self.data = self.home / "data"
        self.logfile = self.home / "server.log"
        self.port = port
        self.name = name

    # construction

    @classmethod
    def init(
        cls,
        base: Path,
        name: str = "primary",
        *,
        settings: dict[str, object] | None = None,
        primary: bool = False,
    ) -> Postgres:
        """initdb, configure and start a server. ``primary=True``: ready for streaming standbys
        (wal_level=replica, WAL senders, replication trusted on loopback); pass
        ``synchronous_standby_names`` in ``settings`` to make commits wait for a standby."""
        require_postgres()
        server = cls(base, name, free_port())
        server.home.mkdir()
        _own(server.home)
        run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(server.data),
                "-U",
                SERVER_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        (server.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "host all all 127.0.0.1/32 trust\n"
            "local replication all trust\n"
            "host replication all 127.0.0.1/32 trust\n"
        )
        conf: dict[str, object] = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(server.home),
            "max_connections": 200,
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
            "log_line_prefix": "%m [%p] %a ",
            **FAST,
        }
        if primary:
            conf.update(
                wal_level="replica",
                max_wal_senders=5,
                max_replication_slots=5,
                wal_keep_size="256MB",
                hot_standby=True,
            )
        conf.update(settings or {})
        server._write_conf(conf)
        server._first_start()
        return server

    @classmethod
    def standby_of(
        cls, primary: Postgres, name: str = "standby", *, settings: dict[str, object] | None = None
    ) -> Postgres:
        """A streaming standby of ``primary`` (pg_basebackup -R), started; it connects with
        application_name ``name``, so ``synchronous_standby_names`` can name it."""
        require_postgres()
        server = cls(primary.base, name, free_port())
        server.home.mkdir()
        _own(server.home)
        run(
            [
                str(PG_BIN / "pg_basebackup"),
                "-D",
                str(server.data),
                "-d",
                conninfo.make_conninfo(
                    host="127.0.0.1", port=str(primary.port), user=SERVER_USER, application_name=name
                ),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ]
        )
        # the copied postgresql.conf is the primary's: give the standby its own port and socket,
        # and no synchronous standby of its own (after promotion, commits would wait forever)
        server._write_conf(
            {
                "port": server.port,
                "unix_socket_directories": str(server.home),
                "synchronous_standby_names": "",
                "hot_standby": True,
                **(settings or {}),
            }
        )
        server._first_start()
        return server

    def _write_conf(self, conf: dict[str, object]) -> None:
        lines = [f"{key} = {_conf_value(value)}" for key, value in conf.items()]
        if "port" not in conf:
            lines.append(f"port = {self.port}")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as handle:
            handle.write("\n# wfctl tests\n" + "\n".join(lines) + "\n")

    # life cycle

    def _first_start(self) -> None:
        """Start; if another process took the free port meanwhile, move to a new one."""
        for attempt in range(3):
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == 2 or "could not bind" not in self.log():
                    raise
            self.port = free_port()
            self._write_conf({"port": self.port})

    def start(self) -> None:
        run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.logfile),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``immediate`` is a crash (no shutdown checkpoint)."""
        run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])

    def promote(self) -> None:
        """Promote a standby; returns once it accepts writes."""
        run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"])

    def running(self) -> bool:
        proc = run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "status"], check=False)
        return proc.returncode == 0

    def close(self) -> None:
        """Stop the server (if it runs) and forget it; never raises."""
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except Exception:
                self._kill_postmaster()

    def _kill_postmaster(self) -> None:
        with contextlib.suppress(Exception):
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)

    # connecting

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        return conninfo.make_conninfo(
            host="127.0.0.1", port=str(self.port), user=SERVER_USER, dbname=dbname, **extra
        )

    def wait_sync_standby(self, name: str, timeout: float = 30) -> None:
        """Wait until the standby ``name`` streams from this server as its synchronous standby."""

        def streaming() -> bool:
            with self.connect() as conn:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (name,),
                ).fetchone()
            return row == ("streaming", "sync")

        wait_for(streaming, timeout=timeout, what=f"{name} to stream as a synchronous standby")


# -- PgBouncer ----------------------------------------------------------------------------------


class PgBouncer(_Server):
    """PgBouncer in transaction pooling mode in front of ``server``: every database of the
    server is reachable under its own name, as user ``postgres`` (auth_type trust, with a
    userlist). At most ``pool_size`` server connections per database, so many clients really
    share few server connections."""

    def __init__(self, server: Postgres, *, pool_size: int = 3, name: str = "pgbouncer") -> None:
        require_pgbouncer()
        self.server = server
        self.pool_size = pool_size
        self.home = server.base / name
        self.home.mkdir()
        _own(self.home)
        self.logfile = self.home / "pgbouncer.log"
        self.ini = self.home / "pgbouncer.ini"
        self.proc: subprocess.Popen[bytes] | None = None
        userlist = self.home / "userlist.txt"
        userlist.write_text(f'"{SERVER_USER}" ""\n')
        _own(userlist)
        for attempt in range(3):  # another process may take the free port before we bind it
            self.port = free_port()
            self._launch(userlist)
            try:
                wait_for(self._accepts, timeout=30, what="PgBouncer to accept connections")
                return
            except RuntimeError:
                self.close()
                if attempt == 2 or "Address already in use" not in self.log():
                    raise
            except BaseException:
                self.close()
                raise

    def _launch(self, userlist: Path) -> None:
        self.ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.server.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {userlist}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "min_pool_size = 0\n"
            "reserve_pool_size = 0\n"
            "max_client_conn = 500\n"
            f"admin_users = {SERVER_USER}\n"
            f"stats_users = {SERVER_USER}\n"
            f"pidfile = {self.home / 'pgbouncer.pid'}\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n"
            "server_login_retry = 1\n"
        )
        _own(self.ini)
        # in the foreground (no -d), pgbouncer logs to stderr
        with self.logfile.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [str(PGBOUNCER), str(self.ini)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=_tool_env(),
                **_as_server_user(),
            )

    def _accepts(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited {self.proc.returncode}:\n{self.log()}")
        try:
            with psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        return conninfo.make_conninfo(
            host="127.0.0.1", port=str(self.port), user=SERVER_USER, dbname=dbname, **extra
        )

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (simple query protocol: a ClientCursor)."""
        with psycopg.connect(
            self.dsn("pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cur = conn.execute(f"SHOW {what}")  # what: a fixed word from the test, not input
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: immediate shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


def remove(base: Path) -> None:
    """Delete a directory made by ``make_base`` (after its servers are closed)."""
    shutil.rmtree(base, ignore_errors=True)
