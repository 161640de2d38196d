"""Where the server's work per workflow goes, statement by statement (pg_stat_statements).

    python -m bench.statements --server-dsn DSN [-n 20000] [--steps 3] [--workers 4]
                               [--code REV|DIR] [--json]

Run from the repository root, against a server that preloads pg_stat_statements
(``shared_preload_libraries``; the extension is created in the benchmark's database). In a fresh
database per tree (this one, and each ``--code`` tree with its own schema), N workflows of S
no-op steps are queued, the statistics reset, and ``--workers`` workers (``wfctl worker --app
bench.noop_app``, default options) drain them. Then, per statement and per workflow: calls, rows,
execution time, shared blocks hit, read and dirtied, and WAL bytes, biggest first (those called
less than once per hundred workflows summed in one row), and the totals with the transactions
committed per workflow. Counts, not timings, are what it is for: they hold on a noisy machine.
See bench/README.md, "Where the statements' cost goes".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg

from bench import harness
from bench.harness import BenchError, TreeSide, log
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))
MIN_CALLS = 0.01  # per workflow: statements called less often are summed in one row
FIGURES = ("calls", "rows", "exec_ms", "blks_hit", "blks_read", "blks_dirtied", "wal_bytes")


@dataclass
class Statement:
    name: str
    calls: float
    rows: float
    exec_ms: float
    blks_hit: float
    blks_read: float
    blks_dirtied: float
    wal_bytes: float


@dataclass
class Result:
    side: str
    code: str
    n: int
    commits_per_workflow: float
    statements: list[Statement]  # per workflow, by execution time
    total: Statement


def statement_name(text: str) -> str:
    """A statement's name: its first comment line (sql/queries blocks start with one), else its
    first 80 characters on one line."""
    for line in text.strip().splitlines():
        if line.strip().startswith("--"):
            return line.strip().removeprefix("--").strip()[:80]
        break
    return " ".join(text.split())[:80]


def measure(side: TreeSide, dsn: str, args: argparse.Namespace, config: Path, workdir: Path) -> Result:
    env = harness.isolated_env(os.environ if side.own else side.code.env(), dsn, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL["create_extension"])
        harness.queue_noop(conn, args.n, args.steps)
        conn.execute(SQL["reset"])
        before = harness.xact_commits(conn)
        with harness.Workers(workdir, side.name.replace("@", "-"), cwd=side.code.root, env=env) as workers:
            workers.start([*harness.wfctl_command(), "worker", "--app", "bench.noop_app"], args.workers)

            def drained() -> tuple[bool, str]:
                done = harness.completed(conn)
                return done >= args.n, f"{done} of {args.n} finished"

            harness.wait_for(drained, f"{side.name} draining the backlog", 1800, workers, 0.2)
            codes = workers.terminate()
        if any(code != 0 for code in codes):
            raise BenchError(f"a worker of {side.name} exited {codes} on SIGTERM:\n{workers.tails()}")
        commits = harness.xact_commits(conn) - before
        cur = conn.execute(SQL["statements"])
        names = [c.name for c in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    merged: dict[str, dict[str, float]] = {}
    for row in rows:
        into = merged.setdefault(statement_name(row["query"]), dict.fromkeys(FIGURES, 0.0))
        for figure in FIGURES:
            into[figure] += float(row[figure] or 0)
    every = [Statement(name, *(v[f] / args.n for f in FIGURES)) for name, v in merged.items()]
    total = Statement("total", *(sum(getattr(s, f) for s in every) for f in FIGURES))
    # the statements of the hot path; a worker's start, stop and idle chores summed as one row
    per = sorted((s for s in every if s.calls >= MIN_CALLS), key=lambda s: s.exec_ms, reverse=True)
    rest = [s for s in every if s.calls < MIN_CALLS]
    if rest:
        per.append(Statement(f"{len(rest)} others", *(sum(getattr(s, f) for s in rest) for f in FIGURES)))
    return Result(side.name, side.code.label, args.n, commits / args.n, per, total)


def run(args: argparse.Namespace, workdir: Path) -> int:
    config = harness.empty_config(workdir, "bench/statements.py")
    sides = harness.tree_sides(args.code, workdir)
    results: list[Result] = []
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        with psycopg.connect(server, autocommit=True) as admin:
            if harness.value(admin, SQL["preloaded"]) is not True:
                raise BenchError("the server does not preload pg_stat_statements (shared_preload_libraries)")
        info = harness.describe_server(server, description)
        trees = harness.Trees(workdir, stack)
        for side in sides:
            with harness.tree_database(server, "statements", args.keep, side.schema_code, trees) as dsn:
                results.append(measure(side, dsn, args, config, workdir))
                log(f"{side.name}: {results[-1].commits_per_workflow:.2f} transactions per workflow")
    if args.json:
        print(json.dumps({"server": asdict(info), "results": [asdict(r) for r in results]}, indent=2))
        return 0
    print(f"N={args.n}, S={args.steps}, W={args.workers}; {harness.server_line(info)}")
    for result in results:
        print(
            f"\n{result.side} ({result.code}): {result.commits_per_workflow:.2f} transactions per workflow\n"
        )
        harness.table(
            ["statement (per workflow)", "calls", "rows", "exec ms", "blocks hit", "read", "dirtied",
             "WAL bytes"],
            [
                [s.name, f"{s.calls:.2f}", f"{s.rows:.2f}", f"{s.exec_ms:.3f}", f"{s.blks_hit:.1f}",
                 f"{s.blks_read:.2f}", f"{s.blks_dirtied:.2f}", f"{s.wal_bytes:.0f}"]
                for s in [*result.statements, result.total]
            ],
        )  # fmt: skip
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--code", action="append", default=[], help="also run this commit or source tree")
    harness.add_server_dsn(parser)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.n < 1 or args.steps < 1 or args.workers < 1:
        parser.error("-n, --steps and --workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-statements-", args.keep, lambda workdir: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
