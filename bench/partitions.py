"""The partitioned layout against the unpartitioned one.

    python -m bench.partitions [--server-dsn DSN] [--n 2000] [--rounds 5] [--workers 2]
                               [--old-partitions 32] [--prune-rows 10000000] [--quick]

Run from the repository root. Two phases, each in two fresh databases (one per layout):

- hot path: N workflows of 3 no-op steps (bench/noop_app.py), two protocols per round:
  - warm (as the throughput benchmark's protocol): W ``wfctl worker`` processes started first,
    on tables just emptied and analyzed, and warmed by a batch of 50 per worker (so every
    statement of theirs is planned), then the N submitted in one statement (so the plans were
    built on statistics of nearly empty tables: docs/explanation/partitions.md), timed
    from its return until all N are seen completed (polled every 20 ms: whether one is still
    pending or running);
  - cold: the N submitted first, then W ``wfctl worker --burst`` processes started and timed
    until they exit: a fresh worker plans its statements, and over ~40 partitions planning
    costs more.
  The partitioned database holds 7 intervals ahead plus --old-partitions in the past (about 40
  partitions per table, as a month of daily history has). Rounds interleave the layouts (the
  order alternates); the figure is the per-round ratio partitioned/unpartitioned, its median
  and range.
- prune: --prune-rows finished workflows (one step each) created over 9 whole days from the day
  40 days ago (each day's partition holds a ninth), generated with generate_series straight
  into the tables, then ``control.prune(--older-than 30d)`` timed once per layout (the
  partitioned one first): batched row deletes against partition drops. 0 skips the phase;
  ``--prune-budget S`` stops a prune after S seconds and reports its rate.

Databases: on ``--server-dsn`` (or WFCTL_DSN; the role needs CREATEDB), else an embedded server;
dropped at the end. Prints a Markdown table. See bench/README.md, "The partitioned layout".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench import harness
from bench.harness import REPO, BenchError, log
from wfctl import control, partitions
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))
LAYOUTS = ("unpartitioned", "partitioned")
FINISHED = ["completed", "failed", "cancelled"]
PRUNE_SPAN_DAYS = 9  # the generated history: 9 whole days from the day 40 days ago
CHUNK = 1_000_000

FULL = {"n": 2000, "rounds": 5, "workers": 2, "old_partitions": 32, "prune_rows": 10_000_000}
QUICK = {"n": 30, "rounds": 1, "workers": 1, "old_partitions": 3, "prune_rows": 2000}


@dataclass
class PruneResult:
    layout: str
    workflows: int
    steps: int
    seconds: float
    partitions: int | None
    complete: bool = True  # False: stopped at --prune-budget (workflows, steps: deleted by then)


class OutOfBudget(Exception):
    pass


def run_sql(dsn: str, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(SQL[name], params)
        return cur.fetchall() if cur.description else []


@contextmanager
def layout_database(server_dsn: str, layout: str, old_partitions: int) -> Iterator[str]:
    with harness.fresh_database(server_dsn, f"part_{layout[:5]}", keep=False) as dsn:
        if layout == "partitioned":
            with psycopg.connect(dsn, autocommit=True) as conn:
                partitions.convert(conn, 1)
                for days in range(1, old_partitions + 1):
                    conn.execute(SQL["old_partition"], {"days": days})
        yield dsn


WARMUP_PER_WORKER = 50
POLL = 0.02


def worker_command(dsn: str, *extra: str) -> tuple[list[str], dict[str, str]]:
    cmd = [sys.executable, "-m", "wfctl", "worker", "--app", "bench.noop_app", *extra, "--dsn", dsn]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
    env["PYTHONPATH"] = str(REPO)
    return cmd, env


def wait_completed(dsn: str, since: Any, n: int, timeout: float = 600.0) -> None:
    """Wait until no run created from ``since`` on is pending or running, then check all ``n``
    completed."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(SQL["unfinished_since"], {"since": since}).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise BenchError(f"not all {n} finished within {timeout:.0f} s")
            time.sleep(POLL)
        done = conn.execute(SQL["completed_since"], {"since": since}).fetchone()[0]  # type: ignore[index]
    if done != n:
        raise BenchError(f"{done} of {n} completed")


def warm_round(dsn: str, n: int, workers: int, workdir: Path) -> float:
    """workflows/s from the submit's return until all N are completed, the workers started and
    warmed before."""
    run_sql(dsn, "empty")
    run_sql(dsn, "vacuum")
    run_sql(dsn, "checkpoint")
    cmd, env = worker_command(dsn)
    pool = harness.Workers(workdir, "warm", None, REPO, env)
    pool.start(cmd, workers)
    try:
        warm_since = run_sql(dsn, "db_now")[0][0]
        run_sql(dsn, "submit", {"n": WARMUP_PER_WORKER * workers, "steps": 3})
        wait_completed(dsn, warm_since, WARMUP_PER_WORKER * workers)
        since = run_sql(dsn, "db_now")[0][0]
        run_sql(dsn, "submit", {"n": n, "steps": 3})
        start = time.perf_counter()
        wait_completed(dsn, since, n)
        seconds = time.perf_counter() - start
    finally:
        codes = pool.terminate(60)
    if any(code != 0 for code in codes):
        raise BenchError(f"a worker failed: {codes}\n{pool.tails()}")
    return n / seconds


def hot_round(dsn: str, n: int, workers: int, workdir: Path) -> float:
    """workflows/s from the workers' start until the last one exits, all N completed."""
    run_sql(dsn, "empty")
    run_sql(dsn, "submit", {"n": n, "steps": 3})
    run_sql(dsn, "vacuum")
    run_sql(dsn, "checkpoint")
    cmd, env = worker_command(dsn, "--burst")
    with harness.Workers(workdir, "cold", None, REPO, env) as pool:
        start = time.perf_counter()
        pool.start(cmd, workers)
        codes = pool.wait(600)
        seconds = time.perf_counter() - start
    if any(code != 0 for code in codes):
        raise BenchError(f"a worker failed: {codes}\n{pool.tails()}")
    completed, total = run_sql(dsn, "completed")[0]
    if completed != n or total != n:
        raise BenchError(f"{completed} of {total} completed, expected {n}")
    return n / seconds


def generate(dsn: str, rows: int) -> None:
    for lo in range(0, rows, CHUNK):
        run_sql(
            dsn,
            "generate_workflows",
            {"lo": lo, "hi": min(rows, lo + CHUNK), "n": rows, "span_days": PRUNE_SPAN_DAYS},
        )
    first, last = run_sql(dsn, "bounds")[0]
    step = (last - first) / max(1, rows // CHUNK)
    at = first
    while at < last:
        run_sql(dsn, "generate_steps", {"from": at, "to": min(last, at + step)})
        at += step
    run_sql(dsn, "vacuum")
    run_sql(dsn, "checkpoint")


def prune_phase(server_dsn: str, layout: str, rows: int, budget: float) -> PruneResult:
    with layout_database(server_dsn, layout, 0) as dsn:
        if layout == "partitioned":  # the history's intervals exist, as after a conversion
            for days in range(30, 42):
                run_sql(dsn, "old_partition", {"days": days})
        log(f"{layout}: generating {rows:,} finished workflows with a step each")
        generate(dsn, rows)
        ((workflows, steps),) = run_sql(dsn, "counts")
        log(f"{layout}: {workflows:,} workflows, {steps:,} steps; pruning")
        deleted = [0]

        def progress(n: int) -> None:
            deleted[0] += n
            if budget and time.perf_counter() - start > budget:
                raise OutOfBudget

        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter()
            try:
                done = control.prune(conn, timedelta(days=30), FINISHED, progress=progress)
            except OutOfBudget:
                seconds = time.perf_counter() - start
                left = run_sql(dsn, "counts")[0]
                log(f"{layout}: stopped at the budget after {seconds:.0f} s, {left[0]:,} left")
                return PruneResult(layout, workflows - left[0], steps - left[1], seconds, None, False)
            seconds = time.perf_counter() - start
        left = run_sql(dsn, "counts")[0]
        if (done.workflows, done.steps) != (workflows, steps) or left != (0, 0):
            raise BenchError(f"{layout}: pruned {done}, left {left}")
        return PruneResult(layout, done.workflows, done.steps, seconds, done.partitions)


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


PROTOCOLS = {"warm": warm_round, "cold": hot_round}


def hot_path(server: str, opts: dict[str, int], workdir: Path) -> None:
    with ExitStack() as stack:
        dbs = {
            layout: stack.enter_context(layout_database(server, layout, opts["old_partitions"]))
            for layout in LAYOUTS
        }
        rates: dict[tuple[str, str], list[float]] = {(p, lay): [] for p in PROTOCOLS for lay in LAYOUTS}
        for r in range(opts["rounds"]):
            order = harness.rotated(LAYOUTS, r)  # two layouts: each round the other first
            for protocol, timed in PROTOCOLS.items():
                for layout in order:
                    rates[protocol, layout].append(timed(dbs[layout], opts["n"], opts["workers"], workdir))
            log(f"round {r + 1}: " + ", ".join(f"{p} {lay} {v[-1]:.0f}/s" for (p, lay), v in rates.items()))
    for protocol in PROTOCOLS:
        unpart, part = rates[protocol, "unpartitioned"], rates[protocol, "partitioned"]
        ratios = [p / u for p, u in zip(part, unpart, strict=True)]
        clock = (
            "warmed workers: submit -> all completed"
            if protocol == "warm"
            else "burst workers started after the submit: start -> all completed"
        )
        print(f"\n## hot path, {protocol}: workflows/s ({clock})\n")
        print("| round | unpartitioned | partitioned | partitioned/unpartitioned |")
        print("|---|---|---|---|")
        for i, (u, p) in enumerate(zip(unpart, part, strict=True), 1):
            print(f"| {i} | {u:.0f} | {p:.0f} | {p / u:.3f} |")
        print(
            f"| median of {len(ratios)} | {statistics.median(unpart):.0f} | "
            f"{statistics.median(part):.0f} | {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}) |"
        )
    print(f"\nload average after the hot path: {load_average()}")


def prune_table(server: str, rows: int, budget: float, layouts: tuple[str, ...]) -> None:
    results = [prune_phase(server, layout, rows, budget) for layout in reversed(layouts)]
    print(f"\n## prune --older-than 30d of {rows:,} finished workflows (one step each)\n")
    print("| layout | workflows | steps | partition intervals dropped | seconds |")
    print("|---|---|---|---|---|")
    for res in results:
        dropped = "-" if res.partitions is None else str(res.partitions)
        seconds = f"{res.seconds:.2f}"
        if not res.complete:  # the rate so far, and the whole at that rate
            rate = res.workflows / res.seconds
            seconds += (
                f" (stopped at the budget: {rate:,.0f} workflows/s; all {rows:,}: {rows / rate:,.0f} s)"
            )
        print(f"| {res.layout} | {res.workflows:,} | {res.steps:,} | {dropped} | {seconds} |")
    print(f"\nload average after the prune phase: {load_average()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server-dsn", default=os.environ.get("WFCTL_DSN"))
    parser.add_argument("--n", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--old-partitions", type=int)
    parser.add_argument("--prune-rows", type=int)
    parser.add_argument(
        "--prune-budget", type=float, default=0, help="seconds a prune may run (0: to the end); then the rate"
    )
    parser.add_argument(
        "--prune-layout",
        choices=(*LAYOUTS, "both"),
        default="both",
        help="the prune phase in one layout only",
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: for the test")
    args = parser.parse_args(argv)
    opts = dict(QUICK if args.quick else FULL)
    for key in opts:
        value = getattr(args, key)
        if value is not None:
            opts[key] = value
    return harness.frame("wfctl-bench-partitions-", False, lambda workdir: run(args, opts, workdir))


def run(args: argparse.Namespace, opts: dict[str, int], workdir: Path) -> int:
    with harness.server_dsn(args.server_dsn, workdir) as (server, _description):
        print(
            f"wfctl partitions benchmark: N={opts['n']} workflows x 3 no-op steps, W={opts['workers']} "
            f"workers, {opts['rounds']} round(s); partitioned: 8 intervals ahead + "
            f"{opts['old_partitions']} old, 1d each"
        )
        print(f"load average (1, 5, 15 min): {load_average()}")
        if opts["rounds"]:
            hot_path(server, opts, workdir)
        if opts["prune_rows"]:
            layouts = LAYOUTS if args.prune_layout == "both" else (args.prune_layout,)
            prune_table(server, opts["prune_rows"], args.prune_budget, layouts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
