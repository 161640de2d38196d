"""A worker that gets the listening duty with a burst due passes it on in the same round trip
(wfctl/worker/listening.py): its claim would fill its threads and it would leave the duty right
after, so the next waiting worker is handed the lock by the server at once instead of after
that claim.

The sessions here are the waits themselves, on real connections: what each wait got, and who
holds the lock after, is read from its reply and from ``pg_locks``, without timing.
"""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest
from helpers import wait_for

import wfctl
from wfctl.worker.listening import Listening, Wait

POOL = ["order"]
LONG = 30.0  # seconds: a wait's lock_timeout, far longer than any test here waits


def lock_holders(conn: psycopg.Connection[Any]) -> list[tuple[int, bool]]:
    """(pid, granted) of every session holding or waiting for an advisory lock here."""
    return sorted(
        conn.execute(
            "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    )


@pytest.fixture
def sessions(dsn: str) -> Iterator[Any]:
    with ExitStack() as stack:

        def connect() -> psycopg.Connection[Any]:
            return stack.enter_context(psycopg.connect(dsn, autocommit=True))

        yield connect


def finish(duty: Listening, conn: psycopg.Connection[Any]) -> Wait:
    """The wait's reply, once the server sent it."""
    ready, _, _ = select.select([conn.fileno()], [], [], LONG)
    assert ready, "the wait did not end"
    return duty.finish_wait(conn, cancel=False)


def queue_wait(duty: Listening, conn: psycopg.Connection[Any], threads: int, watch: Any) -> None:
    """Send ``duty``'s wait on ``conn`` and see it queued behind the lock's holder."""
    duty.send_wait(conn, LONG, threads)
    pid = conn.info.backend_pid
    wait_for(lambda: (pid, False) in lock_holders(watch), what="the wait to queue for the lock")


def submit(dsn: str, count: int, workflow_type: str = "order", **options: Any) -> None:
    for _ in range(count):
        wfctl.submit(dsn, workflow_type, {}, **options)


def test_a_wait_that_gets_the_duty_with_a_burst_due_passes_it_to_the_next_in_the_same_turn(
    dsn: str, sessions: Any
) -> None:
    watch, holder, first, second = (sessions() for _ in range(4))
    held = Listening(POOL, "holder")
    assert held.try_take(holder)
    small, large = Listening(POOL, "small"), Listening(POOL, "large")
    queue_wait(small, first, 4, watch)
    queue_wait(large, second, 20, watch)
    submit(dsn, 10)  # due after the waits began, before the lock comes
    held.release(holder)  # 10 due: the first's claim would fill its 4 threads, not the second's 20
    assert finish(small, first) == Wait(got=True, passed=True)
    assert finish(large, second) == Wait(got=True, passed=False)
    # the second kept it: it listens for the pool, and nobody else holds or waits
    assert lock_holders(watch) == [(second.info.backend_pid, True)]


def keeps_free_duty(sessions: Any, threads: int) -> tuple[Listening, psycopg.Connection[Any]]:
    """A wait for the duty nobody holds, with ``threads`` free: it gets the lock and keeps it."""
    watch, conn = sessions(), sessions()
    duty = Listening(POOL, "w")
    duty.send_wait(conn, LONG, threads)
    assert finish(duty, conn) == Wait(got=True, passed=False)
    assert lock_holders(watch) == [(conn.info.backend_pid, True)]
    return duty, conn


def test_a_wait_that_gets_the_duty_with_fewer_runs_due_than_its_threads_keeps_it(
    dsn: str, sessions: Any
) -> None:
    submit(dsn, 3)
    keeps_free_duty(sessions, 4)


def test_runs_not_due_or_of_other_types_do_not_make_a_wait_pass_the_duty_on(dsn: str, sessions: Any) -> None:
    submit(dsn, 5, delay="1h")
    submit(dsn, 5, "mail")
    submit(dsn, 3)
    duty, conn = keeps_free_duty(sessions, 4)
    submit(dsn, 1)  # the fourth due run of the pool: a wait now would pass it on
    other, later = sessions(), Listening(POOL, "later")
    duty.release(conn)
    later.send_wait(other, LONG, 4)
    assert finish(later, other) == Wait(got=True, passed=True)
    assert lock_holders(other) == []


def test_a_wait_with_no_threads_to_fill_never_passes_the_duty_on(dsn: str, sessions: Any) -> None:
    submit(dsn, 10)
    keeps_free_duty(sessions, 0)


def test_a_cancelled_wait_gets_nothing_and_leaves_the_holder_alone(dsn: str, sessions: Any) -> None:
    watch, holder, conn = sessions(), sessions(), sessions()
    held = Listening(POOL, "holder")
    assert held.try_take(holder)
    submit(dsn, 10)
    duty = Listening(POOL, "w")
    queue_wait(duty, conn, 4, watch)
    assert duty.finish_wait(conn, cancel=True) == Wait(got=False)
    assert lock_holders(watch) == [(holder.info.backend_pid, True)]
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the session is usable again
