"""``ctx.transaction``: the application's writes commit with the step's checkpoint, fenced by
the lease, exactly once however often the worker is killed around the step."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from helpers import rows, wait_for

import wfctl

APP = "txflows"
KILLS = int(os.environ.get("WFCTL_TX_KILLS", "40"))


@pytest.fixture
def ledger_table(conn) -> None:
    conn.execute("CREATE TABLE app_ledger (workflow_id uuid NOT NULL, entry int NOT NULL)")


def test_writes_and_checkpoints_commit_together(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger", {"entries": 3, "pause": 0})
    assert wfctl.result(dsn, wid, timeout=30) == 0 + 1 + 2
    assert rows(dsn, "SELECT entry FROM app_ledger ORDER BY entry") == [(0,), (1,), (2,)]


def test_a_failing_transactional_step_stores_nothing(dsn: str, workers, ledger_table) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger_fails", None)
    with pytest.raises(wfctl.WorkflowFailed, match="refused after writing"):
        wfctl.result(dsn, wid, timeout=30)
    assert rows(dsn, "SELECT count(*) FROM app_ledger") == [(0,)]
    assert rows(dsn, "SELECT status FROM workflow_steps WHERE workflow_id = %s", wid) == [("failed",)]


def test_a_zombie_cannot_commit_a_transactional_step(dsn: str, workers, ledger_table) -> None:
    """Frozen inside the transaction's fn, recovered elsewhere, then resumed: its writes roll
    back with its refused checkpoint, and the new owner's commit is the only one."""
    frozen = workers.start(app=APP)
    wid = wfctl.submit(dsn, "ledger", {"entries": 1, "pause": 3})
    wait_for(
        lambda: rows(
            dsn, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO app_ledger%%'"
        )[0][0],
        what="inside the transaction",
    )
    frozen.send_signal(signal.SIGSTOP)
    try:
        workers.start(app=APP)  # sweeps the frozen worker's run once it looks dead
        assert wfctl.result(dsn, wid, timeout=60) == 0
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert rows(dsn, "SELECT count(*) FROM app_ledger") == [(1,)]


def test_kills_around_the_step_never_write_twice_or_lose_a_write(dsn: str, workers, ledger_table) -> None:
    ids = [wfctl.submit(dsn, "ledger", {"entries": 8, "pause": 0.03}) for _ in range(12)]
    procs = [workers.start(app=APP), workers.start(app=APP)]
    kills = 0
    while kills < KILLS:
        time.sleep(random.uniform(0.05, 0.3))
        victim = random.randrange(len(procs))
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(timeout=10)
        procs[victim] = workers.start(app=APP)
        kills += 1
        if rows(dsn, "SELECT count(*) FROM workflows WHERE status <> 'completed'")[0][0] == 0:
            break
    for wid in ids:
        assert wfctl.result(dsn, wid, timeout=120) == sum(range(8))
    # the application's rows are exactly the checkpoints of the transactional steps
    ledger = rows(dsn, "SELECT workflow_id, entry FROM app_ledger ORDER BY 1, 2")
    steps = rows(
        dsn,
        "SELECT workflow_id, (output_data #>> '{}')::int FROM workflow_steps"
        " WHERE step_name LIKE 'debit-%%' ORDER BY 1, 2",
    )
    assert ledger == steps
    assert len(ledger) == len(set(ledger)) == 12 * 8
    print(f"\ntransactional steps: {kills} kills, {len(ledger)} writes, none twice, none lost")
