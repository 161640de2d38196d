"""The coordination benchmark (bench/coordination.py) still runs: a scaled-down ``--quick`` run
against the test database, checking that every figure is printed (not what it is: timings are
the benchmark's business, not a test's), that its verification passed, and that it cleans up
the rows it made in a database given by --dsn."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
from helpers import HERE

ROOT = HERE.parent
# bench/ is not part of the installed package: it is imported from the source tree (as
# `python -m bench.coordination` run from there does)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import coordination  # noqa: E402
from bench.coord_app import TYPES  # noqa: E402

FIGURES = (
    "## 1. Wake-up latency",
    "baseline: submit -> first step runs",
    "send -> running again after ctx.recv",
    "send to child -> parent running again after ctx.wait",
    "child running again -> parent running again",
    "## 2. 40 workflows parked in ctx.recv",
    "transactions (pg_stat_database xact_commit + xact_rollback)",
    "table scans (pg_stat_user_tables seq_scan + idx_scan)",
    "rows and index entries read (tup_returned + tup_fetched)",
    "block accesses of workflows_runnable_idx",
    "one claim statement, EXPLAIN ANALYZE: blocks",
    "parking: 40 submitted -> all parked in",
    "the worker's peak RSS over the phase",
    "workflows/s",
    "## 3. Fan-out: one parent, 10 no-op children, 2 workers",
    "## 3. Fan-out: one parent, 10 children of one 50 ms step, 2 workers",
    "join: last child finished -> parent completed (ms)",
    "parent's executions (workflow_attempts rows)",
    "ctx.start_child in a loop",
    "one ctx.start_children",
    "verification: OK",
)


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.coordination", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_a_scaled_down_quick_run_prints_every_figure(dsn):
    done = bench(
        "--dsn",
        dsn,
        "--quick",
        "--latency-count",
        "3",
        "--waiting",
        "40",
        "--children",
        "10",
        "--quiet-seconds",
        "1",
        "--fanout-workers",
        "2",
        "--slow-child-ms",
        "50",
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report, _, rest = done.stdout.partition("\n{")
    for figure in FIGURES:
        assert figure in report, f"{figure!r} missing from:\n{report}"
    assert report.count("goal MET") + report.count("goal MISSED") == 7, report

    results = json.loads("{" + rest)["results"]
    assert results["latency"]["recv"]["samples"] == 3
    assert results["latency"]["child_to_parent"]["samples"] == 3
    waiting = results["waiting"]
    assert (waiting["idle"]["parked"], waiting["parked"]["parked"]) == (0, 40)
    assert waiting["woken"]["n"] == waiting["plain"]["n"] == 40
    # the claim under EXPLAIN ran, with nothing parked and with 40
    for quiet in (waiting["idle"], waiting["parked"]):
        assert quiet["claim_blocks"] > 0 and quiet["claim_ms"] >= 0, quiet
    groups = results["fanout"]
    assert [g["child_ms"] for g in groups] == [0, 50]
    for group in groups:
        assert group["children"] == 10 and group["direct"]["n"] == 10
        assert [run["mode"] for run in group["runs"]] == ["loop", "batch"]
        for run in group["runs"]:
            assert run["executions"] in (1, 2), run  # 1: every child finished before the wait
            assert run["outcomes"].endswith("completed"), run

    # --dsn: the benchmark's rows are gone afterwards
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM workflows WHERE workflow_type LIKE 'coord\\_%'").fetchone()
    assert row == (0,)


def test_the_claim_is_explained_with_the_parameters_a_worker_passes(dsn):
    blocks, ms = coordination.explain_claim(dsn, list(TYPES))
    assert blocks is not None and blocks >= 0
    assert ms is not None and ms >= 0


def test_an_unknown_phase_is_refused():
    done = bench("--only", "latency,nonsense")
    assert done.returncode == 2
    assert "unknown phase nonsense" in done.stderr
