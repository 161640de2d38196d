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
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"

# Targets (2-core machine, N=2000, S=3, W=4).
TARGET_RATIO = 5.0  # wfctl workflows/s over naive workflows/s, at least
TARGET_P50_MS = 5.0  # wfctl submit-to-start p50, under
TARGET_RSS_MB = 80.0  # wfctl peak RSS per worker process, under

POLL = 0.02  # seconds between progress polls of the throughput phase
LATENCY_POLL = 0.005  # seconds between polls while waiting for a latency workflow to finish
WARMUP = 3  # latency-phase workflows submitted first and not counted (worker start-up)


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


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


def wfctl_command() -> list[str]:
    return [sys.executable, "-m", "wfctl"]


def wfctl_worker_available() -> bool:
    done = subprocess.run([*wfctl_command(), "worker", "--help"], cwd=REPO, capture_output=True)
    return done.returncode == 0


# -- processes and their memory ----------------------------------------------------------------


class RssSampler(threading.Thread):
    """Peak VmRSS (kB) of watched processes, each counted with its descendants."""

    def __init__(self, interval: float = 0.025) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._lock = threading.Lock()

    def watch(self, pid: int) -> None:
        with self._lock:
            self.peaks.setdefault(pid, 0)

    def sample(self) -> None:
        with self._lock:
            pids = list(self.peaks)
        if not pids:
            return
        children = _children_map()
        for pid in pids:
            total = sum(_rss_kb(p) for p in _tree(pid, children))
            with self._lock:
                self.peaks[pid] = max(self.peaks[pid], total)

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def _tree(pid: int, children: dict[int, list[int]]) -> Iterator[int]:
    yield pid
    for child in children.get(pid, ()):
        yield from _tree(child, children)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Workers:
    """Worker processes of one phase, with their output in log files under the work dir."""

    def __init__(
        self,
        opts: Options,
        sampler: RssSampler,
        label: str,
        cwd: Path = REPO,
        env: dict[str, str] | None = None,
    ) -> None:
        self.opts = opts
        self.cwd = cwd
        self.env = env
        self.sampler = sampler
        self.label = label
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        path = self.opts.workdir / f"{self.label}-{len(self.procs) + 1}.log"
        with open(path, "wb") as out:
            proc = subprocess.Popen(
                cmd, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        self.sampler.watch(proc.pid)
        self.procs.append(proc)
        self.logs.append(path)
        return proc

    def alive(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def wait(self, timeout: float) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        return [p.poll() for p in self.procs]

    def terminate(self, grace: float = 30.0) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = self.wait(grace)
        self.kill()
        return codes

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def tails(self, lines: int = 15) -> str:
        out = []
        for path in self.logs:
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            out.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(out)


# -- database figures --------------------------------------------------------------------------


def xact_commits(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def wal_flushes(conn: psycopg.Connection[Any]) -> int | None:
    """WAL fsyncs of the whole server so far: pg_stat_io (18+) or pg_stat_wal (14-17)."""
    version = conn.info.server_version
    try:
        if version >= 180000:
            row = conn.execute("SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal'").fetchone()
        elif version >= 140000:
            row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        else:
            return None
    except psycopg.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None


def prepare_tables(dsn: str) -> None:
    """Same treatment for both sides before timing: fresh statistics and a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE workflows, workflow_steps")
        with contextlib.suppress(psycopg.Error):
            conn.execute("CHECKPOINT")


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


def verify(conn: psycopg.Connection[Any], side: Side, opts: Options, codes: list[int | None]) -> Verification:
    row = conn.execute(
        """
        SELECT count(*),
               count(*) FILTER (WHERE status = 'completed'),
               count(*) FILTER (WHERE lease_epoch > 1 OR attempt > 1)
        FROM workflows WHERE workflow_type = %s
        """,
        (side.workflow_type,),
    ).fetchone()
    steps = conn.execute(
        """
        SELECT count(*), count(*) FILTER (WHERE s.status = 'completed')
        FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id
        WHERE w.workflow_type = %s
        """,
        (side.workflow_type,),
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
        (side.workflow_type, opts.steps, opts.steps),
    ).fetchone()
    assert row is not None and steps is not None and wrong is not None
    result = Verification(row[0], row[1], row[2], steps[0], steps[1], wrong[0], codes)
    result.ok = (
        result.workflows == opts.n
        and result.completed == opts.n
        and result.claimed_more_than_once == 0
        and result.step_rows == opts.n * opts.steps
        and result.steps_completed == opts.n * opts.steps
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


def throughput(side: Side, dsn: str, opts: Options, sampler: RssSampler, result: SideResult) -> None:
    log(f"{side.name}: enqueueing {opts.n} workflows of {opts.steps} steps")
    side.enqueue(dsn, opts)
    prepare_tables(dsn)
    workers = Workers(opts, sampler, f"{side.name}-burst", side.cwd, side.env)
    monitor = psycopg.connect(dsn, autocommit=True)
    monitor_xacts = 2  # the two reads just below
    try:
        commits_before = xact_commits(monitor)
        flushes_before = wal_flushes(monitor)
        cmd = side.worker_command(dsn, opts, burst=True)
        log(f"{side.name}: starting {opts.workers} workers: {' '.join(cmd)}")
        start = time.monotonic()
        for _ in range(opts.workers):
            workers.start(cmd)
        deadline = start + opts.timeout
        while True:
            row = monitor.execute(
                "SELECT count(*) FROM workflows WHERE workflow_type = %s AND status = 'completed'",
                (side.workflow_type,),
            ).fetchone()
            monitor_xacts += 1
            done = row[0] if row else 0
            if done >= opts.n:
                result.wall_s = time.monotonic() - start
                break
            if workers.alive() == 0:
                raise BenchError(
                    f"{side.name}: every worker exited with {done}/{opts.n} completed\n{workers.tails()}"
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{side.name}: {done}/{opts.n} completed after {opts.timeout:.0f} s\n{workers.tails()}"
                )
            time.sleep(POLL)
        codes = workers.wait(60.0)
        if any(code is None for code in codes):
            log(f"{side.name}: workers still running 60 s after the last completion; stopping them")
            codes = workers.terminate()
    finally:
        monitor.close()
        workers.kill()
    time.sleep(opts.settle)  # exited backends have flushed their statistics by now
    with psycopg.connect(dsn, autocommit=True) as conn:
        commits_after = xact_commits(conn)
        flushes_after = wal_flushes(conn)
        result.verification = verify(conn, side, opts, codes)
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


def wait_finished(conn: psycopg.Connection[Any], workflow_id: UUID, timeout: float, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute("SELECT status FROM workflows WHERE id = %s", (workflow_id,)).fetchone()
        if row and row[0] == "completed":
            return
        if row and row[0] in ("failed", "cancelled"):
            raise BenchError(f"latency workflow {workflow_id} ended {row[0]}")
        if workers.alive() == 0:
            raise BenchError(f"the idle worker exited\n{workers.tails()}")
        if time.monotonic() > deadline:
            raise BenchError(f"latency workflow {workflow_id} not completed after {timeout:.0f} s")
        time.sleep(LATENCY_POLL)


def latency(side: Side, dsn: str, opts: Options, sampler: RssSampler, result: SideResult) -> None:
    if opts.latency_count <= 0:
        return
    workers = Workers(opts, sampler, f"{side.name}-idle", side.cwd, side.env)
    rng = random.Random(opts.seed)
    prepare_tables(dsn)
    log(f"{side.name}: submit-to-start latency, {opts.latency_count} workflows one at a time")
    try:
        workers.start(side.worker_command(dsn, opts, burst=False))
        ids: list[UUID] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(WARMUP + opts.latency_count):
                # a random pause, so that a polling worker is met at a random point of its cycle
                time.sleep(rng.uniform(0.02, 0.12))
                workflow_id = side.submit_one(conn, opts.steps)
                wait_finished(conn, workflow_id, 60.0 if i < WARMUP else 30.0, workers)
                if i >= WARMUP:
                    ids.append(workflow_id)
            rows = conn.execute(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM workflows WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
        codes = workers.terminate()
        if any(code not in (0, -signal.SIGTERM) for code in codes):
            log(f"{side.name}: the idle worker exited with {codes} after SIGTERM")
    finally:
        workers.kill()
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
    sampler = RssSampler()
    sampler.start()
    try:
        throughput(side, dsn, opts, sampler, result)
        latency(side, dsn, opts, sampler, result)
    finally:
        sampler.stop()
    result.rss_mb_per_worker = [round(kb / 1024, 1) for kb in sampler.peaks.values()]
    result.peak_rss_mb = max(result.rss_mb_per_worker, default=None)
    return result


def pgbench(dsn: str, seconds: int, clients: int) -> float:
    """Single-row INSERT transactions per second (bench/pgbench_commit.sql) on dsn's server."""
    if shutil.which("pgbench") is None:
        raise BenchError("pgbench is not installed (apt-get install postgresql-client)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE wfctl_bench_commit "
            "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb)"
        )
    try:
        log(f"pgbench: -c {clients} -j {min(2, clients)} -T {seconds}, one single-row INSERT per transaction")
        done = subprocess.run(
            [
                "pgbench",
                "-n",
                "-f",
                str(BENCH / "pgbench_commit.sql"),
                "-c",
                str(clients),
                "-j",
                str(min(2, clients)),
                "-T",
                str(seconds),
                dsn,
            ],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS wfctl_bench_commit")
    match = re.search(r"^tps = ([0-9.]+)", done.stdout, re.MULTILINE)
    if done.returncode != 0 or match is None:
        raise BenchError(f"pgbench failed (exit {done.returncode}): {done.stderr.strip() or done.stdout}")
    return float(match.group(1))


# -- where the databases live ------------------------------------------------------------------


@dataclass
class Server:
    description: str
    version: str
    fsync: str
    synchronous_commit: str


def describe_server(dsn: str, description: str) -> Server:
    with psycopg.connect(dsn, autocommit=True) as conn:
        values = [
            conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("server_version", "fsync", "synchronous_commit")
        ]
    return Server(description, *values)


@contextlib.contextmanager
def embedded_server(workdir: Path) -> Iterator[str]:
    from wfctl.embedded import EmbeddedServer

    server = EmbeddedServer(workdir / "server", settings={"max_connections": "200"})
    log(f"starting a durable embedded PostgreSQL in {server.home}")
    server.ensure_running()
    try:
        yield server.dsn("postgres")
    finally:
        server.stop()
        shutil.rmtree(server.home, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server_dsn: str, label: str, keep: bool, install: bool = True) -> Iterator[str]:
    name = f"wfctl_bench_{label}_{secrets.token_hex(4)}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(server_dsn, dbname=name)
    try:
        if install:
            install_schema(dsn)
        yield dsn
    finally:
        if keep:
            log(f"kept database {name}")
        else:
            with psycopg.connect(server_dsn, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def install_schema(dsn: str) -> None:
    from wfctl import schema

    with psycopg.connect(dsn) as conn:
        schema.migrate(conn)


@contextlib.contextmanager
def shared_database(dsn: str, sides: list[Side], keep: bool) -> Iterator[str]:
    install_schema(dsn)
    types = [s.workflow_type for s in sides]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM workflows WHERE workflow_type = ANY(%s)", (types,)
        ).fetchone()
        if row and row[0]:
            raise BenchError(
                f"the database already holds {row[0]} workflows of type {' or '.join(types)}; "
                "use a fresh database, or --server-dsn to let the benchmark create its own"
            )
    try:
        yield dsn
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "DELETE FROM workflow_steps WHERE workflow_id IN "
                    "(SELECT id FROM workflows WHERE workflow_type = ANY(%s))",
                    (types,),
                )
                conn.execute("DELETE FROM workflows WHERE workflow_type = ANY(%s)", (types,))


# -- the report -------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def table(header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table: the first column left-aligned, the others right-aligned; a blank line after."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("| " + " | ".join(cells) + " |")
    print()


def report(
    results: dict[str, SideResult], server: Server, opts: Options, ceiling: float | None, pgbench_args: str
) -> list[tuple[str, bool]]:
    naive, ours = results.get("naive"), results.get("wfctl")
    extra = "".join(f" {shlex.quote(a)}" for a in opts.worker_args)
    print(
        f"\nwfctl benchmark: N={opts.n} workflows x S={opts.steps} no-op steps, W={opts.workers} worker "
        f"processes (wfctl --concurrency {opts.concurrency}{extra}), {os.cpu_count()} CPUs"
    )
    print(
        f"server: PostgreSQL {server.version}, {server.description}, fsync={server.fsync}, "
        f"synchronous_commit={server.synchronous_commit}"
    )
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
            out.append(_num(None if value is None else value * scale, digits))
        return out

    def ratio(attr: str) -> float | None:
        return _ratio(getattr(ours, attr), getattr(naive, attr)) if naive and ours else None

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
                _num(ceiling / r.xacts_per_workflow if r.xacts_per_workflow else None)
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
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(
            "| "
            + " | ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            + " |"
        )

    checks: list[tuple[str, bool]] = []
    print()
    if naive and ours:
        steady = _ratio(ours.steady_workflows_per_s, naive.steady_workflows_per_s) or 0.0
        wall = _ratio(ours.workflows_per_s, naive.workflows_per_s) or 0.0
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
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dsn", help="run both sides in this one existing database (types naive3, noop3)")
    where.add_argument(
        "--server-dsn",
        help="create fresh databases on this server (default: $WFCTL_DSN, else a durable embedded server)",
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
    workdir = Path(tempfile.mkdtemp(prefix="wfctl-bench-"))
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
    failed = True
    try:
        with contextlib.ExitStack() as stack:
            server_dsn = args.server_dsn or (None if args.dsn else os.environ.get("WFCTL_DSN"))
            if args.dsn:
                description = "the database given by --dsn"
            elif server_dsn:
                description = "fresh databases on --server-dsn/WFCTL_DSN's server"
            else:
                server_dsn = stack.enter_context(embedded_server(workdir))
                description = "embedded, fresh databases"
            server = describe_server(args.dsn or server_dsn or "", description)
            if server.fsync != "on" or server.synchronous_commit not in (
                "on",
                "remote_apply",
                "remote_write",
            ):
                log(
                    f"WARNING: the server is not durable (fsync={server.fsync}, "
                    f"synchronous_commit={server.synchronous_commit}); figures are not comparable"
                )
            if args.pgbench_seconds > 0:
                if args.dsn:
                    ceiling = pgbench(args.dsn, args.pgbench_seconds, args.pgbench_clients)
                else:
                    assert server_dsn is not None
                    with fresh_database(server_dsn, "pgbench", keep=False, install=False) as dsn:
                        ceiling = pgbench(dsn, args.pgbench_seconds, args.pgbench_clients)
                log(f"pgbench: {ceiling:,.0f} tps")
            if args.dsn:
                shared = stack.enter_context(shared_database(args.dsn, sides, args.keep))
            for side in sides:
                if args.dsn:
                    dsn = shared
                else:
                    assert server_dsn is not None
                    dsn = stack.enter_context(fresh_database(server_dsn, side.name, args.keep))
                results[side.name] = run_side(side, dsn, opts)
        pgbench_args = (
            f"-c {args.pgbench_clients} -j {min(2, args.pgbench_clients)} -T {args.pgbench_seconds}"
        )
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
        failed = not all(r.verification and r.verification.ok for r in results.values())
        return 1 if failed else 0
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    finally:
        if failed or args.keep:
            log(f"worker logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
