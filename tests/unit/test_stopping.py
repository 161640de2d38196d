"""The worker's stop state (wfctl/worker/stopping.py) without processes; the signals, the
grace period and the watchdog's forced exit run in real workers in tests/process/test_worker.py and
tests/db/test_correctness.py (items 11 and 13)."""

from __future__ import annotations

import signal
import time

from wfctl.worker.log import WorkerLog
from wfctl.worker.stopping import Stopper


def stopper(calls: list[str]) -> Stopper:
    return Stopper(
        2.5,
        WorkerLog("plain", quiet=True),
        wake=lambda: calls.append("wake"),
        in_statement=lambda: False,
        cancel=lambda: calls.append("cancel"),
        held=lambda: 0,
        before_exit=lambda: calls.append("exit"),
    )


def test_the_first_signal_starts_the_stop_and_later_ones_keep_its_deadline():
    calls: list[str] = []
    stop = stopper(calls)
    assert not stop.event.is_set() and stop.deadline is None
    before = time.monotonic()
    stop.begin(signal.SIGTERM)
    assert stop.event.is_set() and stop.signal_name == "SIGTERM"
    deadline = stop.deadline
    assert deadline is not None and before + 2.5 <= deadline <= time.monotonic() + 2.5
    stop.begin(signal.SIGINT)  # a later signal moves neither the deadline nor the name
    assert (stop.deadline, stop.signal_name) == (deadline, "SIGTERM")
    assert calls == []  # begin() only sets state: waking the loop is the handler's part


def test_the_handler_starts_the_stop_and_wakes_the_loop():
    calls: list[str] = []
    stop = stopper(calls)
    stop._on_signal(signal.SIGTERM, None)
    assert stop.event.is_set() and calls == ["wake"]
