"""cancel, retry, prune: operator actions and their one-line errors.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_manage.py.
"""

from __future__ import annotations

import json
import signal

import psycopg
from helpers import wait_for
from support.manage import one

import wfctl


def test_cancel_running_stops_it_at_the_next_step(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    proc = workers.start()
    wait_for(lambda: "two" in [s for w, s in workers.effects() if w == wid], what="step 2 to start")
    result = workers.wfctl("cancel", wid, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["previous_status"] == "running"
    workers.gate.unlink()
    wait_for(lambda: "lease lost" in proc.log_path.read_text(), what="the worker to drop it")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert one(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == ("cancelled",)
    assert [s for w, s in workers.effects() if w == wid] == ["one", "two"]
    assert one(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", wid) == (1,)


def test_retry_failed_keeps_checkpoints_and_resets_attempts(workers, dsn):
    wid = str(wfctl.submit(dsn, "flaky", {"fail_times": 99}, max_retries=0))
    workers.run()
    assert one(dsn, "SELECT status, attempt FROM workflows WHERE id = %s", wid) == ("failed", 1)
    running = workers.wfctl("retry", wid)
    assert running.exit_code == 0 and "resuming after step 1" in running.stderr
    assert one(dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid) == (
        "pending",
        1,
        None,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:  # it will fail again: 99 failures wanted
        conn.execute("UPDATE workflows SET input_data = '{\"fail_times\": 0}' WHERE id = %s", (wid,))
    workers.run()
    assert one(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == ("completed",)
    # 'prepare' kept its checkpoint across the retry: it ran once
    assert [s for w, s in workers.effects() if w == wid].count("prepare") == 1
