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
import os
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
    beat)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        parent = self.path.parent
        if not parent.is_dir():
            raise InvalidInput(f"--health-file {path}: the directory {parent} does not exist")
        if self.path.is_dir():
            raise InvalidInput(f"--health-file {path}: is a directory")
        self.error: str | None = None  # the last failure, so the worker logs each new one once

    def touch(self) -> str | None:
        """Create the file or move its mtime to now; the error text (new ones only) or None."""
        try:
            self.path.touch()
        except OSError as exc:
            text = f"cannot touch --health-file {self.path}: {exc.strerror or exc}"
            if text != self.error:
                self.error = text
                return text
            return None
        self.error = None
        return None

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
