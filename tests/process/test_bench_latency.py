"""The start-latency benchmark (bench/latency.py) still runs: a short run (N=30, one round) on the
test server, checking the JSON's shape and that its figures are consistent (not the timings: those
are the benchmark's business, not a test's), and that it drops the database it made."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest
from helpers import run_benchmark

KEYS = {
    "n",
    "rounds",
    "warmup",
    "workflow_type",
    "steps",
    "poll",
    "poll_s",
    "half_poll_ms",
    "slow_ms",
    "run_timeout_s",
    "cpus",
    "loads",
    "server",
    "sides",
    "summary",
    "phases",
    "problems",
}
FIGURES = {"n", "p50_ms", "p90_ms", "p99_ms", "max_ms", "over_50ms", "over_half_poll"}


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the benchmark; past the timeout, SIGTERM it (so that it stops its worker and drops its
    database on the way out) and fail. The timeout is a guard against a hang, not a speed limit:
    a run the worker's LISTEN misses waits for its 30 s poll, and the benchmark itself fails a
    run that takes longer than 60 s."""
    return run_benchmark("bench.latency", args, timeout)


def check_figures(figures: dict, n: int) -> None:
    assert set(figures) == FIGURES, figures
    assert figures["n"] == n
    assert 0 < figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"] <= figures["max_ms"], figures
    assert 0 <= figures["over_half_poll"] <= figures["over_50ms"] <= n, figures


def test_a_short_run_prints_consistent_figures_as_json(pg_server):
    done = bench("-n", "30", "--poll", "30s", "--json", "--server-dsn", pg_server.admin_dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)  # one JSON object, nothing else on stdout
    assert set(results) == KEYS, sorted(results)
    assert results["n"] == 30 and results["rounds"] == 1 and results["warmup"] == 20
    assert results["poll"] == "30s" and results["poll_s"] == 30 and results["half_poll_ms"] == 15000
    assert results["run_timeout_s"] == 60
    assert results["problems"] == []
    assert list(results["sides"]) == ["wfctl"]
    assert "--poll 30s" in results["sides"]["wfctl"]
    assert list(results["summary"]) == ["wfctl"]
    check_figures(results["summary"]["wfctl"], 30)
    (only,) = results["phases"]
    assert only["side"] == "wfctl" and only["round"] == 1 and only["worker_exit"] == 0
    check_figures(only["figures"], 30)
    assert len(only["slow_runs"]) == only["figures"]["over_50ms"]
    assert only["database"].startswith("wfctl_bench_latency_")

    # its database is gone
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (only["database"],)).fetchall()
    assert left == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0"], "-n and --rounds must be at least 1"),
        (["--rounds", "0"], "-n and --rounds must be at least 1"),
        (["--poll", "soon"], "invalid --poll 'soon'"),
        (["--poll", "0s"], "invalid --poll '0s'"),
        (["--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_bad_options_are_refused(args, message):
    done = bench(*args)
    assert done.returncode == 2
    assert message in done.stderr
