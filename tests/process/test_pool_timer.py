"""A run parked until a time (a sleep, a wait's timeout, a step's backoff) is announced by
nothing when it falls due: the worker that parked it sets an alarm, and the worker that listens
for the pool finds it at its beats (worker.heartbeat's timer). So a run whose parker stopped or
died meanwhile still starts when it is due, not at the next poll.

The workers here poll once a minute: a run that wakes within seconds was woken by an alarm.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

import pytest
from helpers import rows, wait_for

import wfctl

pytestmark = pytest.mark.slow

QUIET = ("--poll", "60s")  # heartbeats every 200 ms (the fixture's): the timer looks ahead 400 ms
SLEEP = 3.0  # seconds the run sleeps: its parker is stopped well before it falls due
PROMPT = 15.0  # seconds after it falls due that it must have woken, on a loaded machine


def parker_pid(dsn: str, wid: uuid.UUID) -> int:
    """The process of the worker that parked ``wid`` in its sleep."""
    [(pid,)] = wait_for(
        lambda: rows(
            dsn,
            "SELECT k.pid FROM workflows w JOIN workers k ON k.id = w.lease_owner"
            " WHERE w.id = %s AND w.status = 'pending' AND w.wait_kind = 'sleep'",
            wid,
        ),
        what="the run to park in its sleep",
    )
    return pid


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_sleep_whose_worker_went_away_wakes_when_due_not_at_the_next_poll(
    dsn: str, workers: Any, stop: signal.Signals
) -> None:
    procs = {p.pid: p for p in (workers.start(*QUIET) for _ in range(2))}
    workers.wait_ready(2)
    wid = wfctl.submit(dsn, "sleeper", {"sleep": f"{SLEEP}s"})
    parker = procs.pop(parker_pid(dsn, wid))
    [(due,)] = rows(
        dsn, "SELECT extract(epoch FROM run_at - now())::float8 FROM workflows WHERE id = %s", wid
    )
    assert due > 1.0, "the run fell due before its worker could be stopped: nothing was tested"
    parker.send_signal(stop)
    parker.wait(timeout=10)
    assert wfctl.result(dsn, wid, timeout=due + PROMPT) == "woke"
    [survivor] = procs.values()
    [(owner,)] = rows(
        dsn, "SELECT k.pid FROM workflows w JOIN workers k ON k.id = w.lease_owner WHERE w.id = %s", wid
    )
    assert owner == survivor.pid
