"""Chaos run: durable execution under SIGKILLed workers, cron recovery and a database restart.

    python tests/chaos.py [--workflows 3000] [--workers 4] [--concurrency 4] [--kill-every 2s]
                          [--recover-every 2s] [--restart-db | --no-restart-db] [--dsn DSN]
                          [--step-ms 20-60] [--heartbeat 200ms] [--stale 1s] [--json]

A fault-injection run, not a benchmark: tests/process/test_chaos.py runs it at a size for CI, and it
can be run by hand at any size (``--help``), from a source checkout where wfctl is installed
(``pip install -e .``; pytest is not needed). Its server, processes and log reading are those
of the other multi-process tests (tests/servers.py, tests/helpers.py).

The scenario:

1. N workflows of type ``chaos3`` (tests/apps/chaosflows.py: three steps of a few ms, each REAL
   execution appended as one line ``<id> <step> <attempt> <pid>`` to a file outside the
   checkpoint) are submitted with ``wfctl submit --input-file`` (one transaction);
2. W ``wfctl worker --app chaosflows --no-sweep`` processes run them (recovery is left to cron,
   step 4, so that every requeue is on record; the workers' own sweep has its tests in
   tests/db/test_sweep.py);
3. every ``--kill-every`` (with +-50 % jitter) a random worker is SIGKILLed and a new one started;
4. a "cron" thread runs ``wfctl recover --stale <stale> --json`` every ``--recover-every``;
5. once, when 40 % of the workflows are done, the PostgreSQL server is restarted (fast shutdown,
   ``--db-down`` of downtime, start); the workers are NOT restarted: the run waits until every
   one of them has logged the lost connection and the reconnect, and has completed a workflow
   after it, before the kills go on;
6. when all N are completed the live workers get SIGTERM (each must exit 0), then everything is
   verified and the figures are printed. Exit status 0 when every check holds, 1 otherwise.

The database: by default a throwaway embedded PostgreSQL (``servers.Embedded``, listening on a
Unix socket in a temporary directory), deleted at the end; ``--fast`` turns fsync off there (a
fast shutdown still writes everything; only an OS crash could lose data).
With ``--dsn`` an existing database is used (the schema is installed if missing; it must hold
no ``chaos3`` rows; they are deleted at the end unless ``--keep``); the restart then needs
``--restart-cmd`` (a shell command that restarts that server, such as
``pg_ctl -D /path restart -m fast``; ``--db-down`` applies to the embedded server only),
else ``--no-restart-db``.

The bound on duplicate executions (see ``Chaos.verify``):
every execution is attributed to the attempt that ran it (the attempt number is in its line);
the stored checkpoint of a step records the attempt that wrote it. An execution whose attempt
is not the stored one is *wasted*: its attempt was abandoned before its checkpoint committed.
An attempt only ends without completing when a recover requeues it (no step fails in chaos3,
and nothing is released before the end), and a running attempt has at most one executed step
whose checkpoint is not committed (``ctx.step`` waits for the previous checkpoint before it
calls the next step function). Hence:

- each (workflow, attempt) has at most one wasted execution, and every wasted execution has a
  recover record that requeued that attempt (found by workflow id and the new attempt number);
- a killed worker ran at most ``--concurrency`` steps at its death (one per thread; the
  workflows it had claimed ahead had not started), so the wasted executions attributed to one
  kill are at most min(concurrency, workflows requeued from it);
- a live worker loses workflows only when a recover finds its heartbeat stale, which happens
  while the database is down or just back (its heartbeats could not reach it); one recover
  sweep abandons at most ``--concurrency`` of its started steps, so the wasted executions
  attributed to live workers are at most the sum over (sweep, worker) of min(concurrency,
  workflows that sweep requeued from that worker): "in flight at the database restart".
  This needs the worker not to START a workflow it claimed ahead (its backlog) once that
  workflow's lease is gone, which
  tests/process/test_faults.py::test_claimed_ahead_run_whose_lease_was_taken_is_not_started pins down.

So ``real executions - 3N <= sum over kills + sum over (sweep, live worker)``, each term capped
by the concurrency; both sides are printed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import servers
from helpers import FAST, LogWindow, complete_lines, isolated_env, rows, wfctl_command, wfctl_process

REPO = Path(__file__).resolve().parent.parent
WORKFLOW_TYPE = "chaos3"
STEPS = 3
RESTART_AT = 0.4  # restart the database once this share of the workflows is completed
READY = re.compile(r"worker (\S+) ready")


def log(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


class ChaosError(Exception):
    pass


def _seconds(text: str, what: str) -> float:
    from wfctl.durations import parse_duration
    from wfctl.errors import InvalidInput

    try:
        return parse_duration(text, what=what, allow_zero=False).total_seconds()
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ms_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        lo, hi = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--step-ms {text!r}: use MS or MIN-MAX, such as 20-60") from None
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError(f"--step-ms {text!r}: need 0 <= MIN <= MAX")
    return lo, hi


@dataclass
class Options:
    workflows: int = 3000
    workers: int = 4
    concurrency: int = 4
    kill_every: float = 2.0
    recover_every: float = 2.0
    restart_db: bool | None = None
    db_down: float = 1.0
    heartbeat: str = "200ms"
    stale: str = "1s"
    poll: str = "200ms"
    step_ms: tuple[float, float] = (20.0, 60.0)
    dsn: str | None = None
    restart_cmd: str | None = None
    fast: bool = False
    timeout: float = 600.0
    seed: int = 1
    keep: bool = False
    json: bool = False
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="wfctl-chaos-")))


# -- the database -----------------------------------------------------------------------------


class Database:
    """Where the run happens, and how to restart the server under it."""

    dsn: str
    description: str

    @property
    def can_restart(self) -> bool:
        raise NotImplementedError

    def restart(self, down: float) -> None:
        """Fast shutdown, ``down`` seconds without a server, start; returns once it is up."""
        raise NotImplementedError

    def close(self, keep: bool) -> None:
        pass


class EmbeddedDatabase(Database):
    """A throwaway embedded PostgreSQL in ``workdir/server`` (the tests' ``servers.Embedded``)."""

    def __init__(self, workdir: Path, fast: bool) -> None:
        settings = {"max_connections": "100", **(FAST if fast else {})}
        log(f"starting a throwaway embedded PostgreSQL in {workdir / 'server'}")
        self.server = servers.Embedded.init(workdir, "server", settings=settings)
        self.dsn = self.server.dsn("wfctl")
        durability = "fsync off" if fast else "durable"
        self.description = f"embedded PostgreSQL {self.server.version()} ({durability})"

    @property
    def can_restart(self) -> bool:
        return True

    def restart(self, down: float) -> None:
        try:
            self.server.stop()  # fast shutdown, waiting for the server to exit
        except RuntimeError as exc:
            raise ChaosError(f"{exc} when the restart began") from None
        time.sleep(down)  # the outage itself: what the workers must ride out
        self.server.start()

    def close(self, keep: bool) -> None:
        self.server.close()
        if not keep:
            shutil.rmtree(self.server.home, ignore_errors=True)


class ExternalDatabase(Database):
    """``--dsn``: restarted by ``--restart-cmd`` (which decides how long the server is down)."""

    def __init__(self, dsn: str, restart_cmd: str | None) -> None:
        from wfctl.connection import describe

        self.dsn = dsn
        self.restart_cmd = restart_cmd
        self.description = describe(dsn)

    @property
    def can_restart(self) -> bool:
        return self.restart_cmd is not None

    def restart(self, down: float) -> None:
        assert self.restart_cmd is not None
        result = subprocess.run(self.restart_cmd, shell=True, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise ChaosError(f"--restart-cmd failed ({result.returncode}): {result.stderr.strip()[-300:]}")


def try_rows(dsn: str, sql: str, *params: object) -> list[tuple[Any, ...]] | None:
    """None while the database is down."""
    try:
        return rows(dsn, sql, *params)
    except psycopg.OperationalError:
        return None


# -- processes --------------------------------------------------------------------------------


class WorkerProc:
    def __init__(self, index: int, opts: Options, env: dict[str, str]) -> None:
        self.index = index
        self.log_path = opts.workdir / f"worker{index:03d}.log"
        args = [
            "worker",
            "--app",
            "chaosflows",
            "--concurrency",
            str(opts.concurrency),
            "--heartbeat",
            opts.heartbeat,
            "--poll",
            opts.poll,
            "--grace",
            "30s",
            "--log-format",
            "plain",
            "--quiet",
            # recovery here is cron's: the checks account for every requeue through the records
            # `wfctl recover --json` prints (the workers' own sweep: tests/db/test_sweep.py)
            "--no-sweep",
        ]
        self.proc = wfctl_process(args, env=env, log_path=self.log_path)
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self.killed: float | None = None  # monotonic time of the SIGKILL
        self._id: str | None = None

    def text(self) -> str:
        try:
            return self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return ""

    @property
    def id(self) -> str | None:
        """The worker's identity (host:pid:hex), once it has logged that it is ready."""
        if self._id is None:
            match = READY.search(self.text())
            if match:
                self._id = match.group(1)
        return self._id

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 12) -> str:
        return f"--- {self.log_path}\n" + "\n".join(self.text().splitlines()[-lines:])


@dataclass
class RecoverRun:
    started: float
    ended: float
    code: int
    rows: list[dict[str, Any]]
    stderr: str


class Cron(threading.Thread):
    """``wfctl recover --stale S --json`` every ``every`` seconds (+-20 %), as cron would."""

    def __init__(self, opts: Options, env: dict[str, str], rng: random.Random) -> None:
        super().__init__(name="cron", daemon=True)
        self.opts, self.env, self.rng = opts, env, rng
        self.runs: list[RecoverRun] = []
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_event.wait(self.opts.recover_every * self.rng.uniform(0.8, 1.2)):
            started = time.monotonic()
            result = wfctl_command("recover", "--stale", self.opts.stale, "--json", env=self.env, timeout=120)
            requeued: list[dict[str, Any]] = []
            # a recover that lost the database after its requeue committed still prints what
            # it requeued (and exits 4)
            if result.exit_code == 0 or result.stdout.strip():
                requeued = [r for r in json.loads(result.stdout or "[]") if r.get("action") == "recovered"]
            with self.lock:
                self.runs.append(
                    RecoverRun(started, time.monotonic(), result.exit_code, requeued, result.stderr)
                )

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=180)


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Kill:
    at: float
    pid: int
    worker_id: str | None


@dataclass
class Restart:
    stopped: float  # monotonic: the fast shutdown began
    up: float  # monotonic: the server accepts connections again
    up_db: datetime  # the database's clock at that moment
    running_before: int  # workflows running when the shutdown began
    survivors: list[str]  # worker ids that lived through it without a restart
    reconnected_after: dict[str, float] = field(default_factory=dict)  # worker id -> seconds after `up`


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class Chaos:
    def __init__(self, opts: Options, db: Database) -> None:
        self.opts = opts
        self.db = db
        self.rng = random.Random(opts.seed)
        self.effects = opts.workdir / "effects.log"
        self.env = isolated_env(WFCTL_DSN=db.dsn, WFCTL_CHAOS_LOG=str(self.effects))
        self.procs: list[WorkerProc] = []
        self.kills: list[Kill] = []
        self.restarts: list[Restart] = []
        self.cron = Cron(opts, self.env, random.Random(opts.seed + 1))
        self.restart_wanted = bool(opts.restart_db)
        self.began = 0.0
        self.elapsed = 0.0

    # -- driving --

    def submit(self) -> list[str]:
        lo, hi = self.opts.step_ms
        path = self.opts.workdir / "inputs.jsonl"
        with open(path, "w") as out:
            for i in range(self.opts.workflows):
                ms = [round(self.rng.uniform(lo, hi), 1) for _ in range(STEPS)]
                out.write(json.dumps({"n": i, "ms": ms}) + "\n")
        result = wfctl_command(
            "submit", WORKFLOW_TYPE, "--input-file", str(path), "--force", env=self.env, timeout=300
        )
        if result.exit_code != 0:
            raise ChaosError(f"wfctl submit failed ({result.exit_code}): {result.stderr.strip()}")
        ids = result.stdout.split()
        if len(ids) != self.opts.workflows:
            raise ChaosError(f"wfctl submit printed {len(ids)} ids for {self.opts.workflows} lines")
        return ids

    def start_worker(self) -> WorkerProc:
        worker = WorkerProc(len(self.procs), self.opts, self.env)
        self.procs.append(worker)
        return worker

    def live(self) -> list[WorkerProc]:
        return [w for w in self.procs if w.killed is None]

    def check_alive(self) -> None:
        for worker in self.live():
            if not worker.alive():
                raise ChaosError(
                    f"worker {worker.index} (pid {worker.pid}) exited by itself with "
                    f"{worker.proc.returncode}\n{worker.tail()}"
                )

    def kill_one(self) -> None:
        victim = self.rng.choice(self.live())
        victim_id = victim.id
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        victim.killed = time.monotonic()
        self.kills.append(Kill(victim.killed, victim.pid, victim_id or victim.id))
        self.start_worker()

    def completed(self) -> int | None:
        found = try_rows(
            self.db.dsn,
            "SELECT count(*) FROM workflows WHERE workflow_type = %s AND status = 'completed'",
            WORKFLOW_TYPE,
        )
        return None if found is None else int(found[0][0])

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                tails = "\n".join(w.tail() for w in self.live())
                raise ChaosError(f"timed out after {timeout:g}s waiting for {what}\n{tails}")
            time.sleep(0.05)

    def restart(self) -> None:
        # every worker must be up and connected first: one started a moment ago would meet the
        # outage in its first connect and exit 4 (which is right for a worker that never ran)
        self.wait(lambda: all(w.id for w in self.live()), 60, "every worker to be ready before the restart")
        survivors = self.live()
        windows = {w.index: LogWindow(w.text) for w in survivors}
        running = rows(self.db.dsn, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0]
        log(f"restarting the database (fast shutdown, {self.opts.db_down:g}s down); {running} running")
        stopped = time.monotonic()
        self.db.restart(self.opts.db_down)
        up = time.monotonic()
        up_db = rows(self.db.dsn, "SELECT now()")[0][0]
        restart = Restart(stopped, up, up_db, int(running), [str(w.id) for w in survivors])
        self.restarts.append(restart)

        def reconnected() -> bool:
            for w in survivors:
                new = windows[w.index].new()
                if "lost the database connection" in new and "reconnected after" in new:
                    restart.reconnected_after.setdefault(str(w.id), round(time.monotonic() - up, 2))
            return len(restart.reconnected_after) == len(survivors)

        self.wait(reconnected, 60, "every worker to log 'lost the database connection' and 'reconnected'")

        def carried_on() -> bool:
            found = try_rows(
                self.db.dsn,
                "SELECT count(DISTINCT lease_owner) FROM workflows WHERE status = 'completed'"
                " AND finished_at > %s AND lease_owner = ANY(%s)",
                up_db,
                restart.survivors,
            )
            return found is not None and found[0][0] == len(survivors)

        self.wait(carried_on, 60, "every surviving worker to complete a workflow after the restart")
        log(f"database back after {up - stopped:.1f}s; every worker reconnected and carried on")

    def drive(self) -> None:
        n = self.opts.workflows
        for _ in range(self.opts.workers):
            self.start_worker()
        self.cron.start()
        self.began = time.monotonic()
        deadline = self.began + self.opts.timeout
        next_kill = self.began + self.opts.kill_every * self.rng.uniform(0.5, 1.5)
        next_report = self.began + 5
        while True:
            self.check_alive()
            done = self.completed()
            if done == n:
                break
            now = time.monotonic()
            if now > deadline:
                raise ChaosError(f"timed out after {self.opts.timeout:g}s with {done}/{n} completed")
            if self.restart_wanted and not self.restarts and done is not None and done >= RESTART_AT * n:
                self.restart()
                next_kill = time.monotonic() + self.opts.kill_every * self.rng.uniform(0.5, 1.5)
            elif now >= next_kill:
                self.kill_one()
                next_kill = now + self.opts.kill_every * self.rng.uniform(0.5, 1.5)
            if now >= next_report:
                log(f"{done}/{n} completed, {len(self.kills)} kills, {len(self.cron.runs)} recovers")
                next_report = now + 5
            time.sleep(0.05)
        self.elapsed = time.monotonic() - self.began
        self.cron.stop()

    def stop_workers(self) -> list[int | None]:
        live = self.live()
        # a worker started moments ago may still be importing, before its SIGTERM handler is
        # installed (a stop then simply ends it, holding nothing): let every one get ready first
        self.wait(lambda: all(w.id for w in live), 60, "every live worker to be ready before stopping")
        for worker in live:
            worker.proc.send_signal(signal.SIGTERM)
        codes = []
        for worker in live:
            try:
                codes.append(worker.proc.wait(timeout=60))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                codes.append(None)
        return codes

    def kill_everything(self) -> None:
        for worker in self.procs:
            if worker.alive():
                worker.proc.kill()
                worker.proc.wait(timeout=30)

    # -- verifying --

    def verify(self, ids: list[str], exit_codes: list[int | None]) -> tuple[dict[str, Any], list[Check]]:
        n, c = self.opts.workflows, self.opts.concurrency
        dsn = self.db.dsn
        checks: list[Check] = []

        def check(name: str, ok: bool, detail: str) -> None:
            checks.append(Check(name, bool(ok), detail))

        statuses = dict(
            rows(
                dsn,
                "SELECT status, count(*) FROM workflows WHERE workflow_type = %s GROUP BY 1",
                WORKFLOW_TYPE,
            )
        )
        total = sum(statuses.values())
        check("workflows", total == n, f"{total} stored for {n} submitted")
        check("all completed", statuses.get("completed") == n, f"statuses {statuses}")
        wrong_output = rows(
            dsn,
            "SELECT count(*) FROM workflows WHERE workflow_type = %s"
            " AND (output_data IS DISTINCT FROM '{\"sum\": 6}'::jsonb OR current_step <> 3)",
            WORKFLOW_TYPE,
        )[0][0]
        check("outputs", wrong_output == 0, f"{wrong_output} workflows without output {{'sum': 6}} at step 3")
        stored, distinct, done_steps = rows(
            dsn,
            "SELECT count(*), count(DISTINCT (s.workflow_id, s.step_number)),"
            " count(*) FILTER (WHERE s.status = 'completed' AND s.output_data = to_jsonb(s.step_number))"
            " FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id WHERE w.workflow_type = %s",
            WORKFLOW_TYPE,
        )[0]
        check(
            "checkpoints exactly once",
            stored == distinct == done_steps == STEPS * n,
            f"count(*) {stored}, count(distinct (workflow_id, step_number)) {distinct}, "
            f"completed with the right output {done_steps}, expected {STEPS * n}",
        )
        running = rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0]
        check("nothing left running", running == 0, f"{running} workflows still running")
        check(
            "live workers exit 0 on SIGTERM",
            all(code == 0 for code in exit_codes),
            f"exit codes {exit_codes}",
        )
        stopped_rows = rows(
            dsn,
            "SELECT count(*) FILTER (WHERE stopped_at IS NOT NULL), count(*) FROM workers WHERE id = ANY(%s)",
            [w.id for w in self.live() if w.id],
        )[0]
        check(
            "live workers marked stopped",
            stopped_rows[0] == stopped_rows[1] == len(self.live()),
            str(stopped_rows),
        )
        leftovers = [w.pid for w in self.procs if w.alive()]
        check("no worker process left", not leftovers, f"alive: {leftovers}")
        bad_logs = [w.index for w in self.procs if "Traceback" in w.text() or "internal error" in w.text()]
        check("no traceback or internal error in worker logs", not bad_logs, f"workers {bad_logs}")

        # real executions, from the side-effect file
        known = set(ids)
        executions: collections.Counter[tuple[str, int, int]] = collections.Counter()
        strangers = 0
        for line in complete_lines(self.effects):
            wid, step, attempt, _pid = line.split()
            if wid not in known:
                strangers += 1
            executions[(wid, int(step), int(attempt))] += 1
        real = sum(executions.values())
        check("effects belong to submitted workflows", strangers == 0, f"{strangers} lines of unknown ids")
        twice = [k for k, v in executions.items() if v > 1]
        check(
            "no attempt ran a step twice",
            not twice,
            f"{len(twice)} (workflow, step, attempt) ran >1: {twice[:3]}",
        )

        stored_attempt = {
            (str(wid), int(step)): int(attempt)
            for wid, step, attempt in rows(
                dsn,
                "SELECT s.workflow_id, s.step_number, s.attempt FROM workflow_steps s"
                " JOIN workflows w ON w.id = s.workflow_id WHERE w.workflow_type = %s",
                WORKFLOW_TYPE,
            )
        }
        unexecuted = [k for k, a in stored_attempt.items() if (k[0], k[1], a) not in executions]
        check(
            "every stored checkpoint comes from a real execution",
            not unexecuted,
            f"{len(unexecuted)} checkpoints without their execution: {unexecuted[:3]}",
        )
        wasted = [k for k in executions if stored_attempt.get((k[0], k[1])) != k[2]]
        duplicates = real - STEPS * n
        check(
            "real executions = steps + wasted",
            real == STEPS * n + len(wasted),
            f"real {real}, steps {STEPS * n}, wasted (not the stored attempt) {len(wasted)}",
        )
        per_attempt = collections.Counter((wid, attempt) for wid, _step, attempt in wasted)
        check(
            "at most one wasted execution per abandoned attempt",
            all(v == 1 for v in per_attempt.values()),
            f"max {max(per_attempt.values(), default=0)}",
        )

        # the recover records: who held each requeued attempt, and was it dead by then?
        runs = self.cron.runs
        failed_runs = [r for r in runs if r.code != 0]
        abandoned = sum(1 for r in runs for row in r.rows if row["status"] != "pending")
        check("no workflow abandoned for good", abandoned == 0, f"{abandoned} failed by recover")
        killed_at = {k.pid: k.at for k in self.kills}
        pid_of = {w.id: w.pid for w in self.procs if w.id}

        def owner_pid(owner: str) -> int | None:
            parts = owner.split(":")  # host:pid:hex
            return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else pid_of.get(owner)

        # (workflow id, the attempt it was requeued to) -> ("kill", pid) or ("live", run, owner)
        requeues: dict[tuple[str, int], tuple[Any, ...]] = {}
        for index, run in enumerate(runs):
            for row in run.rows:
                if row.get("claimed_ahead"):
                    continue  # claimed ahead, never started: handed back, no attempt lost
                owner = str(row["previous_owner"])
                pid = owner_pid(owner)
                dead = pid in killed_at and killed_at[pid] <= run.ended
                cls = ("kill", pid) if dead else ("live", index, owner)
                requeues[(str(row["id"]), int(row["attempt"]))] = cls
        reported = len(requeues)
        attempts_in_db = rows(
            dsn,
            "SELECT coalesce(sum(attempt - 1), 0), max(attempt), max(lease_epoch) FROM workflows"
            " WHERE workflow_type = %s",
            WORKFLOW_TYPE,
        )[0]
        db_requeues = int(attempts_in_db[0])
        check(
            "requeues reported = attempts lost in the database",
            db_requeues == reported,
            f"reported by recover {reported}, sum(attempt - 1) {db_requeues}",
        )
        outage = [(r.stopped, r.up + max(r.reconnected_after.values(), default=0.0)) for r in self.restarts]
        slack = _seconds(self.opts.stale, "--stale") + 1.5 * self.opts.recover_every + 2
        stray_failures = [
            r
            for r in failed_runs
            if r.code != 4
            or not any(r.started <= back + slack and r.ended >= stopped for stopped, back in outage)
        ]
        check(
            "recover fails only while the database is down (exit 4)",
            not stray_failures,
            "; ".join(f"exit {r.code}: {r.stderr.strip()[:200]}" for r in stray_failures[:3]) or "none",
        )
        requeued_by: collections.Counter[tuple[Any, ...]] = collections.Counter(requeues.values())
        live_outside = sum(
            v
            for cls, v in requeued_by.items()
            if cls[0] == "live"
            and not any(
                stopped <= runs[cls[1]].ended and runs[cls[1]].started <= back + slack
                for stopped, back in outage
            )
        )
        wasted_by: collections.Counter[tuple[Any, ...]] = collections.Counter()
        unattributed = []
        for wid, step, attempt in wasted:
            cls = requeues.get((wid, attempt + 1))
            if cls is None:
                unattributed.append((wid, step, attempt))
            else:
                wasted_by[cls] += 1
        check(
            "every wasted execution belongs to an attempt a recover requeued",
            not unattributed,
            f"{len(unattributed)} without a recover record: {unattributed[:3]}",
        )
        over = {str(cls): v for cls, v in wasted_by.items() if v > min(c, requeued_by[cls])}
        check(
            "wasted per kill, and per live worker and sweep, <= min(concurrency, requeued)",
            not over,
            f"over: {over}" if over else f"max {max(wasted_by.values(), default=0)}",
        )
        bound_kills = sum(min(c, v) for cls, v in requeued_by.items() if cls[0] == "kill")
        bound_restart = sum(min(c, v) for cls, v in requeued_by.items() if cls[0] == "live")
        bound = bound_kills + bound_restart
        check(
            "real executions - steps <= in flight at kills + in flight at the db restart",
            0 <= duplicates <= bound,
            f"{duplicates} <= {bound_kills} + {bound_restart}",
        )
        wasted_kill = sum(v for cls, v in wasted_by.items() if cls[0] == "kill")
        wasted_live = sum(v for cls, v in wasted_by.items() if cls[0] == "live")
        from_kill = sum(v for cls, v in requeued_by.items() if cls[0] == "kill")
        from_live = sum(v for cls, v in requeued_by.items() if cls[0] == "live")
        if self.restart_wanted:
            check("one database restart", len(self.restarts) == 1, f"{len(self.restarts)} restarts")

        figures = {
            "database": self.db.description,
            "seconds": round(self.elapsed, 1),
            "workflows": total,
            "completed": statuses.get("completed", 0),
            "steps_expected": STEPS * n,
            "checkpoints_stored": stored,
            "checkpoints_distinct": distinct,
            "real_executions": real,
            "duplicate_executions": duplicates,
            "workers": self.opts.workers,
            "concurrency": c,
            "kills": len(self.kills),
            "worker_starts": len(self.procs),
            "recovers_run": len(runs),
            "recovers_failed_db_down": len(failed_runs),
            "requeued": reported,
            "requeued_in_db": db_requeues,
            "requeued_from_killed": from_kill,
            "requeued_from_live": from_live,
            "requeued_from_live_outside_restart": live_outside,
            "max_attempt": int(attempts_in_db[1] or 0),
            "max_lease_epoch": int(attempts_in_db[2] or 0),
            "db_restarts": len(self.restarts),
            "db_down_seconds": [round(r.up - r.stopped, 2) for r in self.restarts],
            "running_at_restart": [r.running_before for r in self.restarts],
            "reconnected_after_seconds": [r.reconnected_after for r in self.restarts],
            "wasted_at_kills": wasted_kill,
            "wasted_at_restart": wasted_live,
            "bound_in_flight_at_kills": bound_kills,
            "bound_in_flight_at_restart": bound_restart,
            "bound": bound,
            "running_at_end": running,
        }
        return figures, checks

    def cleanup(self, keep: bool) -> None:
        """--dsn: delete what the run stored (the workflows, their steps, our worker rows)."""
        if keep or not isinstance(self.db, ExternalDatabase):
            return
        try:
            with psycopg.connect(self.db.dsn, autocommit=True, connect_timeout=5) as conn, conn.transaction():
                conn.execute(
                    "DELETE FROM workflow_steps WHERE workflow_id IN"
                    " (SELECT id FROM workflows WHERE workflow_type = %s)",
                    WORKFLOW_TYPE,
                )
                conn.execute("DELETE FROM workflows WHERE workflow_type = %s", (WORKFLOW_TYPE,))
                conn.execute("DELETE FROM workers WHERE id = ANY(%s)", ([w.id for w in self.procs if w.id],))
        except psycopg.Error as exc:
            log(f"could not delete the run's rows: {exc}")


def prepare(db: Database) -> None:
    from wfctl import schema

    with psycopg.connect(db.dsn, autocommit=True) as conn:
        schema.migrate(conn)
        existing = conn.execute(
            "SELECT count(*) FROM workflows WHERE workflow_type = %s", (WORKFLOW_TYPE,)
        ).fetchone()
    if existing and existing[0]:
        raise ChaosError(
            f"the database already holds {existing[0]} {WORKFLOW_TYPE} workflows; use a fresh one"
        )


def report(figures: dict[str, Any], checks: list[Check]) -> None:
    f = figures
    lines = [
        f"chaos run on {f['database']}: {f['seconds']}s",
        f"  workflows          {f['workflows']} submitted, {f['completed']} completed, "
        f"{f['running_at_end']} left running",
        f"  checkpoints        {f['checkpoints_stored']} stored, {f['checkpoints_distinct']} distinct "
        f"(workflow, step), {f['steps_expected']} expected (3 x N)",
        f"  real executions    {f['real_executions']} ({f['duplicate_executions']} more than the steps)",
        f"  workers            {f['workers']} x concurrency {f['concurrency']}; {f['kills']} SIGKILLs, "
        f"{f['worker_starts']} worker starts",
        f"  recover (cron)     {f['recovers_run']} runs ({f['recovers_failed_db_down']} failed while the "
        f"database was down), {f['requeued']} workflows requeued",
        f"                     ({f['requeued_from_killed']} from killed workers, {f['requeued_from_live']} "
        f"from live ones); attempts lost in the database {f['requeued_in_db']}",
        f"  db restarts        {f['db_restarts']} (down {f['db_down_seconds']} s, "
        f"{f['running_at_restart']} running;",
        f"                     workers reconnected after {f['reconnected_after_seconds']} s)",
        f"  duplicates bound   {f['duplicate_executions']} <= {f['bound_in_flight_at_kills']} in flight at "
        f"kills + {f['bound_in_flight_at_restart']} at the db restart = {f['bound']}",
        f"                     (measured: {f['wasted_at_kills']} at kills, {f['wasted_at_restart']} at "
        "the restart)",
        f"  max attempt {f['max_attempt']}, max lease epoch {f['max_lease_epoch']}",
        "",
    ]
    for c in checks:
        lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
    print("\n".join(lines), flush=True)


def run(opts: Options) -> tuple[dict[str, Any], list[Check]]:
    with contextlib.ExitStack() as stack:
        if opts.dsn:
            db: Database = ExternalDatabase(opts.dsn, opts.restart_cmd)
        else:
            db = EmbeddedDatabase(opts.workdir, opts.fast)
            stack.callback(db.close, opts.keep)
        if opts.restart_db is None:
            opts.restart_db = db.can_restart
        elif opts.restart_db and not db.can_restart:
            raise ChaosError("--restart-db with --dsn needs --restart-cmd (or use --no-restart-db)")
        prepare(db)
        chaos = Chaos(opts, db)
        stack.callback(chaos.kill_everything)
        stack.callback(chaos.cleanup, opts.keep)
        log(
            f"{opts.workflows} workflows, {opts.workers} workers x {opts.concurrency}, kill every "
            f"~{opts.kill_every:g}s, recover --stale {opts.stale} every ~{opts.recover_every:g}s, "
            f"db restart: {'yes' if opts.restart_db else 'no'}; logs in {opts.workdir}"
        )
        ids = chaos.submit()
        try:
            chaos.drive()
        finally:
            chaos.cron.stop()
        codes = chaos.stop_workers()
        return chaos.verify(ids, codes)
    raise AssertionError("unreachable")


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python tests/chaos.py",
        description="Chaos run: kill workers, recover from cron, restart the database; "
        "verify exactly-once checkpoints.",
    )
    parser.add_argument("--workflows", "-n", type=int, default=3000, help="workflows (default 3000)")
    parser.add_argument("--workers", "-w", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--concurrency", type=int, default=4, help="wfctl worker --concurrency (default 4)")
    parser.add_argument(
        "--kill-every", type=lambda t: _seconds(t, "--kill-every"), default=2.0, metavar="DURATION"
    )
    parser.add_argument(
        "--recover-every", type=lambda t: _seconds(t, "--recover-every"), default=2.0, metavar="DURATION"
    )
    parser.add_argument(
        "--restart-db",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="restart PostgreSQL once mid-run (default: yes, when it can be restarted)",
    )
    parser.add_argument("--db-down", type=lambda t: _seconds(t, "--db-down"), default=1.0, metavar="DURATION")
    parser.add_argument("--heartbeat", default="200ms", help="wfctl worker --heartbeat (default 200ms)")
    parser.add_argument("--stale", default="1s", help="wfctl recover --stale (default 1s)")
    parser.add_argument("--poll", default="200ms", help="wfctl worker --poll (default 200ms)")
    parser.add_argument(
        "--step-ms",
        type=_ms_range,
        default=(20.0, 60.0),
        metavar="MIN-MAX",
        help="each step sleeps this many ms, uniformly (default 20-60)",
    )
    parser.add_argument("--dsn", help="an existing database instead of a throwaway embedded server")
    parser.add_argument("--restart-cmd", help="with --dsn: a shell command that restarts that server")
    parser.add_argument("--fast", action="store_true", help="embedded server with fsync off")
    parser.add_argument(
        "--timeout", type=lambda t: _seconds(t, "--timeout"), default=600.0, metavar="DURATION"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the server, rows and logs")
    parser.add_argument("--json", action="store_true", help="print the figures and checks as JSON on stdout")
    args = parser.parse_args(argv)
    if min(args.workflows, args.workers, args.concurrency) < 1:
        parser.error("--workflows, --workers and --concurrency must be at least 1")
    for name in ("heartbeat", "stale", "poll"):
        try:
            _seconds(getattr(args, name), f"--{name}")
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    opts = Options(
        workflows=args.workflows,
        workers=args.workers,
        concurrency=args.concurrency,
        kill_every=args.kill_every,
        recover_every=args.recover_every,
        restart_db=args.restart_db,
        db_down=args.db_down,
        heartbeat=args.heartbeat,
        stale=args.stale,
        poll=args.poll,
        step_ms=args.step_ms,
        dsn=args.dsn,
        restart_cmd=args.restart_cmd,
        fast=args.fast,
        timeout=args.timeout,
        seed=args.seed,
        keep=args.keep,
        json=args.json,
    )
    return opts


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    opts = parse_args(argv)
    ok = False
    try:
        figures, checks = run(opts)
        ok = all(c.ok for c in checks)
        if opts.json:
            print(
                json.dumps({"figures": figures, "checks": [asdict(c) for c in checks], "ok": ok}, default=str)
            )
        else:
            report(figures, checks)
        if not ok:
            log(f"FAILED: {', '.join(c.name for c in checks if not c.ok)}; logs kept in {opts.workdir}")
        return 0 if ok else 1
    except ChaosError as exc:
        log(f"error: {exc}")
        if any(opts.workdir.iterdir()):
            log(f"logs kept in {opts.workdir}")
        else:
            opts.workdir.rmdir()
        return 1
    finally:
        if ok and not opts.keep:
            shutil.rmtree(opts.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
