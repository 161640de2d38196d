"""``@wfctl.step``'s retries, backoff and timeout on real workers (tests/apps/stepflows.py; the
rules without a database: tests/unit/test_step_options.py; the rows: tests/db/
test_step_tries.py).

The tries of a step run within one attempt: a short backoff waits in the worker's thread (a
SIGTERM cuts it short, a SIGKILL leaves the step to the next attempt), a long one parks the run
with the record of its tries, which any worker goes on counting from. A try past its timeout is
abandoned: a synchronous call runs on in its thread, counted in ``wfctl workers``, its result
dropped; an async one is cancelled."""

from __future__ import annotations

import json
import re
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeclock
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl.caller import MAX_ABANDONED

APP = "stepflows"


def gate(workers: Any, name: str) -> Path:
    return Path(f"{workers.gate}-{name}")


def calls(workers: Any, wid: str, what: str = "charge") -> int:
    return workers.effects().count((wid, what))


def step_rows(dsn: str, wid: str) -> list[tuple[Any, ...]]:
    return rows(
        dsn,
        "SELECT step_number, step_name, status, tries, attempt, error_message FROM workflow_steps"
        " WHERE workflow_id = %s ORDER BY step_number",
        wid,
    )


def log_of(proc: Any) -> str:
    return Path(proc.log_path).read_text()


def abandoned(workers: Any) -> list[int]:
    shown = workers.wfctl("workers", "--json")
    assert shown.exit_code == 0, shown.output
    return [w["abandoned_calls"] for w in json.loads(shown.stdout) if w["state"] == "live"]


def test_a_step_that_fails_twice_then_succeeds_takes_three_tries_in_one_attempt(workers, dsn):
    wid = str(wfctl.submit(dsn, "flaky-charge", {}))
    log = workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == "charged"
    assert calls(workers, wid) == 3
    assert step_rows(dsn, wid) == [(1, "charge", "completed", 3, 1, None)]
    assert rows(dsn, "SELECT attempt FROM workflow_attempts WHERE workflow_id = %s", wid) == [(1,)]
    retried = [line for line in log.splitlines() if "step_retry" in line and wid in line]
    assert len(retried) == 2, log
    assert "try 1 failed: ConnectionError: try 1 failed" in retried[0] and "tries=1" in retried[0]
    assert "tries=2" in retried[1] and "retry_in=" in retried[1] and "step=1 charge" in retried[1]
    shown = workers.wfctl("show", wid)
    assert shown.exit_code == 0, shown.output
    assert "tries" in shown.stdout
    (line,) = [x for x in shown.stdout.splitlines() if " charge " in x]
    assert re.search(r"completed\s+│?\s*1\s+│?\s*3\b", line), shown.stdout


def test_retries_exhausted_and_caught_a_saga_apologises(workers, dsn):
    wid = str(wfctl.submit(dsn, "charge-or-apologise", {}))
    workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == {"apology": "sorry", "why": "declined at try 3"}
    assert calls(workers, wid) == 3  # retries + 1
    assert [r[:5] for r in step_rows(dsn, wid)] == [
        (1, "charge", "handled", 3, 1),
        (2, "apologise", "completed", 1, 1),
    ]


def test_retries_exhausted_and_uncaught_the_attempt_fails_and_the_next_tries_afresh(workers, dsn):
    wid = str(wfctl.submit(dsn, "charge-strictly", {}))
    workers.run(app=APP)
    with pytest.raises(wfctl.WorkflowFailed, match="CardDeclined: declined at try 6"):
        wfctl.result(dsn, wid, timeout=5)
    assert calls(workers, wid) == 6  # two attempts of three tries
    assert step_rows(dsn, wid) == [(1, "charge", "failed", 3, 2, "CardDeclined: declined at try 6")]
    assert rows(
        dsn, "SELECT attempt, outcome FROM workflow_attempts WHERE workflow_id = %s ORDER BY 1", wid
    ) == [
        (1, "error"),
        (2, "error"),
    ]


def test_a_permanent_error_is_not_tried_again_by_the_step_either(workers, dsn):
    wid = str(wfctl.submit(dsn, "charge-stolen", {}))
    log = workers.run(app=APP)
    with pytest.raises(wfctl.WorkflowFailed, match="PermanentError: card reported stolen"):
        wfctl.result(dsn, wid, timeout=5)
    assert calls(workers, wid) == 1
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(1,)]
    assert "step_retry" not in log


@pytest.mark.slow
def test_a_long_backoff_parks_and_another_worker_goes_on_counting_after_a_sigkill(workers, dsn):
    fakeclock.stop(dsn)
    gate(workers, "down").touch()
    wid = str(wfctl.submit(dsn, "charge-later", {}))
    first = workers.start(app=APP)
    wait_for(
        lambda: [r[2:4] for r in step_rows(dsn, wid)] == [("retrying", 1)], what="the first try's record"
    )
    # parked: pending until the next try, the worker's slot free
    [(status, run_at, wait_kind)] = rows(
        dsn, "SELECT status, run_at, wait_kind FROM workflows WHERE id = %s", wid
    )
    [(next_try,)] = rows(
        dsn,
        "SELECT (output_data ->> 'next_try_at')::timestamptz FROM workflow_steps WHERE workflow_id = %s",
        wid,
    )
    assert (status, run_at, wait_kind) == ("pending", next_try, None)
    shown = workers.wfctl("show", wid)
    (line,) = [x for x in shown.stdout.splitlines() if " charge " in x]
    assert "retrying, next try" in line, shown.stdout
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = workers.start(app=APP)
    fakeclock.advance(dsn, timedelta(minutes=2))  # past the next try (30 s to 1 min)
    wait_for(
        lambda: [r[2:4] for r in step_rows(dsn, wid)] == [("retrying", 2)], what="the second try's record"
    )
    assert calls(workers, wid) == 2
    gate(workers, "down").unlink()
    fakeclock.advance(dsn, timedelta(minutes=5))  # past the third try (1 to 2 min)
    assert wfctl.result(dsn, wid, timeout=30) == "charged"
    assert calls(workers, wid) == 3  # retries + 1: the count went on across the workers
    assert step_rows(dsn, wid) == [(1, "charge", "completed", 3, 1, None)]
    workers_of = rows(
        dsn,
        "SELECT worker_id, outcome FROM workflow_attempts WHERE workflow_id = %s ORDER BY lease_epoch",
        wid,
    )
    ids = rows(dsn, "SELECT id, pid FROM workers")
    pid_of = {worker: pid for worker, pid in ids}
    assert [(pid_of[w], outcome) for w, outcome in workers_of] == [
        (first.pid, "parked"),
        (second.pid, "parked"),
        (second.pid, "completed"),
    ]
    assert "step_retry" in log_of(first) and "step_retry" in log_of(second)


def killed_in_the_backoff(workers: Any, dsn: str, shut: str, workflow_type: str) -> tuple[str, str]:
    """Submit a ``workflow_type`` run with the gate ``shut`` closed, and SIGKILL its worker
    within the 1 to 2 s backoff after its first failed try; the run's id and the worker's log."""
    gate(workers, shut).touch()
    wid = str(wfctl.submit(dsn, workflow_type, {}))
    victim = workers.start(app=APP)
    wait_for(lambda: "step_retry" in log_of(victim), what="the first try to fail")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    return wid, log_of(victim)


@pytest.mark.slow
def test_a_worker_killed_during_a_short_backoff_leaves_the_step_to_the_next_attempt(workers, dsn):
    wid, _log = killed_in_the_backoff(workers, dsn, "down", "charge-soon")
    assert calls(workers, wid) == 1 and step_rows(dsn, wid) == []  # nothing was written
    gate(workers, "down").unlink()
    workers.start(app=APP)  # takes the dead worker's run over once its heartbeats are missed
    assert wfctl.result(dsn, wid, timeout=30) == "charged"
    assert calls(workers, wid) == 2
    assert step_rows(dsn, wid) == [(1, "charge", "completed", 1, 2, None)]  # attempt 2, afresh


@pytest.mark.slow
def test_sigterm_during_a_short_backoff_parks_the_run_at_once_with_its_tries(workers, dsn):
    gate(workers, "down").touch()
    wid = str(wfctl.submit(dsn, "charge-soon", {}))
    stopping = workers.start(app=APP)
    wait_for(lambda: "step_retry" in log_of(stopping), what="the first try to fail")
    stopping.send_signal(signal.SIGTERM)
    assert stopping.wait(timeout=10) == 0
    # the backoff was cut short: no second try here; the tries are on record, due at the next one
    assert calls(workers, wid) == 1
    assert [r[2:5] for r in step_rows(dsn, wid)] == [("retrying", 1, 1)]
    assert rows(dsn, "SELECT status, attempt FROM workflows WHERE id = %s", wid) == [("pending", 1)]
    gate(workers, "down").unlink()
    workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == "charged"
    assert calls(workers, wid) == 2
    assert step_rows(dsn, wid) == [(1, "charge", "completed", 2, 1, None)]  # the count went on


@pytest.mark.slow
def test_a_sync_call_past_its_timeout_is_abandoned_counted_and_its_late_result_dropped(workers, dsn):
    gate(workers, "hang").touch()
    wid = str(wfctl.submit(dsn, "hang-once", {}))
    workers.start(app=APP)
    assert wfctl.result(dsn, wid, timeout=30) == {
        "error_type": "StepTimeout",
        "message": "step 'charge' timed out after 300ms",
    }
    wait_for(lambda: abandoned(workers) == [1], what="wfctl workers to count the abandoned call")
    assert calls(workers, wid, "late") == 0
    gate(workers, "hang").unlink()
    wait_for(lambda: calls(workers, wid, "late") == 1, what="the abandoned call to end")
    wait_for(lambda: abandoned(workers) == [0], what="the abandoned call to be counted out")
    assert step_rows(dsn, wid) == [
        (1, "charge", "handled", 1, 1, "StepTimeout: step 'charge' timed out after 300ms")
    ]
    outputs = rows(dsn, "SELECT output_data::text FROM workflow_steps WHERE workflow_id = %s", wid)
    assert "late" not in str(outputs)


@pytest.mark.slow
def test_a_worker_killed_after_a_timed_out_try_leaves_the_step_to_the_next_attempt(workers, dsn):
    wid, log = killed_in_the_backoff(workers, dsn, "hang", "hang-then-charge")  # the call hanging
    assert "StepTimeout: step 'charge' timed out after 300ms" in log
    before = calls(workers, wid, "hang")
    assert before in (1, 2) and step_rows(dsn, wid) == []  # nothing was written
    gate(workers, "hang").unlink()
    workers.start(app=APP)  # takes the dead worker's run over once its heartbeats are missed
    assert wfctl.result(dsn, wid, timeout=30) == "late"
    assert calls(workers, wid, "hang") == before + 1
    assert calls(workers, wid, "late") == 1  # the abandoned call died with its worker
    assert step_rows(dsn, wid) == [(1, "charge", "completed", 1, 2, None)]  # attempt 2, afresh


@pytest.mark.slow
def test_a_worker_with_as_many_abandoned_calls_as_it_keeps_claims_nothing_until_one_ends(workers, dsn):
    gate(workers, "hang").touch()
    hung = [str(wfctl.submit(dsn, "hang-once", {})) for _ in range(MAX_ABANDONED)]
    worker = workers.start(app=APP)
    for wid in hung:
        assert wfctl.result(dsn, wid, timeout=30)["error_type"] == "StepTimeout"
    wait_for(lambda: "stopped claiming" in log_of(worker), what="the worker to stop claiming")
    waiting = str(wfctl.submit(dsn, "plain", {}))
    beat = rows(dsn, "SELECT heartbeat_at FROM workers")[0][0]
    # two heartbeats later (polls every 100 ms between them), the new run is still not taken
    wait_for(lambda: rows(dsn, "SELECT heartbeat_at FROM workers")[0][0] > beat, what="a heartbeat")
    beat = rows(dsn, "SELECT heartbeat_at FROM workers")[0][0]
    wait_for(lambda: rows(dsn, "SELECT heartbeat_at FROM workers")[0][0] > beat, what="another heartbeat")
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", waiting) == [("pending",)]
    assert abandoned(workers) == [MAX_ABANDONED]
    gate(workers, "hang").unlink()
    assert wfctl.result(dsn, waiting, timeout=30) == 1
    assert log_of(worker).count("stopped claiming") == 1 and "claiming again" in log_of(worker)


def test_an_async_step_is_cancelled_at_its_timeout(workers, dsn):
    wid = str(wfctl.submit(dsn, "hang-async", {}))
    workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == {
        "error_type": "StepTimeout",
        "message": "step 'charge' timed out after 300ms",
    }
    assert calls(workers, wid, "hang") == 1 and calls(workers, wid, "cancelled") == 1
