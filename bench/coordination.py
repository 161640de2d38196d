"""Coordination benchmark: wake-up latency, parked workflows at rest, fan-out and join.

    python -m bench.coordination [--dsn DSN | --server-dsn DSN] [--quick] [options]

Run from the repository root (the workers import ``bench.coord_app``). Real ``wfctl worker``
processes; every figure is printed next to a baseline measured in the same run, on the same
server, by the same worker processes (the machine is shared and noisy: compare ratios):

1. latency (one idle worker): send-to-resume of a workflow parked in ``ctx.recv``, and of a
   parent parked in ``ctx.wait`` on a child that waits for the message (send -> parent runs
   again, and child runs again -> parent runs again); baseline: submit-to-start of a fresh
   workflow. Times are ``time.time()`` taken just before the send's (submit's) COMMIT and in
   the workflow's first step after the wait (bench/coord_app.py). The three kinds take turns,
   one at a time, each after the previous finished and a random pause of 20-120 ms.
2. waiting (one worker, --concurrency 4): what N workflows parked in ``ctx.recv`` cost the
   server over a quiet interval (transactions, table scans, rows and blocks read, the claim's
   index; pg_stat_statements when the server preloads it), against the same interval with none
   parked; then N sends (batches of --send-batch per transaction) until all N completed,
   against the same worker draining N plain workflows of the same shape without the wait.
3. fan-out (W workers, default options): a parent starts M children, with ``ctx.start_child``
   in a loop and again with one ``ctx.start_children``, and joins them with one ``ctx.wait``:
   submit -> completed, the join (last child finished -> parent completed) and the parent's
   executions (workflow_attempts); baseline: the same M child workflows submitted directly
   (the statement of ``wfctl submit --input-file``).

Databases as in bench/run.py: default a durable embedded PostgreSQL; ``--server-dsn`` (or
WFCTL_DSN) a server where each phase gets a fresh database; ``--dsn`` one existing database.
See bench/README.md, "The coordination benchmark".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import wfctl
from bench import harness
from bench.coord_app import TOPIC, TYPES
from bench.harness import BenchError, Workers, log, wait_for
from wfctl.client import submit_many
from wfctl.queries import parse_blocks, q

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

GOAL_MS = 50.0  # median send (or child completion) -> running again, idle worker
PHASES = ("latency", "waiting", "fanout")
SUBMIT_BATCH = 1000  # inputs per submit_many statement
BULK_POLL = 0.1  # seconds between progress polls over thousands of workflows
SETTLE = 2.0  # seconds after VACUUM before a quiet interval: counters flushed, worker idle
READY_TIMEOUT = 60.0  # seconds for a worker process to register
EXPLAIN_RUNS = 10  # claim statements explained in one session
WARMUP = 3  # uncounted samples of each latency kind first (worker start-up), as bench/run.py's


# -- options --------------------------------------------------------------------------------------

FULL = {"latency_count": 200, "waiting": 10_000, "children": 1000, "quiet_seconds": 10.0}
QUICK = {"latency_count": 50, "waiting": 1000, "children": 200, "quiet_seconds": 5.0}


@dataclass
class Settings:
    latency_count: int
    waiting: int
    children: int
    quiet_seconds: float
    send_batch: int
    concurrency: int
    waiting_concurrency: int
    fanout_workers: int
    slow_child_ms: float
    timeout: float
    seed: int
    worker_args: list[str]
    workdir: Path


def worker_command(dsn: str, concurrency: int, settings: Settings) -> list[str]:
    return [
        *harness.wfctl_command(),
        "worker",
        "--app",
        "bench.coord_app",
        "--concurrency",
        str(concurrency),
        "--dsn",
        dsn,
        *settings.worker_args,
    ]


# -- figures --------------------------------------------------------------------------------------


@dataclass
class Distribution:
    samples: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Distribution:
        ms = sorted(s * 1000 for s in seconds)
        if len(ms) == 1:
            return cls(1, ms[0], ms[0], ms[0], ms[0])
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        return cls(len(ms), statistics.median(ms), cuts[89], cuts[98], ms[-1])


@dataclass
class LatencyResult:
    concurrency: int
    baseline: Distribution  # submit -> first step runs
    recv: Distribution  # send -> the step after ctx.recv runs
    send_to_parent: Distribution  # send to the child -> the parent's step after ctx.wait runs
    child_to_parent: Distribution  # the child's step after its recv -> the parent's step
    peak_rss_mb: float | None = None


@dataclass
class Activity:
    """Counters of the database (pg_stat_database, pg_stat_user_tables/indexes)."""

    xacts: int
    tuples: int
    blocks: int
    scans: int
    runnable_scans: int
    runnable_blocks: int

    def __sub__(self, other: Activity) -> Activity:
        return Activity(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


def astuple(activity: Activity) -> tuple[int, ...]:
    return dataclasses.astuple(activity)


@dataclass
class Quiet:
    parked: int
    seconds: float
    activity: Activity
    statements: int | None  # pg_stat_statements calls (the benchmark's own left out)
    top_statements: list[tuple[int, str]] = field(default_factory=list)
    claim_blocks: int | None = None  # one claim statement under EXPLAIN (ANALYZE, BUFFERS)
    claim_ms: float | None = None


@dataclass
class Drain:
    n: int
    seconds: float  # start() begins -> all n completed
    per_s: float
    start_s: float  # start() alone: the submits or sends, committed
    span_db_s: float | None = None  # first created -> last finished, database clock
    xacts_per_workflow: float | None = None


@dataclass
class WaitingResult:
    n: int
    concurrency: int
    idle: Quiet
    parked: Quiet
    park_seconds: float
    plain: Drain
    woken: Drain
    peak_rss_mb: float | None = None


@dataclass
class FanResult:
    mode: str  # FAN_MODES
    total_s: float  # submit (before its commit) -> the benchmark sees the parent completed
    total_db_s: float | None
    starting_s: float | None  # first child created -> last child created
    join_ms: float | None  # last child finished -> parent finished (database clock)
    executions: int
    outcomes: str
    unfinished_at_park: int


@dataclass
class FanGroup:
    children: int
    child_ms: float  # each child's one step takes this long (0: a no-op)
    workers: int
    direct: Drain  # the baseline: the same children submitted directly
    runs: list[FanResult]


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# -- database helpers ------------------------------------------------------------------------------


def counts(conn: psycopg.Connection[Any], workflow_type: str) -> dict[str, int]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SQL["type_counts"], {"type": workflow_type}).fetchone()
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def activity(conn: psycopg.Connection[Any]) -> Activity:
    row = conn.execute(SQL["activity"]).fetchone()
    assert row is not None
    return Activity(*(int(v) for v in row))


def statements_available(conn: psycopg.Connection[Any], *, may_create: bool) -> bool:
    """pg_stat_statements usable in this database (created here when the server preloads it and
    the database is the benchmark's own)."""
    try:
        if conn.execute(SQL["statements_installed"]).fetchone() == (True,):
            return True
        if may_create and conn.execute(SQL["statements_preloaded"]).fetchone() == (True,):
            conn.execute(SQL["statements_create"])
            return True
    except psycopg.Error as exc:
        log(f"pg_stat_statements not used: {str(exc).strip().splitlines()[0]}")
    return False


OWN_STATEMENTS = ("pg_stat_database", "pg_stat_statements")  # the benchmark's own reads


def statements(conn: psycopg.Connection[Any]) -> dict[int, tuple[int, str]]:
    """queryid -> (calls, a one-line name: the statement's first comment line, else its start);
    the benchmark's own statements left out."""
    out = {}
    for qid, calls, text in conn.execute(SQL["statements"]).fetchall():
        if qid is None or any(own in text for own in OWN_STATEMENTS):
            continue
        first = text.strip().splitlines()[0] if text.strip() else ""
        name = first.removeprefix("--").strip() if first.startswith("--") else " ".join(text.split())
        out[int(qid)] = (int(calls), name[:90])
    return out


def statement_delta(
    before: dict[int, tuple[int, str]], after: dict[int, tuple[int, str]]
) -> tuple[int, list[tuple[int, str]]]:
    """Calls between two snapshots; the most called."""
    changed = []
    for qid, (calls, text) in after.items():
        delta = calls - before.get(qid, (0, text))[0]
        if delta > 0:
            changed.append((delta, text))
    changed.sort(reverse=True)
    return sum(d for d, _ in changed), changed[:6]


def explain_claim(dsn: str, types: list[str]) -> tuple[int | None, float | None]:
    """Blocks touched and execution time of one claim statement (sql/queries/worker.sql claim)
    with nothing runnable, under EXPLAIN (ANALYZE, BUFFERS), rolled back: the blocks of the
    last of EXPLAIN_RUNS runs in one session and their median time (the first run of a session
    pays for its caches)."""
    none: list[Any] = [None] * len(types)
    params = harness.claim_params(types, [3] * len(types), none, none, 4, "bench-explain", room=4)
    statement = sql.SQL(SQL["explain"]).format(query=sql.SQL(q("worker.claim")))  # type: ignore[arg-type]
    plans = []
    try:
        with psycopg.connect(dsn) as conn:
            for _ in range(EXPLAIN_RUNS):
                row = conn.execute(statement, params).fetchone()
                assert row is not None
                plans.append((row[0] if isinstance(row[0], list) else json.loads(row[0]))[0])
            conn.rollback()
    except psycopg.Error as exc:
        log(f"EXPLAIN of the claim failed: {str(exc).strip().splitlines()[0]}")
        return None, None
    top = plans[-1]["Plan"]
    blocks = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return blocks, statistics.median(float(p.get("Execution Time", 0.0)) for p in plans)


def vacuum(dsn: str) -> None:
    harness.prepare_tables(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL["vacuum"])


def submit(dsn: str, workflow_type: str, inputs: Sequence[Any]) -> list[UUID]:
    """All of them in one transaction, SUBMIT_BATCH per statement (wfctl submit --input-file)."""
    encoded = [None if i is None else json.dumps(i) for i in inputs]
    ids: list[UUID] = []
    with psycopg.connect(dsn) as conn:
        for start in range(0, len(encoded), SUBMIT_BATCH):
            ids += submit_many(conn, workflow_type, encoded[start : start + SUBMIT_BATCH])
    return ids


def start_workers(
    dsn: str, label: str, count: int, concurrency: int, settings: Settings, sampler: harness.RssSampler
) -> Workers:
    workers = Workers(settings.workdir, label, sampler)
    with psycopg.connect(dsn, autocommit=True) as conn:
        since = conn.execute(SQL["now"]).fetchone()[0]  # type: ignore[index]
        cmd = worker_command(dsn, concurrency, settings)
        log(f"{label}: starting {count} worker(s): {' '.join(cmd)}")
        pids = [proc.pid for proc in workers.start(cmd, count)]

        def ready() -> tuple[bool, str]:
            row = conn.execute(SQL["ready_workers"], {"pids": pids, "since": since}).fetchone()
            n = int(row[0]) if row else 0
            return n >= count, f"{n}/{count} workers registered"

        wait_for(ready, "waiting for the workers to start", READY_TIMEOUT, workers, 0.05)
    return workers


def stop_workers(workers: Workers, verification: Verification, label: str) -> None:
    codes = workers.terminate()
    bad = [c for c in codes if c not in (0, -signal.SIGTERM)]
    if bad:
        verification.problems.append(f"{label}: worker exit codes {codes}\n{workers.tails()}")


def verify(dsn: str, verification: Verification) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(SQL["verify"], {"types": list(TYPES)}).fetchall()
    for wtype, total, not_completed, retried, not_parked_once, messages, consumed in rows:
        if not_completed:
            verification.problems.append(f"{wtype}: {not_completed} of {total} not completed")
        if retried:
            verification.problems.append(f"{wtype}: {retried} of {total} retried")
        if not_parked_once:
            verification.problems.append(
                f"{wtype}: {not_parked_once} of {total} did not run as parked, then completed"
            )
        if messages != consumed:
            verification.problems.append(f"{wtype}: {consumed} of {messages} messages consumed")


# -- 1. latency --------------------------------------------------------------------------------------


def latency_phase(
    dsn: str, settings: Settings, sampler: harness.RssSampler, verification: Verification
) -> LatencyResult:
    total = WARMUP + settings.latency_count
    rng = random.Random(settings.seed)
    workers = start_workers(dsn, "latency", 1, settings.concurrency, settings, sampler)
    try:
        recv_ids = submit(dsn, "coord_recv", [None] * total)
        parent_ids = submit(dsn, "coord_parent", [None] * total)
        with psycopg.connect(dsn, autocommit=True) as mon:

            def parked() -> tuple[bool, str]:
                n = {t: counts(mon, t)["parked"] for t in ("coord_recv", "coord_parent", "coord_child")}
                return all(v >= total for v in n.values()), ", ".join(f"{v} {t}" for t, v in n.items())

            log(f"latency: parking {total} coord_recv and {total} coord_parent (+ their children)")
            wait_for(parked, "parking the latency workflows", settings.timeout, workers, BULK_POLL)
            child_of = {r[0]: r[1] for r in mon.execute(SQL["children"], {"ids": parent_ids}).fetchall()}
            kinds = ("baseline", "recv", "child")
            sent: dict[str, list[tuple[UUID, float]]] = {k: [] for k in kinds}
            log(f"latency: {settings.latency_count} samples of each kind (+{WARMUP} warm-ups), in turns")
            with psycopg.connect(dsn) as sender:
                for i in range(total):
                    for kind in kinds:
                        time.sleep(rng.uniform(0.02, 0.12))
                        if kind == "baseline":
                            target = wfctl.submit(sender, "coord_start")
                        elif kind == "recv":
                            target = recv_ids[i]
                            wfctl.send(sender, target, TOPIC)
                        else:
                            target = parent_ids[i]
                            wfctl.send(sender, child_of[target], TOPIC)
                        before_commit = time.time()
                        sender.commit()
                        harness.wait_finished(mon, target, 60.0 if i < WARMUP else 30.0, workers)
                        if i >= WARMUP:
                            sent[kind].append((target, before_commit))
            wanted = [wid for pairs in sent.values() for wid, _ in pairs]
            wanted += [child_of[wid] for wid, _ in sent["child"]]
            at = {r[0]: float(r[1]) for r in mon.execute(SQL["resumed_at"], {"ids": wanted}).fetchall()}
    finally:
        stop_workers(workers, verification, "latency")
    result = LatencyResult(
        settings.concurrency,
        baseline=Distribution.of([at[w] - t for w, t in sent["baseline"]]),
        recv=Distribution.of([at[w] - t for w, t in sent["recv"]]),
        send_to_parent=Distribution.of([at[w] - t for w, t in sent["child"]]),
        child_to_parent=Distribution.of([at[w] - at[child_of[w]] for w, _ in sent["child"]]),
        peak_rss_mb=_peak(sampler, workers),
    )
    log(
        f"latency: p50 submit-to-start {result.baseline.p50_ms:.1f} ms, send-to-resume "
        f"{result.recv.p50_ms:.1f} ms, child-to-parent {result.child_to_parent.p50_ms:.1f} ms"
    )
    return result


def _peak(sampler: harness.RssSampler, workers: Workers) -> float | None:
    peaks = [sampler.peaks.get(p.pid, 0) for p in workers.procs]
    return round(max(peaks) / 1024, 1) if peaks and max(peaks) else None


# -- 2. waiting ---------------------------------------------------------------------------------------


def quiet_interval(dsn: str, parked: int, settings: Settings, use_statements: bool) -> Quiet:
    vacuum(dsn)
    time.sleep(min(SETTLE, settings.quiet_seconds))
    with psycopg.connect(dsn, autocommit=True) as mon:
        first = activity(mon)
        own = 1  # that read's own transaction
        before = statements(mon) if use_statements else {}
        own += 1 if use_statements else 0
        started = time.monotonic()
        time.sleep(settings.quiet_seconds)
        seconds = time.monotonic() - started
        delta = activity(mon) - first
        after = statements(mon) if use_statements else {}
    delta.xacts -= own
    calls, top = statement_delta(before, after) if use_statements else (None, [])
    blocks, ms = explain_claim(dsn, list(TYPES))
    return Quiet(parked, seconds, delta, calls, top, blocks, ms)


def drain(
    dsn: str,
    label: str,
    workflow_type: str,
    n: int,
    start: Callable[[], tuple[int, list[UUID]]],
    settings: Settings,
    workers: Workers,
) -> Drain:
    """Time from ``start()`` (which returns how many transactions it committed and the ids of
    the workflows it runs) until n more workflows of the type are completed."""
    with psycopg.connect(dsn, autocommit=True) as mon:
        done_before = counts(mon, workflow_type)["completed"]
        first = activity(mon)
        t0 = time.monotonic()
        own, ids = start()
        start_s = time.monotonic() - t0
        own += 1

        def finished() -> tuple[bool, str]:
            c = counts(mon, workflow_type)
            if c["failed"]:
                raise BenchError(f"{label}: {c['failed']} {workflow_type} failed or cancelled")
            return c["completed"] - done_before >= n, f"{c['completed'] - done_before}/{n} completed"

        own += wait_for(finished, label, settings.timeout, workers, BULK_POLL)
        seconds = time.monotonic() - t0
        time.sleep(1.0)  # the workers' statistics reach pg_stat_database
        delta = activity(mon) - first
        span = _float(mon.execute(SQL["span"], {"ids": ids}).fetchone())
    log(f"{label}: {n} in {seconds:.2f} s = {n / seconds:,.0f}/s")
    return Drain(n, seconds, n / seconds, start_s, span, (delta.xacts - own) / n)


def waiting_phase(
    dsn: str, settings: Settings, sampler: harness.RssSampler, verification: Verification, *, own_db: bool
) -> WaitingResult:
    n = settings.waiting
    with psycopg.connect(dsn, autocommit=True) as conn:
        use_statements = statements_available(conn, may_create=own_db)
    workers = start_workers(dsn, "waiting", 1, settings.waiting_concurrency, settings, sampler)
    try:
        # the baseline drain first: the quiet intervals then differ only by the parked workflows
        def submit_plain() -> tuple[int, list[UUID]]:
            return 1, submit(dsn, "coord_start", [None] * n)

        plain = drain(dsn, f"waiting: {n} plain workflows", "coord_start", n, submit_plain, settings, workers)
        log(f"waiting: quiet interval of {settings.quiet_seconds:g} s with nothing parked")
        idle = quiet_interval(dsn, 0, settings, use_statements)

        with psycopg.connect(dsn, autocommit=True) as mon:
            parked_before = counts(mon, "coord_recv")["parked"]
            t0 = time.monotonic()
            ids = submit(dsn, "coord_recv", [None] * n)

            def all_parked() -> tuple[bool, str]:
                p = counts(mon, "coord_recv")["parked"] - parked_before
                return p >= n, f"{p}/{n} parked"

            log(f"waiting: parking {n} workflows in ctx.recv")
            wait_for(all_parked, "parking", settings.timeout, workers, BULK_POLL)
            park_seconds = time.monotonic() - t0
        log(f"waiting: {n} parked in {park_seconds:.1f} s; quiet interval of {settings.quiet_seconds:g} s")
        loaded = quiet_interval(dsn, n, settings, use_statements)

        def send_all() -> tuple[int, list[UUID]]:
            with psycopg.connect(dsn) as conn:
                batches = 0
                for start in range(0, n, settings.send_batch):
                    conn.execute(
                        SQL["send_batch"], {"topic": TOPIC, "ids": ids[start : start + settings.send_batch]}
                    )
                    conn.commit()
                    batches += 1
            return batches, ids

        woken = drain(dsn, f"waiting: {n} sends", "coord_recv", n, send_all, settings, workers)
    finally:
        stop_workers(workers, verification, "waiting")
    return WaitingResult(
        n, settings.waiting_concurrency, idle, loaded, park_seconds, plain, woken, _peak(sampler, workers)
    )


# -- 3. fan-out --------------------------------------------------------------------------------------


FAN_MODES = {"loop": "ctx.start_child in a loop", "batch": "one ctx.start_children"}


def fanout_phase(
    dsn: str, settings: Settings, sampler: harness.RssSampler, verification: Verification
) -> list[FanGroup]:
    workers = start_workers(dsn, "fanout", settings.fanout_workers, settings.concurrency, settings, sampler)
    try:
        groups = [fan_group(dsn, 0.0, settings, workers, verification)]
        if settings.slow_child_ms > 0:
            groups.append(fan_group(dsn, settings.slow_child_ms, settings, workers, verification))
    finally:
        stop_workers(workers, verification, "fanout")
    return groups


def fan_group(
    dsn: str, child_ms: float, settings: Settings, workers: Workers, verification: Verification
) -> FanGroup:
    """M children of one step of child_ms: submitted directly (the baseline, first: it also
    warms the workers up), then started by one parent in each way and joined by one ctx.wait."""
    m = settings.children
    what = f"{m} children of {child_ms:g} ms"

    def submit_direct() -> tuple[int, list[UUID]]:
        return 1, submit(dsn, "coord_leaf", [{"i": i, "ms": child_ms} for i in range(m)])

    direct = drain(
        dsn, f"fanout: {what} submitted directly", "coord_leaf", m, submit_direct, settings, workers
    )
    runs = [fan_out(dsn, mode, child_ms, settings, workers, verification) for mode in FAN_MODES]
    return FanGroup(m, child_ms, settings.fanout_workers, direct, runs)


def fan_out(
    dsn: str,
    mode: str,
    child_ms: float,
    settings: Settings,
    workers: Workers,
    verification: Verification,
) -> FanResult:
    m = settings.children
    with psycopg.connect(dsn, autocommit=True) as mon:
        log(f"fanout: one parent starting {m} children of {child_ms:g} ms ({FAN_MODES[mode]}), joining them")
        with psycopg.connect(dsn) as conn:
            parent = wfctl.submit(conn, "coord_fan", {"n": m, "ms": child_ms, "batch": mode == "batch"})
            t0 = time.monotonic()
            conn.commit()
        harness.wait_finished(mon, parent, settings.timeout, workers)
        total_s = time.monotonic() - t0
        with mon.cursor(row_factory=dict_row) as cur:
            row = cur.execute(SQL["fan"], {"id": parent}).fetchone()
    assert row is not None
    if row["children"] != m or row["completed"] != m:
        verification.problems.append(
            f"fan-out ({mode}): {row['completed']}/{row['children']} of {m} children completed"
        )
    result = FanResult(
        mode,
        total_s,
        row["total"],
        row["starting"],
        None if row["joining"] is None else row["joining"] * 1000,
        int(row["executions"]),
        row["outcomes"] or "",
        int(row["unfinished_at_park"]),
    )
    log(
        f"fanout: parent done in {total_s:.2f} s, join {_num(result.join_ms, 1)} ms, "
        f"{result.executions} executions ({result.outcomes})"
    )
    return result


def _plain(value: Any) -> Any:
    return [asdict(v) for v in value] if isinstance(value, list) else asdict(value)


def _float(row: Sequence[Any] | None) -> float | None:
    return float(row[0]) if row and row[0] is not None else None


# -- the report ------------------------------------------------------------------------------------


_num = harness.num


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or not b else f"{a / b:.2f}x"


table = harness.table


def report_latency(r: LatencyResult) -> list[tuple[str, bool]]:
    print(
        f"## 1. Wake-up latency: one idle worker (--concurrency {r.concurrency}), "
        f"{r.recv.samples} samples of each, in turns"
    )
    print()
    rows = []
    for label, d in (
        ("baseline: submit -> first step runs", r.baseline),
        ("send -> running again after ctx.recv", r.recv),
        ("send to child -> parent running again after ctx.wait", r.send_to_parent),
        ("child running again -> parent running again", r.child_to_parent),
    ):
        rows.append(
            [
                label,
                _num(d.p50_ms, 1),
                _num(d.p90_ms, 1),
                _num(d.p99_ms, 1),
                _num(d.max_ms, 1),
                _ratio(d.p50_ms, r.baseline.p50_ms),
            ]
        )
    table(["ms", "p50", "p90", "p99", "max", "p50 / baseline"], rows)
    return [
        (f"send -> running again, p50 < {GOAL_MS:g} ms: {r.recv.p50_ms:.1f} ms", r.recv.p50_ms < GOAL_MS),
        (
            f"child's completion -> parent running again, p50 < {GOAL_MS:g} ms: "
            f"{r.child_to_parent.p50_ms:.1f} ms (from the child's last step, its completion commit included)",
            r.child_to_parent.p50_ms < GOAL_MS,
        ),
    ]


def report_waiting(r: WaitingResult) -> list[tuple[str, bool]]:
    print(f"## 2. {r.n:,} workflows parked in ctx.recv, one worker --concurrency {r.concurrency}")
    print()
    a, b = r.idle.activity, r.parked.activity

    def diff(x: float | None, y: float | None, digits: int = 0) -> str:
        return "n/a" if x is None or y is None else f"{y - x:+,.{digits}f}"

    rows = [
        [
            "quiet interval (s), after VACUUM ANALYZE",
            _num(r.idle.seconds, 1),
            _num(r.parked.seconds, 1),
            "",
        ],
        [
            "transactions (pg_stat_database xact_commit + xact_rollback)",
            _num(a.xacts),
            _num(b.xacts),
            diff(a.xacts, b.xacts),
        ],
        [
            "statements (pg_stat_statements calls)",
            _num(r.idle.statements),
            _num(r.parked.statements),
            diff(r.idle.statements, r.parked.statements),
        ],
        [
            "table scans (pg_stat_user_tables seq_scan + idx_scan)",
            _num(a.scans),
            _num(b.scans),
            diff(a.scans, b.scans),
        ],
        [
            "rows and index entries read (tup_returned + tup_fetched)",
            _num(a.tuples),
            _num(b.tuples),
            diff(a.tuples, b.tuples),
        ],
        ["block accesses (blks_hit + blks_read)", _num(a.blocks), _num(b.blocks), diff(a.blocks, b.blocks)],
        [
            "scans of the claim index workflows_runnable_idx",
            _num(a.runnable_scans),
            _num(b.runnable_scans),
            diff(a.runnable_scans, b.runnable_scans),
        ],
        [
            "block accesses of workflows_runnable_idx",
            _num(a.runnable_blocks),
            _num(b.runnable_blocks),
            diff(a.runnable_blocks, b.runnable_blocks),
        ],
        [
            "one claim statement, EXPLAIN ANALYZE: blocks",
            _num(r.idle.claim_blocks),
            _num(r.parked.claim_blocks),
            diff(r.idle.claim_blocks, r.parked.claim_blocks),
        ],
        [
            f"one claim statement, EXPLAIN ANALYZE: ms (median of {EXPLAIN_RUNS})",
            _num(r.idle.claim_ms, 3),
            _num(r.parked.claim_ms, 3),
            diff(r.idle.claim_ms, r.parked.claim_ms, 3),
        ],
    ]
    table(["over the quiet interval", "0 parked (baseline)", f"{r.n:,} parked", "difference"], rows)
    for label, quiet in (("0 parked", r.idle), (f"{r.n:,} parked", r.parked)):
        if quiet.top_statements:
            print(f"most called statements, {label}:")
            for calls, text in quiet.top_statements:
                print(f"  {calls:6,d}  {text}")
            print()
    print(
        f"parking: {r.n:,} submitted -> all parked in {r.park_seconds:.1f} s "
        f"({r.n / r.park_seconds:,.0f}/s); the worker's peak RSS over the phase: {_num(r.peak_rss_mb, 1)} MB"
    )
    print()
    rows = [
        [
            "wall time: first send / submit -> all completed (s)",
            _num(r.woken.seconds, 2),
            _num(r.plain.seconds, 2),
            _ratio(r.plain.seconds, r.woken.seconds),
        ],
        ["workflows/s", _num(r.woken.per_s), _num(r.plain.per_s), _ratio(r.woken.per_s, r.plain.per_s)],
        [
            "transactions per workflow (the benchmark's own left out)",
            _num(r.woken.xacts_per_workflow, 2),
            _num(r.plain.xacts_per_workflow, 2),
            "",
        ],
    ]
    table(
        [f"draining {r.n:,}", f"{r.n:,} sends to parked", f"{r.n:,} plain (baseline)", "parked / plain"], rows
    )
    per = (b.xacts - a.xacts) / r.n
    scans = (b.scans - a.scans) / r.n
    limit = max(3, r.n // 100)
    return [
        (
            f"{r.n:,} parked workflows cause no per-workflow queries: {b.xacts - a.xacts:+,d} transactions "
            f"({per:+.4f} per parked workflow), {b.scans - a.scans:+,d} table scans ({scans:+.4f}) over "
            f"{r.parked.seconds:.0f} s against none parked",
            abs(b.xacts - a.xacts) < limit and abs(b.scans - a.scans) < limit,
        )
    ]


def report_fanout(groups: list[FanGroup]) -> list[tuple[str, bool]]:
    checks = []
    for g in groups:
        kind = "no-op children" if g.child_ms <= 0 else f"children of one {g.child_ms:g} ms step"
        print(f"## 3. Fan-out: one parent, {g.children:,} {kind}, {g.workers} workers (default options)")
        print()
        header = ["", "submitted directly (baseline)"]
        for r in g.runs:
            header += [FAN_MODES[r.mode], "/ baseline"]
        rows = [
            ["submit -> all completed (s)", _num(g.direct.seconds, 2)],
            ["first submit -> last completion, database clock (s)", _num(g.direct.span_db_s, 2)],
            ["children/s", _num(g.direct.per_s)],
            ["parent: first child -> last child created (s)", ""],
            ["join: last child finished -> parent completed (ms)", ""],
            ["children not finished when the parent parked", ""],
            ["parent's executions (workflow_attempts rows)", ""],
        ]
        for r in g.runs:
            rate = g.children / r.total_s
            rows[0] += [_num(r.total_s, 2), _ratio(r.total_s, g.direct.seconds)]
            rows[1] += [_num(r.total_db_s, 2), _ratio(r.total_db_s, g.direct.span_db_s)]
            rows[2] += [_num(rate), _ratio(rate, g.direct.per_s)]
            rows[3] += [_num(r.starting_s, 3), ""]
            rows[4] += [_num(r.join_ms, 1), ""]
            rows[5] += [str(r.unfinished_at_park), ""]
            rows[6] += [f"{r.executions} ({r.outcomes})", ""]
        table(header, rows)
        for r in g.runs:
            how = f"{kind}, {FAN_MODES[r.mode]}"
            if r.executions == 1:
                text = (
                    f"{how}: the parent never parked (every child had finished when it reached "
                    "ctx.wait); the join's wake-up was not exercised"
                )
            else:
                text = f"{how}: the last child's completion woke the parent {r.executions - 1} time(s)"
            checks.append((text, r.executions <= 2))
    return checks


def report(
    results: dict[str, Any], server: harness.Server, settings: Settings, verification: Verification
) -> None:
    extra = " ".join(settings.worker_args)
    print(
        f"\nwfctl coordination benchmark, {os.cpu_count()} CPUs"
        + (f", worker options: {extra}" if extra else "")
    )
    print(harness.server_line(server))
    print()
    checks: list[tuple[str, bool]] = []
    if "latency" in results:
        checks += report_latency(results["latency"])
    if "waiting" in results:
        checks += report_waiting(results["waiting"])
    if "fanout" in results:
        checks += report_fanout(results["fanout"])
    for text, met in checks:
        print(f"goal {'MET   ' if met else 'MISSED'} {text}")
    harness.verdict("verification", verification.problems)


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.coordination",
        description="Benchmark wfctl's coordination: wake-up latency, parked workflows, fan-out "
        "(see bench/README.md).",
    )
    harness.add_server_dsn(
        parser,
        "a fresh database per phase on this server (default: $WFCTL_DSN, else an embedded server)",
        dsn_help="run every phase in this one existing database",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller defaults: 50 latency samples, 1,000 waiting, 200 children, 5 s quiet intervals",
    )
    parser.add_argument("--only", help=f"comma-separated phases to run ({', '.join(PHASES)})")
    parser.add_argument("--latency-count", type=int, help="samples of each latency kind (default 200)")
    parser.add_argument("--waiting", type=int, help="parked workflows of phase 2 (default 10000)")
    parser.add_argument("--children", type=int, help="children of the fan-out (default 1000)")
    parser.add_argument("--quiet-seconds", type=float, help="length of each quiet interval (default 10)")
    parser.add_argument(
        "--send-batch", type=int, default=1000, help="messages per transaction (default 1000)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="--concurrency of the latency and fan-out workers (default 8)",
    )
    parser.add_argument("--waiting-concurrency", type=int, default=4, help="phase 2's worker (default 4)")
    parser.add_argument(
        "--fanout-workers", type=int, default=4, help="worker processes of the fan-out (default 4)"
    )
    parser.add_argument(
        "--slow-child-ms",
        type=float,
        default=0.0,
        help="also a fan-out whose children take this long (default 0: only no-op children)",
    )
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help="extra `wfctl worker` options, one shell-quoted string",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds allowed for each wait (default 600)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the latency phase's random pauses")
    parser.add_argument(
        "--keep", action="store_true", help="keep the databases (or rows) and the worker logs"
    )
    parser.add_argument("--json", action="store_true", help="also print the results as JSON on stdout")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    phases = PHASES if not args.only else tuple(p.strip() for p in args.only.split(",") if p.strip())
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(
            f"--only: unknown phase {', '.join(unknown) or repr(args.only)} (use {', '.join(PHASES)})"
        )
    args.phases = [p for p in PHASES if p in phases]
    small = (
        "latency_count",
        "waiting",
        "children",
        "send_batch",
        "concurrency",
        "waiting_concurrency",
        "fanout_workers",
    )
    if min(getattr(args, n) for n in small) < 1 or args.quiet_seconds <= 0:
        parser.error("counts, sizes and --quiet-seconds must be positive")
    return args


@contextlib.contextmanager
def databases(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Callable[[str], Any], str, str]]:
    """(a context manager giving the DSN for a phase, a DSN for describing the server, its
    description)."""
    if args.dsn:
        with harness.shared_database(args.dsn, list(TYPES), args.keep) as shared:
            yield (lambda _phase: contextlib.nullcontext(shared)), args.dsn, "the database given by --dsn"
        return
    with harness.server_dsn(args.server_dsn, workdir, "a fresh database per phase") as (server, description):
        yield (lambda phase: harness.fresh_database(server, f"coord_{phase}", args.keep)), server, description


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-coord-", args.keep, lambda workdir: run(args, workdir))


def run(args: argparse.Namespace, workdir: Path) -> int:
    settings = Settings(
        args.latency_count,
        args.waiting,
        args.children,
        args.quiet_seconds,
        args.send_batch,
        args.concurrency,
        args.waiting_concurrency,
        args.fanout_workers,
        args.slow_child_ms,
        args.timeout,
        args.seed,
        shlex.split(args.worker_args),
        workdir,
    )
    verification = Verification()
    results: dict[str, Any] = {}
    sampler = harness.RssSampler()
    sampler.start()
    try:
        with databases(args, workdir) as (database, server_dsn, description):
            server = harness.describe_server(server_dsn, description)
            harness.warn_if_not_durable(server)
            for phase in args.phases:
                with database(phase) as dsn:
                    if phase == "latency":
                        results[phase] = latency_phase(dsn, settings, sampler, verification)
                    elif phase == "waiting":
                        own_db = not args.dsn
                        results[phase] = waiting_phase(dsn, settings, sampler, verification, own_db=own_db)
                    else:
                        results[phase] = fanout_phase(dsn, settings, sampler, verification)
                    verify(dsn, verification)
    finally:
        sampler.stop()
    report(results, server, settings, verification)
    if args.json:
        print(
            json.dumps(
                {
                    "settings": {k: v for k, v in asdict(settings).items() if k != "workdir"},
                    "server": asdict(server),
                    "results": {k: _plain(v) for k, v in results.items()},
                    "verification": verification.problems,
                },
                indent=2,
                default=str,
            )
        )
    return 0 if verification.ok else 1


if __name__ == "__main__":
    sys.exit(main())
