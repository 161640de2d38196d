"""Recovery without cron: live workers sweep the runs of workers that missed their heartbeats, each
judged by its own recorded interval, one sweeper at a time.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_sweep.py.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta
from functools import partial

import fakeclock
import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl.worker.options import WorkerOptions

HEARTBEAT = 0.2  # the workers fixture's --heartbeat 200ms


DEAD_AFTER = WorkerOptions(heartbeat=HEARTBEAT).dead_after  # 3 beats, but at least 1 s


def owner_of(dsn: str, wid: str) -> tuple[str, int, str | None]:
    return rows(dsn, "SELECT status, lease_epoch, lease_owner FROM workflows WHERE id = %s", wid)[0]


def heartbeat_of(dsn: str, worker: str) -> datetime:
    return rows(dsn, "SELECT heartbeat_at FROM workers WHERE id = %s", worker)[0][0]


def beats_at(dsn: str, worker: str, clock: datetime) -> bool:
    return heartbeat_of(dsn, worker) == clock


def worker_id(dsn: str, proc) -> str:
    return wait_for(
        lambda: rows(dsn, "SELECT id FROM workers WHERE pid = %s", proc.pid),
        what=f"worker {proc.pid} to register",
    )[0][0]


@pytest.mark.slow
def test_a_killed_workers_run_is_resumed_by_a_survivor_without_recover(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "held", {}))
    victim = workers.start("--concurrency", "2", app="burstflows")
    wait_for(lambda: (wid, "one") in workers.effects(), what="the run to enter its held step")
    victim_id = worker_id(dsn, victim)
    survivors = [workers.start("--concurrency", "2", app="burstflows") for _ in range(2)]
    for proc in survivors:
        worker_id(dsn, proc)
    # the worker records its heartbeat; the others judge it by it
    assert rows(
        dsn, "SELECT heartbeat_seconds, dead_after_seconds FROM workers WHERE id = %s", victim_id
    ) == [(HEARTBEAT, DEAD_AFTER)]
    assert owner_of(dsn, wid) == ("running", 1, victim_id)

    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    killed = time.monotonic()
    workers.gate.unlink()
    wait_for(lambda: owner_of(dsn, wid)[1] > 1, timeout=30, what="a survivor to requeue the run")
    elapsed = time.monotonic() - killed
    print(f"\nkill -> requeue by a surviving worker's sweep: {elapsed:.2f}s (dead after {DEAD_AFTER:g}s)")
    # within a few sweep intervals of the victim's dead_after (that no live worker's run is
    # requeued before its own dead_after is the next test's business)
    assert elapsed < DEAD_AFTER + 5.0

    wait_for(lambda: owner_of(dsn, wid)[0] == "completed", timeout=30, what="the run to complete")
    _, epoch, owner = owner_of(dsn, wid)
    assert epoch == 3 and owner != victim_id  # claim, sweep, claim again
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", wid) == [(2,)]
    # requeued once, by one of the survivors: one line in all their logs together
    logs = [p.log_path.read_text() for p in survivors]
    assert sum(log.count(f"recovered {wid} requeued: its worker {victim_id}") for log in logs) == 1
    assert workers.effects().count((wid, "one")) == 2 and workers.effects().count((wid, "two")) == 1


@pytest.mark.slow
def test_a_live_workers_long_step_is_never_swept_and_a_frozen_one_is_fenced_when_it_wakes(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "held", {}))
    holder = workers.start("--concurrency", "1", app="burstflows")
    wait_for(lambda: (wid, "one") in workers.effects(), what="the run to enter its held step")
    holder_id = worker_id(dsn, holder)
    other = workers.start("--concurrency", "1", app="burstflows")
    other_id = worker_id(dsn, other)
    # The database's clock moves only when the test moves it: for four times the holder's
    # dead_after, in steps of half of it, the holder beats at each new time while the other
    # worker sweeps every 200 ms, and its run is left alone (however slow the machine).
    clock = fakeclock.stop(dsn)
    for _ in range(8):
        clock = fakeclock.advance(dsn, timedelta(seconds=DEAD_AFTER / 2))
        for each in (holder_id, other_id):
            wait_for(partial(beats_at, dsn, each, clock), what=f"{each} to beat at {clock}")
        assert owner_of(dsn, wid) == ("running", 1, holder_id)
    assert "recovered" not in other.log_path.read_text()

    holder.send_signal(signal.SIGSTOP)  # frozen: it stops beating; the other takes the run over
    try:
        fakeclock.advance(dsn, timedelta(seconds=DEAD_AFTER + HEARTBEAT))
        wait_for(
            lambda: owner_of(dsn, wid)[2] == other_id, timeout=30, what="the other worker to take the run"
        )
        workers.gate.unlink()
        wait_for(lambda: owner_of(dsn, wid)[0] == "completed", timeout=30, what="completion")
    finally:
        holder.send_signal(signal.SIGCONT)
    # the frozen worker wakes inside the step it was in, and can commit nothing for it
    wait_for(
        lambda: "lease lost" in holder.log_path.read_text(), what="the woken worker to see the lease gone"
    )
    assert owner_of(dsn, wid) == ("completed", 3, other_id)
    steps = "SELECT step_number, attempt, lease_epoch FROM workflow_steps WHERE workflow_id = %s ORDER BY 1"
    assert rows(dsn, steps, wid) == [(1, 2, 3), (2, 2, 3)]
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=30) == 0


@pytest.mark.slow
def test_no_sweep_leaves_recovery_to_recover(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "held", {}))
    victim = workers.start("--concurrency", "1", app="burstflows")
    wait_for(lambda: (wid, "one") in workers.effects(), what="the run to enter its held step")
    bystander = workers.start("--no-sweep", app="burstflows")
    bystander_id = worker_id(dsn, bystander)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    workers.gate.unlink()
    # no sweep: the run stays with the dead worker however long one waits for it. The clock
    # stands still but for the test's moves: the victim is long dead by the bystander's rule,
    # and each step is two beats of the bystander's, two sweeps had it been on.
    clock = fakeclock.stop(dsn)
    for _ in range(4):
        clock = fakeclock.advance(dsn, timedelta(seconds=DEAD_AFTER))
        wait_for(partial(beats_at, dsn, bystander_id, clock), what=f"the bystander to beat at {clock}")
        clock = fakeclock.advance(dsn, timedelta(seconds=HEARTBEAT))
        wait_for(partial(beats_at, dsn, bystander_id, clock), what=f"the bystander to beat at {clock}")
        assert owner_of(dsn, wid)[:2] == ("running", 1)
    result = workers.wfctl("recover", "--stale", "1s")
    assert result.exit_code == 0 and result.stdout.startswith(f"requeued {wid}")
    wait_for(lambda: owner_of(dsn, wid)[0] == "completed", timeout=30, what="completion")
    assert "sweep=off" in bystander.log_path.read_text()


SWEEP_HELD = """
CREATE TABLE sweep_gate (held boolean);
INSERT INTO sweep_gate VALUES (true);
CREATE FUNCTION sweep_gate_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WHILE EXISTS (SELECT 1 FROM sweep_gate) LOOP
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN NEW;
END;
$$;
CREATE TRIGGER sweep_gate BEFORE UPDATE ON workflows FOR EACH ROW
    WHEN (OLD.lease_owner = 'ghost' AND OLD.status = 'running') EXECUTE FUNCTION sweep_gate_fn();
"""


@pytest.mark.slow
def test_a_sweep_cut_off_by_a_lost_connection_waits_its_dead_after_before_it_sweeps_again(workers, dsn):
    """The reconnect postpones the sweep (the others were probably cut off too, their beats
    could not get through); the sweep the loss interrupted must not be sent again at once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SWEEP_HELD)
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types, dead_after_seconds,"
            " heartbeat_at) VALUES ('ghost', 'gone', 1, 1, '{three}', 1, now() - interval '1 hour')"
        )
        (wid,) = conn.execute(
            "INSERT INTO workflows (workflow_type, status, attempt, lease_epoch, lease_owner, updated_at)"
            " VALUES ('three', 'running', 1, 1, 'ghost', now() - interval '1 hour') RETURNING id"
        ).fetchone()
    sweeper = workers.start("--heartbeat", "1s")
    dead_after = WorkerOptions(heartbeat=1.0).dead_after
    # its first sweep, held inside the requeue of the ghost's run
    pids = wait_for(
        lambda: rows(
            dsn,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE %s AND wait_event = 'PgSleep'",
            "%wfctl.sweep.%",
        ),
        what="the sweep to be held",
    )
    rows(dsn, "SELECT pg_terminate_backend(%s)", pids[0][0])
    wait_for(lambda: "reconnected" in sweeper.log_path.read_text(), what="the worker to reconnect")
    reconnected = time.monotonic()
    rows(dsn, "DELETE FROM sweep_gate RETURNING 1")
    wait_for(lambda: owner_of(dsn, str(wid))[1] > 1, what="the ghost's run to be requeued")
    waited = time.monotonic() - reconnected
    assert waited >= 0.8 * dead_after, f"swept {waited:.2f}s after reconnecting (dead after {dead_after:g}s)"
