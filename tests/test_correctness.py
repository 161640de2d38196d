"""Regression tests for the holes a review found in the worker, fencing and replay.

Each test names the item it covers. The multi-process ones run real workers against the real
server; the flush tests call the group-commit statement directly with hand-made batches.
"""

from __future__ import annotations

import collections
import json
import signal
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from helpers import wait_for

import wfctl
from wfctl import jsonvalue
from wfctl.connection import connection_lost
from wfctl.registry import Registry, workflow
from wfctl.worker.checkpoints import Request, flush
from wfctl.worker.claims import Claimed
from wfctl.worker.execution import Execution
from wfctl.worker.log import WorkerLog
from wfctl.worker.runner import Worker, WorkerOptions

APP = "correctflows"


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


# -- 1. every way an attempt can end is an attempt ------------------------------------------------


@pytest.mark.slow
def test_step_name_too_long_is_refused_before_the_step_runs(workers, dsn):
    wid = str(wfctl.submit(dsn, "c-longname"))
    proc = workers.start(app=APP)
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
    proc = workers.start(app=APP)
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
    proc = workers.start(app=APP)
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


def test_retry_policy_beyond_a_century_is_refused():
    registry = Registry()
    with pytest.raises(ValueError, match="retry_cap"):
        workflow("w", retry_cap=timedelta(days=10**6), registry=registry)
    with pytest.raises(ValueError, match="retry_base"):
        workflow("w", retry_base=1e12, registry=registry)


# -- 2. one id, two executions on one worker ------------------------------------------------------


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


# -- 3, 5, 7. the flush statement --------------------------------------------------------------------


def running_row(conn: psycopg.Connection, epoch: int, current_step: int = 0) -> uuid.UUID:
    wid = uuid.uuid4()
    conn.execute(
        "INSERT INTO workflows (id, workflow_type, status, lease_owner, lease_epoch, current_step,"
        " max_retries) VALUES (%s, 't', 'running', 'me', %s, %s, 3)",
        (wid, epoch, current_step),
    )
    return wid


def sent(conn: psycopg.Connection, *batch: Request) -> list[bool]:
    flush(conn, list(batch))
    return [r.ok for r in batch]


def test_stale_step_in_the_same_batch_as_a_fresh_one_is_fenced(conn):
    wid = running_row(conn, epoch=2)
    now = datetime.now(UTC)
    stale = Request(wid, 1, "step", 1, step=5, name="stale", output="5", started=now)
    fresh = Request(wid, 2, "step", 1, step=1, name="fresh", output="1", started=now)
    assert sent(conn, stale, fresh) == [False, True]
    assert conn.execute(
        "SELECT step_number, step_name, lease_epoch FROM workflow_steps WHERE workflow_id = %s", (wid,)
    ).fetchall() == [(1, "fresh", 2)]


def test_stale_completion_does_not_merge_with_a_fresh_checkpoint(conn):
    wid = running_row(conn, epoch=2, current_step=1)
    fresh = Request(wid, 2, "step", 1, step=2, name="two", output="2", started=datetime.now(UTC))
    stale_done = Request(wid, 1, "complete", 1, result='"stale"', expect=2)
    assert sent(conn, fresh, stale_done) == [True, False]
    assert conn.execute(
        "SELECT status, output_data, current_step FROM workflows WHERE id = %s", (wid,)
    ).fetchone() == ("running", None, 2)


def test_completion_needs_the_checkpoint_before_it(conn):
    wid = running_row(conn, epoch=1, current_step=0)
    done = Request(wid, 1, "complete", 1, result='"r"', expect=1)  # step 1 never committed
    assert sent(conn, done) == [False]
    assert conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone() == ("running",)
    step = Request(wid, 1, "step", 1, step=1, name="s", output="1", started=datetime.now(UTC))
    done = Request(wid, 1, "complete", 1, result='"r"', expect=1)
    assert sent(conn, step) == [True]
    assert sent(conn, done) == [True]
    assert conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone() == ("completed",)


@pytest.mark.parametrize(
    "make",
    [
        lambda wid: Request(wid, 1, "fail", 1, error="boom", final=False, delay=30.0),
        lambda wid: Request(wid, 1, "fail", 1, error="boom", final=True),
        lambda wid: Request(wid, 1, "park", 1, wake=datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        lambda wid: Request(wid, 1, "release", 1),
        lambda wid: Request(wid, 1, "complete", 1, result="1", expect=0),
    ],
    ids=["fail", "final-fail", "park", "release", "complete"],
)
def test_resending_a_committed_final_write_reports_it_done(conn, make):
    wid = running_row(conn, epoch=1)
    assert sent(conn, make(wid)) == [True]
    state = conn.execute("SELECT status, attempt, run_at FROM workflows WHERE id = %s", (wid,)).fetchone()
    assert sent(conn, make(wid)) == [True], "a re-sent write whose first send committed is not 'lost'"
    after = conn.execute("SELECT status, attempt, run_at FROM workflows WHERE id = %s", (wid,)).fetchone()
    if make(wid).kind != "fail" or make(wid).final:
        assert after == state
    else:
        assert after[:2] == state[:2]  # not counted twice


def test_a_write_fenced_by_a_new_epoch_stays_fenced(conn):
    wid = running_row(conn, epoch=1)
    assert sent(conn, Request(wid, 1, "fail", 1, error="boom", final=False, delay=0.0)) == [True]
    conn.execute("UPDATE workflows SET lease_epoch = 2, status = 'running' WHERE id = %s", (wid,))
    assert sent(conn, Request(wid, 1, "fail", 1, error="boom", final=False, delay=0.0)) == [False]


# -- 4. a replayed sleep parks again ----------------------------------------------------------------


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


# -- 6. a refusal is not a lost connection -----------------------------------------------------------


def test_refusals_and_lost_connections_are_told_apart(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '10ms'")
        with pytest.raises(psycopg.errors.QueryCanceled) as timeout:
            conn.execute("SELECT pg_sleep(1)")
        assert not connection_lost(conn, timeout.value)
        with pytest.raises(psycopg.errors.NumericValueOutOfRange) as overflow:
            conn.execute("SELECT ('1' || repeat('0', 140000))::numeric")
        assert not connection_lost(conn, overflow.value)
        pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as gone:
            conn.execute("SELECT 1")
        assert connection_lost(conn, gone.value)


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


# -- 10. the clock ----------------------------------------------------------------------------------


def test_execution_time_follows_the_database_clock_not_the_wall_clock(monkeypatch):
    db_now = datetime(2026, 1, 1, tzinfo=UTC)
    claimed = Claimed(uuid.uuid4(), "t", None, 1, 1, 3, 0, {}, db_now, time.monotonic() - 5.0)
    registry = Registry()
    workflow("t", registry=registry)(lambda ctx, data: None)
    execution = Execution(claimed, registry.types["t"], lambda r: None, threading.Event(), WorkerLog("plain"))

    class SteppedClock(datetime):
        @classmethod
        def now(cls, tz=None):  # an NTP step of one day on this machine
            return datetime.fromtimestamp(time.time(), tz) + timedelta(days=1)

    monkeypatch.setattr("wfctl.worker.execution.datetime", SteppedClock, raising=False)
    elapsed = (execution.now() - db_now).total_seconds()
    assert 5.0 <= elapsed < 6.0


# -- 11. the signal handler never takes the log's lock ---------------------------------------------


def test_signal_while_the_log_lock_is_held_does_not_deadlock():
    registry = Registry()
    workflow("t", registry=registry)(lambda ctx, data: None)
    log = WorkerLog("plain")
    worker = Worker("dbname=unused", registry, WorkerOptions(), log)

    def interrupted_while_logging() -> None:
        with log._lock:  # the main thread is inside a log call when the signal arrives
            worker.stopper._on_signal(signal.SIGTERM, None)

    thread = threading.Thread(target=interrupted_while_logging, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive(), "the signal handler deadlocked on the log's lock"
    assert worker.stopping.is_set()


# -- 12. floats keep their type through jsonb -------------------------------------------------------


@pytest.mark.parametrize("value", [1e16, -2.5e20, 1.7976931348623157e308, {"n": [1e16, 3, 1.5]}, 1e-7, 0.1])
def test_a_float_reads_back_as_the_same_float(conn, value):
    stored = conn.execute("SELECT %s::jsonb", (jsonvalue.dumps(value),)).fetchone()[0]
    assert stored == value
    assert json.dumps(stored) == json.dumps(value), "a float came back as an int"


# -- 13. a worker whose database hangs still stops ---------------------------------------------------


def wait_blocked(dsn: str) -> None:
    wait_for(
        lambda: rows(
            dsn,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'wfctl worker'"
            " AND wait_event_type = 'Lock' AND datname = current_database()",
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


# -- found by the stateful test ------------------------------------------------------------------


def test_a_run_that_moved_after_its_workers_last_beat_is_not_stale(conn):
    """Shrunk from tests/test_stateful.py (invariant 5): a worker continued for a moment, wrote
    a checkpoint (updated_at moves) and was paused again before its next heartbeat. recover
    called the run stale while the reference "updated_at older than X" query did not."""
    from datetime import timedelta as td

    from wfctl import recovery

    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at)"
        " VALUES ('w1', 'h', 1, 1, now() - interval '10 minutes')"
    )
    moved = running_row(conn, epoch=1)
    idle = running_row(conn, epoch=1)
    conn.execute("UPDATE workflows SET lease_owner = 'w1' WHERE id IN (%s, %s)", (moved, idle))
    conn.execute("UPDATE workflows SET updated_at = now() - interval '10 minutes' WHERE id = %s", (idle,))
    found = {r.id for r in recovery.recover(conn, td(minutes=5), dry_run=True)}
    reference = {
        r[0]
        for r in conn.execute(
            "SELECT id FROM workflows WHERE status = 'running' AND updated_at < now() - interval '5 minutes'"
        ).fetchall()
    }
    assert found == reference == {idle}
