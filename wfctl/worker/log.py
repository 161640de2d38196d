"""The worker's log: one line per workflow start, finish and failure, and its own events.

Rich (colour) on a terminal, plain text otherwise, JSON lines with ``--log-format json``.
Thread-safe: workflow threads and the database loop both write here.

Messages and fields carry stored strings (types, error messages, deadline errors, topics): in
the plain and rich formats every control and invisible format character is escaped
(wfctl/printable.py), so a stored string can neither drive the terminal nor start a line of its
own; JSON escapes them as JSON does (``json.dumps`` writes ASCII only).
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from wfctl.printable import printable

Format = Literal["auto", "rich", "plain", "json"]

_STYLES = {
    "completed": "green",
    "failed": "bold red",
    "retry": "yellow",
    "lost": "magenta",
    "warning": "yellow",
    "error": "bold red",
    "started": "cyan",
}


class WorkerLog:
    def __init__(self, fmt: Format = "auto", stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        if fmt == "auto":
            fmt = "rich" if self.stream.isatty() else "plain"
        self.fmt = fmt
        self.quiet = quiet
        self._lock = threading.Lock()
        self._console: Any = None
        if fmt == "rich":
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def event(self, event: str, message: str, *, level: str = "info", **fields: Any) -> None:
        """Write one line: ``event`` is a short word (started, completed, failed, ...)."""
        if self.quiet and level == "info" and event in ("started", "completed", "parked"):
            return
        now = datetime.now(UTC)
        with self._lock:
            if self.fmt == "json":
                record = {
                    "ts": now.isoformat(timespec="milliseconds"),
                    "level": level,
                    "event": event,
                    "message": message,
                }
                record.update({k: v for k, v in fields.items() if v is not None})
                self.stream.write(json.dumps(record, default=str) + "\n")
            else:
                extra = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
                text = printable(f"{event:<9} {message}{' ' + extra if extra else ''}")
                if self._console is not None:
                    stamp = now.astimezone().strftime("%H:%M:%S")
                    style = _STYLES.get(event) or _STYLES.get(level)
                    self._console.print(f"{stamp} {text}", style=style, markup=False)
                else:
                    stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
                    self.stream.write(f"{stamp} {level.upper():<7} {text}\n")
            self.stream.flush()

    def info(self, message: str, **fields: Any) -> None:
        self.event("worker", message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.event("warning", message, level="warning", **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.event("error", message, level="error", **fields)
