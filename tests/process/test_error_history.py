"""Errors you can read, their history, and errors that must not be retried.

The error column is the exception's type and message; the traceback (with file and line) is
kept apart for ``show --traceback`` and ``--json``, also for errors raised outside a step. Every
execution of a workflow is a row of workflow_attempts, closed by whatever ended it: completed,
error, parked, released, abandoned (recovery), cancelled. ``wfctl.PermanentError`` and a
type's ``dont_retry`` fail the run at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from helpers import rows, wait_for
from test_worker import burst_until_terminal, counts, recover_until, status_of

import wfctl
from wfctl.registry import Registry

APP = "errorflows"


def attempts(dsn: str, wid: str) -> list[tuple]:
    return rows(
        dsn,
        "SELECT attempt, lease_epoch, outcome, worker_id IS NOT NULL, ended_at >= started_at, error "
        "FROM workflow_attempts WHERE workflow_id = %s ORDER BY lease_epoch",
        wid,
    )


def shown(workers, wid: str) -> dict:
    result = workers.wfctl("show", wid, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_error_is_type_and_message_and_the_traceback_is_kept_apart(workers, dsn):
    wid = str(wfctl.submit(dsn, "flaky", {"fail_times": 1}))
    workers.run("--burst-wait", "0s")  # leave the retry pending
    (error, trace) = rows(dsn, "SELECT error_message, error_traceback FROM workflows WHERE id = %s", wid)[0]
    assert error == "RuntimeError: card declined on attempt 1"
    assert trace.startswith("Traceback (most recent call last):")
    assert 'testflows.py", line' in trace and trace.endswith("RuntimeError: card declined on attempt 1")
    listed = workers.wfctl("list", "--json")
    assert [r["error_message"] for r in json.loads(listed.stdout) if str(r["id"]) == wid] == [error]
    text = workers.wfctl("show", wid, env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "Traceback" not in text.stdout and error in text.stdout
    assert f"wfctl show --traceback {wid}" in text.stderr
    full = workers.wfctl("show", "--traceback", wid, env={"COLUMNS": "200"})
    assert full.exit_code == 0 and 'testflows.py", line' in full.stdout
    data = shown(workers, wid)
    assert data["workflow"]["error_traceback"] == trace
    assert [(a["attempt"], a["outcome"], a["error"]) for a in data["attempts"]] == [(1, "error", error)]
    assert data["attempts"][0]["traceback"] == trace
    # the retry completes: the error is cleared on the workflow, the history keeps it
    assert burst_until_terminal(workers, dsn, wid) == "completed"
    cleared = rows(dsn, "SELECT error_message, error_traceback FROM workflows WHERE id = %s", wid)
    assert cleared == [(None, None)]
    assert [(a[0], a[2], a[3], a[4]) for a in attempts(dsn, wid)] == [
        (1, "error", True, True),
        (2, "completed", True, True),
    ]
    # --traceback still finds the failed attempt's traceback once the workflow has completed
    full = workers.wfctl("show", "--traceback", wid, env={"COLUMNS": "200"})
    assert full.exit_code == 0 and "Error of attempt 1 (epoch 1)" in full.stdout
    assert full.stdout.count('testflows.py", line') == trace.count('testflows.py", line') >= 1
    clean = str(wfctl.submit(dsn, "flaky", {"fail_times": 0}))
    assert burst_until_terminal(workers, dsn, clean) == "completed"
    none = workers.wfctl("show", "--traceback", clean)
    assert none.exit_code == 0 and "no attempt of this workflow raised an error" in none.stderr


def test_an_error_raised_by_the_workflow_body_has_its_file_and_line(workers, dsn):
    wid = str(wfctl.submit(dsn, "body_error", {}))
    assert burst_until_terminal(workers, dsn, wid, app=APP) == "failed"
    (error, trace) = rows(dsn, "SELECT error_message, error_traceback FROM workflows WHERE id = %s", wid)[0]
    assert error == "KeyError: 'missing'"
    assert 'errorflows.py", line' in trace and "in body_error" in trace
    assert 'values["missing"] += 1' in trace
    assert [a[2] for a in attempts(dsn, wid)] == ["error"]


@pytest.mark.parametrize(
    ("workflow_type", "error", "failed_step"),
    [
        ("permanent_step", "PermanentError: card declined", 2),
        ("permanent_body", "PermanentError: order is void", None),
        ("dont_retry", "SoftDeclined: insufficient funds", 1),
    ],
)
def test_errors_that_must_not_be_retried_fail_at_once(workers, dsn, workflow_type, error, failed_step):
    wid = str(wfctl.submit(dsn, workflow_type, {}))
    assert burst_until_terminal(workers, dsn, wid, app=APP) == "failed"
    assert rows(dsn, "SELECT attempt, max_retries, error_message FROM workflows WHERE id = %s", wid) == [
        (1, 5, error)
    ]
    failed = rows(
        dsn, "SELECT step_number FROM workflow_steps WHERE workflow_id = %s AND status = 'failed'", wid
    )
    assert failed == ([(failed_step,)] if failed_step else [])
    assert [(a[0], a[2], a[5]) for a in attempts(dsn, wid)] == [(1, "error", error)]


def test_an_error_not_listed_in_dont_retry_is_retried(workers, dsn):
    wid = str(wfctl.submit(dsn, "dont_retry", {"raise": "value"}))
    workers.run(app=APP)
    assert rows(dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid) == [
        ("pending", 2, "ValueError: bad value on attempt 1")
    ]


def test_dont_retry_takes_exception_classes_only():
    registry = Registry()
    with pytest.raises(wfctl.InvalidInput, match="dont_retry takes exception classes, not 'ValueError'"):
        wfctl.workflow("x", dont_retry="ValueError", registry=registry)  # type: ignore[arg-type]
    with pytest.raises(wfctl.InvalidInput, match="not 3"):
        wfctl.workflow("x", dont_retry=(ValueError, 3), registry=registry)  # type: ignore[arg-type]
    wfctl.workflow("x", dont_retry=[ValueError, KeyError], registry=registry)(lambda ctx, data: None)
    assert registry.get("x").dont_retry == (ValueError, KeyError)


def test_a_parked_execution_ends_parked_and_the_wake_up_is_a_new_attempt_row(workers, dsn):
    wid = str(wfctl.submit(dsn, "napper", {}))
    assert burst_until_terminal(workers, dsn, wid, app=APP) == "completed"
    history = attempts(dsn, wid)
    assert [(a[0], a[2]) for a in history] == [(1, "parked"), (1, "completed")]
    assert all(a[3] and a[4] for a in history)


def test_abandoned_released_and_cancelled_executions(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "held_step", {}))
    # 1: SIGKILL inside step 2; recovery requeues the run and closes the execution 'abandoned'
    proc = workers.start(app=APP)
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    recover_until(workers, wid)
    # 2: a worker shutting down (SIGTERM, short grace) hands it back: 'released'
    proc = workers.start("--grace", "100ms", app=APP)
    wait_for(lambda: counts(workers.effects(), wid).get("two", 0) >= 2, what="step 2 to start again")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    # 3: an operator cancels it while it runs: 'cancelled'
    workers.start(app=APP)
    wait_for(lambda: counts(workers.effects(), wid).get("two", 0) >= 3, what="step 2 to start a third time")
    assert workers.wfctl("cancel", wid, "--reason", "customer left").exit_code == 0
    workers.gate.unlink()
    history = attempts(dsn, wid)
    assert [(a[0], a[1], a[2], a[3]) for a in history] == [
        (1, 1, "abandoned", True),
        (2, 3, "released", True),  # recovery took epoch 2 to fence the dead worker out
        (2, 4, "cancelled", True),
    ]
    assert history[0][5] == "worker went silent" and history[2][5] == "customer left"
    data = shown(workers, wid)
    assert [a["outcome"] for a in data["attempts"]] == ["abandoned", "released", "cancelled"]
    assert all(a["last_step"] == 1 for a in data["attempts"])
    assert status_of(dsn, wid) == "cancelled"


def test_an_execution_in_flight_shows_as_running(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "held_step", {}))
    workers.start(app=APP)
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    data = shown(workers, wid)
    assert [(a["outcome"], a["ended_at"]) for a in data["attempts"]] == [("running", None)]
    text = workers.wfctl("show", wid, env={"COLUMNS": "200"})
    assert "Attempts" in text.stdout and "running" in text.stdout
    workers.gate.unlink()
    wait_for(lambda: status_of(dsn, wid) == "completed", what="the run to complete")
    wait_for(lambda: [a[2] for a in attempts(dsn, wid)] == ["completed"], what="the history to close")


def test_prune_deletes_the_history_with_its_workflow(workers, dsn):
    wid = str(wfctl.submit(dsn, "flaky", {"fail_times": 0}))
    assert burst_until_terminal(workers, dsn, wid) == "completed"
    assert len(attempts(dsn, wid)) == 1
    result = workers.wfctl("prune", "--older-than", "1ms", "--status", "completed")
    assert result.exit_code == 0, result.output
    assert attempts(dsn, wid) == []


def test_migration_adds_the_history_to_a_database_with_runs(tmp_path, empty_dsn):
    """A database at an older schema with a failed run upgrades: the run keeps its error, has
    no history rows (none were recorded), and its next execution is recorded."""
    import psycopg

    from wfctl import schema
    from wfctl.queries import q

    history = next(m for m in schema.migrations() if m.name == "attempts")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(q("schema.create_version_table"))
        for m in schema.migrations():
            if m.version < history.version:
                conn.execute(m.sql().encode())
                conn.execute(q("schema.record"), {"version": m.version, "name": m.name})
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, error_message) VALUES ('flaky', 'failed', 'old')"
        )
    out = subprocess.run(
        [sys.executable, "-m", "wfctl", "init", "--dsn", empty_dsn],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert rows(empty_dsn, "SELECT error_message, error_traceback FROM workflows") == [("old", None)]
    assert rows(empty_dsn, "SELECT count(*) FROM workflow_attempts") == [(0,)]
