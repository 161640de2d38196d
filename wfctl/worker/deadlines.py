"""The deadline duty: fail the runs whose deadline passed (``recovery.expire``), pending (queued,
parked, backing off, requeued) or running, wherever they run.

It is due every ``interval`` (the heartbeat interval; also with ``--no-sweep``) and, through
alarms, at the deadline of each run claimed here: a step that never returns does not keep its
run past its deadline. An alarm for a run that has ended here since sends no statement. A run of
this worker the statement failed is marked lost: its epoch moved on, so it commits nothing more
and stops at its next write or step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from wfctl import recovery
from wfctl.worker.duties import Alarmed
from wfctl.worker.execution import Execution
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session


class DeadlineDuty(Alarmed):
    """``recovery.expire`` through ``session``, for the executions ``held()`` returns; off
    while ``enabled()`` is false (a stopping worker)."""

    def __init__(
        self,
        interval: float,
        session: Session,
        log: WorkerLog,
        held: Callable[[], Iterable[Execution]],
        *,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("deadlines", interval, self._expire, active=enabled)
        self.session = session
        self.log = log
        self.held = held
        self._every_at = 0.0  # when the next regular pass is due

    def _expire(self) -> None:
        now = time.monotonic()
        if now < self._every_at and not any(
            e.past_deadline() for e in self.held() if not e.terminal and not e.lost
        ):
            return  # an alarm for a run that has ended here since: no statement
        if now >= self._every_at:
            self._every_at = now + self.interval
        expired = self.session.guarded("deadline check", recovery.expire)
        if expired is None:
            return
        failed = set()
        for run in expired:
            failed.add(run.id)
            self.log.event("failed", f"{run.id} {run.error_message}", level="error", type=run.workflow_type)
        for execution in self.held():
            if execution.claimed.id in failed:
                execution.lost = True
