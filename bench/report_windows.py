"""Time `wfctl stats` and `wfctl metrics` over windows of a big history, read from the rollups
the workers keep, against the same reports from the tables alone in the same run.

    python bench/generate_stats_data.py --dsn DSN --reset [-n 10000000]
    python bench/report_windows.py --dsn DSN [--windows 1h,24h,7d,30d] [--runs 3]
                                   [--catch-up] [--compare 1h,24h,7d,30d]

1. the sizes of the tables;
2. with --catch-up, the rollups brought up to date first (what the workers' duty does), timed;
3. per window: reports.stats() and reports.metric_families() in this process, warm (the best of
   --runs), read as the rollups allow;
4. for the windows of --compare, the same reports with the rollups deleted in a transaction that
   is rolled back (the tables alone, the reports before the rollups), their times, the ratio,
   and a check that every count, sum and maximum agrees and every percentile is within 5.2 %.

The schema's clock (``wfctl_now()``) is stopped while it measures, so that every reading sees
the same window, and started again at the end: run it on a database no worker uses.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from wfctl import reports, rollups
from wfctl.durations import parse_duration
from wfctl.queries import parse_blocks

SQL = parse_blocks((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))
EXACT = ("total", "completed", "failed", "running", "pending", "waiting", "cancelled", "count", "max_seconds")


def best(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


def disagreements(rolled: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[str]:
    found = []
    if len(rolled) != len(base):
        return [f"{len(rolled)} rows against {len(base)}"]
    for r, b in zip(rolled, base, strict=True):
        for k in EXACT:
            if k in r and r[k] != b[k]:
                found.append(f"{k}: {r[k]} against {b[k]}")
        for k in ("p50_seconds", "p95_seconds"):
            if r[k] is None or b[k] is None:
                continue
            if abs(float(r[k]) - float(b[k])) > max(0.052 * abs(float(b[k])), 0.0015):
                found.append(f"{k}: {r[k]} against {b[k]}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--windows", default="1h,24h,7d,30d")
    parser.add_argument("--compare", default="", help="windows also timed from the tables alone")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--catch-up", action="store_true", help="bring the rollups up to date first")
    args = parser.parse_args()
    windows = [(w, parse_duration(w)) for w in args.windows.split(",") if w]
    compare = {w for w in args.compare.split(",") if w}

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        sizes = conn.execute(SQL["sizes"]).fetchone()
        assert sizes is not None
        print(f"workflows: {sizes[0]:,}, steps: {sizes[1]:,}, server: {sizes[2]}")
        if args.catch_up:
            started = time.perf_counter()
            hours = rollups.catch_up(conn, hours=rollups.HOURS_PER_REFRESH)
            print(f"catch-up: {hours} hours rolled up in {time.perf_counter() - started:.1f} s")
        conn.execute(SQL["freeze"])
        try:
            measure(conn, windows, compare, args.runs)
        finally:
            conn.execute(SQL["thaw"])


def measure(
    conn: psycopg.Connection[Any], windows: list[tuple[str, timedelta]], compare: set[str], runs: int
) -> None:
    """The table: each window read as the rollups allow, and for those of ``compare`` from the
    tables alone too."""
    rolled_up = conn.execute(SQL["rollup_sizes"]).fetchone()
    assert rolled_up is not None
    hours, days, duration_rows, size = rolled_up
    print(f"rollups: {hours} hours, {days} days, {duration_rows:,} duration rows, {size}")
    print("\n| window | stats | metrics | stats, tables alone | metrics, tables alone | ratio | agree |")
    print("|---|---|---|---|---|---|---|")
    for label, since in windows:
        stats_s, rolled = best(partial(reports.stats, conn, since=since), runs)
        metrics_s, _ = best(partial(reports.metric_families, conn, since=since), runs)
        row = [label, f"{stats_s * 1000:,.0f} ms", f"{metrics_s * 1000:,.0f} ms"]
        if label in compare:
            base_s, base_m, base = tables_alone(conn, since, runs)
            found = disagreements(rolled.success_rate, base.success_rate)
            found += disagreements(rolled.slow_steps, base.slow_steps)
            row += [
                f"{base_s * 1000:,.0f} ms",
                f"{base_m * 1000:,.0f} ms",
                f"{base_s / stats_s:,.1f}x",
                "yes" if not found else "; ".join(found[:3]),
            ]
        else:
            row += ["", "", "", ""]
        print("| " + " | ".join(row) + " |", flush=True)


def tables_alone(conn: psycopg.Connection[Any], since: timedelta, runs: int) -> tuple[float, float, Any]:
    conn.autocommit = False
    try:
        conn.execute(SQL["forget"])
        stats_s, report = best(lambda: reports.stats(conn, since=since), max(1, runs - 1))
        metrics_s, _ = best(lambda: reports.metric_families(conn, since=since), max(1, runs - 1))
    finally:
        conn.rollback()
        conn.autocommit = True
    return stats_s, metrics_s, report


if __name__ == "__main__":
    main()
