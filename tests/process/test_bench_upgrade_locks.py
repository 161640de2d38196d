"""The upgrade-under-load benchmark (bench/upgrade_locks.py) still runs: one short round on the
test server from the last release, both scenarios, the JSON's shape and its figures consistent
(not their values: those are the benchmark's business), and no database left behind."""

from __future__ import annotations

import json

import psycopg
import releases
from helpers import run_benchmark

from wfctl import schema


def test_a_short_round_measures_both_scenarios_and_drops_its_databases(pg_server):
    found = releases.previous_release()
    assert found is not None, "no release before this tree"
    _, revision = found
    done = run_benchmark(
        "bench.upgrade_locks",
        ("--from", revision, "--workers", "1", "--backlog", "10000", "--warm", "200", "--baseline", "0.5",
         "--rounds", "1", "--json", "--server-dsn", pg_server.admin_dsn),
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)
    assert results["problems"] == []
    phases = {p["scenario"]: p for p in results["phases"]}
    assert set(phases) == {"release", "hot-table"}
    latest = schema.latest_version()
    assert phases["hot-table"]["applied"][-1] == f"{latest + 1:04d}_bench_hot_column"
    assert phases["release"]["applied"] == phases["hot-table"]["applied"][:-1]
    for phase in phases.values():
        assert phase["init_s"] > 0 and phase["per_s"] > 0 and phase["lock_retries"] >= 0
        assert 0 <= phase["init_lock_wait_ms"] < 1000 and phase["init_gap_ms"] >= 0
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'wfctl_bench_upgrade_%'"
        ).fetchall()
    assert left == []
