"""The steady-arrivals benchmark (bench/arrivals.py) still runs: a tiny run (N=30 at 100/s against
W = 1 and 2 workers) on the test server, checking the JSON's shape and that its counts are sane
(every run completed, transactions per workflow above zero; not the timings nor the CPU: those are
the benchmark's business, not a test's), that it drops the databases it made, and that bad
options and an unreachable server get one line, not a traceback."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest
from helpers import run_benchmark

KEYS = {
    "n",
    "rate",
    "workers",
    "concurrency",
    "poll",
    "rounds",
    "settle_s",
    "timeout_s",
    "workflow_type",
    "steps",
    "cpus",
    "loads",
    "head",
    "server",
    "sides",
    "summary",
    "measurements",
    "problems",
}
ROW = {
    "workers",
    "side",
    "rounds",
    "xacts_per_workflow",
    "xacts_ratio",
    "claim_scans_per_workflow",
    "server_cpu_ms",
    "server_cpu_ratio",
    "sessions_cpu_ms",
    "workers_cpu_ms",
    "wall_s",
    "submit_rate",
    "p50_ms",
    "p99_ms",
}


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the benchmark; past the timeout, SIGTERM it (so that it stops its workers and drops its
    databases on the way out) and fail. The timeout is a guard against a hang, not a speed limit."""
    return run_benchmark("bench.arrivals", args, timeout)


def check_measurement(m: dict, workers: int) -> None:
    assert m["workers"] == workers and m["side"] == "wfctl" and m["round"] == 1, m
    assert m["submitted"] == m["completed"] == 30, m
    assert m["claimed_again"] == 0, m
    assert m["worker_exits"] == [0] * workers, m
    assert m["worker_sessions"] >= workers, m
    assert m["monitor_transactions"] >= 1, m  # at least the poll that saw all 30 completed
    # at least the 30 submits, and a claim, a checkpoint, a completion of each run somewhere
    assert m["transactions"] >= 30, m
    assert m["xacts_per_workflow"] == round(m["transactions"] / 30, 3) and m["xacts_per_workflow"] > 0, m
    assert m["claim_scans_per_workflow"] > 0, m  # each run was claimed
    assert m["workers_cpu_ms"] >= 0, m
    assert m["submit_rate"] is None or m["submit_rate"] > 0, m
    assert m["wall_s"] > 0, m
    assert 0 <= m["p50_ms"] <= m["p99_ms"] <= m["max_ms"], m
    assert m["database"].startswith("wfctl_bench_arrivals_"), m


def test_a_tiny_run_prints_sane_counts_as_json(pg_server):
    done = bench(
        "-n", "30", "--rate", "100", "--workers", "2,1", "--settle", "1", "--json",
        "--server-dsn", pg_server.admin_dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)  # one JSON object, nothing else on stdout
    assert set(results) == KEYS, sorted(results)
    assert results["n"] == 30 and results["rate"] == 100 and results["workers"] == [1, 2]
    assert results["concurrency"] is None and results["poll"] is None  # the workers' defaults
    assert results["rounds"] == 1 and results["workflow_type"] == "noop3" and results["steps"] == 1
    assert results["problems"] == []
    assert list(results["sides"]) == ["wfctl"]
    assert "default options" in results["sides"]["wfctl"]

    one, two = results["measurements"]
    check_measurement(one, 1)
    check_measurement(two, 2)

    rows = results["summary"]
    assert [(r["workers"], r["side"], r["rounds"]) for r in rows] == [(1, "wfctl", 1), (2, "wfctl", 1)]
    for row, m in zip(rows, (one, two), strict=True):
        assert set(row) == ROW, row
        assert row["xacts_per_workflow"] == m["xacts_per_workflow"]
    assert rows[0]["xacts_ratio"] == 1.0
    assert rows[1]["xacts_ratio"] == round(two["xacts_per_workflow"] / one["xacts_per_workflow"], 3)
    if results["server"]["postmaster"] is not None:  # the server runs on this machine
        assert one["server_cpu_ms"] is not None and two["sessions_cpu_ms"] is not None

    # its databases are gone
    names = [m["database"] for m in results["measurements"]]
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    assert left == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0"], "-n and --rounds must be at least 1"),
        (["--rounds", "0"], "-n and --rounds must be at least 1"),
        (["--rate", "0"], "--rate, --timeout and --ready-timeout must be positive"),
        (["--workers", "0,4"], "invalid --workers '0,4'"),
        (["--workers", "four"], "invalid --workers 'four'"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--poll", "soon"], "invalid --poll 'soon'"),
    ],
)
def test_bad_options_are_refused(args, message):
    done = bench(*args)
    assert done.returncode == 2
    assert message in done.stderr


def test_an_unreachable_server_is_one_line(tmp_path):
    done = bench("--server-dsn", f"host={tmp_path} port=1 user=nobody dbname=postgres connect_timeout=5")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (error,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert "OperationalError" in error


def test_too_many_workers_for_max_connections_are_refused_before_starting(pg_server):
    done = bench("--workers", "1,100000", "--server-dsn", pg_server.admin_dsn)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "max_connections" in done.stderr and "W=100000" in done.stderr
    assert "starting" not in done.stderr  # refused before any worker started
