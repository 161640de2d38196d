"""Runs a worker claims ahead of its free threads (its backlog), in real worker processes.

A worker claims up to twice its concurrency: what it takes beyond its free threads waits in its
backlog for one. The database tells such a run from one that started (migration 0019); one that has
found no thread within ``policy.CLAIM_AHEAD_HOLD`` is handed back (not an attempt) for an idle
worker to take, and one whose worker dies before starting it is handed back by the sweep or by
``wfctl recover`` without being charged an attempt.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl.worker.policy import CLAIM_AHEAD_HOLD


def counts(effects: list[tuple[str, str]], wid: str) -> dict[str, int]:
    return dict(collections.Counter(step for w, step in effects if w == wid))


def status(dsn: str, wid: str) -> tuple:
    return rows(dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid)[0]


def outcomes(dsn: str, wid: str) -> list[tuple[str, str | None]]:
    """The run's executions in the attempt history: (worker, outcome), oldest first."""
    return rows(
        dsn,
        "SELECT worker_id, outcome FROM workflow_attempts WHERE workflow_id = %s ORDER BY lease_epoch",
        wid,
    )


def owner_of(proc) -> str:
    return f"%:{proc.pid}:%"


@pytest.fixture
def busy(workers, dsn) -> Iterator[tuple[object, list[str]]]:
    """A worker with one thread, held in the first step of run ``a`` (max_retries 0); the gate
    is opened at the end."""
    workers.gate.touch()
    a = str(wfctl.submit(dsn, "three", {"gate": 1}, max_retries=0))
    proc = workers.start("--concurrency", "1")
    wait_for(lambda: counts(workers.effects(), a).get("one"), what="a to enter its gated step")
    try:
        yield proc, [a]
    finally:
        workers.gate.unlink(missing_ok=True)


def hold_claimed_ahead(dsn: str, wid: str, proc) -> psycopg.Connection:
    """Wait until ``wid`` is running under ``proc``, claimed ahead, and lock its row there, so
    the worker can neither start it nor hand it back: a transaction the caller ends."""
    holder = psycopg.connect(dsn)

    def locked() -> bool:
        found = holder.execute(
            "SELECT 1 FROM workflows WHERE id = %s AND status = 'running' AND lease_owner LIKE %s FOR UPDATE",
            (wid, owner_of(proc)),
        ).fetchall()
        if not found:
            holder.rollback()
        return bool(found)

    wait_for(locked, what=f"{wid} to be claimed ahead by the busy worker")
    return holder


def kill_worker(dsn: str, proc) -> None:
    """SIGKILL the worker and end its sessions, so that no statement it sent commits later."""
    proc.kill()
    proc.wait(timeout=10)
    rows(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'wfctl worker'",
    )
    wait_for(
        lambda: (
            not rows(
                dsn,
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'wfctl worker'",
            )
        ),
        what="the killed worker's sessions to end",
    )


@pytest.mark.slow
def test_runs_claimed_ahead_behind_long_steps_go_to_an_idle_worker(workers, dsn):
    """Two threads in long steps, two short runs (5 s deadline) claimed ahead behind them: once
    an idle worker is there, the short runs are handed back and run there, long before their
    deadline, each charged no attempt for the wait; the busy worker does not take them back."""
    workers.gate.touch()
    long = [str(wfctl.submit(dsn, "three", {"gate": 1})) for _ in range(2)]
    occupied = workers.start("--concurrency", "2")
    wait_for(
        lambda: all(counts(workers.effects(), w).get("one") for w in long), what="both long runs to start"
    )
    short = [str(wfctl.submit(dsn, "three", {}, timeout="5s")) for _ in range(2)]
    wait_for(
        lambda: (
            rows(
                dsn,
                "SELECT count(DISTINCT workflow_id) FROM workflow_attempts"
                " WHERE workflow_id = ANY(%s::uuid[]) AND worker_id LIKE %s",
                short,
                owner_of(occupied),
            )
            == [(2,)]
        ),
        what="the short runs to be claimed ahead by the busy worker",
    )
    idle = workers.start("--concurrency", "2")
    wait_for(
        lambda: all(status(dsn, w)[0] in ("completed", "failed") for w in short),
        timeout=15,
        what="the short runs to end",
    )
    try:
        for wid in short:
            assert status(dsn, wid) == ("completed", 1, None)
            assert counts(workers.effects(), wid) == {"one": 1, "two": 1, "three": 1}
            history = outcomes(dsn, wid)
            # claimed ahead once by the busy worker, handed back; completed on the idle one
            assert [o for _, o in history] == ["released", "completed"], history
            assert f":{occupied.pid}:" in history[0][0] and f":{idle.pid}:" in history[1][0]
        assert "handed back" in occupied.log_path.read_text()
    finally:
        workers.gate.unlink()
    wait_for(lambda: all(status(dsn, w)[0] == "completed" for w in long), what="the long runs to complete")


@pytest.mark.slow
def test_a_busy_worker_hands_back_what_it_claimed_ahead_within_the_hold(workers, dsn, busy):
    """No other worker: the run claimed ahead behind a step that does not return goes back to
    pending after CLAIM_AHEAD_HOLD (uncharged) and stays there: the busy worker, with no free
    thread, does not claim it again."""
    proc, _ = busy
    b = str(wfctl.submit(dsn, "three", {}))
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflow_attempts WHERE workflow_id = %s", b) == [(1,)],
        what="b to be claimed ahead",
    )
    claimed = time.monotonic()
    wait_for(lambda: status(dsn, b)[0] == "pending", timeout=10, what="b to be handed back")
    assert time.monotonic() - claimed < CLAIM_AHEAD_HOLD + 2.0
    assert status(dsn, b) == ("pending", 1, None)
    time.sleep(3 * CLAIM_AHEAD_HOLD)  # an absence: the busy worker must not take b again
    assert [o for _, o in outcomes(dsn, b)] == ["released"]
    assert status(dsn, b)[0] == "pending" and counts(workers.effects(), b) == {}
    workers.gate.unlink()  # the thread is free: b runs there
    wait_for(lambda: status(dsn, b)[0] == "completed", what="b to complete")
    assert status(dsn, b) == ("completed", 1, None)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def recover_until(workers, wids: list[str]) -> list[dict]:
    """`wfctl recover --json` as cron would run it, until every one of ``wids`` was recovered."""
    seen: dict[str, dict] = {}

    def attempt() -> bool:
        result = workers.wfctl("recover", "--stale", "1s", "--json", "--force")
        assert result.exit_code == 0, result.output
        for row in json.loads(result.stdout):
            seen[row["id"]] = row
        return all(w in seen for w in wids)

    wait_for(attempt, what=f"recover to requeue {wids}")
    return [seen[w] for w in wids]


@pytest.mark.slow
@pytest.mark.parametrize("rescuer", ["recover", "sweep"])
def test_a_run_claimed_ahead_that_never_started_is_not_charged_when_its_worker_dies(
    workers, dsn, busy, rescuer
):
    """A worker SIGKILLed while it holds ``a`` (started) and ``b`` (claimed ahead, never
    started), both with max_retries 0: `wfctl recover`, or a live worker's sweep, ends a's
    attempt (no retries left: failed, abandoned) and hands b back uncharged; b then runs once."""
    proc, (a,) = busy
    b = str(wfctl.submit(dsn, "three", {}, max_retries=0))
    holder = hold_claimed_ahead(dsn, b, proc)
    try:
        kill_worker(dsn, proc)
    finally:
        holder.rollback()
        holder.close()
    workers.gate.unlink()
    if rescuer == "recover":
        found = {r["id"]: r for r in recover_until(workers, [a, b])}
        assert (found[a]["status"], found[a]["attempt"]) == ("failed", 1)
        assert (found[b]["status"], found[b]["attempt"]) == ("pending", 1)
        workers.run()
    else:
        workers.start("--concurrency", "1")
        wait_for(lambda: status(dsn, b)[0] in ("completed", "failed"), what="b to end on the rescuer")
    failed = status(dsn, a)
    assert failed[:2] == ("failed", 1) and "no retries left" in failed[2], failed
    assert status(dsn, b) == ("completed", 1, None)
    assert [o for _, o in outcomes(dsn, b)] == ["released", "completed"]
    assert counts(workers.effects(), b) == {"one": 1, "two": 1, "three": 1}


@pytest.mark.slow
def test_a_run_claimed_ahead_whose_code_kills_its_worker_is_charged(workers, dsn, busy):
    """The other side of not charging runs that never started: a run claimed ahead is marked
    started, and that committed, before any of its code runs. One whose first attempt SIGKILLs
    its worker at once (max_retries 0) is charged: recover fails it, it is not run again."""
    proc, (a,) = busy
    k = str(wfctl.submit(dsn, "kills_worker", {}))
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflow_attempts WHERE workflow_id = %s", k) == [(1,)],
        what="k to be claimed ahead",
    )
    workers.gate.unlink()  # a completes: k takes its thread, recorded started with that commit
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert status(dsn, a)[0] == "completed"
    found = {r["id"]: r for r in recover_until(workers, [k])}
    assert (found[k]["status"], found[k]["claimed_ahead"]) == ("failed", False)
    failed = status(dsn, k)
    assert failed[:2] == ("failed", 1) and "no retries left" in failed[2], failed
    assert [o for _, o in outcomes(dsn, k)] == ["abandoned"]  # claimed once: never handed back
    assert counts(workers.effects(), k) == {"start": 1}
