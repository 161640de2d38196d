"""A process frozen (SIGSTOP, a paused VM, a debugger) inside a transaction that locks rows other
workers need must not hold them for as long as it is frozen: ``hold_locks_at_most`` makes the
server end such a transaction after a bound, and the worker uses its --dead-after for it when it
declares its limits and schedules at start and when it fires schedules (the firing is tested in
tests/process/test_stateful_regressions.py)."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from helpers import rows, wait_for, wait_for_worker_session

from wfctl.connection import connection_lost, hold_locks_at_most


def _lockable(dsn: str, sql: str) -> bool:
    """Whether the row ``sql`` (a SELECT ... FOR UPDATE NOWAIT) selects can be locked now."""
    with psycopg.connect(dsn) as conn:
        try:
            conn.execute(sql)
        except psycopg.errors.LockNotAvailable:
            return False
        return True


def test_hold_locks_at_most_ends_a_transaction_left_idle(dsn: str) -> None:
    lock = "SELECT 1 FROM workflow_limits WHERE workflow_type = 'capped' FOR UPDATE NOWAIT"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO workflow_limits (workflow_type) VALUES ('capped')")
    holder = psycopg.connect(dsn)
    try:
        hold_locks_at_most(holder, 0.5)
        holder.execute("SELECT 1 FROM workflow_limits WHERE workflow_type = 'capped' FOR UPDATE")
        assert not _lockable(dsn, lock)  # held while the holder is idle in its transaction
        started = time.monotonic()
        wait_for(lambda: _lockable(dsn, lock), timeout=10, what="the idle transaction to be ended")
        assert time.monotonic() - started < 9
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as ended:
            holder.execute("SELECT 1")
        # the server ended the session, not only the transaction: a worker reconnects
        assert connection_lost(holder, ended.value)
    finally:
        holder.close()
    # only the transaction that asked for it: a new one on another connection has no bound
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1")
        assert rows(dsn, "SELECT 1")  # the server is fine
        (value,) = other.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert value == "0"


def test_a_worker_frozen_while_declaring_its_limits_releases_them(dsn: str, workers) -> None:
    """The limit rows a worker locks at start (to write its code's limits) are the rows every
    claim of those types locks: a worker frozen there stopped every claim of them for as long as
    it was frozen. Made deterministic: the test holds the row, so the worker's declaration waits
    for it inside its transaction; the worker is frozen there and the test lets go. Expected:
    the row is free again after the worker's dead-after (1 s here: 5 beats of 200 ms), and once
    thawed the worker declares again on a new connection and runs its work."""
    lock = "SELECT 1 FROM workflow_limits WHERE workflow_type = 'capped' FOR UPDATE NOWAIT"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO workflow_limits (workflow_type) VALUES ('capped')")
    blocker = psycopg.connect(dsn)
    try:
        blocker.execute("SELECT 1 FROM workflow_limits WHERE workflow_type = 'capped' FOR UPDATE")
        proc = workers.start("--missed-beats", "5", app="limitflows")  # dead after 1 s
        wait_for_worker_session(
            dsn,
            "wait_event_type = 'Lock'",
            timeout=20,
            what="the worker's declaration to wait for the limit's row",
        )
        proc.send_signal(signal.SIGSTOP)
        blocker.rollback()
    finally:
        blocker.close()
    try:
        wait_for_worker_session(
            dsn,
            "state = 'idle in transaction'",
            timeout=10,
            what="the frozen worker idle in its transaction, holding the row",
        )
        assert not _lockable(dsn, lock)
        wait_for(lambda: _lockable(dsn, lock), timeout=10, what="the frozen worker's transaction to end")
    finally:
        proc.send_signal(signal.SIGCONT)
    submitted = workers.wfctl("submit", "capped", "{}")
    assert submitted.exit_code == 0, submitted.output
    run_id = submitted.stdout.strip()
    wait_for(
        lambda: rows(dsn, "SELECT status FROM workflows WHERE id = %s", run_id)[0][0] == "completed",
        timeout=30,
        what="the thawed worker to run the workflow",
    )
    (code_limit,) = rows(dsn, "SELECT code_concurrency FROM workflow_limits WHERE workflow_type = 'capped'")[
        0
    ]
    assert code_limit == 3
