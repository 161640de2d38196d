"""Steady arrivals against W idle workers: what the database does per workflow as W grows.

    python -m bench.arrivals [-n 2000] [--rate 200] [--workers 1,4,16,64] [--concurrency C]
                             [--poll P] [--rounds 1] [--code REV|DIR] [--server-dsn DSN]
                             [--settle 3] [--timeout 300] [--ready-timeout 600] [--keep] [--json]

Run from the repository root (``-m``: it imports bench/harness.py, the benchmarks' shared
harness). For each W of ``--workers``, each side and each round,
in a fresh database on the same server:

1. start W ``wfctl worker --app bench.noop_app`` processes (default options, plus ``--concurrency``
   and ``--poll`` when given; an empty WFCTL_CONFIG) and wait until every one has logged "ready"
   and W rows are in ``workers``; open the monitor's and the submitter's connections to the
   database; wait ``--settle`` seconds; flush both sessions' statistics; take the "before" reading;
2. submit N one-step workflows (``noop3``, ``{"steps": 1}``) one at a time with ``wfctl.submit``
   on ONE autocommit connection, submit i at t0 + i / rate (late: at once; never later than due);
3. wait until all N are completed (the monitor polls every 0.1 s; past ``--timeout`` after the
   last submit: an error), read the workers' CPU, SIGTERM them and wait for them, close the
   submitter's and the monitor's connections, wait until every session of the database has ended
   and its process was reaped, and take the "after" reading.

The figures, per W and side (divided by N: per workflow):

- transactions: the change of ``xact_commit + xact_rollback`` of the measured database in
  pg_stat_database between the readings, less the monitor's polls (counted: one transaction
  each). Both readings are made on the server's own database (``--server-dsn``'s, or the embedded
  server's ``postgres``), so they add nothing. Counted: the N submits (one transaction each) and
  everything the workers' sessions did in the interval: claims that found work and claims that
  found none, checkpoints, completions, their polls and heartbeats, their shutdown after SIGTERM;
  autovacuum's in that database if it ran. PostgreSQL 15 flushes a session's counts lazily (at
  most once a second while busy, within 10 s when idle, and at its exit): the "after" reading
  waits until every session has ended and the count no longer changes; the benchmark's two
  sessions flush theirs just before the "before" reading (pg_stat_force_next_flush); a worker's
  last transactions before it (at most about a second of idle polling) may not be flushed yet and
  then count in the interval: a few per worker, at most. NB: every NOTIFY committed in a database
  makes every session LISTENing there, on any channel, run one transaction to read the
  notification queue (measured on PostgreSQL 15: 4 idle listeners on other channels add 4 per
  NOTIFY). So this figure grows by about one per idle worker and submit even when a single worker
  is woken; the claim scans and the CPU figures show whether the others claimed.
- claim scans: the change of ``idx_scan`` of ``workflows_runnable_idx`` (the claim's index, which
  neither the submits, the completions nor the monitor's poll use) in pg_stat_user_indexes: one
  or more per claim, whether it found work or not. "before" is read by the monitor, "after" on a
  fresh connection once every session has ended.
- server CPU (ms): the change of the CPU time (user + system) of the PostgreSQL server's
  processes: utime + stime of the postmaster and of all its descendants alive at the reading,
  plus the postmaster's cutime + cstime (the children it reaped: the workers' sessions end
  between the readings), from /proc/PID/stat. Server-wide: its background processes (WAL writer,
  checkpointer, autovacuum) and any other database's sessions count too. ``n/a`` when the server
  does not run on this machine (no /proc entry of the session's process, or not this server's
  postmaster).
- sessions CPU (ms): the measured database's sessions alone (the workers', the submitter's and the
  monitor's): utime + stime of their processes just before SIGTERM, less the same at the "before"
  reading. It leaves out the background processes, the sessions' shutdown and other databases'
  sessions: the figure to read when the server is shared (a test suite running on it).
- workers CPU (ms): utime + stime of the W worker processes (with their children) just before
  SIGTERM, less the same at the "before" reading: their start-up and shutdown are left out.
- wall (s): from the first submit to the last completion, ``max(finished_at) - min(created_at)``
  on the database's clock; submits/s: N - 1 over the span between the first and the last submit's
  start (the schedule asks for --rate).
- start p50 / p99 (ms): ``started_at - created_at`` of the runs (the first claim's transaction
  start minus the submit's), interpolated between the closest ranks.
- x W=1: the ratio to the same side's figure at the smallest W of the list (W=1 by default), in
  the same round; over several rounds, the figures and the ratios are the medians of the rounds'.

``--code REV|DIR`` (repeatable) adds a side whose workers run another wfctl source tree (a commit
of this repository ``git archive``d into the work directory, or a directory) on that tree's
schema; the submitter is always this tree's library. ``--rounds R`` interleaves the sides for
each W (A1, B1, A2, B2, ...). See bench/README.md, "Steady arrivals".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import wfctl
from bench import harness
from bench.harness import BenchError, TreeSide, Workers, log
from wfctl.durations import parse_duration
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

WORKFLOW_TYPE = "noop3"  # bench/noop_app.py
STEPS = 1
POLL_EVERY = 0.1  # seconds between the monitor's polls for completion
READY_POLL = 0.2  # seconds between checks of the workers' readiness
STOP_GRACE = 60.0  # seconds for the workers to exit after SIGTERM
GONE_TIMEOUT = 60.0  # seconds for the database's sessions to end once their clients have
LATE_MS = 5.0  # a submit this far behind its schedule counts as late
BENCH_SESSIONS = 2  # the monitor's and the submitter's
CLIENT = "wfctl-bench-arrivals"  # application_name of the benchmark's sessions


# -- the options -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    n: int
    rate: float
    concurrency: int | None  # None: the worker's default (nothing passed)
    poll: str | None  # None: the worker's default
    settle: float
    timeout: float
    ready_timeout: float
    workdir: Path
    config: Path

    def worker_options(self) -> list[str]:
        options = []
        if self.concurrency is not None:
            options += ["--concurrency", str(self.concurrency)]
        if self.poll is not None:
            options += ["--poll", self.poll]
        return options

    def options_text(self) -> str:
        given = " ".join(self.worker_options())
        return f"{given}, otherwise default options" if given else "default options"


def side_label(side: TreeSide, settings: Settings) -> str:
    return f"wfctl worker from {side.code.label}, {settings.options_text()}"


# -- the server's processes (/proc) ----------------------------------------------------------------


def tree_cpu(roots: list[int]) -> float:
    """The CPU seconds of processes with all their descendants alive now (and what each reaped)."""
    children = harness.children_map()
    return sum(harness.cpu_seconds(pid) for root in roots for pid in harness.tree(root, children))


def sessions_cpu(pids: set[int]) -> float:
    return sum(harness.cpu_seconds(pid) for pid in pids)


def local_postmaster(admin: psycopg.Connection[Any]) -> int | None:
    """The postmaster's pid when the server runs on this machine (the parent of our session's
    process, a ``postgres`` process, and the pid in the data directory's postmaster.pid when that
    file can be read), else None."""
    pid = harness.postmaster_of(admin)
    if pid is None:
        return None
    try:
        if not Path(f"/proc/{pid}/comm").read_text("utf-8").startswith("postgres"):
            return None
    except OSError:
        return None
    row = admin.execute(SQL["data_directory"]).fetchone()
    if row:
        with contextlib.suppress(OSError, ValueError, IndexError):
            lines = (Path(row[0]) / "postmaster.pid").read_text("utf-8").splitlines()
            if int(lines[0]) != pid:
                return None
    return pid


def check_capacity(admin: psycopg.Connection[Any], workers: int) -> None:
    """Refuse to start when the server cannot take W workers' sessions and the benchmark's."""
    row = admin.execute(SQL["capacity"]).fetchone()
    assert row is not None
    max_connections, reserved, in_use, superuser = row
    free = max_connections - in_use - (0 if superuser else reserved)
    if workers + BENCH_SESSIONS > free:
        raise BenchError(
            f"the server's max_connections ({max_connections}) is too low: {in_use} sessions are open "
            f"and {free} free, but W={workers} needs {workers} workers' sessions and {BENCH_SESSIONS} of "
            "the benchmark's; raise max_connections or give --workers smaller counts"
        )


# -- the readings ----------------------------------------------------------------------------------


def transactions(admin: psycopg.Connection[Any], db: str) -> int:
    row = admin.execute(SQL["transactions"], {"db": db}).fetchone()
    if row is None or row[0] is None:
        raise BenchError(f"no row for database {db} in pg_stat_database")
    return int(row[0])


def settled_transactions(admin: psycopg.Connection[Any], db: str) -> int:
    """The count once it no longer changes (PostgreSQL 14 and older send the counts through the
    statistics collector, with a delay)."""
    last = transactions(admin, db)
    for _ in range(40):
        time.sleep(0.25)
        now = transactions(admin, db)
        if now == last:
            return now
        last = now
    raise BenchError(f"the transaction count of {db} kept changing after every session had ended")


def sessions(admin: psycopg.Connection[Any], db: str) -> set[int]:
    return {row[0] for row in admin.execute(SQL["sessions"], {"db": db})}


def wait_gone(admin: psycopg.Connection[Any], db: str, known: set[int], local: bool) -> None:
    """Wait until no session of the database is left (a session flushes its statistics before it
    leaves pg_stat_activity) and, on this machine, until the processes of the sessions ``known``
    are reaped (their CPU is then in the postmaster's cutime + cstime)."""
    deadline = time.monotonic() + GONE_TIMEOUT
    while True:
        left = sessions(admin, db)
        known |= left
        if not left and not (local and any(Path(f"/proc/{pid}").exists() for pid in known)):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"sessions still open in {db} {GONE_TIMEOUT:g} s after the workers exited")
        time.sleep(0.02)


@dataclass
class Reading:
    transactions: int
    server_cpu_s: float | None  # None: the server is not on this machine
    claim_scans: int | None = None  # None: not read (after: read with the figures)
    at: float = field(default_factory=time.monotonic)


def server_cpu(postmaster: int | None) -> float | None:
    return tree_cpu([postmaster]) if postmaster is not None else None


def flush_statistics(conn: psycopg.Connection[Any]) -> None:
    """Make the session flush its statistics now: pg_stat_force_next_flush() where it exists and
    may be called, else a statement more than a second after its last flush."""
    try:
        conn.execute(SQL["flush"])
    except (psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege):
        time.sleep(1.1)
        conn.execute(SQL["nudge"])


# -- the workers -----------------------------------------------------------------------------------


def start_workers(side: TreeSide, dsn: str, count: int, settings: Settings, label: str) -> Workers:
    """W worker processes of the side's tree: its root as their working directory and on
    PYTHONPATH; no WFCTL_* variable of this environment but the database (WFCTL_DSN and --dsn)
    and an empty config file (WFCTL_CONFIG), as bench/latency.py starts its worker. No RSS
    sampler: sampling the processes would add to the CPU measured."""
    env = harness.isolated_env(side.code.env(), dsn, settings.config)
    command = [*harness.wfctl_command(), "worker", "--app", "bench.noop_app", *settings.worker_options()]
    pool = Workers(settings.workdir, label, None, side.code.root, env)
    pool.start([*command, "--dsn", dsn], count)
    return pool


def workers_cpu(pool: Workers) -> float:
    return tree_cpu(pool.pids())


# -- the benchmark's sessions ----------------------------------------------------------------------


class Monitor:
    """The benchmark's reading connection to the measured database, counting its statements:
    each is one transaction (autocommit), taken off the figure."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=CLIENT)
        self.statements = 0

    def row(self, query: str) -> tuple[Any, ...]:
        self.statements += 1
        found = self.conn.execute(query).fetchone()
        assert found is not None
        return found

    def count(self, query: str) -> int:
        return int(self.row(query)[0])

    def close(self) -> None:
        self.conn.close()


@dataclass
class Pacing:
    first: float  # perf_counter at the first submit's start
    last: float  # and at the last one's
    late: int  # submits started more than LATE_MS behind their schedule
    max_lag_ms: float

    def rate(self, n: int) -> float | None:
        return (n - 1) / (self.last - self.first) if n > 1 and self.last > self.first else None


def submit_paced(conn: psycopg.Connection[Any], n: int, rate: float) -> Pacing:
    """Submit i at t0 + i / rate; at once when behind; never sleep past the schedule."""
    t0 = time.perf_counter()
    late, max_lag, last = 0, 0.0, t0
    for i in range(n):
        due = t0 + i / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
            now = time.perf_counter()
        lag = max(0.0, now - due) * 1000.0
        late += lag > LATE_MS
        max_lag = max(max_lag, lag)
        last = now
        wfctl.submit(conn, WORKFLOW_TYPE, {"steps": STEPS})
    return Pacing(t0, last, late, round(max_lag, 2))


def wait_completed(monitor: Monitor, pool: Workers, n: int, timeout: float) -> None:
    def completed() -> tuple[bool, str]:
        done, ended_otherwise = monitor.row(SQL["progress"])
        if ended_otherwise:
            raise BenchError(f"{ended_otherwise} runs failed or were cancelled; logs in {pool.workdir}")
        return done >= n, f"{done}/{n} completed"

    harness.wait_for(
        completed, f"the runs (--timeout {timeout:g} s after the last submit)", timeout, pool, POLL_EVERY
    )


# -- one measurement -------------------------------------------------------------------------------


@dataclass
class Measurement:
    """One side at one W in one round, in a fresh database."""

    workers: int
    side: str
    round: int
    database: str
    load1: float  # 1-minute load average at the start
    ready_s: float = 0.0  # from the first worker's start until all were ready
    worker_sessions: int = 0  # the workers' sessions in the database at the "before" reading
    submitted: int = 0
    completed: int = 0
    claimed_again: int = 0  # runs with attempt > 1 or lease_epoch > 1
    transactions: int = 0  # between the readings, the monitor's polls taken off
    monitor_transactions: int = 0  # the polls taken off
    interval_s: float = 0.0  # between the readings
    xacts_per_workflow: float = 0.0
    claim_scans_per_workflow: float | None = None  # index scans of workflows_runnable_idx
    server_cpu_ms: float | None = None  # per workflow
    sessions_cpu_ms: float | None = None  # per workflow: the measured database's sessions alone
    workers_cpu_ms: float = 0.0  # per workflow
    wall_s: float = 0.0
    submit_rate: float | None = None
    late_submits: int = 0
    max_lag_ms: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    worker_exits: list[int | None] = field(default_factory=list)  # after SIGTERM (None: killed)


@dataclass(frozen=True)
class Place:
    """Where a measurement runs: the server's connection for the readings and its postmaster."""

    admin: psycopg.Connection[Any]
    postmaster: int | None


def measure(side: TreeSide, dsn: str, w: int, number: int, settings: Settings, place: Place) -> Measurement:
    db = conninfo_to_dict(dsn).get("dbname") or ""
    result = Measurement(w, side.name, number, db, os.getloadavg()[0])
    label = f"W={w}, round {number}, {side.name}"
    log(f"{label}: database {db}, starting {w} workers")
    pool = start_workers(side, dsn, w, settings, f"{side.name.replace('@', '-')}-w{w}-r{number}")
    try:
        before, pacing, known = _interval(pool, dsn, result, settings, place, label)
        wait_gone(place.admin, db, known, place.postmaster is not None)
        after = Reading(settled_transactions(place.admin, db), server_cpu(place.postmaster))
    finally:
        pool.kill()
    _fill(result, before, after, pacing, settings.n)
    _figures(result, dsn, before.claim_scans, settings.n)
    exits = sorted(set(result.worker_exits), key=str)
    log(
        f"{label}: per workflow {result.xacts_per_workflow:.2f} transactions, "
        f"{harness.num(result.claim_scans_per_workflow, 2)} claim scans, CPU ms: server "
        f"{harness.num(result.server_cpu_ms, 2)}, sessions {harness.num(result.sessions_cpu_ms, 2)}, "
        f"workers {result.workers_cpu_ms:.2f}; {result.submit_rate or 0:.0f} submits/s, wall "
        f"{result.wall_s:.1f} s, start p50 {result.p50_ms:.1f} ms; the workers exited {exits}"
    )
    return result


def _interval(
    pool: Workers, dsn: str, result: Measurement, settings: Settings, place: Place, label: str
) -> tuple[Reading, Pacing, set[int]]:
    """From the workers' readiness to their exit: the "before" reading, the submits, the wait for
    the runs, the workers' CPU, SIGTERM; the benchmark's two sessions are closed on the way out.
    Returns the "before" reading, the pacing, and the pids of the database's sessions seen."""
    n, db = settings.n, result.database
    with (
        contextlib.closing(Monitor(dsn)) as monitor,
        psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as submitter,
    ):
        result.ready_s = harness.wait_ready(
            pool, label, settings.ready_timeout, READY_POLL, lambda: monitor.count(harness.SQL["registered"])
        )
        log(f"{label}: ready after {result.ready_s:.1f} s; settling {settings.settle:g} s")
        time.sleep(settings.settle)
        flush_statistics(monitor.conn)
        flush_statistics(submitter)
        monitor.statements = 0  # from here on, each is taken off the figure
        known = sessions(place.admin, db)
        result.worker_sessions = len(known) - BENCH_SESSIONS
        before = Reading(
            transactions(place.admin, db), server_cpu(place.postmaster), monitor.row(SQL["claim_scans"])[0]
        )
        workers_before, sessions_before = workers_cpu(pool), sessions_cpu(known)
        log(f"{label}: submitting {n} at {settings.rate:g}/s")
        pacing = submit_paced(submitter, n, settings.rate)
        wait_completed(monitor, pool, n, settings.timeout)
        result.workers_cpu_ms = _per(workers_cpu(pool) - workers_before, n)
        if place.postmaster is not None:
            known |= sessions(place.admin, db)
            result.sessions_cpu_ms = _per(sessions_cpu(known) - sessions_before, n)
        result.worker_exits = pool.terminate(STOP_GRACE)
        result.monitor_transactions = monitor.statements
    return before, pacing, known


def _per(seconds: float, n: int) -> float:
    """CPU seconds as milliseconds per workflow."""
    return round(seconds * 1000.0 / n, 3)


def _fill(result: Measurement, before: Reading, after: Reading, pacing: Pacing, n: int) -> None:
    result.transactions = after.transactions - before.transactions - result.monitor_transactions
    result.xacts_per_workflow = round(result.transactions / n, 3)
    result.interval_s = round(after.at - before.at, 2)
    if before.server_cpu_s is not None and after.server_cpu_s is not None:
        result.server_cpu_ms = _per(after.server_cpu_s - before.server_cpu_s, n)
    rate = pacing.rate(n)
    result.submit_rate = round(rate, 1) if rate is not None else None
    result.late_submits, result.max_lag_ms = pacing.late, pacing.max_lag_ms


def _figures(result: Measurement, dsn: str, scans_before: int | None, n: int) -> None:
    """The runs' figures from the database, and the claim's index scans, after the "after"
    reading (every session has ended: their counts are flushed)."""
    with psycopg.connect(dsn, autocommit=True, application_name=CLIENT) as conn:
        scans = conn.execute(SQL["claim_scans"]).fetchone()
        row = conn.execute(SQL["figures"], {"type": WORKFLOW_TYPE}).fetchone()
    assert row is not None and scans is not None
    if scans[0] is not None and scans_before is not None:
        result.claim_scans_per_workflow = round((scans[0] - scans_before) / n, 3)
    result.submitted, result.completed, result.claimed_again = row[0], row[1], row[2]
    result.wall_s = round(row[3] or 0.0, 3)
    result.p50_ms, result.p99_ms, result.max_ms = (round(v or 0.0, 2) for v in row[4:7])


# -- the report ------------------------------------------------------------------------------------


@dataclass
class Row:
    """One W and side: the medians of its rounds, and the ratios to the smallest W."""

    workers: int
    side: str
    rounds: int
    xacts_per_workflow: float | None
    xacts_ratio: float | None
    claim_scans_per_workflow: float | None
    server_cpu_ms: float | None
    server_cpu_ratio: float | None
    sessions_cpu_ms: float | None
    workers_cpu_ms: float | None
    wall_s: float | None
    submit_rate: float | None
    p50_ms: float | None
    p99_ms: float | None


def ratio(done: list[Measurement], m: Measurement, attr: str) -> float | None:
    """m's figure over the same side's at the smallest W, in the same round."""
    lowest = min(x.workers for x in done)
    base_value = next(
        (getattr(x, attr) for x in done if (x.workers, x.side, x.round) == (lowest, m.side, m.round)), None
    )
    return harness.ratio(getattr(m, attr), base_value)


def _median(mine: list[Measurement], attr: str) -> float | None:
    return harness.median([getattr(m, attr) for m in mine])


def _median_ratio(done: list[Measurement], mine: list[Measurement], attr: str) -> float | None:
    value = harness.median([ratio(done, m, attr) for m in mine])
    return round(value, 3) if value is not None else None


def rows_of(done: list[Measurement], workers: list[int], sides: list[TreeSide]) -> list[Row]:
    rows = []
    for w in workers:
        for side in sides:
            mine = [m for m in done if m.workers == w and m.side == side.name]
            if mine:
                rows.append(
                    Row(
                        w,
                        side.name,
                        len(mine),
                        _median(mine, "xacts_per_workflow"),
                        _median_ratio(done, mine, "xacts_per_workflow"),
                        _median(mine, "claim_scans_per_workflow"),
                        _median(mine, "server_cpu_ms"),
                        _median_ratio(done, mine, "server_cpu_ms"),
                        _median(mine, "sessions_cpu_ms"),
                        _median(mine, "workers_cpu_ms"),
                        _median(mine, "wall_s"),
                        _median(mine, "submit_rate"),
                        _median(mine, "p50_ms"),
                        _median(mine, "p99_ms"),
                    )
                )
    return rows


def _cells(
    xacts: float | None,
    xratio: float | None,
    server: float | None,
    sratio: float | None,
    row: Row | Measurement,
) -> list[str]:
    return [
        harness.num(xacts, 2),
        harness.num(xratio, 2),
        harness.num(row.claim_scans_per_workflow, 2),
        harness.num(server, 2),
        harness.num(sratio, 2),
        harness.num(row.sessions_cpu_ms, 2),
        harness.num(row.workers_cpu_ms, 2),
        harness.num(row.wall_s, 2),
        harness.num(row.submit_rate, 1),
        harness.num(row.p50_ms, 2),
        harness.num(row.p99_ms, 2),
    ]


def problems_of(done: list[Measurement], n: int) -> list[str]:
    out = []
    for m in done:
        where = f"W={m.workers}, round {m.round}, {m.side}"
        if m.completed != n or m.submitted != n:
            out.append(f"{where}: {m.completed} of {m.submitted} runs completed, {n} submitted")
        if m.claimed_again:
            out.append(f"{where}: {m.claimed_again} runs claimed more than once")
        bad = [code for code in m.worker_exits if code != 0]
        if bad:
            out.append(
                f"{where}: {len(bad)} workers exited otherwise than 0 after SIGTERM: {bad[:5]} (None: killed)"
            )
    return out


@dataclass(frozen=True)
class Context:
    """What the report says about the run besides the measurements."""

    args: argparse.Namespace
    settings: Settings
    sides: list[TreeSide]
    server: harness.Server
    postmaster: int | None
    head: str
    loads: tuple[tuple[float, ...], tuple[float, ...]]


def report(ctx: Context, done: list[Measurement]) -> list[str]:
    rows = rows_of(done, ctx.args.workers, ctx.sides)
    problems = problems_of(done, ctx.settings.n)
    if ctx.args.json:
        print(json.dumps(_json(ctx, rows, done, problems), indent=2))
    else:
        _text(ctx, rows, done, problems)
    return problems


def _json(ctx: Context, rows: list[Row], done: list[Measurement], problems: list[str]) -> dict[str, Any]:
    s = ctx.settings
    return {
        "n": s.n,
        "rate": s.rate,
        "workers": ctx.args.workers,
        "concurrency": s.concurrency,
        "poll": s.poll,
        "rounds": ctx.args.rounds,
        "settle_s": s.settle,
        "timeout_s": s.timeout,
        "workflow_type": WORKFLOW_TYPE,
        "steps": STEPS,
        "cpus": os.cpu_count(),
        "loads": {"start": list(ctx.loads[0]), "end": list(ctx.loads[1])},
        "head": ctx.head,
        "server": {**dataclasses.asdict(ctx.server), "postmaster": ctx.postmaster},
        "sides": {side.name: side_label(side, s) for side in ctx.sides},
        "summary": [dataclasses.asdict(r) for r in rows],
        "measurements": [dataclasses.asdict(m) for m in done],
        "problems": problems,
    }


def _text(ctx: Context, rows: list[Row], done: list[Measurement], problems: list[str]) -> None:
    s, args = ctx.settings, ctx.args
    print(
        f"\nwfctl steady arrivals: N={s.n:,} {STEPS}-step workflows ({WORKFLOW_TYPE}) per measurement, "
        f"submitted one at a time at {s.rate:g}/s on one autocommit connection, against W idle workers "
        f"(W = {', '.join(map(str, args.workers))}); {args.rounds} round{'s' if args.rounds != 1 else ''}; "
        f"{os.cpu_count()} CPUs"
    )
    cpu = f"postmaster {ctx.postmaster}" if ctx.postmaster is not None else "n/a (not on this machine)"
    print(f"{harness.server_line(ctx.server)}; server CPU: {cpu}")
    print(f"code: {ctx.head}")
    for side in ctx.sides:
        print(f"side {side.name}: {side_label(side, s)}")
    print(harness.loads_line(ctx.loads))
    print()
    lowest = min(args.workers)
    figures = [
        "xacts/wf",
        f"x W={lowest}",
        "claim scans/wf",
        "server CPU ms/wf",
        f"x W={lowest}",
        "sessions CPU ms/wf",
        "workers CPU ms/wf",
        "wall s",
        "submits/s",
        "start p50 ms",
        "start p99 ms",
    ]
    harness.table(
        ["W", "side", *figures],
        [
            [
                str(r.workers),
                r.side,
                *_cells(r.xacts_per_workflow, r.xacts_ratio, r.server_cpu_ms, r.server_cpu_ratio, r),
            ]
            for r in rows
        ],
    )
    if args.rounds > 1:
        harness.table(
            ["W", "round", "side", "load", *figures],
            [
                [
                    str(m.workers),
                    str(m.round),
                    m.side,
                    f"{m.load1:.2f}",
                    *_cells(
                        m.xacts_per_workflow,
                        ratio(done, m, "xacts_per_workflow"),
                        m.server_cpu_ms,
                        ratio(done, m, "server_cpu_ms"),
                        m,
                    ),
                ]
                for m in done
            ],
        )
    harness.verdict("verification (every run completed, none claimed twice, every worker exited 0)", problems)


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.arrivals",
        description="Steady arrivals against W idle workers: transactions and CPU per workflow as W grows "
        "(see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument("-n", type=int, default=2000, help="workflows per measurement (default 2000)")
    parser.add_argument("--rate", type=float, default=200.0, help="submits per second (default 200)")
    parser.add_argument(
        "--workers",
        type=harness.counts("--workers"),
        default=[1, 4, 16, 64],
        metavar="W,W,...",
        help="worker counts, one measurement each in a fresh database (default 1,4,16,64)",
    )
    parser.add_argument("--concurrency", type=int, help="each worker's --concurrency (default: the worker's)")
    parser.add_argument("--poll", help="each worker's --poll (default: the worker's)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every side for each W (default 1)")
    harness.add_code(parser, "the workers", "the submitter")
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds between the workers' readiness and the first reading (default 3)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds after the last submit for all to complete (default 300)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=600.0,
        help="seconds for the W workers to be ready (default 600)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("-n and --rounds must be at least 1")
    if args.rate <= 0 or args.timeout <= 0 or args.ready_timeout <= 0 or args.settle < 0:
        parser.error("--rate, --timeout and --ready-timeout must be positive, --settle not negative")
    if args.concurrency is not None and args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.poll is not None:
        try:
            parse_duration(args.poll, what="--poll", allow_zero=False)
        except wfctl.InvalidInput as exc:
            parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-arrivals-", args.keep, lambda workdir: run_all(args, workdir))


def run_all(args: argparse.Namespace, workdir: Path) -> int:
    settings = Settings(
        args.n,
        args.rate,
        args.concurrency,
        args.poll,
        args.settle,
        args.timeout,
        args.ready_timeout,
        workdir,
        harness.empty_config(workdir, "bench/arrivals.py"),
    )
    sides = harness.tree_sides(args.code, workdir)
    head = sides[0].code.label.removeprefix("the working tree ").strip("()")  # "HEAD 8f01c56 + ..."
    loads_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        harness.warn_if_not_durable(info)
        admin = stack.enter_context(psycopg.connect(server, autocommit=True, application_name=CLIENT))
        check_capacity(admin, max(args.workers))
        postmaster = local_postmaster(admin)
        if postmaster is None:
            log("the server does not run on this machine: its CPU is not measured (n/a)")
        trees = harness.Trees(workdir, stack)
        place = Place(admin, postmaster)
        done: list[Measurement] = []
        for w in args.workers:
            for number in range(1, args.rounds + 1):
                for side in sides:
                    with harness.tree_database(server, "arrivals", args.keep, side.schema_code, trees) as dsn:
                        done.append(measure(side, dsn, w, number, settings, place))
        ctx = Context(args, settings, sides, info, postmaster, head, (loads_start, os.getloadavg()))
        return 1 if report(ctx, done) else 0


if __name__ == "__main__":
    sys.exit(main())
