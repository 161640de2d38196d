"""The throughput benchmark (bench/throughput.py) still runs: a ``--quick`` run (N=200, one round,
naive, wfctl and the floor) on the test server, checking the verification and the report's shape
(not the timings: those are the benchmark's business), and that it drops its databases. The floor
(bench/floor.py) on its own: it does the row writes it stands for, each run claimed once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from helpers import HERE, rows, run_benchmark

ROOT = HERE.parent
# bench/ is not part of the installed package: it is imported from the source tree (as
# `python -m bench.throughput` run from there does)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import throughput  # noqa: E402

SIDES = ("naive", "wfctl", "floor")
FIGURES = (
    "wfctl throughput benchmark: 4 worker processes per side, S=3 no-op steps",
    "server: PostgreSQL",
    "commit ceiling: pgbench -c 4 -j 2 -T 1, one single-row INSERT per transaction: ",
    "side naive: bench/naive.py",
    "side wfctl: wfctl worker from this working tree, default options",
    "side floor: bench/floor.py, batches of 32, claim in index order",
    "load average (1, 5, 15 min): ",
    "## N = 200 (1 round; completions polled every 20 ms)",
    "rounds (order, 1-minute load average): 1: naive, wfctl, floor (load ",
    "goal ",
    "verification: OK",
)
HEADER = ("side", "workflows/s", "per round", "steps/s", "per round", "/ naive", "share of the floor")
COSTS = (
    "side (medians)",
    "wall s",
    "CPU busy %",
    "server CPU s",
    "workers CPU s",
    "benchmark CPU s",
    "other CPU s",
    "server CPU ms / workflow",
    "workers CPU ms / workflow",
    "transactions / workflow",
    "ceiling / transactions (workflows/s)",
)


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the benchmark; past the timeout, SIGTERM it (so that it stops its workers and drops its
    databases on the way out) and fail."""
    return run_benchmark("bench.throughput", args, timeout)


def test_a_quick_run_verifies_every_side_and_prints_the_tables(pg_server):
    done = bench("--quick", "--server-dsn", pg_server.admin_dsn, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report, _, rest = done.stdout.partition("\n{")
    for figure in FIGURES:
        assert figure in report, f"{figure!r} missing from:\n{report}"
    lines = report.splitlines()
    headers = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| side")]
    assert headers == [list(HEADER), list(COSTS)], report
    for side in SIDES:
        # one row per side in each of the two tables
        assert sum(1 for line in lines if line.startswith(f"| {side} ")) == 2, report

    results = json.loads("{" + rest)
    assert results["problems"] == []
    phases = results["phases"]
    assert sorted(p["side"] for p in phases) == sorted(SIDES)
    databases = []
    for p in phases:
        v = p["verification"]
        assert p["ok"] and v["ok"], p
        assert (v["workflows"], v["completed"], v["step_rows"], v["steps_completed"]) == (200, 200, 600, 600)
        assert v["claimed_more_than_once"] == 0 and v["workflows_with_wrong_step_count"] == 0
        assert v["worker_exit_codes"] == [0, 0, 0, 0]
        # plausible: every run took time, none longer than the phase's timeout
        assert 200 / 60 < p["workflows_per_s"] < 1_000_000 and p["steps_per_s"] == pytest.approx(
            3 * p["workflows_per_s"]
        )
        assert 0 <= p["busy_pct"] <= 100
        # (the CPU window starts when the submit's process has exited: on a loaded machine the
        # workers may have finished N=200 by then, so CPU figures can be zero, never negative)
        assert p["workers_cpu_s"] >= 0 and (p["server_cpu_s"] is None or p["server_cpu_s"] >= 0)
        assert p["xacts_per_workflow"] > 0
        databases.append(p["database"])
    summary = results["summary"]["200"]
    assert set(summary) == set(SIDES)
    # the naive worker commits 2S+2 times per workflow, plus its polls
    assert summary["naive"]["median_xacts_per_workflow"] >= 8
    # the floor: 5 statements per batch of 32, plus its polls
    assert summary["floor"]["median_xacts_per_workflow"] < 1
    assert len(summary["wfctl"]["over_naive"]) == len(summary["wfctl"]["share_of_floor"]) == 1
    assert results["pgbench_tps"] > 0

    # its databases are gone
    assert all(name.startswith("wfctl_bench_tp_") for name in databases)
    with psycopg.connect(pg_server.admin_dsn) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (databases,)
        ).fetchall()
    assert left == []


def test_the_floor_does_the_row_writes_it_stands_for(dsn, tmp_path):
    with psycopg.connect(dsn) as conn:
        conn.execute(
            throughput.SQL["enqueue"],
            {"type": "floor3", "input": psycopg.types.json.Jsonb({"steps": 3}), "n": 70},
        )
    out = tmp_path / "floor.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "floor.py"), "--dsn", dsn],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'completed'")[0][0] < 70:
            assert proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.read_text().splitlines() == ["ready", "floor: completed 70"]
    # every run once: one lease (epoch 1, attempt 1), three completed step rows 1..3 with the
    # no-op's output, current_step 3, completed with output and finish time
    (runs,) = rows(
        dsn,
        """
        SELECT count(*) FILTER (WHERE lease_epoch = 1 AND attempt = 1 AND current_step = 3
                                  AND output_data = '{"ok": true}' AND finished_at IS NOT NULL
                                  AND started_at IS NOT NULL AND lease_owner LIKE '%:floor')
        FROM workflows
        """,
    )
    assert runs == (70,)
    steps = rows(
        dsn,
        """
        SELECT step_number, step_name, output_data, count(*) FILTER (WHERE status = 'completed'
                                                                      AND lease_epoch = 1)
        FROM workflow_steps GROUP BY 1, 2, 3 ORDER BY 1
        """,
    )
    assert steps == [(1, "s1", 0, 70), (2, "s2", 1, 70), (3, "s3", 2, 70)]


def test_a_write_that_misses_a_run_stops_the_floor(dsn, tmp_path):
    # a trigger that takes one run of the batch away from the floor between its claim and its
    # first step (as a lost lease would): the floor must not count it as done
    with psycopg.connect(dsn) as conn:
        conn.execute(
            throughput.SQL["enqueue"],
            {"type": "floor3", "input": psycopg.types.json.Jsonb({"steps": 3}), "n": 5},
        )
        conn.execute(
            """
            CREATE FUNCTION steal() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE workflows SET lease_epoch = lease_epoch + 1
                WHERE id = (SELECT id FROM workflows WHERE status = 'running' ORDER BY id LIMIT 1);
                RETURN NULL;
            END $$;
            CREATE TRIGGER steal AFTER UPDATE OF status ON workflows
                FOR EACH STATEMENT WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION steal();
            """
        )
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "floor.py"), "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "floor: step 1 wrote 4 of 5 rows" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rounds", "0"], "must be at least 1"),
        (["-n", "0"], "workflow counts must be at least 1"),
        (["-n", "2k"], "not a comma-separated list of numbers"),
        (["--sides", "naive,turbo"], "--sides takes naive, wfctl and floor"),
        (["--variant", "c16"], "--variant takes NAME=ARGS"),
        (["--variant", "wfctl=-c 16"], "--variant takes NAME=ARGS"),
        (["--variant", "a=-c 1", "--variant", "a=-c 2"], "--variant names must differ"),
        (["--poll", "0"], "--poll must be positive"),
    ],
)
def test_bad_options_are_refused(args, message):
    done = bench(*args)
    assert done.returncode == 2
    assert message in done.stderr


def test_the_sides_of_an_a_b(tmp_path):
    args = throughput.parse_args(
        ["--variant", "c16=--concurrency 16", "--worker-args=-q", "--code", str(ROOT)]
    )
    sides = throughput.build_sides(args, tmp_path)
    # with --code or --variant the baselines are left out unless --sides names them
    assert [(s.name, s.kind, s.worker_args) for s in sides] == [
        ("wfctl", "wfctl", ["-q"]),
        (f"wfctl@{ROOT.name}", "wfctl", ["-q"]),
        ("c16", "wfctl", ["-q", "--concurrency", "16"]),
    ]
    assert sides[1].cwd == ROOT and sides[1].env and sides[1].env["PYTHONPATH"] == str(ROOT)
    command = sides[2].worker_command("dbname=x", 3)
    assert command[1:] == [
        "-m",
        "wfctl",
        "worker",
        "--app",
        "bench.noop_app",
        "--dsn",
        "dbname=x",
        "-q",
        "--concurrency",
        "16",
    ]
