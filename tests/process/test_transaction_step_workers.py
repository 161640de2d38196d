"""``ctx.transaction``: the application's writes commit with the step's checkpoint, fenced by the
lease, exactly once however often the worker is killed, frozen, cancelled or cut off around the
step (docs/explanation/transactions.md)

The tests of it that start worker processes; those that need only the database are in
tests/db/test_transaction_step.py.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

import psycopg
import pytest
from helpers import freeze, rows, wait_for
from support.transaction_step import ledger, steps

import wfctl

APP = "txflows"


KILLS = int(os.environ.get("WFCTL_TX_KILLS", "15"))


IN_FN = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE query LIKE 'INSERT INTO app_ledger%%' AND xact_start IS NOT NULL"
    " AND datname = current_database()"
)


def inside_fn(dsn: str) -> int:
    """Transactions that wrote a ledger entry and have not ended (fn is running or held)."""
    return int(rows(dsn, IN_FN)[0][0])


def test_writes_and_checkpoints_commit_together(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger", {"entries": 3, "pause": 0})
    assert wfctl.result(dsn, wid, timeout=30) == 0 + 1 + 2
    assert ledger(dsn) == [(wid, 0), (wid, 1), (wid, 2)]
    assert [(n, name, status) for n, name, status, _ in steps(dsn, wid)] == [
        (1, "debit-0", "completed"),
        (2, "between-0", "completed"),
        (3, "debit-1", "completed"),
        (4, "between-1", "completed"),
        (5, "debit-2", "completed"),
        (6, "between-2", "completed"),
    ]


def test_a_failing_transactional_step_stores_nothing(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_fails", None)
    with pytest.raises(wfctl.WorkflowFailed, match="refused after writing"):
        wfctl.result(dsn, wid, timeout=30)
    assert ledger(dsn) == []
    assert rows(dsn, "SELECT status FROM workflow_steps WHERE workflow_id = %s", wid) == [("failed",)]


def test_a_retried_step_keeps_the_writes_of_the_attempt_that_committed(
    dsn: str, workers, ledger_table
) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_flaky", None)
    assert wfctl.result(dsn, wid, timeout=30) == 2
    assert ledger(dsn) == [(wid, 2)]  # attempt 1's write rolled back with its error
    assert [(n, name, status) for n, name, status, _ in steps(dsn, wid)] == [(1, "write", "completed")]
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(2,)]


def test_an_unstorable_result_fails_the_step_and_stores_nothing(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_unstorable", None)
    with pytest.raises(
        wfctl.WorkflowFailed, match=r"transactional step 'write' returned a value of type set"
    ):
        wfctl.result(dsn, wid, timeout=30)
    assert ledger(dsn) == []


def test_a_step_inside_fn_is_refused_and_not_retried(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_nested", None)
    with pytest.raises(
        wfctl.WorkflowFailed,
        match=r"step 'inner' was started inside the function of transactional step 'outer'",
    ):
        wfctl.result(dsn, wid, timeout=30)
    assert ledger(dsn) == []
    assert [(n, name, status) for n, name, status, _ in steps(dsn, wid)] == [(1, "outer", "failed")]
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(1,)]  # max_retries=3 unused


def test_fn_that_commits_by_itself_fails_the_run_at_once(dsn: str, workers, ledger_table) -> None:
    """A COMMIT sent as SQL inside fn commits its writes without the checkpoint: wfctl cannot take
    them back, so it refuses to go on (a retry would write them again)."""
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_commits", None)
    with pytest.raises(wfctl.WorkflowFailed, match=r"fn ended the transaction itself"):
        wfctl.result(dsn, wid, timeout=30)
    assert ledger(dsn) == [(wid, 0)]  # once: the run was not retried
    assert rows(dsn, "SELECT attempt, current_step FROM workflows WHERE id = %s", wid) == [(1, 0)]


def test_cancel_while_fn_runs_does_not_wait_and_rolls_the_writes_back(
    dsn: str, workers, ledger_table
) -> None:
    workers.gate.touch()
    proc = workers.start("--heartbeat", "5s", app=APP)  # dead_after 15 s: fn may idle that long
    wid = wfctl.submit(dsn, "held", None)
    wait_for(lambda: inside_fn(dsn), what="fn to write and wait")
    result = workers.wfctl("cancel", str(wid), timeout=20)
    assert result.exit_code == 0, result.output
    assert inside_fn(dsn) == 1  # the cancel did not wait for fn's transaction: it locks nothing of the run
    workers.gate.unlink()
    wait_for(lambda: "lease lost" in proc.log_path.read_text(), what="the fence to refuse the commit")
    assert inside_fn(dsn) == 0
    assert ledger(dsn) == []
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("cancelled",)]
    assert steps(dsn, wid) == []


def test_a_step_that_ends_past_the_deadline_does_not_commit(dsn: str, workers, ledger_table) -> None:
    workers.gate.touch()
    workers.start("--heartbeat", "5s", app=APP)
    wait_for(lambda: rows(dsn, "SELECT count(*) FROM workers")[0][0], what="the worker to start")
    wid = wfctl.submit(dsn, "held", None, timeout="1s")
    wait_for(lambda: inside_fn(dsn), what="fn to write and wait")
    wait_for(
        lambda: rows(dsn, "SELECT deadline_at < now() FROM workflows WHERE id = %s", wid)[0][0],
        what="the deadline to pass",
    )
    workers.gate.unlink()
    with pytest.raises(wfctl.WorkflowFailed, match="timed out after 1s"):
        wfctl.result(dsn, wid, timeout=30)
    assert ledger(dsn) == []
    assert steps(dsn, wid) == []


@pytest.mark.slow
def test_a_worker_frozen_inside_fn_blocks_nothing_and_commits_nothing(
    dsn: str, conn, workers, ledger_table
) -> None:
    """Frozen (SIGSTOP) inside fn, holding a row lock of the application's (a unique key): its
    transaction ends once it has been idle for its dead_after, so the run is recovered and the
    new owner's fn does not wait on that lock forever; resumed, the zombie commits nothing."""
    conn.execute("CREATE UNIQUE INDEX ON app_ledger (workflow_id, entry)")
    workers.gate.touch()
    frozen = workers.start(app=APP)  # heartbeat 200ms: dead after 1 s
    wid = wfctl.submit(dsn, "held", None)
    wait_for(lambda: inside_fn(dsn), what="fn to write and wait")
    frozen.send_signal(signal.SIGSTOP)
    try:
        other = workers.start(app=APP)
        # swept (epoch 2) and claimed again (epoch 3): fn holds no lock of the run's row
        wait_for(
            lambda: rows(dsn, "SELECT lease_epoch FROM workflows WHERE id = %s", wid)[0][0] >= 3,
            timeout=20,
            what="the run to be recovered and claimed by the other worker",
        )
        workers.gate.unlink()
        assert wfctl.result(dsn, wid, timeout=20) == {"attempt": 2, "pid": other.pid}
    finally:
        frozen.send_signal(signal.SIGCONT)
    wait_for(lambda: "lease lost" in frozen.log_path.read_text(), what="the zombie to find its lease gone")
    assert ledger(dsn) == [(wid, 0)]
    assert steps(dsn, wid) == [(1, "held", "completed", 3)]


@pytest.mark.slow
def test_a_worker_frozen_between_fence_and_commit_lets_go_of_the_row(dsn: str, workers, ledger_table) -> None:
    """The one moment a transactional step holds the run's row: after its fence, before its
    commit. A worker frozen there loses its transaction (and the row) after its dead_after, so
    the sweep can requeue the run; resumed, it commits nothing."""
    workers.gate.touch()
    # dead (and its transaction ended by the server) after 8 s: the window in which the test
    # sees the frozen transaction hold the row, wide enough for a loaded machine
    frozen = workers.start("--heartbeat", "1s", "--missed-beats", "8", app=APP)
    wid = wfctl.submit(dsn, "held", None)
    wait_for(lambda: inside_fn(dsn), what="fn to write and wait")
    # hold the checkpoint's INSERT back with an uncommitted row of the same key (step 1), so
    # that the worker is caught after its fence
    with psycopg.connect(dsn) as blocker:
        blocker.execute(
            "INSERT INTO workflow_steps (workflow_id, step_number, step_name, status)"
            " VALUES (%s, 1, 'x', 'failed')",
            (wid,),
        )
        workers.gate.unlink()
        wait_for(
            lambda: rows(
                dsn,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%%wfctl_step_done%%' AND datname = current_database()",
            )[0][0],
            what="the checkpoint to wait behind the fence",
        )
        freeze(frozen)  # stopped before the checkpoint's reply can reach it
        blocker.rollback()
    try:
        # the checkpoint is written; the frozen worker's COMMIT never comes, and the row is locked
        try:
            wait_for(
                lambda: rows(
                    dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
                    " AND query LIKE '%%wfctl_step_done%%' AND datname = current_database()",
                )[0][0],
                what="the frozen transaction to hold the row",
            )
        except AssertionError as exc:  # once in CI (embedded PostgreSQL 18): say what the sessions did
            sessions = rows(
                dsn,
                "SELECT state, wait_event_type, wait_event, now() - xact_start, now() - state_change,"
                " left(query, 80) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()",
            )
            raise AssertionError(f"{exc}; the database's sessions: {sessions}") from None
        assert rows(dsn, "SELECT id FROM workflows WHERE id = %s FOR UPDATE SKIP LOCKED", wid) == []
        other = workers.start(app=APP)
        # polled with plain reads: wfctl.result would also wait for the row, and hang if held
        wait_for(
            lambda: rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("completed",)],
            what="the other worker to complete the run",
        )
        assert wfctl.result(dsn, wid, timeout=0) == {"attempt": 2, "pid": other.pid}
    finally:
        frozen.send_signal(signal.SIGCONT)
    wait_for(lambda: "lease lost" in frozen.log_path.read_text(), what="the zombie to find its lease gone")
    assert ledger(dsn) == [(wid, 0)]
    assert steps(dsn, wid) == [(1, "held", "completed", 3)]


def busy_workers(dsn: str, procs: list[Any]) -> list[int]:
    """The indexes in ``procs`` of the workers that hold a running workflow now."""
    owners = {
        pid
        for (pid,) in rows(
            dsn,
            "SELECT DISTINCT k.pid FROM workflows w JOIN workers k ON k.id = w.lease_owner"
            " WHERE w.status = 'running'",
        )
    }
    return [i for i, proc in enumerate(procs) if proc.pid in owners]


@pytest.mark.slow
def test_kills_around_the_step_never_write_twice_or_lose_a_write(
    dsn: str, conn, workers, ledger_table
) -> None:
    """WFCTL_TX_KILLS (15 in the suite) SIGKILLs, each of a worker that holds runs at that moment,
    at a random point of their steps; then the application's rows are exactly the transactional
    steps' checkpoints. Every INSERT takes a number from a sequence, which no rollback gives
    back: the numbers taken minus the rows kept are the writes that rolled back."""
    conn.execute("ALTER TABLE app_ledger ADD COLUMN try_no bigserial")
    entries, data = 8, {"entries": 8, "pause": 0.03}
    ids = [wfctl.submit(dsn, "ledger", data) for _ in range(12)]
    start = ["--concurrency", "2"]  # a kill cuts at most two runs short
    procs = [workers.start(*start, app=APP) for _ in range(4)]
    kills = progress = 0
    give_up = time.monotonic() + 60
    while kills < KILLS:
        assert time.monotonic() < give_up, f"after {kills} kills, no progress for 60 s"
        busy = busy_workers(dsn, procs)
        done = rows(dsn, "SELECT count(*) FROM app_ledger")[0][0]
        if not busy or done == progress:  # each kill after some progress: the runs do finish
            time.sleep(0.01)
            continue
        progress = done
        time.sleep(random.uniform(0, 0.05))
        victim = random.choice(busy)
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(timeout=10)
        procs[victim] = workers.start(*start, app=APP)
        kills += 1
        give_up = time.monotonic() + 60
        if rows(dsn, "SELECT count(*) FROM workflows WHERE status IN ('pending', 'running')")[0][0] < 10:
            ids += [wfctl.submit(dsn, "ledger", data) for _ in range(6)]  # work for the next kills
    for wid in ids:
        assert wfctl.result(dsn, wid, timeout=120) == sum(range(entries))
    written = ledger(dsn)
    checkpoints = rows(
        dsn,
        "SELECT workflow_id, (output_data #>> '{}')::int FROM workflow_steps"
        " WHERE step_name LIKE 'debit-%%' AND status = 'completed' ORDER BY 1, 2",
    )
    duplicates = len(written) - len(set(written))
    lost = len(set(checkpoints) - set(written))
    extra = len(set(written) - set(checkpoints))
    tried = rows(dsn, "SELECT last_value FROM app_ledger_try_no_seq")[0][0]
    abandoned = rows(dsn, "SELECT sum(attempt - 1) FROM workflows")[0][0]
    print(
        f"\ntransactional steps: {kills} kills, {len(ids)} runs, {abandoned} attempts abandoned,"
        f" {len(written)} writes kept, {tried - len(written)} rolled back,"
        f" duplicates={duplicates}, lost={lost}, extra={extra}"
    )
    # the application's rows are exactly the checkpoints of the transactional steps
    assert written == checkpoints
    assert (duplicates, lost, extra) == (0, 0, 0)
    assert len(written) == len(ids) * entries
    assert abandoned >= kills  # each kill cut at least one run short
