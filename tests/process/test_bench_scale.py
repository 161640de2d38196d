"""The scale benchmark (bench/scale.py) still runs: a ``--quick`` run of each command on the test
server, checking that every figure is printed and plausible (not the timings, which are the
benchmark's business), that its verification passed, that the claim measured is the worker's
(prepared, generic, with the worker's parameters: the plan shows ``$n`` parameters, it claims the
worker's batch), and that it drops the databases it made."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
from helpers import HERE

ROOT = HERE.parent
# bench/ is not part of the installed package: it is imported from the source tree (as
# `python -m bench.scale` run from there does)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import scale  # noqa: E402
from wfctl.worker import policy  # noqa: E402
from wfctl.worker.options import DEFAULTS  # noqa: E402

BATCH = policy.free_slots(DEFAULTS.concurrency, 0)  # a fresh worker's first claim


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.scale", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def quick(command: str, admin_dsn: str) -> tuple[str, dict[str, Any]]:
    done = bench(command, "--quick", "--server-dsn", admin_dsn, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report, _, rest = done.stdout.partition("\n{")
    results = json.loads("{" + rest)
    assert results["command"] == command and results["problems"] == []
    assert "verification: OK" in report or command == "claim-plan", report
    # its databases are gone
    names = results["databases"]
    assert names and all(n.startswith("wfctl_bench_scale_") for n in names)
    with psycopg.connect(admin_dsn) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    assert left == []
    return report, results


def check_plans(plans: list[dict[str, Any]], sizes: list[int], runs: int) -> None:
    states = {
        "stale: never analyzed",
        "analyzed",
        f"stale: analyzed when {scale.DRAINED:,} finished, 0 pending",
    }
    claimed = {f"analyzed, then {s // 2:,} claimed, not vacuumed": s for s in sizes}
    assert sorted(p["statistics"] for p in plans) == sorted([*states] * len(sizes) + [*claimed])
    # the runs left runnable: all of them, or the half not claimed
    expected = [s for s in sizes for _ in states] + [s - s // 2 for s in sizes]
    assert sorted(p["size"] for p in plans) == sorted(expected)
    for p in plans:
        size = claimed.get(p["statistics"], p["size"])
        assert p["parked"] == size // 10
        assert len(p["execution_ms"]) == runs and all(0 < ms < 10_000 for ms in p["execution_ms"])
        # the worker's batch, read through the claim's index (at most every entry, twice: the
        # claim's function probes the priorities, then picks), or every runnable run when fewer
        # are left; nothing claimed stays claimed
        assert p["claimed"] == [min(BATCH, p["size"])] * runs, p
        assert all(min(BATCH, p["size"]) <= n <= 2 * size + BATCH + 1 for n in p["runnable_entries"]), p
        # the pick reads the claim's index (in the statement, or inside the claim's function,
        # whose statements auto_explain shows where the server has it)
        # (a server whose auto_explain loads but reports nothing to the client, as the embedded
        # one's does, shows the function call only)
        if "auto_explain is not available" not in p["text"] and p["inner_shape"]:
            assert "workflows_runnable_idx" in p["shape"] + p["inner_shape"], p
        else:
            assert "wfctl_claim_ready" in p["shape"], p
        # the generic plan: the parameters are still $n when the plan runs
        assert "ANY ($" in p["text"] and "Execution Time" in p["text"], p["text"]
        if p["statistics"] == "stale: never analyzed":
            assert p["analyzed"] == "never" and p["planner_rows"] == -1
        else:
            assert p["analyzed"] != "never" and p["planner_rows"] > 0


def test_claim_plan(pg_server):
    report, results = quick("claim-plan", pg_server.admin_dsn)
    for figure in (
        "wfctl scale benchmark: the claim's plan, 2 run(s) each",
        "server: PostgreSQL",
        "load average (1, 5, 15 min): ",
        "## the claim (worker.claim), prepared, plan_cache_mode = force_generic_plan",
        "| 1,000 (+100) ",
        "| 3,000 (+300) ",
        "### 3,000 runnable + 300 parked/delayed, statistics analyzed",
        "workflows_runnable_idx entries read",
    ):
        assert figure in report, f"{figure!r} missing from:\n{report}"
    check_plans(results["plans"], [1000, 3000], 2)
    # every run in its own rolled-back transaction: nothing was left claimed (the same first runs
    # were claimed every time, so every claim read the same index entries; not so after runs were
    # claimed and committed, whose dead entries a scan may mark and the next one skip)
    for p in results["plans"]:
        if "claimed, not vacuumed" not in p["statistics"]:
            assert len(set(p["runnable_entries"])) == 1, p


def test_history(pg_server):
    report, results = quick("history", pg_server.admin_dsn)
    for figure in (
        "N=300 workflows x 3 no-op steps submitted at once to 2 idle workers",
        "history: 3,000 workflows, 9,000 steps, 3,450 attempts; ",
        "## workflows/s: submit's return -> none unfinished (polled every 0.2 s)",
        "| median of 1 ",
        "history/empty workflows/s: median ",
    ):
        assert figure in report, f"{figure!r} missing from:\n{report}"
    assert report.count("goal MET") + report.count("goal MISSED") == 1, report
    assert results["history"] == {"workflows": 3000, "steps": 9000, "attempts": 3000 - 150 + 150 * 4}
    (only,) = results["rounds"]
    assert sorted(only["order"]) == ["empty", "history"]
    for label in ("empty", "history"):
        r = only[label]
        assert r["ok"] and r["n"] == 300, r
        assert 300 / 60 < r["workflows_per_s"] < 1_000_000, r
        assert r["index_scans"] > 0 and r["index_entries"] >= 300, r


def test_backlog(pg_server):
    report, results = quick("backlog", pg_server.admin_dsn)
    for figure in (
        "1 workers (default options) over the first 200 completions of a waiting backlog",
        "## (1) the claim (worker.claim), prepared",
        "## (2) workflows/s over the first 200 completions",
        "| 1 (small 1,000 observation) ",
        "1,000/small",
        "## (3) the issue's observation: 1 idle workers, N=200 submitted at once",
        "1,000 runnable / small (200) workflows/s: median ",
    ):
        assert figure in report, f"{figure!r} missing from:\n{report}"
    assert report.count("goal MET") + report.count("goal MISSED") == 1, report
    check_plans(results["plans"], [200, 1000], 1)
    (only,) = results["rounds"]
    for label in ("small", "1,000"):
        r = only[label]
        assert r["ok"] and r["measured"] == 200 and r["parked"] == r["runnable"] // 10, r
        assert r["span_s"] > 0 and r["steady_workflows_per_s"] > 0, r
    assert only["observation"]["ok"] and only["observation"]["index_scans"] > 0


def test_soak(pg_server):
    report, results = quick("soak", pg_server.admin_dsn)
    for figure in (
        "soak: 2 workers (default options) for 0.1 min, about 300 runnable kept, "
        "`wfctl prune --older-than 1s` every 2 s",
        "## per interval of 2 s: completions and sizes",
        "## per interval of 2 s: dead tuples, autovacuum",
        "| workflows HOT % | workflows_runnable_idx scans | entries/scan |",
        "## indexes (MB), start -> end",
        "| workflows         |                     workflows_runnable_idx |",
        "last 1 / first 1 intervals' workflows/s",
        "sizes ",
    ):
        assert figure in report, f"{figure!r} missing from:\n{report}"
    s = results["soak"]
    assert [m["minute"] for m in s["minutes"]] == [1, 2, 3]
    assert sum(m["completed"] for m in s["minutes"]) > 0
    assert s["submitted"] >= 300
    # the workers' reads of the claim's index, the benchmark's own counts left out (per interval
    # they may be off by what a session had not flushed yet at its end: a second at most)
    assert sum(m["index_scans"] for m in s["minutes"]) > 0
    for m in s["minutes"]:
        assert set(m["tables"]) == set(scale.SOAK_TABLES)
        assert all(t["total"] >= t["heap"] + t["indexes"] > 0 for t in m["tables"].values()), m
    # prune ran as cron would and deleted what had finished more than a second before
    runs = [r for m in s["minutes"] for r in m["prunes"]]
    assert runs and all(r["exit"] == 0 for r in runs if not r["running"]), runs


def test_bad_sizes_are_refused():
    done = bench("backlog", "--rounds", "0")
    assert done.returncode == 2
    assert "must be at least 1" in done.stderr
    done = bench("claim-plan", "--sizes", "1e5")
    assert done.returncode == 2
    assert "whole numbers" in done.stderr
