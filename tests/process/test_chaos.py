"""The chaos run (tests/chaos.py) at a size for CI: 300 workflows, 3 workers, a SIGKILL about
every second, `wfctl recover` from "cron" about every second, one restart of PostgreSQL.

tests/chaos.py starts a throwaway embedded PostgreSQL of its own (it must be able to stop and
start the server under the workers), whatever WFCTL_TEST_DSN says; every check it makes is
asserted here, and the figures are printed (pytest -s, or -rA) so that the run is visible.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import HERE, isolated_env

CHAOS = HERE / "chaos.py"
N = 300


@pytest.mark.slow
def test_chaos_small():
    env = isolated_env()
    proc = subprocess.run(
        [
            sys.executable,
            str(CHAOS),
            "--workflows",
            str(N),
            "--workers",
            "3",
            "--concurrency",
            "4",
            "--kill-every",
            "1s",
            "--recover-every",
            "1s",
            "--step-ms",
            "50-150",
            "--heartbeat",
            "200ms",
            "--stale",
            "1s",
            "--restart-db",
            "--fast",
            "--timeout",
            "150s",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.stdout, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    f = data["figures"]
    print(json.dumps(f, indent=1))
    failed = [f"{c['name']}: {c['detail']}" for c in data["checks"] if not c["ok"]]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert proc.returncode == 0 and data["ok"]
    assert f["workflows"] == f["completed"] == N
    assert f["checkpoints_stored"] == f["checkpoints_distinct"] == f["steps_expected"] == 3 * N
    assert f["running_at_end"] == 0
    assert f["kills"] >= 3, "the run was too short to kill anything"
    assert f["worker_starts"] == 3 + f["kills"]
    assert f["db_restarts"] == 1 and len(f["reconnected_after_seconds"][0]) >= 1
    assert f["recovers_run"] >= 3 and f["requeued"] == f["requeued_in_db"] >= 1
    assert f["real_executions"] - 3 * N == f["duplicate_executions"]
    assert 0 <= f["duplicate_executions"] <= f["bound"]
    assert f["bound"] <= f["concurrency"] * f["kills"] + f["requeued_from_live"]
