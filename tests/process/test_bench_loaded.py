"""The latency-under-load benchmark (bench/loaded.py) still runs: a short run (a small capacity
phase, two seconds of load) on the test server, checking the JSON's shape and that its figures
are consistent (not the timings: those are the benchmark's business), and that it drops the
database it made."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import psycopg
import pytest
from helpers import run_benchmark

from bench import loaded

KEYS = {
    "workers",
    "load",
    "seconds",
    "warmup",
    "submitters",
    "batch",
    "cpus",
    "server",
    "sides",
    "phases",
    "problems",
}


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the benchmark; past the timeout, SIGTERM it (it stops its workers and drops its
    database on the way out) and fail: a guard against a hang, not a speed limit."""
    return run_benchmark("bench.loaded", args, timeout)


def test_a_short_run_prints_consistent_figures_as_json(pg_server):
    done = bench(
        "--workers", "2", "--calibrate", "400", "--seconds", "2", "--warmup", "0.5", "--load", "0.2",
        "--submitters", "2", "--json", "--server-dsn", pg_server.admin_dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)  # one JSON object, nothing else on stdout
    assert set(results) == KEYS, sorted(results)
    assert results["workers"] == 2 and results["load"] == 0.2 and results["submitters"] == 2
    assert results["problems"] == []
    (only,) = results["phases"]
    assert only["side"] == "wfctl" and only["round"] == 1 and only["worker_exits"] == [0, 0]
    assert only["capacity"] > 0 and only["rate"] == pytest.approx(0.2 * only["capacity"])
    assert only["submitted"] == max(2, round(only["rate"] * 2))
    assert only["ended_otherwise"] == 0 and only["claimed_again"] == 0
    # the runs of the warm-up are not counted; those after it are, every one completed
    assert 0 < only["runs"] < only["submitted"]
    assert 0 < only["start_p50_ms"] <= only["done_p50_ms"]
    assert only["done_p50_ms"] <= only["done_p90_ms"] <= only["done_p99_ms"] <= only["done_max_ms"]
    assert only["start_p50_ms"] <= only["start_p99_ms"] <= only["done_max_ms"]
    assert only["workers_cpu_ms"] > 0 and 0 < only["workers_busy"] <= 1
    assert only["database"].startswith("wfctl_bench_loaded_")
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (only["database"],)).fetchall()
    assert left == []


def test_a_rate_not_reached_a_failed_run_and_a_bad_exit_are_problems():
    """Figures that would misstate the load or hide a failure make the run exit 1."""
    good = loaded.Phase(
        "wfctl", 1, "db", 0.0, capacity=1000.0, rate=500.0, submit_rate=490.0, worker_exits=[0]
    )
    assert loaded.problems_of([good]) == []
    short = dataclasses.replace(good, submit_rate=470.0)
    (problem,) = loaded.problems_of([short])
    assert "submitted at 470/s of the 500/s asked" in problem
    failed = dataclasses.replace(good, ended_otherwise=3)
    assert loaded.problems_of([failed]) == ["round 1, wfctl: 3 runs failed or were cancelled"]
    killed = dataclasses.replace(good, worker_exits=[0, None])
    assert "the workers exited [0, None]" in loaded.problems_of([killed])[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "must be at least 1"),
        (["--load", "1.5"], "--load must be in (0, 1]"),
        (["--rate", "0"], "--rate positive"),
        (["--seconds", "2", "--warmup", "2"], "--warmup shorter than --seconds"),
    ],
)
def test_bad_options_are_refused(args, message):
    done = bench(*args)
    assert done.returncode == 2
    assert message in done.stderr
