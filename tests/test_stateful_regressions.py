"""Counterexamples found by the stateful test (tests/test_stateful.py), as plain tests.

Each test is the shrunk rule sequence Hypothesis printed, made deterministic (gates and waits
for conditions instead of timing), with real worker processes, the real CLI and the same
workflow (tests/apps/statefulflows.py ``sf-flow``), the same audit tables and the same
invariant checks as the stateful test. The docstring of each gives the sequence as found, the
engine it was found on, and the invariant it broke.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import APPS, Result, wait_for
from test_stateful import (
    TERMINAL,
    TYPE,
    Effect,
    Wf,
    check_releases,
    clean_env,
    final_checks,
    install_audit,
    query,
    read_effects,
)

import wfctl


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
                    sys.executable, "-m", "wfctl", "worker", "--app", "statefulflows",
                    "--concurrency", str(concurrency), "--heartbeat", "200ms", "--poll", "100ms",
                    "--log-format", "plain", *args,
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

    def submit(self, steps: list[list[Any]], max_retries: int | None = None) -> str:
        wid = str(wfctl.submit(self.dsn, TYPE, {"steps": steps}, max_retries=max_retries))
        self.model[wid] = Wf(steps, max_retries, "api")
        return wid

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
    """Found on 45da174 (before the fixes of issue 9), shrunk to:

        state.begin(concurrencies=[1], specs=[([['ok', 0]], ...), ([['ok', 0]], ...)])
        ... (drop_connections, restart_database, retry of finished workflows: not needed)
        state.submit(steps=[['base', 1], ['exit', 1]], key=None, max_retries=None, via='api')
        -> after 1-3 more rules: invariant 2, step 1 of that workflow ran under epochs
           [1, 2, 3, 4, 5], all in attempt 1 of generation 0.

    Issue 9 item 1: a run that ends with a BaseException (here the step's own Abort, then
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
    refused, so the step must not run, and the attempt must count (issue 9 items 1 and 5)."""
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

    Issue 9 item 4: the retried run replays its sleep, whose wake time is still ahead, and
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
        lambda: query(
            sf.dsn,
            "SELECT status = 'pending' AND lease_epoch > %s AND run_at = %s FROM workflows WHERE id = %s",
            (retried_epoch, wake, wid),
        )[0][0]
        or sf.row(wid)[0] == "completed",
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

    Issue 9 item 2: one worker held the cancelled execution (still inside its step) and the
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
