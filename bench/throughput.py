"""Throughput to the CPU limit: wfctl, the naive baseline and the floor, interleaved.

    python -m bench.throughput [-n 2000] [--rounds 3] [--server-dsn DSN] [--sides naive,wfctl,floor]
                               [--worker-args "..."] [--code REV|DIR] [--variant NAME=ARGS] [--quick]

Run from the repository root (``-m``: it imports bench/harness.py). Every side runs once
per round, in an order rotated by one from round to round, each time in a fresh database of its
own on the same server, with the protocol of the issue:

1. start W (4) worker processes and wait until all of them are connected and idle: wfctl
   (``wfctl worker --app bench.noop_app`` with default options) their rows in ``workers`` and
   their sessions idle; naive (bench/naive.py) their sessions idle; floor (bench/floor.py) their
   ``ready`` lines and their sessions idle;
2. submit N workflows of S (3) no-op steps in one transaction: ``wfctl submit noop3
   --input-file F``; naive and floor one ``INSERT ... SELECT ... generate_series``;
3. run the clock from the submit's return until the benchmark sees N completed (the count polled
   every 20 ms up to N = 5,000, every 0.2 s above: a count over a growing table costs the server);
4. stop the workers (SIGTERM) and verify: N completed, N x S step rows, each run claimed once,
   every worker exited 0.

Over the timed window it measures the machine's CPU busy share (/proc/stat), the CPU seconds of
the server's processes (the postmaster's children working for this database: its sessions, and
the background processes) and of the worker processes (/proc/PID/stat), and after it the
transactions per workflow (pg_stat_database.xact_commit). Once per run, the pgbench commit
ceiling (bench/harness.py pgbench). ``--waits`` also samples pg_stat_activity of the side's database.

The sides: ``naive``, ``wfctl`` (this working tree) and ``floor`` (the same row writes with no
engine: bench/floor.py); ``--code REV|DIR`` adds wfctl from another tree (a commit, archived,
or a checkout such as ``git worktree add /tmp/wt-X REV``), ``--variant NAME=ARGS`` wfctl from
this tree with extra worker options: both are A/B against ``wfctl`` in the same rounds. See
bench/README.md, "Throughput to the CPU limit".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from bench import floor, harness
from bench import run as base
from bench.harness import BENCH, CLOCK_TICKS, REPO, BenchError, log, process_ticks
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))

MONITOR = "wfctl-bench-monitor"  # application_name of the benchmark's own sessions
NAIVE_APPLICATION = "wfctl-bench-naive"
FAST_POLL = 0.02  # seconds between completion counts up to FAST_POLL_UP_TO workflows
SLOW_POLL = 0.2  # above it
FAST_POLL_UP_TO = 5000
READY_TIMEOUT = 120.0  # seconds for the workers to come up (a loaded machine starts Python slowly)
STOP_GRACE = 60.0  # seconds for the workers to exit after SIGTERM
WAIT_SAMPLE = 0.01  # --waits: seconds between samples of pg_stat_activity
PY_SPY_RATE = 250  # --py-spy: samples per second
CPU_SAMPLE = 0.25  # seconds between scans of the server's processes (sessions come and go)

# Goals for the `wfctl` side, with default options.
GOAL_RATIO = {2000: 8.0}  # wfctl/naive workflows/s at these N
GOAL_BUSY = 95.0  # the machine's CPU busy %, at least
GOAL_SHARE = 0.50  # wfctl/floor workflows/s, at least, at every N

FULL = {"n": "2000", "rounds": 3, "pgbench_seconds": 10, "timeout": 600.0}
QUICK = {"n": "200", "rounds": 1, "pgbench_seconds": 1, "timeout": 60.0}


# -- the sides -------------------------------------------------------------------------------------


@dataclass
class Side:
    """One way of running the workload: its workers, its submit, its workflow type."""

    name: str
    kind: str  # naive | floor | wfctl
    code: harness.Code | None = None  # wfctl: the source tree (None: this one)
    worker_args: list[str] = field(default_factory=list)  # wfctl: `wfctl worker` options
    floor_batch: int = 32
    floor_default_plans: bool = False

    @property
    def workflow_type(self) -> str:
        return {"naive": "naive3", "floor": "floor3", "wfctl": "noop3"}[self.kind]

    @property
    def cwd(self) -> Path:
        return self.code.root if self.code else REPO

    @property
    def env(self) -> dict[str, str] | None:
        return self.code.env() if self.code else None

    def label(self) -> str:
        if self.kind == "naive":
            return "bench/naive.py"
        if self.kind == "floor":
            plans = "planner defaults" if self.floor_default_plans else "claim in index order"
            return f"bench/floor.py, batches of {self.floor_batch}, {plans}"
        where = self.code.label if self.code else "this working tree"
        options = " ".join(shlex.quote(a) for a in self.worker_args) or "default options"
        return f"wfctl worker from {where}, {options}"

    def worker_command(self, dsn: str, steps: int) -> list[str]:
        if self.kind == "naive":
            named = make_conninfo(dsn, application_name=NAIVE_APPLICATION)
            return [
                sys.executable,
                str(BENCH / "naive.py"),
                "--dsn",
                named,
                "--type",
                self.workflow_type,
            ]
        if self.kind == "floor":
            return [
                sys.executable,
                str(BENCH / "floor.py"),
                "--dsn",
                dsn,
                "--type",
                self.workflow_type,
                "--steps",
                str(steps),
                "--batch",
                str(self.floor_batch),
                *(["--default-plans"] if self.floor_default_plans else []),
            ]
        return [
            *harness.wfctl_command(),
            "worker",
            "--app",
            "bench.noop_app",
            "--dsn",
            dsn,
            *self.worker_args,
        ]

    def submit(self, dsn: str, n: int, steps: int, workdir: Path) -> float:
        """N workflows in one transaction; returns once that is committed (and, for wfctl, the
        command has exited), with the time.monotonic() of the commit's return (for wfctl, of the
        command's return, before its interpreter's exit)."""
        if self.kind != "wfctl":
            with psycopg.connect(dsn, application_name=MONITOR) as conn:
                conn.execute(
                    SQL["enqueue"], {"type": self.workflow_type, "input": Jsonb({"steps": steps}), "n": n}
                )
                conn.commit()
                return time.monotonic()
        path = workdir / f"input-{n}-{steps}.jsonl"
        if not path.exists():
            path.write_text((json.dumps({"steps": steps}) + "\n") * n, "utf-8")
        cmd = [sys.executable, "-c", SUBMIT.replace("{RETURNED}", RETURNED)]
        cmd += ["submit", self.workflow_type, "--input-file", str(path), "--dsn", dsn]
        done = subprocess.run(
            cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise BenchError(
                f"{self.name}: wfctl submit failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        if len(done.stdout.split()) != n:
            raise BenchError(
                f"{self.name}: wfctl submit printed {len(done.stdout.split())} ids, expected {n}"
            )
        found = re.search(rf"^{RETURNED} ([0-9.]+)$", done.stderr, re.MULTILINE)
        if found is None:
            raise BenchError(f"{self.name}: wfctl submit did not say when it returned: {done.stderr.strip()}")
        return float(found.group(1))


# `wfctl submit` run as `python -m wfctl submit` would run it, which then reports (on stderr) the
# moment its command returned, before the interpreter's exit: on a loaded machine that exit takes
# long enough for the woken workers to finish part of the run before the process is gone.
# time.monotonic() is CLOCK_MONOTONIC, one clock for every process of the machine.
SUBMIT = """
import sys, time
from wfctl.cli.app import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code
sys.stderr.write(f"\\n{RETURNED} {time.monotonic()!r}\\n")
sys.stderr.flush()
sys.exit(code)
"""
RETURNED = "wfctl-bench-submit-returned"


# -- CPU accounting (/proc) ------------------------------------------------------------------------

# Background processes of the server (their titles), counted with every side's database: the
# WAL writer, checkpointer and autovacuum work for whoever writes.
BACKGROUND = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "stats collector",
    "archiver",
    "io worker",
    "walsummarizer",
)


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs so far: busy is everything but idle and iowait."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total - values[3] - values[4], total


class ServerProcesses:
    """The postmaster's children that work for one database: its sessions and autovacuum workers
    (their process titles name it), and the server's background processes. Other databases'
    sessions (another benchmark's, a test suite's) are left out."""

    def __init__(self, postmaster: int | None, dbname: str) -> None:
        self.postmaster = postmaster
        self.dbname = dbname
        self._mine: dict[int, bool] = {}

    def _children(self) -> list[int]:
        if self.postmaster is None:
            return []
        try:
            with open(f"/proc/{self.postmaster}/task/{self.postmaster}/children", encoding="ascii") as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def _belongs(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            return False
        return self.dbname in title.split() or any(name in title for name in BACKGROUND)

    def pids(self) -> list[int]:
        out = []
        for pid in self._children():
            if pid not in self._mine:
                self._mine[pid] = self._belongs(pid)
            if self._mine[pid]:
                out.append(pid)
        return out


@dataclass
class Cpu:
    busy_pct: float  # the machine's CPUs, over the window
    busy_s: float  # CPU seconds of all processes on the machine
    server_s: float | None  # the server's processes working for this side (None: not on this machine)
    workers_s: float  # the worker processes
    bench_s: float  # this benchmark (its polling)
    other_s: float  # the rest: other processes on the machine


class CpuMeter(threading.Thread):
    """CPU over a window: the machine's (/proc/stat), the worker processes', the server's
    processes' (rescanned every CPU_SAMPLE: sessions come and go), this process's."""

    def __init__(self, server: ServerProcesses, workers: list[int]) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.workers = workers
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._server_pids = server.pids()  # classified before the window: start() only reads

    def _read(self, pids: list[int], first: bool) -> None:
        for pid in pids:
            ticks = process_ticks(pid)
            if ticks is None:
                continue
            with self._lock:
                if first:
                    self._first[pid] = ticks
                else:
                    self._first.setdefault(pid, 0)  # born in the window: all of it counts
                self._last[pid] = ticks

    def begin(self) -> None:
        self._machine = machine_ticks()
        self._rusage = resource.getrusage(resource.RUSAGE_SELF)
        self._read(self.workers + self._server_pids, first=True)
        self.start()

    def run(self) -> None:
        while not self._done.wait(CPU_SAMPLE):
            self._read(self.server.pids(), first=False)

    def _delta(self, pids: list[int]) -> float:
        with self._lock:
            return sum(self._last.get(p, 0) - self._first.get(p, 0) for p in set(pids)) / CLOCK_TICKS

    def end(self) -> Cpu:
        self._done.set()
        self.join()
        busy, total = machine_ticks()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._read(self.workers, first=False)
        self._read(self.server.pids(), first=False)
        busy_s = (busy - self._machine[0]) / CLOCK_TICKS
        busy_pct = 100.0 * (busy - self._machine[0]) / max(1, total - self._machine[1])
        workers = self._delta(self.workers)
        server_pids = [p for p in self._last if p not in self.workers]
        server = self._delta(server_pids) if self.server.postmaster is not None else None
        bench = (usage.ru_utime + usage.ru_stime) - (self._rusage.ru_utime + self._rusage.ru_stime)
        other = busy_s - workers - (server or 0.0) - bench
        return Cpu(busy_pct, busy_s, server, workers, bench, other)


# -- what the sessions wait on (--waits) -----------------------------------------------------------


def wait_label(state: str | None, wait_type: str | None, wait: str | None) -> str:
    if state == "active":
        return f"active, waiting {wait_type}:{wait}" if wait_type else "active (on CPU)"
    if state == "idle":
        return "idle: waiting for the client"
    return f"{state or 'no state'}" + (f" ({wait_type}:{wait})" if wait_type and state != "idle" else "")


class WaitSampler(threading.Thread):
    """Samples pg_stat_activity of one database every WAIT_SAMPLE seconds, from the server's own
    database (its queries are not the side's transactions)."""

    def __init__(self, server_dsn: str, dbname: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(server_dsn, autocommit=True, application_name=MONITOR)
        self.dbname = dbname
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(WAIT_SAMPLE):
            rows = self.conn.execute(SQL["waits"], {"db": self.dbname, "me": MONITOR}).fetchall()
            self.samples += 1
            for _app, state, wait_type, wait in rows:
                self.counts[wait_label(state, wait_type, wait)] += 1

    def end(self) -> dict[str, float]:
        self._done.set()
        self.join()
        self.conn.close()
        seen = sum(self.counts.values())
        return {k: v / seen for k, v in self.counts.most_common()} if seen else {}


# -- where the worker processes spend their time (--py-spy) ----------------------------------------


class Profiles:
    """``py-spy record`` attached to every worker process of a wfctl side over the timed window:
    raw (collapsed) stacks per thread, idle threads included, one file per process."""

    def __init__(self, directory: Path, label: str, pids: list[int]) -> None:
        found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(found).exists():
            raise BenchError("--py-spy needs py-spy (pip install py-spy)")
        directory.mkdir(parents=True, exist_ok=True)
        self.logs = [directory / f"{label}-{pid}.log" for pid in pids]
        self.procs: list[subprocess.Popen[bytes]] = []
        for pid, path in zip(pids, self.logs, strict=True):
            output = str(path.with_suffix(".txt"))
            cmd = [found, "record", "--pid", str(pid), "--rate", str(PY_SPY_RATE), "--format", "raw"]
            with open(path, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [*cmd, "--idle", "--threads", "--nonblocking", "--output", output],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=out,
                    )
                )
        deadline = time.monotonic() + 30.0
        while not all("Sampling" in p.read_text("utf-8", "replace") for p in self.logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                tails = "\n".join(p.read_text("utf-8", "replace")[-500:] for p in self.logs)
                raise BenchError(f"py-spy did not start sampling:\n{tails}")
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- one phase: one side, one round, in a fresh database -------------------------------------------


@dataclass
class Phase:
    side: str
    round: int
    n: int
    steps: int
    database: str = ""
    load1: float = 0.0  # 1-minute load average at the start of the phase
    wall_s: float = 0.0  # the submit's return -> N seen completed
    workflows_per_s: float = 0.0
    steps_per_s: float = 0.0
    busy_pct: float | None = None
    server_cpu_s: float | None = None
    workers_cpu_s: float | None = None
    bench_cpu_s: float | None = None
    other_cpu_s: float | None = None
    xacts_per_workflow: float | None = None
    submit_s: float = 0.0  # how long the submit took until it returned
    submit_exit_s: float = 0.0  # wfctl: from the command's return to its process's exit
    done_at_start: int = 0  # completed already at the first count after the submit's process exited
    waits: dict[str, float] | None = None  # --waits: share of session samples per state
    verification: dict[str, Any] | None = None
    ok: bool = False


@dataclass
class Run:
    """What every phase needs to know about the run."""

    server_dsn: str
    postmaster: int | None
    workers: int
    steps: int
    timeout: float
    workdir: Path
    waits: bool
    profiles: Path | None  # --py-spy DIR
    keep: bool
    poll: float | None  # the completion poll (None: by N)


def _ready(side: Side, procs: harness.Workers, admin: psycopg.Connection[Any], dsn: str, run: Run) -> None:
    """Wait until every worker process is connected and idle (and, for wfctl, registered)."""
    dbname = conninfo_to_dict(dsn)["dbname"]
    deadline = time.monotonic() + READY_TIMEOUT
    with psycopg.connect(dsn, autocommit=True, application_name=MONITOR) as conn:
        while True:
            row = admin.execute(SQL["backends"], {"db": dbname, "app": _application(side)}).fetchone()
            connected, idle = row if row else (0, 0)
            ready = connected == idle == run.workers
            if ready and side.kind == "wfctl":
                registered = conn.execute(harness.SQL["registered"]).fetchone()
                ready = bool(registered) and registered[0] == run.workers
            if ready and side.kind == "floor":
                ready = (
                    sum(p.read_text("utf-8", "replace").count("ready\n") for p in procs.logs) == run.workers
                )
            if ready:
                return
            if procs.alive() < run.workers:
                raise BenchError(f"{side.name}: a worker exited while starting\n{procs.tails()}")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{side.name}: {connected} of {run.workers} workers connected, {idle} idle, "
                    f"after {READY_TIMEOUT:.0f} s\n{procs.tails()}"
                )
            time.sleep(0.05)


def _application(side: Side) -> str:
    return {"naive": NAIVE_APPLICATION, "floor": floor.APPLICATION, "wfctl": "wfctl worker"}[side.kind]


def _gone(admin: psycopg.Connection[Any], dbname: str) -> None:
    """Wait until the side's sessions have ended: a session's statistics are flushed before it
    leaves pg_stat_activity."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        row = admin.execute(SQL["gone"], {"db": dbname, "me": MONITOR}).fetchone()
        if row and row[0] == 0:
            return
        time.sleep(0.02)
    log(f"sessions still open in {dbname} 30 s after the workers exited")


def phase(side: Side, dsn: str, n: int, number: int, admin: psycopg.Connection[Any], run: Run) -> Phase:
    dbname = conninfo_to_dict(dsn)["dbname"]
    result = Phase(side.name, number, n, run.steps, dbname, load1=os.getloadavg()[0])
    procs = harness.Workers(
        run.workdir, f"{side.name.replace('@', '-')}-r{number}-n{n}", None, side.cwd, side.env
    )
    every = run.poll or (FAST_POLL if n <= FAST_POLL_UP_TO else SLOW_POLL)
    sampler: WaitSampler | None = None
    profiles: Profiles | None = None
    try:
        cmd = side.worker_command(dsn, run.steps)
        log(f"round {number}, N={n}, {side.name}: starting {run.workers} workers")
        procs.start(cmd, run.workers)
        _ready(side, procs, admin, dsn, run)
        monitor = psycopg.connect(dsn, autocommit=True, application_name=MONITOR)
        try:
            with contextlib.suppress(psycopg.Error):
                monitor.execute(harness.SQL["checkpoint"])  # nobody inherits the last phase's dirty buffers
            before = harness.xact_commits(monitor)
            monitor_xacts = 1
            meter = CpuMeter(ServerProcesses(run.postmaster, dbname), procs.pids())
            sampler = WaitSampler(run.server_dsn, dbname) if run.waits else None
            if run.profiles is not None and side.kind == "wfctl":
                profiles = Profiles(run.profiles, procs.label, procs.pids())
            submitted = time.monotonic()
            start = side.submit(dsn, n, run.steps, run.workdir)  # the clock runs from its return
            exited = time.monotonic()
            result.submit_s = start - submitted
            result.submit_exit_s = exited - start
            meter.begin()
            if sampler is not None:
                sampler.start()
            counts: list[int] = []

            def completed() -> tuple[bool, str]:
                row = monitor.execute(SQL["completed"]).fetchone()
                counts.append(row[0] if row else 0)
                return counts[-1] >= n, f"{counts[-1]}/{n} completed"

            monitor_xacts += harness.wait_for(completed, side.name, run.timeout, procs, every)
            result.wall_s = time.monotonic() - start
            result.done_at_start = counts[0]
            cpu = meter.end()
            if profiles is not None:
                profiles.stop()
            if sampler is not None:
                result.waits = sampler.end()
                sampler = None
        finally:
            monitor.close()
        codes = procs.terminate(STOP_GRACE)
    finally:
        procs.kill()
        if sampler is not None:
            sampler.end()
        if profiles is not None:
            profiles.stop()
    _gone(admin, dbname)
    with psycopg.connect(dsn, autocommit=True, application_name=MONITOR) as conn:
        after = harness.xact_commits(conn)
        check = base.verify(conn, side.workflow_type, n, run.steps, codes)
    result.workflows_per_s = n / result.wall_s
    result.steps_per_s = n * run.steps / result.wall_s
    result.busy_pct = cpu.busy_pct
    result.server_cpu_s = cpu.server_s
    result.workers_cpu_s = cpu.workers_s
    result.bench_cpu_s = cpu.bench_s
    result.other_cpu_s = cpu.other_s
    # everything committed in the database from just before the submit until the workers had
    # gone, less the benchmark's own reads (the submit's own transaction stays in: one in N)
    result.xacts_per_workflow = (after - before - monitor_xacts) / n
    result.verification = dataclasses.asdict(check)
    result.ok = check.ok
    log(
        f"round {number}, N={n}, {side.name}: {result.wall_s:.2f} s = "
        f"{result.workflows_per_s:,.0f} workflows/s, "
        f"CPU {cpu.busy_pct:.0f} % busy; verification {'ok' if check.ok else 'FAILED'}"
    )
    if result.done_at_start:
        log(
            f"round {number}, N={n}, {side.name}: {result.done_at_start} of {n} were completed when the "
            f"submit's process had exited, {result.submit_exit_s:.2f} s after its command returned"
        )
    if not check.ok:
        log(f"{side.name}: verification failed: {result.verification}\n{procs.tails()}")
    return result


# -- the report ------------------------------------------------------------------------------------


_num = harness.num


def ratios(phases: list[Phase], a: str, b: str) -> list[float]:
    """a's workflows/s over b's, per round (both ran in it)."""
    by_round: dict[int, dict[str, Phase]] = {}
    for p in phases:
        by_round.setdefault(p.round, {})[p.side] = p
    return [
        r[a].workflows_per_s / r[b].workflows_per_s
        for _, r in sorted(by_round.items())
        if a in r and b in r and r[b].workflows_per_s
    ]


def spread(values: list[float], percent: bool = False) -> str:
    """The median of per-round ratios, with their range."""
    if not values:
        return ""
    med, low, high = statistics.median(values), min(values), max(values)
    if percent:
        text = f"{100 * med:.0f} %"
        return text if len(values) == 1 else f"{text} ({100 * low:.0f}-{100 * high:.0f})"
    text = f"{med:.2f}x"
    return text if len(values) == 1 else f"{text} ({low:.2f}-{high:.2f})"


def summary(phases: list[Phase], sides: list[Side], ceiling: float | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    names = [s.name for s in sides]
    for side in sides:
        mine = sorted((p for p in phases if p.side == side.name), key=lambda p: p.round)
        if not mine:
            continue
        row: dict[str, Any] = {
            "rounds": [p.round for p in mine],
            "workflows_per_s": [p.workflows_per_s for p in mine],
            "steps_per_s": [p.steps_per_s for p in mine],
        }
        for key in (
            "workflows_per_s",
            "steps_per_s",
            "wall_s",
            "busy_pct",
            "server_cpu_s",
            "workers_cpu_s",
            "bench_cpu_s",
            "other_cpu_s",
            "xacts_per_workflow",
        ):
            row[f"median_{key}"] = harness.median([getattr(p, key) for p in mine])
        xacts = row["median_xacts_per_workflow"]
        row["ceiling_over_xacts"] = ceiling / xacts if ceiling and xacts else None
        # CPU per workflow processed in the CPU window (which starts when the submit's process
        # has exited: the runs completed by then are not in it)
        for key in ("server_cpu_s", "workers_cpu_s"):
            row[f"median_{key[:-2]}_ms_per_workflow"] = harness.median(
                [
                    1000 * getattr(p, key) / max(1, p.n - p.done_at_start)
                    if getattr(p, key) is not None
                    else None
                    for p in mine
                ]
            )
        if side.kind == "wfctl":
            for other, key in (("naive", "over_naive"), ("floor", "share_of_floor")):
                if other in names:
                    row[key] = ratios(phases, side.name, other)
            if side.name != "wfctl" and "wfctl" in names:
                row["over_wfctl"] = ratios(phases, side.name, "wfctl")
        out[side.name] = row
    return out


def _per_round(values: list[float]) -> str:
    return " · ".join(f"{v:,.0f}" for v in values)


def report_n(
    n: int, phases: list[Phase], sides: list[Side], ceiling: float | None, every: float
) -> dict[str, Any]:
    rows = summary(phases, sides, ceiling)
    rounds = sorted({p.round for p in phases})
    print(
        f"## N = {n:,} ({len(rounds)} round{'s' if len(rounds) != 1 else ''}; "
        f"completions polled every {every * 1000:g} ms)"
    )
    print()
    orders = []
    for r in rounds:
        order = [p for p in phases if p.round == r]
        orders.append(f"{r}: {', '.join(p.side for p in order)} (load {order[0].load1:.2f})")
    print("rounds (order, 1-minute load average): " + "; ".join(orders))
    print()
    has = {
        key: any(key in row for row in rows.values())
        for key in ("over_naive", "over_wfctl", "share_of_floor")
    }
    header = ["side", "workflows/s", "per round", "steps/s", "per round"]
    header += ["/ naive"] if has["over_naive"] else []
    header += ["/ wfctl"] if has["over_wfctl"] else []
    header += ["share of the floor"] if has["share_of_floor"] else []
    table = []
    for name, row in rows.items():
        line = [
            name,
            _num(row["median_workflows_per_s"]),
            _per_round(row["workflows_per_s"]),
            _num(row["median_steps_per_s"]),
            _per_round(row["steps_per_s"]),
        ]
        line += [spread(row.get("over_naive", []))] if has["over_naive"] else []
        line += [spread(row.get("over_wfctl", []))] if has["over_wfctl"] else []
        line += [spread(row.get("share_of_floor", []), percent=True)] if has["share_of_floor"] else []
        table.append(line)
    harness.table(header, table)
    header = [
        "side (medians)",
        "wall s",
        "CPU busy %",
        "server CPU s",
        "workers CPU s",
        "benchmark CPU s",
        "other CPU s",
        "server CPU ms / workflow",
        "workers CPU ms / workflow",
        "transactions / workflow",
    ]
    header += ["ceiling / transactions (workflows/s)"] if ceiling else []
    table = []
    for name, row in rows.items():
        line = [
            name,
            _num(row["median_wall_s"], 2),
            _num(row["median_busy_pct"]),
            _num(row["median_server_cpu_s"], 2),
            _num(row["median_workers_cpu_s"], 2),
            _num(row["median_bench_cpu_s"], 2),
            _num(row["median_other_cpu_s"], 2),
            _num(row["median_server_cpu_ms_per_workflow"], 3),
            _num(row["median_workers_cpu_ms_per_workflow"], 3),
            _num(row["median_xacts_per_workflow"], 3),
        ]
        line += [_num(row["ceiling_over_xacts"])] if ceiling else []
        table.append(line)
    harness.table(header, table)
    waited = [p for p in phases if p.waits is not None]
    if waited:
        report_waits(waited, [s.name for s in sides])
    return rows


def report_waits(phases: list[Phase], names: list[str]) -> None:
    """The share of the side's sessions' samples in each state, averaged over the rounds."""
    shares: dict[str, dict[str, list[float]]] = {}
    for p in phases:
        for label, share in (p.waits or {}).items():
            shares.setdefault(label, {}).setdefault(p.side, []).append(share)
    columns = [n for n in names if any(p.side == n for p in phases)]
    counts = {n: sum(1 for p in phases if p.side == n) for n in columns}
    labels = sorted(shares, key=lambda k: -max(sum(v) / counts[s] for s, v in shares[k].items()))
    print("what the side's sessions were doing (pg_stat_activity sampled every 10 ms, % of session samples)")
    print()
    harness.table(
        ["state", *columns],
        [
            [label, *[f"{100 * sum(shares[label].get(c, [])) / counts[c]:.1f}" for c in columns]]
            for label in labels
        ],
    )


def goals(all_rows: dict[int, dict[str, Any]]) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for n, rows in all_rows.items():
        ours = rows.get("wfctl")
        if not ours:
            continue
        if n in GOAL_RATIO and ours.get("over_naive"):
            med = statistics.median(ours["over_naive"])
            out.append(
                (
                    f"N={n:,}: wfctl/naive {spread(ours['over_naive'])} >= {GOAL_RATIO[n]:g}x",
                    med >= GOAL_RATIO[n],
                )
            )
        if ours.get("share_of_floor"):
            med = statistics.median(ours["share_of_floor"])
            share = spread(ours["share_of_floor"], percent=True)
            out.append(
                (f"N={n:,}: wfctl's share of the floor {share} >= {GOAL_SHARE:.0%}", med >= GOAL_SHARE)
            )
        busy = ours.get("median_busy_pct")
        if busy is not None:
            out.append(
                (f"N={n:,}: CPU busy while wfctl runs {busy:.0f} % >= {GOAL_BUSY:g} %", busy >= GOAL_BUSY)
            )
    return out


# -- main ------------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"workflow counts must be at least 1: {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="Throughput to the CPU limit: wfctl, the naive baseline and the floor, "
        "interleaved (see bench/README.md).",
    )
    harness.add_server_dsn(parser)
    parser.add_argument("-n", help="workflows per phase, comma-separated for several (default 2000)")
    parser.add_argument("--rounds", type=int, help="rounds of every side (default 3)")
    parser.add_argument("-s", "--steps", type=int, default=3, help="no-op steps per workflow (default 3)")
    parser.add_argument("-w", "--workers", type=int, default=4, help="worker processes per side (default 4)")
    parser.add_argument(
        "--sides", help="of naive,wfctl,floor (default: all three; with --code or --variant: wfctl)"
    )
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help="extra options for every `wfctl worker`, one shell-quoted string: --worker-args='-c 16'",
    )
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        metavar="REV|DIR",
        help="also run wfctl from this commit (git archive) or source tree, as side wfctl@REV (repeatable)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="also run wfctl from this tree with these extra worker options, as side NAME (repeatable): "
        "--variant 'c16=--concurrency 16'",
    )
    parser.add_argument(
        "--floor-batch", type=int, default=32, help="runs per statement of the floor (default 32)"
    )
    parser.add_argument(
        "--floor-default-plans",
        action="store_true",
        help="the floor with the planner's defaults (its claim may sort the whole runnable set)",
    )
    parser.add_argument(
        "--poll", type=float, help="seconds between completion counts (default: 0.02, 0.2 above N=5000)"
    )
    parser.add_argument(
        "--pgbench-seconds", type=int, help="pgbench -T of the commit ceiling (default 10; 0 skips it)"
    )
    parser.add_argument("--pgbench-clients", type=int, default=4, help="pgbench -c (default 4)")
    parser.add_argument(
        "--waits", action="store_true", help="sample pg_stat_activity of each side's database"
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="record the wfctl workers with py-spy over the timed window into DIR (raw stacks per thread)",
    )
    parser.add_argument("--quick", action="store_true", help="N=200, 1 round, pgbench 1 s: the test's run")
    parser.add_argument("--timeout", type=float, help="seconds allowed per phase (default 600; --quick 60)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and the worker logs")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON on stdout")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.sizes = _sizes(args.n)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if min(args.rounds, args.steps, args.workers, args.floor_batch, args.pgbench_clients) < 1:
        parser.error("--rounds, -s, -w, --floor-batch and --pgbench-clients must be at least 1")
    if args.timeout <= 0 or (args.poll is not None and args.poll <= 0):
        parser.error("--timeout and --poll must be positive")
    extras = bool(args.code or args.variant)
    base_sides = (args.sides or ("wfctl" if extras else "naive,wfctl,floor")).split(",")
    base_sides = [s.strip() for s in base_sides if s.strip()]
    unknown = [s for s in base_sides if s not in ("naive", "wfctl", "floor")]
    if unknown or len(set(base_sides)) != len(base_sides):
        parser.error(f"--sides takes naive, wfctl and floor, each once: {args.sides!r}")
    if not base_sides and not extras:
        parser.error("no side to run")
    args.base_sides = base_sides
    args.variants = []
    for spec in args.variant:
        name, sep, extra = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or name in ("naive", "wfctl", "floor"):
            parser.error(
                f"--variant takes NAME=ARGS, NAME letters, digits or _.+- and not a side's name: {spec!r}"
            )
        args.variants.append((name, shlex.split(extra)))
    names = [n for n, _ in args.variants]
    if len(set(names)) != len(names):
        parser.error("--variant names must differ")
    return args


def build_sides(args: argparse.Namespace, workdir: Path) -> list[Side]:
    common = shlex.split(args.worker_args)
    sides: list[Side] = []
    for kind in args.base_sides:
        sides.append(
            Side(
                kind,
                kind,
                worker_args=common if kind == "wfctl" else [],
                floor_batch=args.floor_batch,
                floor_default_plans=args.floor_default_plans,
            )
        )
    for spec in args.code:
        code = harness.resolve_code(spec, workdir)
        sides.append(Side(harness.code_side_name(spec), "wfctl", code=code, worker_args=common))
    for name, extra in args.variants:
        sides.append(Side(name, "wfctl", worker_args=[*common, *extra]))
    harness.check_unique([s.name for s in sides])
    return sides


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.frame("wfctl-bench-throughput-", args.keep, lambda workdir: run_all(args, workdir))


def run_all(args: argparse.Namespace, workdir: Path) -> int:
    sides = build_sides(args, workdir)
    loads_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        server, description = stack.enter_context(harness.server_dsn(args.server_dsn, workdir))
        info = harness.describe_server(server, description)
        harness.warn_if_not_durable(info)
        trees = harness.Trees(workdir, stack)
        admin = stack.enter_context(psycopg.connect(server, autocommit=True, application_name=MONITOR))
        postmaster = harness.postmaster_of(admin)
        if postmaster is None:
            log("the server does not run on this machine: no server CPU figures")
        ceiling = None
        if args.pgbench_seconds > 0:
            with harness.fresh_database(server, "tp_pgbench", keep=False, install=False) as dsn:
                ceiling = harness.pgbench(dsn, args.pgbench_seconds, args.pgbench_clients)
            log(f"pgbench: {ceiling:,.0f} tps")
        run = Run(
            server,
            postmaster,
            args.workers,
            args.steps,
            args.timeout,
            workdir,
            args.waits,
            args.py_spy,
            args.keep,
            args.poll,
        )
        phases: list[Phase] = []
        for n in args.sizes:
            for number in range(1, args.rounds + 1):
                for side in harness.rotated(sides, number - 1):
                    label = f"tp_{side.kind}"
                    with harness.tree_database(server, label, args.keep, side.code, trees) as dsn:
                        phases.append(phase(side, dsn, n, number, admin, run))
    loads_end = os.getloadavg()
    problems = report(args, sides, info, ceiling, phases, (loads_start, loads_end))
    return 1 if problems else 0


def report(
    args: argparse.Namespace,
    sides: list[Side],
    info: harness.Server,
    ceiling: float | None,
    phases: list[Phase],
    loads: tuple[tuple[float, ...], tuple[float, ...]],
) -> list[str]:
    print(
        f"\nwfctl throughput benchmark: {args.workers} worker processes per side, "
        f"S={args.steps} no-op steps, {os.cpu_count()} CPUs"
    )
    print(harness.server_line(info))
    if ceiling is not None:
        print(
            f"commit ceiling: pgbench -c {args.pgbench_clients} -j {min(2, args.pgbench_clients)} "
            f"-T {args.pgbench_seconds}, one single-row INSERT per transaction: {ceiling:,.0f} tps"
        )
    for side in sides:
        print(f"side {side.name}: {side.label()}")
    print(harness.loads_line(loads))
    print()
    all_rows: dict[int, dict[str, Any]] = {}
    for n in args.sizes:
        mine = [p for p in phases if p.n == n]
        every = args.poll or (FAST_POLL if n <= FAST_POLL_UP_TO else SLOW_POLL)
        all_rows[n] = report_n(n, mine, sides, ceiling, every)
    for text, met in goals(all_rows):
        print(f"goal {'MET   ' if met else 'MISSED'} {text}")
    for p in phases:
        if p.done_at_start:
            print(
                f"note: round {p.round}, N={p.n}, {p.side}: {p.done_at_start:,} of {p.n:,} were completed "
                f"when the submit's process had exited, {p.submit_exit_s:.2f} s after its command returned "
                "(the clock runs from the return)"
            )
    problems = [
        f"round {p.round}, N={p.n}, {p.side}: verification failed: {p.verification}"
        for p in phases
        if not p.ok
    ]
    harness.verdict("verification", problems)
    if args.json:
        print(
            json.dumps(
                {
                    "options": {
                        "sizes": args.sizes,
                        "rounds": args.rounds,
                        "steps": args.steps,
                        "workers": args.workers,
                        "worker_args": args.worker_args,
                    },
                    "server": dataclasses.asdict(info),
                    "pgbench_tps": ceiling,
                    "sides": {s.name: s.label() for s in sides},
                    "phases": [dataclasses.asdict(p) for p in phases],
                    "summary": {str(n): rows for n, rows in all_rows.items()},
                    "problems": problems,
                },
                indent=2,
            )
        )
    return problems


if __name__ == "__main__":
    sys.exit(main())
