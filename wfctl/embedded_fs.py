"""The embedded server's files, as root must treat them: nothing followed, nobody else's.

Everything root does in the server's home goes through descriptors opened without following a
link, and is refused (``check``) when it is a symbolic link, a file of the wrong kind, a file of
another user (who could swap it for a link while wfctl works there), one every user may write
to, or a file with other hard links. Giving the data directory to the server's user
(``give_tree``) walks it by descriptors; letting that user reach its data and the bundled
binaries (``allow_traversal``, ``make_readable``) changes modes only, and says each change
through a ``Notice`` when it is made.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal, overload

from wfctl.errors import ServerError

DATA_DIR = "pgdata"  # the data directory, in the server's home
LOCK_FILE = ".server.lock"  # in the home: held while a command starts or stops the server
PID_FILE = "postmaster.pid"  # in the data directory: the server's pid, on its first line

#: Where a change wfctl makes to the system (as root) is reported: one line, said when it is made.
Notice = Callable[[str], None]


def silent(_message: str) -> None:
    pass


def check(path: Path, st: os.stat_result, *, directory: bool = False, owners: Mapping[int, str]) -> None:
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
            f"{path} belongs to {user_name(st.st_uid)!r}, not to {expected}: wfctl uses no file of "
            f"another user for the embedded server (run wfctl as {user_name(st.st_uid)!r}, or remove {path})"
        )
    if mode & stat.S_IWOTH:
        raise ServerError(
            f"{path} is writable by every user (mode {mode:04o}): wfctl refuses it for the embedded "
            f"server (chmod o-w {path}, or set [database] data_dir to a directory of your own)"
        )
    if not directory and st.st_nlink > 1:
        raise ServerError(f"{path} has other hard links: wfctl refuses it for the embedded server")


def exists(relative: str, dir_fd: int) -> bool:
    try:
        os.stat(relative, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def read_pid(name: str, dir_fd: int) -> int | None:
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


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def give_tree(top_fd: int, uid: int, gid: int, top: Path) -> None:
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
                    f"(remove it, or give it to {user_name(uid)!r} yourself)"
                )
            os.chown(name, uid, gid, dir_fd=root_fd, follow_symlinks=False)


def allow_traversal(path: Path, user: str, notice: Notice = silent) -> None:
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


def make_readable(root: Path, user: str, notice: Notice = silent) -> None:
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


class ServerFiles:
    """The server's home (``home``) and its data directory (``pgdata``, ``DATA_DIR`` in it),
    reached only through descriptors opened without following a link, and checked (``check``)
    before use. ``run_as`` names the user the server runs as (None: the user wfctl runs as),
    who may own the data directory as well."""

    def __init__(self, home: Path, run_as: Callable[[], str | None]) -> None:
        self.home = home
        self.pgdata = home / DATA_DIR
        self.run_as = run_as

    @overload
    def open_home(self, *, create: Literal[True]) -> int: ...
    @overload
    def open_home(self, *, create: bool) -> int | None: ...
    def open_home(self, *, create: bool) -> int | None:
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
                check(self.home, os.lstat(self.home), directory=True, owners=self.own())
            raise
        try:
            check(self.home, os.fstat(fd), directory=True, owners=self.own())
        except BaseException:
            os.close(fd)
            raise
        return fd

    def check_pgdata(self, home_fd: int) -> os.stat_result | None:
        """The data directory's lstat, checked (None when there is none yet)."""
        try:
            st = os.stat(DATA_DIR, dir_fd=home_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        check(self.pgdata, st, directory=True, owners=self.pgdata_owners())
        return st

    def open_pgdata(self, home_fd: int) -> int:
        fd = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=home_fd)
        try:
            check(self.pgdata, os.fstat(fd), directory=True, owners=self.pgdata_owners())
        except BaseException:
            os.close(fd)
            raise
        return fd

    def own(self) -> dict[int, str]:
        """Who may own the home and the lock file: the user wfctl runs as."""
        uid = os.geteuid()
        return {uid: user_name(uid)}

    def pgdata_owners(self) -> dict[int, str]:
        """Who may own the data directory: the user wfctl runs as and, as root, the server's
        user (a directory of any other user is refused, not taken over)."""
        owners = self.own()
        user = self.run_as()
        if user is not None:
            with suppress(KeyError):
                owners[pwd.getpwnam(user).pw_uid] = user
        return owners

    @contextmanager
    def lock(self, home_fd: int) -> Iterator[None]:
        path = self.home / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(LOCK_FILE, flags, 0o600, dir_fd=home_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                check(path, os.stat(LOCK_FILE, dir_fd=home_fd, follow_symlinks=False), owners=self.own())
            raise
        try:
            check(path, os.fstat(fd), owners=self.own())
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def pid_in(self, home_fd: int) -> int | None:
        """The pid postmaster.pid names, or None (no data directory, no file, or no pid in it)."""
        try:
            pg_fd = self.open_pgdata(home_fd)
        except FileNotFoundError:
            return None
        try:
            return read_pid(PID_FILE, pg_fd)
        finally:
            os.close(pg_fd)

    def listing(self, home_fd: int) -> list[str]:
        pg_fd = self.open_pgdata(home_fd)
        try:
            return os.listdir(pg_fd)
        finally:
            os.close(pg_fd)

    def remove_in_pgdata(self, home_fd: int, name: str) -> None:
        pg_fd = self.open_pgdata(home_fd)
        try:
            os.unlink(name, dir_fd=pg_fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(pg_fd)
