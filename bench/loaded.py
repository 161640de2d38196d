"""Completion latency under a steady load: submit to completion of one-step workflows that arrive
at a fixed share of what W workers can do.

    python -m bench.loaded [--workers 4] [--load 0.5] [--rate R] [--calibrate 20000]
                           [--seconds 30] [--warmup 5] [--submitters 4] [--batch 1] [--rounds 1]
                           [--code REV|DIR] [--server-dsn DSN] [--timeout 120] [--keep] [--json]

Run from the repository root (``-m``: it imports bench/harness.py). For each side and round, in a
fresh database on the same server:

1. start W ``wfctl worker --app bench.noop_app`` processes (default options, an empty
   WFCTL_CONFIG) and wait until each has logged "ready" and has its row in ``workers``;
2. the capacity (unless ``--rate``): queue ``--calibrate`` one-step workflows in one statement
   and time their drain on the database's clock, first claim to last completion;
3. the load: ``--submitters`` processes, each on its own autocommit connection, submit one-step
   workflows one at a time with ``wfctl.submit`` at ``--load`` times the capacity (or ``--rate``)
   for ``--seconds``: submit i is due at t0 + i / rate in process i mod K, at once when late,
   never before it is due (``--batch B``: B runs a statement with ``wfctl.submit_many``, batch j
   due at t0 + j * B / rate);
4. wait until every run has completed, and read the figures from the database: submit to
   completion (``finished_at - created_at``: the group commit's transaction start minus the
   submit's) and submit to start (``started_at - created_at``), p50, p90, p99 and max, of the runs
   submitted after the first ``--warmup`` seconds of the load.

The workers' CPU over the load (utime + stime of their processes), per workflow and as a share of
the machine's CPUs, says how busy the load kept them. A submit rate that fell short of the one
asked by more than 5 % is reported as a problem: the load was then lighter than it says.
``--code REV|DIR`` (repeatable) adds a side whose workers run another wfctl source tree (a commit
``git archive``d into the work directory, or a directory) on that tree's schema; each side's
load is a share of its own capacity. See bench/README.md, "Latency under load".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import wfctl
from bench import harness
from bench.harness import BenchError, TreeSide, Workers, log
from wfctl.client import submit_many
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

WORKFLOW_TYPE = "noop3"  # bench/noop_app.py
STEPS = 1
POLL_EVERY = 0.1  # seconds between the monitor's polls
READY_TIMEOUT = 120.0  # seconds for the workers to come up
STOP_GRACE = 60.0  # seconds for the workers to exit after SIGTERM
LATE_MS = 5.0  # a submit this far behind its schedule counts as late
START_SLACK = 0.5  # seconds from the schedule's making to its first submit (the processes start)
SHORT_RATE = 0.95  # a submit rate below this share of the one asked is a problem
CLIENT = "wfctl-bench-loaded"  # application_name of the benchmark's sessions


@dataclass(frozen=True)
class Settings:
    workers: int
    load: float
    rate: float | None  # None: load x the measured capacity
    calibrate: int
    seconds: float
    warmup: float
    submitters: int
    batch: int
    timeout: float
    workdir: Path
    config: Path


@dataclass
class Phase:
    """One side in one round, in a fresh database."""

    side: str
    round: int
    database: str
    load1: float  # 1-minute load average at the start
    capacity: float | None = None  # workflows/s the workers drained in the capacity phase
    rate: float = 0.0  # the submit rate asked for
    submitted: int = 0
    submit_rate: float = 0.0  # achieved: the runs before the last batch over the span of their submits
    late_submits: int = 0
    runs: int = 0  # measured: completed, submitted after the warm-up
    claimed_again: int = 0
    done_p50_ms: float = 0.0
    done_p90_ms: float = 0.0
    done_p99_ms: float = 0.0
    done_max_ms: float = 0.0
    start_p50_ms: float = 0.0
    start_p99_ms: float = 0.0
    workers_cpu_ms: float = 0.0  # per workflow, over the load
    workers_busy: float = 0.0  # the workers' CPU over the load, as a share of the machine's CPUs
    ended_otherwise: int = 0  # failed or cancelled
    worker_exits: list[int | None] = field(default_factory=list)


# -- the phases ------------------------------------------------------------------------------------


def start_workers(side: TreeSide, dsn: str, settings: Settings, label: str) -> Workers:
    env = harness.isolated_env(side.code.env(), dsn, settings.config)
    pool = Workers(settings.workdir, label, None, side.code.root, env)
    pool.start(
        [*harness.wfctl_command(), "worker", "--app", "bench.noop_app", "--dsn", dsn], settings.workers
    )
    return pool


def workers_cpu(pool: Workers) -> float:
    return sum(harness.cpu_seconds(pid) for pid in pool.pids())


def measure_capacity(conn: psycopg.Connection[Any], pool: Workers, n: int, timeout: float) -> float:
    """Workflows/s the workers drain from a backlog of ``n`` one-step workflows."""
    harness.queue_noop(conn, n, STEPS)

    def drained() -> tuple[bool, str]:
        done = harness.completed(conn)
        return done >= n, f"{done:,} of {n:,} completed"

    harness.wait_for(drained, f"draining {n:,} queued runs", timeout, pool, POLL_EVERY)
    since = conn.execute(SQL["now"]).fetchone()
    assert since is not None
    row = conn.execute(SQL["drained"], {"type": WORKFLOW_TYPE, "since": since[0]}).fetchone()
    assert row is not None
    if not row[1]:
        raise BenchError("the capacity phase finished in no time: raise --calibrate")
    return float(row[0]) / float(row[1])


@dataclass
class Pacing:
    start: float = 0.0  # time.monotonic() the schedule starts at (its first run is due)
    first: float = float("inf")  # time.monotonic() at the first submit's start (every process's clock)
    last: float = 0.0  # and at the last one's
    late: int = 0
    errors: list[str] = field(default_factory=list)


def submit_share(
    dsn: str, k: int, processes: int, batches: int, batch: int, rate: float, t0: float
) -> Pacing:
    """Process k's share of the schedule: batches k, k + K, ... of ``batch`` runs, batch j due at
    t0 + j * batch / rate (one ``wfctl.submit`` a run, or one ``wfctl.submit_many`` a batch)."""
    share = Pacing()
    inputs = [json.dumps({"steps": STEPS})] * batch
    try:
        with psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as conn:
            for j in range(k, batches, processes):
                due = t0 + j * batch / rate
                now = time.monotonic()
                if now < due:
                    time.sleep(due - now)
                    now = time.monotonic()
                share.late += (now - due) * 1000.0 > LATE_MS
                share.first, share.last = min(share.first, now), max(share.last, now)
                if batch == 1:
                    wfctl.submit(conn, WORKFLOW_TYPE, {"steps": STEPS})
                else:
                    submit_many(conn, WORKFLOW_TYPE, inputs)
    except (wfctl.WfctlError, psycopg.Error) as exc:
        share.errors.append(f"submitter {k}: {harness.one_line(exc)}")
    return share


def submit_paced(dsn: str, n: int, rate: float, processes: int, batch: int) -> Pacing:
    """Submit n runs (a whole number of batches), batch j due at t0 + j * batch / rate, from
    ``processes`` processes (forked: one Python process cannot submit thousands a second),
    batch j from process j mod K."""
    t0 = time.monotonic() + START_SLACK  # every process connected by then
    batches = n // batch
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [
            pool.submit(submit_share, dsn, k, processes, batches, batch, rate, t0) for k in range(processes)
        ]
        shares = [f.result() for f in futures]
    pacing = Pacing(
        t0,
        min(s.first for s in shares),
        max(s.last for s in shares),
        sum(s.late for s in shares),
        [e for s in shares for e in s.errors],
    )
    if pacing.errors:
        raise BenchError("; ".join(pacing.errors))
    return pacing


def phase(side: TreeSide, dsn: str, number: int, settings: Settings) -> Phase:
    result = Phase(side.name, number, str(conninfo_to_dict(dsn).get("dbname") or ""), os.getloadavg()[0])
    label = f"round {number}, {side.name}"
    log(f"{label}: database {result.database}, starting {settings.workers} workers")
    with (
        start_workers(side, dsn, settings, f"{side.name.replace('@', '-')}-r{number}") as pool,
        psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as conn,
    ):
        harness.wait_ready(pool, label, READY_TIMEOUT, 0.1, harness.registered(dsn, CLIENT))
        if settings.rate is None:
            log(f"{label}: capacity: draining {settings.calibrate:,} queued one-step runs")
            result.capacity = measure_capacity(conn, pool, settings.calibrate, settings.timeout)
            result.rate = settings.load * result.capacity
        else:
            result.rate = settings.rate
        since_row = conn.execute(SQL["now"]).fetchone()
        assert since_row is not None
        since: datetime = since_row[0]
        since_at = time.monotonic()
        batch = settings.batch
        n = batch * max(2, round(result.rate * settings.seconds / batch))
        log(
            f"{label}: capacity {harness.num(result.capacity)}/s; submitting {n:,} at {result.rate:,.0f}/s "
            f"from {settings.submitters} processes"
        )
        cpu_before, began = workers_cpu(pool), time.perf_counter()
        pacing = submit_paced(dsn, n, result.rate, settings.submitters, batch)

        def finished() -> tuple[bool, str]:
            row = conn.execute(SQL["progress"], {"type": WORKFLOW_TYPE, "since": since}).fetchone()
            assert row is not None
            result.ended_otherwise = int(row[1])
            return int(row[0]) + int(row[1]) >= n, f"{row[0]:,} of {n:,} completed, {row[1]} ended otherwise"

        harness.wait_for(
            finished, f"waiting for the {n:,} submitted runs", settings.timeout, pool, POLL_EVERY
        )
        cpu, wall = workers_cpu(pool) - cpu_before, time.perf_counter() - began
        result.worker_exits = pool.terminate(STOP_GRACE)
        # the warm-up counts from the schedule's start, on the database's clock
        measured_from = since + timedelta(seconds=pacing.start - since_at + settings.warmup)
        row = conn.execute(SQL["latencies"], {"type": WORKFLOW_TYPE, "since": measured_from}).fetchone()
    assert row is not None
    result.submitted = n
    # the first submit's start to the last one's spans every batch but the last
    spanned = pacing.last - pacing.first
    result.submit_rate = round((n - batch) / spanned, 1) if spanned > 0 else 0.0
    result.late_submits = pacing.late
    result.runs, result.claimed_again = int(row[0]), int(row[1])
    (
        result.done_p50_ms,
        result.done_p90_ms,
        result.done_p99_ms,
        result.done_max_ms,
        result.start_p50_ms,
        result.start_p99_ms,
    ) = (round(v or 0.0, 2) for v in row[2:8])
    result.workers_cpu_ms = round(cpu * 1000.0 / n, 3)
    result.workers_busy = round(cpu / (wall * (os.cpu_count() or 1)), 3)
    log(
        f"{label}: {result.submit_rate:,.0f} submits/s; submit to completion "
        f"p50 {result.done_p50_ms:.1f} ms, "
        f"p99 {result.done_p99_ms:.1f} ms, max {result.done_max_ms:.1f} ms; the workers exited "
        f"{sorted(set(result.worker_exits), key=str)}"
    )
    return result


# -- the report ------------------------------------------------------------------------------------


def problems_of(phases: list[Phase]) -> list[str]:
    problems = []
    for p in phases:
        where = f"round {p.round}, {p.side}"
        if p.ended_otherwise:
            problems.append(f"{where}: {p.ended_otherwise} runs failed or were cancelled")
        if p.submit_rate < SHORT_RATE * p.rate:
            problems.append(
                f"{where}: submitted at {p.submit_rate:,.0f}/s of the {p.rate:,.0f}/s asked "
                "(add --submitters)"
            )
        if any(code != 0 for code in p.worker_exits):
            problems.append(f"{where}: the workers exited {p.worker_exits} after SIGTERM")
    return problems


def report(
    args: argparse.Namespace, sides: list[TreeSide], info: harness.Server, phases: list[Phase]
) -> list[str]:
    problems = problems_of(phases)
    if args.json:
        out = {
            "workers": args.workers,
            "load": args.load,
            "seconds": args.seconds,
            "warmup": args.warmup,
            "submitters": args.submitters,
            "batch": args.batch,
            "cpus": os.cpu_count(),
            "server": dataclasses.asdict(info),
            "sides": {s.name: s.code.label for s in sides},
            "phases": [dataclasses.asdict(p) for p in phases],
            "problems": problems,
        }
        print(json.dumps(out, indent=2))
        return problems
    asked = f"{args.rate:,.0f}/s" if args.rate is not None else f"{args.load:g} x the capacity"
    print(
        f"\nwfctl latency under load: {args.workers} workers (default options), one-step workflows "
        f"submitted at {asked} for {args.seconds:g} s from {args.submitters} processes, "
        f"{args.batch} a statement, the first "
        f"{args.warmup:g} s not counted; {os.cpu_count()} CPUs"
    )
    print(harness.server_line(info))
    print()
    header = [
        "round: side",
        "capacity/s",
        "submits/s",
        "runs",
        "done p50 ms",
        "p90",
        "p99",
        "max",
        "start p50 ms",
        "p99",
        "workers CPU ms/wf",
        "busy",
    ]
    rows = [
        [
            f"{p.round}: {p.side}",
            harness.num(p.capacity),
            harness.num(p.submit_rate),
            f"{p.runs:,}",
            f"{p.done_p50_ms:.1f}",
            f"{p.done_p90_ms:.1f}",
            f"{p.done_p99_ms:.1f}",
            f"{p.done_max_ms:.1f}",
            f"{p.start_p50_ms:.1f}",
            f"{p.start_p99_ms:.1f}",
            f"{p.workers_cpu_ms:.3f}",
            f"{p.workers_busy:.0%}",
        ]
        for p in phases
    ]
    harness.table(header, rows)
    harness.verdict("runs and submits", problems)
    return problems


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loaded",
        description="Completion latency of one-step workflows arriving at a steady share of the "
        "workers' capacity (see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument(
        "--load", type=float, default=0.5, help="share of the capacity to submit (default 0.5)"
    )
    parser.add_argument("--rate", type=float, help="submits/s instead of a share of a measured capacity")
    parser.add_argument(
        "--calibrate", type=int, default=20000, help="queued runs that measure the capacity (default 20000)"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts (default 30)")
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds of the load not counted (default 5)"
    )
    parser.add_argument(
        "--submitters", type=int, default=4, help="submitting processes, a connection each (default 4)"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="runs per submit: 1 submits each with wfctl.submit, more with wfctl.submit_many (default 1)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every side (default 1)")
    harness.add_code(parser, "the workers", "the submitter")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds a drain or the load's end may take (default 120)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if min(args.workers, args.submitters, args.batch, args.rounds, args.calibrate) < 1:
        parser.error("--workers, --submitters, --batch, --rounds and --calibrate must be at least 1")
    if not 0 < args.load <= 1 or (args.rate is not None and args.rate <= 0):
        parser.error("--load must be in (0, 1] and --rate positive")
    if args.seconds <= 0 or not 0 <= args.warmup < args.seconds or args.timeout <= 0:
        parser.error("--seconds and --timeout must be positive, --warmup shorter than --seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-loaded-", args.keep, lambda workdir: run(args, workdir))


def run(args: argparse.Namespace, workdir: Path) -> int:
    config = harness.empty_config(workdir, "bench/loaded.py")
    settings = Settings(
        args.workers,
        args.load,
        args.rate,
        args.calibrate,
        args.seconds,
        args.warmup,
        args.submitters,
        args.batch,
        args.timeout,
        workdir,
        config,
    )
    sides = harness.tree_sides(args.code, workdir)
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        trees = harness.Trees(workdir, stack)
        phases: list[Phase] = []
        for number in range(1, args.rounds + 1):
            for side in sides:
                with harness.tree_database(server, "loaded", args.keep, side.schema_code, trees) as dsn:
                    phases.append(phase(side, dsn, number, settings))
    problems = report(args, sides, info, phases)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
