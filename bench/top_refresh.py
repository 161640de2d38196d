"""What one refresh of `wfctl top` sends and how long it takes, on a database filled by
bench/generate_stats_data.py (see bench/README.md).

    python bench/top_refresh.py --dsn DSN [--repeat 20]

Prints the statements of a refresh with their median time: an ordinary refresh, and one that
also reads the slowest steps (every 30 s: wfctl.top.source.STEPS_EVERY).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import psycopg.cursor

from wfctl.connection import connect
from wfctl.top.snapshot import take


def measure(conn, repeat: int, slow_steps: bool) -> None:
    spent: dict[str, list[float]] = collections.defaultdict(list)
    original = psycopg.cursor.Cursor.execute

    def timed(self, query, params=None, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, query, params, **kwargs)
        finally:
            name = " ".join(str(query).split())[:60]
            spent[name].append((time.perf_counter() - started) * 1000)

    take(conn, slow_steps=slow_steps)  # warm the cache and the plans
    totals = []
    psycopg.cursor.Cursor.execute = timed  # type: ignore[method-assign]
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            take(conn, slow_steps=slow_steps)
            totals.append((time.perf_counter() - started) * 1000)
    finally:
        psycopg.cursor.Cursor.execute = original  # type: ignore[method-assign]
    kind = "with the slowest steps" if slow_steps else "ordinary"
    median = statistics.median(totals)
    print(f"{kind} refresh: {len(spent)} statements in one transaction, median {median:.1f} ms")
    for name, times in sorted(spent.items(), key=lambda item: -statistics.median(item[1])):
        print(f"  {statistics.median(times):8.2f} ms  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with connect(args.dsn) as conn:
        measure(conn, args.repeat, slow_steps=False)
        measure(conn, args.repeat, slow_steps=True)


if __name__ == "__main__":
    main()
