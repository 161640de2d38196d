"""The worker's readiness signals for an orchestrator (a Kubernetes readinessProbe, a supervisor):
an HTTP endpoint (``--health-port``) and a file (``--health-file``).

Both say the same thing: the worker is connected to the database and its last heartbeat
succeeded recently (within its own ``dead_after``, the silence after which other workers would
count it as dead). The endpoint is the standard library's ``http.server`` on a daemon thread:
any GET (``/healthz``, ``/``, ...) answers 200 and a one-line reason while the worker is ready,
503 and the reason otherwise. The file is touched at each successful heartbeat and removed when
the worker exits, so a probe checks that it exists and is recent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from wfctl.errors import InvalidInput

#: The worker's answer: ready or not, and why (one line).
Check = Callable[[], tuple[bool, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        try:
            ready, reason = self.server.check()
        except Exception as exc:  # never let a bug take the endpoint down: not ready
            ready, reason = False, f"internal error: {type(exc).__name__}"
        data = (reason + "\n").encode("utf-8", "replace")
        self.send_response(200 if ready else 503)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return  # probes every few seconds: nothing for the worker's log


class _Server(HTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], check: Check) -> None:
        self.check = check
        super().__init__(address, _Handler)


class HealthServer:
    """The readiness endpoint on ``host:port``; ``start`` binds (or raises InvalidInput) and
    serves on a daemon thread; ``close`` stops it."""

    def __init__(self, host: str, port: int, check: Check) -> None:
        self.host = host
        self.port = port
        self.check = check
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._server = _Server((self.host, self.port), self.check)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InvalidInput(
                f"--health-port {self.port}: cannot listen on {self.host}:{self.port} ({reason})"
            ) from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="wfctl-health", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/healthz"

    def close(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None


class HealthFile:
    """The readiness file: ``touch`` at each successful heartbeat, ``remove`` on exit. Its
    directory must exist (checked when it is made, so a typo fails at start, not at the first
    beat).

    The path may come from a config file, and the worker may run as root, so the file is never
    reached through a symbolic link (``O_NOFOLLOW``, the directory's own descriptor for the
    removal), and only a file the worker itself keeps is touched or removed: an empty regular
    file of the user it runs as. Anything else there (another file, a link planted meanwhile)
    is left alone, said at start as an error and later in the log. ``remove`` unlinks the name
    only while it is still the very file the worker last touched (same device and inode)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        parent = self.path.parent
        if not parent.is_dir():
            raise InvalidInput(f"--health-file {path}: the directory {parent} does not exist")
        if self.path.is_dir():
            raise InvalidInput(f"--health-file {path}: is a directory")
        try:
            found = os.lstat(self.path)
        except FileNotFoundError:
            found = None
        except OSError as exc:
            raise InvalidInput(f"--health-file {path}: {exc.strerror or exc}") from None
        if found is not None:
            problem = _not_ours(found)
            if problem is not None:
                raise InvalidInput(
                    f"--health-file {path}: {problem}: the worker touches and removes only an empty "
                    "file of its own (remove it, or choose another path)"
                )
        self.error: str | None = None  # the last failure, so the worker logs each new one once
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file last touched

    def touch(self) -> str | None:
        """Create the file or move its mtime to now; the error text (new ones only) or None."""
        try:
            self._touch()
        except OSError as exc:
            return self._failed(f"cannot touch --health-file {self.path}: {exc.strerror or exc}")
        except _Refused as refused:
            return self._failed(f"left --health-file {self.path} alone: {refused}")
        self.error = None
        return None

    def _failed(self, text: str) -> str | None:
        if text != self.error:
            self.error = text
            return text
        return None

    def _touch(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Refused("it is a symbolic link") from None
            raise
        try:
            st = os.fstat(fd)
            problem = _not_ours(st)
            if problem is not None:
                raise _Refused(problem)
            os.utime(fd)
            self._identity = (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Unlink the file the worker touched, if the name still leads to it."""
        if self._identity is None:
            return
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                st = os.stat(self.path.name, dir_fd=dir_fd, follow_symlinks=False)
                if (st.st_dev, st.st_ino) == self._identity and _not_ours(st) is None:
                    os.unlink(self.path.name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)


class _Refused(Exception):
    """What is at the health file's path is not the worker's to touch."""


def _not_ours(st: os.stat_result) -> str | None:
    """Why a file found at the health file's path is not one the worker may touch or remove."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != os.geteuid():
        return "it belongs to another user"
    if st.st_size != 0:
        return "it is not empty"
    if st.st_nlink > 1:
        return "it has other hard links"
    return None
