"""Liveness that agrees with reality: every worker is judged by the heartbeat it recorded.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_liveness.py.
"""

from __future__ import annotations

import json
import signal

import pytest
from helpers import rows, wait_for
from report_rows import runner
from support.liveness import metric_workers, states

import wfctl

DEAD_AFTER = 1.0  # 3 missed beats of 200 ms, raised to the 1 s floor


@pytest.mark.slow
def test_a_killed_worker_turns_dead_once_it_has_missed_its_beats(workers, dsn):
    first, second = workers.start(), workers.start()
    ids = {}
    for proc in (first, second):
        ids[proc] = wait_for(
            lambda proc=proc: rows(dsn, "SELECT id FROM workers WHERE pid = %s", proc.pid),
            what="the worker to register",
        )[0][0]
    wait_for(lambda: metric_workers(dsn).get("live") == 2, what="two live workers")
    assert states(dsn) == {ids[first]: "live", ids[second]: "live"}
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    # dead once its heartbeat is older than its own rule (1 s here), not 5 minutes later
    wait_for(lambda: states(dsn)[ids[first]] == "dead", timeout=10, what="the killed worker to turn dead")
    silent = rows(
        dsn, "SELECT extract(epoch FROM now() - heartbeat_at) FROM workers WHERE id = %s", ids[first]
    )
    assert float(silent[0][0]) > DEAD_AFTER
    assert metric_workers(dsn) == {"live": 1, "dead": 1, "stopped": 0}  # never more live than run
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0
    assert states(dsn)[ids[second]] == "stopped" and metric_workers(dsn)["live"] == 0


@pytest.mark.slow
def test_the_guard_reads_a_real_workers_heartbeat(workers, dsn):
    proc = workers.start("--heartbeat", "2s", "--missed-beats", "4")
    ident = wait_for(lambda: rows(dsn, "SELECT id FROM workers WHERE pid = %s", proc.pid))[0][0]
    refused = workers.wfctl("recover", "--stale", "7s")
    assert refused.exit_code == 2
    assert f"than the 8s of silence after which live worker {ident} (heartbeat every 2s)" in refused.stderr
    assert workers.wfctl("recover", "--stale", "8s").exit_code == 0
    assert workers.wfctl("recover", "--stale", "7s", "--force").exit_code == 0


@pytest.mark.slow
def test_the_stuck_report_names_the_step_a_killed_worker_was_in(workers, dsn):
    """The step's row is written with its result: the name comes from the worker's heartbeats."""
    workers.gate.touch()
    proc = workers.start()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    wait_for(
        lambda: (
            rows(dsn, "SELECT step_in_flight, step_in_flight_name FROM workflows WHERE id = %s", wid)
            == [(2, "two")]
        ),
        what="a heartbeat to report the run in step two",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    def stuck() -> list[dict]:
        return json.loads(runner()("stats", "--dsn", dsn, "--json").stdout)["stuck"]

    [row] = wait_for(stuck, timeout=10, what="the run to count as stuck")
    assert (row["id"], row["current_step"], row["step_in_flight"], row["step_in_flight_name"]) == (
        wid,
        1,
        2,
        "two",
    )
