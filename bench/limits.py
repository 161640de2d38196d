"""The cost of flow-control limits, measured on the standard benchmark's workload.

    python -m bench.limits [--server-dsn DSN] [--before REV|DIR] [--code REV|DIR] [--rounds 5] [--quick]

Run from the repository root (``-m``: it imports bench/run.py, whose throughput phase it reuses).
The workload is bench/run.py's: N workflows of S no-op steps (type ``noop3``, bench/noop_app.py)
drained by W ``wfctl worker --burst`` processes of --concurrency C, timed from their start until
all N are completed, and verified. It runs in these variants, in rounds, each round running every
variant once in a rotated order, so that they share the machine's noise:

- before: the code before the limits commit (``--before deb981b``: a ``git archive`` of that
  commit, or a directory holding a source tree), in a database of its own with its own schema;
- (a) none: the current code with no limit at all (no workflow_limits row);
- (b) limit: a concurrency limit of 100,000 on ``noop3``: in force, so every claim goes through
  ``wfctl_claim_allowed``, but never binding;
- (c) keyed: a rate of 1,000,000/1s and a per-key limit of 100,000, with the runs spread over 16
  concurrency keys: the per-key claim walks the keys; nothing binds.

Every variant's database is emptied (TRUNCATE) before its phase and gets bench/run.py's
VACUUM ANALYZE and CHECKPOINT after the enqueue. Ratios are taken within a round (a/before, b/a,
c/a) and summarized by their median over the rounds. After the rounds, for information, a binding
limit: concurrency 4 over the same W x C worker slots, with the highest number of simultaneous
leases sampled by a statement trigger (bench/limits.sql); it must be exactly 4.

The current code is this working tree unless ``--code`` names another commit or tree. Each tree's
schema, submits and limits come from its own code (bench/limits_job.py, run with that tree on
PYTHONPATH); its workers run with the tree as their working directory.

Databases: default a durable embedded PostgreSQL; ``--server-dsn`` (or WFCTL_DSN) a server
where the benchmark creates its databases (the role needs CREATEDB) and drops them at the end.
See bench/README.md, "The cost of limits".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench import harness
from bench import run as base
from bench.harness import BenchError, Chores, Code, log
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

NEVER_BINDS = 100_000  # the concurrency and per-key limits of (b) and (c)
NEVER_BINDING_RATE = "1000000/1s"  # the rate of (c)
KEYS = 16  # concurrency keys of (c)
GOAL_UNCHANGED = 0.95  # "with no limits, throughput unchanged": (a)/before, within the noise
GOAL_NON_BINDING = 0.90  # "a limit set high enough not to bind costs under 10 %": (b)/(a), (c)/(a)

FULL = {"n": 8000, "rounds": 5, "workers": 4, "timeout": 600.0}
QUICK = {"n": 120, "rounds": 1, "workers": 1, "timeout": 60.0}


# -- the variants ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    key: str
    title: str
    limits: dict[str, Any] | None = None  # what `wfctl limit` sets before the phase
    keys: int = 0  # concurrency keys the runs are spread over
    before: bool = False  # the code before the limits commit, in its own database


BEFORE = Spec("before", "before", before=True)
NONE = Spec("none", "(a) no limits")
LIMIT = Spec("limit", f"(b) concurrency {NEVER_BINDS:,}", {"concurrency": NEVER_BINDS})
KEYED = Spec(
    "keyed",
    f"(c) rate {NEVER_BINDING_RATE} + per-key {NEVER_BINDS:,}, {KEYS} keys",
    {"rate": NEVER_BINDING_RATE, "key_concurrency": NEVER_BINDS},
    keys=KEYS,
)


class Variant(base.WfctlSide):
    """The wfctl side of bench/run.py, run from one code tree, with limits set before its phase."""

    def __init__(self, spec: Spec, chores: Chores) -> None:
        self.spec = spec
        self.chores = chores
        self.name = spec.key
        self.cwd = chores.code.root
        self.env = chores.code.env()

    def enqueue(self, dsn: str, opts: base.Options) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SQL["reset"])
        self.chores(
            "enqueue",
            dsn=dsn,
            type=self.workflow_type,
            n=opts.n,
            steps=opts.steps,
            keys=self.spec.keys,
            limits=self.spec.limits,
        )
        if not self.spec.before:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(SQL["limit_rows"]).fetchone()
            expected = 1 if self.spec.limits else 0
            if not row or row[0] != expected:
                raise BenchError(
                    f"{self.name}: {row[0] if row else None} workflow_limits rows, not {expected}"
                )


@dataclass
class Phase:
    variant: str
    workflows_per_s: float
    steady_workflows_per_s: float | None
    xacts_per_workflow: float | None
    ok: bool

    @classmethod
    def of(cls, result: base.SideResult) -> Phase:
        return cls(
            result.side,
            result.workflows_per_s,
            result.steady_workflows_per_s,
            result.xacts_per_workflow,
            bool(result.verification and result.verification.ok),
        )


@dataclass
class Round:
    number: int
    order: list[str]
    load: float  # 1-minute load average at the round's start
    phases: dict[str, Phase] = field(default_factory=dict)


@dataclass
class Binding:
    limit: int
    n: int
    phase: Phase
    most_leases: int
    samples: int
    mean_leases: float | None  # over time, from the first sample to the last


def run_phase(variant: Variant, dsn: str, opts: base.Options, sampler: harness.RssSampler) -> Phase:
    result = base.SideResult(variant.name)
    base.throughput(variant, dsn, opts, sampler, result)
    if not (result.verification and result.verification.ok):
        log(f"{variant.name}: verification FAILED: {result.verification}")
    return Phase.of(result)


def rounds(
    variants: list[Variant], dsns: dict[str, str], opts: base.Options, count: int, sampler: harness.RssSampler
) -> list[Round]:
    done = []
    for number in range(1, count + 1):
        order = harness.rotated(variants, number - 1)
        current = Round(number, [v.name for v in order], os.getloadavg()[0])
        log(f"round {number}/{count}: {' '.join(current.order)} (load {current.load:.2f})")
        for variant in order:
            current.phases[variant.name] = run_phase(variant, dsns[variant.name], opts, sampler)
        done.append(current)
    return done


def binding(chores: Chores, dsn: str, opts: base.Options, limit: int, sampler: harness.RssSampler) -> Binding:
    spec = Spec("binding", f"concurrency {limit}", {"concurrency": limit})
    variant = Variant(spec, chores)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL["sampler_drop"])
        conn.execute(SQL["sampler"])
    try:
        log(f"binding: concurrency {limit} over {opts.workers} workers x {opts.concurrency}")
        phase = run_phase(variant, dsn, opts, sampler)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(SQL["most_leases"], {"type": variant.workflow_type}).fetchone()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SQL["sampler_drop"])
    assert row is not None
    return Binding(limit, opts.n, phase, int(row[0]), int(row[1]), None if row[2] is None else float(row[2]))


# -- the report ----------------------------------------------------------------------------------------


_num = harness.num
_ratio = harness.ratio
_x = harness.ratio_text
_median = harness.median
spread = harness.spread


RATIOS = (("none", "before", "a/before"), ("limit", "none", "b/a"), ("keyed", "none", "c/a"))


def measure(phase: Phase | None, steady: bool) -> float | None:
    if phase is None:
        return None
    return phase.steady_workflows_per_s if steady else phase.workflows_per_s


def ratios_of(done: list[Round], steady: bool) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for top, bottom, label in RATIOS:
        if all(top in r.phases and bottom in r.phases for r in done):
            out[label] = [
                _ratio(measure(r.phases[top], steady), measure(r.phases[bottom], steady)) for r in done
            ]
    return out


def rounds_table(done: list[Round], specs: dict[str, Spec], steady: bool) -> None:
    keys = [k for k in specs if all(k in r.phases for r in done)]
    ratios = ratios_of(done, steady)
    header = ["round", "load", *[specs[k].title for k in keys], *ratios]
    rows = []
    for i, r in enumerate(done):
        rows.append(
            [
                f"{r.number} ({' '.join(r.order)})",
                f"{r.load:.2f}",
                *[_num(measure(r.phases[k], steady)) for k in keys],
                *[_x(values[i]) for values in ratios.values()],
            ]
        )
    rows.append(
        [
            f"median of {len(done)}",
            f"{_median([r.load for r in done]):.2f}",
            *[_num(_median([measure(r.phases[k], steady) for r in done])) for k in keys],
            *[f"**{_x(_median(values))}**" for values in ratios.values()],
        ]
    )
    harness.table(header, rows)


def report(
    done: list[Round],
    bound: Binding | None,
    specs: dict[str, Spec],
    codes: dict[str, Code],
    server: harness.Server,
    opts: base.Options,
    loads: tuple[tuple[float, ...], tuple[float, ...]],
) -> list[str]:
    """Print the report; the verification's problems."""
    extra = "".join(f" {shlex.quote(a)}" for a in opts.worker_args)
    print(
        f"\nwfctl limits benchmark: N={opts.n} workflows x S={opts.steps} no-op steps, W={opts.workers} "
        f"worker processes (wfctl --concurrency {opts.concurrency}{extra}), {len(done)} round(s), "
        f"{os.cpu_count()} CPUs"
    )
    print(harness.server_line(server))
    print(
        f"code: current = {codes['current'].label}"
        + (f"; before = {codes['before'].label}" if "before" in codes else "")
    )
    print(harness.loads_line(loads))
    print()
    print("## workflows/s, steady (first claim -> last completion, database clock)")
    print()
    rounds_table(done, specs, steady=True)
    print("## workflows/s (workers start -> all completed)")
    print()
    rounds_table(done, specs, steady=False)
    keys = [k for k in specs if all(k in r.phases for r in done)]
    harness.table(
        ["transactions per workflow (median)", *[specs[k].title for k in keys]],
        [
            [
                "pg_stat_database",
                *[_num(_median([r.phases[k].xacts_per_workflow for r in done]), 2) for k in keys],
            ]
        ],
    )

    problems = [
        f"round {r.number}: {k}: the verification failed (see the log above)"
        for r in done
        for k, p in r.phases.items()
        if not p.ok
    ]
    if bound is not None:
        none_steady = _median([measure(r.phases.get("none"), True) for r in done])
        none_wall = _median([measure(r.phases.get("none"), False) for r in done])
        print(
            f"## binding (for information): concurrency {bound.limit}, {bound.n} workflows, "
            f"{opts.workers} workers x {opts.concurrency}"
        )
        print()
        harness.table(
            ["figure", "(a) no limits, median", f"concurrency {bound.limit}", "binding / (a)"],
            [
                [
                    "workflows/s, steady",
                    _num(none_steady),
                    _num(bound.phase.steady_workflows_per_s),
                    _x(_ratio(bound.phase.steady_workflows_per_s, none_steady)),
                ],
                [
                    "workflows/s, workers start -> all completed",
                    _num(none_wall),
                    _num(bound.phase.workflows_per_s),
                    _x(_ratio(bound.phase.workflows_per_s, none_wall)),
                ],
                [
                    "most leases at once (sampled after every UPDATE of workflows)",
                    "",
                    f"{bound.most_leases} ({bound.samples:,} samples)",
                    "",
                ],
                ["leases held on average over time", "", _num(bound.mean_leases, 2), ""],
            ],
        )
        if not bound.phase.ok:
            problems.append("binding: the verification failed (see the log above)")
        if bound.most_leases != bound.limit:
            problems.append(f"binding: most leases at once {bound.most_leases}, the limit is {bound.limit}")

    steady = ratios_of(done, steady=True)
    goals: list[tuple[str, bool | None]] = []
    if "a/before" in steady:
        median = _median(steady["a/before"])
        goals.append(
            (
                "no limits set, throughput unchanged: (a)/before steady workflows/s "
                f"{spread(steady['a/before'])} >= {GOAL_UNCHANGED:g}",
                median is not None and median >= GOAL_UNCHANGED,
            )
        )
    else:
        goals.append(("no limits set, throughput unchanged: not measured (give --before REV)", None))
    for label, what in (
        ("b/a", "a non-binding concurrency limit"),
        ("c/a", "a non-binding rate and per-key limit"),
    ):
        if label in steady:
            median = _median(steady[label])
            goals.append(
                (
                    f"{what} costs under 10 %: ({label[0]})/(a) steady workflows/s {spread(steady[label])} "
                    f">= {GOAL_NON_BINDING:g}",
                    median is not None and median >= GOAL_NON_BINDING,
                )
            )
    for text, met in goals:
        print(f"goal {'n/a   ' if met is None else 'MET   ' if met else 'MISSED'} {text}")
    if bound is not None:
        print(
            f"binding: concurrency {bound.limit}: most leases at once {bound.most_leases} "
            f"({'the limit, reached' if bound.most_leases == bound.limit else 'NOT the limit'})"
        )
    harness.verdict("verification", problems)
    return problems


# -- main --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.limits",
        description="The cost of flow-control limits on the standard benchmark's workload "
        "(see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument(
        "--before",
        metavar="REV|DIR",
        help="also run the code of this commit (git archive) or source tree, e.g. deb981b: the code "
        "before the limits commit",
    )
    parser.add_argument(
        "--code", metavar="REV|DIR", help="the current code: this commit or tree (default: the working tree)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="N=120, 1 round, 1 worker, 60 s per phase, statistics read without waiting",
    )
    parser.add_argument("-n", type=int, help="workflows per phase (default 8000)")
    parser.add_argument("-s", "--steps", type=int, default=3, help="no-op steps per workflow (default 3)")
    parser.add_argument("-w", "--workers", type=int, help="worker processes (default 4)")
    parser.add_argument("--concurrency", type=int, default=8, help="wfctl worker --concurrency (default 8)")
    parser.add_argument("--rounds", type=int, help="rounds of every variant (default 5)")
    parser.add_argument("--no-keyed", action="store_true", help="leave out (c), the rate and per-key limits")
    parser.add_argument("--binding-limit", type=int, default=4, help="the binding case's limit (default 4)")
    parser.add_argument("--binding-n", type=int, help="workflows of the binding case (default: N)")
    parser.add_argument("--no-binding", action="store_true", help="leave out the binding case")
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help="extra options for `wfctl worker`, one shell-quoted string",
    )
    parser.add_argument("--timeout", type=float, help="seconds allowed per phase (default 600; --quick 60)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON on stdout")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.binding_n is None:
        args.binding_n = args.n
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    counts = (
        args.n,
        args.steps,
        args.workers,
        args.concurrency,
        args.rounds,
        args.binding_limit,
        args.binding_n,
    )
    if min(counts) < 1:
        parser.error(
            "-n, -s, -w, --concurrency, --rounds, --binding-limit and --binding-n must be at least 1"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-limits-", args.keep, lambda workdir: run(args, workdir))


def run(args: argparse.Namespace, workdir: Path) -> int:
    opts = base.Options(
        args.n,
        args.steps,
        args.workers,
        args.concurrency,
        0,
        args.timeout,
        workdir,
        1,
        shlex.split(args.worker_args),
        settle=0.0 if args.quick else 1.0,
    )
    sampler = harness.RssSampler()
    sampler.start()
    try:
        codes = {"current": harness.resolve_code(args.code, workdir) if args.code else harness.working_tree()}
        if args.before:
            codes["before"] = harness.resolve_code(args.before, workdir)
        loads_start = os.getloadavg()
        with contextlib.ExitStack() as stack:
            trees = harness.Trees(workdir, stack)
            chores = {name: trees(code) for name, code in codes.items()}
            current = [Variant(NONE, chores["current"]), Variant(LIMIT, chores["current"])]
            if not args.no_keyed:
                current.append(Variant(KEYED, chores["current"]))
            variants = ([Variant(BEFORE, chores["before"])] if "before" in chores else []) + current
            specs = {v.name: v.spec for v in variants}
            server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
            info = harness.describe_server(server, description)
            harness.warn_if_not_durable(info)
            dsns: dict[str, str] = {}
            for name, code in codes.items():
                dsn = stack.enter_context(
                    harness.fresh_database(server, f"limits_{name}", args.keep, install=False)
                )
                log(f"{name}: installing the schema of {code.label}")
                chores[name]("migrate", dsn=dsn)
                dsns[name] = dsn
            by_variant = {v.name: dsns["before" if v.spec.before else "current"] for v in variants}
            done = rounds(variants, by_variant, opts, args.rounds, sampler)
            bound = None
            if not args.no_binding:
                bound = binding(
                    chores["current"],
                    dsns["current"],
                    dataclasses.replace(opts, n=args.binding_n),
                    args.binding_limit,
                    sampler,
                )
    finally:
        sampler.stop()
    problems = report(done, bound, specs, codes, info, opts, (loads_start, os.getloadavg()))
    if args.json:
        print(
            json.dumps(
                {
                    "options": {k: v for k, v in dataclasses.asdict(opts).items() if k != "workdir"},
                    "server": dataclasses.asdict(info),
                    "code": {k: c.label for k, c in codes.items()},
                    "databases": {k: conninfo_to_dict(d).get("dbname") for k, d in dsns.items()},
                    "rounds": [dataclasses.asdict(r) for r in done],
                    "binding": dataclasses.asdict(bound) if bound else None,
                    "problems": problems,
                },
                indent=2,
            )
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
