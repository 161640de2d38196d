"""Start latency: submit-to-result of a one-step workflow on an idle worker, one run at a time.

    python -m bench.latency [-n 1000] [--poll 30s] [--rounds 1] [--server-dsn DSN]
                            [--code REV|DIR] [--timeout S] [--keep] [--json]

Run from the repository root (``-m``: it imports bench/harness.py, the benchmarks' harness).
One ``wfctl worker --app bench.noop_app --poll 30s`` (otherwise default options) serves a fresh
database; once it is ready (its "ready" line and its row in ``workers``), the client, on ONE
autocommit psycopg connection, runs 20 uncounted warm-up runs and then N times::

    t0 = time.perf_counter()
    wid = wfctl.submit(conn, "noop3", {"steps": 1})
    wfctl.result(conn, wid, timeout=...)
    t1 = time.perf_counter()

and reports p50, p90, p99 and max of t1 - t0 (ms), and how many runs took longer than 50 ms and
than half the poll interval (a run that long was most likely picked up by the worker's poll, not
by its LISTEN). The long default poll makes a missed wake-up visible instead of hiding it behind
the default 1 s poll. A run that is not finished after --timeout (default: the poll + 30 s) is an
error, not a hang.

``--code REV|DIR`` (repeatable) adds a side whose worker runs another wfctl source tree (a commit
of this repository, ``git archive``d into the work directory, or a directory) with that tree's
schema; the client (submit, result) is always this tree's library. ``--rounds R`` interleaves the
sides round by round (A1, B1, A2, B2, ...), each round in a fresh database on the same server.
See bench/README.md, "Start latency".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import wfctl
from bench import harness
from bench.harness import BenchError, TreeSide, log
from wfctl.durations import as_seconds, parse_duration

WORKFLOW_TYPE = "noop3"  # bench/noop_app.py
STEPS = 1
EXPECTED_OUTPUT = {"ok": True}  # what noop3 returns
WARMUP = 20  # runs per round before the measured ones, not counted
SLOW_MS = 50.0  # runs longer than this are counted
EXTRA_TIMEOUT = 30.0  # the default per-run timeout: the poll interval plus this
CHECK_EVERY = 5.0  # seconds: the longest wfctl.result() waits before the worker is checked on
READY_TIMEOUT = 120.0  # seconds for the worker to come up (a loaded machine starts Python slowly)
STOP_GRACE = 60.0  # seconds for the worker to exit after SIGTERM
CLIENT = "wfctl-bench-latency"  # application_name of the benchmark's sessions


def side_label(side: TreeSide, poll: str) -> str:
    return f"wfctl worker from {side.code.label}, --poll {poll}, otherwise default options"


# -- the worker ------------------------------------------------------------------------------------


def start_worker(side: TreeSide, dsn: str, settings: Settings, label: str) -> harness.Workers:
    """One ``wfctl worker --poll P`` of the side's tree: the tree's root as its working directory
    and on PYTHONPATH (``--app bench.noop_app`` imports that tree's bench/noop_app.py, ``-m wfctl``
    its wfctl); no WFCTL_* variable of this environment, the database in WFCTL_DSN (and --dsn),
    the config file an empty one."""
    env = harness.isolated_env(side.code.env(), dsn, settings.config)
    worker = harness.Workers(settings.workdir, label, None, side.code.root, env)
    command = [*harness.wfctl_command(), "worker", "--app", "bench.noop_app", "--poll", settings.poll]
    worker.start([*command, "--dsn", dsn])
    return worker


# -- the runs --------------------------------------------------------------------------------------


def one_run(conn: psycopg.Connection[Any], side: str, worker: harness.Workers, timeout: float) -> float:
    """Submit one run and wait for its result: the milliseconds between the two."""
    t0 = time.perf_counter()
    wid = wfctl.submit(conn, WORKFLOW_TYPE, {"steps": STEPS})
    deadline = t0 + timeout
    while True:
        # in slices, so that a worker that died is noticed before the timeout (a run finished
        # within the first slice, every run of a healthy worker, is one call)
        left = deadline - time.perf_counter()
        try:
            output = wfctl.result(conn, wid, timeout=max(0.01, min(CHECK_EVERY, left)))
            break
        except wfctl.WaitTimeout:
            if not worker.alive():
                raise BenchError(
                    f"{side}: the worker exited ({worker.procs[0].returncode}) while run {wid} "
                    f"waited: {worker.last_line(0)} (log {worker.logs[0]})"
                ) from None
            if time.perf_counter() >= deadline:
                raise BenchError(
                    f"{side}: run {wid} not finished after {timeout:g} s (log {worker.logs[0]})"
                ) from None
    t1 = time.perf_counter()
    if output != EXPECTED_OUTPUT:
        raise BenchError(f"{side}: run {wid} returned {output!r}, not {EXPECTED_OUTPUT!r}")
    return (t1 - t0) * 1000.0


def percentile(ordered: list[float], p: float) -> float:
    """The p-th percentile of sorted values, interpolated between the closest ranks (the first
    value is the 0th, the last the 100th)."""
    k = (len(ordered) - 1) * p / 100.0
    low = math.floor(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


@dataclass
class Figures:
    n: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    over_50ms: int
    over_half_poll: int

    @classmethod
    def of(cls, samples: list[float], half_poll_ms: float) -> Figures:
        ordered = sorted(samples)
        return cls(
            len(ordered),
            round(percentile(ordered, 50), 2),
            round(percentile(ordered, 90), 2),
            round(percentile(ordered, 99), 2),
            round(ordered[-1], 2),
            sum(1 for v in ordered if v > SLOW_MS),
            sum(1 for v in ordered if v > half_poll_ms),
        )


@dataclass
class Phase:
    """One side in one round, in a fresh database."""

    side: str
    round: int
    database: str
    load1: float  # 1-minute load average at the start
    ready_s: float = 0.0  # from the worker's start until it was ready
    figures: Figures | None = None
    slow_runs: list[tuple[int, float]] = field(default_factory=list)  # (run 1..N, ms) over SLOW_MS
    warmup_max_ms: float = 0.0  # the uncounted warm-up runs: the slowest
    warmup_over_50ms: int = 0  # and how many took longer than SLOW_MS
    worker_exit: int | None = None  # after SIGTERM (None: killed after STOP_GRACE)
    samples_ms: list[float] = field(default_factory=list)


@dataclass
class Settings:
    n: int
    poll: str
    poll_s: float
    timeout: float
    workdir: Path
    config: Path


def phase(side: TreeSide, dsn: str, number: int, rounds: int, settings: Settings) -> Phase:
    result = Phase(side.name, number, conninfo_to_dict(dsn).get("dbname") or "", os.getloadavg()[0])
    label = f"round {number}/{rounds}, {side.name}"
    log(f"{label}: database {result.database}, starting `wfctl worker --poll {settings.poll}`")
    samples: list[float] = []
    warmup: list[float] = []
    with start_worker(side, dsn, settings, f"{side.name.replace('@', '-')}-r{number}") as worker:
        with _library_errors(side.name):
            registered = harness.registered(dsn, CLIENT)
            result.ready_s = harness.wait_ready(worker, side.name, READY_TIMEOUT, 0.05, registered)
        log(f"{label}: ready after {result.ready_s:.2f} s; {WARMUP} warm-up runs, then {settings.n}")
        with (
            _library_errors(side.name),
            psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as conn,
        ):
            warmup = [one_run(conn, side.name, worker, settings.timeout) for _ in range(WARMUP)]
            for _ in range(settings.n):
                samples.append(one_run(conn, side.name, worker, settings.timeout))
        (result.worker_exit,) = worker.terminate(STOP_GRACE)
    result.samples_ms = samples
    result.warmup_max_ms = round(max(warmup), 2)
    result.warmup_over_50ms = sum(1 for v in warmup if v > SLOW_MS)
    result.figures = Figures.of(samples, 500.0 * settings.poll_s)
    result.slow_runs = [(i + 1, round(v, 2)) for i, v in enumerate(samples) if v > SLOW_MS]
    f = result.figures
    log(
        f"{label}: p50 {f.p50_ms:.2f} ms, p99 {f.p99_ms:.2f} ms, max {f.max_ms:.2f} ms, "
        f"{f.over_50ms} over {SLOW_MS:g} ms (warm-up: max {result.warmup_max_ms:.2f} ms, "
        f"{result.warmup_over_50ms} over {SLOW_MS:g} ms); the worker exited {result.worker_exit}"
    )
    return result


@contextlib.contextmanager
def _library_errors(side: str) -> Iterator[None]:
    """The client's errors (a refused submit, a failed run, a lost connection) as one line."""
    try:
        yield
    except (wfctl.WfctlError, psycopg.Error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BenchError(f"{side}: {type(exc).__name__}: {first}") from None


# -- the report ------------------------------------------------------------------------------------


def summary(phases: list[Phase], sides: list[TreeSide], half_poll_ms: float) -> dict[str, Figures]:
    """Per side, over the runs of all its rounds."""
    out = {}
    for side in sides:
        samples = [v for p in phases if p.side == side.name for v in p.samples_ms]
        if samples:
            out[side.name] = Figures.of(samples, half_poll_ms)
    return out


def _row(first: list[str], f: Figures) -> list[str]:
    return [
        *first,
        f"{f.n:,}",
        f"{f.p50_ms:.2f}",
        f"{f.p90_ms:.2f}",
        f"{f.p99_ms:.2f}",
        f"{f.max_ms:.2f}",
        str(f.over_50ms),
        str(f.over_half_poll),
    ]


def problems_of(phases: list[Phase]) -> list[str]:
    return [
        f"round {p.round}, {p.side}: the worker "
        + (
            f"was still running {STOP_GRACE:g} s after SIGTERM (killed)"
            if p.worker_exit is None
            else f"exited {p.worker_exit} after SIGTERM"
        )
        for p in phases
        if p.worker_exit != 0
    ]


def report(
    args: argparse.Namespace,
    settings: Settings,
    sides: list[TreeSide],
    info: harness.Server,
    phases: list[Phase],
    loads: tuple[tuple[float, ...], tuple[float, ...]],
) -> list[str]:
    half_poll_ms = 500.0 * settings.poll_s
    totals = summary(phases, sides, half_poll_ms)
    problems = problems_of(phases)
    if args.json:
        print(
            json.dumps(
                {
                    "n": settings.n,
                    "rounds": args.rounds,
                    "warmup": WARMUP,
                    "workflow_type": WORKFLOW_TYPE,
                    "steps": STEPS,
                    "poll": settings.poll,
                    "poll_s": settings.poll_s,
                    "half_poll_ms": half_poll_ms,
                    "slow_ms": SLOW_MS,
                    "run_timeout_s": settings.timeout,
                    "cpus": os.cpu_count(),
                    "loads": {"start": list(loads[0]), "end": list(loads[1])},
                    "server": dataclasses.asdict(info),
                    "sides": {s.name: side_label(s, settings.poll) for s in sides},
                    "summary": {name: dataclasses.asdict(f) for name, f in totals.items()},
                    "phases": [
                        {k: v for k, v in dataclasses.asdict(p).items() if k != "samples_ms"} for p in phases
                    ],
                    "problems": problems,
                },
                indent=2,
            )
        )
        return problems
    print(
        f"\nwfctl start latency: submit -> result of a {STEPS}-step workflow ({WORKFLOW_TYPE}), one at a "
        f"time on one autocommit connection; N={settings.n:,} per side and round, {args.rounds} "
        f"round{'s' if args.rounds != 1 else ''}, {WARMUP} uncounted warm-up runs each; "
        f"{os.cpu_count()} CPUs"
    )
    print(harness.server_line(info))
    for side in sides:
        print(f"side {side.name}: {side_label(side, settings.poll)}")
    print(harness.loads_line(loads))
    print()
    counts = [f"> {SLOW_MS:g} ms", f"> {settings.poll_s / 2:g} s (poll / 2)"]
    figures = ["runs", "p50 ms", "p90 ms", "p99 ms", "max ms", *counts]
    harness.table(["side", *figures], [_row([name], f) for name, f in totals.items()])
    rows = [
        _row([f"{p.round}: {p.side}", f"{p.load1:.2f}"], p.figures) for p in phases if p.figures is not None
    ]
    harness.table(["round: side", "load", *figures], rows)
    harness.verdict("workers stopped", problems)
    return problems


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency",
        description="Start latency: submit -> result of a one-step workflow on an idle worker, one run "
        "at a time (see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument("-n", type=int, default=1000, help="measured runs per side and round (default 1000)")
    parser.add_argument(
        "--poll", default="30s", help="the worker's --poll, its fallback to LISTEN (default 30s)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every side (default 1)")
    harness.add_code(parser, "the worker", "the client")
    parser.add_argument(
        "--timeout",
        type=float,
        help=f"seconds one run may take before the benchmark fails (default: the poll + {EXTRA_TIMEOUT:g})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("-n and --rounds must be at least 1")
    try:
        args.poll_s = as_seconds(parse_duration(args.poll, what="--poll", allow_zero=False))
    except wfctl.InvalidInput as exc:
        parser.error(str(exc))
    if args.timeout is None:
        args.timeout = args.poll_s + EXTRA_TIMEOUT
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-latency-", args.keep, lambda workdir: run(args, workdir))


def run(args: argparse.Namespace, workdir: Path) -> int:
    config = harness.empty_config(workdir, "bench/latency.py")
    settings = Settings(args.n, args.poll, args.poll_s, args.timeout, workdir, config)
    sides = harness.tree_sides(args.code, workdir)
    loads_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        harness.warn_if_not_durable(info)
        trees = harness.Trees(workdir, stack)
        phases: list[Phase] = []
        for number in range(1, args.rounds + 1):
            for side in sides:
                with harness.tree_database(server, "latency", args.keep, side.schema_code, trees) as dsn:
                    phases.append(phase(side, dsn, number, args.rounds, settings))
    problems = report(args, settings, sides, info, phases, (loads_start, os.getloadavg()))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
