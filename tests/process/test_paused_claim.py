"""A worker paused in the middle of its claim starts nothing on a lease it may have lost.

Worker A's claim of a limited type waits on the limit's row (the test holds it); A is stopped
(SIGSTOP) with the statement in flight; the test lets the claim commit, then does what another
worker's sweep and that worker would do once A counts as dead: requeue the run and finish it
elsewhere. When A resumes, the claim's reply arrives and A must not run a step of that run:
the reply is as old as the pause, older than the lease allows, so a heartbeat first says the
lease is gone.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import rows, wait_for, wait_for_worker_session

import wfctl
from wfctl import recovery
from wfctl.worker import poollog
from wfctl.worker.log import WorkerLog

pytestmark = pytest.mark.slow

ROUNDS = 20


def worker_id(log_path: Path) -> str:
    found = re.search(r"worker (\S+) ready", log_path.read_text())
    return found.group(1) if found else ""


def take_over_as_a_sweep_would(dsn: str, wid: uuid.UUID) -> None:
    """Requeue the run by the owner's own dead-after (the sweep's rule), then end it as another
    worker would have: completed, under a newer lease epoch, without running anything here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_for(
            lambda: any(r.id == wid for r in recovery.recover(conn, None)),
            what="the paused worker's run to count as abandoned",
        )
        conn.execute(
            "UPDATE workflows SET status = 'completed', output_data = '\"done elsewhere\"',"
            " lease_epoch = lease_epoch + 1, lease_owner = 'elsewhere', finished_at = now()"
            " WHERE id = %s AND status = 'pending'",
            (wid,),
        )


def claim_ended(dsn: str, wid: uuid.UUID, me: str) -> str | None:
    """What the paused worker's claim did once it could go on: 'claimed' the run, or 'missed'
    it (it had begun before the submit committed: a claim the last round's requeue woke, whose
    snapshot cannot see the run); None while it still runs. The sessions are read before the
    run's row: a claim that has ended committed before that read."""
    active = rows(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = 'wfctl worker' AND state = 'active'",
    )[0][0]
    row = rows(dsn, "SELECT status, lease_owner FROM workflows WHERE id = %s", wid)
    if row == [("running", me)]:
        return "claimed"
    return "missed" if not active and row == [("pending", None)] else None


def one_round(dsn: str, workers: Any, worker: subprocess.Popen[bytes], me: str) -> bool:
    """One pause in a claim. False when the claim that waited on the limit's row missed the
    run: the round is void, and the run completes normally once the worker resumes."""
    log_path: Path = worker.log_path  # type: ignore[attr-defined]
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM workflow_limits WHERE workflow_type = 'paced' FOR UPDATE")
        wid = wfctl.submit(dsn, "paced", {})
        wait_for_worker_session(dsn, "wait_event_type = 'Lock'", what="the claim to wait on the limit's row")
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            holder.commit()  # the claim commits while its worker is stopped
            ended = wait_for(lambda: claim_ended(dsn, wid, me), what="the paused worker's claim to commit")
            if ended == "claimed":
                take_over_as_a_sweep_would(dsn, wid)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
    if ended == "missed":
        assert wfctl.result(dsn, wid, timeout="30s") == "done"
        return False
    # the claim's reply reaches the worker now: it looks at the lease before anything runs
    wait_for(
        lambda: f"{wid} lease lost" in log_path.read_text() or f"started   {wid}" in log_path.read_text(),
        what="the resumed worker to deal with the run",
    )
    assert [e for e in workers.effects() if e[0] == str(wid)] == []
    assert f"started   {wid}" not in log_path.read_text()
    assert rows(dsn, "SELECT status, output_data FROM workflows WHERE id = %s", wid) == [
        ("completed", "done elsewhere")
    ]
    return True


def test_a_worker_paused_in_its_claim_never_starts_a_step_of_the_run_it_lost(dsn: str, workers: Any) -> None:
    worker = workers.start("--poll", "60s", app="pauseflows")
    log_path: Path = worker.log_path  # type: ignore[attr-defined]
    wait_for(lambda: worker_id(log_path), what="the worker to be ready")
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflow_limits WHERE workflow_type = 'paced'")[0][0],
        what="the type's limit to be declared",
    )
    # its first claim has ended (it marks the worker idle): the claim each round blocks on the
    # limit's row is the one the round's submit woke, which sees that run
    wait_for(
        lambda: rows(dsn, "SELECT idle FROM workers WHERE id = %s", worker_id(log_path)) == [(True,)],
        what="the worker's first claim to end",
    )
    done = 0
    for _ in range(2 * ROUNDS):  # a void round is run again
        done += one_round(dsn, workers, worker, worker_id(log_path))
        if done == ROUNDS:
            break
    assert done == ROUNDS
    # and the worker goes on working: a run it claims without a pause runs, each step once
    wid = wfctl.submit(dsn, "paced", {})
    assert wfctl.result(dsn, wid, timeout="30s") == "done"
    assert sorted(e[1] for e in workers.effects() if e[0] == str(wid)) == ["s1", "s2"]


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_the_connection_pool_logs_in_the_workers_format_without_alarm(fmt: str) -> None:
    stream = io.StringIO()
    handler = poollog.route(WorkerLog(fmt, stream=stream), "host=db password=hunter2")  # type: ignore[arg-type]
    try:
        logging.getLogger("psycopg.pool").warning(
            "error connecting in 'wfctl-transactions': connection failed: password=hunter2 refused"
        )
    finally:
        poollog.unroute(handler)
    line = stream.getvalue().strip()
    assert "\n" not in line and "hunter2" not in line
    if fmt == "json":
        record = json.loads(line)
        assert (record["level"], record["event"]) == ("info", "pool")
        assert record["message"].startswith("error connecting in 'wfctl-transactions'")
    else:
        assert re.search(r"Z INFO +pool +error connecting in 'wfctl-transactions'", line)
    assert logging.getLogger("psycopg.pool").propagate
