"""How old each of the worker's leases is, by its own monotonic clock.

Another worker's sweep takes a run when its owner's heartbeat and the run's ``updated_at`` are
both older than the owner's dead-after (recovery.recover). Each of this worker's statements that
writes them (the claim that took the run, a heartbeat, which touches every run the worker holds)
confirms the lease as of the moment it was *sent*: the database's clock for the statement can
only be later. A worker paused anywhere (SIGSTOP, a frozen VM, a stalled reply, a long GC)
finds on resuming that its confirmations are old, and must not start a run, or the next step of
one, on a lease the sweep may have taken meanwhile. Past ``limit`` (two thirds of the
dead-after) it asks the loop for a heartbeat, which marks the executions whose lease is gone
lost, and only then goes on.

What stays open: a pause that falls between this check and a step's first side effect, longer
than the dead-after less the limit. A transactional step is fenced by its own transaction.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

LIMIT_SHARE = 2 / 3  # of the dead-after: the oldest confirmation a run or step starts on


class Leases:
    """The last heartbeat's send time, shared by the loop (which beats) and the threads (which
    wait for a beat when their confirmation is too old)."""

    def __init__(self, dead_after: float, request_beat: Callable[[], None]) -> None:
        self.limit = dead_after * LIMIT_SHARE
        self._request_beat = request_beat
        self._changed = threading.Condition()
        self._beat_sent = float("-inf")  # time.monotonic() when the last successful beat was sent
        self._beats = 0  # heartbeats finished (successful or not)

    def confirmed(self, claim_sent: float) -> float:
        """When a lease taken by a claim sent at ``claim_sent`` was last confirmed."""
        return max(claim_sent, self._beat_sent)

    def fresh(self, claim_sent: float, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return now - self.confirmed(claim_sent) <= self.limit

    def beat_finished(self, sent: float, ok: bool) -> None:
        """The loop: a heartbeat sent at ``sent`` finished (``ok``: it committed, and the
        executions it did not list are marked lost already)."""
        with self._changed:
            if ok:
                self._beat_sent = max(self._beat_sent, sent)
            self._beats += 1
            self._changed.notify_all()

    def _beats_reached(self, count: int) -> bool:
        return self._beats >= count

    def reconfirm(self, claim_sent: float, give_up: Callable[[], bool], wait: float) -> bool:
        """A thread: wait for heartbeats until the lease is confirmed within the limit (True),
        or ``give_up()`` says to stop waiting (False). A heartbeat the database refused leaves
        the lease unconfirmed: ask again, ``wait`` seconds apart at most."""
        while not self.fresh(claim_sent):
            if give_up():
                return False
            with self._changed:
                target = self._beats + 1
                self._request_beat()
                self._changed.wait_for(functools.partial(self._beats_reached, target), timeout=wait)
        return True
