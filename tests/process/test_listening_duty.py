"""Of a pool's idle workers one LISTENs (wfctl/worker/listening.py): the others wait for its
lock, so a submit costs one listener's read of the notification queue, not one per worker;
and the duty passes on when its holder's threads fill, when it dies, when its session ends
and when it stops; a burst passes it down the waiting workers at once, and it still ends with a
worker that listens.

Every worker here polls once a minute and beats once every 10 s, far longer than these tests
wait for a run to start: a run that starts in time was started by a wake-up.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import client, jsonvalue

pytestmark = pytest.mark.slow

QUIET = ("--poll", "60s", "--heartbeat", "10s")
PROMPT = 10.0  # seconds: what "started by its wake-up" is allowed on a loaded machine


def duty_locks(dsn: str) -> list[bool]:
    """The listening duty's advisory lock in this database: granted (the holder) or waited for."""
    return sorted(
        granted
        for (granted,) in rows(
            dsn,
            "SELECT granted FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
    )


def holder_pid(dsn: str) -> int:
    """The process of the worker that holds the duty: its claims alone mark it idle."""
    [(pid,)] = wait_for(
        lambda: rows(dsn, "SELECT pid FROM workers WHERE idle AND stopped_at IS NULL"),
        what="the listening worker to mark itself idle",
    )
    return pid


def completes_promptly(dsn: str, wid: uuid.UUID) -> None:
    assert wfctl.result(dsn, wid, timeout=PROMPT) == {"sum": 6}


def test_of_three_idle_workers_one_listens_and_takes_every_arrival(dsn: str, workers: Any) -> None:
    procs = [workers.start(*QUIET) for _ in range(3)]
    wait_for(lambda: duty_locks(dsn) == [False, False, True], what="one holder and two waiting")
    listener = holder_pid(dsn)
    for _ in range(5):
        completes_promptly(dsn, wfctl.submit(dsn, "three", {}))
    done_by = rows(dsn, "SELECT DISTINCT k.pid FROM workflows w JOIN workers k ON k.id = w.lease_owner")
    assert done_by == [(listener,)]
    assert listener in [p.pid for p in procs]
    assert duty_locks(dsn) == [False, False, True]


def test_a_killed_listener_leaves_the_duty_to_a_waiting_worker(dsn: str, workers: Any) -> None:
    procs = {p.pid: p for p in (workers.start(*QUIET) for _ in range(2))}
    wait_for(lambda: duty_locks(dsn) == [False, True], what="one holder and one waiting")
    victim = procs.pop(holder_pid(dsn))
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    # its session ends with it, and its lock: the other worker holds it now, and listens
    wait_for(lambda: duty_locks(dsn) == [True], what="the waiting worker to take the duty")
    # and it alone is idle: no wake-up goes to the dead worker, whose row still looks live
    for _ in range(4):
        completes_promptly(dsn, wfctl.submit(dsn, "three", {}))


def test_a_listener_whose_threads_fill_hands_the_duty_on(dsn: str, workers: Any) -> None:
    workers.gate.touch()
    procs = [workers.start(*QUIET, "--concurrency", "1") for _ in range(2)]
    wait_for(lambda: duty_locks(dsn) == [False, True], what="one holder and one waiting")
    first = holder_pid(dsn)
    held = wfctl.submit(dsn, "three", {"gate": 1})
    wait_for(lambda: (str(held), "one") in workers.effects(), what="the gated run to start")
    # the holder's one thread is taken: the other worker listens now and takes the next run
    completes_promptly(dsn, wfctl.submit(dsn, "three", {}))
    [(second,)] = rows(
        dsn,
        "SELECT k.pid FROM workflows w JOIN workers k ON k.id = w.lease_owner WHERE w.status = 'completed'",
    )
    assert second != first and {first, second} == {p.pid for p in procs}
    workers.gate.unlink()
    completes_promptly(dsn, held)


def test_a_listener_whose_session_ends_listens_again_on_its_new_one(dsn: str, workers: Any) -> None:
    workers.start(*QUIET)
    wait_for(lambda: duty_locks(dsn) == [True], what="the worker to take the duty")
    rows(
        dsn,
        "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    # the worker notices at its next statement (a beat, up to 10 s away): a submit's wake-up
    # is lost meanwhile, so wait for the duty on the new session before submitting
    wait_for(lambda: duty_locks(dsn) == [True], what="the worker to take the duty again", timeout=30)
    completes_promptly(dsn, wfctl.submit(dsn, "three", {}))


def test_a_waiting_worker_stops_at_once_on_sigterm(dsn: str, workers: Any) -> None:
    procs = [workers.start(*QUIET) for _ in range(2)]
    wait_for(lambda: duty_locks(dsn) == [False, True], what="one holder and one waiting")
    holder = holder_pid(dsn)
    waiting = next(p for p in procs if p.pid != holder)
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=PROMPT) == 0  # its lock wait (up to 10 s) is cancelled
    assert duty_locks(dsn) == [True]


def test_a_stopping_listener_hands_the_duty_on_before_it_exits(dsn: str, workers: Any) -> None:
    workers.gate.touch()
    procs = {p.pid: p for p in (workers.start(*QUIET, "--grace", "60s") for _ in range(2))}
    wait_for(lambda: duty_locks(dsn) == [False, True], what="one holder and one waiting")
    stopping = procs.pop(holder_pid(dsn))
    held = wfctl.submit(dsn, "three", {"gate": 1})
    wait_for(lambda: (str(held), "one") in workers.effects(), what="the gated run to start")
    stopping.send_signal(signal.SIGTERM)  # it waits for its run to reach a step boundary
    wait_for(lambda: duty_locks(dsn) == [True], what="the other worker to take the duty")
    assert stopping.poll() is None  # still draining, not listening
    completes_promptly(dsn, wfctl.submit(dsn, "three", {}))
    workers.gate.unlink()
    assert stopping.wait(timeout=30) == 0


def test_a_burst_passed_down_the_waiting_workers_leaves_one_listening(dsn: str, workers: Any) -> None:
    workers.gate.touch()
    procs = [workers.start(*QUIET, "--concurrency", "2") for _ in range(3)]
    wait_for(lambda: duty_locks(dsn) == [False, False, True], what="one holder and two waiting")
    # one commit: the holder claims four (its two threads and two ahead) and leaves the duty;
    # the next waiting worker gets it with three due, enough to fill its threads, and passes it
    # on; whichever of the two claims short of its threads takes it back
    with psycopg.connect(dsn) as conn:
        client.submit_many(conn, "three", [jsonvalue.dumps({"gate": 1})] * 7)
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'pending'") == [(0,)],
        what="the burst to be claimed",
    )
    completes_promptly(dsn, wfctl.submit(dsn, "three", {}))
    assert all(p.poll() is None for p in procs)
    workers.gate.unlink()


def test_a_worker_that_passed_the_duty_for_runs_a_limit_holds_back_keeps_it_next_time(
    dsn: str, workers: Any
) -> None:
    procs = {p.pid for p in (workers.start(*QUIET, "--concurrency", "1", app="limitflows") for _ in range(2))}
    wait_for(lambda: duty_locks(dsn) == [False, True], what="one holder and one waiting")
    (other,) = procs - {holder_pid(dsn)}
    # "gated" runs one at a time: the holder claims one (its thread filled) and leaves the
    # duty; the other gets it with eleven due, which its claim cannot take. It passes the duty
    # on once, claims none, and keeps the duty the next time it comes, rather than passing it
    # on again and again for runs it cannot claim
    with psycopg.connect(dsn) as conn:
        client.submit_many(conn, "gated", [jsonvalue.dumps({"pause": 120})] * 12)
    wait_for(
        lambda: (
            duty_locks(dsn) == [True]
            and rows(dsn, "SELECT pid FROM workers WHERE idle AND stopped_at IS NULL") == [(other,)]
        ),
        what="the other worker to listen for the pool",
    )
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'running'") == [(1,)]
    assert wfctl.result(dsn, wfctl.submit(dsn, "plain", {"pause": 0}), timeout=PROMPT) == 0.0
