"""Regression tests for the holes a review found in the worker, fencing and replay.

Each test names the item it covers. The flush tests call the group-commit statement directly
with hand-made batches; the ones with real workers are in tests/process/test_correctness_workers.py.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from wfctl import jsonvalue
from wfctl.connection import connection_lost
from wfctl.registry import Registry, workflow
from wfctl.worker.checkpoints import Request, flush
from wfctl.worker.claims import Claimed
from wfctl.worker.execution import Execution
from wfctl.worker.log import WorkerLog
from wfctl.worker.runner import Worker, WorkerOptions


def test_retry_policy_beyond_a_century_is_refused():
    registry = Registry()
    with pytest.raises(ValueError, match="retry_cap"):
        workflow("w", retry_cap=timedelta(days=10**6), registry=registry)
    with pytest.raises(ValueError, match="retry_base"):
        workflow("w", retry_base=1e12, registry=registry)


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


@pytest.mark.parametrize("value", [1e16, -2.5e20, 1.7976931348623157e308, {"n": [1e16, 3, 1.5]}, 1e-7, 0.1])
def test_a_float_reads_back_as_the_same_float(conn, value):
    stored = conn.execute("SELECT %s::jsonb", (jsonvalue.dumps(value),)).fetchone()[0]
    assert stored == value
    assert json.dumps(stored) == json.dumps(value), "a float came back as an int"


def test_a_run_that_moved_after_its_workers_last_beat_is_not_stale(conn):
    """Shrunk from tests/process/test_stateful.py (invariant 5): a worker continued for a moment, wrote
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
