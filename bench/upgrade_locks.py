"""What this tree's `wfctl init` does to the workers of the release before it while they run at
full speed: the longest a worker waited for a lock, and the longest gap between two runs
finishing, during the upgrade against the same figures just before it.

    python -m bench.upgrade_locks [--from REV|DIR] [--workers 4] [--backlog 40000] [--rounds 3]
                                  [--server-dsn DSN] [--keep] [--json]

Run from the repository root. ``--from`` is the release before (default: the newest tag vX.Y.Z
reachable from HEAD; a commit of this repository or a source tree). Each round, in a fresh
database per scenario, that tree installs its schema and its ``--workers`` workers
(``wfctl worker --app bench.noop_app``, default options) drain a backlog of three-step
workflows. Once they have finished ``--warm`` (2,000), a sampler reads ``pg_locks.waitstart`` of the workers'
backends every 2 ms for ``--baseline`` seconds, then while ``wfctl init`` of the new tree runs,
and one second after it. Two scenarios:

- ``release``: this tree's init (the migrations the release before lacks);
- ``hot-table``: the same with one more migration, ``ALTER TABLE workflows ADD COLUMN``: the
  lock an additive migration takes on the hottest table (ACCESS EXCLUSIVE, for a moment).

A worker's claim must never wait more than a second (docs/guides/upgrade.md: each statement of
``init`` waits at most 500 ms for its lock, then its transaction is retried). See bench/README.md,
"Upgrades under load".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from bench import harness
from bench.harness import BenchError, Code, log
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))
STEPS = 3
SAMPLE_EVERY = 0.002
AFTER = 1.0  # seconds sampled after init returns
SCENARIOS = ("release", "hot-table")
HOT_MIGRATION = "ALTER TABLE workflows ADD COLUMN bench_probe integer;\n"
INIT_APPLICATION = "wfctl-bench-init"


@dataclass
class Phase:
    scenario: str
    round: int
    init_s: float
    applied: list[str]
    lock_retries: int
    baseline_lock_wait_ms: float
    init_lock_wait_ms: float
    baseline_gap_ms: float
    init_gap_ms: float
    per_s: float


class Sampler(threading.Thread):
    """The longest lock wait of a worker's backend, sampled every SAMPLE_EVERY seconds; ``mark()``
    starts a new window and returns the last one's maximum (seconds)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.longest = 0.0

    def run(self) -> None:
        while not self.stopping.is_set():
            row = self.conn.execute(SQL["worker_lock_wait"]).fetchone()
            with self.lock:
                self.longest = max(self.longest, float(row[0]) if row else 0.0)
            time.sleep(SAMPLE_EVERY)

    def mark(self) -> float:
        with self.lock:
            longest, self.longest = self.longest, 0.0
        return longest

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.conn.close()


def previous_release() -> str:
    """The newest tag vX.Y.Z reachable from HEAD: the last release."""
    found = subprocess.run(
        ["git", "-C", str(harness.REPO), "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise BenchError("no release tag vX.Y.Z before HEAD: give --from REV")
    return found.stdout.strip()


def hot_tree(workdir: Path) -> Code:
    """A copy of this tree with one more migration: a column added to workflows."""
    root = workdir / "hot-table-tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for part in ("wfctl", "sql", "bench"):
        shutil.copytree(harness.REPO / part, root / part, ignore=ignore)
    migrations = sorted((root / "sql" / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))
    number = int(migrations[-1].name[:4]) + 1
    (root / "sql" / "migrations" / f"{number:04d}_bench_hot_column.sql").write_text(HOT_MIGRATION, "utf-8")
    return Code(f"this tree + {number:04d}_bench_hot_column", root)


def gap(conn: psycopg.Connection[Any], start: datetime, end: datetime) -> tuple[float, int]:
    """The longest gap between two runs finishing in the window (seconds), and how many did."""
    row = conn.execute(SQL["completion_gap"], {"start": start, "end": end}).fetchone()
    assert row is not None
    return float(row[0]), int(row[1])


def phase(
    scenario: str,
    number: int,
    new: Code,
    old: Code,
    dsn: str,
    args: argparse.Namespace,
    config: Path,
    workdir: Path,
) -> Phase:
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        harness.Workers(
            workdir, f"{scenario}-{number}", cwd=old.root, env=harness.isolated_env(old.env(), dsn, config)
        ) as workers,
    ):
        harness.queue_noop(conn, args.backlog, STEPS)
        workers.start([*harness.wfctl_command(), "worker", "--app", "bench.noop_app"], args.workers)

        def warm() -> tuple[bool, str]:
            done = harness.completed(conn)
            return done >= args.warm, f"{done} runs finished"

        harness.wait_for(warm, "the old workers' first runs", 300, workers, 0.1)
        sampler = Sampler(dsn)
        sampler.start()
        try:
            start = harness.value(conn, SQL["now"])
            time.sleep(args.baseline)
            baseline_end: datetime = harness.value(conn, SQL["now"])
            baseline_wait = sampler.mark()
            began = time.monotonic()
            init = subprocess.run(
                [
                    *harness.wfctl_command(),
                    "--json",
                    "init",
                    "--dsn",
                    make_conninfo(dsn, application_name=INIT_APPLICATION),
                ],
                cwd=workdir,
                env={**harness.isolated_env(new.env(), dsn, config), "PYTHONPATH": str(new.root)},
                capture_output=True,
                text=True,
                timeout=600,
            )
            took = time.monotonic() - began
            if init.returncode != 0:
                raise BenchError(f"wfctl init of {new.label} failed: {init.stderr.strip()}")
            time.sleep(AFTER)
            end = harness.value(conn, SQL["now"])
            init_wait = sampler.mark()
        finally:
            sampler.stop()
        if workers.alive() != args.workers:
            raise BenchError(f"a worker of {old.label} exited during the upgrade:\n{workers.tails()}")
        report = json.loads(init.stdout)
        base_gap, _ = gap(conn, start, baseline_end)
        init_gap, finished = gap(conn, baseline_end, end)
        seconds = (end - baseline_end).total_seconds()
    return Phase(
        scenario,
        number,
        took,
        report["applied"],
        int(report.get("lock_retries", 0)),
        baseline_wait * 1000,
        init_wait * 1000,
        float(base_gap) * 1000,
        float(init_gap) * 1000,
        finished / seconds if seconds > 0 else 0.0,
    )


def run(args: argparse.Namespace, workdir: Path) -> int:
    config = harness.empty_config(workdir, "bench/upgrade_locks.py")
    old = harness.resolve_code(args.from_ or previous_release(), workdir)
    trees = {"release": harness.working_tree(), "hot-table": hot_tree(workdir)}
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        chores = harness.Trees(workdir, stack)
        for number in range(1, args.rounds + 1):
            for scenario in harness.rotated(list(SCENARIOS), number - 1):
                with harness.tree_database(server, "upgrade", args.keep, old, chores) as dsn:
                    phases.append(phase(scenario, number, trees[scenario], old, dsn, args, config, workdir))
                    log(f"round {number} {scenario}: {phases[-1]}")
    problems = [
        f"{p.scenario} round {p.round}: a worker waited {p.init_lock_wait_ms:.0f} ms for a lock"
        for p in phases
        if p.init_lock_wait_ms >= 1000
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "from": old.label,
                    "server": asdict(info),
                    "phases": [asdict(p) for p in phases],
                    "problems": problems,
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(f"from {old.label} to this tree; {args.workers} workers; {harness.server_line(info)}")
        harness.table(
            ["scenario", "round", "init", "applied", "retries", "lock wait before", "lock wait during",
             "gap before", "gap during", "runs/s during"],
            [
                [p.scenario, str(p.round), f"{p.init_s:.2f} s", ",".join(a[:4] for a in p.applied) or "-",
                 str(p.lock_retries), f"{p.baseline_lock_wait_ms:.0f} ms", f"{p.init_lock_wait_ms:.0f} ms",
                 f"{p.baseline_gap_ms:.0f} ms", f"{p.init_gap_ms:.0f} ms", f"{p.per_s:.0f}"]
                for p in phases
            ],
        )  # fmt: skip
        harness.verdict("a worker's lock wait during init under 1 s", problems)
    return 1 if problems else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="from_", help="the release before: a commit or a source tree")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--backlog", type=int, default=40000, help="workflows queued before the workers start"
    )
    parser.add_argument("--baseline", type=float, default=3.0, help="seconds sampled before init")
    parser.add_argument("--warm", type=int, default=2000, help="runs finished before the sampling starts")
    parser.add_argument("--rounds", type=int, default=3)
    harness.add_server_dsn(parser)
    parser.add_argument("--keep", action="store_true", help="keep the databases and the work directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.rounds < 1 or args.warm < 1 or args.backlog < args.warm * 2:
        parser.error("--workers, --rounds and --warm at least 1, --backlog at least twice --warm")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-upgrade-", args.keep, lambda workdir: run(args, workdir))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
