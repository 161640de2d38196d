"""Stopping a worker: the SIGTERM/SIGINT handlers and the watchdog that bounds shutdown.

- SIGTERM or a first SIGINT starts the stop: the worker claims nothing more, running steps
  may finish for ``grace`` seconds (their workflows are released at their next step
  boundary), then whatever still runs is released.
- A second SIGINT exits at once (the leases lapse; a live worker's sweep or ``wfctl recover``
  requeues the runs).
- Whatever the database does, the process ends within the grace period plus a few seconds:
  past the grace period the watchdog cancels the statement the loop waits on, and if the
  worker still has not exited it exits without handing its workflows back.

The handler itself only sets flags and lets Python's wakeup fd carry the signal: a handler
that logged could deadlock on the log's lock, which the interrupted main thread may hold. The
watchdog thread reads the signal numbers from that fd, so it acts (and logs) even while the
main thread waits on a database that does not answer.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from wfctl import exits
from wfctl.worker.log import WorkerLog

STUCK_CANCEL_AFTER = 2.0  # after the grace period, a statement still waiting is cancelled...
STUCK_EXIT_AFTER = 5.0  # ...and if the database still does not answer, the worker exits


class Stopper:
    """The worker's stop: ``event`` is set once a stop began, ``deadline`` is when the grace
    period ends (monotonic clock). The callbacks let the watchdog act on the worker without
    knowing it: ``wake`` wakes the loop, ``in_statement`` says whether the loop waits for the
    database, ``cancel`` cancels that statement, ``held`` counts the workflows the worker
    holds, ``before_exit`` runs just before the watchdog ends the process."""

    def __init__(
        self,
        grace: float,
        log: WorkerLog,
        *,
        wake: Callable[[], None],
        in_statement: Callable[[], bool],
        cancel: Callable[[], None],
        held: Callable[[], int],
        before_exit: Callable[[], None],
    ) -> None:
        self.grace = grace
        self.log = log
        self.event = threading.Event()
        self.deadline: float | None = None
        self.signal_name = ""
        self.exited = threading.Event()  # the worker has finished: the watchdog leaves
        self._interrupts = 0  # counted by the handler (when Python gets to run it)
        self._wake = wake
        self._in_statement = in_statement
        self._cancel = cancel
        self._held = held
        self._before_exit = before_exit
        self._announced = False  # the watchdog has logged the signal (never the handler)
        self._signal_r = -1

    def install(self) -> None:
        """Handle SIGTERM and SIGINT, and start the watchdog (from the main thread)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._signal_r = read
        threading.Thread(target=self._watch, name="wfctl-watchdog", daemon=True).start()

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)

    def begin(self, signum: int) -> None:
        """Start the stop (once): no new work from now, and the grace period runs."""
        if not self.event.is_set():
            self.signal_name = signal.Signals(signum).name
            self.deadline = time.monotonic() + self.grace
            self.event.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Only flags and a wake-up. Python runs this handler only when the main thread runs
        Python code again: while it waits on the database, the watchdog (woken by the
        signal's byte on the wakeup fd) starts the stop instead."""
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts >= 2:
                exit_now()
        self.begin(signum)
        self._wake()

    def _watch(self) -> None:
        interrupts = 0
        cancelled = False
        while True:
            timeout = None
            if self.deadline is not None:
                after = STUCK_EXIT_AFTER if cancelled else STUCK_CANCEL_AFTER
                timeout = max(0.0, self.deadline + after - time.monotonic())
            ready, _, _ = select.select([self._signal_r], [], [], timeout)
            if self.exited.is_set():
                return
            if ready:
                for signum in os.read(self._signal_r, 64):
                    if signum == signal.SIGINT:
                        interrupts += 1
                        if interrupts >= 2:
                            exit_now()
                    if signum in (signal.SIGINT, signal.SIGTERM) and not self._announced:
                        self.begin(signum)
                        self._announced = True
                        self.log.info(
                            f"{self.signal_name}: no new work; letting running steps finish "
                            f"(grace {self.grace:g}s)",
                            running=self._held(),
                        )
                continue
            if not cancelled:
                cancelled = True
                if self._in_statement():
                    self.log.warning(
                        f"the database has not answered for {STUCK_CANCEL_AFTER:g}s past the grace "
                        "period: cancelling the statement"
                    )
                    with contextlib.suppress(Exception):
                        self._cancel()
                continue
            held = self._held()
            self._before_exit()
            self.log.error(
                f"the database does not answer: exiting without handing back {held} workflow(s); "
                "their leases lapse and another worker's sweep (or `wfctl recover`) requeues them"
            )
            os._exit(exits.CONNECTION)


def exit_now() -> None:
    """A second interrupt: exit at once (the leases lapse; recovery requeues the runs)."""
    with contextlib.suppress(OSError):
        os.write(
            2,
            b"wfctl worker: second interrupt: exiting now; unfinished workflows will be "
            b"recovered once their lease goes stale\n",
        )
    os._exit(exits.INTERRUPTED)
