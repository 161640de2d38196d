"""A worker's own CPU per workflow and per no-op step: what the engine's Python costs.

    python -m bench.step_cost [-n 20000] [--steps 1,3] [--rounds 3] [--code REV|DIR]
                              [--server-dsn DSN] [--keep] [--json]

Run from the repository root (``-m``: it imports bench/harness.py). For each round, each side and
each S of ``--steps``, in a fresh database on the same server: start ONE ``wfctl worker --app
bench.noop_app`` (default options) and wait until it is ready; queue N workflows of S no-op steps
in one statement; from then until the last one completed, read the worker process's CPU time
(utime and stime of all its threads, /proc/PID/stat) and its context switches (voluntary and not,
summed over its threads, /proc/PID/task/*/status); SIGTERM it.

Per workflow: the worker's CPU (ms), the share of it spent in the kernel, and its context
switches. Per step: the difference between the largest and the smallest S, over the steps between
them: ``(cpu(S=3) - cpu(S=1)) / 2`` with the default ``--steps``, a no-op step's cost with its
checkpoint (the step's call, its JSON, the write's trip through the group commit, its share of
the statement) and none of the workflow's own (claim, start, completion, log lines). Replay is
not measured: every run is claimed once. The server's CPU is not counted here (bench.throughput
and bench.statements measure it).

``--code REV|DIR`` (repeatable) adds a side whose worker runs another source tree, as in the
other benchmarks; ``--rounds`` interleaves the sides. Figures are the medians of the rounds, with
each side's ratio to this tree's in the same round. See bench/README.md, "A worker's CPU per step".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import harness
from bench.harness import BenchError, TreeSide, Workers, log

READY_TIMEOUT = 120.0
STOP_GRACE = 60.0
POLL_EVERY = 0.05  # seconds between the polls for the last completion
DRAIN_TIMEOUT = 600.0
CLIENT = "wfctl-bench-step-cost"


@dataclass
class Drain:
    """One worker draining N workflows of S steps: one side, one round."""

    side: str
    round: int
    steps: int
    n: int
    seconds: float = 0.0
    cpu_ms: float = 0.0  # per workflow
    system_share: float = 0.0  # of that CPU, in the kernel
    switches: float = 0.0  # context switches per workflow
    worker_exit: int | None = None


def switches(pid: int) -> int:
    """Context switches of every thread of ``pid`` so far (voluntary and not)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status", encoding="ascii") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    return total


def ticks(pid: int) -> tuple[int, int]:
    """utime and stime of ``pid`` (all its threads), in clock ticks."""
    fields = harness.stat_fields(pid)
    if fields is None:
        raise BenchError(f"the worker (pid {pid}) is gone")
    return int(fields[11]), int(fields[12])


def drain(side: TreeSide, dsn: str, number: int, steps: int, n: int, workdir: Path, config: Path) -> Drain:
    result = Drain(side.name, number, steps, n)
    env = harness.isolated_env(side.code.env(), dsn, config)
    label = f"{side.name.replace('@', '-')}-s{steps}-r{number}"
    with (
        Workers(workdir, label, None, side.code.root, env) as worker,
        psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as conn,
    ):
        worker.start([*harness.wfctl_command(), "worker", "--app", "bench.noop_app", "--dsn", dsn])
        harness.wait_ready(worker, label, READY_TIMEOUT, 0.05, harness.registered(dsn, CLIENT))
        (pid,) = worker.pids()
        user0, system0 = ticks(pid)
        switched0, began = switches(pid), time.monotonic()
        harness.queue_noop(conn, n, steps)

        def drained() -> tuple[bool, str]:
            done = harness.completed(conn)
            return done >= n, f"{done:,} of {n:,} completed"

        harness.wait_for(drained, label, DRAIN_TIMEOUT, worker, POLL_EVERY)
        result.seconds = round(time.monotonic() - began, 3)
        user1, system1 = ticks(pid)
        switched = switches(pid) - switched0
        (result.worker_exit,) = worker.terminate(STOP_GRACE)
    cpu = (user1 - user0 + system1 - system0) / harness.CLOCK_TICKS
    result.cpu_ms = round(cpu * 1000.0 / n, 4)
    result.system_share = round((system1 - system0) / max(1, user1 - user0 + system1 - system0), 3)
    result.switches = round(switched / n, 2)
    log(
        f"round {number}, {side.name}, S={steps}: {result.seconds:.2f} s, worker CPU "
        f"{result.cpu_ms * 1000:.0f} us/workflow ({result.system_share:.0%} system), "
        f"{result.switches:.1f} context switches/workflow"
    )
    return result


@dataclass
class Row:
    side: str
    rounds: int
    cpu_us: dict[int, float]  # S -> median worker CPU per workflow (us)
    system_share: dict[int, float]
    switches: dict[int, float]
    step_us: float | None  # median over the rounds of the per-step difference
    ratio: float | None  # median of the rounds' per-workflow CPU at the largest S, to this tree's


def per_step(drains: list[Drain], low: int, high: int) -> float | None:
    by = {d.steps: d.cpu_ms for d in drains}
    if low == high or low not in by or high not in by:
        return None
    return (by[high] - by[low]) * 1000.0 / (high - low)


def rows_of(drains: list[Drain], sides: list[TreeSide], steps: list[int], rounds: int) -> list[Row]:
    low, high = min(steps), max(steps)
    rows = []
    for side in sides:
        mine = [d for d in drains if d.side == side.name]

        def median(attr: str, s: int, mine: list[Drain] = mine) -> float:
            return float(statistics.median(float(getattr(d, attr)) for d in mine if d.steps == s))

        step_costs = [
            c
            for r in range(1, rounds + 1)
            if (c := per_step([d for d in mine if d.round == r], low, high)) is not None
        ]
        ratios = []
        for r in range(1, rounds + 1):
            own = [d.cpu_ms for d in mine if d.round == r and d.steps == high]
            base = [d.cpu_ms for d in drains if d.side == sides[0].name and d.round == r and d.steps == high]
            if own and base and base[0]:
                ratios.append(own[0] / base[0])
        rows.append(
            Row(
                side.name,
                rounds,
                {s: round(median("cpu_ms", s) * 1000.0, 1) for s in steps},
                {s: median("system_share", s) for s in steps},
                {s: median("switches", s) for s in steps},
                round(statistics.median(step_costs), 1) if step_costs else None,
                round(statistics.median(ratios), 3) if ratios and side is not sides[0] else None,
            )
        )
    return rows


def report(
    args: argparse.Namespace, sides: list[TreeSide], info: harness.Server, drains: list[Drain]
) -> list[str]:
    rows = rows_of(drains, sides, args.steps, args.rounds)
    problems = [
        f"round {d.round}, {d.side}, S={d.steps}: the worker exited {d.worker_exit} after SIGTERM"
        for d in drains
        if d.worker_exit != 0
    ]
    if args.json:
        out = {
            "n": args.n,
            "steps": args.steps,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "server": dataclasses.asdict(info),
            "sides": {s.name: s.code.label for s in sides},
            "rows": [dataclasses.asdict(r) for r in rows],
            "drains": [dataclasses.asdict(d) for d in drains],
            "problems": problems,
        }
        print(json.dumps(out, indent=2))
        return problems
    print(
        f"\nwfctl worker CPU: one worker (default options) draining N={args.n:,} queued workflows of "
        f"S no-op steps; medians of {args.rounds} round(s); {os.cpu_count()} CPUs"
    )
    print(harness.server_line(info))
    for side in sides:
        print(f"side {side.name}: {side.code.label}")
    print()
    low, high = min(args.steps), max(args.steps)
    header = ["side"]
    for s in args.steps:
        header += [f"S={s} us/wf", "system", "switches/wf"]
    header += [f"us/step (S={low}->{high})", f"/ {sides[0].name} at S={high}"]
    table = []
    for row in rows:
        cells = [row.side]
        for s in args.steps:
            cells += [f"{row.cpu_us[s]:.0f}", f"{row.system_share[s]:.0%}", f"{row.switches[s]:.1f}"]
        cells += [harness.num(row.step_us, 1), f"{row.ratio:.2f}x" if row.ratio is not None else ""]
        table.append(cells)
    harness.table(header, table)
    harness.verdict("workers stopped", problems)
    return problems


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_cost",
        description="A worker's CPU per workflow and per no-op step (see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument("-n", type=int, default=20000, help="workflows per drain (default 20000)")
    parser.add_argument(
        "--steps",
        type=harness.counts("--steps"),
        default=[1, 3],
        help="step counts, comma-separated (default 1,3)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every side (default 3)")
    harness.add_code(parser)
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("-n and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-step-cost-", args.keep, lambda workdir: run(args, workdir))


def run(args: argparse.Namespace, workdir: Path) -> int:
    config = harness.empty_config(workdir, "bench/step_cost.py")
    sides = harness.tree_sides(args.code, workdir)
    drains: list[Drain] = []
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        trees = harness.Trees(workdir, stack)
        for number in range(1, args.rounds + 1):
            for steps in args.steps:
                for side in harness.rotated(sides, number - 1):
                    with harness.tree_database(
                        server, "step_cost", args.keep, side.schema_code, trees
                    ) as dsn:
                        drains.append(drain(side, dsn, number, steps, args.n, workdir, config))
    problems = report(args, sides, info, drains)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
