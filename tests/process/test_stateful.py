"""The stateful test of the engine (with coordination, flow control and
schedules): random interleavings of everything that can happen to a workflow, against real
worker processes, the real CLI and a real PostgreSQL.

A Hypothesis ``RuleBasedStateMachine`` (``StatefulEngine``) drives worker processes
(``python -m wfctl worker --app statefulflows`` from tests/apps, heartbeat 200ms, poll 100ms)
and the CLI (``wfctl submit / cancel / retry [--from-step N] / recover --stale X [--dry-run]
--json`` as subprocesses). The rules, in random order:

- ``begin`` (once, first): 1-2 workers (concurrency 1-3) and 2-4 workflows; in half of the
  examples every worker of the example polls only every 120s (longer than the drain), so a
  run that waits for the poll instead of a NOTIFY or a timer is never drained (invariant 1
  then says that every wake-up and submit is claimed within a bound independent of --poll);
- ``submit`` / ``submit_more``: an ``sf-flow`` workflow from Python, the CLI, ``wfctl_submit()``,
  a plain INSERT, or ``wfctl.submit`` inside an application transaction that began 0.3s
  earlier (its ``now()`` older than the claims meanwhile); with or without an idempotency key
  (three keys, so they repeat); ``max_retries`` unset or 0-2; now and then a deadline
  (``timeout`` 1s or 2s on submit, so it passes while the run runs, is parked or waits to be
  claimed). Its 1-4 steps each succeed,
  raise, ``sys.exit``, raise another ``BaseException``, sleep durably (200ms, 500ms, 2s), hang on
  a gate file of their own, have a name the database would refuse, fail and be undone (a saga:
  the workflow catches the ``StepError`` and runs an undo step), have tries of their own
  (``@wfctl.step`` options: failing once or past their attempt's three tries with a short
  backoff, failing once with a backoff that parks the run, or outliving a 300ms timeout once),
  or coordinate: ``ctx.recv``
  on topic t0 or t1 (without a timeout, or 300ms, 1s), ``ctx.set_event("progress", n)``, or
  ``ctx.start_child`` of 1-3 short children (which succeed, fail once or for good, sleep, wait
  300ms for a message or publish an event; one step each, or all in one ``ctx.start_children``
  step) and ``ctx.wait`` for them, catching ``ChildFailed`` or not (tests/apps/statefulflows.py);
- ``submit_coordination``: a run with at least one of those coordination steps;
- every submit is of ``sf-flow`` (no limit in code) or, one time in three, ``sf-capped`` (the
  same workflow under a concurrency limit of 2 declared in code), with a concurrency key (c0, c1,
  c2) now and then; ``submit_crowd``: 2-6 short runs of one of them in one transaction (ok,
  raise once, sleep 200ms, a gate), keys and priorities (-5, 0, 5) now and then: work that
  competes for the limits, claimed by priority across limited and unlimited types (invariant
  15);
- ``set_limit``: ``wfctl limit TYPE --concurrency N (0 pauses, 1-3) --per-key K (1-2) --rate R
  (2/s, 5/s, 20/s) --json``, any of them (none: the command shows the type's limits), or the
  library's ``limits.set_limits``; ``clear_limit``: ``wfctl limit TYPE --clear`` or
  ``limits.clear`` (the code's limit applies again). What they report in force is the model's
  (the operator's value, else the code's); a type nothing knows yet is refused (one line, exit
  2), storing nothing;
- ``schedule_add``: ``wfctl schedule add s0|s1 TYPE CRON --input '{"steps": ...}' [--tz Z]
  [--backfill] --json`` or ``schedules.add``: every 1, 2 or 3 seconds (six fields, seconds
  first) or every minute (five), in UTC, Europe/Berlin or Asia/Kolkata, each run 0-2 short
  items; a new schedule or an edit of one (its pause kept); ``schedule_control``: ``wfctl
  schedule pause|resume|trigger|delete`` (or the library's), of a schedule or of a name none
  has (exit 6); ``tick``: ``wfctl tick --json`` or ``schedules.fire_due``, now and then right at
  the start of a second, while the workers' duties fire the same ticks;
- ``send``: a message ``{"n": k}`` (k unique) to a receiver (one time in ten an unknown id) via
  ``wfctl.send``, ``wfctl_send()``, ``wfctl.send`` in a transaction that commits 30ms later or
  rolls back, or that began 0.3s before it, or ``wfctl send --json``; with or without a key
  (two, so they repeat);
- ``send_to_waiting``: the same, on the topic a run is parked on now (else to a running
  receiver): the wake-up path, racing the run's own look for a message and its park;
- ``await_result``: ``wfctl.result`` or ``wfctl wait --timeout`` (0s or 300ms) of any run:
  its output when it completed, its failure or cancel as such (exit 11, 12), a timeout (13) only
  while it had not finished when the wait began;
- ``read_event``: ``wfctl.get_event`` or ``wfctl event`` (waiting 300ms or not) of a run that
  publishes one: a value the run set, or nothing yet;
- ``cancel`` (any workflow), ``cancel_active`` (a running one by preference), ``cancel_child``
  (an unfinished child, a running one by preference), ``retry`` (a failed or cancelled one by
  preference; with and without ``--from-step``), ``cancel_then_retry`` (a running or sleeping
  one, cancelled and retried at once, while its old execution may still be inside a step or its
  sleep still ahead);
- ``recover --stale 1s|2s`` (as cron would); ``release_gate`` of one workflow;
- ``prune_rolled_back``: ``control.prune`` of every finished run (``--older-than 0s``; all
  finished statuses, completed only, or failed and cancelled) in a transaction of its own, the
  tables looked at before and after, then rolled back (the model keeps every run to check);
- ``kill_worker`` (SIGKILL), ``pause_worker`` (SIGSTOP), ``resume_worker`` (SIGCONT),
  ``start_worker`` (up to 3 live);
- ``deploy_patch`` (once): every worker stopped (SIGTERM; a frozen one killed) and 1-2 new ones
  started on code that put ``if ctx.patched("sf-patch"): <a step>`` in front of each run's first
  ``recv`` or ``sleep`` item: runs parked in that wait, or past it, keep to the old path
  (invariant 16), the others take the patch (``patched_spec``);
- ``pause_in_statement``: a worker stopped in the middle of its claim, its heartbeat or its
  flush: the test holds the worker's ``workers`` row or a run it holds, stops the worker once
  one of its statements waits on that lock, lets the statement commit, keeps the worker stopped
  until its runs were taken over (and 2s more), then continues it;
- ``restart_database`` (once per example, where possible: see below) and ``drop_connections``
  (``pg_terminate_backend`` of every worker connection);
- ``wait`` (until nothing is runnable or running, at most 0.2-1s);
- ``compare_stuck_frozen``: SIGSTOP every worker, then the reference stuck query, ``recover
  --dry-run --stale X --json`` and the reference query again, then SIGCONT.

Before the drain, the limits set with ``wfctl limit`` are cleared (the code's stay), as an
operator would; then, once the drain has live workers, every active schedule that ticks every
few seconds must fire a tick that falls after that moment within 15s (no schedule is left
stuck), and every schedule is deleted; flow control and schedules are checked once more after
the drain, where every run a schedule submitted counts as a workflow like the others.

Children are never retried by the test (their parent's join recorded how they ended), but they
are cancelled (``cancel_active``, or with their parent) and recovered like any run.

Each step execution appends ``<id> <step> <kind> <attempt> <epoch> <nonce> <time> <pid>`` to
an effects log and returns its nonce, which becomes the checkpoint: a stored checkpoint names
the execution that produced it. The epoch is read from the worker's execution object behind
the context (statefulflows.epoch_of: not part of the workflow API; the test says so if it
disappears). The test also installs, in its own database, an audit: two trigger-fed tables
(sf_audit_*) recording every change of a workflow's status, epoch, attempt or max_retries
(with its run_at, its deadline and the transaction's now()), and every write or delete of a
step row (with its name) together with the workflow's status and epoch *as the writing
statement sees them*; and, for flow control and schedules, three more: every claim with the leases it left
(sf_claims), every change of a type's limits (sf_limit_changes) and every change of a schedule
(sf_schedule_changes), for invariants 8 and 9.

Invariants, after every rule (cheap: one look at the tables, the audit and the log):

2. a step function runs at most once per lease epoch, and at most once per (retry generation,
   attempt): it runs again only in an attempt that counts (a failed step, a recovered run) or
   after ``wfctl retry`` (the generation is the number of retries before its epoch); a step with
   tries of its own (``@wfctl.step(retries=r)``) runs at most r + 1 times in both, across the
   executions of one attempt (a parked backoff goes on counting), and a completed checkpoint
   counts the tries of its attempt; and a
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
   run's own updated_at to be stale: tests/db/test_correctness.py keeps that case.)
6. coordination, in one snapshot (``check_coordination``, with invariant 13; the audit also records each step
   row's name): every recv step write that took a message names one of the run's messages on
   that topic and returned its payload; no message is taken by a step write while an earlier
   one still stands (across epochs; a retry --from-step that deletes the recv step gives its
   message back); a message is consumed exactly when a standing step write took it, with that
   write's step and epoch; per run and topic the consumed messages are the oldest (no consumed
   message follows an unconsumed one; consumed in send order); a recv that timed out left no
   message waiting that was sent a second before it gave up. Each start_child step write
   names a child of that run, no child is named by two, and every child is named by one (no
   orphan from a zombie epoch, no second child from a replay). An event's value is the one its
   latest set_event step write set. No lost wake-up: a run parked on children counts exactly
   its unfinished children (``wait_remaining``) and is runnable once none is left; a run parked
   on a topic is runnable while a message waits there;
7. at each send: the message stored is the one sent (id, workflow, topic, payload, key); a
   resend with a used key returns the first message's id and stores nothing; a send refused
   (an unknown id, a finished run) or rolled back stores nothing, and a refused one says so in
   one line with its exit code through the CLI. An event read is a value the run set.
8. flow control (``check_limits``), over every claim so far: no claim leaves more runs of a
   type holding a lease than the concurrency limit in force (a paused type: no claim at all),
   nor more runs of a key than the per-key limit, and the starts between two claims under one
   rate setting stay within the rate and its burst. The audit (``sf_claims``, a statement
   trigger with transition tables) counts, after every claim, the type's and the key's leases
   in a fresh snapshot while the claim still holds the limit's row lock, and ``sf_limit_changes``
   records each change of a type's limits, also under that lock: a claim obeys the last change
   before it. A lowered limit does not stop the runs already leased; a claim after it takes
   nothing while they hold it, so the count after any claim that took a run is the one to judge.
   A claim whose statement began before the commit of a change that made an unlimited type
   limited may not see it (its snapshot is older: the limit applies from the next claim round),
   and is not judged.
9. schedules (``check_schedules``), over every schedule's history in the order of its row lock
   (a firing, an add or edit, a pause, a resume and a delete all hold it; the audit,
   ``sf_schedule_changes`` and the runs' rows in ``sf_audit_wf``, takes its times under it):
   no tick gives two runs, and a run's "scheduled_at" is its tick; a run is fired only while its
   schedule exists and is not paused, never before its tick, only for ticks of the expression
   in force (by the test's own arithmetic, not cronsim's) and never for a tick before the
   schedule's next one; an add, an edit and a resume set the next tick to the first after their
   now() (none fires at once); each firing fires the latest due tick, or with backfill every
   due tick, and moves the next tick to the first after its now(). A trigger's run comes while
   the schedule exists (paused or not). A run ``wfctl tick`` reports is stored under its tick's
   key.
10. no worker logs that the database refused one of its statements, other than by losing the
   connection (``refused_statements``): an error in the engine's SQL that only some limits
   trigger leaves runs unclaimed while they are set, and nothing else would notice.
11. (``compare_stuck_frozen``) once every worker is frozen, their sessions fall idle within 10s
   (a session frozen right after its BEGIN, with no lock and no snapshot, counts as idle):
   a worker frozen inside a transaction of several statements (firing schedules: the due rows
   locked, the runs inserted, not yet advanced) would keep its row locks from every other
   worker until it runs again, and the schedules it locked would not fire.
12. no step starts more than 1.5s after its lease ended (the run reached a final state, was
   requeued or parked, or another claim took it under a newer epoch: the audit's time of that
   change), unless its worker was stopped by ``pause_worker`` and continued at most 0.5s before
   the step began: a pause between the lease check and the step, the one gap the Guarantees
   leave open. A stop inside a statement (``pause_in_statement``) excuses nothing.
13. (``check_cancelled_trees``) a cancel takes every unfinished descendant with it: each child
   of a run that changed to ``cancelled``, written before that change (even by a fan-out not
   yet committed, which the cancel waited for), was finished by then or cancelled in the same
   transaction.
14. (``prune_rolled_back``) a prune removes nothing a run that stays may need: no run that was
   unfinished, no child whose parent stays, no message or checkpoint of a run that stays, no
   live worker's row.
15. (``check_claimed_by_priority``, after the drain) a claim never passes over a higher-priority
   runnable run that no limit holds back: of a crowd submitted in one transaction, of a type
   no limit held (none in code, none set since), no run was first claimed by a transaction that
   ended before the one that first claimed a run of higher priority began (that one held it
   locked, the only reason to skip it). Not judged in an example that lost a connection (a
   rolled-back claim held its runs).
16. (``check_parks``) a parked wait is history: every step row written at the step where a run
   stands parked (by another transaction, not cleared since) is that wait's own step (its
   kind and topic), whatever code the worker runs; and a run took the deploy's patch only in
   front of its first wait item (``patched_spec``).

After the run (teardown: every gate released, every worker continued, at least two live
workers, ``wfctl recover --stale 1s`` every second, as cron would, and a message to every run
parked on a topic where none waits, as the outside world would, until drained):

1. every workflow is terminal within 45s (completed, failed or cancelled; every sleep is at
   most 2s, so a parked run has woken and finished by then), children included;
2. also: no step whose completed checkpoint (or handled failure: a saga's) was written under
   epoch e ran again under a later epoch granted before a ``retry --from-step`` deleted it;
3. also: every step row's epoch is one the workflow had, every completed checkpoint is the
   nonce of an execution logged under the same epoch and attempt, and every handled failure
   was raised by an execution under them; a completed workflow has all its steps checkpointed
   (a saga's failure ``handled``, the rest ``completed``), ``current_step`` at its last, and
   returned exactly their outputs;
   A completed run returned the payloads its recv steps took (None for a timeout), its event
   counters, and per children item its children's outputs (or the first failed child, caught),
   which are what those children (its start_child steps' ids, running the specs it gave) ended
   with; its event is its last counter;
4. also: a ``failed`` workflow used all its attempts (``attempt == max_retries + 1``), unless it
   timed out, failed on an uncaught ``ChildFailed`` or a ``PermanentError`` (a child's);
5. also: ``recover --dry-run --json`` and the reference query both list nothing;
6. also: every invariant 6, 8 and 9 once more;
7. deadlines: a run with a deadline (never retried: a retry removes it) that ended more than
   0.5s after it ended ``failed`` with its deadline's error (``timed out after 1s``, or its
   parent's for a child), or ``cancelled``, or was ended by the execution that held it since
   before the deadline (the end of a run is not a step boundary); none timed out early; and no
   step function began more than 0.5s past the deadline, unless its worker was frozen (SIGSTOP)
   between that execution's claim and the step (a freeze puts the worker's clock behind);
8. no run completes past its deadline: a completed run's ``finished_at`` is at most its
   ``deadline_at`` (plus the same 0.5s): the database refuses a completion after it.

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

e.g. ``WFCTL_STATEFUL_MINUTES=30 pytest -s -p no:cacheprovider tests/process/test_stateful.py``; the
figures (examples, workflows, executions, kills, pauses, restarts, recovers, ...) are printed
at the end (``-s``, or ``-rA``). Counterexamples found are kept as deterministic tests in
tests/process/test_stateful_regressions.py.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import itertools
import json
import math
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from helpers import APPS, REFERENCE_SQL, Result, freeze, wait_for
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
from support.stateful_audit import (
    check_cancelled_trees,
    install_audit,
)

import wfctl
from wfctl import control, cron, limits, recovery, schedules
from wfctl.context import PATCH_PREFIX, SLEEP_STEP, WAIT_STEP
from wfctl.durations import parse_duration

# The engine's promises here hold in both table layouts: each test runs in each.
pytestmark = pytest.mark.layouts

TYPE = "sf-flow"
CAPPED = "sf-capped"  # the same workflow under a concurrency limit declared in code
CAPPED_CONCURRENCY = 2  # tests/apps/statefulflows.py CAPPED_CONCURRENCY
CODE_LIMITS: dict[str, dict[str, Any]] = {TYPE: {}, CAPPED: {"concurrency": CAPPED_CONCURRENCY}}
POLICY = 2  # the types' max_retries (tests/apps/statefulflows.py POLICY_MAX_RETRIES)
# the tries a step of each kind gets in one attempt (tests/apps/statefulflows.py STEP_TRIES)
STEP_TRIES = {"flaky": 3, "parked": 2, "slowtry": 2}
TERMINAL = ("completed", "failed", "cancelled")
HEARTBEAT = "200ms"
POLL = "100ms"
SLOW_POLL = "120s"  # longer than the drain: a run that waits for the poll is never drained
PATCH_ENV = "WFCTL_SF_PATCHED"  # tests/apps/statefulflows.py: the deploy's code
PATCH_MARKER = PATCH_PREFIX + "sf-patch"  # its ctx.patched() marker's step name
PATCH_BEFORE = ("recv", "sleep")  # the patch goes in front of the first of these items
MAX_WORKERS = 3
DRAIN_TIMEOUT = 45.0
# what a refused statement may say when the server went away under it (a restart)
CONNECTION_TROUBLE = ("shutting down", "starting up", "terminating connection", "connection", "recovery mode")
FROZEN_SETTLE = 10.0  # seconds for the statements of frozen workers to finish
SCHEDULE_LIVENESS = 15.0  # seconds for a schedule to fire again once the drain has live workers

EXAMPLES_ENV = "WFCTL_STATEFUL_EXAMPLES"
STEPS_ENV = "WFCTL_STATEFUL_STEPS"
MINUTES_ENV = "WFCTL_STATEFUL_MINUTES"
SHRINK_ENV = "WFCTL_STATEFUL_SHRINK"
RESTART_ENV = "WFCTL_STATEFUL_RESTART"


RESET_SQL = (
    "TRUNCATE workflows, workflow_steps, workflow_attempts, workers, workflow_messages, workflow_events,"
    " workflow_limits, workflow_schedules, sf_audit_wf, sf_audit_steps, sf_audit_parks, sf_claims,"
    " sf_limit_changes,"
    " sf_schedule_changes RESTART IDENTITY"
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


def query(dsn: str | psycopg.Connection, sql: str, params: Any = None) -> list[tuple]:
    """All rows of one statement, on a connection of its own (or on ``dsn`` when it is one)."""
    if isinstance(dsn, psycopg.Connection):
        return dsn.execute(sql, params).fetchall()
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
    at: float | None = None  # when the step function began (unix time)
    pid: int | None = None  # the worker process that ran it


def read_effects(path: Path) -> list[Effect]:
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    out = []
    for line in complete.splitlines():
        wid, step, kind, attempt, epoch, nonce, *rest = line.split(" ")
        at, pid = (float(rest[0]), int(rest[1])) if len(rest) == 2 else (None, None)
        out.append(
            Effect(wid, int(step), kind, int(attempt), None if epoch == "?" else int(epoch), nonce, at, pid)
        )
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
                [
                    str(self.pg_ctl),
                    "-D",
                    str(self.data),
                    "-l",
                    str(log),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "60",
                    "restart",
                ],
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
    timeout: str | None = None  # as submitted (the run's deadline from its submit)
    workflow_type: str = TYPE
    concurrency_key: str | None = None


def engine_steps(spec: list[list[Any]]) -> list[tuple[str, int]]:
    """Per engine step number (1, 2, ...) of an ``sf-flow`` run: what it is (effect, sleep,
    recv, event, start_child, wait) and the index of its item in ``spec``."""
    out: list[tuple[str, int]] = []
    for index, (kind, arg) in enumerate(spec):
        if kind == "children":
            starts = 1 if arg[2] else len(arg[0])  # one start_children step, or a start_child each
            out += [("start_child", index)] * starts + [("wait", index)]
        elif kind in ("sleep", "recv", "event"):
            out.append((kind, index))
        elif kind == "patch":  # the deploy's patch: its marker, then its effect
            out += [("marker", index), ("effect", index)]
        elif kind == "saga":  # its failure, which the workflow handles, then the undo
            out += [("handled", index), ("effect", index)]
        else:
            out.append(("effect", index))
    return out


def patched_spec(spec: list[list[Any]], rows: dict[int, tuple]) -> list[list[Any]]:
    """The items a run went through: ``spec``, with the deploy's patch in front of its first
    wait item where it took the patch (its marker stands, at that item's step: anywhere else
    is a violation)."""
    markers = sorted(n for n, row in rows.items() if row[0] == PATCH_MARKER)
    if not markers:
        return spec
    at = next((i for i, (kind, _arg) in enumerate(spec) if kind in PATCH_BEFORE), None)
    plan = engine_steps(spec)
    step = next((n for n, (_what, index) in enumerate(plan, 1) if index == at), None)
    assert at is not None and markers == [step], (
        f"patch marker(s) at step(s) {markers}; the patch belongs in front of step {step} (item {at}) "
        f"of {spec}"
    )
    return [*spec[:at], ["patch", 0], *spec[at:]]


TOPICS = ("t0", "t1")
EVENT_KEY = "progress"  # statefulflows.EVENT_KEY
CHILD_STEP = st.sampled_from(
    [
        ["ok", 0],
        ["ok", 0],
        ["raise", 1],
        ["fatal", 0],
        ["sleep", "200ms"],
        ["recv", ["t0", "300ms"]],
        ["event", 0],
    ]
)
CHILD_SPEC = st.lists(CHILD_STEP, min_size=1, max_size=2)
RECV = st.tuples(
    st.just("recv"),
    st.tuples(st.sampled_from(TOPICS), st.sampled_from([None, None, "300ms", "1s"])).map(list),
).map(list)
EVENT = st.just(["event", 0])
CHILDREN = st.tuples(
    st.just("children"),
    st.tuples(st.lists(CHILD_SPEC, min_size=1, max_size=3), st.booleans(), st.booleans()).map(list),
).map(list)
COORD_STEP = st.one_of(RECV, RECV, EVENT, CHILDREN)
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
    st.just(["saga", 0]),
    st.tuples(st.just("flaky"), st.sampled_from([1, 4])).map(list),
    st.sampled_from([["parked", 0], ["slowtry", 0]]),
    COORD_STEP,
)
SPEC = st.lists(STEP, min_size=1, max_size=4)
# a run with at least one coordination item (messages, events, children) among a few others
COORD_SPEC = st.tuples(st.lists(STEP, max_size=2), COORD_STEP, st.lists(STEP, max_size=1)).map(
    lambda t: [*t[0], t[1], *t[2]]
)
# What pause_in_statement holds: the worker's row with a new run to claim, the worker's row,
# a run the worker holds.
HOLDS = ["claim", "worker", "run"]
# short runs that hold their lease for a while (or give it back while they sleep)
SHORT_SPEC = st.lists(
    st.sampled_from([["ok", 0], ["ok", 0], ["sleep", "200ms"], ["gate", 0], ["raise", 1]]),
    min_size=1,
    max_size=2,
)
KEY = st.none() | st.sampled_from(["k0", "k1", "k2"])
MAX_RETRIES = st.none() | st.integers(0, 2)
VIA = st.sampled_from(["api", "api", "cli", "sql", "long"])
# "long": a submit or a send inside an application transaction that began this long before it
# (its now(), the run_at it writes, is older than the workers' claims meanwhile)
LONG_TRANSACTION = 0.3
TIMEOUT = st.sampled_from([None, None, None, "1s", "2s"])  # a deadline on submit
MESSAGE_KEY = st.sampled_from([None, None, "m0", "m0", "m1"])
SEND_VIA = st.sampled_from(["api", "api", "sql", "tx", "rollback", "cli", "long"])
WTYPE = st.sampled_from([TYPE, TYPE, CAPPED])
CKEY = st.sampled_from([None, None, "c0", "c1", "c2"])  # a concurrency key (for per-key limits)
CROWD_KEY = st.sampled_from([None, "c0", "c0", "c1"])
PRIORITY = st.sampled_from([0, 0, 0, 5, -5])  # submit_crowd: claimed by priority, limits or not
LIMIT_TYPE = st.sampled_from([TYPE, CAPPED])
# `wfctl limit`: concurrency 0 pauses the type; all of them None only shows the type's limits
LIMIT_CONCURRENCY = st.sampled_from([None, None, 0, 1, 1, 2, 3])
LIMIT_PER_KEY = st.sampled_from([None, 1, 1, 2])
LIMIT_RATE = st.sampled_from([None, None, None, "2/s", "5/s", "20/s"])
SCHEDULE_NAME = st.sampled_from(["s0", "s1"])
# every N seconds (six fields, seconds first), or every minute (five fields)
EVERY_CRON = {1: "* * * * * *", 2: "*/2 * * * * *", 3: "*/3 * * * * *", 60: "* * * * *"}
CRON_EVERY = {v: k for k, v in EVERY_CRON.items()}
SCHEDULE_EVERY = st.sampled_from([1, 1, 2, 3, 60])
SCHEDULE_TZ = st.sampled_from([None, None, "Europe/Berlin", "Asia/Kolkata"])
SCHEDULE_SPEC = st.lists(
    st.sampled_from([["ok", 0], ["ok", 0], ["raise", 1], ["sleep", "200ms"]]), max_size=2
)
SCHEDULE_VIA = st.sampled_from(["cli", "api", "api"])
LIMIT_VIA = st.sampled_from(["cli", "api", "api"])  # a process costs a second on a busy machine


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
        self.sends = 0  # payloads are {"n": <this counter>}: unique per send
        self.message_keys: dict[tuple[str, str], int] = {}  # (workflow, key) -> the message's id
        # [pid, SIGSTOP time, SIGCONT time or None, where: "anywhere" (pause_worker) or
        # "statement" (pause_in_statement: stopped while a statement of its waited on a lock)]
        self.stops: list[list[Any]] = []
        # the limits `wfctl limit` set per type (concurrency, key_concurrency, rate): the code's
        # (CODE_LIMITS, once a worker has declared them) apply where none is set
        self.operator_limits: dict[str, dict[str, Any]] = {t: {} for t in CODE_LIMITS}
        self.schedules: dict[str, dict[str, Any]] = {}  # name -> every, paused, backfill, type
        self.log_offsets: dict[int, int] = {}  # worker index -> bytes of its log looked at
        self.deployed = False  # deploy_patch ran: workers start on the patched code
        self.stopped_by_deploy: frozenset[tuple[str, int]] = frozenset()  # (run, epoch) running then
        self.together: psycopg.Connection | None = None  # submit_crowd's one transaction
        # submit_crowd's runs of a type no limit held (none in code, none set since): for
        # invariant 15, (type, [(id, priority), ...])
        self.crowds: list[tuple[str, list[tuple[str, int]]]] = []
        self.poll = POLL  # begin may draw the slow poll: then no run may wait for it
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
        if self.deployed:
            extra[PATCH_ENV] = "1"
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
    def hand_backs_explained(self) -> int:
        """How often a run may go back to pending uncounted: once per connection loss (a
        claim's lost reply), once more after the deploy (its SIGTERM hands the runs back)."""
        return self.connection_losses + int(self.deployed)

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
                    sys.executable,
                    "-m",
                    "wfctl",
                    "worker",
                    "--app",
                    "statefulflows",
                    "--concurrency",
                    str(concurrency),
                    "--heartbeat",
                    HEARTBEAT,
                    "--poll",
                    self.poll,
                    "--grace",
                    "1s",
                    "--log-format",
                    "plain",
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

    def _stop(self, worker: WorkerProc) -> None:
        self._signal(worker, signal.SIGSTOP)
        if worker.proc is not None:
            self.stops.append([worker.proc.pid, time.time(), None, "anywhere"])

    def _cont(self, worker: WorkerProc) -> None:
        self._signal(worker, signal.SIGCONT)
        if worker.proc is not None:
            for stop in self.stops:
                if stop[0] == worker.proc.pid and stop[2] is None:
                    stop[2] = time.time()

    def _submit(
        self,
        steps: list[list[Any]],
        key: str | None,
        max_retries: int | None,
        via: str,
        timeout: str | None = None,
        wtype: str = TYPE,
        ckey: str | None = None,
        priority: int = 0,
    ) -> list:
        data = {"steps": steps}
        if self.skipping:
            if key is not None and key in self.keys:
                return [self.keys[key]]
            wid = f"skipped-{len(self.model)}"
            self.model[wid] = Wf(steps, max_retries, via, timeout, wtype, ckey)
            if key is not None:
                self.keys[key] = wid
            return [wid]
        if via in ("api", "long"):
            with contextlib.ExitStack() as stack:
                conn = self.together or stack.enter_context(psycopg.connect(self.dsn, connect_timeout=10))
                if via == "long":
                    conn.execute("SELECT now()")  # the transaction and its now() begin here
                    time.sleep(LONG_TRANSACTION)  # the application's own work meanwhile
                wid = str(
                    wfctl.submit(
                        conn,
                        wtype,
                        data,
                        key=key,
                        max_retries=max_retries,
                        timeout=timeout,
                        concurrency_key=ckey,
                        priority=priority,
                    )
                )
                if self.together is None:
                    conn.commit()
        elif via == "cli":
            args = ["submit", wtype, json.dumps(data), "--force"]
            if key is not None:
                args += ["--key", key]
            if max_retries is not None:
                args += ["--max-retries", str(max_retries)]
            if timeout is not None:
                args += ["--timeout", timeout]
            if ckey is not None:
                args += ["--concurrency-key", ckey]
            result = self.cli(*args)
            if not self.expect(result.exit_code == 0, f"wfctl {' '.join(args)}: {result.output}"):
                return []
            wid = result.stdout.strip()
        elif timeout is not None or ckey is not None:  # an INSERT that sets the columns itself
            wid = str(
                query(
                    self.dsn,
                    "WITH new AS (INSERT INTO workflows (workflow_type, input_data, idempotency_key,"
                    " max_retries, deadline_at, deadline_error, concurrency_key)"
                    " VALUES (%(type)s, %(input)s, %(key)s, %(retries)s, now() + %(timeout)s::interval,"
                    " %(error)s, %(ckey)s) ON CONFLICT DO NOTHING RETURNING id)"
                    " SELECT id FROM new UNION ALL SELECT id FROM workflows"
                    " WHERE idempotency_key = %(key)s AND NOT EXISTS (SELECT FROM new)",
                    {
                        "type": wtype,
                        "input": json.dumps(data),
                        "key": key,
                        "retries": max_retries,
                        "timeout": timeout,
                        "error": None if timeout is None else f"timed out after {timeout}",
                        "ckey": ckey,
                    },
                )[0][0]
            )
        elif key is None and max_retries is None:  # the reference design's plain INSERT
            wid = str(
                query(
                    self.dsn,
                    "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s) RETURNING id",
                    (wtype, json.dumps(data)),
                )[0][0]
            )
        else:
            wid = str(
                query(
                    self.dsn,
                    "SELECT wfctl_submit(%s, %s::jsonb, p_key => %s, p_max_retries => %s)",
                    (wtype, json.dumps(data), key, max_retries),
                )[0][0]
            )
        if key is not None and key in self.keys:
            first = self.keys[key]
            self.log(
                f"submit {wtype} {steps} key={key} concurrency_key={ckey} via {via}: {wid} (the key's "
                f"workflow is {first})"
            )
            self.expect(wid == first, f"submit with the used key {key!r} returned {wid}, not {first}")
            count = query(self.dsn, "SELECT count(*) FROM workflows WHERE idempotency_key = %s", (key,))[0][0]
            self.expect(count == 1, f"{count} workflows with the key {key!r}")
            stored = query(self.dsn, "SELECT input_data FROM workflows WHERE id = %s", (first,))[0][0]
            self.expect(stored == {"steps": self.model[first].steps}, "a repeated key changed the input")
            self.env.figures["duplicate_keys"] += 1
            return [first]
        self.log(
            f"submit {wtype} {steps} key={key} max_retries={max_retries} timeout={timeout} "
            f"concurrency_key={ckey} priority={priority} via {via}: {wid}"
        )
        if not self.expect(wid not in self.model, f"submit returned the id {wid} of another workflow"):
            return []
        self.model[wid] = Wf(steps, max_retries, via, timeout, wtype, ckey)
        stored = query(
            self.together or self.dsn,
            "SELECT workflow_type, concurrency_key FROM workflows WHERE id = %s",
            (wid,),
        )
        self.expect(
            stored == [(wtype, ckey)], f"submit of {wtype} concurrency_key={ckey} via {via} stored {stored}"
        )
        if key is not None:
            self.keys[key] = wid
        self.env.figures["workflows"] += 1
        return [wid]

    def _status(self, wid: str) -> str:
        return query(self.dsn, "SELECT status FROM workflows WHERE id = %s", (wid,))[0][0]

    # -- rules ------------------------------------------------------------------------------

    @initialize(
        target=workflows,
        specs=st.lists(st.tuples(SPEC, KEY, MAX_RETRIES, VIA, TIMEOUT, WTYPE, CKEY), min_size=2, max_size=4),
        concurrencies=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2),
        slow_poll=st.booleans(),
    )
    def begin(self, specs, concurrencies, slow_poll):
        if slow_poll:  # every wake-up must come by NOTIFY (or a timer): none by the poll
            self.poll = SLOW_POLL
            self.log(f"workers poll every {SLOW_POLL}")
        for concurrency in concurrencies:
            self._start_worker(concurrency)
        self.log(f"started {len(concurrencies)} worker(s), concurrency {concurrencies}")
        return multiple(
            *[w for s, k, m, v, t, y, c in specs for w in self._submit(list(s), k, m, v, t, y, c)]
        )

    @rule(
        target=workflows,
        steps=SPEC,
        key=KEY,
        max_retries=MAX_RETRIES,
        via=VIA,
        timeout=TIMEOUT,
        wtype=WTYPE,
        ckey=CKEY,
    )
    def submit(self, steps, key, max_retries, via, timeout, wtype, ckey):
        return multiple(*self._submit(steps, key, max_retries, via, timeout, wtype, ckey))

    @rule(target=workflows, steps=SPEC, max_retries=MAX_RETRIES)
    def submit_more(self, steps, max_retries):
        return multiple(*self._submit(steps, None, max_retries, "api"))

    @rule(
        target=workflows,
        runs=st.lists(st.tuples(SHORT_SPEC, CROWD_KEY, PRIORITY), min_size=2, max_size=6),
        wtype=LIMIT_TYPE,
    )
    def submit_crowd(self, runs, wtype):
        """Several short runs of one type at once (one transaction), with concurrency keys and
        priorities now and then: work that competes for the type's limits, claimed by priority
        across types."""
        with contextlib.ExitStack() as stack:
            if not self.skipping:
                self.together = stack.enter_context(psycopg.connect(self.dsn, connect_timeout=10))
            try:
                ids = [
                    (w, priority)
                    for spec, ckey, priority in runs
                    for w in self._submit(spec, None, None, "api", None, wtype, ckey, priority)
                ]
                if self.together is not None:
                    self.together.commit()
            finally:
                self.together = None
        if not self._limited(wtype) and len({p for _w, p in ids}) > 1:
            self.crowds.append((wtype, ids))
        return multiple(*[w for w, _p in ids])

    def _limited(self, wtype: str) -> bool:
        """Whether a limit may hold ``wtype`` back: one in its code, or one an operator set."""
        return bool(CODE_LIMITS[wtype]) or any(v is not None for v in self.operator_limits[wtype].values())

    @rule(target=workflows, steps=COORD_SPEC, via=VIA, timeout=TIMEOUT, wtype=WTYPE, ckey=CKEY)
    def submit_coordination(self, steps, via, timeout, wtype, ckey):
        """A run that receives messages, publishes events or starts and joins children."""
        return multiple(*self._submit(steps, None, None, via, timeout, wtype, ckey))

    def receivers(self) -> list[str]:
        return sorted(w for w, m in self.model.items() if any(k == "recv" for k, _ in m.steps))

    @rule(pick=st.integers(0, 999), topic=st.sampled_from(TOPICS), key=MESSAGE_KEY, via=SEND_VIA)
    def send(self, pick, topic, key, via):
        """A message to a receiver (else any workflow; one time in ten an unknown id), from
        the library, ``wfctl_send()``, the library inside a transaction that commits a moment
        later or rolls back, or ``wfctl send``; with a key now and then (two, so they repeat)."""
        if self.skipping or not self.model:
            return
        candidates = self.receivers() or sorted(self.model)
        unknown = pick % 10 == 9
        wid = str(uuid.uuid4()) if unknown else candidates[pick % len(candidates)]
        self._send(wid, topic, key, via, unknown=unknown)

    @rule(pick=st.integers(0, 999), key=MESSAGE_KEY, via=SEND_VIA)
    def send_to_waiting(self, pick, key, via):
        """A message on the topic a run waits on now (parked there, else a running receiver on
        its first topic): the wake-up path, racing the run's own check and park."""
        if self.skipping or not self.receivers():
            return
        rows = query(
            self.dsn,
            "SELECT id::text, wait_topic FROM workflows WHERE status = 'pending' AND wait_kind = 'message'"
            " ORDER BY id",
        ) or [
            (w, next(a[0] for k, a in self.model[w].steps if k == "recv"))
            for w in self.receivers()
            if self._status(w) == "running"
        ]
        if rows:
            wid, topic = rows[pick % len(rows)]
            self._send(wid, topic, key, via)

    def _send(self, wid: str, topic: str, key: str | None, via: str, unknown: bool = False) -> int | None:
        self.sends += 1
        payload = {"n": self.sends}
        earlier = self.message_keys.get((wid, key)) if key is not None else None
        outcome, mid = "sent", None
        try:
            if via == "api":
                mid = wfctl.send(self.dsn, wid, topic, payload, key=key)
            elif via == "sql":
                mid = query(
                    self.dsn,
                    "SELECT wfctl_send(%s, %s, %s::jsonb, %s)",
                    (wid, topic, json.dumps(payload), key),
                )[0][0]
            elif via == "long":
                with psycopg.connect(self.dsn, connect_timeout=10) as conn:
                    conn.execute("SELECT now()")  # the transaction and its now() begin here
                    time.sleep(LONG_TRANSACTION)  # the application's own work meanwhile
                    mid = wfctl.send(conn, wid, topic, payload, key=key)
                    conn.commit()
            elif via in ("tx", "rollback"):
                with psycopg.connect(self.dsn, connect_timeout=10) as conn:
                    mid = wfctl.send(conn, wid, topic, payload, key=key)
                    time.sleep(0.03)  # the message is written, not committed: a receiver may park
                    if via == "tx":
                        conn.commit()
                    else:
                        conn.rollback()
                        outcome = "rolled back"
            else:
                args = ["send", wid, topic, json.dumps(payload), "--json"] + (["--key", key] if key else [])
                result = self.cli(*args)
                if result.exit_code == 0:
                    mid = json.loads(result.stdout)["id"]
                elif result.exit_code in (6, 7) and len(result.stderr.strip().splitlines()) == 1:
                    outcome = "unknown" if result.exit_code == 6 else "finished"
                else:
                    self.expect(
                        False, f"wfctl {' '.join(args)}: exit {result.exit_code} ({result.output.strip()})"
                    )
                    return None
        except (wfctl.NotFound, psycopg.errors.NoDataFound):
            outcome = "unknown"
        except (wfctl.InvalidState, psycopg.errors.ObjectNotInPrerequisiteState):
            outcome = "finished"
        self.log(f"send {payload} to {wid} on {topic} key={key} via {via}: {outcome} {mid or ''}")
        stored = query(
            self.dsn,
            "SELECT id, workflow_id::text, topic, payload, idempotency_key FROM workflow_messages"
            " WHERE payload = %s::jsonb",
            (json.dumps(payload),),
        )
        what = f"send {payload} to {wid} on {topic!r} key={key} via {via}"
        if outcome == "sent":
            self.expect(not unknown, f"{what}: a send to an unknown workflow was taken (message {mid})")
            if earlier is not None:
                self.expect(mid == earlier, f"{what}: the key was used for message {earlier}, got {mid}")
                self.expect(not stored, f"{what}: a resend with a used key stored a message: {stored}")
                count = query(
                    self.dsn,
                    "SELECT count(*) FROM workflow_messages WHERE workflow_id = %s AND idempotency_key = %s",
                    (wid, key),
                )[0][0]
                self.expect(count == 1, f"{what}: {count} messages with that key")
                self.env.figures["duplicate_message_keys"] += 1
            else:
                self.expect(
                    stored == [(mid, wid, topic, payload, key)],
                    f"{what}: returned message {mid}; stored with this payload: {stored}",
                )
                if key is not None:
                    self.message_keys[(wid, key)] = mid
                self.env.figures["messages_sent"] += 1
        elif outcome == "rolled back":
            self.expect(not stored, f"{what}: rolled back, yet stored: {stored}")
            if earlier is not None:
                self.expect(mid == earlier, f"{what}: the key was used for message {earlier}, got {mid}")
        else:
            self.expect(not stored, f"{what}: refused ({outcome}), yet stored: {stored}")
            self.expect(earlier is None, f"{what}: refused ({outcome}) although its key was used before")
            if outcome == "unknown":
                self.expect(unknown, f"{what}: refused as unknown")
            else:
                status = self._status(wid)
                self.expect(status in TERMINAL, f"{what}: refused as finished; the workflow is {status}")
            self.env.figures["messages_refused"] += 1
        return mid

    @rule(
        pick=st.integers(0, 999),
        via=st.sampled_from(["api", "api", "cli"]),
        wait=st.sampled_from([None, "300ms"]),
    )
    def read_event(self, pick, via, wait):
        """Read the "progress" event of a run that publishes one (``wfctl.get_event`` or
        ``wfctl event``, waiting for it or not): a value it set at some point, or nothing yet."""
        candidates = sorted(w for w, m in self.model.items() if any(k == "event" for k, _ in m.steps))
        if self.skipping or not candidates:
            return
        wid = candidates[pick % len(candidates)]
        events = sum(1 for k, _ in self.model[wid].steps if k == "event")
        if via == "api":
            value = wfctl.get_event(self.dsn, wid, EVENT_KEY, timeout=wait)
        else:
            args = ["event", wid, EVENT_KEY] + (["--wait", wait] if wait else [])
            result = self.cli(*args)
            if result.exit_code == 0:
                value = json.loads(result.stdout)
            else:
                self.expect(
                    result.exit_code in (6, 13) and len(result.stderr.strip().splitlines()) == 1,
                    f"wfctl {' '.join(args)}: exit {result.exit_code} ({result.output.strip()})",
                )
                value = None
        written = {
            r[0]
            for r in query(
                self.dsn,
                "SELECT output -> 'value' FROM sf_audit_steps WHERE workflow_id = %s AND op <> 'DELETE'"
                " AND step_name = %s",
                (wid, f"set_event:{EVENT_KEY}"),
            )
        }
        self.log(f"event {EVENT_KEY} of {wid} via {via} (wait {wait}): {value} (values written: {written})")
        if value is not None:
            self.expect(
                value in written and value in range(1, events + 1),
                f"event {EVENT_KEY} of {wid} read as {value!r}; the run set {sorted(written)} "
                f"(of 1..{events})",
            )
        self.env.figures["events_read"] += 1

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

    @rule(
        pick=st.integers(0, 999),
        via=st.sampled_from(["api", "api", "cli"]),
        timeout=st.sampled_from(["0s", "300ms"]),
    )
    def await_result(self, pick, via, timeout):
        """Wait for a run's result from outside (``wfctl.result``, ``wfctl wait --timeout``):
        its output when it completed, its failure or cancel as such, a timeout only while it
        had not finished when the wait began."""
        if self.skipping or not self.model:
            return
        wid = sorted(self.model)[pick % len(self.model)]
        before = self._status(wid)
        if via == "api":
            try:
                outcome, value = "completed", wfctl.result(self.dsn, wid, timeout=timeout)
            except wfctl.WorkflowFailed as exc:
                outcome, value = "failed", exc.error
            except wfctl.WorkflowCancelled as exc:
                outcome, value = "cancelled", exc.reason
            except wfctl.WaitTimeout:
                outcome, value = "timeout", None
        else:
            result = self.cli("wait", wid, "--timeout", timeout)
            codes = {0: "completed", 11: "failed", 12: "cancelled", 13: "timeout"}
            outcome = codes.get(result.exit_code, f"exit {result.exit_code}")
            value = json.loads(result.stdout) if result.exit_code == 0 else result.stderr.strip()
            self.expect(
                outcome in codes.values() and (result.exit_code == 0 or len(value.splitlines()) == 1),
                f"wfctl wait {wid} --timeout {timeout}: exit {result.exit_code} ({result.output.strip()})",
            )
        status, output, error = query(
            self.dsn, "SELECT status, output_data, error_message FROM workflows WHERE id = %s", (wid,)
        )[0]
        self.log(f"result of {wid} via {via} (timeout {timeout}; it was {before}): {outcome}, now {status}")
        if outcome == "timeout":
            self.expect(before not in TERMINAL, f"result of {wid}: timed out, yet it had ended {before}")
        elif outcome in TERMINAL:
            self.expect(status == outcome, f"result of {wid} said {outcome}; the workflow is {status}")
            if outcome == "completed":
                self.expect(value == output, f"result of {wid}: {value!r}; its output is {output!r}")
            elif via == "api" and outcome == "failed":
                self.expect(value == error, f"result of {wid}: failed with {value!r}; its error is {error!r}")
        self.env.figures[f"results_{outcome}"] += 1

    @rule(pick=st.integers(0, 999))
    def cancel_child(self, pick):
        """Cancel an unfinished child (a running one by preference): its parent, parked on it or
        about to be, is counted down and woken, and its wait raises ChildFailed."""
        if self.skipping:
            return
        rows = query(
            self.dsn,
            "SELECT id::text FROM workflows WHERE status IN ('running', 'pending') AND parent_id IS NOT NULL"
            " ORDER BY status = 'running' DESC, id",
        )
        if rows:
            self._cancel(rows[pick % len(rows)][0])
            self.env.figures["children_cancelled"] += 1

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
            " FROM workflows WHERE status IN ('running', 'pending') AND parent_id IS NULL ORDER BY 2, 1",
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
        # never a child: the parent's join recorded the child's outcome
        finished = sorted(
            str(r[0])
            for r in query(
                self.dsn,
                "SELECT id FROM workflows WHERE status IN ('failed', 'cancelled') AND parent_id IS NULL",
            )
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
        everything = json.loads(result.stdout)
        rows = [r for r in everything if r.get("action", "recovered") == "recovered"]
        expired = [r for r in everything if r.get("action") == "expired"]
        self.log(
            f"recover --stale {stale}: {[(r['id'], r['status'], r['attempt']) for r in rows]}, "
            f"expired {[r['id'] for r in expired]}"
        )
        children = {
            str(r[0]) for r in query(self.dsn, "SELECT id FROM workflows WHERE parent_id IS NOT NULL")
        }
        for row in rows:
            ok = row["status"] in ("pending", "failed") and row["id"] in self.model.keys() | children
            self.expect(ok, f"recovered {row}")
        for row in expired:
            ok = row["status"] == "failed" and row["id"] in self.model.keys() | children
            self.expect(ok and "timed out" in row["error_message"], f"expired {row}")
        self.env.figures["recovers"] += 1
        self.env.figures["requeued"] += sum(1 for r in rows if r["status"] == "pending")
        self.env.figures["abandoned"] += sum(1 for r in rows if r["status"] == "failed")
        self.env.figures["expired_by_recover"] += len(expired)

    @rule(pick=st.integers(0, 999))
    def release_gate(self, pick):
        if self.skipping:
            return
        gated = sorted(
            w
            for w, m in self.model.items()
            if any(k == "gate" for k, _ in m.steps) and not (self.gates / w).exists()
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
            for stop in self.stops:  # a frozen worker killed: it runs nothing more
                if stop[0] == worker.proc.pid and stop[2] is None:
                    stop[2] = time.time()
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
        self._stop(worker)
        self.env.figures["pauses"] += 1
        self.log(f"SIGSTOP worker{worker.index}")

    @precondition(lambda self: self.unpaused())
    @rule(target=workflows, index=st.integers(0, 9), hold=st.sampled_from(HOLDS), spec=SHORT_SPEC)
    def pause_in_statement(self, index, hold, spec):
        """Stop a worker in the middle of a statement: hold a row its next statement must lock
        (its ``workers`` row: its claim and its heartbeat, and for ``claim`` a new short run
        submitted meanwhile, for its claim to take; a run it holds: its flush and its
        heartbeat), stop it once that statement waits, let the statement commit while it is
        stopped, keep it stopped until what it held was taken over (and LEASE_SLACK + 0.5s
        longer), then continue it. The reply it then reads is as old as the pause: invariant 12
        says it starts no step on the leases it lost."""
        unpaused = self.unpaused()
        worker = unpaused[index % len(unpaused)]
        submitted: list = []
        if self.skipping or not worker.alive:
            if hold == "claim":
                submitted = self._submit(spec, None, None, "api")
            return multiple(*submitted)
        pid = worker.proc.pid
        with psycopg.connect(self.dsn, connect_timeout=10) as holder:
            ident = holder.execute("SELECT id FROM workers WHERE id LIKE %s", (f"%:{pid}:%",)).fetchone()
            held = None
            if ident is not None and hold == "run":
                held = holder.execute(
                    "SELECT id FROM workflows WHERE lease_owner = %s AND status = 'running'"
                    " LIMIT 1 FOR UPDATE",
                    ident,
                ).fetchone()
            if ident is not None and held is None:
                holder.execute("SELECT 1 FROM workers WHERE id = %s FOR UPDATE", ident)
            if hold == "claim":  # whether or not the worker has a row yet: the draws stay the same
                submitted = self._submit(spec, None, None, "api")
            me = holder.info.backend_pid
            waiting = ident is not None and within(
                lambda: query(
                    self.dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
                    " AND application_name = 'wfctl worker'",
                    (me,),
                )[0][0],
                2.0,
            )
            if not waiting:
                holder.rollback()
                self.log(f"worker{worker.index}: no statement waited on its {hold} row; not paused")
                return multiple(*submitted)
            freeze(worker.proc)
            stop = [pid, time.time(), None, "statement"]
            self.stops.append(stop)
            holder.rollback()  # the statement goes on and commits while its worker is stopped
        self.env.figures["pauses_in_statement"] += 1
        self.log(f"SIGSTOP worker{worker.index} in a statement that waited on its {hold} row")
        # stopped until another worker (or nobody: the live ones may all be stopped) took over
        taken = within(
            lambda: (
                not query(
                    self.dsn, "SELECT 1 FROM workflows WHERE lease_owner = %s AND status = 'running'", ident
                )
            ),
            3.0,
        )
        if taken:  # and long enough that a step it started on resuming would be seen as late
            time.sleep(LEASE_SLACK.total_seconds() + 0.5)
        self._signal(worker, signal.SIGCONT)
        stop[2] = time.time()
        self.log(f"SIGCONT worker{worker.index} ({'after' if taken else 'before'} its runs were taken over)")
        return multiple(*submitted)

    @precondition(lambda self: self.paused())
    @rule(index=st.integers(0, 9))
    def resume_worker(self, index):
        paused = self.paused()
        worker = paused[index % len(paused)]
        worker.paused = False
        if self.skipping:
            return
        self._cont(worker)
        self.log(f"SIGCONT worker{worker.index}")

    @precondition(lambda self: not self.deployed)
    @rule(concurrencies=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2))
    def deploy_patch(self, concurrencies):
        """Deploy new code: every worker stopped (SIGTERM, as systemd does, its grace and then
        exit; a frozen one killed), and new ones started on code that put ``ctx.patched`` in
        front of each run's first wait. Runs parked in that wait, or past it, keep to the old
        path; runs that had not reached it take the patch. The gates of the running runs open
        first, so that their steps end within the grace: a step the stop abandoned would run
        again in an attempt that does not count (invariant 2 allows that to a crash only)."""
        self.deployed = True
        old = self.started()
        for worker in old:
            worker.killed = True
        if not self.skipping:
            began = query(self.dsn, "SELECT clock_timestamp()")[0][0]
            for (wid,) in query(self.dsn, "SELECT id::text FROM workflows WHERE status = 'running'"):
                if wid in self.model and any(k == "gate" for k, _ in self.model[wid].steps):
                    (self.gates / wid).touch()
            for worker in old:
                if worker.proc is None:
                    continue
                self._signal(worker, signal.SIGKILL if worker.paused else signal.SIGTERM)
                try:
                    worker.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.expect(False, f"worker{worker.index} did not exit within 30s of SIGTERM")
                    self._signal(worker, signal.SIGKILL)
                    worker.proc.wait(timeout=30)
                for stop in self.stops:  # a frozen worker killed: it runs nothing more
                    if stop[0] == worker.proc.pid and stop[2] is None:
                        stop[2] = time.time()
            # the leases the stop ended (a run handed back, or its step abandoned after the grace)
            ended = query(
                self.dsn,
                "SELECT workflow_id::text, old_epoch FROM sf_audit_wf WHERE op = 'UPDATE'"
                " AND old_status = 'running' AND at >= %s",
                (began,),
            )
            self.stopped_by_deploy = frozenset((wid, int(epoch)) for wid, epoch in ended)
            self.env.figures["deploys"] += 1
            self.env.figures["parked_at_a_deploy"] += query(
                self.dsn, "SELECT count(*) FROM workflows WHERE status = 'pending' AND wait_kind IS NOT NULL"
            )[0][0]
        for concurrency in concurrencies:
            self._start_worker(concurrency)
        self.log(f"deployed the patch: stopped {len(old)} worker(s), started {len(concurrencies)}")

    @precondition(lambda self: len(self.started()) < MAX_WORKERS)
    @rule(concurrency=st.sampled_from([1, 2, 3]))
    def start_worker(self, concurrency):
        worker = self._start_worker(concurrency)
        self.log(f"started worker{worker.index} (concurrency {concurrency})")

    # -- flow control --------------------------------------------------------------

    def _limits_in_force(
        self, wtype: str, declared: bool
    ) -> list[tuple[int | None, int | None, tuple[int, float] | None]]:
        """What the model says `wfctl limit` lists: the operator's value, else the code's once
        a worker has declared it (``declared``); nothing when no limit is in force."""
        merged = {**(CODE_LIMITS[wtype] if declared else {}), **self.operator_limits[wtype]}
        rate = merged.get("rate")
        found = (
            merged.get("concurrency"),
            merged.get("key_concurrency"),
            None if rate is None else (rate.count, rate.seconds),
        )
        return [] if found == (None, None, None) else [found]

    def _declared(self, wtype: str) -> bool:
        """Whether a worker has declared the code's limits of ``wtype`` (as the code says)."""
        rows = query(
            self.dsn,
            "SELECT code_concurrency, code_key_concurrency, code_rate_count FROM workflow_limits"
            " WHERE workflow_type = %s",
            (wtype,),
        )
        code = CODE_LIMITS[wtype]
        declared = [(code.get("concurrency"), code.get("key_concurrency"), None)]
        if not rows or rows[0] == (None, None, None):
            return False
        self.expect(rows == declared, f"the code's limits of {wtype} are declared as {rows}, not {declared}")
        return bool(code)

    def _type_known(self, wtype: str) -> bool:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            try:
                limits.check_known(conn, wtype)
            except wfctl.InvalidInput:
                return False
            return True

    def _operator_changes(self) -> int:
        return query(self.dsn, "SELECT count(*) FROM sf_limit_changes WHERE source = 'operator'")[0][0]

    def _change_limits(self, wtype: str, args: list[str], via: str, change, after: dict[str, Any]) -> None:
        """One `wfctl limit TYPE ARGS --json` (``via`` "cli"), or ``change(conn)``, the library's
        equivalent (``via`` "api"), then what it says is in force against the model, which
        becomes ``after`` (the operator's values) when the command succeeds. A change stores one
        change of the type's row exactly when the model's operator values change or are set
        again; a command that changes nothing, or is refused, stores none. A type that no worker
        registered and no run or limit names yet is refused (one line, exit 2)."""
        known = self._type_known(wtype)
        declared_before = self._declared(wtype)
        before = self._operator_changes()
        shown: list[tuple] | None = None
        if via == "cli":
            result = self.cli("limit", wtype, *args, "--json")
            error = result.stderr.strip()
            refused = result.exit_code != 0
            if refused:
                self.expect(
                    result.exit_code == 2 and len(error.splitlines()) == 1,
                    f"limit {wtype} {' '.join(args)}: exit {result.exit_code}, {result.output.strip()}",
                )
            else:
                shown = [
                    (
                        r["concurrency"],
                        r["key_concurrency"],
                        None if r["rate"] is None else astuple(limits.parse_rate(r["rate"])),
                    )
                    for r in json.loads(result.stdout)
                ]
        else:
            try:
                with psycopg.connect(self.dsn, connect_timeout=10) as conn:
                    change(conn)
                    effective = [row.effective() for row in limits.list_limits(conn, wtype)]
                refused, error = False, ""
                shown = [
                    (e.concurrency, e.key_concurrency, None if e.rate is None else astuple(e.rate))
                    for e in effective
                ]
            except wfctl.InvalidInput as exc:
                refused, error = True, str(exc)
        # the change has committed (the command returned): every claim that starts now sees it
        mark_limit_changes_visible(self.dsn)
        stored = self._operator_changes() - before
        what = f"limit {wtype} {' '.join(args) or '(no options)'} via {via}"
        if refused:
            self.log(f"{what}: refused ({error})")
            self.expect(
                (not known and "unknown workflow type" in error)
                or (via == "api" and not args and "at least one" in error),
                f"{what}: refused: {error}",
            )
            self.expect(stored == 0, f"{what}: refused, yet {stored} change(s) of the limits were stored")
            self.env.figures["limit_changes_refused"] += 1
            return
        # (a worker may have registered the type meanwhile)
        self.expect(known or self._type_known(wtype), f"{what}: accepted for a type wfctl does not know")
        cleared = args == ["--clear"]
        changed = any(v is not None for v in self.operator_limits[wtype].values()) if cleared else bool(args)
        self.expect(stored == int(changed), f"{what}: {stored} change(s) stored, expected {int(changed)}")
        self.operator_limits[wtype] = after
        self.crowds = [c for c in self.crowds if c[0] != wtype]  # a limit may hold those back now
        # a worker may declare the code's limits (at its start) while the command runs
        models = [self._limits_in_force(wtype, d) for d in {declared_before, self._declared(wtype)}]
        self.log(f"{what}: in force {shown}")
        self.expect(
            shown in models, f"{what}: in force {shown}; the model says {' or '.join(map(str, models))}"
        )
        self.env.figures["limit_changes"] += int(changed)
        self.env.figures["limit_pauses"] += int(changed and after.get("concurrency") == 0)

    @rule(
        wtype=LIMIT_TYPE,
        concurrency=LIMIT_CONCURRENCY,
        per_key=LIMIT_PER_KEY,
        rate=LIMIT_RATE,
        via=LIMIT_VIA,
    )
    def set_limit(self, wtype, concurrency, per_key, rate, via):
        """`wfctl limit TYPE --concurrency N --per-key K --rate C/W` at run time (concurrency 0
        pauses the type; without options the command shows the type's limits), or the
        library's set_limits (which refuses to be called without a value)."""
        if self.skipping:
            return
        args: list[str] = []
        for option, value in (("--concurrency", concurrency), ("--per-key", per_key), ("--rate", rate)):
            if value is not None:
                args += [option, str(value)]
        parsed = None if rate is None else limits.parse_rate(rate)
        given = {"concurrency": concurrency, "key_concurrency": per_key, "rate": parsed}
        after = {**self.operator_limits[wtype], **{k: v for k, v in given.items() if v is not None}}

        def change(conn: psycopg.Connection) -> None:
            limits.set_limits(conn, wtype, concurrency=concurrency, key_concurrency=per_key, rate=parsed)

        self._change_limits(wtype, args, via, change, after)

    @rule(wtype=LIMIT_TYPE, via=LIMIT_VIA)
    def clear_limit(self, wtype, via):
        """`wfctl limit TYPE --clear` (or the library's clear): the code's limits (if any) apply
        again; it says whether any were set."""
        if self.skipping:
            return
        was_set = any(v is not None for v in self.operator_limits[wtype].values())

        def change(conn: psycopg.Connection) -> None:
            cleared = limits.clear(conn, wtype)
            self.expect(
                cleared == was_set, f"limits.clear({wtype}) said {cleared}, yet limits were set: {was_set}"
            )

        self._change_limits(wtype, ["--clear"], via, change, {})

    # -- schedules -----------------------------------------------------------------

    def _schedule_call(self, args: list[str], via: str, call) -> tuple[str, Any]:
        """``wfctl schedule ARGS --json`` or ``call(conn)``: ("ok", its JSON or result),
        ("unknown", message) for an unknown name (exit 6, one line), or ("error", output)."""
        if via == "cli":
            result = self.cli(*args, "--json")
            if result.exit_code == 0:
                return "ok", json.loads(result.stdout)
            one_line = len(result.stderr.strip().splitlines()) == 1
            if result.exit_code == 6 and one_line and "no schedule named" in result.stderr:
                return "unknown", result.stderr.strip()
            return "error", f"exit {result.exit_code}: {result.output.strip()}"
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                return "ok", call(conn)
        except wfctl.NotFound as exc:
            return "unknown", str(exc)

    @rule(
        name=SCHEDULE_NAME,
        wtype=LIMIT_TYPE,
        every=SCHEDULE_EVERY,
        tz=SCHEDULE_TZ,
        spec=SCHEDULE_SPEC,
        backfill=st.booleans(),
        via=SCHEDULE_VIA,
    )
    def schedule_add(self, name, wtype, every, tz, spec, backfill, via):
        """`wfctl schedule add NAME TYPE CRON --input '{"steps": ...}' [--tz Z] [--backfill]`, or
        the library's add: a new schedule, or a new definition of one (an edit, its pause kept);
        neither fires at once (checked by invariant 9)."""
        if self.skipping:
            return
        expression = EVERY_CRON[every]
        data = {"steps": spec}
        args = ["schedule", "add", name, wtype, expression, "--input", json.dumps(data)]
        args += (["--tz", tz] if tz else []) + (["--backfill"] if backfill else [])

        def call(conn: psycopg.Connection) -> dict[str, Any]:
            added = schedules.add(conn, name, wtype, expression, timezone=tz, input=data, backfill=backfill)
            return {"created": added.created, "paused": added.schedule.paused, "cron": added.schedule.cron}

        outcome, out = self._schedule_call(args, via, call)
        self.log(f"schedule add {name} {wtype} {expression!r} tz={tz} backfill={backfill} via {via}: {out}")
        if not self.expect(outcome == "ok", f"schedule add {name} via {via}: {outcome} {out}"):
            return
        before = self.schedules.get(name)
        self.expect(
            (out["created"], out["paused"], out["cron"])
            == (before is None, bool(before and before["paused"]), expression),
            f"schedule add {name} via {via} said {out}; before it: {before}",
        )
        paused = bool(before and before["paused"])
        self.schedules[name] = {"every": every, "paused": paused, "backfill": backfill, "type": wtype}
        self.env.figures["schedule_adds" if before is None else "schedule_edits"] += 1

    @rule(
        op=st.sampled_from(["pause", "pause", "resume", "resume", "trigger", "delete"]),
        name=SCHEDULE_NAME,
        via=SCHEDULE_VIA,
    )
    def schedule_control(self, op, name, via):
        """`wfctl schedule pause|resume|trigger|delete NAME` (or the library's): what it says
        changed is what the model says; an unknown name is refused (exit 6). A trigger's run is
        stored under the schedule's trigger key."""
        if self.skipping:
            return
        calls = {
            "pause": lambda conn: {"changed": schedules.pause(conn, name)},
            "resume": lambda conn: {"changed": schedules.resume(conn, name)},
            "trigger": lambda conn: {"id": str(schedules.trigger(conn, name).id)},
            "delete": lambda conn: {"deleted": schedules.delete(conn, name) is not None},
        }
        outcome, out = self._schedule_call(["schedule", op, name], via, calls[op])
        before = self.schedules.get(name)
        self.log(f"schedule {op} {name} via {via}: {outcome} {out} (model: {before})")
        if before is None:
            self.expect(outcome == "unknown", f"schedule {op} {name} of no schedule: {outcome} {out}")
            return
        if not self.expect(outcome == "ok", f"schedule {op} {name} via {via}: {outcome} {out}"):
            return
        if op in ("pause", "resume"):
            self.expect(
                bool(out["changed"]) == (before["paused"] == (op == "resume")),
                f"schedule {op} {name} said changed={out['changed']}; it was paused={before['paused']}",
            )
            before["paused"] = op == "pause"
        elif op == "trigger":
            stored = query(
                self.dsn, "SELECT workflow_type, idempotency_key FROM workflows WHERE id = %s", (out["id"],)
            )
            self.expect(
                len(stored) == 1
                and stored[0][0] == before["type"]
                and stored[0][1].startswith(f"schedule:{name}:trigger:"),
                f"schedule trigger {name} returned {out['id']}, stored as {stored}",
            )
            self.env.figures["schedule_triggers"] += 1
        else:
            del self.schedules[name]
        self.env.figures[f"schedule_{op}s"] += op != "trigger"

    @rule(via=SCHEDULE_VIA, boundary=st.booleans())
    def tick(self, via, boundary):
        """`wfctl tick --json` (or the library's fire_due) while the workers fire too; through
        the library with ``boundary``, right at the next whole second, when the ticks fall and
        the workers' duties wake: each run it says it submitted is stored under its tick's key."""
        if self.skipping:
            return

        def call(conn: psycopg.Connection) -> list[dict[str, Any]]:
            if boundary:  # connected: fire right at the second
                time.sleep(1.0 - time.time() % 1.0)
            return [
                {"schedule": f.schedule, "scheduled_at": cron.iso(f.tick), "id": f.id and str(f.id)}
                for f in schedules.fire_due(conn).fired
            ]

        outcome, out = self._schedule_call(["tick"], via, call)
        if not self.expect(outcome == "ok", f"tick via {via}: {outcome} {out}"):
            return
        fired = [f for f in out if f.get("action", "fired") == "fired" and f["id"] is not None]
        self.log(f"tick via {via} (at a second's start: {boundary}): fired {fired}")
        for f in fired:
            stored = query(self.dsn, "SELECT idempotency_key FROM workflows WHERE id = %s", (str(f["id"]),))
            key = f"schedule:{f['schedule']}:{f['scheduled_at']}"
            self.expect(stored == [(key,)], f"tick said it fired {f}; stored: {stored}")
        self.env.figures["ticks_fired_by_test"] += len(fired)

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

    @rule(statuses=st.sampled_from([list(TERMINAL), ["completed"], ["failed", "cancelled"]]))
    def prune_rolled_back(self, statuses):
        """``control.prune`` of everything finished (``--older-than 0s``) in a transaction of its
        own, looked at, then rolled back (the model keeps every run to check): what a prune at
        this moment would remove must be nothing a run that stays may need."""
        if self.skipping:
            return
        with psycopg.connect(self.dsn) as conn:
            before = prune_view(conn)
            pruned = control.prune(conn, timedelta(0), statuses)
            after = prune_view(conn)
            conn.rollback()
        self.log(
            f"prune {statuses} (rolled back): {pruned.workflows} workflow(s), {pruned.workers} worker(s)"
        )
        self.env.figures["prunes"] += 1
        self.expect(not prune_broke(before, after), "; ".join(prune_broke(before, after)))

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
            self._stop(worker)
        try:
            # a statement sent before the stop still runs to its commit: wait for it. A session
            # frozen right after its BEGIN (psycopg's transaction() sends it alone) holds no lock
            # but its own virtual transaction id, and no snapshot: it keeps nothing from anyone.
            deadline = time.monotonic() + FROZEN_SETTLE
            while busy := query(
                self.dsn,
                "SELECT a.state, left(a.query, 120) FROM pg_stat_activity a"
                " WHERE a.datname = current_database() AND a.application_name = 'wfctl worker'"
                " AND a.wait_event IS DISTINCT FROM 'advisory'"  # waiting for the listening duty
                " AND a.state <> 'idle' AND (a.state <> 'idle in transaction' OR a.backend_xmin IS NOT NULL"
                "  OR EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.locktype <> 'virtualxid'))",
            ):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if not self.expect(
                not busy,
                f"invariant 11: {FROZEN_SETTLE}s after every worker was frozen (SIGSTOP), a worker's "
                f"session is still busy: {busy} (a transaction left open by a frozen worker keeps its "
                "row locks from every other worker until it runs again)",
            ):
                return
            interval = parse_duration(stale, what="stale")
            ref_before, rec_before, _, _ = stuck_snapshot(self.dsn, interval)
            result = self.cli("recover", "--dry-run", "--stale", stale, "--json")
            ref_after, rec_after, ownerless_after, _ = stuck_snapshot(self.dsn, interval)
        finally:
            for worker in frozen:
                self._cont(worker)
        if not self.expect(result.exit_code == 0, f"recover --dry-run: {result.output}"):
            return
        # what it would requeue or fail as stale (not what it would expire: past a deadline)
        rows = [r for r in json.loads(result.stdout) if r.get("action", "recovered") == "recovered"]
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
        before = len(self.violations)
        with snapshot(self.dsn) as conn:  # one connection for all but invariant 5
            audit_wf = query(conn, AUDIT_WF_SQL)
            self.deferred(check_transitions, audit_wf)
            self.deferred(check_step_writes, conn)
            self.deferred(check_releases, conn, self.hand_backs_explained)
            effects = read_effects(self.effects_path)
            self.deferred(check_executions, effects, audit_wf, self.stopped_by_deploy)
            self.deferred(check_steps_within_lease, effects, query(conn, LEASE_ENDS_SQL), self.stops)
            self.deferred(check_in_one_snapshot, conn)
        self.deferred(self._check_worker_logs)
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
        # as an operator would: no type stays paused or throttled (the code's limits stay)
        for wtype, values in self.operator_limits.items():
            if any(v is not None for v in values.values()):
                with psycopg.connect(self.dsn, connect_timeout=10) as conn:
                    limits.clear(conn, wtype)
                self.operator_limits[wtype] = {}
                self.log(f"cleared the limits set on {wtype} before the drain")
        mark_limit_changes_visible(self.dsn)
        for worker in self.workers:
            if worker.paused:
                self._cont(worker)
                worker.paused = False
        while len([w for w in self.workers if w.alive]) < 2:
            self._start_worker(2)
        self._end_schedules()
        if not self.model:
            return
        last_recover = 0.0
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            left = query(
                self.dsn,
                "SELECT id::text, status, attempt, max_retries, lease_epoch, current_step, lease_owner,"
                " round(extract(epoch FROM run_at - now())::numeric, 2), wait_kind, wait_topic,"
                " wait_remaining FROM workflows WHERE status NOT IN ('completed', 'failed', 'cancelled')",
            )
            if not left:
                return
            self._deliver()
            if time.monotonic() > deadline:
                effects = read_effects(self.effects_path)
                detail = "\n".join(
                    f"  {row} executions={collections.Counter(e.step for e in effects if e.wid == row[0])}"
                    for row in left
                )
                self.violations.append(
                    f"invariant 1: {len(left)} workflow(s) not terminal {DRAIN_TIMEOUT}s after every gate "
                    f"was released and every worker continued (id, status, attempt, max_retries, epoch, "
                    f"step, owner, run_at - now, wait_kind, wait_topic, wait_remaining):\n{detail}"
                )
                return
            if time.monotonic() - last_recover >= 1.0:
                result = self.cli("recover", "--stale", "1s")
                if not self.expect(result.exit_code == 0, f"recover: {result.output}", "while draining"):
                    return
                last_recover = time.monotonic()
                before = len(self.violations)
                self.deferred(check_coordination, self.dsn, where="while draining")
                if len(self.violations) > before:
                    return
            time.sleep(0.1)

    def _check_worker_logs(self) -> None:
        """Invariant 10 on what each worker's log gained since the last look."""
        for worker in self.workers:
            refused, self.log_offsets[worker.index] = refused_statements(
                worker.log, self.log_offsets.get(worker.index, 0)
            )
            assert not refused, f"invariant 10: worker{worker.index} had statements refused: {refused[:3]}"

    def _end_schedules(self) -> None:
        """Before the drain, with live workers again: every active schedule that ticks every few
        seconds fires a tick that falls after this moment (no schedule is left stuck), then every
        schedule is deleted, as an operator would, so that no run comes after the drain."""
        if not self.schedules:
            return
        (start,) = query(self.dsn, "SELECT now()")[0]
        deadline = time.monotonic() + SCHEDULE_LIVENESS
        for name, schedule in sorted(self.schedules.items()):
            if schedule["paused"] or schedule["every"] >= 60:
                continue

            def fired(name: str = name) -> bool:
                return query(
                    self.dsn,
                    "SELECT EXISTS (SELECT FROM workflows WHERE idempotency_key LIKE %s"
                    " AND (input_data ->> 'scheduled_at')::timestamptz >= %s)",
                    (f"schedule:{name}:2%", start),
                )[0][0]

            while not fired() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.expect(
                fired(),
                f"schedule {name} ({schedule}) fired no tick within {SCHEDULE_LIVENESS}s of {start}, with "
                f"{len([w for w in self.workers if w.alive])} live worker(s)",
                "before the drain",
            )
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            for name in sorted(self.schedules):
                schedules.delete(conn, name)
        self.log(f"deleted the schedules {sorted(self.schedules)} before the drain")
        self.schedules.clear()

    def _deliver(self) -> None:
        """As the outside world would: a message for every run parked on a topic where none
        waits (one that waits without a timeout would wait for ever)."""
        for wid, topic in query(
            self.dsn,
            "SELECT w.id::text, w.wait_topic FROM workflows w WHERE w.status = 'pending'"
            " AND w.wait_kind = 'message' AND NOT EXISTS (SELECT FROM workflow_messages m"
            " WHERE m.workflow_id = w.id AND m.topic = w.wait_topic AND m.consumed_at IS NULL)",
        ):
            self._send(wid, topic, None, "api")

    def _final_checks(self):
        figures = self.env.figures
        effects = read_effects(self.effects_path)
        figures["executions"] += len(effects)
        figures["duplicate_executions"] += len(effects) - len({(e.wid, e.step) for e in effects})
        if not self.model or self.skipped_drain:
            return
        where = "after the drain"
        for check in final_check_list(self.dsn, effects, self.model, self.stops, self.stopped_by_deploy):
            self.deferred(check, where=where)
        with contextlib.suppress(AssertionError):  # a violation is reported by the list above
            check_limits(self.dsn, figures)
            check_schedules(self.dsn, figures)
        self.deferred(check_releases, self.dsn, self.hand_backs_explained, where=where)
        if not self.connection_losses:  # a claim that was rolled back held its runs meanwhile
            self.deferred(check_claimed_by_priority, self.dsn, self.crowds, figures, where=where)
        self.deferred(self._check_worker_logs, where=where)
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
        for name, count in query(
            self.dsn,
            "SELECT 'children', count(*) FROM workflows WHERE parent_id IS NOT NULL"
            " UNION ALL SELECT 'timed_out', count(*) FROM workflows WHERE status = 'failed'"
            "  AND error_message LIKE 'timed out%%'"
            " UNION ALL SELECT 'messages_consumed', count(*) FROM workflow_messages"
            "  WHERE consumed_at IS NOT NULL"
            " UNION ALL SELECT 'recv_timeouts', count(*) FROM workflow_steps WHERE step_name LIKE 'recv:%%'"
            "  AND output_data ? 'timed_out'"
            " UNION ALL SELECT 'children_caught', count(*) FROM workflows p,"
            "  jsonb_array_elements(p.output_data -> 'outputs') o WHERE p.status = 'completed'"
            "  AND jsonb_typeof(o) = 'object' AND o ? 'caught'"
            " UNION ALL SELECT 'events_set', count(*) FROM workflow_events"
            " UNION ALL SELECT 'patches_taken', count(*) FROM workflow_steps WHERE step_name = %(marker)s"
            " UNION ALL SELECT 'failures_handled', count(*) FROM workflow_steps WHERE status = 'handled'"
            " UNION ALL SELECT 'steps_tried_again', count(*) FROM workflow_steps WHERE tries > 1",
            {"marker": PATCH_MARKER},
        ):
            figures[name] += count
        figures["slow_poll_examples"] += int(self.poll == SLOW_POLL)


# -- the checks (also used by tests/process/test_stateful_regressions.py) ---------------------------------


def check_claimed_by_priority(
    dsn: str, crowds: list[tuple[str, list[tuple[str, int]]]], figures: collections.Counter
) -> None:
    """Invariant 15: a claim never passes over a higher-priority runnable run that no limit
    holds back. Each crowd was submitted in one transaction (all its runs runnable at once) of
    a type no limit held while it was claimed: no run of it was first claimed by a transaction
    that ended before the transaction that first claimed a run of higher priority began
    (a claim skips a run another transaction has locked, and only then)."""
    first: dict[str, tuple[int, datetime, datetime]] = {}
    for wid, txid, at, tx_now in query(
        dsn,
        "SELECT DISTINCT ON (workflow_id) workflow_id::text, txid, at, tx_now FROM sf_audit_wf"
        " WHERE new_status = 'running' ORDER BY workflow_id, seq",
    ):
        first[wid] = (txid, at, tx_now)
    for _wtype, runs in crowds:
        for low, low_priority in runs:
            for high, high_priority in runs:
                if high_priority <= low_priority or low not in first or high not in first:
                    continue
                (low_tx, low_at, _n), (high_tx, _a, high_began) = first[low], first[high]
                figures["priority_pairs_checked"] += 1
                assert high_tx == low_tx or high_began <= low_at, (
                    f"invariant 15: {low} (priority {low_priority}) was claimed at {low_at}, before the "
                    f"transaction that claimed {high} (priority {high_priority}, submitted with it) began "
                    f"at {high_began}"
                )


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


def check_releases(dsn: str | psycopg.Connection, explained: int) -> None:
    """Invariant 2, the uncounted part: a running workflow goes back to pending without an
    attempt counted and runnable at once (a hand-back: ``run_at = now()``, unlike a park)
    only when its claim's reply may have been lost, so once per connection loss at most, or
    when its worker was stopped by SIGTERM (the deploy: once more), or when its worker had
    claimed it ahead and not started it (handed back after CLAIM_AHEAD_HOLD, or by recovery
    when that worker died). A
    run that ends without a final write, or a replayed sleep that does not park, is handed
    back like that over and over."""
    rows = query(
        dsn,
        "SELECT workflow_id::text, count(*), max(new_epoch) FROM sf_audit_wf WHERE op = 'UPDATE'"
        " AND old_status = 'running' AND new_status = 'pending' AND new_attempt = old_attempt"
        " AND run_at = tx_now AND NOT coalesce(never_started, false) GROUP BY 1 HAVING count(*) > %s",
        (explained,),
    )
    assert not rows, (
        f"invariant 2: runs handed back without a counted attempt more often than the {explained} "
        f"connection loss(es) and deploy of this run explain ((id, hand-backs, last epoch)): {rows}"
    )


def check_step_writes(dsn: str | psycopg.Connection) -> None:
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


def check_executions(
    effects: list[Effect], audit_wf: list[tuple], stopped: frozenset[tuple[str, int]] = frozenset()
) -> None:
    """Invariant 2: at most one execution of a step per epoch, and per (generation, attempt);
    a step with tries of its own, at most as many as it has (``STEP_TRIES``) in each.
    ``stopped``: the leases (run, epoch) a deploy's SIGTERM ended while they ran; a try that
    did not finish within the grace ran again under the next epoch, as the stop hands the run
    back without counting an attempt (or a try: only a finished try is counted)."""
    unknown = [e for e in effects if e.epoch is None]
    assert not unknown, (
        "the effects log has no lease epochs: tests/apps/statefulflows.py epoch_of() no longer finds the "
        "epoch behind the context; update it"
    )
    tries = {(e.wid, e.step): STEP_TRIES.get(e.kind, 1) for e in effects}
    per_epoch = collections.Counter((e.wid, e.step, e.epoch) for e in effects)
    twice = {k: n for k, n in per_epoch.items() if n > tries[k[:2]]}
    assert not twice, (
        f"invariant 2: a step ran more often than its tries under one lease epoch (id, step, epoch): {twice}"
    )
    gens = generations(audit_wf)
    per_attempt: dict[tuple, list[int]] = collections.defaultdict(list)
    for e in effects:
        assert e.epoch is not None
        generation = bisect.bisect_right(gens.get(e.wid, []), e.epoch)
        per_attempt[(e.wid, e.step, generation, e.attempt)].append(e.epoch)
    again = {
        k: v
        for k, v in per_attempt.items()
        if len([x for x in v if (k[0], x) not in stopped]) > tries[k[:2]] or len(v) > 2 * tries[k[:2]]
    }
    assert not again, (
        "invariant 2: a step ran again without a counted attempt or a retry in between "
        f"((id, step, retry generation, attempt): epochs it ran under): {again}"
    )


# When each lease (run, epoch) ended: the first change after which the run no longer runs
# under that epoch (completed, failed, cancelled, parked, requeued, taken by another claim).
LEASE_ENDS_SQL = (
    "SELECT workflow_id::text, old_epoch, extract(epoch FROM min(at))::float8 FROM sf_audit_wf"
    " WHERE op = 'UPDATE' AND old_status = 'running'"
    " AND (new_status <> 'running' OR new_epoch IS DISTINCT FROM old_epoch) GROUP BY 1, 2"
)
# How late after its lease ended a step may still start: the worker starts a step only on a
# lease confirmed (a claim or heartbeat sent) within two thirds of its dead-after (1s here), and
# a cancel or a takeover right after such a confirmation is seen at the next heartbeat; plus
# the scheduling delays of a loaded machine.
LEASE_SLACK = timedelta(seconds=1.5)
# A pause that ends this close before a step's start may have fallen between the worker's lease
# check and the step: the one gap the Guarantees leave open (pause_worker's stops only).
CHECK_GAP = 0.5


def within(predicate: Callable[[], Any], seconds: float) -> bool:
    """Poll ``predicate`` (every 20ms) until it is truthy (True) or ``seconds`` passed (False)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def check_steps_within_lease(effects: list[Effect], lease_ends: list[tuple], stops: list[list[Any]]) -> None:
    """Invariant 12: no step starts after its run reached a final state or left its epoch (by
    more than LEASE_SLACK), unless its worker was stopped anywhere (pause_worker) and continued
    just before the step (CHECK_GAP): a pause between the lease check and the step. A stop
    inside a statement (pause_in_statement) excuses nothing."""
    ends = {(wid, epoch): at for wid, epoch, at in lease_ends}
    late = []
    for e in effects:
        end = ends.get((e.wid, e.epoch))
        if end is None or e.at is None or e.at <= end + LEASE_SLACK.total_seconds():
            continue
        gap = any(
            x[0] == e.pid and x[3] == "anywhere" and x[2] is not None and e.at - CHECK_GAP <= x[2] <= e.at
            for x in stops
        )
        if not gap:
            late.append((e.wid, e.step, e.epoch, round(e.at - end, 3), e.pid))
    assert not late, (
        "invariant 12: a step started after its lease had ended (id, step, epoch, seconds after "
        f"the lease ended, worker pid): {late}"
    )


@contextlib.contextmanager
def snapshot(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection inside one REPEATABLE READ transaction: every query sees the same moment."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            yield conn


def check_messages(conn: psycopg.Connection) -> None:
    """Messages are consumed at most once, by the step and epoch they name, in send order.

    Every recv step write (the audit, across retries) that took a message names one of the
    workflow's messages on its topic, with that message's payload; no message is taken by a
    step write while an earlier one holds it (a retry --from-step deletes the step row of a recv
    it forgets and gives its message back: the replay takes it again); a message is consumed
    exactly when a step write that still stands took it, and its consumed_step and
    consumed_epoch are the latest such write's. Per workflow and topic, the consumed
    messages are the oldest ones (the test sends one message at a time, so id order is commit
    order): no consumed message follows an unconsumed one, and they were consumed in id order.
    A recv that timed out left no message waiting that was sent (1s) before it gave up."""
    messages = {
        r[0]: r
        for r in conn.execute(
            "SELECT id, workflow_id::text, topic, payload, created_at, consumed_at, consumed_step,"
            " consumed_epoch FROM workflow_messages ORDER BY id"
        ).fetchall()
    }
    writes = conn.execute(
        "SELECT seq, workflow_id::text, step_number, step_name, row_epoch, output, at FROM sf_audit_steps"
        " WHERE op <> 'DELETE' AND status = 'completed' AND step_name LIKE 'recv:%' ORDER BY seq"
    ).fetchall()
    taken: dict[int, set[tuple[int, str, int, int]]] = collections.defaultdict(set)
    for seq, wid, number, name, epoch, output, at in writes:
        if "message" in output:
            m = messages.get(output["message"])
            assert m is not None and (m[1], m[2]) == (wid, name[len("recv:") :]), (
                f"recv step {wid} #{number} (epoch {epoch}, audit seq {seq}) took message "
                f"{output['message']}, which is not one of its messages on that topic: {m}"
            )
            assert output["payload"] == m[3], (
                f"recv step {wid} #{number} (audit seq {seq}) returned {output['payload']!r} for message "
                f"{m[0]}, whose payload is {m[3]!r}"
            )
            taken[m[0]].add((seq, wid, number, epoch))
        else:
            assert output.get("timed_out"), f"recv step {wid} #{number}: output {output}"
            waiting = [
                m[0]
                for m in messages.values()
                if (m[1], m[2]) == (wid, name[len("recv:") :])
                and m[4] < at - timedelta(seconds=1)
                and (m[5] is None or m[5] > at)
            ]
            assert not waiting, (
                f"recv step {wid} #{number} (epoch {epoch}, audit seq {seq}) timed out while message(s) "
                f"{waiting} waited on its topic"
            )
    # a retry --from-step gives back the messages of the recv steps it forgets (their step rows
    # deleted): the replay may take one again; a message is never held by two live step rows
    deleted = collections.defaultdict(list)
    for wid, number, seq in conn.execute(
        "SELECT workflow_id::text, step_number, seq FROM sf_audit_steps WHERE op = 'DELETE'"
    ).fetchall():
        deleted[(wid, number)].append(seq)

    def forgotten(take: tuple[int, str, int, int], before: float) -> bool:
        """The step row of ``take`` was deleted after it was written (and before ``before``)."""
        seq, wid, number, _epoch = take
        return any(seq < d < before for d in deleted[(wid, number)])

    for mid, takes in taken.items():
        ordered = sorted(takes)
        held = [(a, b) for a, b in itertools.pairwise(ordered) if not forgotten(a, b[0])]
        assert not held, (
            f"message {mid} taken by a recv step write while an earlier one still held it "
            f"(audit seq, workflow, step, epoch): {held}"
        )
    for mid, wid, topic, _payload, _created, consumed_at, step, epoch in messages.values():
        last = max(taken[mid]) if mid in taken else None
        if consumed_at is None:
            assert last is None or forgotten(last, float("inf")), (
                f"message {mid} is unconsumed, yet step write {last} took it and still stands"
            )
        else:
            assert last is not None and last[1:] == (wid, step, epoch), (
                f"message {mid} to {wid} on {topic!r} is consumed by step {step} under epoch {epoch}; the "
                f"recv step writes that took it: {sorted(taken.get(mid, ()))}"
            )
    by_topic: dict[tuple[str, str], list[tuple]] = collections.defaultdict(list)
    for m in messages.values():
        by_topic[(m[1], m[2])].append(m)
    for (wid, topic), sent in by_topic.items():
        consumed = [m[5] is not None for m in sent]
        assert consumed == sorted(consumed, reverse=True), (
            f"{wid} on {topic!r}: messages {[m[0] for m in sent]} in send order, consumed "
            f"{consumed}: a newer message was taken while an older one waited"
        )
        times = [m[5] for m in sent if m[5] is not None]
        assert times == sorted(times), f"{wid} on {topic!r}: messages were not consumed in send order"


def check_children(conn: psycopg.Connection) -> None:
    """Each start_child step write created exactly one child (a start_children write, one per
    id it names), and every child was created by one (no orphan from a zombie epoch, no second
    child from a replay)."""
    writes = conn.execute(
        "SELECT seq, workflow_id::text, step_number, row_epoch, output FROM sf_audit_steps"
        " WHERE op <> 'DELETE' AND status = 'completed' AND (step_name LIKE 'start_child:%'"
        " OR step_name LIKE 'start_children:%') ORDER BY seq"
    ).fetchall()
    children = {
        str(r[0]): str(r[1])
        for r in conn.execute("SELECT id, parent_id FROM workflows WHERE parent_id IS NOT NULL").fetchall()
    }
    made: dict[str, set[tuple[str, int, int]]] = collections.defaultdict(set)
    for seq, wid, number, epoch, output in writes:
        for child in output if isinstance(output, list) else [output]:
            assert children.get(child) == wid, (
                f"start_child step {wid} #{number} (epoch {epoch}, audit seq {seq}) names {child!r}, which "
                f"is not a child of that workflow (its parent: {children.get(child)})"
            )
            made[child].add((wid, number, epoch))
    orphans = sorted(set(children) - set(made))
    assert not orphans, f"children no start_child step write names (orphans): {orphans}"
    twice = {c: sorted(w) for c, w in made.items() if len(w) > 1}
    assert not twice, f"one child named by several start_child step writes: {twice}"


@dataclass
class PruneView:
    parents: dict[str, str | None]  # workflow -> its parent
    statuses: dict[str, str]
    messages: dict[str, set[int]]  # workflow -> its messages' ids
    steps: dict[str, set[int]]  # workflow -> its step numbers
    workers: dict[str, bool]  # worker -> alive (not stopped, silent for less than its dead-after)


def prune_view(conn: psycopg.Connection) -> PruneView:
    view = PruneView({}, {}, collections.defaultdict(set), collections.defaultdict(set), {})
    for wid, parent, status in conn.execute(
        "SELECT id::text, parent_id::text, status FROM workflows"
    ).fetchall():
        view.parents[wid], view.statuses[wid] = parent, status
    for wid, mid in conn.execute("SELECT workflow_id::text, id FROM workflow_messages").fetchall():
        view.messages[wid].add(mid)
    for wid, number in conn.execute("SELECT workflow_id::text, step_number FROM workflow_steps").fetchall():
        view.steps[wid].add(number)
    for wid, alive in conn.execute(
        "SELECT id, stopped_at IS NULL AND heartbeat_at >= now() - make_interval(secs => dead_after_seconds)"
        " FROM workers"
    ).fetchall():
        view.workers[wid] = alive
    return view


def prune_broke(before: PruneView, after: PruneView) -> list[str]:
    """What a prune (``before`` -> ``after``, one transaction) removed that it must not have: a
    workflow unfinished before it, a child whose parent stays, a message or checkpoint of a
    workflow that stays, a live worker's row."""
    broken = []
    for wid in set(before.parents) - set(after.parents):
        if before.statuses[wid] not in TERMINAL:
            broken.append(f"pruned {wid}, which was {before.statuses[wid]}")
        parent = before.parents[wid]
        if parent is not None and parent in after.parents:
            broken.append(f"pruned {wid}, whose parent {parent} ({after.statuses[parent]}) stays")
    for wid in after.parents:
        lost_messages = before.messages.get(wid, set()) - after.messages.get(wid, set())
        lost_steps = before.steps.get(wid, set()) - after.steps.get(wid, set())
        if lost_messages or lost_steps:
            broken.append(f"{wid} stays, but lost messages {lost_messages} and steps {lost_steps}")
    broken += [
        f"pruned the row of live worker {k}"
        for k, alive in before.workers.items()
        if alive and k not in after.workers
    ]
    return broken


def check_events(conn: psycopg.Connection) -> None:
    """An event's stored value is the one its latest set_event step write set."""
    latest: dict[tuple[str, str], tuple] = {}
    for wid, number, output, seq in conn.execute(
        "SELECT workflow_id::text, step_number, output, seq FROM sf_audit_steps WHERE op <> 'DELETE'"
        " AND status = 'completed' AND step_name LIKE 'set_event:%' ORDER BY seq"
    ).fetchall():
        latest[(wid, output["key"])] = (output["value"], number, seq)
    for wid, key, value, number in conn.execute(
        "SELECT workflow_id::text, key, value, step_number FROM workflow_events"
    ).fetchall():
        write = latest.get((wid, key))
        assert write is not None and write[:2] == (value, number), (
            f"event {key!r} of {wid} is {value!r} (step {number}); the latest set_event step write: {write}"
        )


def check_wakeups(conn: psycopg.Connection) -> None:
    """No lost wake-up, in one snapshot: a workflow parked on children counts exactly its
    unfinished children, and is runnable once none is left; a workflow parked on a topic is
    runnable while a message waits on that topic."""
    rows = conn.execute(
        "SELECT w.id::text, w.wait_kind, w.wait_topic, w.wait_remaining, w.run_at <= now(),"
        " (SELECT count(*) FROM workflows c WHERE c.id = ANY (w.wait_ids)"
        "  AND c.status NOT IN ('completed', 'failed', 'cancelled')),"
        " (SELECT array_agg(m.id) FROM workflow_messages m WHERE m.workflow_id = w.id"
        "  AND m.topic = w.wait_topic AND m.consumed_at IS NULL)"
        " FROM workflows w WHERE w.status = 'pending' AND w.wait_kind IN ('message', 'children')"
    ).fetchall()
    for wid, kind, topic, remaining, runnable, unfinished, waiting in rows:
        if kind == "children":
            assert remaining == unfinished, (
                f"{wid} waits for {remaining} child(ren); {unfinished} of them are unfinished"
            )
            assert unfinished > 0 or runnable, f"lost wake-up: {wid} waits for children that all finished"
        else:
            assert not waiting or runnable, (
                f"lost wake-up: {wid} waits on {topic!r} while message(s) {waiting} wait there"
            )


def parked_step_name(kind: str, topic: str | None) -> str:
    """The step a parked wait of ``kind`` becomes (wfctl/context.py's names)."""
    return {"message": f"recv:{topic}", "children": WAIT_STEP, "sleep": SLEEP_STEP}[kind]


def check_parks(conn: psycopg.Connection) -> None:
    """A parked wait is part of the run's history: every step row written at the step a run
    stands parked at (parked by another transaction than the writing one, and not cleared
    since) is that wait's own step (its kind, its topic). A replay on changed code meets the
    same wait there: no patch marker, no other step takes its place."""
    past: dict[str, list[tuple]] = collections.defaultdict(list)
    for seq, txid, wid, number, kind, topic in conn.execute(
        "SELECT seq, txid, workflow_id::text, wait_step, wait_kind, wait_topic FROM sf_audit_parks"
    ).fetchall():
        name = parked_step_name(kind, topic) if number is not None and kind is not None else None
        past[wid].append((seq, txid, "park", number, name))
    for seq, txid, wid, number, name in conn.execute(
        "SELECT seq, txid, workflow_id::text, step_number, step_name FROM sf_audit_steps WHERE op <> 'DELETE'"
    ).fetchall():
        past[wid].append((seq, txid, "step", number, name))
    for wid, events in past.items():
        events.sort()
        for i, (seq, txid, what, number, name) in enumerate(events):
            if what != "step":
                continue
            standing = next((e for e in reversed(events[:i]) if e[2] == "park" and e[1] != txid), None)
            if standing is None or standing[4] is None or standing[3] != number:
                continue  # (a wait_step left without its wait_kind is no park)
            assert name == standing[4], (
                f"{wid} stood parked in {standing[4]!r} at step {number} (audit seq {standing[0]}), and "
                f"step {name!r} was written there (audit seq {seq}): a parked wait is history"
            )


COORDINATION_CHECKS = (
    check_messages,
    check_children,
    check_cancelled_trees,
    check_events,
    check_wakeups,
    check_parks,
)


def check_coordination(dsn: str) -> None:
    with snapshot(dsn) as conn:
        for check in COORDINATION_CHECKS:
            check(conn)


def check_in_one_snapshot(conn: psycopg.Connection) -> None:
    """Invariants 6, 8 and 9 after a rule, in the snapshot of ``conn``. (The changes of the
    limits a rule made are marked visible by the rule.)"""
    for check in COORDINATION_CHECKS:
        check(conn)
    check_limits(conn)
    check_schedules(conn)


def refused_statements(log: Path, offset: int = 0) -> tuple[list[str], int]:
    """Invariant 10: the lines of a worker's log, from byte ``offset`` to its last complete
    line, that say the database refused a statement of the worker other than by losing the
    connection (an error in the engine's SQL: a claim refused every time leaves its runs
    unclaimed, and nothing else would notice); and the offset to look from next time."""
    if not log.exists():
        return [], offset
    with open(log, "rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]
    refused = [
        line
        for line in complete.decode(errors="replace").splitlines()
        if "the database refused" in line and not any(c in line for c in CONNECTION_TROUBLE)
    ]
    return refused, offset + len(complete)


# -- flow control ------------------------------------------------------------------


@dataclass(frozen=True)
class InForce:
    """A type's limits in force after one change (None: no limit of that kind)."""

    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_count: int | None = None
    rate_seconds: float | None = None

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.key_concurrency is not None or self.rate_count is not None

    @property
    def burst(self) -> int:
        """The starts a rate lets go at once (wfctl_rate_burst: 200 ms worth, at least one)."""
        assert self.rate_count is not None and self.rate_seconds is not None
        return max(1, min(self.rate_count, math.floor(self.rate_count * 0.2 / self.rate_seconds)))


UNLIMITED = InForce()
# How long a claim's commit may trail the end of its statement (the server's own work only: a
# frozen worker does not hold its claim's commit back, the statement commits on its own).
COMMIT_SLACK = timedelta(seconds=1)


def mark_limit_changes_visible(dsn: str) -> None:
    """Every change of the limits this statement sees has committed by now."""
    query(
        dsn, "UPDATE sf_limit_changes SET visible_by = clock_timestamp() WHERE visible_by IS NULL RETURNING 1"
    )


def check_limits(source: str | psycopg.Connection, figures: collections.Counter | None = None) -> None:
    """Flow control: no claim leaves more runs of a type holding a lease than its concurrency
    limit in force (0: paused, no claim at all), nor more of one key than its per-key limit,
    and the claims within one rate setting start no more than the rate and its burst allow.

    A limited type's claims and its limit's changes serialize on the type's row in
    workflow_limits, and the audit's times are taken while that lock is held (sf_claims.at, at
    the end of the claiming statement, counting in a fresh snapshot; sf_limit_changes.at): a
    claim obeys the last change before it. A lowered limit does not stop runs already leased:
    a claim after it takes nothing while they hold it, so the count right after any claim that
    took a run is within the limit in force.

    The one exception is a claim whose statement began before a change committed that made an
    unlimited type limited (sf_limit_changes.visible_by, an upper bound of the commit): its
    snapshot may still see the type unlimited, and the claim then takes the plain path without
    the lock (the limit applies from the next claim round). Such a claim is exempt, and so is,
    for the counts, a claim that counted while an exempt one may have been committing.

    The rate: the claims in lock order between two changes, each with its transaction's now()
    (the GCRA's clock), n starts each: for any j <= k, the starts of claims j..k are at most
    (now_k - now_j) / interval + burst (the theoretical arrival time moves by one interval per
    start, from at least now_j, and may run at most a burst ahead of now_k)."""
    if isinstance(source, str):  # a DSN: every change seen has committed, then one snapshot
        mark_limit_changes_visible(source)
        with snapshot(source) as conn:
            check_limits(conn, figures)
        return
    change_rows = source.execute(
        "SELECT workflow_type, at, visible_by, concurrency, key_concurrency, rate_count, rate_seconds"
        " FROM sf_limit_changes ORDER BY at"
    ).fetchall()
    claim_rows = source.execute(
        "SELECT txid, at, stmt_at, tx_now, workflow_type, concurrency_key, claimed, running, key_running"
        " FROM sf_claims ORDER BY at, seq"
    ).fetchall()
    changes: dict[str, list[tuple[datetime, datetime | None, InForce]]] = collections.defaultdict(list)
    for wtype, at, visible_by, *values in change_rows:
        changes[wtype].append((at, visible_by, InForce(*values)))
    # one claim of one type: (at, stmt_at, tx_now, runs taken, running after, {key: (taken, running)})
    claims: dict[tuple[int, str], list[Any]] = {}
    for txid, at, stmt_at, tx_now, wtype, key, taken, running, key_running in claim_rows:
        entry = claims.setdefault((txid, wtype), [at, stmt_at, tx_now, 0, running, {}])
        entry[3] += taken
        if key is not None:
            entry[5][key] = (taken, key_running)
    exempt: dict[str, list[datetime]] = collections.defaultdict(list)
    judged: list[tuple[str, int, InForce, list[Any]]] = []
    for (_txid, wtype), entry in sorted(claims.items(), key=lambda item: item[1][0]):
        at, stmt_at = entry[0], entry[1]
        past = changes.get(wtype, [])
        before = bisect.bisect_left([c[0] for c in past], at)  # the changes locked before the claim
        in_force = past[before - 1][2] if before else UNLIMITED
        # what the claim's snapshot may have seen: the last change surely committed when its
        # statement began, or any later one locked before it
        surely = max(
            (i for i in range(before) if past[i][1] is not None and past[i][1] < stmt_at), default=-1
        )
        seen = [UNLIMITED if surely < 0 else past[surely][2]] + [
            past[i][2] for i in range(surely + 1, before)
        ]
        if not all(c.limited for c in seen):  # it may have taken the plain path
            exempt[wtype].append(at)
            if figures is not None and in_force.limited:
                figures["claims_exempt"] += 1
            continue
        judged.append((wtype, before, in_force, entry))
    rates: dict[tuple[str, int], list[tuple[datetime, int]]] = collections.defaultdict(list)
    for wtype, before, in_force, (at, stmt_at, tx_now, taken, running, keys) in judged:
        if in_force.rate_count is not None:
            rates[(wtype, before)].append((tx_now, taken))
        racing = any(stmt_at - COMMIT_SLACK < x < at for x in exempt.get(wtype, []))
        if racing:
            continue
        where = f"a claim of {taken} {wtype} run(s) at {at} under {in_force}"
        if in_force.concurrency is not None:
            assert running <= in_force.concurrency, (
                f"flow control: {where} left {running} running (concurrency {in_force.concurrency})"
            )
            if figures is not None:
                figures["claims_checked"] += 1
                figures["claims_reaching_the_limit"] += int(running == in_force.concurrency)
        if in_force.key_concurrency is not None:
            over = {k: r for k, (_n, r) in keys.items() if r > in_force.key_concurrency}
            assert not over, f"flow control: {where} left these keys over their limit: {over}"
            if figures is not None:
                figures["keyed_claims_checked"] += len(keys)
    for (wtype, before), starts in rates.items():
        in_force = changes[wtype][before - 1][2]
        assert in_force.rate_count is not None and in_force.rate_seconds is not None
        interval = in_force.rate_seconds / in_force.rate_count
        for j in range(len(starts)):
            total = 0
            for k in range(j, len(starts)):
                total += starts[k][1]
                allowed = (starts[k][0] - starts[j][0]).total_seconds() / interval + in_force.burst
                assert total <= allowed + 1e-6, (
                    f"flow control: {total} {wtype} starts from the claim at {starts[j][0]} to the one "
                    f"at {starts[k][0]} (now() of each) under {in_force} (burst {in_force.burst}): at "
                    f"most {allowed:.3f} allowed"
                )
        if figures is not None:
            figures["rate_claims_checked"] += len(starts)


# -- schedules ---------------------------------------------------------------------


def is_tick(every: int, instant: datetime) -> bool:
    """Whether ``instant`` is a tick of EVERY_CRON[every] (every N seconds, or every minute):
    the test's own oracle, independent of wfctl/cron.py and cronsim."""
    return instant.microsecond == 0 and instant.second % every == 0


def tick_after(every: int, instant: datetime) -> datetime:
    tick = instant.replace(microsecond=0) + timedelta(seconds=1)
    while not is_tick(every, tick):
        tick += timedelta(seconds=1)
    return tick


def ticks_through(every: int, since: datetime, until: datetime) -> list[datetime]:
    """The ticks from ``since`` to ``until``, both included."""
    out = []
    tick = since if is_tick(every, since) else tick_after(every, since)
    while tick <= until:
        out.append(tick)
        tick = tick_after(every, tick)
    return out


BACKFILL_LIMIT = schedules.BACKFILL_LIMIT


def check_schedules(source: str | psycopg.Connection, figures: collections.Counter | None = None) -> None:
    """Schedules, over everything so far, in the order of each schedule's row lock (a firing,
    an add, an edit, a pause, a resume and a delete all hold it, and the audit's times are
    taken under it): no tick gives two runs; a tick's run says its tick in "scheduled_at"; a
    run is fired only while its schedule exists and is not paused (after a pause, nothing
    until a resume), never before its tick, never for a tick that is not one of the expression
    in force, never for a tick before the schedule's next tick (an add, an edit and a resume
    set it to the first tick after their now(): none of them fires at once); each firing fires
    the latest due tick once, or with backfill every due tick (up to the bound), then moves the
    next tick to the first after its now(). A trigger's run is stored while the schedule exists
    (paused or not), with its now() as "scheduled_at"."""
    if isinstance(source, str):
        with snapshot(source) as conn:
            check_schedules(conn, figures)
        return
    changes = source.execute(
        "SELECT at, 1, name, txid, tx_now, op, cron, paused, backfill, next_tick_at, definition_changed"
        " FROM sf_schedule_changes"
    ).fetchall()
    runs = source.execute(
        "SELECT a.at, 0, w.idempotency_key, a.txid, a.tx_now, w.input_data ->> 'scheduled_at', w.id::text"
        " FROM workflows w JOIN sf_audit_wf a ON a.workflow_id = w.id AND a.op = 'INSERT'"
        " WHERE w.idempotency_key LIKE 'schedule:%'"
    ).fetchall()
    events: dict[str, list[tuple]] = collections.defaultdict(list)
    for row in changes:
        events[row[2]].append(row)
    for row in runs:
        _, name, _rest = row[2].split(":", 2)
        events[name].append(row)
    for name, past in events.items():
        past.sort(key=lambda e: (e[0], e[1]))  # a firing's runs come before its own advance
        state: dict[str, Any] | None = None
        seen: dict[datetime, str] = {}  # tick -> its run
        fired: dict[int, list[datetime]] = collections.defaultdict(list)  # firing txid -> ticks
        for event in past:
            at, is_change, _n, txid, tx_now = event[:5]
            where = f"schedule {name} at {at}"
            if not is_change:
                key, scheduled_at, wid = event[2], event[5], event[6]
                rest = key.split(":", 2)[2]
                assert state is not None, f"{where}: run {wid} ({key}) stored while no such schedule existed"
                if rest.startswith("trigger:"):
                    assert scheduled_at == cron.iso(tx_now), (
                        f"{where}: triggered run {wid} says {scheduled_at}"
                    )
                    continue
                tick = datetime.strptime(rest, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=tx_now.tzinfo)
                assert scheduled_at == rest, f"{where}: run {wid} of tick {rest} says {scheduled_at}"
                assert tick not in seen, f"{where}: tick {rest} fired twice: {seen.get(tick)} and {wid}"
                seen[tick] = wid
                assert not state["paused"], (
                    f"{where}: run {wid} for {rest} fired while the schedule was paused"
                )
                assert is_tick(state["every"], tick), f"{where}: {rest} is no tick of {state['cron']!r}"
                assert tick <= tx_now, f"{where}: run {wid} for {rest} fired early, at {tx_now}"
                assert tick >= state["next"], (
                    f"{where}: run {wid} for {rest}, before the schedule's next tick {state['next']} (set by "
                    f"its {state['set_by']})"
                )
                fired[txid].append(tick)
                continue
            op, expression, paused, backfill, next_tick, definition = event[5:]
            if op == "DELETE":
                assert state is not None, f"{where}: deleted twice"
                state = None
                continue
            if op == "INSERT" or definition:
                kind = (
                    "add"
                    if op == "INSERT"
                    else "pause"
                    if paused and not state["paused"]  # type: ignore[index]
                    else "resume"
                    if not paused and state["paused"]  # type: ignore[index]
                    else "edit"
                )
                assert (op == "INSERT") == (state is None), (
                    f"{where}: {op} of a schedule that existed: {state}"
                )
                every = CRON_EVERY[expression]
                if kind != "pause":
                    expected = tick_after(every, tx_now)
                    assert next_tick == expected, (
                        f"{where}: its {kind} (now() {tx_now}) set the next tick to {next_tick}, not the "
                        f"first tick after now, {expected}"
                    )
                if kind == "edit":
                    assert paused == state["paused"], f"{where}: an edit changed its pause"  # type: ignore[index]
                state = {
                    "every": every,
                    "cron": expression,
                    "paused": paused,
                    "backfill": backfill,
                    "next": next_tick,
                    "set_by": f"{kind} at {at}",
                }
                continue
            # a firing: the runs of this transaction are its ticks
            assert state is not None and not state["paused"], f"{where}: fired a schedule in state {state}"
            due = ticks_through(state["every"], state["next"], tx_now)
            expected = due[-BACKFILL_LIMIT:] if state["backfill"] else due[-1:]
            got = fired.pop(txid, [])
            lost = [t for t in expected if t not in got and t not in seen]
            assert (
                (got or all(t in seen for t in expected)) and all(t in expected for t in got) and not lost
            ), (
                f"{where}: a firing at {tx_now} from the next tick {state['next']} (backfill "
                f"{state['backfill']}) fired {[cron.iso(t) for t in got]}; expected "
                f"{[cron.iso(t) for t in expected]}"
            )
            assert next_tick == tick_after(state["every"], tx_now), (
                f"{where}: a firing at {tx_now} moved the next tick to {next_tick}, not the first after it"
            )
            state.update(next=next_tick, set_by=f"firing at {at}")
            if figures is not None:
                figures["schedule_firings_checked"] += 1
                figures["schedule_catch_ups"] += int(len(due) > 1)
        assert not fired, f"schedule {name}: runs fired without moving the schedule on: {dict(fired)}"


AUDIT_WF_SQL = (
    "SELECT workflow_id::text, seq, txid, op, old_status, new_status, old_epoch, new_epoch,"
    " old_attempt, new_attempt, max_retries FROM sf_audit_wf ORDER BY seq"
)


DEADLINE_SLACK = timedelta(seconds=0.5)  # the worker's clock and the deadline duty's beat


def final_checks(
    dsn: str, effects: list[Effect], model: dict[str, Wf], stops: list[list[Any]] | None = None
) -> None:
    """Every check after the drain; raises the first violation."""
    for check in final_check_list(dsn, effects, model, stops):
        check()


def with_children(dsn: str, model: dict[str, Wf]) -> dict[str, Wf]:
    """The model, the child workflows the runs started and the runs schedules submitted (their
    spec is their input)."""
    out = dict(model)
    for wid, data, wtype, child in query(
        dsn,
        "SELECT id::text, input_data, workflow_type, parent_id IS NOT NULL FROM workflows"
        " WHERE parent_id IS NOT NULL OR idempotency_key LIKE 'schedule:%'",
    ):
        out.setdefault(wid, Wf(data["steps"], None, "child" if child else "schedule", None, wtype))
    return out


def final_check_list(
    dsn: str,
    effects: list[Effect],
    model: dict[str, Wf],
    stops: list[list[Any]] | None = None,
    stopped: frozenset[tuple[str, int]] = frozenset(),
) -> list:
    """The checks after the drain, one callable each (the machine reports each one's failure).
    ``stops``: [pid, SIGSTOP time, SIGCONT time or None] of every worker pause; ``stopped``: the
    leases a deploy's SIGTERM ended (``check_executions``)."""
    model = with_children(dsn, model)
    workflows = {
        str(r[0]): r[1:]
        for r in query(
            dsn,
            "SELECT id, status, attempt, max_retries, lease_epoch, current_step, output_data, error_message,"
            " finished_at, deadline_error, parent_id::text FROM workflows",
        )
    }
    audit_wf = query(dsn, AUDIT_WF_SQL)
    # per workflow: [(at, op, old status, new status, new epoch, deadline_at)], in order
    history: dict[str, list[tuple]] = collections.defaultdict(list)
    for row in query(
        dsn,
        "SELECT workflow_id::text, at, op, old_status, new_status, new_epoch, deadline_at FROM sf_audit_wf"
        " ORDER BY seq",
    ):
        history[row[0]].append(row[1:])
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
    tries_of = {
        (wid, number): tries
        for wid, number, tries in query(
            dsn, "SELECT workflow_id::text, step_number, tries FROM workflow_steps"
        )
    }
    events = {
        str(r[0]): r[1]
        for r in query(dsn, "SELECT workflow_id, value FROM workflow_events WHERE key = %s", (EVENT_KEY,))
    }
    ran: dict[tuple[str, int], list[Effect]] = collections.defaultdict(list)
    for e in effects:
        ran[(e.wid, e.step)].append(e)
    rows_of: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    for wid, number, name, status, output, epoch, attempt in steps:
        rows_of[wid][number] = (name, status, output, epoch, attempt)
    generations_of = generations(audit_wf)
    retried = {wid for wid, gens in generations_of.items() if gens}
    first_retry = {wid: gens[0] for wid, gens in generations_of.items() if gens}

    def spec_of(wid: str) -> list[list[Any]]:
        """The items the run went through (the deploy's patch, where it took it)."""
        return patched_spec(model[wid].steps, rows_of[wid])

    def deadline_of(wid: str) -> datetime | None:
        """The deadline the run had from its submit (a retry removes it)."""
        return history[wid][0][5] if history[wid] and history[wid][0][1] == "INSERT" else None

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
        for key, past in by_step.items():
            for i, (_w, _n, seq, _txid, op, status, epoch) in enumerate(past):
                if op == "DELETE" or status not in ("completed", "handled"):  # a handled failure is history
                    continue
                until = None
                for later in past[i + 1 :]:
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
            plan = engine_steps(spec_of(wid))
            what = plan[number - 1][0] if number <= len(plan) else "?"
            if status == "completed" and what == "effect":
                producers = [(e.epoch, e.attempt) for e in ran[(wid, number)] if e.nonce == output]
                assert producers == [(epoch, attempt)], (
                    f"invariant 3: checkpoint {wid} #{number} = {output!r}, written under epoch {epoch} "
                    f"attempt {attempt}, is the output of the execution(s) under {producers}"
                )
                kind = spec_of(wid)[plan[number - 1][1]][0]
                if kind in STEP_TRIES:
                    tries_counted_in_the_checkpoint(wid, number, epoch, attempt)
            if status == "handled":  # a saga's failure: an execution under that epoch raised it
                raised = {(e.epoch, e.attempt) for e in ran[(wid, number)]}
                assert what == "handled" and (epoch, attempt) in raised, (
                    f"invariant 3: handled failure {wid} #{number} ({what}), written under epoch {epoch} "
                    f"attempt {attempt}; the step ran under {sorted(raised)}"
                )

    def tries_counted_in_the_checkpoint(wid: str, number: int, epoch: int, attempt: int) -> None:
        # invariant 2: a step with tries of its own counts, in its checkpoint, every try its
        # attempt made (of this retry generation), across the executions a parked backoff
        # spans; a try a deploy's stop cut short may or may not have been counted
        gens = generations_of.get(wid, [])
        generation = bisect.bisect_right(gens, epoch)
        made = [
            e
            for e in ran[(wid, number)]
            if e.attempt == attempt and bisect.bisect_right(gens, e.epoch) == generation
        ]
        sure = [e for e in made if (wid, e.epoch) not in stopped]
        assert len(sure) <= tries_of[(wid, number)] <= len(made), (
            f"invariant 2: checkpoint {wid} #{number} (epoch {epoch}, attempt {attempt}) counts "
            f"{tries_of[(wid, number)]} tries; the attempt made {len(made)} under epochs "
            f"{[e.epoch for e in made]}"
        )

    def expected_outputs(wid: str) -> list[Any]:
        """What a completed run returns, by its step rows (and its children's rows)."""
        spec, rows = spec_of(wid), rows_of[wid]
        out: list[Any] = []
        number = 0
        for index, (kind, arg) in enumerate(spec):
            number += 1
            if kind == "patch":  # its marker, then its effect; the run returns neither
                number += 1
            elif kind == "saga":  # the handled failure, then the undo, whose output it returns
                number += 1
                out.append(rows[number][2])
            elif kind == "sleep":
                out.append(None)
            elif kind == "recv":
                out.append(rows[number][2].get("payload"))
            elif kind == "event":
                out.append(sum(1 for k, _ in spec[: index + 1] if k == "event"))
            elif kind == "children":
                specs, catch, together = arg
                if together:
                    ids = rows[number][2]
                    number += 1
                else:
                    ids = [rows[number + j][2] for j in range(len(specs))]
                    number += len(specs)
                joined = rows[number][2]["children"]
                assert [c["id"] for c in joined] == ids, (
                    f"{wid}: the wait at step {number} joined {[c['id'] for c in joined]}, its start_child "
                    f"steps started {ids}"
                )
                for j, child in enumerate(joined):
                    status, output = workflows[child["id"]][0], workflows[child["id"]][5]
                    assert model[child["id"]].steps == specs[j] and workflows[child["id"]][9] == wid, (
                        f"{wid}: child {child['id']} (#{j + 1} of the item before step {number}) runs "
                        f"{model[child['id']].steps} for parent {workflows[child['id']][9]}, not {specs[j]}"
                    )
                    assert (child["status"], child["output"]) == (status, output), (
                        f"{wid}: the wait at step {number} recorded child {child['id']} as "
                        f"{child['status']} {child['output']}; it is {status} {output}"
                    )
                bad = [c for c in joined if c["status"] != "completed"]
                if not bad:
                    out.append([c["output"] for c in joined])
                elif catch:
                    out.append({"caught": bad[0]["id"], "status": bad[0]["status"]})
                else:
                    out.append(f"<uncaught ChildFailed of {bad[0]['id']}: the run cannot complete>")
            else:
                out.append(rows[number][2])
        return out

    def completed_runs_are_whole() -> None:
        # invariant 3: a completed workflow has every step checkpointed and returned them (the
        # payloads it received, its children's outputs), and its last event stands
        for wid, (status, _attempt, _mr, _epoch, current, output, *_rest) in workflows.items():
            if status != "completed":
                continue
            spec, rows = spec_of(wid), rows_of[wid]
            plan = engine_steps(spec)
            assert sorted(rows) == list(range(1, len(plan) + 1)) and current == len(plan), (
                f"invariant 3: {wid} completed with steps {sorted(rows)} (current_step {current}) "
                f"of {len(plan)}"
            )
            wanted = {n: "handled" if w == "handled" else "completed" for n, (w, _i) in enumerate(plan, 1)}
            assert {n: r[1] for n, r in rows.items()} == wanted, f"{wid} completed with step rows {rows}"
            expected = expected_outputs(wid)
            assert output == {"outputs": expected}, (
                f"invariant 3: {wid} returned {output}, its checkpoints say {expected}"
            )
            count = sum(1 for k, _ in spec if k == "event")
            assert events.get(wid) == (count or None), (
                f"{wid} completed after {count} event step(s); its event {EVENT_KEY!r} is {events.get(wid)}"
            )

    def failed_runs_used_their_attempts() -> None:
        # a run fails at once (without using its attempts) only past its deadline, on a child
        # that failed (uncaught), or on a PermanentError (a child's "fatal" step)
        for wid, (status, attempt, max_retries, _ep, _cur, _out, error, *_rest) in workflows.items():
            if status != "failed":
                continue
            kinds = {k for k, _ in model[wid].steps}
            uncaught = any(k == "children" and not a[1] for k, a in model[wid].steps)
            if "timed out" in (error or "") and deadline_of(wid) is not None and wid not in retried:
                continue
            if error and error.startswith("ChildFailed: ") and uncaught:
                continue
            if error and error.startswith("PermanentError: ") and "fatal" in kinds:
                continue
            assert attempt == max_retries_of(max_retries) + 1, (
                f"invariant 4: {wid} failed at attempt {attempt} of {max_retries_of(max_retries) + 1}: "
                f"{error}"
            )

    def deadlines_hold() -> None:
        # a run with a deadline (and no retry since, which removes it) that ended more than a
        # moment after its deadline ended failed with its deadline's error, or cancelled, or
        # was ended by an execution that held the run since before the deadline (its last step
        # began in time; the end of a run is not a step boundary). No run timed out early.
        for wid, (status, *_r, error, finished, deadline_error, _parent) in workflows.items():
            deadline = deadline_of(wid)
            if deadline is None or wid in retried:
                continue
            timed_out = status == "failed" and error == deadline_error
            if timed_out:
                assert finished >= deadline - timedelta(seconds=0.1), (
                    f"{wid} timed out at {finished}, before its deadline {deadline}"
                )
            if finished <= deadline + DEADLINE_SLACK or timed_out or status == "cancelled":
                continue
            past = history[wid]
            end = max(i for i, h in enumerate(past) if h[3] in TERMINAL)
            claims = [h for h in past[:end] if h[3] == "running"]
            assert claims and claims[-1][0] <= deadline + DEADLINE_SLACK, (
                f"{wid} ended {status} ({error}) at {finished}, past its deadline {deadline}, by an "
                f"execution claimed at {claims[-1][0] if claims else None}"
            )

    def no_run_completes_past_its_deadline() -> None:
        # the deadline fences the completion in the database: none commits after it
        late = query(
            dsn,
            "SELECT id::text, finished_at, deadline_at FROM workflows WHERE status = 'completed'"
            " AND deadline_at IS NOT NULL AND finished_at > deadline_at + %s",
            (DEADLINE_SLACK,),
        )
        assert not late, f"invariant 8: completed past the deadline (id, finished, deadline): {late}"

    def steps_begin_before_the_deadline() -> None:
        # no step function of a run began after the run's deadline, unless its worker was frozen
        # (SIGSTOP) meanwhile: the step boundary reads a clock that a freeze between the claim and
        # its reply, or between the check and the step, puts behind
        claimed_at = {(w, h[4]): h[0] for w, past in history.items() for h in past if h[3] == "running"}
        for e in effects:
            deadline = deadline_of(e.wid)
            if deadline is None or e.at is None or e.epoch is None:
                continue
            if e.wid in first_retry and e.epoch >= first_retry[e.wid]:
                continue
            began = datetime.fromtimestamp(e.at, deadline.tzinfo)
            if began <= deadline + DEADLINE_SLACK:
                continue
            since = claimed_at.get((e.wid, e.epoch), deadline).timestamp()
            frozen = [x for x in stops or [] if x[0] == e.pid and x[1] <= e.at and (x[2] or e.at) >= since]
            assert frozen, (
                f"step {e.step} ({e.kind}) of {e.wid} began at {began}, past the run's deadline {deadline}, "
                f"under epoch {e.epoch} (claimed at {claimed_at.get((e.wid, e.epoch))}; its worker was not "
                "frozen)"
            )

    def patches_only_where_they_belong() -> None:
        # the deploy's patch is taken in front of a run's first wait item, or not at all
        for wid in model:
            spec_of(wid)

    return [
        patches_only_where_they_belong,
        lambda: check_transitions(audit_wf),
        lambda: check_step_writes(dsn),
        lambda: check_executions(effects, audit_wf, stopped),
        lambda: check_coordination(dsn),
        lambda: check_limits(dsn),
        lambda: check_schedules(dsn),
        checkpointed_steps_never_rerun,
        checkpoints_name_their_execution,
        completed_runs_are_whole,
        failed_runs_used_their_attempts,
        deadlines_hold,
        no_run_completes_past_its_deadline,
        steps_begin_before_the_deadline,
        terminal,
    ]


# -- the test -------------------------------------------------------------------------------------


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


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
