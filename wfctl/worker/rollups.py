"""The rollups duty: keep the hourly and daily rollups that ``stats`` and ``metrics`` read for
long windows up to date (``wfctl/rollups.py``, migration 0028).

Every ``ROLLUP_EVERY`` seconds the duty asks, on the loop's connection, whether the rollups are
behind (an hour closed or marked stale since); only then does a thread of its own, on a
connection of its own, refresh them, a few hours per transaction until it has caught up, so
the loop (claims, checkpoints) never waits for it. The database lets one session refresh at a
time (an advisory lock the others do not wait for); a worker whose refresh is still running
starts no second one. A refresh that fails is logged and tried again at a later turn; the
reports read what is not rolled up from the base tables meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from wfctl import rollups
from wfctl.connection import connect
from wfctl.errors import WfctlError
from wfctl.worker.duties import Duty
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session

#: Seconds between two looks at whether the rollups are behind.
ROLLUP_EVERY = 60.0


class RollupDuty(Duty):
    """Look every ``ROLLUP_EVERY`` seconds; refresh in a thread when behind. ``enabled`` turns
    it off without unscheduling it (a stopping worker)."""

    def __init__(
        self,
        dsn: str,
        session: Session,
        log: WorkerLog,
        *,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("rollups", ROLLUP_EVERY, self._look, active=enabled)
        self.dsn = dsn
        self.session = session
        self.log = log
        self.thread: threading.Thread | None = None
        self.computed = 0  # hours this worker rolled up
        self._failed: str | None = None  # the last failure logged (each kind once in a row)

    def _look(self) -> None:
        if not self.active() or (self.thread is not None and self.thread.is_alive()):
            return
        if not self.session.guarded("rollups check", rollups.due, otherwise=False):
            return
        self.thread = threading.Thread(target=self._refresh, name="wfctl-rollups", daemon=True)
        self.thread.start()

    def _refresh(self) -> None:
        try:
            with connect(self.dsn, application_name="wfctl rollups") as conn:
                self.computed += rollups.catch_up(conn, stop=lambda: not self.active())
        except (psycopg.Error, WfctlError) as exc:
            said = self.session.one_line(exc)
            if said != self._failed:
                self.log.warning(f"rolling up finished runs for the reports failed ({said}); trying later")
            self._failed = said
            return
        self._failed = None
