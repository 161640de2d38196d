"""The stale sweep: one of a live worker's duties, so that a crashed worker's runs are resumed by
the survivors without anyone running ``wfctl recover``.

Every ``interval`` (the sweeper's own heartbeat interval) the duty runs ``recovery.sweep``, which
requeues the runs of every worker silent for longer than its *own* recorded ``dead_after`` (its
heartbeat interval times the beats it may miss), under an advisory lock that one worker at a
time holds. What it requeued goes to the worker's log, one line per run.

It holds back in two cases where the silence of the others may be its own doing:

- at start, it first sweeps once its own ``dead_after`` has passed: a worker started just after
  a database restart gives the others as long to reconnect and beat as it would want;
- after its own reconnect (the database restarted, the network failed), likewise: the others
  were probably cut off too, and their heartbeats are old because no beat could get through.
"""

from __future__ import annotations

from collections.abc import Callable

from wfctl import recovery
from wfctl.recovery import Recovered
from wfctl.words import PENDING
from wfctl.worker.duties import Duty
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session

#: The sweep itself: the requeued runs, or None when another worker holds the sweep lock.
SweepOnce = Callable[[], "list[Recovered] | None"]


def sweep_once(session: Session, found: Callable[[], None]) -> SweepOnce:
    """The sweep's statement (``recovery.sweep``) through the worker's ``session``; ``found``
    runs when it requeued something (runnable now; its NOTIFY wakes the other workers). A
    refusal counts as nothing requeued; a connection lost during the sweep as another worker
    sweeping (None): the reconnect postponed the sweep (the others were probably cut off too),
    so it is not sent again at once."""

    def once() -> list[Recovered] | None:
        requeued: list[Recovered] | None = session.guarded(
            "sweep", recovery.sweep, otherwise=[], resend=False
        )
        if requeued:
            found()
        return requeued

    return once


class SweepDuty(Duty):
    """``sweep_once`` every ``interval`` seconds, first at ``start + dead_after``; logs each
    requeued run. ``enabled`` turns it off without unscheduling it (a stopping worker)."""

    def __init__(
        self,
        interval: float,
        dead_after: float,
        sweep_once: SweepOnce,
        log: WorkerLog,
        *,
        start: float,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("sweep", interval, self._sweep, active=enabled)
        self.dead_after = dead_after
        self.sweep_once = sweep_once
        self.log = log
        self.next_at = start + dead_after
        self.requeued = 0  # runs this worker requeued (or failed: out of retries)
        self.skipped = 0  # turns skipped because another worker was sweeping

    def postpone(self, now: float) -> None:
        """After this worker's own reconnect: sweep no sooner than ``dead_after`` from now."""
        self.urgent = False
        self.next_at = max(self.next_at, now + self.dead_after)

    def _sweep(self) -> list[Recovered]:
        if not self.active():
            return []
        found = self.sweep_once()
        if found is None:
            self.skipped += 1
            return []
        for run in found:
            self._report(run)
        self.requeued += len(found)
        return found

    def _report(self, run: Recovered) -> None:
        seen = run.owner_heartbeat.isoformat(timespec="milliseconds") if run.owner_heartbeat else "never"
        owner = run.previous_owner or "-"
        if run.status == PENDING:
            never = " before it started the run (not an attempt)" if run.claimed_ahead else ""
            self.log.event(
                "recovered",
                f"{run.id} requeued: its worker {owner} stopped heartbeating (last beat {seen}){never}",
                level="warning",
                type=run.workflow_type,
                attempt=run.attempt,
                step=run.current_step,
            )
        else:
            self.log.event(
                "failed",
                f"{run.id} failed: its worker {owner} stopped heartbeating (last beat {seen}) "
                "during its last attempt; no retries left",
                level="error",
                type=run.workflow_type,
                attempt=run.attempt,
                step=run.current_step,
            )
