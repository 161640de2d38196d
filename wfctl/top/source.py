"""Where ``wfctl top`` reads its snapshots: one connection kept open between refreshes, opened
again at the next refresh after a failure (the database restarted, the connection was
killed). A failure is raised as the one-line wfctl error it means; the caller shows it and
tries again at its next refresh."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import psycopg

from wfctl import limits
from wfctl.connection import translate
from wfctl.top.snapshot import DEFAULT_SINCE, Snapshot, take

Conn = psycopg.Connection[Any]
#: How often, in seconds, a refresh reads the slowest steps again (the costliest read).
STEPS_EVERY = 30.0
T = TypeVar("T")


@dataclass
class Source:
    """Snapshots from ``connect()``'s connection (kept, reopened after a failure), of the type
    ``workflow_type`` or all. Calls from several threads take turns."""

    connect: Callable[[], Conn]
    workflow_type: str | None = None
    stale: timedelta | None = None
    since: timedelta = DEFAULT_SINCE
    standby: bool = False
    steps_every: float = STEPS_EVERY
    conn: Conn | None = None
    _steps: tuple[float, list[dict[str, Any]]] | None = field(default=None, repr=False)
    _turn: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self) -> Snapshot:
        """A snapshot; a wfctl error (ConnectionFailed, SchemaError ...) when it cannot be read,
        the connection closed so that the next call opens a new one."""
        with self._turn:
            now = time.monotonic()
            due = self._steps is None or now - self._steps[0] >= self.steps_every
            found: Snapshot = self._guarded(
                lambda conn: take(
                    conn,
                    workflow_type=self.workflow_type,
                    stale=self.stale,
                    since=self.since,
                    standby=self.standby,
                    slow_steps=due,
                )
            )
            if found.slow_steps is not None:
                self._steps = (now, found.slow_steps)
            elif self._steps is not None:
                found = dataclasses.replace(found, slow_steps=self._steps[1])
            return found

    def filter(self, workflow_type: str | None) -> None:
        """Show only ``workflow_type`` (None: every type) from the next snapshot on."""
        with self._turn:
            self.workflow_type, self._steps = workflow_type, None

    def check_type(self, workflow_type: str) -> None:
        """InvalidInput unless wfctl knows the type (``limits.check_known``: registered by a
        worker, submitted, or limited)."""
        with self._turn:
            self._guarded(lambda conn: limits.check_known(conn, workflow_type))

    def read(self, reader: Callable[[Conn], T]) -> T:
        """``reader(conn)`` on the kept connection (``reports.show_workflow`` for a run opened),
        with the same reconnecting and errors as ``take``."""
        with self._turn:
            result: T = self._guarded(reader)
            return result

    def close(self) -> None:
        with self._turn:
            self._drop()

    def _guarded(self, read: Callable[[Conn], Any]) -> Any:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self.connect()
            return read(self.conn)
        except psycopg.Error as exc:
            self._drop()
            raise translate(exc) from None

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):  # a broken connection: nothing to release
                self.conn.close()
            self.conn = None
