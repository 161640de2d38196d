"""Durable-execution benchmark: wfctl against a naive worker for the reference design.

    python bench/run.py [-n 2000] [-s 3] [-w 4] [--concurrency 8] [--server-dsn DSN | --dsn DSN]

In one run, for each side (``bench/naive.py``, then ``wfctl worker --app bench.noop_app``):

1. enqueue N workflows of S no-op steps (naive: plain INSERTs; wfctl: ``wfctl submit --input-file``);
2. start W worker processes that exit once nothing is runnable, and time them from their start
   until all N are completed: workflows/s and steps/s;
3. verify: N workflows completed, each claimed once, N*S step rows;
4. with one idle worker, submit workflows one at a time (each in its own transaction, the next
   after the previous completed, after a random pause) and take ``started_at - created_at`` from
   the workflows table (both the database's clock): submit-to-start p50/p99;
5. peak RSS of every worker process (VmRSS from /proc, sampled while they run).

Before that, ``pgbench`` measures how many single-row INSERT transactions per second the server
commits (bench/pgbench_commit.sql): the physical ceiling. The report is a Markdown table with the
ratio wfctl/naive, and whether the targets are met. See bench/README.md.

Where the databases come from:
- default: a durable embedded PostgreSQL (fsync and synchronous_commit on) in a temporary
  directory, stopped and deleted at the end;
- ``--server-dsn DSN`` (or ``WFCTL_DSN``): fresh databases ``wfctl_bench_{naive,wfctl}_<rand>``
  created there with CREATE DATABASE and dropped at the end (the role needs CREATEDB);
- ``--dsn DSN``: both sides in that one existing database, kept apart by workflow type (naive3,
  noop3); the rows of those types are deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

if not __package__:  # python bench/run.py: the tree's root on the path, for bench.harness
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.harness import BENCH, REPO, BenchError, log, wfctl_command

# Targets (2-core machine, N=2000, S=3, W=4).
TARGET_RATIO = 5.0  # wfctl workflows/s over naive workflows/s, at least
TARGET_P50_MS = 5.0  # wfctl submit-to-start p50, under
TARGET_RSS_MB = 80.0  # wfctl peak RSS per worker process, under

POLL = 0.02  # seconds between progress polls of the throughput phase
WARMUP = 3  # latency-phase workflows submitted first and not counted (worker start-up)


@dataclass
class Options:
    n: int
    steps: int
    workers: int
    concurrency: int
    latency_count: int
    timeout: float
    workdir: Path
    seed: int
    worker_args: list[str] = field(default_factory=list)  # extra `wfctl worker` options
    settle: float = 1.0  # seconds after the workers exit, before the statistics are read


# -- the two sides ---------------------------------------------------------------------------


class Side:
    name: str
    workflow_type: str
    cwd: Path = REPO  # where its processes run: the source tree whose wfctl and bench they import
    env: dict[str, str] | None = None  # their environment (None: the benchmark's own)

    def enqueue(self, dsn: str, opts: Options) -> None:
        raise NotImplementedError

    def worker_command(self, dsn: str, opts: Options, *, burst: bool) -> list[str]:
        raise NotImplementedError

    def submit_one(self, conn: psycopg.Connection[Any], steps: int) -> UUID:
        raise NotImplementedError


class NaiveSide(Side):
    name = "naive"
    workflow_type = "naive3"

    def enqueue(self, dsn: str, opts: Options) -> None:
        # the reference design's plain INSERT, N of them in one transaction
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s)",
                [(self.workflow_type, Jsonb({"steps": opts.steps}))] * opts.n,
            )

    def worker_command(self, dsn: str, opts: Options, *, burst: bool) -> list[str]:
        cmd = [sys.executable, str(BENCH / "naive.py"), "--dsn", dsn, "--type", self.workflow_type]
        return [*cmd, "--exit-when-idle"] if burst else cmd

    def submit_one(self, conn: psycopg.Connection[Any], steps: int) -> UUID:
        row = conn.execute(
            "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s) RETURNING id",
            (self.workflow_type, Jsonb({"steps": steps})),
        ).fetchone()
        assert row is not None
        return row[0]


class WfctlSide(Side):
    name = "wfctl"
    workflow_type = "noop3"  # registered by bench/noop_app.py

    def enqueue(self, dsn: str, opts: Options) -> None:
        path = opts.workdir / "wfctl-input.jsonl"
        path.write_text("".join(json.dumps({"steps": opts.steps}) + "\n" for _ in range(opts.n)), "utf-8")
        cmd = [*wfctl_command(), "submit", self.workflow_type, "--input-file", str(path), "--dsn", dsn]
        done = subprocess.run(
            cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise BenchError(f"wfctl submit failed (exit {done.returncode}): {done.stderr.strip()}")
        submitted = len(done.stdout.split())
        if submitted != opts.n:
            raise BenchError(f"wfctl submit printed {submitted} ids, expected {opts.n}")

    def worker_command(self, dsn: str, opts: Options, *, burst: bool) -> list[str]:
        cmd = [
            *wfctl_command(),
            "worker",
            "--app",
            "bench.noop_app",
            "--concurrency",
            str(opts.concurrency),
            "--dsn",
            dsn,
            *opts.worker_args,
        ]
        return [*cmd, "--burst"] if burst else cmd

    def submit_one(self, conn: psycopg.Connection[Any], steps: int) -> UUID:
        import wfctl

        return wfctl.submit(conn, self.workflow_type, {"steps": steps})


def wfctl_worker_available() -> bool:
    done = subprocess.run([*wfctl_command(), "worker", "--help"], cwd=REPO, capture_output=True)
    return done.returncode == 0


# -- processes and their memory ----------------------------------------------------------------
@dataclass
class Verification:
    workflows: int
    completed: int
    claimed_more_than_once: int
    step_rows: int
    steps_completed: int
    workflows_with_wrong_step_count: int
    worker_exit_codes: list[int | None]
    ok: bool = False


def verify(
    conn: psycopg.Connection[Any], workflow_type: str, n: int, steps: int, codes: list[int | None]
) -> Verification:
    """The throughput phase's runs of one type: n completed, each claimed once, with steps rows
    numbered 1..steps, all completed; and every worker exited 0."""
    row = conn.execute(
        """
        SELECT count(*),
               count(*) FILTER (WHERE status = 'completed'),
               count(*) FILTER (WHERE lease_epoch > 1 OR attempt > 1)
        FROM workflows WHERE workflow_type = %s
        """,
        (workflow_type,),
    ).fetchone()
    step_rows = conn.execute(
        """
        SELECT count(*), count(*) FILTER (WHERE s.status = 'completed')
        FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id
        WHERE w.workflow_type = %s
        """,
        (workflow_type,),
    ).fetchone()
    wrong = conn.execute(
        """
        SELECT count(*) FROM (
            SELECT w.id FROM workflows w LEFT JOIN workflow_steps s ON s.workflow_id = w.id
            WHERE w.workflow_type = %s
            GROUP BY w.id
            HAVING count(s.id) <> %s OR min(s.step_number) <> 1 OR max(s.step_number) <> %s
        ) AS bad
        """,
        (workflow_type, steps, steps),
    ).fetchone()
    assert row is not None and step_rows is not None and wrong is not None
    result = Verification(row[0], row[1], row[2], step_rows[0], step_rows[1], wrong[0], codes)
    result.ok = (
        result.workflows == n
        and result.completed == n
        and result.claimed_more_than_once == 0
        and result.step_rows == n * steps
        and result.steps_completed == n * steps
        and result.workflows_with_wrong_step_count == 0
        and all(code == 0 for code in codes)
    )
    return result


# -- the phases -------------------------------------------------------------------------------


@dataclass
class SideResult:
    side: str
    wall_s: float = 0.0
    workflows_per_s: float = 0.0
    steps_per_s: float = 0.0
    span_s: float | None = None  # first claim to last completion, database clock
    steady_workflows_per_s: float | None = None  # N / span_s: throughput once workers run
    xacts_per_workflow: float | None = None
    wal_flushes_per_workflow: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    latency_samples: int = 0
    peak_rss_mb: float | None = None  # max over the side's worker processes
    rss_mb_per_worker: list[float] = field(default_factory=list)
    verification: Verification | None = None


def throughput(side: Side, dsn: str, opts: Options, sampler: harness.RssSampler, result: SideResult) -> None:
    log(f"{side.name}: enqueueing {opts.n} workflows of {opts.steps} steps")
    side.enqueue(dsn, opts)
    harness.prepare_tables(dsn)
    monitor = psycopg.connect(dsn, autocommit=True)
    monitor_xacts = 2  # the two reads just below
    with harness.Workers(opts.workdir, f"{side.name}-burst", sampler, side.cwd, side.env) as workers:
        try:
            commits_before = harness.xact_commits(monitor)
            flushes_before = harness.wal_flushes(monitor)
            cmd = side.worker_command(dsn, opts, burst=True)
            log(f"{side.name}: starting {opts.workers} workers: {' '.join(cmd)}")
            start = time.monotonic()
            workers.start(cmd, opts.workers)

            def completed() -> tuple[bool, str]:
                row = monitor.execute(
                    "SELECT count(*) FROM workflows WHERE workflow_type = %s AND status = 'completed'",
                    (side.workflow_type,),
                ).fetchone()
                done = row[0] if row else 0
                return done >= opts.n, f"{done}/{opts.n} completed"

            monitor_xacts += harness.wait_for(completed, side.name, opts.timeout, workers, POLL, burst=True)
            result.wall_s = time.monotonic() - start
            codes = workers.wait(60.0)
            if any(code is None for code in codes):
                log(f"{side.name}: workers still running 60 s after the last completion; stopping them")
                codes = workers.terminate()
        finally:
            monitor.close()
    time.sleep(opts.settle)  # exited backends have flushed their statistics by now
    with psycopg.connect(dsn, autocommit=True) as conn:
        commits_after = harness.xact_commits(conn)
        flushes_after = harness.wal_flushes(conn)
        result.verification = verify(conn, side.workflow_type, opts.n, opts.steps, codes)
        span = conn.execute(
            """
            SELECT extract(epoch FROM max(coalesce(finished_at, updated_at)) - min(started_at))
            FROM workflows WHERE workflow_type = %s
            """,
            (side.workflow_type,),
        ).fetchone()
    result.workflows_per_s = opts.n / result.wall_s
    result.steps_per_s = opts.n * opts.steps / result.wall_s
    result.span_s = float(span[0]) if span and span[0] is not None else None
    if result.span_s:
        result.steady_workflows_per_s = opts.n / result.span_s
    result.xacts_per_workflow = (commits_after - commits_before - monitor_xacts) / opts.n
    if flushes_before is not None and flushes_after is not None:
        result.wal_flushes_per_workflow = (flushes_after - flushes_before) / opts.n
    log(
        f"{side.name}: {opts.n} workflows in {result.wall_s:.2f} s = {result.workflows_per_s:.0f}/s; "
        f"verification {'ok' if result.verification.ok else 'FAILED'}"
    )


def latency(side: Side, dsn: str, opts: Options, sampler: harness.RssSampler, result: SideResult) -> None:
    if opts.latency_count <= 0:
        return
    rng = random.Random(opts.seed)
    harness.prepare_tables(dsn)
    log(f"{side.name}: submit-to-start latency, {opts.latency_count} workflows one at a time")
    with harness.Workers(opts.workdir, f"{side.name}-idle", sampler, side.cwd, side.env) as workers:
        workers.start(side.worker_command(dsn, opts, burst=False))
        ids: list[UUID] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(WARMUP + opts.latency_count):
                # a random pause, so that a polling worker is met at a random point of its cycle
                time.sleep(rng.uniform(0.02, 0.12))
                workflow_id = side.submit_one(conn, opts.steps)
                harness.wait_finished(conn, workflow_id, 60.0 if i < WARMUP else 30.0, workers)
                if i >= WARMUP:
                    ids.append(workflow_id)
            rows = conn.execute(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM workflows WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
        codes = workers.terminate()
        if any(code not in (0, -signal.SIGTERM) for code in codes):
            log(f"{side.name}: the idle worker exited with {codes} after SIGTERM")
    samples = sorted(float(r[0]) for r in rows)
    result.latency_samples = len(samples)
    result.latency_p50_ms = statistics.median(samples)
    result.latency_p99_ms = statistics.quantiles(samples, n=100, method="inclusive")[98]
    result.latency_max_ms = samples[-1]
    log(
        f"{side.name}: submit-to-start p50 {result.latency_p50_ms:.2f} ms, p99 {result.latency_p99_ms:.2f} ms"
    )


def run_side(side: Side, dsn: str, opts: Options) -> SideResult:
    result = SideResult(side.name)
    sampler = harness.RssSampler()
    sampler.start()
    try:
        throughput(side, dsn, opts, sampler, result)
        latency(side, dsn, opts, sampler, result)
    finally:
        sampler.stop()
    result.rss_mb_per_worker = [round(kb / 1024, 1) for kb in sampler.peaks.values()]
    result.peak_rss_mb = max(result.rss_mb_per_worker, default=None)
    return result


def report(
    results: dict[str, SideResult],
    server: harness.Server,
    opts: Options,
    ceiling: float | None,
    pgbench_args: str,
) -> list[tuple[str, bool]]:
    naive, ours = results.get("naive"), results.get("wfctl")
    extra = "".join(f" {shlex.quote(a)}" for a in opts.worker_args)
    print(
        f"\nwfctl benchmark: N={opts.n} workflows x S={opts.steps} no-op steps, W={opts.workers} worker "
        f"processes (wfctl --concurrency {opts.concurrency}{extra}), {os.cpu_count()} CPUs"
    )
    print(harness.server_line(server))
    if ceiling is not None:
        print(
            f"commit ceiling: pgbench {pgbench_args}, one single-row INSERT per transaction: "
            f"{ceiling:,.0f} tps"
        )
    print()
    columns = [name for name in ("naive", "wfctl") if name in results]
    header = ["figure", *columns] + (["wfctl/naive"] if len(columns) == 2 else [])
    rows: list[list[str]] = []

    def add(label: str, values: list[str], ratio: float | None = None) -> None:
        line = [label, *values]
        if len(columns) == 2:
            line.append("" if ratio is None else f"**{ratio:.2f}x**")
        rows.append(line)

    def per(attr: str, digits: int = 0, scale: float = 1.0) -> list[str]:
        out = []
        for name in columns:
            value = getattr(results[name], attr)
            out.append(harness.num(None if value is None else value * scale, digits))
        return out

    def ratio(attr: str) -> float | None:
        return harness.ratio(getattr(ours, attr), getattr(naive, attr)) if naive and ours else None

    add("workflows/s (workers start -> all completed)", per("workflows_per_s"), ratio("workflows_per_s"))
    add(
        "workflows/s, steady (first claim -> last completion)",
        per("steady_workflows_per_s"),
        ratio("steady_workflows_per_s"),
    )
    add("steps/s", per("steps_per_s"), ratio("steps_per_s"))
    add("wall time, workers start -> all completed (s)", per("wall_s", 2))
    add("first claim -> last completion, DB clock (s)", per("span_s", 2))
    add("submit-to-start p50, idle worker (ms)", per("latency_p50_ms", 2))
    add("submit-to-start p99, idle worker (ms)", per("latency_p99_ms", 2))
    add("peak RSS per worker process (MB)", per("peak_rss_mb", 1))
    add("transactions per workflow (pg_stat_database)", per("xacts_per_workflow", 2))
    add("WAL flushes per workflow (server-wide)", per("wal_flushes_per_workflow", 2))
    if ceiling is not None:
        add(
            "ceiling / transactions per workflow (workflows/s)",
            [
                harness.num(ceiling / r.xacts_per_workflow if r.xacts_per_workflow else None)
                for r in results.values()
            ],
        )
    add(
        "completed / N",
        [f"{r.verification.completed}/{opts.n}" if r.verification else "n/a" for r in results.values()],
    )
    add(
        "step rows / N*S",
        [
            f"{r.verification.step_rows}/{opts.n * opts.steps}" if r.verification else "n/a"
            for r in results.values()
        ],
    )
    add(
        "claimed more than once",
        [str(r.verification.claimed_more_than_once) if r.verification else "n/a" for r in results.values()],
    )
    harness.table(header, rows)

    checks: list[tuple[str, bool]] = []
    if naive and ours:
        steady = harness.ratio(ours.steady_workflows_per_s, naive.steady_workflows_per_s) or 0.0
        wall = harness.ratio(ours.workflows_per_s, naive.workflows_per_s) or 0.0
        checks.append(
            (
                f"wfctl workflows/s >= {TARGET_RATIO:g}x naive, steady state: {steady:.2f}x "
                f"(including worker start-up: {wall:.2f}x)",
                steady >= TARGET_RATIO,
            )
        )
    if ours and ours.latency_p50_ms is not None:
        checks.append(
            (
                f"wfctl submit-to-start p50 < {TARGET_P50_MS:g} ms: {ours.latency_p50_ms:.2f} ms",
                ours.latency_p50_ms < TARGET_P50_MS,
            )
        )
    if ours and ours.peak_rss_mb is not None:
        checks.append(
            (
                f"wfctl worker RSS < {TARGET_RSS_MB:g} MB: {ours.peak_rss_mb:.1f} MB",
                ours.peak_rss_mb < TARGET_RSS_MB,
            )
        )
    for text, met in checks:
        print(f"target {'MET   ' if met else 'MISSED'} {text}")
    for r in results.values():
        v = r.verification
        print(
            f"verification {r.side}: {'OK' if v and v.ok else 'FAILED'}"
            + ("" if v is None or v.ok else f" {asdict(v)}")
        )
    return checks


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="Benchmark wfctl against a naive worker of the reference design (see bench/README.md).",
    )
    harness.add_server_dsn(
        parser,
        "create fresh databases on this server (default: $WFCTL_DSN, else a durable embedded server)",
        dsn_help="run both sides in this one existing database (types naive3, noop3)",
    )
    parser.add_argument("-n", type=int, default=2000, help="workflows per side (default 2000)")
    parser.add_argument("-s", "--steps", type=int, default=3, help="no-op steps per workflow (default 3)")
    parser.add_argument("-w", "--workers", type=int, default=4, help="worker processes per side (default 4)")
    parser.add_argument("--concurrency", type=int, default=8, help="wfctl worker --concurrency (default 8)")
    parser.add_argument(
        "--latency-count",
        type=int,
        default=200,
        help="workflows of the submit-to-start measurement (default 200; 0 skips it)",
    )
    parser.add_argument("--pgbench-seconds", type=int, default=10, help="pgbench -T (default 10; 0 skips it)")
    parser.add_argument("--pgbench-clients", type=int, default=4, help="pgbench -c (default 4)")
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help="extra options for `wfctl worker`, one shell-quoted string: --worker-args=--quiet",
    )
    parser.add_argument("--only", choices=["naive", "wfctl"], help="run one side only")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per throughput phase")
    parser.add_argument("--seed", type=int, default=1, help="seed of the latency phase's random pauses")
    parser.add_argument("--keep", action="store_true", help="keep the databases, rows and worker logs")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON on stdout")
    args = parser.parse_args(argv)
    if min(args.n, args.steps, args.workers, args.concurrency) < 1:
        parser.error("-n, -s, -w and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sides: list[Side] = [s for s in (NaiveSide(), WfctlSide()) if args.only in (None, s.name)]
    if any(isinstance(s, WfctlSide) for s in sides) and not wfctl_worker_available():
        log(
            "`wfctl worker` is not available in this wfctl (`wfctl worker --help` fails); "
            "run with --only naive"
        )
        return 2
    return harness.frame("wfctl-bench-", args.keep, lambda workdir: run(args, sides, workdir))


def run(args: argparse.Namespace, sides: list[Side], workdir: Path) -> int:
    opts = Options(
        args.n,
        args.steps,
        args.workers,
        args.concurrency,
        args.latency_count,
        args.timeout,
        workdir,
        args.seed,
        shlex.split(args.worker_args),
    )
    results: dict[str, SideResult] = {}
    ceiling: float | None = None
    with contextlib.ExitStack() as stack:
        server_dsn = ""
        if args.dsn:
            description = "the database given by --dsn"
        else:
            server_dsn, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        server = harness.describe_server(args.dsn or server_dsn, description)
        harness.warn_if_not_durable(server)
        if args.pgbench_seconds > 0:
            if args.dsn:
                ceiling = harness.pgbench(args.dsn, args.pgbench_seconds, args.pgbench_clients)
            else:
                with harness.fresh_database(server_dsn, "pgbench", keep=False, install=False) as dsn:
                    ceiling = harness.pgbench(dsn, args.pgbench_seconds, args.pgbench_clients)
            log(f"pgbench: {ceiling:,.0f} tps")
        if args.dsn:
            types = [s.workflow_type for s in sides]
            shared = stack.enter_context(harness.shared_database(args.dsn, types, args.keep))
        for side in sides:
            if args.dsn:
                dsn = shared
            else:
                dsn = stack.enter_context(harness.fresh_database(server_dsn, side.name, args.keep))
            results[side.name] = run_side(side, dsn, opts)
    pgbench_args = f"-c {args.pgbench_clients} -j {min(2, args.pgbench_clients)} -T {args.pgbench_seconds}"
    report(results, server, opts, ceiling, pgbench_args)
    if args.json:
        print(
            json.dumps(
                {
                    "options": {k: v for k, v in asdict(opts).items() if k != "workdir"},
                    "server": asdict(server),
                    "pgbench_tps": ceiling,
                    "results": {k: asdict(v) for k, v in results.items()},
                },
                indent=2,
            )
        )
    return 0 if all(r.verification and r.verification.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
