"""The worker-CPU benchmark (bench/step_cost.py) still runs: a short run on the test server,
checking the JSON's shape and that its figures hang together (not their size: that is the
benchmark's business), and that it drops its databases."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest
from helpers import run_benchmark

from bench import step_cost


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_benchmark("bench.step_cost", args, timeout)


def test_a_short_run_prints_consistent_figures_as_json(pg_server):
    done = bench(
        "-n", "200", "--steps", "2,1", "--rounds", "1", "--json", "--server-dsn", pg_server.admin_dsn
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)
    assert results["steps"] == [1, 2] and results["n"] == 200 and results["problems"] == []
    drains = results["drains"]
    assert [(d["side"], d["steps"]) for d in drains] == [("wfctl", 1), ("wfctl", 2)]
    for d in drains:
        assert d["worker_exit"] == 0 and d["cpu_ms"] > 0 and 0 <= d["system_share"] <= 1 and d["switches"] > 0
    (row,) = results["rows"]
    assert row["cpu_us"] == {str(d["steps"]): round(d["cpu_ms"] * 1000, 1) for d in drains}
    assert row["step_us"] == pytest.approx((drains[1]["cpu_ms"] - drains[0]["cpu_ms"]) * 1000, abs=0.1)
    assert row["ratio"] is None  # this tree's own row
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'wfctl_bench_step_cost_%'")
        assert left.fetchone() == (0,)


def test_the_per_step_cost_is_the_difference_over_the_steps_between():
    drains = [step_cost.Drain("wfctl", 1, 1, 10, cpu_ms=0.2), step_cost.Drain("wfctl", 1, 3, 10, cpu_ms=0.3)]
    assert step_cost.per_step(drains, 1, 3) == pytest.approx(50.0)
    assert step_cost.per_step(drains[:1], 1, 3) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [(["-n", "0"], "-n and --rounds must be at least 1"), (["--steps", "0"], "each at least 1")],
)
def test_bad_options_are_refused(args, message):
    done = bench(*args)
    assert done.returncode == 2 and message in done.stderr
