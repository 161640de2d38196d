"""Operator actions against work in flight: a cancel racing a fan-out or a child's end, a retry
of a parent a cancel took with its children, prune beside a parent that still waits, prune
beside a live idle worker. Each case is driven through the engine's own SQL functions in
transactions the test holds open, so the interleaving is the one named, every time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from helpers import rows, wait_for
from support.control_interplay import children, statuses
from support.stateful_audit import check_cancelled_trees, install_audit

from wfctl import control
from wfctl.queries import q

T = TypeVar("T")


# the coordination step ctx.start_children runs (sql/queries/worker.sql)
START_CHILDREN = (
    "SELECT state FROM wfctl_start_children_step(%s, %s, 1, %s, 'children', 'leaf', %s::jsonb[],"
    " NULL, NULL, NULL, NULL, true, now(), NULL)"
)


def running(conn: psycopg.Connection[Any], wtype: str = "fanout", parent: UUID | None = None) -> UUID:
    """A workflow as a worker's claim leaves it: running, attempt 1, epoch 1."""
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, status, attempt, lease_epoch, lease_owner, parent_id)"
        " VALUES (%s, 'running', 1, 1, 'test-worker', %s) RETURNING id",
        (wtype, parent),
    ).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def start_children(conn: psycopg.Connection[Any], parent: UUID, step: int, n: int) -> str:
    inputs = [psycopg.types.json.Jsonb({"n": i}) for i in range(n)]
    row = conn.execute(START_CHILDREN, (parent, 1, step, inputs)).fetchone()
    assert row is not None
    return str(row[0])


def in_background(fn: Callable[[], T]) -> Callable[[], T]:
    """Run fn in a thread; the returned call joins it and gives fn's result (or raises its error)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # handed to the joining test
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> T:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the background call did not return"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return join


def waiting_for_a_lock(dsn: str, text: str) -> bool:
    return bool(
        rows(
            dsn,
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE %s",
            f"%{text}%",
        )
    )


def cancel_in_background(dsn: str, wid: UUID) -> Callable[[], control.Cancelled]:
    def cancel() -> control.Cancelled:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return control.cancel(conn, wid)

    return in_background(cancel)


def test_a_cancel_that_waited_for_a_fan_out_cancels_every_child_it_committed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
    fan_out = psycopg.connect(dsn)
    try:
        # the step's transaction holds the parent's row while its children are inserted
        assert start_children(fan_out, parent, 1, 200) == "done"
        join = cancel_in_background(dsn, parent)
        wait_for(lambda: waiting_for_a_lock(dsn, "WITH RECURSIVE tree"), what="the cancel waits")
        fan_out.commit()
        done = join()
    finally:
        fan_out.close()
    assert done.previous_status == "running"
    assert len(done.descendants) == 200
    assert statuses(dsn, parent) == {"cancelled": 200}


def test_a_fan_out_after_a_cancel_starts_no_child(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
        control.cancel(conn, parent)
        assert start_children(conn, parent, 1, 5) == "fenced"
    assert statuses(dsn, parent) == {}


def test_a_cancel_cancels_grandchildren_committed_while_it_waited(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
        child = running(conn, "leaf", parent)
    fan_out = psycopg.connect(dsn)
    try:
        assert start_children(fan_out, child, 1, 30) == "done"  # holds the child's row
        join = cancel_in_background(dsn, parent)
        wait_for(lambda: waiting_for_a_lock(dsn, "WITH RECURSIVE tree"), what="the cancel waits")
        fan_out.commit()
        done = join()
    finally:
        fan_out.close()
    assert [d.depth for d in done.descendants] == [1] + [2] * 30
    assert statuses(dsn, child) == {"cancelled": 30}


def test_a_cancel_and_a_childs_end_do_not_deadlock(dsn: str) -> None:
    """A child's end locks the child, then (its trigger) the parent waiting for it; a cancel of
    the parent must not lock them the other way round."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
        assert start_children(conn, parent, 1, 2) == "done"
        first, second = children(dsn, parent)
        conn.execute(
            "UPDATE workflows SET status = 'pending', wait_kind = 'children', wait_step = 2,"
            " wait_ids = ARRAY[%s, %s]::uuid[], wait_remaining = 2 WHERE id = %s",
            (first, second, parent),
        )
    ending = psycopg.connect(dsn)
    try:
        ending.execute("SELECT 1 FROM workflows WHERE id = %s FOR UPDATE", (first,))
        join = cancel_in_background(dsn, parent)
        wait_for(lambda: waiting_for_a_lock(dsn, "WITH RECURSIVE tree"), what="the cancel waits")
        # the child ends: the trigger counts it off its parent's wait (the parent's row)
        ending.execute(
            "UPDATE workflows SET status = 'completed', finished_at = now() WHERE id = %s", (first,)
        )
        ending.commit()
        done = join()
    finally:
        ending.close()
    assert {d.id: d.previous_status for d in done.descendants} == {second: "pending"}
    assert dict(rows(dsn, "SELECT id, status FROM workflows WHERE parent_id = %s", parent)) == {
        first: "completed",
        second: "cancelled",
    }


def test_retry_leaves_a_child_cancelled_on_its_own_and_one_whose_step_it_forgets(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
        assert start_children(conn, parent, 1, 2) == "done"
        assert start_children(conn, parent, 2, 1) == "done"
        alone, taken, forgotten = children(dsn, parent)  # in the order started
        control.cancel(conn, alone)
        done = control.cancel(conn, parent)
        assert {d.id for d in done.descendants} == {taken, forgotten}
        again = control.retry(conn, parent, from_step=2)
    assert (again.kept_steps, again.descendants) == (1, 1)
    assert dict(rows(dsn, "SELECT id, status FROM workflows WHERE parent_id = %s", parent)) == {
        alone: "cancelled",  # an operator's own cancel stays
        taken: "pending",  # named by the kept checkpoint of step 1
        forgotten: "cancelled",  # step 2 runs again and starts a new child
    }


def finished_child(conn: psycopg.Connection[Any], parent: UUID) -> UUID:
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, status, parent_id, output_data, finished_at, updated_at)"
        " VALUES ('leaf', 'completed', %s, '2', now() - interval '1 hour', now() - interval '1 hour')"
        " RETURNING id",
        (parent,),
    ).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def test_prune_keeps_a_finished_child_while_its_parent_stays(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
        child = finished_child(conn, parent)
        dry = control.prune(conn, timedelta(minutes=1), ["completed"], dry_run=True)
        assert dry.workflows == 0
        assert control.prune(conn, timedelta(minutes=1), ["completed"]).workflows == 0
        assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", child) == [("completed",)]
        # a parent that ended within the cutoff (or failed, kept by a prune of completed runs
        # only) stays, and may be retried: its child stays with it
        conn.execute(
            "UPDATE workflows SET status = 'failed', finished_at = now() - interval '1 hour' WHERE id = %s",
            (parent,),
        )
        assert control.prune(conn, timedelta(minutes=1), ["completed"]).workflows == 0
        conn.execute(
            "UPDATE workflows SET status = 'completed', finished_at = now() WHERE id = %s", (parent,)
        )
        assert control.prune(conn, timedelta(minutes=1), ["completed"], dry_run=True).workflows == 0
        assert control.prune(conn, timedelta(minutes=1), ["completed"]).workflows == 0
        # once the parent is old history too, the child goes with it
        conn.execute("UPDATE workflows SET finished_at = now() - interval '1 hour' WHERE id = %s", (parent,))
        assert control.prune(conn, timedelta(minutes=1), ["completed"]).workflows == 2
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE id IN (%s, %s)", child, parent) == [(0,)]


def test_prune_keeps_the_row_of_a_live_idle_worker_however_short_the_cutoff(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at, heartbeat_seconds,"
            " dead_after_seconds) VALUES"
            " ('live', 'h', 1, 4, now() - interval '20 seconds', 10, 30),"
            " ('silent', 'h', 2, 4, now() - interval '40 seconds', 10, 30),"
            " ('stopped', 'h', 3, 4, now() - interval '20 seconds', 10, 30)"
        )
        conn.execute("UPDATE workers SET stopped_at = now() - interval '20 seconds' WHERE id = 'stopped'")
        assert control.prune(conn, timedelta(seconds=2), ["completed"], dry_run=True).workers == 2
        assert control.prune(conn, timedelta(seconds=2), ["completed"]).workers == 2
    assert rows(dsn, "SELECT id FROM workers") == [("live",)]


def cancelled_trees_check(dsn: str) -> str:
    """What the stateful test's check of cancelled trees says of ``dsn`` ('' when it holds)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            check_cancelled_trees(conn)
        except AssertionError as broken:
            return str(broken)
    return ""


def fan_out_cancelled_in_the_race(dsn: str, cancel: Callable[[psycopg.Connection[Any], UUID], Any]) -> UUID:
    """A parent whose fan-out commits while ``cancel`` waits for the parent's row."""
    install_audit(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = running(conn)
    fan_out = psycopg.connect(dsn)
    try:
        assert start_children(fan_out, parent, 1, 3) == "done"

        def cancelled() -> Any:
            with psycopg.connect(dsn, autocommit=True) as conn:
                return cancel(conn, parent)

        join = in_background(cancelled)
        wait_for(lambda: waiting_for_a_lock(dsn, "WITH RECURSIVE tree"), what="the cancel waits")
        fan_out.commit()
        join()
    finally:
        fan_out.close()
    return parent


def test_the_models_check_catches_a_cancel_that_leaves_children_of_a_fan_out_it_waited_for(
    dsn: str,
) -> None:
    def one_statement(conn: psycopg.Connection[Any], wid: UUID) -> Any:
        # the cancel as one statement, its tree read before it waited: what the engine did
        return conn.execute(
            q("control.cancel"), {"id": wid, "reason": None, "descendants_only": False}
        ).fetchall()

    parent = fan_out_cancelled_in_the_race(dsn, one_statement)
    assert statuses(dsn, parent) == {"pending": 3}
    assert "was cancelled" in cancelled_trees_check(dsn)


def test_the_models_check_holds_for_the_engines_cancel(dsn: str) -> None:
    parent = fan_out_cancelled_in_the_race(dsn, control.cancel)
    assert statuses(dsn, parent) == {"cancelled": 3}
    assert cancelled_trees_check(dsn) == ""
