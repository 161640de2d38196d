"""The stateful test of issue 9: random interleavings of everything that can happen to a
workflow, against real worker processes, the real CLI and a real PostgreSQL.

A Hypothesis ``RuleBasedStateMachine`` (``StatefulEngine``) drives worker processes
(``python -m wfctl worker --app statefulflows`` from tests/apps, heartbeat 200ms, poll 100ms)
and the CLI (``wfctl submit / cancel / retry [--from-step N] / recover --stale X [--dry-run]
--json`` as subprocesses). The rules, in random order:

- ``begin`` (once, first): 1-2 workers (concurrency 1-3) and 2-4 workflows;
- ``submit`` / ``submit_more``: an ``sf-flow`` workflow from Python, the CLI, ``wfctl_submit()``
  or a plain INSERT; with or without an idempotency key (three keys, so they repeat);
  ``max_retries`` unset or 0-2. Its 1-4 steps each succeed, raise, ``sys.exit``, raise another
  ``BaseException``, sleep durably (200ms, 500ms, 2s), hang on a gate file of their own, or have
  a name the database would refuse (tests/apps/statefulflows.py);
- ``cancel`` (any workflow), ``cancel_active`` (a running one by preference), ``retry`` (a failed
  or cancelled one by preference; with and without ``--from-step``), ``cancel_then_retry`` (a
  running or sleeping one, cancelled and retried at once, while its old execution may still be
  inside a step or its sleep still ahead);
- ``recover --stale 1s|2s`` (as cron would); ``release_gate`` of one workflow;
- ``kill_worker`` (SIGKILL), ``pause_worker`` (SIGSTOP), ``resume_worker`` (SIGCONT),
  ``start_worker`` (up to 3 live);
- ``restart_database`` (once per example, where possible: see below) and ``drop_connections``
  (``pg_terminate_backend`` of every worker connection);
- ``wait`` (until nothing is runnable or running, at most 0.2-1s);
- ``compare_stuck_frozen``: SIGSTOP every worker, then the reference stuck query, ``recover
  --dry-run --stale X --json`` and the reference query again, then SIGCONT.

Each step execution appends ``<id> <step> <kind> <attempt> <epoch> <nonce>`` to an effects log
and returns its nonce, which becomes the checkpoint: a stored checkpoint names the execution
that produced it. The epoch is read from the worker's execution object behind the context
(statefulflows.epoch_of: not part of the workflow API; the test says so if it disappears).
The test also installs, in its own database, an audit: two trigger-fed tables (sf_audit_*)
recording every change of a workflow's status, epoch, attempt or max_retries (with its run_at
and the transaction's now()), and every write or delete of a step row together with the
workflow's status and epoch *as the writing statement sees them*.

Invariants, after every rule (cheap: one look at the tables, the audit and the log):

2. a step function runs at most once per lease epoch, and at most once per (retry generation,
   attempt): it runs again only in an attempt that counts (a failed step, a recovered run) or
   after ``wfctl retry`` (the generation is the number of retries before its epoch); and a
   running workflow is handed back to pending without a counted attempt (``run_at = now()``)
   no more often than the connection losses of the example explain (a claim whose reply was
   lost), so a run that loops without executing anything is caught too;
3. no step row is written by an epoch that does not hold the lease at that moment (the audit's
   row epoch equals the workflow's epoch in the same statement);
4. ``attempt`` never exceeds ``max_retries + 1`` (the type's policy when unset) at any moment of
   the audit; no workflow leaves ``completed``; ``failed``/``cancelled`` are left only by a retry
   (attempt 1); epochs never go down;
5. in one snapshot (one ``now()``), ``recover --dry-run --stale 1s`` (the function it calls)
   lists exactly the runs the reference stuck query lists for 1s, plus those whose worker
   stopped or has no row (none, here: no worker is stopped cleanly). Through the CLI, with every
   worker frozen (SIGSTOP) so that only the clock moves: reference(before) <= CLI,
   recover-query(before) <= CLI <= recover-query(after), CLI <= reference(after) + stopped.
   (This once failed: a worker continued for a moment, wrote a checkpoint and was paused
   before its next beat; recover judged by the heartbeat alone. recover now also requires the
   run's own updated_at to be stale: tests/test_correctness.py keeps that case.)

After the run (teardown: every gate released, every worker continued, at least two live
workers, ``wfctl recover --stale 1s`` every second, as cron would, until drained):

1. every workflow is terminal within 45s (completed, failed or cancelled; every sleep is at
   most 2s, so a parked run has woken and finished by then);
2. also: no step whose completed checkpoint was written under epoch e ran again under a later
   epoch granted before a ``retry --from-step`` deleted that checkpoint;
3. also: every step row's epoch is one the workflow had, and every completed checkpoint is the
   nonce of an execution logged under the same epoch and attempt; a completed workflow has all
   its steps checkpointed, ``current_step`` at its last, and returned exactly their outputs;
4. also: a ``failed`` workflow used all its attempts (``attempt == max_retries + 1``);
5. also: ``recover --dry-run --json`` and the reference query both list nothing.

A violation is recorded, not raised, and the teardown raises them all with a trace of what the
test did (and where its files are): the number of rules an example runs, and what Hypothesis
draws for them, must not depend on when a real system happened to fail, or Hypothesis reports
a "flaky strategy" instead of shrinking. After the first violation the remaining rules of the
example do nothing real (they only keep the bookkeeping that preconditions read), so a failing
example ends fast. Replays are still nondeterministic (real processes and timing): a shrunk
sequence may be reported as a flaky failure; the sequence it prints is one that failed.

Why one database: the ``dsn`` fixture makes one fresh database (the audit installed in it) per
test function, and each example starts with a TRUNCATE of the wfctl and audit tables, after
the previous example SIGKILLed all its workers; that costs milliseconds where a new database
costs a CREATE DATABASE and the migrations, and worker ids are unique, so nothing carries over.

The database restart is ``pg_ctl restart -m fast`` on the server's own data directory, run as
the user owning it. On the suite's embedded server (no ``WFCTL_TEST_DSN``) it is on; on the
server of ``WFCTL_TEST_DSN`` only when its data directory is on this machine, a ``pg_ctl`` of its
major version is found (``$WFCTL_TEST_PG_BIN``, default /usr/lib/postgresql/15/bin), and
``WFCTL_TEST_REQUIRE_SERVERS=1`` (CI) or ``WFCTL_STATEFUL_RESTART=1`` allows it.
``WFCTL_STATEFUL_RESTART=0`` turns it off everywhere; ``drop_connections`` remains.

Budget: by default (CI) 4 examples of up to 20 rules, without shrinking: about 30-60 seconds on
2 cores. For a long run:

- ``WFCTL_STATEFUL_MINUTES=M``: run batches of examples until M minutes have passed, shrinking
  failures (Hypothesis gives up shrinking after 5 minutes);
- ``WFCTL_STATEFUL_EXAMPLES=N``: examples per batch (default 4; 10 with MINUTES);
- ``WFCTL_STATEFUL_STEPS=S``: rules per example (default 20; 30 with MINUTES);
- ``WFCTL_STATEFUL_SHRINK=1``: shrink failures in a short run too.

e.g. ``WFCTL_STATEFUL_MINUTES=30 pytest -s -p no:cacheprovider tests/test_stateful.py``; the
figures (examples, workflows, executions, kills, pauses, restarts, recovers, ...) are printed
at the end (``-s``, or ``-rA``). Counterexamples found are kept as deterministic tests in
tests/test_stateful_regressions.py.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from helpers import APPS, REFERENCE_SQL, Result, wait_for
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

import wfctl
from wfctl import recovery
from wfctl.durations import parse_duration

TYPE = "sf-flow"
POLICY = 2  # sf-flow's max_retries (tests/apps/statefulflows.py POLICY_MAX_RETRIES)
TERMINAL = ("completed", "failed", "cancelled")
HEARTBEAT = "200ms"
POLL = "100ms"
MAX_WORKERS = 3
DRAIN_TIMEOUT = 45.0

EXAMPLES_ENV = "WFCTL_STATEFUL_EXAMPLES"
STEPS_ENV = "WFCTL_STATEFUL_STEPS"
MINUTES_ENV = "WFCTL_STATEFUL_MINUTES"
SHRINK_ENV = "WFCTL_STATEFUL_SHRINK"
RESTART_ENV = "WFCTL_STATEFUL_RESTART"


# -- the audit ------------------------------------------------------------------------------------

AUDIT_SQL = """
CREATE TABLE sf_audit_wf (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    workflow_id uuid NOT NULL,
    op text NOT NULL,
    old_status text, new_status text,
    old_epoch bigint, new_epoch bigint,
    old_attempt int, new_attempt int,
    max_retries int,
    current_step int,
    lease_owner text,
    run_at timestamptz,
    tx_now timestamptz NOT NULL DEFAULT now()  -- the writing transaction's now()
);
CREATE TABLE sf_audit_steps (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    workflow_id uuid NOT NULL,
    step_number int NOT NULL,
    op text NOT NULL,
    status text,
    row_epoch bigint,
    row_attempt int,
    output jsonb,
    wf_status text,
    wf_epoch bigint
);
CREATE FUNCTION sf_audit_wf_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sf_audit_wf (workflow_id, op, new_status, new_epoch, new_attempt, max_retries,
                                 current_step, lease_owner, run_at)
        VALUES (NEW.id, TG_OP, NEW.status, NEW.lease_epoch, NEW.attempt, NEW.max_retries,
                NEW.current_step, NEW.lease_owner, NEW.run_at);
    ELSE
        INSERT INTO sf_audit_wf (workflow_id, op, old_status, new_status, old_epoch, new_epoch,
                                 old_attempt, new_attempt, max_retries, current_step, lease_owner,
                                 run_at)
        VALUES (NEW.id, TG_OP, OLD.status, NEW.status, OLD.lease_epoch, NEW.lease_epoch,
                OLD.attempt, NEW.attempt, NEW.max_retries, NEW.current_step, NEW.lease_owner,
                NEW.run_at);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_audit_wf_insert AFTER INSERT ON workflows
    FOR EACH ROW EXECUTE FUNCTION sf_audit_wf_fn();
CREATE TRIGGER sf_audit_wf_update AFTER UPDATE ON workflows
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_epoch IS DISTINCT FROM NEW.lease_epoch
          OR OLD.attempt IS DISTINCT FROM NEW.attempt OR OLD.max_retries IS DISTINCT FROM NEW.max_retries)
    EXECUTE FUNCTION sf_audit_wf_fn();
-- An AFTER ROW trigger runs at the end of the writing statement, inside it: it sees what that
-- statement did to the workflow row (the group commit updates the workflow and writes the step
-- in one statement), so wf_epoch is the epoch holding the lease when the step row was written.
CREATE FUNCTION sf_audit_steps_fn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r workflow_steps%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    INSERT INTO sf_audit_steps (workflow_id, step_number, op, status, row_epoch, row_attempt, output,
                                wf_status, wf_epoch)
    SELECT r.workflow_id, r.step_number, TG_OP, r.status, r.lease_epoch, r.attempt, r.output_data,
           w.status, w.lease_epoch
    FROM (SELECT 1) AS one
    LEFT JOIN workflows w ON w.id = r.workflow_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_audit_steps_row AFTER INSERT OR UPDATE OR DELETE ON workflow_steps
    FOR EACH ROW EXECUTE FUNCTION sf_audit_steps_fn();
"""

RESET_SQL = (
    "TRUNCATE workflows, workflow_steps, workflow_attempts, workers, sf_audit_wf, sf_audit_steps "
    "RESTART IDENTITY"
)


def reference_stuck_sql() -> str:
    """The reference design's stuck-runs query, its 5 minutes made a parameter."""
    for statement in REFERENCE_SQL.read_text().split(";"):
        if "status = 'running'" in statement and "updated_at <" in statement:
            body = "\n".join(
                line for line in statement.strip().splitlines() if not line.lstrip().startswith("--")
            )
            assert "INTERVAL '5 minutes'" in body, body
            return body.replace("INTERVAL '5 minutes'", "%(stale)s::interval")
    raise AssertionError(f"no stuck-runs query in {REFERENCE_SQL}")


REFERENCE_STUCK = reference_stuck_sql()


def query(dsn: str, sql: str, params: Any = None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql, params).fetchall()


def stuck_snapshot(dsn: str, stale: timedelta) -> tuple[set[str], set[str], set[str], dict[str, tuple]]:
    """In one snapshot (one now()): the reference query's stuck runs for ``stale``; what
    `recover --dry-run --stale` lists (the same function the command calls); the running runs
    whose owner stopped or has no worker row (stale for recover whatever their age); and the
    running rows (id -> epoch, updated_at, owner, heartbeat_at, stopped_at)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            ref = {str(r[0]) for r in conn.execute(REFERENCE_STUCK, {"stale": stale}).fetchall()}
            rec = {str(r.id) for r in recovery.recover(conn, stale, dry_run=True)}
            running = {
                str(r[0]): tuple(r[1:])
                for r in conn.execute(
                    "SELECT w.id, w.lease_epoch, w.updated_at, w.lease_owner, k.heartbeat_at, k.stopped_at,"
                    " k.id IS NULL FROM workflows w LEFT JOIN workers k ON k.id = w.lease_owner"
                    " WHERE w.status = 'running'"
                ).fetchall()
            }
    ownerless = {w for w, r in running.items() if r[5] or r[4] is not None}
    return ref, rec, ownerless, running


# -- effects ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    wid: str
    step: int
    kind: str
    attempt: int
    epoch: int | None
    nonce: str


def read_effects(path: Path) -> list[Effect]:
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    out = []
    for line in complete.splitlines():
        wid, step, kind, attempt, epoch, nonce = line.split(" ")
        out.append(Effect(wid, int(step), kind, int(attempt), None if epoch == "?" else int(epoch), nonce))
    return out


# -- the database server ----------------------------------------------------------------------------


class Restarter:
    """Restarts the server under the test (``pg_ctl restart -m fast``), when that is possible."""

    def __init__(self, admin_dsn: str) -> None:
        self.reason = ""
        self.pg_ctl: Path | None = None
        self.data: Path | None = None
        setting = os.environ.get(RESTART_ENV, "")
        rows = query(
            admin_dsn,
            "SELECT current_setting('data_directory'), current_setting('server_version_num')::int",
        )
        self.data = Path(rows[0][0])
        major = rows[0][1] // 10000
        if setting == "0":
            self.reason = f"{RESTART_ENV}=0"
            return
        external = bool(os.environ.get("WFCTL_TEST_DSN"))
        if external and setting != "1" and os.environ.get("WFCTL_TEST_REQUIRE_SERVERS") != "1":
            self.reason = (
                f"WFCTL_TEST_DSN names a server this test may not restart (set {RESTART_ENV}=1 to allow it)"
            )
            return
        if not (self.data / "postmaster.pid").exists():
            self.reason = f"the server's data directory {self.data} is not on this machine"
            return
        if external:
            candidate = Path(os.environ.get("WFCTL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")) / "pg_ctl"
        else:
            from wfctl.embedded import bin_dir

            candidate = bin_dir() / "pg_ctl"
        if not candidate.exists():
            self.reason = f"no {candidate}"
            return
        version = subprocess.run([str(candidate), "--version"], capture_output=True, text=True).stdout
        if not version.split() or version.split()[-1].split(".")[0] != str(major):
            self.reason = f"{candidate} is not of the server's major version {major}"
            return
        self.pg_ctl = candidate

    @property
    def available(self) -> bool:
        return self.pg_ctl is not None

    def restart(self) -> None:
        assert self.pg_ctl is not None and self.data is not None
        owner = self.data.stat().st_uid
        identity: dict[str, Any] = {}
        if os.geteuid() == 0 and owner != 0:
            entry = pwd.getpwuid(owner)
            identity = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        log = self.data / "server.log"
        # the restarted postmaster inherits pg_ctl's stdout: a file, never a pipe
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.run(
                [str(self.pg_ctl), "-D", str(self.data), "-l", str(log), "-m", "fast", "-w", "-t", "60",
                 "restart"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd="/",
                timeout=120,
                start_new_session=True,
                **identity,
            )
            out.seek(0)
            assert proc.returncode == 0, f"pg_ctl restart failed: {out.read()[-2000:]}"


# -- worker processes -------------------------------------------------------------------------------


def clean_env(dsn: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
    env["WFCTL_DSN"] = dsn
    env.update(extra or {})
    return env


@dataclass
class WorkerProc:
    index: int
    proc: subprocess.Popen | None  # None: not started (the example had already failed)
    log: Path
    paused: bool = False
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# -- the machine ------------------------------------------------------------------------------------


@dataclass
class Env:
    dsn: str
    tmp: Path
    restarter: Restarter
    figures: collections.Counter = field(default_factory=collections.Counter)
    procs: list[subprocess.Popen] = field(default_factory=list)  # every worker, for the last resort


@dataclass
class Wf:
    steps: list[list[Any]]
    max_retries: int | None  # as submitted; None: the type's policy (or the column default)
    via: str


STEP = st.one_of(
    st.just(["ok", 0]),
    st.just(["ok", 0]),
    st.just(["ok", 0]),
    st.tuples(st.just("raise"), st.sampled_from([1, 2, 9])).map(list),
    st.tuples(st.just("exit"), st.sampled_from([1, 9])).map(list),
    st.tuples(st.just("base"), st.sampled_from([1, 9])).map(list),
    st.just(["gate", 0]),
    st.tuples(st.just("sleep"), st.sampled_from(["200ms", "500ms", "2s"])).map(list),
    st.just(["long", 0]),
)
SPEC = st.lists(STEP, min_size=1, max_size=4)
KEY = st.none() | st.sampled_from(["k0", "k1", "k2"])
MAX_RETRIES = st.none() | st.integers(0, 2)
VIA = st.sampled_from(["api", "api", "cli", "sql"])


class StatefulEngine(RuleBasedStateMachine):
    """Every check made during the run is recorded, not raised, and the teardown raises them
    all: a real system does not fail at the same rule twice, and a run whose number of rules
    changed between two replays is a "flaky strategy" to Hypothesis, not a failure to shrink.
    Preconditions read only the machine's own bookkeeping (which worker it killed, paused),
    never the processes or the database, for the same reason. Once a violation is recorded,
    the remaining rules only keep that bookkeeping (and the bundle) as they would have, and do
    nothing real: a failing example ends at once, which keeps shrinking affordable."""

    env: ClassVar[Env]
    workflows = Bundle("workflows")

    def __init__(self) -> None:
        super().__init__()
        env = self.env
        env.figures["examples"] += 1
        self.dsn = env.dsn
        self.dir = env.tmp / f"example-{env.figures['examples']}"
        self.dir.mkdir()
        self.gates = self.dir / "gates"
        self.gates.mkdir()
        self.effects_path = self.dir / "effects.log"
        self.model: dict[str, Wf] = {}
        self.keys: dict[str, str] = {}
        self.workers: list[WorkerProc] = []
        self.restarts = 0
        self.connection_losses = 0  # database restarts and terminated worker connections
        self.rules_run = 0
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.skipped_drain = False
        self.max_gap = 0.0
        self._reset_database()

    # -- plumbing ---------------------------------------------------------------------------

    def _reset_database(self) -> None:
        def reset() -> bool:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute("SET lock_timeout = '2s'")
                    conn.execute(RESET_SQL)
                return True
            except psycopg.errors.LockNotAvailable:
                return False

        wait_for(reset, timeout=30, what="TRUNCATE of the previous example's tables")

    def log(self, text: str) -> None:
        self.trace.append(f"{time.strftime('%H:%M:%S')} #{self.rules_run + 1} {text}")
        note(text)

    def expect(self, condition: object, message: str, where: str = "") -> bool:
        """A check made during the run: recorded when it fails, raised by the teardown."""
        if not condition:
            self.violations.append(f"{where or f'in rule #{self.rules_run + 1}'}: {message}")
        return bool(condition)

    def deferred(self, check, *args: Any, where: str = "") -> None:
        try:
            check(*args)
        except AssertionError as exc:
            self.violations.append(f"{where or f'after rule #{self.rules_run}'}: {exc}")

    def worker_env(self) -> dict[str, str]:
        extra = {"WFCTL_SF_LOG": str(self.effects_path), "WFCTL_SF_GATES": str(self.gates)}
        return clean_env(self.dsn, extra)

    def cli(self, *args: str, timeout: float = 60) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "wfctl", *args],
            cwd=APPS,
            env=self.worker_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.env.figures["cli_calls"] += 1
        return Result(proc.returncode, proc.stdout, proc.stderr)

    @property
    def skipping(self) -> bool:
        return bool(self.violations)

    def _start_worker(self, concurrency: int) -> WorkerProc:
        index = len(self.workers)
        log = self.dir / f"worker{index}.log"
        if self.skipping:
            worker = WorkerProc(index, None, log)
            self.workers.append(worker)
            return worker
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "wfctl", "worker",
                    "--app", "statefulflows",
                    "--concurrency", str(concurrency),
                    "--heartbeat", HEARTBEAT,
                    "--poll", POLL,
                    "--grace", "1s",
                    "--log-format", "plain",
                ],
                cwd=APPS,
                env=self.worker_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        worker = WorkerProc(index, proc, log)
        self.env.procs.append(proc)
        self.workers.append(worker)
        self.env.figures["worker_starts"] += 1
        return worker

    # the machine's own view (for preconditions): started and not killed by this test
    def started(self) -> list[WorkerProc]:
        return [w for w in self.workers if not w.killed]

    def unpaused(self) -> list[WorkerProc]:
        return [w for w in self.started() if not w.paused]

    def paused(self) -> list[WorkerProc]:
        return [w for w in self.started() if w.paused]

    def _signal(self, worker: WorkerProc, signum: int) -> None:
        if worker.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signum)

    def _submit(self, steps: list[list[Any]], key: str | None, max_retries: int | None, via: str) -> list:
        data = {"steps": steps}
        if self.skipping:
            if key is not None and key in self.keys:
                return [self.keys[key]]
            wid = f"skipped-{len(self.model)}"
            self.model[wid] = Wf(steps, max_retries, via)
            if key is not None:
                self.keys[key] = wid
            return [wid]
        if via == "api":
            wid = str(wfctl.submit(self.dsn, TYPE, data, key=key, max_retries=max_retries))
        elif via == "cli":
            args = ["submit", TYPE, json.dumps(data), "--force"]
            if key is not None:
                args += ["--key", key]
            if max_retries is not None:
                args += ["--max-retries", str(max_retries)]
            result = self.cli(*args)
            if not self.expect(result.exit_code == 0, f"wfctl {' '.join(args)}: {result.output}"):
                return []
            wid = result.stdout.strip()
        elif key is None and max_retries is None:  # the reference design's plain INSERT
            wid = str(
                query(
                    self.dsn,
                    "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s) RETURNING id",
                    (TYPE, json.dumps(data)),
                )[0][0]
            )
        else:
            wid = str(
                query(
                    self.dsn,
                    "SELECT wfctl_submit(%s, %s::jsonb, p_key => %s, p_max_retries => %s)",
                    (TYPE, json.dumps(data), key, max_retries),
                )[0][0]
            )
        if key is not None and key in self.keys:
            first = self.keys[key]
            self.log(f"submit {steps} key={key} via {via}: {wid} (the key's workflow is {first})")
            self.expect(wid == first, f"submit with the used key {key!r} returned {wid}, not {first}")
            count = query(self.dsn, "SELECT count(*) FROM workflows WHERE idempotency_key = %s", (key,))[0][0]
            self.expect(count == 1, f"{count} workflows with the key {key!r}")
            stored = query(self.dsn, "SELECT input_data FROM workflows WHERE id = %s", (first,))[0][0]
            self.expect(stored == {"steps": self.model[first].steps}, "a repeated key changed the input")
            self.env.figures["duplicate_keys"] += 1
            return [first]
        self.log(f"submit {steps} key={key} max_retries={max_retries} via {via}: {wid}")
        if not self.expect(wid not in self.model, f"submit returned the id {wid} of another workflow"):
            return []
        self.model[wid] = Wf(steps, max_retries, via)
        if key is not None:
            self.keys[key] = wid
        self.env.figures["workflows"] += 1
        return [wid]

    def _status(self, wid: str) -> str:
        return query(self.dsn, "SELECT status FROM workflows WHERE id = %s", (wid,))[0][0]

    # -- rules ------------------------------------------------------------------------------

    @initialize(
        target=workflows,
        specs=st.lists(st.tuples(SPEC, KEY, MAX_RETRIES, VIA), min_size=2, max_size=4),
        concurrencies=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2),
    )
    def begin(self, specs, concurrencies):
        for concurrency in concurrencies:
            self._start_worker(concurrency)
        self.log(f"started {len(concurrencies)} worker(s), concurrency {concurrencies}")
        return multiple(*[w for s, k, m, v in specs for w in self._submit(list(s), k, m, v)])

    @rule(target=workflows, steps=SPEC, key=KEY, max_retries=MAX_RETRIES, via=VIA)
    def submit(self, steps, key, max_retries, via):
        return multiple(*self._submit(steps, key, max_retries, via))

    @rule(target=workflows, steps=SPEC, max_retries=MAX_RETRIES)
    def submit_more(self, steps, max_retries):
        return multiple(*self._submit(steps, None, max_retries, "api"))

    @rule(wid=workflows)
    def cancel(self, wid):
        if not self.skipping:
            self._cancel(wid)

    def _cancel(self, wid: str) -> None:
        result = self.cli("cancel", wid)
        status = self._status(wid)
        self.log(f"cancel {wid}: exit {result.exit_code}, now {status}")
        if result.exit_code == 0:
            # nothing but a retry (this test) moves a workflow out of 'cancelled'
            self.expect(status == "cancelled", f"cancel {wid} said yes; the workflow is {status}")
            self.env.figures["cancels"] += 1
        else:
            self.expect(
                result.exit_code == 7 and "nothing to cancel" in result.stderr and status in TERMINAL,
                f"cancel {wid}: exit {result.exit_code} ({result.output.strip()}), status {status}",
            )

    @rule(pick=st.integers(0, 999))
    def cancel_active(self, pick):
        """Cancel a workflow that is running now (else one that is pending): the interesting
        cancels, which race with a worker that holds the run."""
        if self.skipping:
            return
        rows = query(
            self.dsn,
            "SELECT id::text, status FROM workflows WHERE status IN ('running', 'pending')"
            " ORDER BY status = 'running' DESC, id",
        )
        running = [w for w, status in rows if status == "running"]
        candidates = running or [w for w, _ in rows]
        if candidates:
            self._cancel(candidates[pick % len(candidates)])

    @rule(pick=st.integers(0, 999), from_step=st.none() | st.integers(1, 4))
    def cancel_then_retry(self, pick, from_step):
        """An operator restarting a run: cancel one that is running (else a sleeping one, else
        any pending one), then retry it at once, while its old execution may still be inside a
        step, or its sleep still ahead."""
        if self.skipping:
            return
        rows = query(
            self.dsn,
            "SELECT id::text, CASE WHEN status = 'running' THEN 0 WHEN run_at > now() THEN 1 ELSE 2 END"
            " FROM workflows WHERE status IN ('running', 'pending') ORDER BY 2, 1",
        )
        if not rows:
            return
        best = [w for w, rank in rows if rank == rows[0][1]]
        wid = best[pick % len(best)]
        self._cancel(wid)
        self._retry(wid, from_step)

    @rule(pick=st.integers(0, 999), from_step=st.none() | st.integers(1, 4))
    def retry(self, pick, from_step):
        if self.skipping:
            return
        # a failed or cancelled one when there is one; ``pick`` indexes the candidates, so that
        # what Hypothesis draws never depends on the state of the database (only what it means)
        finished = sorted(
            str(r[0])
            for r in query(self.dsn, "SELECT id FROM workflows WHERE status IN ('failed', 'cancelled')")
        )
        candidates = finished or sorted(self.model)
        self._retry(candidates[pick % len(candidates)], from_step)

    def _retry(self, wid: str, from_step: int | None) -> None:
        before = self._retry_count(wid)
        args = ["retry", wid] + ([] if from_step is None else ["--from-step", str(from_step)])
        result = self.cli(*args)
        self.log(f"retry {wid} from_step={from_step}: exit {result.exit_code}")
        if result.exit_code == 0:
            self.expect(self._retry_count(wid) == before + 1, f"retry {wid} said yes; the audit has no retry")
            if from_step is not None:
                # the checkpoints from step N on are gone: any row there now is the new run's
                left = query(
                    self.dsn,
                    "SELECT step_number, lease_epoch FROM workflow_steps WHERE workflow_id = %s"
                    " AND step_number >= %s AND lease_epoch < (SELECT max(new_epoch) FROM sf_audit_wf"
                    "  WHERE workflow_id = %s AND old_status IN ('failed', 'cancelled')"
                    "  AND new_status = 'pending')",
                    (wid, from_step, wid),
                )
                self.expect(not left, f"retry {wid} --from-step {from_step} kept checkpoints {left}")
            self.env.figures["retries"] += 1
        else:
            self.expect(
                result.exit_code == 7 and "only a failed or cancelled workflow" in result.stderr,
                f"retry {wid}: exit {result.exit_code} ({result.output.strip()})",
            )

    def _retry_count(self, wid: str) -> int:
        return query(
            self.dsn,
            "SELECT count(*) FROM sf_audit_wf WHERE workflow_id = %s"
            " AND old_status IN ('failed', 'cancelled') AND new_status = 'pending' AND new_attempt = 1",
            (wid,),
        )[0][0]

    @rule(stale=st.sampled_from(["1s", "2s"]))
    def recover(self, stale):
        if self.skipping:
            return
        result = self.cli("recover", "--stale", stale, "--json")
        if not self.expect(result.exit_code == 0, f"recover --stale {stale}: {result.output}"):
            return
        rows = json.loads(result.stdout)
        self.log(f"recover --stale {stale}: {[(r['id'], r['status'], r['attempt']) for r in rows]}")
        for row in rows:
            ok = row["status"] in ("pending", "failed") and row["id"] in self.model
            self.expect(ok, f"recovered {row}")
        self.env.figures["recovers"] += 1
        self.env.figures["requeued"] += sum(1 for r in rows if r["status"] == "pending")
        self.env.figures["abandoned"] += sum(1 for r in rows if r["status"] == "failed")

    @rule(pick=st.integers(0, 999))
    def release_gate(self, pick):
        if self.skipping:
            return
        gated = sorted(
            w for w, m in self.model.items() if any(k == "gate" for k, _ in m.steps)
            and not (self.gates / w).exists()
        )
        if not gated:
            return
        wid = gated[pick % len(gated)]
        (self.gates / wid).touch()
        self.log(f"released the gate of {wid}")

    @precondition(lambda self: self.started())
    @rule(index=st.integers(0, 9))
    def kill_worker(self, index):
        started = self.started()
        worker = started[index % len(started)]
        worker.killed = True
        if self.skipping:
            return
        self._signal(worker, signal.SIGKILL)
        if worker.proc is not None:
            worker.proc.wait(timeout=30)
        self.env.figures["kills"] += 1
        self.log(f"SIGKILL worker{worker.index}")

    @precondition(lambda self: self.unpaused())
    @rule(index=st.integers(0, 9))
    def pause_worker(self, index):
        unpaused = self.unpaused()
        worker = unpaused[index % len(unpaused)]
        worker.paused = True
        if self.skipping:
            return
        self._signal(worker, signal.SIGSTOP)
        self.env.figures["pauses"] += 1
        self.log(f"SIGSTOP worker{worker.index}")

    @precondition(lambda self: self.paused())
    @rule(index=st.integers(0, 9))
    def resume_worker(self, index):
        paused = self.paused()
        worker = paused[index % len(paused)]
        worker.paused = False
        if self.skipping:
            return
        self._signal(worker, signal.SIGCONT)
        self.log(f"SIGCONT worker{worker.index}")

    @precondition(lambda self: len(self.started()) < MAX_WORKERS)
    @rule(concurrency=st.sampled_from([1, 2, 3]))
    def start_worker(self, concurrency):
        worker = self._start_worker(concurrency)
        self.log(f"started worker{worker.index} (concurrency {concurrency})")

    @precondition(lambda self: self.env.restarter.available and self.restarts == 0)
    @rule()
    def restart_database(self):
        self.restarts += 1
        if self.skipping:
            return
        self.env.restarter.restart()
        self.connection_losses += 1
        self.env.figures["db_restarts"] += 1
        self.log("restarted the database server")

    @precondition(lambda self: self.unpaused())
    @rule()
    def drop_connections(self):
        if self.skipping:
            return
        rows = query(
            self.dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'wfctl worker' AND pid <> pg_backend_pid()",
        )
        self.env.figures["connections_dropped"] += len(rows)
        self.connection_losses += 1 if rows else 0
        self.log(f"terminated {len(rows)} worker connection(s)")

    @rule(seconds=st.sampled_from([0.2, 0.5, 1.0]))
    def wait(self, seconds):
        """Let the workers work: until nothing is runnable or running, at most ``seconds``."""
        if self.skipping:
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            busy = query(
                self.dsn,
                "SELECT count(*) FROM workflows WHERE status = 'running'"
                " OR (status = 'pending' AND run_at <= now())",
            )[0][0]
            if not busy:
                return
            time.sleep(0.05)

    @rule(stale=st.sampled_from(["1s", "2s"]))
    def compare_stuck_frozen(self, stale):
        """Invariant 5 through the CLI: freeze every worker (SIGSTOP) so nothing moves, then
        the reference query before, `recover --dry-run --json`, and the reference query after."""
        if self.skipping:
            return
        frozen = self.unpaused()
        for worker in frozen:
            self._signal(worker, signal.SIGSTOP)
        try:
            # a statement sent before the stop still runs to its commit: wait for it
            wait_for(
                lambda: query(
                    self.dsn,
                    "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'wfctl worker' AND state <> 'idle'",
                )[0][0],
                timeout=10,
                what="the frozen workers' statements to finish",
            )
            interval = parse_duration(stale, what="stale")
            ref_before, rec_before, _, _ = stuck_snapshot(self.dsn, interval)
            result = self.cli("recover", "--dry-run", "--stale", stale, "--json")
            ref_after, rec_after, ownerless_after, _ = stuck_snapshot(self.dsn, interval)
        finally:
            for worker in frozen:
                self._signal(worker, signal.SIGCONT)
        if not self.expect(result.exit_code == 0, f"recover --dry-run: {result.output}"):
            return
        rows = json.loads(result.stdout)
        listed = {r["id"] for r in rows}
        self.log(f"recover --dry-run --stale {stale} (all frozen): {sorted(listed)}")
        self.expect(all(r["dry_run"] for r in rows), f"dry run rows without dry_run: {rows}")
        # frozen, nothing moves but the clock: both sets only grow, so what the command saw lies
        # between the two looks, and the two queries agree at each look
        self.expect(
            ref_before <= listed,
            f"invariant 5: stuck by the reference query (--stale {stale}) but not listed by recover "
            f"--dry-run: {sorted(ref_before - listed)}",
        )
        self.expect(
            rec_before <= listed <= rec_after,
            f"invariant 5: recover --dry-run listed {sorted(listed)}; the same query before: "
            f"{sorted(rec_before)}, after: {sorted(rec_after)}",
        )
        self.expect(
            listed <= ref_after | ownerless_after,
            f"invariant 5: recover --dry-run --stale {stale} lists runs the reference query does not see "
            f"as stuck (and whose worker did not stop): {sorted(listed - ref_after - ownerless_after)}",
        )
        self.env.figures["stuck_compared"] += len(listed)

    # -- invariants after every rule ---------------------------------------------------------

    @invariant()
    def cheap_invariants(self):
        self.rules_run += 1
        if not self.model or self.skipping:
            return
        audit_wf = query(self.dsn, AUDIT_WF_SQL)
        before = len(self.violations)
        self.deferred(check_transitions, audit_wf)
        self.deferred(check_step_writes, self.dsn)
        self.deferred(check_releases, self.dsn, self.connection_losses)
        self.deferred(check_executions, read_effects(self.effects_path), audit_wf)
        ref, rec, ownerless, running = stuck_snapshot(self.dsn, timedelta(seconds=1))
        where = f"after rule #{self.rules_run}"
        self.expect(
            ref <= rec, f"invariant 5: stuck per the reference query (1s), not recover: {ref - rec}", where
        )
        self.expect(
            rec <= ref | ownerless,
            f"invariant 5: stuck per recover (1s), not the reference query: "
            f"{ {w: running.get(w) for w in rec - ref - ownerless} }",
            where,
        )
        for _epoch, updated, _owner, beat, _stopped, _missing in running.values():
            if beat is not None:
                self.max_gap = max(self.max_gap, (updated - beat).total_seconds())
        if len(self.violations) > before:
            # one violation tends to cause others: keep the first rule's, and stop looking
            self.violations = self.violations[: before + 3]

    # -- the end ------------------------------------------------------------------------------

    def teardown(self):
        failing = sys.exc_info()[1] is not None
        try:
            if not failing:
                self.skipped_drain = bool(self.violations)
                if not self.skipped_drain:
                    self._drain()
                self._final_checks()
                if self.violations:
                    self.env.figures["failed_examples"] += 1
                    raise AssertionError(self._report())
        finally:
            for worker in self.workers:
                if worker.alive:
                    self._signal(worker, signal.SIGKILL)
                    worker.proc.wait(timeout=30)
            self.env.figures["max_updated_ahead_of_heartbeat_ms"] = max(
                self.env.figures["max_updated_ahead_of_heartbeat_ms"], int(self.max_gap * 1000)
            )

    def _report(self) -> str:
        lines = ["invariant violations (the first ones found):", *[f"  {v}" for v in self.violations[:5]]]
        lines += ["what the test did:", *[f"  {t}" for t in self.trace[-60:]], f"files: {self.dir}"]
        return "\n".join(lines)

    def _drain(self):
        (self.gates / "ALL").touch()
        for worker in self.workers:
            if worker.paused:
                self._signal(worker, signal.SIGCONT)
                worker.paused = False
        while len([w for w in self.workers if w.alive]) < 2:
            self._start_worker(2)
        if not self.model:
            return
        last_recover = 0.0
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            left = query(
                self.dsn,
                "SELECT id::text, status, attempt, max_retries, lease_epoch, current_step, lease_owner,"
                " round(extract(epoch FROM run_at - now())::numeric, 2) FROM workflows"
                " WHERE status NOT IN ('completed', 'failed', 'cancelled')",
            )
            if not left:
                return
            if time.monotonic() > deadline:
                effects = read_effects(self.effects_path)
                detail = "\n".join(
                    f"  {row} executions={collections.Counter(e.step for e in effects if e.wid == row[0])}"
                    for row in left
                )
                self.violations.append(
                    f"invariant 1: {len(left)} workflow(s) not terminal {DRAIN_TIMEOUT}s after every gate "
                    f"was released and every worker continued (id, status, attempt, max_retries, epoch, "
                    f"step, owner, run_at - now):\n{detail}"
                )
                return
            if time.monotonic() - last_recover >= 1.0:
                result = self.cli("recover", "--stale", "1s")
                if not self.expect(result.exit_code == 0, f"recover: {result.output}", "while draining"):
                    return
                last_recover = time.monotonic()
            time.sleep(0.1)

    def _final_checks(self):
        figures = self.env.figures
        effects = read_effects(self.effects_path)
        figures["executions"] += len(effects)
        figures["duplicate_executions"] += len(effects) - len({(e.wid, e.step) for e in effects})
        if not self.model or self.skipped_drain:
            return
        where = "after the drain"
        for check in final_check_list(self.dsn, effects, self.model):
            self.deferred(check, where=where)
        self.deferred(check_releases, self.dsn, self.connection_losses, where=where)
        result = self.cli("recover", "--dry-run", "--stale", "1s", "--json")
        self.expect(
            result.exit_code == 0 and json.loads(result.stdout or "null") == [],
            f"invariant 5: recover --dry-run after the drain: {result.output}",
            where,
        )
        stuck = query(self.dsn, REFERENCE_STUCK, {"stale": timedelta(0)})
        self.expect(stuck == [], f"invariant 5: the reference query after the drain: {stuck}", where)
        for status, count in query(self.dsn, "SELECT status, count(*) FROM workflows GROUP BY 1"):
            figures[f"ended_{status}"] += count


# -- the checks (also used by tests/test_stateful_regressions.py) ---------------------------------


def max_retries_of(value: int | None) -> int:
    return POLICY if value is None else value


def check_transitions(audit_wf: list[tuple]) -> None:
    """Invariant 4 over the whole history, and the legal moves of a workflow."""
    last_epoch: dict[str, int] = {}
    for wid, seq, _txid, op, old, new, old_epoch, new_epoch, _old_attempt, attempt, max_retries in audit_wf:
        limit = max_retries_of(max_retries) + 1
        assert attempt <= limit, (
            f"invariant 4: workflow {wid} reached attempt {attempt} with max_retries {max_retries} "
            f"(audit seq {seq}, {old} -> {new})"
        )
        if op == "UPDATE":
            assert old != "completed" or new == "completed", (
                f"workflow {wid} left 'completed' for {new!r} (audit seq {seq})"
            )
            if old in ("failed", "cancelled") and new != old:
                assert new == "pending" and attempt == 1, (
                    f"workflow {wid} left {old!r} for {new!r} at attempt {attempt}, not by a retry "
                    f"(seq {seq})"
                )
            assert new_epoch >= old_epoch, f"workflow {wid}: epoch went down {old_epoch} -> {new_epoch}"
        assert new_epoch >= last_epoch.get(wid, 0), f"workflow {wid}: epoch went down (seq {seq})"
        last_epoch[wid] = new_epoch


def check_releases(dsn: str, connection_losses: int) -> None:
    """Invariant 2, the uncounted part: a running workflow goes back to pending without an
    attempt counted and runnable at once (a hand-back: ``run_at = now()``, unlike a park)
    only when its claim's reply may have been lost, so once per connection loss at most (this
    test sends no SIGTERM, the other cause). A run that ends without a final write, or a
    replayed sleep that does not park, is handed back like that over and over."""
    rows = query(
        dsn,
        "SELECT workflow_id::text, count(*), max(new_epoch) FROM sf_audit_wf WHERE op = 'UPDATE'"
        " AND old_status = 'running' AND new_status = 'pending' AND new_attempt = old_attempt"
        " AND run_at = tx_now GROUP BY 1 HAVING count(*) > %s",
        (connection_losses,),
    )
    assert not rows, (
        f"invariant 2: runs handed back without a counted attempt more often than the {connection_losses} "
        f"connection loss(es) of this run explain ((id, hand-backs, last epoch)): {rows}"
    )


def check_step_writes(dsn: str) -> None:
    """Invariant 3: a step row is only written under the epoch that holds the lease."""
    bad = query(
        dsn,
        "SELECT seq, workflow_id, step_number, op, status, row_epoch, wf_status, wf_epoch FROM sf_audit_steps"
        " WHERE op <> 'DELETE' AND row_epoch IS DISTINCT FROM wf_epoch ORDER BY seq",
    )
    assert not bad, (
        "invariant 3: step rows written by an epoch that did not hold the lease at that moment "
        f"(seq, workflow, step, op, status, row epoch, workflow status, workflow epoch): {bad}"
    )


def generations(audit_wf: list[tuple]) -> dict[str, list[int]]:
    """Per workflow, the epochs its `wfctl retry`s gave it, ascending."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for wid, _seq, _txid, op, old, new, _oe, new_epoch, _oa, attempt, _mr in audit_wf:
        if op == "UPDATE" and old in ("failed", "cancelled") and new == "pending" and attempt == 1:
            out[wid].append(new_epoch)
    for epochs in out.values():
        epochs.sort()
    return out


def check_executions(effects: list[Effect], audit_wf: list[tuple]) -> None:
    """Invariant 2: at most one execution of a step per epoch, and per (generation, attempt)."""
    unknown = [e for e in effects if e.epoch is None]
    assert not unknown, (
        "the effects log has no lease epochs: tests/apps/statefulflows.py epoch_of() no longer finds the "
        "epoch behind the context; update it"
    )
    per_epoch = collections.Counter((e.wid, e.step, e.epoch) for e in effects)
    twice = {k: n for k, n in per_epoch.items() if n > 1}
    assert not twice, (
        f"invariant 2: a step ran more than once under one lease epoch (id, step, epoch): {twice}"
    )
    gens = generations(audit_wf)
    per_attempt: dict[tuple, list[int]] = collections.defaultdict(list)
    for e in effects:
        assert e.epoch is not None
        generation = bisect.bisect_right(gens.get(e.wid, []), e.epoch)
        per_attempt[(e.wid, e.step, generation, e.attempt)].append(e.epoch)
    again = {k: v for k, v in per_attempt.items() if len(v) > 1}
    assert not again, (
        "invariant 2: a step ran again without a counted attempt or a retry in between "
        f"((id, step, retry generation, attempt): epochs it ran under): {again}"
    )


AUDIT_WF_SQL = (
    "SELECT workflow_id::text, seq, txid, op, old_status, new_status, old_epoch, new_epoch,"
    " old_attempt, new_attempt, max_retries FROM sf_audit_wf ORDER BY seq"
)


def final_checks(dsn: str, effects: list[Effect], model: dict[str, Wf]) -> None:
    """Every check after the drain; raises the first violation."""
    for check in final_check_list(dsn, effects, model):
        check()


def final_check_list(dsn: str, effects: list[Effect], model: dict[str, Wf]) -> list:
    """The checks after the drain, one callable each (the machine reports each one's failure)."""
    workflows = {
        str(r[0]): r[1:]
        for r in query(
            dsn,
            "SELECT id, status, attempt, max_retries, lease_epoch, current_step, output_data, error_message"
            " FROM workflows",
        )
    }
    audit_wf = query(dsn, AUDIT_WF_SQL)
    audit_steps = query(
        dsn,
        "SELECT workflow_id::text, step_number, seq, txid, op, status, row_epoch FROM sf_audit_steps"
        " ORDER BY seq",
    )
    steps = query(
        dsn,
        "SELECT workflow_id::text, step_number, step_name, status, output_data, lease_epoch, attempt"
        " FROM workflow_steps ORDER BY 1, 2",
    )
    ran: dict[tuple[str, int], list[Effect]] = collections.defaultdict(list)
    for e in effects:
        ran[(e.wid, e.step)].append(e)

    def terminal() -> None:
        assert set(workflows) == set(model), "workflows appeared or vanished"
        not_done = {w: r[0] for w, r in workflows.items() if r[0] not in TERMINAL}
        assert not not_done, f"invariant 1: not terminal: {not_done}"

    def checkpointed_steps_never_rerun() -> None:
        # invariant 2: a checkpointed step never runs again under a later epoch, unless a
        # `retry --from-step` deleted the checkpoint first (the retry's epoch comes after it)
        retry_epoch_by_txid = {row[2]: row[7] for row in audit_wf if row[3] == "UPDATE"}
        by_step: dict[tuple[str, int], list[tuple]] = collections.defaultdict(list)
        for row in audit_steps:
            by_step[(row[0], row[1])].append(row)
        for key, history in by_step.items():
            for i, (_w, _n, seq, _txid, op, status, epoch) in enumerate(history):
                if op == "DELETE" or status != "completed":
                    continue
                until = None
                for later in history[i + 1 :]:
                    if later[4] == "DELETE":
                        until = retry_epoch_by_txid.get(later[3])
                        assert until is not None, f"step row {key} deleted outside a retry (seq {later[2]})"
                        break
                rerun = [e for e in ran[key] if e.epoch > epoch and (until is None or e.epoch < until)]
                assert not rerun, (
                    f"invariant 2: step {key} was checkpointed under epoch {epoch} (audit seq {seq}) and "
                    f"ran again under {[e.epoch for e in rerun]} before any retry --from-step deleted it"
                )

    def checkpoints_name_their_execution() -> None:
        # invariant 3: a step row's epoch is one the workflow had, and a checkpoint is the output
        # of an execution under that very epoch and attempt
        epochs_had: dict[str, set[int]] = collections.defaultdict(set)
        for row in audit_wf:
            epochs_had[row[0]].add(row[7])
        for wid, number, _name, status, output, epoch, attempt in steps:
            assert epoch in epochs_had[wid] and epoch <= workflows[wid][3], (
                f"invariant 3: step row {wid} #{number} carries epoch {epoch}, which the workflow never "
                f"had ({sorted(epochs_had[wid])})"
            )
            kind = model[wid].steps[number - 1][0] if number <= len(model[wid].steps) else "?"
            if status == "completed" and kind != "sleep":
                producers = [(e.epoch, e.attempt) for e in ran[(wid, number)] if e.nonce == output]
                assert producers == [(epoch, attempt)], (
                    f"invariant 3: checkpoint {wid} #{number} = {output!r}, written under epoch {epoch} "
                    f"attempt {attempt}, is the output of the execution(s) under {producers}"
                )

    def completed_runs_are_whole() -> None:
        # invariant 3: a completed workflow has every step checkpointed and returned them
        rows_of: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
        for wid, number, name, status, output, epoch, attempt in steps:
            rows_of[wid][number] = (name, status, output, epoch, attempt)
        for wid, (status, _attempt, _mr, _epoch, current, output, _error) in workflows.items():
            if status != "completed":
                continue
            spec, rows = model[wid].steps, rows_of[wid]
            assert sorted(rows) == list(range(1, len(spec) + 1)) and current == len(spec), (
                f"invariant 3: {wid} completed with steps {sorted(rows)} (current_step {current}) "
                f"of {len(spec)}"
            )
            assert all(r[1] == "completed" for r in rows.values()), f"{wid} completed with a failed step row"
            expected = [None if spec[n - 1][0] == "sleep" else rows[n][2] for n in range(1, len(spec) + 1)]
            assert output == {"outputs": expected}, (
                f"invariant 3: {wid} returned {output}, its checkpoints say {expected}"
            )

    def failed_runs_used_their_attempts() -> None:
        for wid, (status, attempt, max_retries, _epoch, _current, _output, error) in workflows.items():
            if status == "failed":
                assert attempt == max_retries_of(max_retries) + 1, (
                    f"invariant 4: {wid} failed at attempt {attempt} of {max_retries_of(max_retries) + 1}: "
                    f"{error}"
                )

    return [
        lambda: check_transitions(audit_wf),
        lambda: check_step_writes(dsn),
        lambda: check_executions(effects, audit_wf),
        checkpointed_steps_never_rerun,
        checkpoints_name_their_execution,
        completed_runs_are_whole,
        failed_runs_used_their_attempts,
        terminal,
    ]


# -- the test -------------------------------------------------------------------------------------


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def install_audit(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(AUDIT_SQL)


@pytest.mark.slow
def test_stateful_interleavings(dsn, pg_server, tmp_path):
    install_audit(dsn)
    restarter = Restarter(pg_server.admin_dsn)
    env = Env(dsn, tmp_path, restarter)
    minutes = float(os.environ.get(MINUTES_ENV) or 0)
    long_run = minutes > 0
    examples = _int_env(EXAMPLES_ENV, 10 if long_run else 4)
    steps = _int_env(STEPS_ENV, 30 if long_run else 20)
    shrink = long_run or os.environ.get(SHRINK_ENV) == "1"
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    StatefulEngine.env = env
    started = time.monotonic()
    batches = 0
    try:
        while True:
            run_state_machine_as_test(StatefulEngine, settings=config)
            batches += 1
            if not long_run or time.monotonic() - started > minutes * 60:
                break
    finally:
        figures = dict(env.figures)
        figures.update(
            batches=batches,
            seconds=round(time.monotonic() - started, 1),
            db_restart="on" if restarter.available else f"off ({restarter.reason})",
        )
        print("stateful figures:", json.dumps(figures, indent=1, sort_keys=True))
        for proc in env.procs:  # an interrupted run: no worker outlives the test
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)
    assert env.figures["examples"] >= examples
    assert env.figures["workflows"] > 0 and env.figures["executions"] > 0
