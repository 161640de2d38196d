"""Firing schedules: one of a live worker's duties, and the declaration of its code's schedules
when it starts.

The duty runs ``schedules.fire_due`` (every due tick of every schedule, whatever types this
worker runs: a run of a type it does not run waits for a worker that does) and then asks when
the earliest tick comes (``schedules.next_due``, by the database's clock). It is due again at
that moment, so a schedule ticking every second gives a run every second, and no later than
``interval`` (the heartbeat interval) from now, so that a schedule added or resumed elsewhere is
seen. Every worker runs the duty; the row locks and the idempotency keys of ``fire_due`` make
each tick one run however many fire at once. It does not run once the worker is stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from wfctl import cron, schedules
from wfctl.registry import WorkflowType
from wfctl.worker.duties import Clock, Duty
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session

#: Wake this long after the earliest tick (the clocks of the worker and the database agree
#: only so far: woken early, the duty finds nothing due and runs again right after).
LATE = 0.002
#: The shortest wait: a due tick another firer holds locked is looked at again this soon.
SOONEST = 0.05


@dataclass(frozen=True)
class Outcome:
    firing: schedules.Firing
    next_in: float | None  # seconds until the earliest tick (None: no active schedule)


def fire_once(conn: psycopg.Connection[Any], hold: float) -> Outcome:
    """The duty's statements: fire what is due (a transaction that ends after ``hold`` seconds
    should the worker freeze in it: its --dead-after), then look at when the next tick comes."""
    firing = schedules.fire_due(conn, hold=hold)
    return Outcome(firing, schedules.next_due(conn))


def guarded_fire(session: Session, hold: float) -> Callable[[], Outcome | None]:
    """``fire_once`` through the worker's ``session``: None when the database refused it."""

    def fire() -> Outcome | None:
        outcome: Outcome | None = session.guarded("schedule check", fire_once, hold)
        return outcome

    return fire


class TickDuty(Duty):
    """``fire`` whenever a tick is due, at least every ``interval`` seconds; logs each run it
    submits. ``fire`` returns None when the database refused (the duty tries again after
    ``interval``)."""

    def __init__(
        self,
        interval: float,
        fire: Callable[[], Outcome | None],
        log: WorkerLog,
        *,
        clock: Clock,
        fired: Callable[[], None] = lambda: None,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("ticks", interval, self._tick, active=enabled)
        self.fire = fire
        self.log = log
        self.clock = clock
        self.fired = fired
        self.submitted = 0  # runs this worker submitted for ticks

    def _tick(self) -> None:
        if not self.active():
            return
        outcome = self.fire()
        if outcome is None:
            return
        self._report(outcome.firing)
        if outcome.next_in is not None:
            wait = min(self.interval, max(SOONEST, outcome.next_in + LATE))
            self.next_at = min(self.next_at, self.clock() + wait)

    def _report(self, firing: schedules.Firing) -> None:
        for missed in firing.missed:
            self.log.event(
                "missed",
                f"schedule {missed.schedule}: the ticks from {cron.iso(missed.first)} to before "
                f"{cron.iso(missed.until)} were not run (no worker and no `wfctl tick` fired them in "
                "time); only later ones ran",
                level="warning",
            )
        for broken in firing.broken:
            self.log.event(
                "error",
                f"schedule {broken.schedule} cannot be fired here: {broken.error} (tried again in "
                f"{schedules.BROKEN_RETRY})",
                level="error",
            )
        runs = [f for f in firing.fired if f.id is not None]
        for run in runs:
            self.log.event(
                "scheduled",
                f"{run.id} submitted by schedule {run.schedule} for {cron.iso(run.tick)}",
                type=run.workflow_type,
            )
        if runs:
            self.submitted += len(runs)
            self.fired()


def declare(
    conn: psycopg.Connection[Any], types: Mapping[str, WorkflowType], log: WorkerLog, *, hold: float
) -> None:
    """At start: the schedules this worker's code declares (``schedules.declare``), logged."""
    for done in schedules.declare(conn, types, hold=hold):
        if done.action == "taken":
            log.warning(
                f"schedule {done.name}: the code declares {done.name!r} with schedule "
                f"{_quoted(done.cron)}, but `wfctl schedule add` holds that name: "
                "the added one stays and the code's is not kept"
            )
        elif done.action == "dropped":
            log.info(
                f"schedule {done.name} deleted: the code no longer declares it (it was {_quoted(done.cron)})"
            )
        else:
            log.info(f"schedule {done.name} {done.action}: {_quoted(done.cron)} (declared in code)")


def _quoted(expression: str) -> str:
    return f'"{expression}"'
