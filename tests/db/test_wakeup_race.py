"""No lost wake-up, and no zombie writes, at the level of the SQL functions the worker calls
(migration 0006), with the race windows opened deliberately and many times.

A workflow here is a row put in the 'running' state by hand, as a claim would leave it; the
tests call the step functions as the worker does (wfctl/worker/calls.py statements) while a
second connection sends a message or finishes a child at the worst moment.
"""

from __future__ import annotations

import functools
import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers import wait_for

from wfctl.queries import q

NEVER_YEAR = 9999


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def running_workflow(
    conn: psycopg.Connection[Any], parent: uuid.UUID | None = None, epoch: int = 1
) -> uuid.UUID:
    wid = uuid.uuid4()
    conn.execute(
        "INSERT INTO workflows (id, workflow_type, status, lease_owner, lease_epoch, parent_id)"
        " VALUES (%s, 'race', 'running', 'test-worker', %s, %s)",
        (wid, epoch, parent),
    )
    return wid


def recv(conn: psycopg.Connection[Any], wid: uuid.UUID, epoch: int = 1, step: int = 1) -> tuple[str, Any]:
    row = conn.execute(
        q("worker.recv"),
        {
            "id": wid,
            "epoch": epoch,
            "attempt": 1,
            "step": step,
            "name": "recv:go",
            "topic": "go",
            "timeout": None,
            "started": None,
        },
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def join(
    conn: psycopg.Connection[Any], wid: uuid.UUID, ids: list[uuid.UUID], epoch: int = 1
) -> tuple[str, Any]:
    row = conn.execute(
        q("worker.join"),
        {
            "id": wid,
            "epoch": epoch,
            "attempt": 1,
            "step": 1,
            "name": "wait",
            "ids": ids,
            "timeout": None,
            "started": None,
        },
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def state(conn: psycopg.Connection[Any], wid: uuid.UUID) -> tuple[str, bool, str | None]:
    """(status, runnable now, wait_kind)"""
    row = conn.execute(
        "SELECT status, run_at <= now(), wait_kind FROM workflows WHERE id = %s", (wid,)
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def unconsumed(conn: psycopg.Connection[Any], wid: uuid.UUID) -> int:
    return conn.execute(
        "SELECT count(*) FROM workflow_messages WHERE workflow_id = %s AND consumed_at IS NULL", (wid,)
    ).fetchone()[0]  # type: ignore[index]


def assert_not_lost(conn: psycopg.Connection[Any], wid: uuid.UUID, outcome: tuple[str, Any]) -> str:
    """The step either took the message, or parked and was woken by its delivery."""
    if outcome[0] == "done":
        assert outcome[1]["payload"] == "hello"
        assert unconsumed(conn, wid) == 0
        return "took it"
    assert outcome[0] == "parked", outcome
    status, runnable, _ = state(conn, wid)
    assert unconsumed(conn, wid) == 1
    assert (status, runnable) == ("pending", True), (
        "a message is waiting but the workflow sleeps: lost wake-up"
    )
    return "woken"


def blocked_on_a_lock(conn: psycopg.Connection[Any], count: int) -> Callable[[], bool]:
    def check() -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        return row is not None and row[0] >= count

    return check


def together(step: Callable[[], tuple[str, Any]], other: Callable[[], object]) -> tuple[str, Any]:
    """Start ``step`` and ``other`` at the same moment, one of them delayed by a random skew of
    up to a millisecond; the step's outcome."""
    start = threading.Barrier(2)
    skew = random.uniform(-0.001, 0.001)
    got: list[tuple[str, Any]] = []

    def run_step() -> None:
        start.wait()
        if skew > 0:
            threading.Event().wait(skew)
        got.append(step())

    def run_other() -> None:
        start.wait()
        if skew < 0:
            threading.Event().wait(-skew)
        other()

    threads = [threading.Thread(target=run_step), threading.Thread(target=run_other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return got[0]


def send_hello(conn: psycopg.Connection[Any], wid: uuid.UUID) -> None:
    conn.execute("SELECT wfctl_send(%s, 'go', '\"hello\"')", (wid,))


# -- messages -------------------------------------------------------------------------------------


def test_a_send_committed_between_the_check_and_the_park_wakes_the_workflow(dsn: str) -> None:
    """The window itself, held open: the sender's message is uncommitted while the step looks
    (it does not see it, so it parks), and commits right after the park."""
    with connect(dsn) as worker, connect(dsn) as watcher, psycopg.connect(dsn) as sender:
        for _ in range(50):
            wid = running_workflow(worker)
            sender.execute("SELECT wfctl_send(%s, 'go', '\"hello\"')", (wid,))  # open transaction
            outcome = recv(worker, wid)
            assert outcome[0] == "parked"
            assert state(watcher, wid) == ("pending", False, "message")
            sender.commit()
            assert assert_not_lost(watcher, wid, outcome) == "woken"


def test_a_send_committing_while_the_step_waits_for_the_row_is_never_lost(dsn: str) -> None:
    """Both the step and the sender's commit queue behind a third session's lock on the
    workflow row; when it goes, they run in either order. 60 rounds."""
    results: dict[str, int] = {}
    with (
        connect(dsn) as worker,
        connect(dsn) as sender,
        connect(dsn) as watcher,
        psycopg.connect(dsn) as holder,
    ):
        for _ in range(60):
            wid = running_workflow(watcher)
            holder.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (wid,))
            got: list[tuple[str, Any]] = []
            step = threading.Thread(
                target=functools.partial(lambda w, out: out.append(recv(worker, w)), wid, got)
            )
            send = threading.Thread(target=functools.partial(send_hello, sender, wid))
            first, second = (step, send) if random.random() < 0.5 else (send, step)
            first.start()
            wait_for(blocked_on_a_lock(watcher, 1), timeout=10, what="the first to wait for the row")
            second.start()
            wait_for(blocked_on_a_lock(watcher, 2), timeout=10, what="both to wait for the row")
            holder.commit()
            step.join(10)
            send.join(10)
            verdict = assert_not_lost(watcher, wid, got[0])
            results[verdict] = results.get(verdict, 0) + 1
    print(f"\nrow-lock race, 60 rounds: {results}")


def test_concurrent_sends_and_parks_at_random_moments_lose_nothing(dsn: str) -> None:
    """No lock held open: the step and the send start together, 300 times, with random
    sub-millisecond skews, so the send lands before, inside and after the step."""
    results: dict[str, int] = {}
    with connect(dsn) as worker, connect(dsn) as sender, connect(dsn) as watcher:
        for _ in range(300):
            wid = running_workflow(watcher)
            outcome = together(
                functools.partial(recv, worker, wid), functools.partial(send_hello, sender, wid)
            )
            verdict = assert_not_lost(watcher, wid, outcome)
            results[verdict] = results.get(verdict, 0) + 1
    print(f"\nrandom race, 300 rounds: {results}")
    assert sum(results.values()) == 300


# -- children -------------------------------------------------------------------------------------


def finish(conn: psycopg.Connection[Any], child: uuid.UUID) -> None:
    conn.execute("UPDATE workflows SET status = 'completed', output_data = '1' WHERE id = %s", (child,))


def test_a_child_finishing_while_the_parent_joins_is_never_lost(dsn: str) -> None:
    """The last of two children finishes at a random moment around the parent's join, 200
    times; the parent either sees both finished or is woken by the last one."""
    results: dict[str, int] = {}
    with connect(dsn) as worker, connect(dsn) as child_conn, connect(dsn) as watcher:
        for _ in range(200):
            parent = running_workflow(watcher)
            children = [running_workflow(watcher, parent=parent) for _ in range(2)]
            finish(watcher, children[0])
            got = together(
                functools.partial(join, worker, parent, children),
                functools.partial(finish, child_conn, children[1]),
            )
            if got[0] == "done":
                assert [c["status"] for c in got[1]["children"]] == ["completed", "completed"]
                verdict = "saw both"
            else:
                assert got[0] == "parked"
                status, runnable, _ = state(watcher, parent)
                assert (status, runnable) == ("pending", True), "children finished but the parent sleeps"
                verdict = "woken"
            results[verdict] = results.get(verdict, 0) + 1
    print(f"\nchild race, 200 rounds: {results}")


def test_the_parent_is_woken_by_the_last_child_only(dsn: str) -> None:
    with connect(dsn) as conn:
        parent = running_workflow(conn)
        children = [running_workflow(conn, parent=parent) for _ in range(5)]
        assert join(conn, parent, children)[0] == "parked"
        for index, child in enumerate(children):
            assert state(conn, parent)[1] is False, f"woken before child {index} finished"
            finish(conn, child)
        assert state(conn, parent)[:2] == ("pending", True)
        row = conn.execute("SELECT wait_remaining FROM workflows WHERE id = %s", (parent,)).fetchone()
        assert row == (0,)


# -- zombies --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stale_status", ["running", "pending"])
def test_a_zombie_epoch_can_neither_consume_start_a_child_nor_publish(dsn: str, stale_status: str) -> None:
    """The lease moved on (epoch 2) while an old execution (epoch 1) still runs: each of its
    coordination steps is refused and stores nothing."""
    with connect(dsn) as conn:
        wid = running_workflow(conn, epoch=2)
        conn.execute("UPDATE workflows SET status = %s WHERE id = %s", (stale_status, wid))
        conn.execute("SELECT wfctl_send(%s, 'go', '\"hello\"')", (wid,))
        assert recv(conn, wid, epoch=1) == ("fenced", None)
        base = {"id": wid, "epoch": 1, "attempt": 1, "step": 1, "started": None}
        child = conn.execute(
            q("worker.start_children"),
            {
                **base,
                "name": "start_child:leaf",
                "type": "leaf",
                "inputs": [None],
                "keys": [None],
                "many": False,
                "priority": None,
                "timeout": None,
                "timeout_error": None,
                "trace_context": None,
            },
        ).fetchone()
        assert child == ("fenced", None)
        event = conn.execute(
            q("worker.set_event"), {**base, "name": "set_event:k", "key": "k", "value": "1"}
        ).fetchone()
        assert event == ("fenced", None)
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM workflow_messages WHERE consumed_at IS NULL),"
            " (SELECT count(*) FROM workflows WHERE parent_id = %s),"
            " (SELECT count(*) FROM workflow_events), (SELECT count(*) FROM workflow_steps)",
            (wid,),
        ).fetchone()
        assert counts == (1, 0, 0, 0)


def test_a_re_sent_step_answers_as_the_first_did(dsn: str) -> None:
    """A step whose reply was lost is sent again by the worker: it must not consume a second
    message or start a second child."""
    with connect(dsn) as conn:
        wid = running_workflow(conn)
        for text in ('"one"', '"two"'):
            conn.execute("SELECT wfctl_send(%s, 'go', %s)", (wid, text))
        first = recv(conn, wid)
        again = recv(conn, wid)
        assert first == again and first[1]["payload"] == "one"
        assert unconsumed(conn, wid) == 1
        params = {
            "id": wid,
            "epoch": 1,
            "attempt": 1,
            "step": 2,
            "name": "start_child:leaf",
            "type": "leaf",
            "inputs": [None],
            "keys": [None],
            "many": False,
            "priority": None,
            "timeout": None,
            "timeout_error": None,
            "trace_context": None,
            "started": None,
        }
        one = conn.execute(q("worker.start_children"), params).fetchone()
        two = conn.execute(q("worker.start_children"), params).fetchone()
        assert one == two and one is not None and one[0] == "done"
        row = conn.execute("SELECT count(*) FROM workflows WHERE parent_id = %s", (wid,)).fetchone()
        assert row == (1,)
        # a park re-sent: reported parked again, nothing else changes
        assert recv(conn, wid, step=3)[0] == "done"  # takes "two"
        assert recv(conn, wid, step=4)[0] == "parked"
        assert recv(conn, wid, step=4)[0] == "parked"
