"""The limits benchmark (bench/limits.py) still runs: a ``--quick`` run on the test server, checking
that every figure is printed and plausible (not the timings: those are the benchmark's business,
not a test's), that the binding case reached exactly its limit, that its verification passed, and
that it drops the databases it made."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
from helpers import HERE

ROOT = HERE.parent

TITLES = (
    "before",
    "(a) no limits",
    "(b) concurrency 100,000",
    "(c) rate 1000000/1s + per-key 100,000, 16 keys",
)
FIGURES = (
    "wfctl limits benchmark: N=120 workflows x S=3 no-op steps, W=1 worker processes",
    "server: PostgreSQL",
    "code: current = ",
    "; before = ",
    "load average (1, 5, 15 min): ",
    "## workflows/s, steady (first claim -> last completion, database clock)",
    "## workflows/s (workers start -> all completed)",
    "| median of 1 ",
    "| a/before ",
    "| b/a ",
    "| c/a ",
    "transactions per workflow (median)",
    "## binding (for information): concurrency 4, 120 workflows, 1 workers x 8",
    "most leases at once (sampled after every UPDATE of workflows)",
    "leases held on average over time",
    "(a)/before steady workflows/s median",
    "(b)/(a) steady workflows/s median",
    "(c)/(a) steady workflows/s median",
    "binding: concurrency 4: most leases at once 4 (the limit, reached)",
    "verification: OK",
)


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.limits", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_a_quick_run_prints_every_figure(pg_server):
    # --before a directory: the working tree again, in a database of its own (git need not be there)
    done = bench("--quick", "--server-dsn", pg_server.admin_dsn, "--before", str(ROOT), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report, _, rest = done.stdout.partition("\n{")
    for figure in (*FIGURES, *TITLES):
        assert figure in report, f"{figure!r} missing from:\n{report}"
    assert report.count("goal MET") + report.count("goal MISSED") == 3, report

    results = json.loads("{" + rest)
    assert results["options"]["n"] == 120 and results["options"]["workers"] == 1
    (only,) = results["rounds"]
    assert sorted(only["order"]) == sorted(only["phases"]) == ["before", "keyed", "limit", "none"]
    for name, phase in only["phases"].items():
        assert phase["ok"], (name, phase)
        # plausible: every run took time, and none took longer than the phase's timeout
        assert 120 / 600 < phase["workflows_per_s"] <= phase["steady_workflows_per_s"] < 1_000_000, phase
    bound = results["binding"]
    assert (bound["limit"], bound["n"], bound["most_leases"]) == (4, 120, 4)
    # each claim takes at most the limit (4) at once: at least n/4 claim statements, each sampled
    assert bound["samples"] >= bound["n"] // bound["limit"]
    assert 0 < bound["mean_leases"] <= 4
    assert bound["phase"]["ok"] and bound["phase"]["workflows_per_s"] > 0
    assert results["problems"] == []

    # its databases are gone
    names = sorted(results["databases"].values())
    assert len(names) == 2 and all(n.startswith("wfctl_bench_limits_") for n in names)
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    assert left == []


def test_bad_sizes_are_refused():
    done = bench("--rounds", "0")
    assert done.returncode == 2
    assert "must be at least 1" in done.stderr
