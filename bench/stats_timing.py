"""Time `wfctl stats` on a big table and show the plan of each of its queries.

    python bench/generate_stats_data.py --dsn DSN --reset        # 1M workflows, ~3M steps
    python bench/stats_timing.py --dsn DSN [--since 24h] [--runs 5] [--wfctl "wfctl"]

1. the sizes of the tables;
2. `wfctl stats --since 24h --dsn DSN` run --runs times as a separate process, wall-clock from
   spawn to exit (Python start, imports, connect, schema check, the queries, rendering), plus
   the same with --json; the target is under 1 second;
3. the report function alone, in this process, warm (the database part of that time);
4. EXPLAIN (ANALYZE, BUFFERS) of each query the stats report runs, with the same parameters.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from wfctl import reports
from wfctl.durations import parse_duration
from wfctl.queries import parse_blocks, q

SQL = parse_blocks((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))
STATS_QUERIES = ("reports.success_rate", "reports.stuck", "reports.slow_steps")


def wall_times(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit(f"{shlex.join(command)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return times


def summary(times: list[float]) -> str:
    return (
        f"min {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms over {len(times)} runs"
    )


def explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    statement = sql.SQL(SQL["explain"]).format(query=sql.SQL(q(name)))  # type: ignore[arg-type]
    return "\n".join(row[0] for row in conn.execute(statement, params).fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--since", default="24h")
    parser.add_argument("--stale", default="5m")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--wfctl",
        default=f"{shlex.quote(sys.executable)} -m wfctl",
        help="how to run wfctl (default: this Python's -m wfctl)",
    )
    args = parser.parse_args()
    since, stale = parse_duration(args.since), parse_duration(args.stale)

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        sizes = conn.execute(SQL["sizes"], {"since": since}).fetchone()
        assert sizes is not None
        print(
            f"workflows: {sizes[0]:,} ({sizes[2]}), steps: {sizes[1]:,} ({sizes[3]}), "
            f"created in the last {args.since}: {sizes[4]:,}, server: {sizes[5]}"
        )

    command = [*shlex.split(args.wfctl), "stats", "--since", args.since, "--stale", args.stale]
    command += ["--dsn", args.dsn]
    print(f"\n$ {shlex.join(command)}")
    wall_times(command, 1)  # warm the OS cache and the server's buffers once
    print(f"wall clock (tables): {summary(wall_times(command, args.runs))}")
    print(f"wall clock (--json): {summary(wall_times([*command, '--json'], args.runs))}")
    baseline = [*shlex.split(args.wfctl), "--version"]
    print(
        f"wall clock of `wfctl --version` (interpreter start and imports): {summary(wall_times(baseline, 3))}"
    )

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        inside = []
        for _ in range(args.runs):
            started = time.perf_counter()
            reports.stats(conn, since=since, stale=stale)
            inside.append(time.perf_counter() - started)
        print(f"reports.stats() in process, warm: {summary(inside)}")
        params = {"since": since, "stale": stale, "workflow_type": None}
        for name in STATS_QUERIES:
            print(f"\n-- EXPLAIN (ANALYZE, BUFFERS) {name}")
            print(explain(conn, name, params))


if __name__ == "__main__":
    main()
