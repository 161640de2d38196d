"""`wfctl demo` tells its story on a real database: a retry, a SIGKILL, a recovery, stats."""

from __future__ import annotations

import re

import psycopg


def test_demo_runs_everything_to_completion(run_wfctl, empty_dsn):
    result = run_wfctl("demo", "--orders", "6", "--dsn", empty_dsn, timeout=120)
    assert result.exit_code == 0, result.output
    crashed = re.search(r"killed worker 1 with SIGKILL while order (\S+)", result.stderr).group(1)
    flaky = re.search(r"submitted order (\S+), whose mail server", result.stderr).group(1)
    assert "requeued" in result.stderr and "Success rate" in result.stdout
    assert "Slowest steps" in result.stdout
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT status, count(*) FROM workflows GROUP BY 1").fetchall() == [
            ("completed", 8)
        ]
        # the crashed order resumed after its checkpoints: 'charge' ran in the first attempt only
        steps = conn.execute(
            "SELECT step_name, attempt FROM workflow_steps WHERE workflow_id = %s ORDER BY step_number",
            (crashed,),
        ).fetchall()
        assert steps[0] == ("charge", 1) and steps[-1][0] == "email" and steps[-1][1] >= 2
        assert conn.execute("SELECT attempt FROM workflows WHERE id = %s", (flaky,)).fetchone() == (2,)
