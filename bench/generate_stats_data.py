"""Fill a wfctl database with a realistic history for the report benchmarks.

    python bench/generate_stats_data.py --dsn DSN [-n 1000000] [--days 30] [--reset] [--seed 0.42]

N workflows (default 1,000,000) created evenly over the last --days, in creation order as a real
table fills; six types with different weights and step timings; ~94% completed, ~4.5% failed
(attempt 4, the failing step recorded), ~1.5% cancelled; the last seconds' runs pending or running
on live workers; one in --stuck-every (default 1333, about 25 a day) of the last 23 hours running
on a worker that died (or vanished). Each run has three steps; completed runs record all three,
so the steps table gets ~2.9 steps per workflow (~2.9M for 1M). Twelve workers: 6 live, 3 dead,
3 stopped.

Everything happens in the server (INSERT ... SELECT over generate_series, SQL in
bench/generate_stats_data.sql), then VACUUM (ANALYZE), as autovacuum would have done on a table
this old. The schema is installed first if missing. Without --reset, rows are added to what is
there.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from wfctl import schema
from wfctl.queries import parse_blocks

SQL = parse_blocks((Path(__file__).with_suffix(".sql")).read_text(encoding="utf-8"))


def run(conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None) -> float:
    started = time.perf_counter()
    conn.execute(SQL[name], params or {})
    elapsed = time.perf_counter() - started
    print(f"  {name:<18} {elapsed:7.1f}s", file=sys.stderr)
    return elapsed


def generate(dsn: str, *, n: int, days: float, reset: bool, seed: float, stuck_every: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.migrate(conn)
        params = {"n": n, "span": timedelta(days=days), "stuck_every": stuck_every}
        total = time.perf_counter()
        with conn.transaction():
            conn.execute(SQL["seed"], {"seed": seed})
            if reset:
                run(conn, "reset")
            run(conn, "workers")
            run(conn, "plan", params)
            run(conn, "shape", params)
            run(conn, "insert_workflows")
            run(conn, "insert_steps")
            run(conn, "drop_temp")
        for name in ("vacuum_workflows", "vacuum_steps", "vacuum_workers"):
            run(conn, name)
        print(f"  {'total':<18} {time.perf_counter() - total:7.1f}s", file=sys.stderr)
        row = conn.execute(SQL["counts"]).fetchone()
        assert row is not None
        names = ["workflows", "steps", "last_24h", "running", "workflows_size", "steps_size"]
        return dict(zip(names, row, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="the wfctl database to fill")
    parser.add_argument("-n", "--workflows", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0, help="history spread over this many days")
    parser.add_argument("--reset", action="store_true", help="empty the wfctl tables first")
    parser.add_argument("--seed", type=float, default=0.42, help="setseed() value, -1..1")
    parser.add_argument("--stuck-every", type=int, default=1333)
    args = parser.parse_args()
    counts = generate(
        args.dsn,
        n=args.workflows,
        days=args.days,
        reset=args.reset,
        seed=args.seed,
        stuck_every=args.stuck_every,
    )
    print(" ".join(f"{k}={v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
