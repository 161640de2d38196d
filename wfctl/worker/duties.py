"""The worker loop's periodic duties: things it does now and then, each with a due time.

A duty is due at a time on the loop's monotonic clock, or at once when something asked for it
(``soon()``: a heartbeat right after a reconnect or a fenced write). The loop runs the duties
that are due at each turn and sleeps until the earliest due time of the duties that are
active. Heartbeat, polling for work, the stale sweep (``wfctl/worker/sweep.py``), deadlines and
the schedules' ticks (``wfctl/worker/ticks.py``) are duties: a name, an interval, an action, a
test each. Polling and the deadlines are also due at alarms (``Alarmed``): a time a run this
worker holds becomes due, or reaches its deadline.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TypeVar

Clock = Callable[[], float]
ALARM_HORIZON = 3600.0  # seconds: Alarmed.alarm ignores alarms further ahead than its next run
D = TypeVar("D", bound="Duty")


class Duty:
    """``action`` every ``interval`` seconds; ``active`` says whether the loop should wake up
    for it at all (polling for work is pointless while every slot is taken)."""

    def __init__(
        self,
        name: str,
        interval: float,
        action: Callable[[], object],
        *,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        self.name = name
        self.interval = interval
        self.action = action
        self.active = active
        self.next_at = 0.0  # due at once when the loop starts
        self.urgent = False
        self.last: float | None = None  # when it last ran (None: not yet)
        self.held_until = float("-inf")  # deferred (``defer``): not due before this time

    def soon(self) -> None:
        """Run at the next turn of the loop, whatever the time."""
        self.urgent = True

    def is_due(self, now: float) -> bool:
        return self.urgent or now >= self._due()

    def due_at(self) -> float:
        return float("-inf") if self.urgent else self._due()

    def _due(self) -> float:
        return max(self.next_at, self.held_until)

    def ran(self, now: float) -> None:
        """Record a run at ``now`` (also when the action ran outside ``Duties.run_due``)."""
        self.urgent = False
        self.last = now
        self.next_at = now + self.interval

    def defer(self, every: float) -> None:
        """Not due before ``every`` seconds from its last run, unless asked for at once (a
        worker that only waits for the listening duty: the worker holding it does this for the
        pool every interval, the waiting one only as a fallback)."""
        if self.last is not None:
            self.held_until = self.last + every

    def undefer(self) -> None:
        """Due every ``interval`` again (the worker has work or the duty now)."""
        self.held_until = float("-inf")

    def run(self, now: float) -> None:
        self.ran(now)
        self.action()


class Alarmed(Duty):
    """A duty due every ``interval`` seconds and at each alarm set in between, which a run for
    another reason meanwhile does not cancel."""

    def __init__(
        self,
        name: str,
        interval: float,
        action: Callable[[], object],
        *,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(name, interval, action, active=active)
        self._alarms: list[float] = []

    def alarm(self, at: float) -> None:
        """Be due at ``at`` (on the loop's clock) as well; an alarm more than ALARM_HORIZON
        ahead is left to the regular runs (the heap stays small under long sleeps)."""
        if at - self.next_at > ALARM_HORIZON:
            return
        heapq.heappush(self._alarms, at)
        self.next_at = min(self.next_at, at)

    def ran(self, now: float) -> None:
        super().ran(now)
        while self._alarms and self._alarms[0] <= now:
            heapq.heappop(self._alarms)
        if self._alarms:
            self.next_at = min(self.next_at, self._alarms[0])

    def _due(self) -> float:
        due = super()._due()  # deferred or not, an alarm rings on time
        return min(due, self._alarms[0]) if self._alarms else due


class Poll(Alarmed):
    """Polling for work: every ``interval`` seconds, and at each alarm set in between (a run this
    worker parked or backed off becomes due then, or a rate limit lets the next start go).
    Nothing announces a due time with a NOTIFY: without the alarm such a run would wait for the
    poll. A worker that waits for the listening duty polls less often (``due_every``): the
    worker that holds it polls for the pool."""

    def due_every(self, now: float, interval: float) -> bool:
        """Due with polls every ``interval`` seconds instead (alarms as ever)?"""
        last = 0.0 if self.last is None else self.last
        return self.urgent or now >= self.next_alarm() or now >= last + interval

    def next_alarm(self) -> float:
        return self._alarms[0] if self._alarms else float("inf")


class Duties:
    """The loop's duties, in the order they run when several are due."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.items: list[Duty] = []
        self.timers: list[Duty] = []

    def add(self, duty: D) -> D:
        self.items.append(duty)
        return duty

    def add_timer(self, duty: D) -> D:
        """A duty the loop acts on itself (polling: the claim policy decides, and records the
        run); it only counts for when the loop wakes up."""
        self.timers.append(duty)
        return duty

    def run_due(self) -> list[str]:
        """Run every duty that is due now; the names of those that ran."""
        ran = []
        for duty in self.items:
            if duty.is_due(self.clock()):
                duty.run(self.clock())
                ran.append(duty.name)
        return ran

    def next_due(self) -> float:
        """The earliest due time of the active duties (inf when none is active)."""
        times = [d.due_at() for d in self.items + self.timers if d.active()]
        return min(times, default=float("inf"))
