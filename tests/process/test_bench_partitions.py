"""The partitioned-layout benchmark (bench/partitions.py) still runs: a ``--quick`` run on the test
server prints both tables with plausible figures (not judged: timings are the benchmark's
business), its prune phase removed every generated row both ways, and it drops its databases."""

from __future__ import annotations

import re
import subprocess
import sys

import psycopg
from helpers import HERE

ROOT = HERE.parent


def test_a_quick_run_prints_both_tables(pg_server):
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        before = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.partitions", "--quick", "--server-dsn", pg_server.admin_dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "## hot path, warm: workflows/s (warmed workers: submit -> all completed)" in out, out
    assert "## hot path, cold: workflows/s (burst workers started after the submit" in out, out
    medians = re.findall(r"\| median of 1 \| (\d+) \| (\d+) \| ([\d.]+) \(range", out)
    assert len(medians) == 2 and all(int(u) > 0 and int(p) > 0 for u, p, _ in medians), out
    assert "## prune --older-than 30d of 2,000 finished workflows (one step each)" in out, out
    assert re.search(r"\| unpartitioned \| 2,000 \| 2,000 \| - \| [\d.]+ \|", out), out
    # the 9 days of history and the 2 empty days around them that ended before the cutoff
    assert re.search(r"\| partitioned \| 2,000 \| 2,000 \| 11 \| [\d.]+ \|", out), out
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        after = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    # its own databases (other benchmarks' tests may run beside it on the same server)
    assert {d for d in after - before if d.startswith("wfctl_bench_part_")} == set()
