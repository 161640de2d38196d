"""The worker's log: one line per workflow start, finish and failure, and its own events.

Rich (colour) on a terminal, plain text otherwise, JSON lines with ``--log-format json``.
Thread-safe: workflow threads and the database loop both write here.

The routine lines of runs (started, completed, parked) are gathered and written by the database
loop at each of its turns (``drain``), many in one write, in the plain and JSON formats: a
workflow thread that wrote its own line would give the interpreter's lock away for a system
call twice a run. They keep their order with every other line, which is written at once (after
the gathered ones) and so are never late; a worker killed outright (SIGKILL) loses the routine
lines of its last turn, a few milliseconds, which the database records anyway.

Messages and fields carry stored strings (types, error messages, deadline errors, topics): in
the plain and rich formats every control and invisible format character is escaped
(wfctl/printable.py), so a stored string can neither drive the terminal nor start a line of its
own; JSON escapes them as JSON does (``json.dumps`` writes ASCII only).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections import deque
from datetime import datetime
from typing import Any, Literal, TextIO

from wfctl.printable import printable

Format = Literal["auto", "rich", "plain", "json"]

#: The routine lines of runs, gathered for the loop to write (not those of a rich terminal).
ROUTINE: frozenset[str] = frozenset({"started", "completed", "parked"})
#: Gathered lines written by the thread that adds one more, should the loop not come by.
MAX_GATHERED = 256

_STYLES = {
    "completed": "green",
    "failed": "bold red",
    "retry": "yellow",
    "lost": "magenta",
    "warning": "yellow",
    "error": "bold red",
    "started": "cyan",
}


#: The second utc_stamp formatted last, and its text: one tuple, replaced whole, so that a
#: thread never pairs one second's number with another's text.
_second: tuple[int, str] = (-1, "")


def utc_stamp(now: float) -> str:
    """``now`` (seconds since the epoch) as ISO 8601 UTC to the millisecond, without the zone:
    what ``datetime.isoformat(timespec="milliseconds")`` writes, with the date and time of day
    formatted once a second (two lines a run: formatting each in full cost more than the rest
    of the line)."""
    global _second
    second, micro = divmod(round(now * 1_000_000), 1_000_000)  # as datetime rounds a timestamp
    cached = _second
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _second = cached
    return f"{cached[1]}.{micro // 1000:03d}"


class WorkerLog:
    def __init__(self, fmt: Format = "auto", stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        if fmt == "auto":
            fmt = "rich" if self.stream.isatty() else "plain"
        self.fmt = fmt
        self.quiet = quiet
        self._lock = threading.Lock()
        self._console: Any = None
        self._gathered: deque[str] = deque()  # routine lines the loop has not written yet
        if fmt == "rich":
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def event(self, event: str, message: str, *, level: str = "info", **fields: Any) -> None:
        """Write one line: ``event`` is a short word (started, completed, failed, ...)."""
        routine = level == "info" and event in ROUTINE
        if self.quiet and routine:
            return
        if self._console is not None:
            with self._lock:
                stamp = datetime.now().strftime("%H:%M:%S")
                style = _STYLES.get(event) or _STYLES.get(level)
                self._console.print(
                    f"{stamp} {self._text(event, message, fields)}", style=style, markup=False
                )
                self.stream.flush()
            return
        if self.fmt == "json":
            record = {
                "ts": utc_stamp(time.time()) + "+00:00",
                "level": level,
                "event": event,
                "message": message,
            }
            record.update({k: v for k, v in fields.items() if v is not None})
            line = json.dumps(record, default=str) + "\n"
        else:
            line = f"{utc_stamp(time.time())}Z {level.upper():<7} {self._text(event, message, fields)}\n"
        if routine:
            # no lock: a deque's append is atomic, and a thread waiting for the lock while the
            # loop writes would hand the interpreter's lock around for nothing
            self._gathered.append(line)
            if len(self._gathered) >= MAX_GATHERED:
                self.drain()
            return
        with self._lock:
            self._write_gathered(line)

    def drain(self) -> None:
        """Write the gathered routine lines (the database loop, at each turn)."""
        if self._gathered:
            with self._lock:
                self._write_gathered("")

    def _write_gathered(self, then: str) -> None:
        """Write the gathered lines and ``then``, in one write (holding the lock)."""
        lines = []
        with contextlib.suppress(IndexError):  # popleft until empty: a line added meanwhile
            while True:  # is either written now or stays for the next drain
                lines.append(self._gathered.popleft())
        text = "".join(lines) + then
        if text:
            self.stream.write(text)
            self.stream.flush()

    @staticmethod
    def _text(event: str, message: str, fields: dict[str, Any]) -> str:
        extra = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        return printable(f"{event:<9} {message}{' ' + extra if extra else ''}")

    def info(self, message: str, **fields: Any) -> None:
        self.event("worker", message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.event("warning", message, level="warning", **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.event("error", message, level="error", **fields)
