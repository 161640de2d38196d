"""A wake-up that reaches a connection while it is inside another statement is not left for the
next poll.

The server sends a NOTIFY to a listening session only between its statements, so a session
busy in a claim, a flush or a heartbeat gets it together with that statement's reply: the
client reads it off the socket then, and the socket has nothing more to say. A loop that then
sleeps on the socket sleeps until its timer (``--poll``), holding the wake-up. These tests hold
a statement open with a row lock, let the NOTIFY arrive while it waits, and then expect the
work to start long before any timer could have fired.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import rows, wait_for, wait_for_worker_session

import wfctl
from wfctl import coordination

pytestmark = pytest.mark.slow

#: Far longer than any of these tests waits for the work to start: a run that starts only when
#: a timer fires fails them.
LONG = "60s"
PROMPT = 10.0  # seconds: what "started at once" is allowed on a loaded machine


def status(dsn: str, wid: uuid.UUID) -> str:
    return rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid)[0][0]


@contextlib.contextmanager
def a_run_held_in_step_one(dsn: str, workers: Any) -> Iterator[uuid.UUID]:
    """A worker whose every timer (poll, heartbeat, sweep, deadlines, schedules) is a minute
    away, running a ``held_twice`` run held in step one by the gate file; step two stays held by
    the second gate file until the test ends."""
    gate: Path = workers.gate
    second = Path(f"{gate}.second")
    gate.touch()
    second.touch()
    try:
        workers.start("--poll", LONG, "--heartbeat", LONG)
        held = wfctl.submit(dsn, "held_twice")
        wait_for(lambda: (str(held), "one") in workers.effects(), what="step one of the held run to start")
        yield held
    finally:
        second.unlink(missing_ok=True)
        gate.unlink(missing_ok=True)


def test_a_submit_announced_during_a_flush_is_claimed_without_waiting_for_the_poll(
    dsn: str, workers: Any
) -> None:
    gate: Path = workers.gate
    with a_run_held_in_step_one(dsn, workers) as held:
        with psycopg.connect(dsn) as blocker:
            # the worker holds no lock on its run between statements: take the row, so that
            # step one's checkpoint (the group commit) waits inside its statement
            blocker.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (held,))
            gate.unlink()
            wait_for_worker_session(dsn, "wait_event_type = 'Lock'", what="the checkpoint blocked on the row")
            # committed while the worker is inside the flush: its NOTIFY comes with the reply
            woken = wfctl.submit(dsn, "three", {})
            blocker.commit()
        # the flush commits and the held run goes on into step two, where it stays: nothing
        # finishes, so no freed slot makes the worker claim; only the wake-up it holds can
        wait_for(
            lambda: status(dsn, woken) == "completed",
            timeout=PROMPT,
            what=f"the run submitted during the flush to complete (the poll is {LONG} away)",
        )
        assert (str(held), "two") in workers.effects()
        assert status(dsn, held) == "running"


def test_a_run_skipped_while_a_result_wait_held_its_row_is_claimed_at_that_commit(
    dsn: str, workers: Any
) -> None:
    """``wfctl.result`` marks the run awaited with an UPDATE; a claim that comes while that
    UPDATE holds the row skips it (SKIP LOCKED), and nothing but that wait's commit says so."""
    gate: Path = workers.gate
    with a_run_held_in_step_one(dsn, workers) as held:
        with psycopg.connect(dsn) as blocker, psycopg.connect(dsn) as waiter:
            # hold the worker inside a flush while the run is submitted and its wait begins
            blocker.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (held,))
            gate.unlink()
            wait_for_worker_session(dsn, "wait_event_type = 'Lock'", what="the checkpoint blocked on the row")
            skipped = wfctl.submit(dsn, "three", {})
            waiter.execute(coordination.q("coordination.watch"), {"id": skipped})  # holds the row
            blocker.commit()
            # the worker claims for the submit's wake-up, and finds the run locked
            wait_for(lambda: (str(held), "two") in workers.effects(), what="the held run to reach step two")
            wait_for_worker_session(
                dsn, "state = 'idle' AND query LIKE '-- Claim up to%'", what="the worker's claim to end"
            )
            assert status(dsn, skipped) == "pending"
            waiter.commit()
        wait_for(
            lambda: status(dsn, skipped) == "completed",
            timeout=PROMPT,
            what=f"the run the claim skipped to complete (the poll is {LONG} away)",
        )


def test_a_run_skipped_while_a_message_to_it_was_being_sent_is_claimed_at_the_send_commit(
    dsn: str, workers: Any
) -> None:
    """A send holds its workflow's row until the sender commits (the foreign key's share lock;
    here the delivery trigger's own lock, made immediate, so that the test holds in either
    layout); a claim meanwhile skips the run, and the send's commit must say it is there."""
    gate: Path = workers.gate
    with a_run_held_in_step_one(dsn, workers) as held:
        with psycopg.connect(dsn) as blocker, psycopg.connect(dsn) as sender:
            blocker.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (held,))
            gate.unlink()
            wait_for_worker_session(dsn, "wait_event_type = 'Lock'", what="the checkpoint blocked on the row")
            skipped = wfctl.submit(dsn, "three", {})
            sender.execute("SET CONSTRAINTS workflow_messages_wake IMMEDIATE")
            wfctl.send(sender, skipped, "note", {"hello": 1})  # not a topic it waits on: it waits on none
            blocker.commit()
            wait_for(lambda: (str(held), "two") in workers.effects(), what="the held run to reach step two")
            wait_for_worker_session(
                dsn, "state = 'idle' AND query LIKE '-- Claim up to%'", what="the worker's claim to end"
            )
            assert status(dsn, skipped) == "pending"
            sender.commit()
        wait_for(
            lambda: status(dsn, skipped) == "completed",
            timeout=PROMPT,
            what=f"the run the claim skipped to complete (the poll is {LONG} away)",
        )


def test_a_due_parent_skipped_while_its_child_finished_is_claimed_at_that_commit(
    dsn: str, workers: Any
) -> None:
    """A child's end locks its parent's row in the transaction that ends the child; a parent
    that is due (here: made due in that same transaction, so no worker took it before) and
    skipped by a claim meanwhile is announced by that commit. Its run_at (that transaction's
    start) sorts behind the run the worker claimed meanwhile: the claim must scan from the
    head."""
    workers.start("--poll", LONG, "--heartbeat", LONG)
    parent = wfctl.submit(dsn, "three", {}, delay="1h")
    child = wfctl.submit(dsn, "three", {}, delay="1h")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("UPDATE workflows SET parent_id = %s WHERE id = %s", (parent, child))
    with psycopg.connect(dsn) as ender:
        ender.execute("UPDATE workflows SET run_at = now() WHERE id = %s", (parent,))
        ender.execute(
            "UPDATE workflows SET status = 'cancelled', finished_at = now() WHERE id = %s", (child,)
        )
        other = wfctl.submit(dsn, "three", {})  # its NOTIFY makes the worker claim now
        # the claim that took it skipped the parent
        wait_for(lambda: status(dsn, other) == "completed", what="the other run to complete")
        assert status(dsn, parent) == "pending"
        ender.commit()
    wait_for(
        lambda: status(dsn, parent) == "completed",
        timeout=PROMPT,
        what=f"the parent the claim skipped to complete (the poll is {LONG} away)",
    )


@pytest.mark.parametrize(
    ("workflow", "data"),
    [("sleeper", {"sleep": "1s"}), ("flaky", {"fail_times": 2})],
    ids=["a sleep", "a retry's backoff"],
)
def test_a_run_this_worker_parked_or_backed_off_resumes_when_due_not_at_the_poll(
    dsn: str, workers: Any, workflow: str, data: dict[str, Any]
) -> None:
    """Nothing announces a due time: the worker that parked the run (or put it back to retry)
    knows when, and claims then."""
    workers.start("--poll", LONG, "--heartbeat", LONG)
    wid = wfctl.submit(dsn, workflow, data)
    wait_for(
        lambda: status(dsn, wid) == "completed",
        timeout=PROMPT,
        what=f"the {workflow} run to complete (the poll is {LONG} away)",
    )


class Interleaved(psycopg.Connection[Any]):
    """A client connection on which, right after the first read of the run's outcome that finds
    it unfinished, another session finishes the run and this connection runs one more statement:
    the completion's NOTIFY reaches it inside that statement, not while it waits."""

    finish: Any = None  # called with no arguments, on its own connection

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        cursor = super().execute(query, params, **kwargs)
        finish = type(self).finish
        if finish is not None and query == coordination.q("coordination.outcome") and self._listening():
            type(self).finish = None
            finish()
            super().execute("SELECT 1")  # the NOTIFY arrives with this statement's reply
        return cursor

    def _listening(self) -> bool:
        return bool(
            super().execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0]  # type: ignore[index]
        )


def test_a_result_announced_during_a_statement_returns_without_waiting_for_the_recheck(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the library re-reads every RECHECK seconds anyway: make that far away, so that only the
    # NOTIFY can end the wait in time
    monkeypatch.setattr(coordination, "RECHECK", 60.0)
    wid = wfctl.submit(dsn, "three", {})

    def finish() -> None:
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute(
                "UPDATE workflows SET status = 'completed', output_data = '7' WHERE id = %s", (wid,)
            )

    Interleaved.finish = finish
    got: list[Any] = []
    with Interleaved.connect(dsn, autocommit=True) as conn:
        waiter = threading.Thread(target=lambda: got.append(wfctl.result(conn, wid, timeout="60s")))
        waiter.start()
        waiter.join(PROMPT)
        assert not waiter.is_alive(), "wfctl.result slept through the completion's NOTIFY"
    assert Interleaved.finish is None, "the completion was never interleaved"
    assert got == [7]
