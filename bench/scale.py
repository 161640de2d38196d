"""Cost that does not grow with the work: the history, the backlog and the soak.

    python -m bench.scale history    [--server-dsn DSN] [--rounds 3] [-n 20000] [--history 1000000]
    python -m bench.scale backlog    [--server-dsn DSN] [--rounds 5] [--sizes 100000,1000000]
    python -m bench.scale soak       [--server-dsn DSN] [--minutes 30]
    python -m bench.scale claim-plan [--server-dsn DSN] [--sizes 20000,100000,1000000]

Run from the repository root (``-m``: it imports bench/harness.py, and the workers import
``bench.noop_app``). Every phase runs W ``wfctl worker --app bench.noop_app`` processes with their
default options on workflows of 3 no-op steps (type ``noop3``), in fresh databases on the server
(``--server-dsn``, else ``WFCTL_DSN``, else a durable embedded server), dropped at the end.

- ``history``: interleaved rounds of the same run in an empty database and in one holding
  1,000,000 finished workflows with their 3,000,000 steps and their attempts (bench/scale.sql
  ``history``, then VACUUM ANALYZE). A run: the workers start and go idle, N workflows are
  submitted by one ``wfctl submit --input-file`` (one transaction), and the clock runs from its
  return until the benchmark sees none unfinished (polled every 0.2 s). Goal: history/empty
  >= 0.90 (median of the per-round ratios).
- ``backlog``: (1) the claim's plan as a worker runs it, on 100,000 and 1,000,000 runnable runs
  with parked and delayed runs mixed in (``claim-plan`` below); (2) interleaved rounds of the W
  workers started on a waiting backlog of each size and on a small one (20,000), timed over the
  first 20,000 completions; goal big/small >= 0.90; (3) the issue's observation: idle workers,
  N=20,000 submitted at once into an empty database, and the claim index's entries read per scan.
- ``soak``: W workers for ``--minutes`` at full speed, a feeder keeping about 20,000 runnable
  (it submits in batches whenever fewer are due) and ``wfctl prune --older-than 2m`` run every
  minute as cron would; per minute the completions, the sizes of workflows, workflow_steps and
  workflow_attempts, their dead tuples and autovacuum counts. Goal: the last 5 minutes'
  throughput >= 0.90 of the first 5; and whether the sizes level off.
- ``claim-plan``: the claim statement exactly as a worker runs it: prepared by psycopg on a
  session with ``plan_cache_mode = force_generic_plan`` (worker.session_setup), with the
  parameters a fresh worker of bench.noop_app passes, under ``EXPLAIN (ANALYZE, BUFFERS)`` in a
  rolled-back transaction; right after the bulk insert (never analyzed: autovacuum is off for
  the table in this throwaway database), after ANALYZE, then with half the runs claimed and no
  vacuum since; and in a table last analyzed when it held only finished runs. Its plan's shape
  (with auto_explain, the plans inside the claim's functions too), its time, and the index
  entries it read (the counter behind pg_stat_user_indexes.idx_tup_read, taken in the
  transaction before and after the claim).

See bench/README.md, "Scale: history, backlog and soak".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from bench import harness
from bench.harness import REPO, BenchError, log, wfctl_command
from wfctl.queries import parse_blocks, q

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

TYPE = "noop3"  # bench/noop_app.py
STEPS = 3
GOAL = 0.90  # every ratio of the scale goals: at least 90 %
POLL = 0.2  # seconds between completion polls (the issue: not every 20 ms at N=20,000)
RUNNABLE_INDEX = "workflows_runnable_idx"
GENERIC = "plan_cache_mode = force_generic_plan"
SOAK_TABLES = ("workflows", "workflow_steps", "workflow_attempts")
PLAN_LINE = re.compile(
    r"^\s*(->\s*)?(?P<node>[A-Z][A-Za-z ]+?)(?: using (?P<index>\S+))?(?: on (?P<rel>\S+))?"
)

FULL: dict[str, dict[str, Any]] = {
    "history": {"n": 20_000, "history": 1_000_000, "rounds": 3, "workers": 4, "timeout": 600.0},
    "backlog": {
        "n": 20_000,
        "sizes": "100000,1000000",
        "small": 20_000,
        "rounds": 5,  # one round's ratio swings 0.8-1.3 on a shared 2-CPU machine: a median of 3 is coarse
        "workers": 4,
        "runs": 5,
        "timeout": 600.0,
    },
    "claim-plan": {"sizes": "20000,100000,1000000", "runs": 5},
    "soak": {"minutes": 30.0, "interval": 60.0, "target": 20_000, "workers": 4, "prune_older_than": "2m"},
}
QUICK: dict[str, dict[str, Any]] = {
    "history": {"n": 300, "history": 3_000, "rounds": 1, "workers": 2, "timeout": 60.0},
    "backlog": {
        "n": 200,
        "sizes": "1000",
        "small": 200,
        "rounds": 1,
        "workers": 1,
        "runs": 1,
        "timeout": 60.0,
    },
    "claim-plan": {"sizes": "1000,3000", "runs": 2},
    "soak": {"minutes": 0.1, "interval": 2.0, "target": 300, "workers": 2, "prune_older_than": "1s"},
}


# -- small helpers --------------------------------------------------------------------------------


def run(conn: psycopg.Connection[Any], name: str, **params: Any) -> list[dict[str, Any]]:
    """A named block of bench/scale.sql; its rows as dicts (none for a statement without any)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(SQL[name], params)
        return cur.fetchall() if cur.description else []


def one(conn: psycopg.Connection[Any], name: str, **params: Any) -> dict[str, Any]:
    rows = run(conn, name, **params)
    if len(rows) != 1:
        raise BenchError(f"{name}: {len(rows)} rows, expected one")
    return rows[0]


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


median = harness.median
ratio = harness.ratio
num = harness.num
x = harness.ratio_text
spread = harness.spread


def mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1048576:,.1f}"


def goal_line(what: str, values: Sequence[float | None]) -> tuple[str, bool]:
    m = median(values)
    met = m is not None and m >= GOAL
    return f"goal {'MET   ' if met else 'MISSED'} {what}: {spread(values)} >= {GOAL:g}", met


CREATED: list[str] = []  # the databases this run made (dropped at the end unless --keep)


@contextlib.contextmanager
def database(server: str, label: str, keep: bool) -> Iterator[str]:
    """A fresh database with the working tree's schema, remembered."""
    with harness.fresh_database(server, label, keep) as dsn:
        CREATED.append(str(conninfo_to_dict(dsn).get("dbname")))
        yield dsn


def upgrade(dsn: str) -> None:
    """Bring the database's schema to the working tree's, as the workers about to start expect
    (a migration added while a long run goes on would otherwise stop them)."""
    from wfctl import schema

    schema.migrations.cache_clear()
    harness.install_schema(dsn)


def prepare(dsn: str) -> None:
    """Before a timed phase, as harness.prepare_tables does (and workflow_attempts too): fresh
    statistics, and a checkpoint."""
    with connect(dsn) as conn:
        run(conn, "vacuum_analyze")
        with contextlib.suppress(psycopg.Error):
            run(conn, "checkpoint")


# -- the workers -----------------------------------------------------------------------------------


class Pool:
    """W `wfctl worker --app bench.noop_app` processes with their default options."""

    def __init__(self, dsn: str, count: int, label: str, workdir: Path, extra: list[str]) -> None:
        self.procs = harness.Workers(workdir, label)
        self.dsn = dsn
        self.count = count
        self.label = label
        self.cmd = [*wfctl_command(), "worker", "--app", "bench.noop_app", "--dsn", dsn, *extra]

    def start(self, ready_within: float = 60.0) -> None:
        """The workers, once every one has logged "ready"."""
        self.procs.start(self.cmd, self.count)
        harness.wait_ready(self.procs, self.label, ready_within, 0.05)

    def check(self) -> None:
        if self.procs.alive() < self.count:
            raise BenchError(f"a worker exited\n{self.procs.tails()}")

    def wait_for(self, poll: Poll, name: str, done: Callable[[int], bool], timeout: float) -> None:
        """Poll the count ``name`` (every POLL) until ``done`` says so; fails when a worker exits
        or after ``timeout`` seconds."""

        def check() -> tuple[bool, str]:
            value = poll.count(name)
            return done(value), f"{name} {value:,}"

        harness.wait_for(check, self.label, timeout, self.procs, POLL)

    def drain(
        self, name: str, done: Callable[[int], bool], timeout: float, start: float
    ) -> tuple[float, list[int | None], Poll]:
        """Poll the count ``name`` until ``done`` says so, then stop the workers: the seconds
        since ``start``, the workers' exit statuses, and the poll (its own index reads)."""
        poll = Poll(self.dsn)
        try:
            self.wait_for(poll, name, done, timeout)
            seconds = time.monotonic() - start
        finally:
            poll.close()
        return seconds, self.stop(), poll

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kill()

    def stop(self, within: float = 60.0) -> list[int | None]:
        """SIGTERM, then wait until their sessions have ended (each flushes its statistics as it
        ends)."""
        codes = self.procs.terminate()
        deadline = time.monotonic() + within
        with connect(self.dsn) as conn:
            while one(conn, "worker_backends")["count"] > 0:
                if time.monotonic() > deadline:
                    raise BenchError("worker sessions still connected after the workers exited")
                time.sleep(0.05)
        return codes

    def kill(self) -> None:
        self.procs.kill()


class Poll:
    """The benchmark's own polls of a count, each in a transaction that also reads what the poll
    cost the claim's index (own_index_reads), so those reads are left out of the run's figures."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.scans = 0
        self.tuples = 0

    def count(self, name: str) -> int:
        with self.conn.transaction():
            # the counters hold what this session has not flushed yet: the difference across the
            # count, inside one transaction (no flush happens within it), is the count's own
            before = one(self.conn, "own_index_reads")
            value = next(iter(one(self.conn, name).values()))
            after = one(self.conn, "own_index_reads")
        self.scans += after["scans"] - before["scans"]
        self.tuples += after["tuples"] - before["tuples"]
        return int(value)

    def close(self) -> None:
        self.conn.close()


def submit_file(dsn: str, n: int, workdir: Path) -> list[str]:
    """`wfctl submit noop3 --input-file`: N inputs in one transaction; the ids it printed."""
    path = workdir / f"input-{n}.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"steps": STEPS}) + "\n" for _ in range(n)), "utf-8")
    cmd = [*wfctl_command(), "submit", TYPE, "--input-file", str(path), "--dsn", dsn]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise BenchError(f"wfctl submit failed (exit {done.returncode}): {done.stderr.strip()}")
    ids = done.stdout.split()
    if len(ids) != n:
        raise BenchError(f"wfctl submit printed {len(ids)} ids, expected {n}")
    return ids


# -- one timed run: idle workers, N submitted at once ----------------------------------------------


@dataclass
class IdleRun:
    label: str
    n: int
    seconds: float = 0.0  # submit's return -> none unfinished seen
    workflows_per_s: float = 0.0
    steps_per_s: float = 0.0
    span_s: float | None = None  # first claim -> last completion, database clock
    steady_workflows_per_s: float | None = None
    index_scans: int = 0  # workflows_runnable_idx, over the run
    index_entries: int = 0
    autovacuums: int = 0  # autovacuum and autoanalyze runs of the three tables during the run
    blocks_hit: int = 0  # blocks of the three tables and their indexes, in shared buffers
    blocks_read: int = 0  # ... and read from outside them
    ok: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def entries_per_scan(self) -> float | None:
        return self.index_entries / self.index_scans if self.index_scans else None


def maintenance(conn: psycopg.Connection[Any]) -> int:
    """Autovacuum and autoanalyze runs so far of workflows, workflow_steps and workflow_attempts."""
    return sum(int(r["autovacuums"]) + int(r["autoanalyzes"]) for r in run(conn, "sizes"))


def idle_run(
    dsn: str, label: str, n: int, workers: int, timeout: float, workdir: Path, extra: list[str]
) -> IdleRun:
    result = IdleRun(label, n)
    upgrade(dsn)
    prepare(dsn)
    with connect(dsn) as conn:
        before = one(conn, "index_stats")
        vacuums = maintenance(conn)
        blocks = one(conn, "block_reads")
    with Pool(dsn, workers, label, workdir, extra) as pool:
        pool.start()
        log(f"{label}: {workers} workers idle; submitting {n:,}")
        ids = submit_file(dsn, n, workdir)
        start = time.monotonic()
        result.seconds, codes, poll = pool.drain("unfinished", lambda left: left == 0, timeout, start)
    with connect(dsn) as conn:
        after = one(conn, "index_stats")
        result.autovacuums = maintenance(conn) - vacuums
        blocks_after = one(conn, "block_reads")
        result.blocks_hit = blocks_after["hit"] - blocks["hit"]
        result.blocks_read = blocks_after["read"] - blocks["read"]
        check = one(conn, "verify_ids", ids=ids)
        run(conn, "forget_workers")
    result.workflows_per_s = n / result.seconds
    result.steps_per_s = n * STEPS / result.seconds
    result.span_s = float(check["span"]) if check["span"] is not None else None
    result.steady_workflows_per_s = n / result.span_s if result.span_s else None
    result.index_scans = after["scans"] - before["scans"] - poll.scans
    result.index_entries = after["tuples"] - before["tuples"] - poll.tuples
    expected = {"workflows": n, "completed": n, "reclaimed": 0, "steps": n * STEPS}
    result.problems = [f"{label}: {k} {check[k]}, expected {v}" for k, v in expected.items() if check[k] != v]
    result.problems += [f"{label}: a worker exited {c} after SIGTERM" for c in codes if c != 0]
    result.ok = not result.problems
    log(f"{label}: {n:,} in {result.seconds:.2f} s = {result.workflows_per_s:,.0f}/s")
    if result.ok:
        with connect(dsn) as conn:
            run(conn, "forget_round", ids=ids)
    return result


# -- the claim's plan ------------------------------------------------------------------------------


@dataclass
class ClaimPlan:
    size: int  # runnable runs
    parked: int
    statistics: str  # "stale" or "analyzed"
    planner_rows: int  # pg_class.reltuples when the plan was built
    analyzed: str
    shape: str
    execution_ms: list[float]
    planning_ms: list[float]
    buffers: list[int]  # shared blocks hit + read by the whole statement
    runnable_entries: list[int]  # workflows_runnable_idx entries returned per claim
    all_entries: list[int]  # every index of workflows
    claimed: list[int]
    text: str = ""  # the plan of the last run, as EXPLAIN prints it
    inner_shape: str = ""  # the scans of workflows of the statements inside the claim's functions


def worker_params() -> dict[str, Any]:
    """The claim's parameters as a fresh `wfctl worker --app bench.noop_app` with default options
    passes them (wfctl/worker/claims.py, runner.Worker)."""
    from wfctl.registry import load_app
    from wfctl.worker import heartbeat, policy
    from wfctl.worker.options import DEFAULTS

    registry = load_app("bench.noop_app")
    types = registry.names()
    policies = [p for p in (registry.get(name) for name in types) if p]
    return harness.claim_params(
        types,
        [p.max_retries for p in policies],
        [p.timeout for p in policies],
        [p.timeout_error for p in policies],
        policy.free_slots(DEFAULTS.concurrency, 0),
        heartbeat.Identity.new().id,
        room=DEFAULTS.concurrency,  # its threads without a run: all of them, at its first claim
    )


def placeholders(query: str) -> list[str]:
    """The %(name)s parameters in the order psycopg numbers them ($1, $2, ...: first use)."""
    names: list[str] = []
    for match in re.finditer(r"%%|%\((\w+)\)s", query):
        name = match.group(1)
        if name and name not in names:
            names.append(name)
    return names


def shape_of(plan: dict[str, Any]) -> str:
    """How the claim finds its runs: the scans of workflows (and any sort) in the plan tree."""
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node.get("Node Type", "")
        rel = node.get("Relation Name")
        index = node.get("Index Name")
        if (index and index.startswith("workflows")) or rel == "workflows":
            what = f"{node.get('Operation', kind) if kind == 'ModifyTable' else kind} {index or rel}"
            rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
            found.append(f"{what} ({rows:,} rows)")
        elif kind == "Function Scan" and str(node.get("Function Name", "")).startswith("wfctl_claim"):
            rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
            if node.get("Actual Loops", 1):
                found.append(f"{node['Function Name']}() ({rows:,} rows)")
        elif kind in ("Sort", "Incremental Sort"):
            found.append(f"{kind} ({node.get('Sort Method', '?')})")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return "; ".join(found)


INNER_NODE = re.compile(
    r"(?P<node>(?:Index Only |Index |Bitmap Index |Bitmap Heap |Seq )Scan|Sort|Incremental Sort)"
    r"(?: using (?P<index>\S+))?(?: on (?P<rel>\S+))?"
    r".*?actual time=\S+ rows=(?P<rows>\d+) loops=(?P<loops>\d+)"
)


def inner_shape(texts: list[str]) -> str:
    """The scans of workflows (and sorts) in the plans auto_explain logged, statement by statement."""
    parts = []
    for text in texts:
        found = []
        for line in text.splitlines():
            m = INNER_NODE.search(line)
            if m and (
                m["node"].endswith("Sort")
                or m["rel"] == "workflows"
                or (m["index"] or "").startswith("workflows")
            ):
                what = f"{m['node']} {m['index'] or m['rel'] or ''}".rstrip()
                found.append(f"{what} ({int(m['rows']) * int(m['loops']):,} rows)")
        if found:
            parts.append(", ".join(found))
    return " | ".join(parts)


def claim_plans(conn: psycopg.Connection[Any], size: int, parked: int, state: str, runs: int) -> ClaimPlan:
    """EXPLAIN (ANALYZE, BUFFERS) of the worker's prepared claim, `runs` times, each in a
    transaction rolled back, on a session prepared as the worker's."""
    stats = one(conn, "statistics_state")
    params = worker_params()
    query = q("worker.claim")
    with conn.transaction(force_rollback=True), conn.cursor() as cur:
        # the worker's claim, prepared by psycopg as the worker's connection prepares it
        cur.execute(query, params, prepare=True)
        prepared = one(conn, "prepared_claim")
    order = placeholders(query)
    if len(order) != len(prepared["types"]):
        raise BenchError(
            f"the claim has {len(order)} parameters, its prepared statement {len(prepared['types'])}"
        )
    # the same text with the same parameter types, kept across the rolled-back transactions; its
    # generic plan (force_generic_plan) is built at its first execution and rebuilt when the
    # table's statistics change, as the worker's is
    name = sql.Identifier(f"bench_claim_{len(state)}_{secrets.token_hex(3)}")
    conn.execute(
        sql.SQL(SQL["prepare_claim"]).format(
            name=name,
            types=sql.SQL(", ").join(sql.SQL(t) for t in prepared["types"]),
            statement=sql.SQL(prepared["statement"]),
        )
    )
    args = sql.SQL(", ").join(sql.Literal(params[p]) for p in order)

    def explain(fmt: str, nested: bool = False) -> tuple[Any, dict[str, int], dict[str, int], list[str]]:
        statement = sql.SQL(SQL["explain_execute"]).format(format=sql.SQL(fmt), name=name, args=args)
        logged: list[str] = []

        def keep(notice: psycopg.errors.Diagnostic) -> None:
            if notice.severity_nonlocalized == "LOG" and notice.message_primary:
                logged.append(notice.message_primary)

        with conn.transaction(force_rollback=True):
            before = {r["index"]: r["tuples"] for r in run(conn, "xact_index_reads")}
            if nested:
                conn.add_notice_handler(keep)
                conn.execute(SQL["auto_explain_on"])
            try:
                rows = conn.execute(statement).fetchall()
            finally:
                if nested:
                    conn.execute(SQL["auto_explain_off"])
                    conn.remove_notice_handler(keep)
            after = {r["index"]: r["tuples"] for r in run(conn, "xact_index_reads")}
        # the statements inside the claim's functions: not the EXPLAIN, nor the claim itself
        # (logged as its PREPARE), nor the foreign-key checks of its inserts
        skip = ("Query Text: EXPLAIN", "Query Text: PREPARE", "FOR KEY SHARE OF x")
        inner = [t for t in logged if not any(s in t for s in skip)]
        return rows, before, after, inner

    result = ClaimPlan(
        size, parked, state, int(stats["reltuples"]), stats["analyzed"], "", [], [], [], [], [], []
    )
    for _ in range(runs):
        rows, before, after, _ = explain("JSON")
        doc = rows[0][0][0]
        top = doc["Plan"]
        result.shape = shape_of(top)
        result.execution_ms.append(float(doc["Execution Time"]))
        result.planning_ms.append(float(doc.get("Planning Time", 0.0)))
        result.buffers.append(int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)))
        result.runnable_entries.append(after.get(RUNNABLE_INDEX, 0) - before.get(RUNNABLE_INDEX, 0))
        result.all_entries.append(sum(after[k] - before.get(k, 0) for k in after))
        result.claimed.append(int(top.get("Actual Rows", 0)))
    with contextlib.suppress(psycopg.Error):
        conn.execute(SQL["auto_explain_load"])
    nested = True
    try:
        rows, _, _, inner = explain("TEXT", nested=True)
    except psycopg.Error:  # no auto_explain here (or not allowed to set it)
        nested = False
        rows, _, _, inner = explain("TEXT")
    result.text = "\n".join(r[0] for r in rows)
    if inner:
        result.inner_shape = inner_shape(inner)
        result.text += "\n\n-- statements run inside the claim's functions (auto_explain):\n" + "\n\n".join(
            inner
        )
    elif not nested:
        result.text += (
            "\n\n-- (auto_explain is not available: the plans inside the claim's functions are not shown)"
        )
    return result


DRAINED = 10_000  # finished runs the "drained" table held when it was last analyzed


def claim_plan_phase(server: str, sizes: list[int], share: float, runs: int, keep: bool) -> list[ClaimPlan]:
    """Per size, two databases: one whose workflows table was never analyzed (fresh), one last
    analyzed when it held only DRAINED finished runs and no pending one (a queue that drained,
    was analyzed by autovacuum, then received a burst); each measured right after the bulk insert
    of the backlog; the first also after ANALYZE, and then with half the runs claimed (committed)
    and no vacuum since, as workers leave the table between two vacuums."""
    plans: list[ClaimPlan] = []
    for size in sizes:
        parked = int(size * share)
        for drained in (False, True):
            with database(server, "scale_plan", keep) as dsn, connect(dsn) as conn:
                run(conn, "autovacuum_off")
                if drained:
                    one(conn, "history", n=DRAINED, days=1)
                    run(conn, "analyze")
                log(f"claim-plan: inserting {size:,} runnable and {parked:,} parked or delayed runs")
                made = one(conn, "backlog", runnable=size, parked=parked)
                if made["runnable"] != size or made["parked"] != parked:
                    raise BenchError(f"claim-plan: the backlog is {made}, expected {size} and {parked}")
                conn.execute(q("worker.session_setup"))
                if drained:
                    state = f"stale: analyzed when {DRAINED:,} finished, 0 pending"
                    plans.append(claim_plans(conn, size, parked, state, runs))
                else:
                    plans.append(claim_plans(conn, size, parked, "stale: never analyzed", runs))
                    run(conn, "analyze")
                    plans.append(claim_plans(conn, size, parked, "analyzed", runs))
                    # what workers leave between two vacuums: runs claimed, their old versions
                    # still in the claim's index
                    front = size // 2
                    one(conn, "claim_front", count=front)
                    state = f"analyzed, then {front:,} claimed, not vacuumed"
                    plans.append(claim_plans(conn, size - front, parked, state, runs))
                run(conn, "autovacuum_on")
    return plans


def plan_table(plans: list[ClaimPlan]) -> None:
    harness.table(
        [
            "runnable (+ parked/delayed)",
            "statistics",
            "planner's rows",
            "claim ms (median, range)",
            "buffers",
            f"{RUNNABLE_INDEX} entries read",
            "all workflows index entries",
            "claimed",
            "plan: scans of workflows",
        ],
        [
            [
                f"{p.size:,} (+{p.parked:,})",
                p.statistics,
                f"{p.planner_rows:,}",
                f"{median(p.execution_ms):.2f} ({min(p.execution_ms):.2f}-{max(p.execution_ms):.2f})",
                num(median(p.buffers)),
                num(median(p.runnable_entries)),
                num(median(p.all_entries)),
                num(median(p.claimed)),
                p.shape + (f" | inside the functions: {p.inner_shape}" if p.inner_shape else ""),
            ]
            for p in plans
        ],
    )


def plan_texts(plans: list[ClaimPlan]) -> None:
    for p in plans:
        print(
            f"### {p.size:,} runnable + {p.parked:,} parked/delayed, statistics {p.statistics} "
            f"(planner's rows {p.planner_rows:,}, analyzed: {p.analyzed})"
        )
        print()
        print("```")
        print(p.text)
        print("```")
        print()


# -- backlog throughput ----------------------------------------------------------------------------


@dataclass
class BacklogRun:
    label: str
    runnable: int
    parked: int
    measured: int
    seconds: float = 0.0  # workers' start -> `measured` completions seen (polled)
    span_s: float | None = None  # first claim -> the measured-th completion, database clock
    workflows_per_s: float = 0.0
    steady_workflows_per_s: float | None = None
    index_scans: int = 0
    index_entries: int = 0
    ok: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def entries_per_scan(self) -> float | None:
        return self.index_entries / self.index_scans if self.index_scans else None


def backlog_run(
    dsn: str,
    label: str,
    runnable: int,
    parked: int,
    measured: int,
    workers: int,
    timeout: float,
    workdir: Path,
    extra: list[str],
) -> BacklogRun:
    result = BacklogRun(label, runnable, parked, measured)
    upgrade(dsn)
    with connect(dsn) as conn:
        run(conn, "reset")
        made = one(conn, "backlog", runnable=runnable, parked=parked)
    if made["runnable"] != runnable:
        raise BenchError(f"{label}: {made['runnable']} runnable inserted, expected {runnable}")
    prepare(dsn)
    with connect(dsn) as conn:
        before = one(conn, "index_stats")
    with Pool(dsn, workers, label, workdir, extra) as pool:
        start = time.monotonic()
        pool.procs.start(pool.cmd, workers)
        log(f"{label}: {workers} workers on {runnable:,} runnable + {parked:,} parked")
        result.seconds, codes, poll = pool.drain("completed", lambda done: done >= measured, timeout, start)
    with connect(dsn) as conn:
        after = one(conn, "index_stats")
        check = one(conn, "first_completions", count=measured)
    result.workflows_per_s = measured / result.seconds
    result.span_s = float(check["span"]) if check["span"] is not None else None
    result.steady_workflows_per_s = measured / result.span_s if result.span_s else None
    result.index_scans = after["scans"] - before["scans"] - poll.scans
    result.index_entries = after["tuples"] - before["tuples"] - poll.tuples
    result.problems = [f"{label}: {check[k]} {k}" for k in ("reclaimed", "failed") if check[k]]
    result.problems += [f"{label}: a worker exited {c} after SIGTERM" for c in codes if c != 0]
    result.ok = not result.problems
    log(f"{label}: first {measured:,} in {result.seconds:.2f} s = {result.workflows_per_s:,.0f}/s")
    return result


# -- the soak --------------------------------------------------------------------------------------


class Feeder(threading.Thread):
    """Keeps about `target` runs due: whenever fewer are, submits the difference (rounded up to
    whole statements of 1,000, with submit_many, as `wfctl submit --input-file` does) in one
    transaction."""

    def __init__(self, dsn: str, target: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.target = target
        self.submitted = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None

        self.poll: Poll | None = None  # its count of due runs, whose index reads it keeps

    def fill(self, conn: psycopg.Connection[Any], poll: Poll) -> None:
        from wfctl.client import submit_many

        due = poll.count("runnable")
        missing = self.target - due
        if missing <= 0:
            return
        batch = min(-(-missing // 1000) * 1000, self.target)
        one_input = json.dumps({"steps": STEPS})
        with conn.transaction():
            for start in range(0, batch, 1000):
                submit_many(conn, TYPE, [one_input] * min(1000, batch - start))
        with self.lock:
            self.submitted += batch

    def run(self) -> None:
        self.poll = Poll(self.dsn)
        try:
            with connect(self.dsn) as conn:
                while not self.done.wait(0.25):
                    self.fill(conn, self.poll)
        except BaseException as exc:  # reported by the soak
            self.error = exc
        finally:
            self.poll.close()

    def own_reads(self) -> tuple[int, int]:
        """The scans and entries of the claim's index its counts made so far."""
        poll = self.poll
        return (poll.scans, poll.tuples) if poll is not None else (0, 0)

    def total(self) -> int:
        with self.lock:
            return self.submitted


class Cron(threading.Thread):
    """`wfctl prune --older-than AGE` every `every` seconds, as cron would start it (a run still
    going at the next tick is not started twice: that tick is skipped and counted)."""

    def __init__(self, dsn: str, age: str, every: float) -> None:
        super().__init__(daemon=True)
        self.cmd = [*wfctl_command(), "prune", "--older-than", age, "--json", "--dsn", dsn]
        self.every = every
        self.done = threading.Event()
        self.runs: list[dict[str, Any]] = []  # started (offset s), seconds, workflows, steps, exit
        self.skipped = 0
        self.lock = threading.Lock()

    def run(self) -> None:
        begin = time.monotonic()
        tick = 1
        while not self.done.wait(max(0.0, begin + tick * self.every - time.monotonic())):
            tick += 1
            if any(r.get("running") for r in self.runs):
                self.skipped += 1
                continue
            entry: dict[str, Any] = {"at": time.monotonic() - begin, "running": True}
            with self.lock:
                self.runs.append(entry)
            threading.Thread(target=self.prune, args=(entry,), daemon=True).start()

    def prune(self, entry: dict[str, Any]) -> None:
        t0 = time.monotonic()
        done = subprocess.run(self.cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        entry["seconds"] = time.monotonic() - t0
        entry["exit"] = done.returncode
        try:
            out = json.loads(done.stdout or "{}")
        except ValueError:
            out = {}
        entry["workflows"] = out.get("workflows")
        entry["steps"] = out.get("steps")
        entry["error"] = done.stderr.strip()[-300:] if done.returncode else ""
        entry["running"] = False

    def finished(self, within: float = 300.0) -> list[dict[str, Any]]:
        self.done.set()
        deadline = time.monotonic() + within
        while any(r.get("running") for r in self.runs) and time.monotonic() < deadline:
            time.sleep(0.1)
        return list(self.runs)


@dataclass
class Minute:
    minute: int
    seconds: float  # length of the interval
    completed: int
    tables: dict[str, dict[str, Any]]  # sizes per table at its end
    prunes: list[dict[str, Any]] = field(default_factory=list)
    load: float = 0.0
    index_scans: int = 0  # workflows_runnable_idx during the interval (as the sessions flushed them)
    index_entries: int = 0

    @property
    def per_s(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0


@dataclass
class Soak:
    minutes: list[Minute]
    start_tables: dict[str, dict[str, Any]]
    indexes_start: list[dict[str, Any]]
    indexes_end: list[dict[str, Any]]
    submitted: int
    skipped_prunes: int
    problems: list[str]


def sizes(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in run(conn, "sizes")}


def soak(dsn: str, args: argparse.Namespace, workdir: Path, extra: list[str]) -> Soak:
    feeder = Feeder(dsn, args.target)
    first = Poll(dsn)
    try:
        with connect(dsn) as conn:
            feeder.fill(conn, first)
    finally:
        first.close()
    prepare(dsn)
    pool = Pool(dsn, args.workers, "soak", workdir, extra)
    cron = Cron(dsn, args.prune_older_than, args.interval)
    minutes: list[Minute] = []
    problems: list[str] = []
    intervals = max(1, round(args.minutes * 60 / args.interval))
    poll = Poll(dsn)  # the count of unfinished runs, whose index reads it keeps
    try:
        with connect(dsn) as conn:
            start_tables = sizes(conn)
            indexes_start = run(conn, "index_sizes")
        pool.start()
        feeder.start()
        cron.start()

        def others() -> tuple[int, int]:
            """Reads of the claim's index so far, less the benchmark's own counts."""
            reads = one(conn, "index_stats")
            fed = feeder.own_reads()
            return reads["scans"] - poll.scans - fed[0], reads["tuples"] - poll.tuples - fed[1]

        with connect(dsn) as conn:
            done_before = feeder.total() - poll.count("unfinished")
            reads_before = others()
            t_prev = time.monotonic()
            begin = t_prev
            log(f"soak: {args.workers} workers, {intervals} intervals of {args.interval:g} s")
            for i in range(1, intervals + 1):
                while time.monotonic() < begin + i * args.interval:
                    time.sleep(min(0.5, max(0.0, begin + i * args.interval - time.monotonic())))
                    pool.check()
                    if feeder.error is not None:
                        raise BenchError(f"the feeder failed: {feeder.error}")
                now = time.monotonic()
                done = feeder.total() - poll.count("unfinished")
                with cron.lock:
                    prunes = [r for r in cron.runs if t_prev - begin <= r["at"] < now - begin]
                reads = others()
                minute = Minute(
                    i,
                    now - t_prev,
                    done - done_before,
                    sizes(conn),
                    prunes,
                    os.getloadavg()[0],
                    reads[0] - reads_before[0],
                    reads[1] - reads_before[1],
                )
                reads_before = reads
                minutes.append(minute)
                log(
                    f"soak {i}/{intervals}: {minute.completed:,} completed ({minute.per_s:,.0f}/s), "
                    f"workflows {mb(minute.tables['workflows']['total'])} MB, load {minute.load:.2f}"
                )
                done_before, t_prev = done, now
        feeder.done.set()
        feeder.join(60)
        runs = cron.finished()
        codes = pool.stop()
    finally:
        feeder.done.set()
        cron.done.set()
        pool.kill()
        poll.close()
    with connect(dsn) as conn:
        indexes_end = run(conn, "index_sizes")
        check = one(conn, "soak_verify")
    problems += [f"soak: {check[k]} {k}" for k in ("failed", "reclaimed") if check[k]]
    problems += [f"soak: a worker exited {c} after SIGTERM" for c in codes if c != 0]
    problems += [f"soak: prune exited {r['exit']}: {r['error']}" for r in runs if r.get("exit")]
    if not runs:
        problems.append("soak: prune never ran")
    return Soak(minutes, start_tables, indexes_start, indexes_end, feeder.total(), cron.skipped, problems)


def soak_report(s: Soak, args: argparse.Namespace) -> list[str]:
    unit = "minute" if args.interval == 60 else f"interval of {args.interval:g} s"
    print(f"## per {unit}: completions and sizes (MB: total = heap + indexes + TOAST; heap; indexes)")
    print()
    header = ["#", "load", "completed", "workflows/s"]
    for t in SOAK_TABLES:
        header += [f"{t} total", "heap", "idx"]
    header += ["prune: workflows (s)"]
    rows = []
    for m in s.minutes:
        row = [str(m.minute), f"{m.load:.2f}", f"{m.completed:,}", num(m.per_s)]
        for t in SOAK_TABLES:
            row += [mb(m.tables[t]["total"]), mb(m.tables[t]["heap"]), mb(m.tables[t]["indexes"])]
        row.append(
            ", ".join(
                f"{num(r.get('workflows'))} ({r.get('seconds', 0):.1f})"
                if not r.get("running")
                else "running"
                for r in m.prunes
            )
        )
        rows.append(row)
    harness.table(header, rows)
    print(f"## per {unit}: dead tuples, autovacuum and autoanalyze runs (cumulative), HOT updates")
    print()
    header = ["#"]
    for t in SOAK_TABLES:
        header += [f"{t} live", "dead", "autovacuums", "autoanalyzes"]
    header += ["workflows HOT %", f"{RUNNABLE_INDEX} scans", "entries/scan"]
    rows = []
    for m in s.minutes:
        row = [str(m.minute)]
        for t in SOAK_TABLES:
            r = m.tables[t]
            row += [num(r["live"]), num(r["dead"]), str(r["autovacuums"]), str(r["autoanalyzes"])]
        w = m.tables["workflows"]
        row.append(num(100 * w["hot_updates"] / w["updates"], 1) if w["updates"] else "n/a")
        row += [num(m.index_scans), num(m.index_entries / m.index_scans, 1) if m.index_scans else "n/a"]
        rows.append(row)
    harness.table(header, rows)
    print("## indexes (MB), start -> end")
    print()
    start = {(r["table"], r["index"]): r for r in s.indexes_start}
    harness.table(
        ["table", "index", "start", "end", "scans"],
        [
            [
                r["table"],
                r["index"],
                mb(start.get((r["table"], r["index"]), {}).get("size")),
                mb(r["size"]),
                num(r["scans"]),
            ]
            for r in s.indexes_end
        ],
    )
    window = max(1, min(5, len(s.minutes) // 2))
    first = sum(m.completed for m in s.minutes[:window]) / sum(m.seconds for m in s.minutes[:window])
    last = sum(m.completed for m in s.minutes[-window:]) / sum(m.seconds for m in s.minutes[-window:])
    text, _ = goal_line(
        f"last {window} / first {window} intervals' workflows/s ({num(last)} / {num(first)})",
        [ratio(last, first)],
    )
    print(text)
    third = max(1, len(s.minutes) // 3)
    for t in SOAK_TABLES:
        mid = s.minutes[max(0, len(s.minutes) - third - 1)].tables[t]
        end = s.minutes[-1].tables[t]
        growth = ratio(end["total"] - mid["total"], mid["total"])
        flat = growth is not None and growth <= 0.10
        print(
            f"sizes {'level off' if flat else 'GROW     '} {t}: {mb(mid['total'])} MB -> "
            f"{mb(end['total'])} MB over the last {third} {unit}(s) ({100 * (growth or 0):+.1f} %; "
            "level off: <= +10 %)"
        )
    print(f"submitted {s.submitted:,}; prune ticks skipped (previous run still going): {s.skipped_prunes}")
    harness.verdict("verification", s.problems)
    return s.problems


# -- the commands ----------------------------------------------------------------------------------


def header(args: argparse.Namespace, info: harness.Server, what: str) -> None:
    print(f"\nwfctl scale benchmark: {what}, {os.cpu_count()} CPUs")
    print(harness.server_line(info))
    print(harness.loads_line(args.loads))
    print()


def cmd_claim_plan(
    args: argparse.Namespace, server: str, info: harness.Server
) -> tuple[list[str], dict[str, Any]]:
    plans = claim_plan_phase(server, args.size_list, args.parked_share, args.runs, args.keep)
    args.loads = (args.loads[0], os.getloadavg())
    header(args, info, f"the claim's plan, {args.runs} run(s) each, as a worker of bench.noop_app runs it")
    print(f"## the claim (worker.claim), prepared, {GENERIC}, EXPLAIN (ANALYZE, BUFFERS)")
    print()
    plan_table(plans)
    plan_texts(plans)
    return [], {"plans": [dataclasses.asdict(p) for p in plans]}


def cmd_history(
    args: argparse.Namespace, server: str, info: harness.Server
) -> tuple[list[str], dict[str, Any]]:
    problems: list[str] = []
    done: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        dsns = {
            "empty": stack.enter_context(database(server, "scale_empty", args.keep)),
            "history": stack.enter_context(database(server, "scale_history", args.keep)),
        }
        log(f"history: inserting {args.history:,} finished workflows with their steps and attempts")
        t0 = time.monotonic()
        with connect(dsns["history"]) as conn:
            made = one(conn, "history", n=args.history, days=30)
        log(f"history: {made} in {time.monotonic() - t0:.0f} s")
        for number in range(1, args.rounds + 1):
            order = harness.rotated(list(dsns), number - 1)
            current: dict[str, Any] = {"round": number, "order": order, "load": os.getloadavg()[0]}
            for label in order:
                r = idle_run(dsns[label], label, args.n, args.workers, args.timeout, args.workdir, args.extra)
                current[label] = r
                problems += r.problems
            done.append(current)
        with connect(dsns["history"]) as conn:
            tables = sizes(conn)
    args.loads = (args.loads[0], os.getloadavg())
    header(
        args,
        info,
        f"N={args.n:,} workflows x {STEPS} no-op steps submitted at once to {args.workers} idle workers "
        f"(default options), empty database against {args.history:,} finished workflows, "
        f"{args.rounds} round(s)",
    )
    print(
        f"history: {made['workflows']:,} workflows, {made['steps']:,} steps, {made['attempts']:,} attempts; "
        + ", ".join(f"{t} {mb(v['total'])} MB" for t, v in tables.items())
    )
    print()
    ratios = [ratio(r["history"].workflows_per_s, r["empty"].workflows_per_s) for r in done]
    steady = [ratio(r["history"].steady_workflows_per_s, r["empty"].steady_workflows_per_s) for r in done]
    n = args.n
    rows = [
        [
            f"{r['round']} ({' '.join(r['order'])})",
            f"{r['load']:.2f}",
            num(r["empty"].workflows_per_s),
            num(r["history"].workflows_per_s),
            x(ratios[i]),
            num(r["empty"].steps_per_s),
            num(r["history"].steps_per_s),
            num(r["empty"].steady_workflows_per_s),
            num(r["history"].steady_workflows_per_s),
            x(steady[i]),
            num(r["empty"].entries_per_scan, 1),
            num(r["history"].entries_per_scan, 1),
            f"{r['empty'].autovacuums} / {r['history'].autovacuums}",
            f"{r['empty'].blocks_hit / n:,.0f} / {r['history'].blocks_hit / n:,.0f}",
            f"{r['empty'].blocks_read / n:,.1f} / {r['history'].blocks_read / n:,.1f}",
        ]
        for i, r in enumerate(done)
    ]
    rows.append(
        [
            f"median of {len(done)}",
            num(median([r["load"] for r in done]), 2),
            num(median([r["empty"].workflows_per_s for r in done])),
            num(median([r["history"].workflows_per_s for r in done])),
            f"**{x(median(ratios))}**",
            num(median([r["empty"].steps_per_s for r in done])),
            num(median([r["history"].steps_per_s for r in done])),
            num(median([r["empty"].steady_workflows_per_s for r in done])),
            num(median([r["history"].steady_workflows_per_s for r in done])),
            x(median(steady)),
            num(median([r["empty"].entries_per_scan for r in done]), 1),
            num(median([r["history"].entries_per_scan for r in done]), 1),
            "",
            "",
            "",
        ]
    )
    print("## workflows/s: submit's return -> none unfinished (polled every 0.2 s)")
    print()
    harness.table(
        [
            "round",
            "load",
            "empty wf/s",
            "history wf/s",
            "history/empty",
            "empty steps/s",
            "history steps/s",
            "empty steady",
            "history steady",
            "steady ratio",
            f"empty {RUNNABLE_INDEX} entries/scan",
            "history entries/scan",
            "autovacuum+analyze runs during (empty / history)",
            "blocks hit per workflow",
            "blocks read per workflow",
        ],
        rows,
    )
    text, _ = goal_line("history/empty workflows/s", ratios)
    print(text)
    harness.verdict("verification", problems)
    return problems, {"history": made, "rounds": [_plain(r) for r in done]}


def cmd_backlog(
    args: argparse.Namespace, server: str, info: harness.Server
) -> tuple[list[str], dict[str, Any]]:
    problems: list[str] = []
    plans = claim_plan_phase(
        server, sorted({args.small, *args.size_list}), args.parked_share, args.runs, args.keep
    )
    variants = {"small": args.small, **{f"{s:,}": s for s in args.size_list}}
    done: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        dsns = {k: stack.enter_context(database(server, "scale_backlog", args.keep)) for k in variants}
        observe = stack.enter_context(database(server, "scale_observe", args.keep))
        for number in range(1, args.rounds + 1):
            order = harness.rotated([*variants, "observation"], number - 1)
            current: dict[str, Any] = {"round": number, "order": order, "load": os.getloadavg()[0]}
            for label in order:
                if label == "observation":
                    r: Any = idle_run(
                        observe, label, args.n, args.workers, args.timeout, args.workdir, args.extra
                    )
                else:
                    size = variants[label]
                    r = backlog_run(
                        dsns[label],
                        label,
                        size,
                        int(size * args.parked_share),
                        min(args.n, size),
                        args.workers,
                        args.timeout,
                        args.workdir,
                        args.extra,
                    )
                current[label] = r
                problems += r.problems
            done.append(current)
    args.loads = (args.loads[0], os.getloadavg())
    header(
        args,
        info,
        f"{args.workers} workers (default options) over the first {args.n:,} completions of a waiting "
        f"backlog, parked/delayed runs {100 * args.parked_share:g} % of the runnable ones mixed in, "
        f"{args.rounds} round(s)",
    )
    print(f"## (1) the claim (worker.claim), prepared, {GENERIC}, EXPLAIN (ANALYZE, BUFFERS)")
    print()
    plan_table(plans)
    big = [k for k in variants if k != "small"]
    print(
        f"## (2) workflows/s over the first {args.n:,} completions "
        "(first claim -> that completion, database clock)"
    )
    print()
    rows = []
    ratio_of = {
        k: [ratio(r[k].steady_workflows_per_s, r["small"].steady_workflows_per_s) for r in done] for k in big
    }
    for i, r in enumerate(done):
        rows.append(
            [f"{r['round']} ({' '.join(r['order'])})", f"{r['load']:.2f}"]
            + [num(r[k].steady_workflows_per_s) for k in variants]
            + [x(ratio_of[k][i]) for k in big]
            + [num(r[k].entries_per_scan, 1) for k in variants]
        )
    rows.append(
        [f"median of {len(done)}", num(median([r["load"] for r in done]), 2)]
        + [num(median([r[k].steady_workflows_per_s for r in done])) for k in variants]
        + [f"**{x(median(ratio_of[k]))}**" for k in big]
        + [num(median([r[k].entries_per_scan for r in done]), 1) for k in variants]
    )
    harness.table(
        [
            "round",
            "load",
            *[f"{k} wf/s" for k in variants],
            *[f"{k}/small" for k in big],
            *[f"{k} {RUNNABLE_INDEX} entries/scan" for k in variants],
        ],
        rows,
    )
    print(
        "workflows/s from the workers' start (polled every 0.2 s), medians: "
        + ", ".join(f"{k} {num(median([r[k].workflows_per_s for r in done]))}" for k in variants)
    )
    print()
    print(
        f"## (3) the issue's observation: {args.workers} idle workers, N={args.n:,} submitted at once, "
        "empty database"
    )
    print()
    harness.table(
        ["round", "workflows/s", f"{RUNNABLE_INDEX} scans", "entries read", "entries per scan"],
        [
            [
                str(r["round"]),
                num(r["observation"].workflows_per_s),
                num(r["observation"].index_scans),
                num(r["observation"].index_entries),
                num(r["observation"].entries_per_scan, 1),
            ]
            for r in done
        ],
    )
    for k in big:
        text, _ = goal_line(f"{k} runnable / small ({args.small:,}) workflows/s", ratio_of[k])
        print(text)
    harness.verdict("verification", problems)
    return problems, {"plans": [dataclasses.asdict(p) for p in plans], "rounds": [_plain(r) for r in done]}


def cmd_soak(args: argparse.Namespace, server: str, info: harness.Server) -> tuple[list[str], dict[str, Any]]:
    with database(server, "scale_soak", args.keep) as dsn:
        result = soak(dsn, args, args.workdir, args.extra)
    args.loads = (args.loads[0], os.getloadavg())
    header(
        args,
        info,
        f"soak: {args.workers} workers (default options) for {args.minutes:g} min, about {args.target:,} "
        f"runnable kept, `wfctl prune --older-than {args.prune_older_than}` every {args.interval:g} s",
    )
    problems = soak_report(result, args)
    return problems, {"soak": dataclasses.asdict(result)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


COMMANDS: dict[str, Callable[[argparse.Namespace, str, harness.Server], tuple[list[str], dict[str, Any]]]] = {
    "history": cmd_history,
    "backlog": cmd_backlog,
    "soak": cmd_soak,
    "claim-plan": cmd_claim_plan,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="History, backlog and soak: cost that does not grow with the work (see bench/README.md).",
    )
    parser.add_argument("command", choices=list(COMMANDS))
    harness.add_server_dsn(parser)
    parser.add_argument("--quick", action="store_true", help="small sizes, for the test")
    parser.add_argument("-n", type=int, help="workflows per timed run (default 20000)")
    parser.add_argument("--history", type=int, help="history: finished workflows (default 1000000)")
    parser.add_argument(
        "--sizes", help="backlog, claim-plan: runnable runs, comma-separated (default 100000,1000000)"
    )
    parser.add_argument("--small", type=int, help="backlog: the small backlog (default 20000)")
    parser.add_argument(
        "--parked-share",
        type=float,
        default=0.1,
        help="backlog, claim-plan: parked and delayed runs per runnable one (default 0.1)",
    )
    parser.add_argument("--runs", type=int, help="claims measured per plan (default 5)")
    parser.add_argument("--rounds", type=int, help="history, backlog: rounds (default 3)")
    parser.add_argument("-w", "--workers", type=int, help="worker processes (default 4)")
    parser.add_argument("--minutes", type=float, help="soak: length (default 30)")
    parser.add_argument("--interval", type=float, help="soak: seconds per sample and per prune (default 60)")
    parser.add_argument("--target", type=int, help="soak: runnable runs kept (default 20000)")
    parser.add_argument("--prune-older-than", help="soak: wfctl prune --older-than (default 2m)")
    parser.add_argument("--timeout", type=float, help="seconds allowed per timed run (default 600)")
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help="extra options for `wfctl worker`, one shell-quoted string",
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON on stdout")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL)[args.command].items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    try:
        args.size_list = [int(s) for s in args.sizes.split(",")] if args.sizes else []
    except ValueError:
        parser.error("--sizes takes whole numbers separated by commas")
    counts = [
        getattr(args, k)
        for k in ("n", "history", "small", "runs", "rounds", "workers", "target")
        if getattr(args, k, None) is not None
    ]
    if min([*counts, *args.size_list]) < 1:
        parser.error("sizes, counts and rounds must be at least 1")
    if not 0 <= args.parked_share <= 10:
        parser.error("--parked-share must be between 0 and 10")
    for name in ("minutes", "interval", "timeout"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            parser.error(f"--{name} must be positive")
    args.extra = shlex.split(args.worker_args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-scale-", args.keep, lambda workdir: run_command(args, workdir))


def run_command(args: argparse.Namespace, workdir: Path) -> int:
    args.workdir = workdir
    args.loads = (os.getloadavg(), os.getloadavg())
    with harness.server_dsn(args.server_dsn, workdir) as (server, description):
        info = harness.describe_server(server, description)
        harness.warn_if_not_durable(info)
        problems, data = COMMANDS[args.command](args, server, info)
    if args.json:
        print(
            json.dumps(
                {
                    "command": args.command,
                    "server": dataclasses.asdict(info),
                    "databases": CREATED,
                    **data,
                    "problems": problems,
                },
                indent=2,
                default=str,
            )
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
