"""Counterexamples found by the stateful test (tests/process/test_stateful.py), as plain tests.

Each test is the shrunk rule sequence Hypothesis printed, made deterministic (gates and waits
for conditions instead of timing), with real worker processes, the real CLI and the same
workflow (tests/apps/statefulflows.py ``sf-flow``), the same audit tables and the same
invariant checks as the stateful test. The docstring of each gives the sequence as found, the
engine it was found on, and the invariant it broke.

The flow-control tests at the end check the stateful test's flow-control check itself
(``check_limits``): it accepts a limit lowered under runs already leased, and it catches a
claim that ignores the limits (the claim's SQL function replaced in the test's own database).
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import APPS, Result, wait_for, wait_for_worker_session
from test_stateful import (
    CAPPED,
    TERMINAL,
    TYPE,
    Effect,
    Wf,
    check_limits,
    check_releases,
    check_schedules,
    clean_env,
    final_checks,
    install_audit,
    mark_limit_changes_visible,
    query,
    read_effects,
    refused_statements,
)

import wfctl
from wfctl import limits, schedules


class Harness:
    """Worker processes of ``statefulflows`` with their effects log and gate directory, the
    CLI, and the stateful test's invariant checks."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        install_audit(dsn)
        self.dsn = dsn
        self.tmp = tmp
        self.gates = tmp / "gates"
        self.gates.mkdir()
        self.effects_path = tmp / "effects.log"
        self.procs: list[subprocess.Popen[str]] = []
        self.model: dict[str, Wf] = {}

    def env(self) -> dict[str, str]:
        extra = {"WFCTL_SF_LOG": str(self.effects_path), "WFCTL_SF_GATES": str(self.gates)}
        return clean_env(self.dsn, extra)

    def start(self, concurrency: int = 1, *args: str) -> subprocess.Popen[str]:
        log = self.tmp / f"worker{len(self.procs)}.log"
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
                    "200ms",
                    "--poll",
                    "100ms",
                    "--log-format",
                    "plain",
                    *args,
                ],
                cwd=APPS,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        proc.log_path = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def cli(self, *args: str) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "wfctl", *args],
            cwd=APPS,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def submit(
        self,
        steps: list[list[Any]],
        max_retries: int | None = None,
        workflow_type: str = TYPE,
        concurrency_key: str | None = None,
    ) -> str:
        wid = str(
            wfctl.submit(
                self.dsn,
                workflow_type,
                {"steps": steps},
                max_retries=max_retries,
                concurrency_key=concurrency_key,
            )
        )
        self.model[wid] = Wf(steps, max_retries, "api", None, workflow_type, concurrency_key)
        return wid

    def submit_together(self, steps: list[list[Any]], runs: list[tuple[str, str | None]]) -> list[str]:
        """One run of ``steps`` per (type, concurrency key) in ``runs``, in one transaction."""
        with psycopg.connect(self.dsn) as conn:
            wids = [str(wfctl.submit(conn, t, {"steps": steps}, concurrency_key=k)) for t, k in runs]
        for wid, (workflow_type, key) in zip(wids, runs, strict=True):
            self.model[wid] = Wf(steps, None, "api", None, workflow_type, key)
        return wids

    def limit(self, *args: str) -> None:
        """`wfctl limit ARGS`; the change has committed when it returns."""
        result = self.cli("limit", *args)
        assert result.exit_code == 0, result.output
        mark_limit_changes_visible(self.dsn)

    def set_limits(self, workflow_type: str, **values: Any) -> None:
        """The library's equivalent of `wfctl limit` (faster than a process): ``clear=True``, or
        concurrency=, key_concurrency=, rate= ("2/s")."""
        with psycopg.connect(self.dsn) as conn:
            if values.pop("clear", False):
                limits.clear(conn, workflow_type)
            else:
                if values.get("rate") is not None:
                    values["rate"] = limits.parse_rate(values["rate"])
                limits.set_limits(conn, workflow_type, **values)
        mark_limit_changes_visible(self.dsn)

    def status_count(self, workflow_type: str, status: str) -> int:
        return query(
            self.dsn,
            "SELECT count(*) FROM workflows WHERE workflow_type = %s AND status = %s",
            (workflow_type, status),
        )[0][0]

    def row(self, wid: str) -> tuple:
        return query(
            self.dsn,
            "SELECT status, attempt, lease_epoch, current_step, error_message FROM workflows WHERE id = %s",
            (wid,),
        )[0]

    def effects(self, wid: str | None = None) -> list[Effect]:
        return [e for e in read_effects(self.effects_path) if wid is None or e.wid == wid]

    def ran(self, wid: str) -> dict[int, list[int]]:
        """Step number -> the attempts it ran under."""
        out: dict[int, list[int]] = collections.defaultdict(list)
        for e in self.effects(wid):
            out[e.step].append(e.attempt)
        return dict(out)

    def wait_terminal(self, wid: str, timeout: float = 30) -> str:
        try:
            return wait_for(lambda: self.row(wid)[0] in TERMINAL and self.row(wid)[0], timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(
                f"invariant 1: {wid} did not finish within {timeout}s: (status, attempt, epoch, step, "
                f"error) = {self.row(wid)}; its steps ran (step: {{attempt: times}}) "
                f"{ {n: dict(collections.Counter(a)) for n, a in self.ran(wid).items()} }"
            ) from exc

    def release(self, wid: str) -> None:
        (self.gates / wid).touch()

    def check(self) -> None:
        """The stateful test's invariants, on what this test did."""
        check_releases(self.dsn, 0)
        final_checks(self.dsn, read_effects(self.effects_path), self.model)
        for proc in self.procs:
            refused, _ = refused_statements(proc.log_path)  # type: ignore[attr-defined]
            assert not refused, f"invariant 10: statements refused: {refused}"

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def sf(dsn, tmp_path):
    harness = Harness(dsn, tmp_path)
    try:
        yield harness
    finally:
        harness.stop_all()


def test_base_exceptions_from_steps_count_as_attempts(sf):
    """Found on 45da174 (before the fixes these tests hold), shrunk to:

        state.begin(concurrencies=[1], specs=[([['ok', 0]], ...), ([['ok', 0]], ...)])
        ... (drop_connections, restart_database, retry of finished workflows: not needed)
        state.submit(steps=[['base', 1], ['exit', 1]], key=None, max_retries=None, via='api')
        -> after 1-3 more rules: invariant 2, step 1 of that workflow ran under epochs
           [1, 2, 3, 4, 5], all in attempt 1 of generation 0.

    A run that ends with a BaseException (here the step's own Abort, then
    SystemExit) has no final write; the worker handed the row back without counting the
    attempt, so it was claimed again at once, forever. Every way an attempt ends must count."""
    wid = sf.submit([["base", 1], ["exit", 1]])
    sf.start()
    assert sf.wait_terminal(wid) == "completed"
    # attempt 1 aborted in step 1; attempt 2 ran both steps once
    assert sf.ran(wid) == {1: [1, 2], 2: [2]}
    assert sf.row(wid)[:2] == ("completed", 2)
    sf.check()


def test_exit_in_every_attempt_ends_failed_after_max_retries(sf):
    """The same hole with a step that always calls sys.exit: max_retries=1 means two attempts,
    then 'failed' with the reason, never a loop."""
    wid = sf.submit([["ok", 0], ["exit", 9]], max_retries=1)
    sf.start()
    assert sf.wait_terminal(wid) == "failed"
    status, attempt, _epoch, _step, error = sf.row(wid)
    assert (status, attempt) == ("failed", 2)
    assert "SystemExit" in error
    assert sf.ran(wid) == {1: [1], 2: [1, 2]}
    sf.check()


def test_a_step_name_the_database_refuses_fails_the_attempt_without_running(sf):
    """A step whose name is longer than workflow_steps.step_name holds: its checkpoint would be
    refused, so the step must not run, and the attempt must count."""
    wid = sf.submit([["ok", 0], ["long", 0]], max_retries=1)
    sf.start()
    assert sf.wait_terminal(wid) == "failed"
    status, attempt, _epoch, current, error = sf.row(wid)
    assert (status, attempt, current) == ("failed", 2, 1)
    assert "200" in error
    assert sf.ran(wid) == {1: [1]}, "the long-named step ran, or the first ran again"
    sf.check()


def test_cancel_and_retry_of_a_sleeping_run_parks_it_again(sf):
    """Found on 45da174, shrunk to:

        state.begin(specs=[([['sleep', '2s'], ['ok', 0], ['ok', 0], ['ok', 0]], None, 1, 'cli'),
                           ([['ok', 0]], None, None, 'cli')], concurrencies=[3])
        state.cancel_then_retry(from_step=2, pick=541)
        -> invariant 2: the run was handed back (running -> pending, no attempt counted,
           runnable at once) with no connection loss to explain it.

    The retried run replays its sleep, whose wake time is still ahead, and
    raised Parked without writing the park: the row stayed 'running' under a worker that no
    longer ran it, which handed it back, claimed it again, and so on until the wake time.
    Expected: the replayed sleep parks the run again, same wake time, nothing counted."""
    wid = sf.submit([["sleep", "3s"], ["ok", 0], ["ok", 0], ["ok", 0]], max_retries=1)
    sf.start(3)
    wait_for(lambda: sf.row(wid)[0] == "pending" and sf.row(wid)[3] == 1, what="the run to park")
    (wake,) = query(sf.dsn, "SELECT run_at FROM workflows WHERE id = %s", (wid,))[0]
    assert sf.cli("cancel", wid).exit_code == 0
    result = sf.cli("retry", wid, "--from-step", "2")
    assert result.exit_code == 0, result.output
    (retried_epoch,) = query(sf.dsn, "SELECT lease_epoch FROM workflows WHERE id = %s", (wid,))[0]
    # claimed again at once (run_at = now()), and parked again until the same wake time
    wait_for(
        lambda: (
            query(
                sf.dsn,
                "SELECT status = 'pending' AND lease_epoch > %s AND run_at = %s FROM workflows WHERE id = %s",
                (retried_epoch, wake, wid),
            )[0][0]
            or sf.row(wid)[0] == "completed"
        ),
        what="the retried run to park again until its wake time",
    )
    assert sf.wait_terminal(wid) == "completed"
    assert sf.ran(wid) == {2: [1], 3: [1], 4: [1]}
    assert sf.row(wid)[:2] == ("completed", 1)
    sf.check()


def test_cancel_and_retry_while_the_same_worker_still_runs_the_old_execution(sf):
    """Found on 45da174 (a run with gate and ok steps only), shrunk to (among no-op rules):

        state.begin(specs=[([['gate', 0], ['ok', 0], ['gate', 0], ['ok', 0]], None, None, 'sql'),
                           ...], concurrencies=[3])
        state.cancel_then_retry(...)           # while the run waits in its first gate
        state.cancel(...); state.retry(...)    # again, with --from-step 3
        state.drop_connections() x 6
        teardown (every gate opens)
        -> invariant 2: step 3 ran under epochs 7 and 8, both attempt 1 of the same retry
           generation.

    One worker held the cancelled execution (still inside its step) and the
    retried one of the same id; when the old one ended it removed the new one's entry, the
    heartbeat handed the new run back as "claimed during a connection loss", and it ran again
    elsewhere while its first execution carried on. Here with numbered gates, so that the new
    run is still inside a step when the old execution ends."""
    wid = sf.submit([["gate", 1], ["ok", 0], ["gate", 2], ["ok", 0]])
    proc = sf.start(2)
    wait_for(lambda: len(sf.effects(wid)) == 1, what="the run to enter its first gate")
    (old_epoch,) = [e.epoch for e in sf.effects(wid)]
    assert sf.cli("cancel", wid).exit_code == 0
    assert sf.cli("retry", wid).exit_code == 0
    # the same worker (the only one) claims the retried run while the old execution waits
    wait_for(lambda: len(sf.effects(wid)) == 2, what="the retried run to enter the first gate")
    (sf.gates / f"{wid}-1").touch()
    wait_for(lambda: any(e.step == 3 for e in sf.effects(wid)), what="the new run to reach its second gate")
    wait_for(
        lambda: any(
            wid in line and "lease lost" in line and f"epoch={old_epoch} " in line
            for line in proc.log_path.read_text().splitlines()
        ),
        what="the old execution to be fenced out",
    )
    (now,) = query(sf.dsn, "SELECT now()")[0]
    wait_for(
        lambda: query(sf.dsn, "SELECT min(heartbeat_at) > %s + interval '0.7s' FROM workers", (now,))[0][0],
        what="three more heartbeats",
    )
    sf.release(wid)
    assert sf.wait_terminal(wid) == "completed"
    assert sf.ran(wid) == {1: [1, 1], 2: [1], 3: [1], 4: [1]}, "a step after the cancel point ran twice"
    sf.check()


# -- flow control: the stateful test's check_limits on known histories ----------------------------


def claims_in_flight_since(dsn: str, moment: Any) -> bool:
    """Whether a claim statement that began before ``moment`` is still running."""
    return bool(
        query(
            dsn,
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'"
            " AND query LIKE %s AND query_start < %s",
            ("%Claim up to%", moment),
        )
    )


def test_a_lowered_limit_holds_back_new_claims_not_the_runs_already_leased(sf):
    """`wfctl limit sf-flow --concurrency 1` under four runs holding leases: they go on, no new
    run is claimed until they are down to none (each claim leaves at most 1 running), and the
    stateful test's check accepts that history (it judges claims, not the runs leased before
    the change)."""
    first = [sf.submit([["gate", 0]]) for _ in range(4)]
    sf.start(3)
    sf.start(3)
    # in their gates: each one's step has begun (its line in the effects log). "running" alone
    # is not enough: a worker may hold one of them claimed ahead of a free thread and hand it
    # back a second later, pending again, and a claim after the limit may then take a later run
    wait_for(
        lambda: all(sf.ran(w) for w in first) and sf.status_count(TYPE, "running") == 4,
        what="four runs in their gates",
    )
    sf.limit(TYPE, "--concurrency", "1")
    # a claim whose statement began before the limit committed may still take the type's runs
    # as unlimited (check_limits exempts it: the limit applies from the next claim); submit
    # the later runs once no such claim is in flight
    changed = query(sf.dsn, "SELECT clock_timestamp()")[0][0]
    wait_for(lambda: not claims_in_flight_since(sf.dsn, changed), what="the claims begun before the limit")
    later = [sf.submit([["ok", 0]]) for _ in range(2)]
    for wid in first[:3]:
        sf.release(wid)
        assert sf.wait_terminal(wid) == "completed"
    # the workers have claimed since the change (an sf-capped run came and went), and still
    # one sf-flow run holds its lease: the two later ones wait
    probe = sf.submit([["ok", 0]], workflow_type=CAPPED)
    assert sf.wait_terminal(probe) == "completed"
    assert [sf.row(w)[0] for w in later] == ["pending", "pending"]
    sf.release(first[3])
    for wid in later:
        assert sf.wait_terminal(wid) == "completed"
    most = query(
        sf.dsn,
        "SELECT max(running) FROM sf_claims WHERE workflow_type = %s AND at > "
        "(SELECT max(at) FROM sf_limit_changes WHERE workflow_type = %s)",
        (TYPE, TYPE),
    )[0][0]
    assert most == 1
    figures: collections.Counter = collections.Counter()
    check_limits(sf.dsn, figures)
    assert figures["claims_checked"] >= 1  # the probe's, at least (sf-capped: 2 in code)
    sf.check()


def test_a_per_key_limit_with_a_rate_on_one_type_claims(sf):
    """Exercised by the stateful test on the engine before 9ee9e14 (set_limit(per_key=1,
    rate='20/s') on sf-flow with runs under keys), and seen only in the workers' logs, which
    no invariant read then: every claim of a worker that ran the type was refused ("tuple to be
    updated was already modified by an operation triggered by the current command": the claim
    function moved the key rotation's cursor and the claim statement charged the rate, two
    updates of the limit's row in one statement), so nothing at all was claimed while the limit
    was set. Fixed in 9ee9e14 (found there by the cost benchmark); invariant 10 now reads the
    logs."""
    sf.start(3)
    wait_for(lambda: query(sf.dsn, "SELECT count(*) FROM workers")[0][0], what="the worker to register")
    sf.set_limits(TYPE, key_concurrency=1, rate="20/s")
    wids = sf.submit_together([["ok", 0]], [(TYPE, k) for k in ("c0", "c0", "c1", "c1", None)])
    for wid in wids:
        assert sf.wait_terminal(wid) == "completed"
    figures: collections.Counter = collections.Counter()
    check_limits(sf.dsn, figures)
    assert figures["keyed_claims_checked"] >= 2 and figures["rate_claims_checked"] >= 2
    sf.check()


BROKEN_CLAIM = """
CREATE OR REPLACE FUNCTION wfctl_claim_allowed(p_types text[], p_want integer)
RETURNS TABLE (id uuid, created_at timestamptz, priority integer, run_at timestamptz, turn integer,
               concurrency_key text, retry_in float8, workflow_type text, key_cursor text)
LANGUAGE sql AS $$
    SELECT w.id, w.created_at, w.priority, w.run_at, NULL::integer, NULL::text, NULL::float8,
           w.workflow_type::text, NULL::text
    FROM workflows w
    WHERE w.workflow_type = ANY (p_types) AND w.status = 'pending' AND w.run_at <= now()
    ORDER BY w.priority DESC, w.run_at
    LIMIT p_want
    FOR UPDATE SKIP LOCKED
$$
"""


REFUSED_CLAIM = """
CREATE OR REPLACE FUNCTION wfctl_claim_allowed(p_types text[], p_want integer)
RETURNS TABLE (id uuid, created_at timestamptz, priority integer, run_at timestamptz, turn integer,
               concurrency_key text, retry_in float8, workflow_type text, key_cursor text)
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'no claims today';
END;
$$
"""


def test_the_limits_check_catches_a_claim_that_ignores_the_limits(sf):
    """The claim's function replaced (in this test's database) by one that takes whatever is
    runnable: check_limits reports the code's concurrency limit, a pause, a per-key limit and a
    rate, each broken in turn by runs submitted in one transaction and held in their gates (the
    claims of each phase are cleared from sf_claims before the next)."""
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        conn.execute(BROKEN_CLAIM)
    sf.start(3)
    phases: list[tuple[dict[str, Any], list[tuple[str, str | None]], str]] = [
        # (the limits set on sf-flow, the runs: (type, key), the check's complaint)
        ({}, [(CAPPED, None)] * 3, "left 3 running (concurrency 2)"),  # sf-capped: 2 in code
        ({"concurrency": 0}, [(TYPE, None)], "left 1 running (concurrency 0)"),
        ({"concurrency": 5, "key_concurrency": 1}, [(TYPE, "c0")] * 2, "over their limit: {'c0': 2}"),
        ({"clear": True}, [], ""),
        ({"rate": "2/s"}, [(TYPE, None)] * 3, "starts from the claim at"),
    ]
    for values, runs, complaint in phases:
        if values:
            sf.set_limits(TYPE, **values)
        if not runs:
            continue
        wids = sf.submit_together([["gate", 0]], runs)
        wait_for(
            lambda w=wids: all(sf.row(x)[0] == "running" for x in w),
            what=f"the broken claim to take every run of {runs}",
        )
        with pytest.raises(AssertionError) as caught:
            check_limits(sf.dsn)
        assert "flow control" in str(caught.value) and complaint in str(caught.value), caught.value
        for wid in wids:
            sf.release(wid)
            assert sf.wait_terminal(wid) == "completed"
        query(sf.dsn, "DELETE FROM sf_claims RETURNING 1")
    # and a claim the database refuses is seen in the worker's log (invariant 10)
    (log,) = [p.log_path for p in sf.procs]  # type: ignore[attr-defined]
    assert refused_statements(log) == ([], log.stat().st_size)
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        conn.execute(REFUSED_CLAIM)
    sf.submit([["ok", 0]])
    refused = wait_for(lambda: refused_statements(log)[0], what="the refused claim in the worker's log")
    assert "the database refused the claim" in refused[0] and "no claims today" in refused[0], refused


# -- schedules: the stateful test's check_schedules on known histories ----------------------------


def test_the_schedules_check_accepts_a_real_history_and_catches_broken_ones(sf):
    """A schedule every second fired by a worker, paused, triggered, resumed and edited: the
    stateful test's check_schedules accepts it. Then two histories it must refuse, written by
    hand: an edit that sets the next tick to now (it would fire at once), and a run stored for
    a tick while the schedule is paused."""
    data = {"steps": [["ok", 0]]}
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        schedules.add(conn, "s0", TYPE, "* * * * * *", input=data)
        schedules.add(conn, "s1", CAPPED, "*/2 * * * * *", input=data, backfill=True)
    sf.start(2)

    def ticks(name: str) -> int:
        return query(
            sf.dsn, "SELECT count(*) FROM workflows WHERE idempotency_key LIKE %s", (f"schedule:{name}:2%",)
        )[0][0]

    wait_for(lambda: ticks("s0") >= 2 and ticks("s1") >= 1, what="ticks of both schedules")
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        schedules.pause(conn, "s0")
        schedules.trigger(conn, "s0")
        schedules.resume(conn, "s0")
        schedules.add(conn, "s0", TYPE, "*/2 * * * * *", input=data)  # an edit
        schedules.pause(conn, "s1")
    done = ticks("s0")
    wait_for(lambda: ticks("s0") > done, what="a tick of the edited schedule")
    figures: collections.Counter = collections.Counter()
    check_schedules(sf.dsn, figures)
    assert figures["schedule_firings_checked"] >= 3

    # an edit of the paused s1 that would fire at once
    query(
        sf.dsn,
        "UPDATE workflow_schedules SET cron = '*/3 * * * * *', next_tick_at = now(), updated_at = now()"
        " WHERE name = 's1' RETURNING 1",
    )
    (seq,) = query(sf.dsn, "SELECT max(seq) FROM sf_schedule_changes")[0]
    with pytest.raises(AssertionError, match=r"set the next tick to .* not the first tick after now"):
        check_schedules(sf.dsn)
    query(sf.dsn, "DELETE FROM sf_schedule_changes WHERE seq = %s RETURNING 1", (seq,))
    check_schedules(sf.dsn)

    # a run for a tick of s0 while it is paused
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        schedules.pause(conn, "s0")
    tick = query(
        sf.dsn,
        "SELECT to_char(date_trunc('second', now() AT TIME ZONE 'UTC') + interval '1 minute',"
        ' \'YYYY-MM-DD"T"HH24:MI:SS"Z"\')',
    )[0][0]
    query(
        sf.dsn,
        "INSERT INTO workflows (workflow_type, input_data, idempotency_key) VALUES (%s, %s, %s) RETURNING 1",
        (TYPE, json.dumps({"steps": [], "scheduled_at": tick}), f"schedule:s0:{tick}"),
    )
    with pytest.raises(AssertionError, match="fired while the schedule was paused"):
        check_schedules(sf.dsn)


def test_a_worker_frozen_while_firing_a_schedule_does_not_stop_its_ticks(sf):
    """Found by the stateful test on 9ee9e14 (a long run; compare_stuck_frozen timed out
    waiting for the frozen workers' sessions to fall idle: invariant 11 since): a worker frozen
    (SIGSTOP; a paused VM, a stalled process) between the statements of ``schedules.fire_due``
    (the due rows locked FOR UPDATE, the runs inserted, next_tick_at not yet moved) leaves its
    session idle in transaction, and the rows it locked stay locked for as long as it is
    frozen: every other firer skips them (SKIP LOCKED), so those schedules fire nothing, however
    many live workers there are, until it runs again. Made deterministic: the key of the
    schedule's tick is held by an open transaction of the test, so that the worker's firing
    waits inside its transaction; the worker is frozen there and the test's transaction rolls
    back. Expected: another firer (here the test's own fire_due) fires the following ticks
    within a few seconds. Fixed: the firing transaction sets idle_in_transaction_session_timeout
    to the worker's dead_after (``hold_locks_at_most``), so the server ends the frozen session's
    transaction and its locks."""
    with psycopg.connect(sf.dsn, autocommit=True) as conn:
        schedules.add(conn, "s0", TYPE, "* * * * * *", input={"steps": [["ok", 0]]})
    proc = sf.start(1)

    def runs_after(tick: Any) -> int:
        return query(
            sf.dsn,
            "SELECT count(*) FROM workflows WHERE idempotency_key LIKE 'schedule:s0:2%%'"
            " AND (input_data ->> 'scheduled_at')::timestamptz > %s",
            (tick,),
        )[0][0]

    wait_for(lambda: query(sf.dsn, "SELECT last_tick_at FROM workflow_schedules")[0][0], what="a first tick")
    blocker = psycopg.connect(sf.dsn)
    try:
        # the tick after the next one: a second to take its key before the worker fires it
        (held,) = blocker.execute(
            "SELECT next_tick_at + interval '1 second' FROM workflow_schedules WHERE name = 's0'"
        ).fetchone()
        key = f"schedule:s0:{held.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        blocker.execute(
            "INSERT INTO workflows (workflow_type, input_data, idempotency_key) VALUES (%s, %s, %s)",
            (TYPE, json.dumps({"steps": []}), key),
        )
        wait_for_worker_session(
            sf.dsn,
            "wait_event_type = 'Lock'",
            timeout=10,
            what="the worker's firing to wait for the tick's key",
        )
        proc.send_signal(signal.SIGSTOP)
        blocker.rollback()
    finally:
        blocker.close()
    try:
        wait_for_worker_session(
            sf.dsn,
            "state = 'idle in transaction'",
            what="the frozen worker's session idle in its transaction",
        )

        def fired_again() -> bool:
            with psycopg.connect(sf.dsn, autocommit=True) as conn:
                schedules.fire_due(conn)
            return runs_after(held) > 0

        wait_for(fired_again, timeout=5, what="another firer to fire the ticks after the frozen one")
    finally:
        proc.send_signal(signal.SIGCONT)
