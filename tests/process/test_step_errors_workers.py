"""``wfctl.StepError`` on real workers (tests/apps/sagaflows.py; the rules without a database:
tests/unit/test_step_errors.py). A saga catches the failure and compensates; the caught failure
is history from the moment the workflow goes past it, so a worker killed after that replays it
without calling the step again, and one killed before it runs the step again. Uncaught, the
failure ends the attempt and the step runs again in the next one."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import rows, wait_for

import wfctl

APP = "sagaflows"


def gate(workers, name: str) -> Path:
    return Path(f"{workers.gate}-{name}")


def steps(dsn: str, wid: str) -> list[tuple]:
    return rows(
        dsn,
        "SELECT step_number, step_name, status, error_message FROM workflow_steps WHERE workflow_id = %s"
        " ORDER BY step_number",
        wid,
    )


def calls(workers, wid: str, step: str) -> int:
    return workers.effects().count((wid, step))


def test_a_saga_refunds_when_reserving_fails_and_show_marks_the_step_handled(workers, dsn):
    gate(workers, "out").touch()
    wid = str(wfctl.submit(dsn, "saga", {}))
    workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == {"refund": "refunded", "why": "no lamps left"}
    assert steps(dsn, wid) == [
        (1, "charge", "completed", None),
        (2, "reserve", "handled", "OutOfStock: no lamps left"),
        (3, "refund", "completed", None),
    ]
    assert rows(dsn, "SELECT status, attempt FROM workflows WHERE id = %s", wid) == [("completed", 1)]
    assert [calls(workers, wid, s) for s in ("charge", "reserve", "refund")] == [1, 1, 1]
    shown = workers.wfctl("show", wid)
    assert shown.exit_code == 0, shown.output
    (line,) = [x for x in shown.stdout.splitlines() if " reserve " in x]
    assert "handled" in line and "OutOfStock: no lamps left" in line


@pytest.mark.slow
def test_a_worker_killed_after_the_handled_failure_replays_it_without_reserving_again(workers, dsn):
    gate(workers, "out").touch()
    gate(workers, "refund").touch()
    wid = str(wfctl.submit(dsn, "saga", {}))
    victim = workers.start(app=APP)
    wait_for(lambda: calls(workers, wid, "refund") == 1, what="the run to enter refund")
    # the refund started, so the failure it compensates is stored: history
    assert steps(dsn, wid)[1][:3] == (2, "reserve", "handled")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    gate(workers, "out").unlink()  # reserving would now succeed: a replay must not ask again
    gate(workers, "refund").unlink()
    workers.start(app=APP)  # takes the dead worker's run over once its heartbeats are missed
    assert wfctl.result(dsn, wid, timeout=30) == {"refund": "refunded", "why": "no lamps left"}
    assert [calls(workers, wid, s) for s in ("charge", "reserve", "refund")] == [1, 1, 2]
    assert [s[2] for s in steps(dsn, wid)] == ["completed", "handled", "completed"]


@pytest.mark.slow
def test_a_worker_killed_before_the_workflow_went_past_the_failure_runs_the_step_again(workers, dsn):
    gate(workers, "out").touch()
    gate(workers, "handler").touch()
    wid = str(wfctl.submit(dsn, "saga", {}))
    victim = workers.start(app=APP)
    wait_for(lambda: calls(workers, wid, "handler") == 1, what="the workflow to catch the failure")
    # caught, but the workflow has not gone past it yet: not history
    assert [s[:3] for s in steps(dsn, wid)] == [(1, "charge", "completed")]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    gate(workers, "out").unlink()
    gate(workers, "handler").unlink()
    workers.start(app=APP)
    assert wfctl.result(dsn, wid, timeout=30) == {"reserved": True}
    assert [calls(workers, wid, s) for s in ("charge", "reserve", "refund")] == [1, 2, 0]
    assert [s[:3] for s in steps(dsn, wid)] == [(1, "charge", "completed"), (2, "reserve", "completed")]


def test_an_uncaught_step_error_fails_the_attempt_and_the_step_runs_again(workers, dsn):
    wid = str(wfctl.submit(dsn, "strict", {}))
    log = workers.run(app=APP)
    assert wfctl.result(dsn, wid, timeout=5) == "reserved"
    assert rows(dsn, "SELECT status, attempt FROM workflows WHERE id = %s", wid) == [("completed", 2)]
    assert rows(
        dsn, "SELECT attempt, outcome, error FROM workflow_attempts WHERE workflow_id = %s ORDER BY 1", wid
    ) == [(1, "error", "OutOfStock: no lamps left yet"), (2, "completed", None)]
    assert [s[:3] for s in steps(dsn, wid)] == [(1, "charge", "completed"), (2, "reserve", "completed")]
    assert [calls(workers, wid, s) for s in ("charge", "reserve")] == [1, 2]
    retry = [line for line in log.splitlines() if " retry " in line and wid in line]
    assert retry and "step=2 reserve" in retry[0], log


def test_an_uncaught_permanent_error_in_a_step_fails_the_run_at_once(workers, dsn):
    wid = str(wfctl.submit(dsn, "strict-permanent", {}))
    workers.run(app=APP)
    with pytest.raises(wfctl.WorkflowFailed, match="PermanentError: lamps are discontinued"):
        wfctl.result(dsn, wid, timeout=5)
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(1,)]
    assert steps(dsn, wid) == [(1, "reserve", "failed", "PermanentError: lamps are discontinued")]
    assert calls(workers, wid, "reserve") == 1


def test_a_step_error_caught_and_raised_anew_is_history_for_the_next_attempt(workers, dsn):
    """The workflow handled the failure (it raised its own error instead): the next attempt
    replays the failure without reserving, and takes the same path."""
    gate(workers, "out").touch()
    wid = str(wfctl.submit(dsn, "caught-then-raised", {}))
    workers.run(app=APP)
    with pytest.raises(wfctl.WorkflowFailed, match="RuntimeError: gave up: no lamps left"):
        wfctl.result(dsn, wid, timeout=5)
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(2,)]
    assert steps(dsn, wid) == [(1, "reserve", "handled", "OutOfStock: no lamps left")]
    assert calls(workers, wid, "reserve") == 1
