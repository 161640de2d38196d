"""Regression tests for the holes a review found in the worker, fencing and replay.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_correctness.py.
"""

from __future__ import annotations

import collections
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from helpers import wait_for

import wfctl

# The engine's promises here hold in both table layouts: each test runs in each.
pytestmark = pytest.mark.layouts

APP = "correctflows"
# For the tests that read the error of a run's last attempt: the workers' 200 ms heartbeat with
# 25 missed beats before they count as dead (5 s, not 0.6 s), so a loaded machine's stall of the
# worker is not mistaken for its death, which would end the run "abandoned" instead.
STEADY = ("--missed-beats", "25")


def rows(dsn: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def one(dsn: str, sql: str, *params: object) -> tuple:
    found = rows(dsn, sql, *params)
    assert len(found) == 1, found
    return found[0]


def counts(effects: list[tuple[str, str]], wid: str) -> dict[str, int]:
    return dict(collections.Counter(step for w, step in effects if w == wid))


def wait_status(dsn: str, wid: str, *statuses: str) -> str:
    def reached() -> str | None:
        status = one(dsn, "SELECT status FROM workflows WHERE id = %s", wid)[0]
        return status if status in statuses else None

    return wait_for(reached, what=f"{wid} to be {' or '.join(statuses)}")


def gate(workers, name: str) -> Path:
    return Path(f"{workers.gate}-{name}")


def heartbeats_pass(dsn: str, worker_pid: int, beats: int = 2) -> None:
    """Wait until the worker has heartbeaten ``beats`` more times (its heartbeat_at moves)."""
    seen: list[datetime] = []

    def moved() -> bool:
        found = rows(
            dsn, "SELECT heartbeat_at FROM workers WHERE pid = %s AND stopped_at IS NULL", worker_pid
        )
        if found and (not seen or found[0][0] > seen[-1]):
            seen.append(found[0][0])
        return len(seen) > beats

    wait_for(moved, what=f"{beats} heartbeats")


@pytest.mark.slow
def test_step_name_too_long_is_refused_before_the_step_runs(workers, dsn):
    wid = str(wfctl.submit(dsn, "c-longname"))
    proc = workers.start(*STEADY, app=APP)
    wait_status(dsn, wid, "failed")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    status, attempt, error = one(
        dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid
    )
    assert (status, attempt) == ("failed", 2)
    assert "250 characters" in error and "not run" in error
    assert counts(workers.effects(), wid) == {}, "the step's function ran although its name cannot be stored"


@pytest.mark.slow
def test_system_exit_in_a_step_is_a_counted_attempt(workers, dsn):
    wid = str(wfctl.submit(dsn, "c-exit"))
    proc = workers.start(*STEADY, app=APP)
    wait_status(dsn, wid, "failed")
    attempt, error = one(dsn, "SELECT attempt, error_message FROM workflows WHERE id = %s", wid)
    assert attempt == 2 and "SystemExit" in error
    assert counts(workers.effects(), wid) == {"bye": 2}
    assert proc.poll() is None, "the worker died with the workflow"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.slow
def test_refused_checkpoint_counts_and_never_completes_without_it(workers, dsn):
    """The step's result overflows jsonb's numeric: the checkpoint is refused. Before: the run
    completed with no step row, or was requeued forever without counting an attempt."""
    wid = str(wfctl.submit(dsn, "c-huge"))
    proc = workers.start(*STEADY, app=APP)
    wait_status(dsn, wid, "completed", "failed")
    status, attempt, step, error = one(
        dsn, "SELECT status, attempt, current_step, error_message FROM workflows WHERE id = %s", wid
    )
    assert (status, attempt, step) == ("failed", 2, 0), error
    assert "ended without its final write" in error and "numeric" in error
    assert rows(
        dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s AND status = 'completed'", wid
    ) == [(0,)]
    heartbeats_pass(dsn, proc.pid)
    assert counts(workers.effects(), wid) == {"huge": 2}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.slow
def test_cancel_and_retry_while_the_old_execution_still_runs(workers, dsn):
    for name in ("g1", "g2", "g3"):
        gate(workers, name).touch()
    gate(workers, "g1").unlink()
    wid = str(wfctl.submit(dsn, "c-gates"))
    proc = workers.start(app=APP)
    wait_for(lambda: counts(workers.effects(), wid).get("g2") == 1, what="the run to enter step 2")
    assert workers.wfctl("cancel", wid).exit_code == 0
    assert workers.wfctl("retry", wid).exit_code == 0
    # the same worker claims the new run while the old execution is still inside step 2
    wait_for(lambda: counts(workers.effects(), wid).get("g2") == 2, what="the new run to enter step 2")
    gate(workers, "g2").unlink()
    wait_for(lambda: counts(workers.effects(), wid).get("g3") == 1, what="the new run to reach step 3")
    wait_for(
        lambda: " lost " in proc.log_path.read_text() or "lease lost" in proc.log_path.read_text(),
        what="the old execution to be fenced out",
    )
    heartbeats_pass(dsn, proc.pid, beats=3)
    assert counts(workers.effects(), wid) == {"g1": 1, "g2": 2, "g3": 1}, "a step ran twice in one run"
    gate(workers, "g3").unlink()
    wait_status(dsn, wid, "completed")
    assert counts(workers.effects(), wid) == {"g1": 1, "g2": 2, "g3": 1}
    assert one(dsn, "SELECT output_data FROM workflows WHERE id = %s", wid) == (6,)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.slow
def test_retry_of_a_sleeping_run_parks_it_again(workers, dsn):
    wid = str(wfctl.submit(dsn, "c-sleeper", {"sleep": "1h"}))
    workers.run(app=APP)
    status, wake = one(dsn, "SELECT status, run_at FROM workflows WHERE id = %s", wid)
    assert status == "pending" and wake > datetime.now(UTC) + timedelta(minutes=59)
    assert workers.wfctl("cancel", wid).exit_code == 0
    assert workers.wfctl("retry", wid).exit_code == 0
    workers.run(app=APP)
    assert one(dsn, "SELECT status, run_at, attempt FROM workflows WHERE id = %s", wid) == (
        "pending",
        wake,
        1,
    )
    assert counts(workers.effects(), wid) == {"before": 1}


@pytest.mark.slow
def test_a_lock_timeout_fails_the_write_instead_of_reconnecting_forever(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 1}))
    proc = workers.start(env={"PGOPTIONS": "-c lock_timeout=200"})
    wait_for(lambda: counts(workers.effects(), wid).get("one"), what="step one to start")
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (wid,))
        workers.gate.unlink()
        wait_for(lambda: "refused" in proc.log_path.read_text(), what="the worker to report the refusal")
        wait_for(
            lambda: "ended without its final write" in proc.log_path.read_text(),
            what="the worker to end the attempt",
        )
        holder.commit()
    wait_status(dsn, wid, "completed")
    log = proc.log_path.read_text()
    assert "lost the database connection" not in log, log
    assert one(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == (2,)
    assert counts(workers.effects(), wid) == {"one": 2, "two": 1, "three": 1}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def wait_blocked(dsn: str) -> None:
    wait_for(
        lambda: rows(
            dsn,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'wfctl worker'"
            " AND wait_event_type = 'Lock' AND wait_event <> 'advisory' AND datname = current_database()",
        ),
        what="the worker to wait on the lock",
    )


@pytest.mark.slow
def test_nothing_claimed_ahead_starts_after_sigterm(workers, dsn):
    workers.gate.touch()
    first = str(wfctl.submit(dsn, "three", {"gate": 1}))
    proc = workers.start("--concurrency", "1")
    wait_for(lambda: counts(workers.effects(), first).get("one"), what="the first run to start")
    others = [str(wfctl.submit(dsn, "three", {}))]  # one thread: one run is claimed ahead
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'running'") == [(2,)],
        what="the others to be claimed ahead",
    )
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE workflows IN ACCESS EXCLUSIVE MODE")
        workers.gate.unlink()  # the first run's checkpoint now waits for the lock
        wait_blocked(dsn)
        proc.send_signal(signal.SIGTERM)
        holder.commit()
    assert proc.wait(timeout=30) == 0
    for wid in others:
        assert counts(workers.effects(), wid) == {}, "a claimed-ahead run started after SIGTERM"
        assert one(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == ("pending",)


@pytest.mark.slow
def test_a_worker_whose_database_hangs_exits_within_grace_plus_a_few_seconds(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 1}))
    proc = workers.start("--grace", "1s")
    wait_for(lambda: counts(workers.effects(), wid).get("one"), what="the run to start")
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE workflows IN ACCESS EXCLUSIVE MODE")
        workers.gate.unlink()
        wait_blocked(dsn)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        took = time.monotonic() - began
        holder.rollback()
    log = proc.log_path.read_text()
    assert took < 1 + 5 + 3, f"took {took:.1f}s to exit"
    assert code == 4, log
    assert "does not answer" in log and "exiting without handing back" in log
