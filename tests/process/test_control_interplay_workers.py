"""Operator actions against work in flight: a cancel racing a fan-out or a child's end, a retry of a
parent a cancel took with its children, prune beside a parent that still waits, prune beside a
live idle worker. Each case is driven through the engine's own SQL functions in transactions the
test holds open, so the interleaving is the one named, every time.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_control_interplay.py.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from helpers import rows, wait_for
from support.control_interplay import children, statuses

import wfctl
from wfctl import control

# The engine's promises here hold in both table layouts: each test runs in each.
pytestmark = pytest.mark.layouts


def test_retry_of_a_cancelled_parent_revives_the_children_its_cancel_took(dsn: str, workers) -> None:
    workers.start(app="coordengine")
    parent = wfctl.submit(dsn, "fanout", {"n": 3, "wait": True})

    def children_parked() -> bool:
        return rows(
            dsn,
            "SELECT count(*) FROM workflows WHERE parent_id = %s AND wait_kind = 'message'"
            " AND status = 'pending'",
            parent,
        ) == [(3,)]

    wait_for(children_parked, what="children parked")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert len(control.cancel(conn, parent).descendants) == 3
        again = control.retry(conn, parent)
    assert again.descendants == 3
    wait_for(children_parked, what="children parked again")
    for (child,) in rows(dsn, "SELECT id FROM workflows WHERE parent_id = %s", parent):
        wfctl.send(dsn, child, "release", None)
    output = wfctl.result(dsn, parent, timeout=30)
    assert output["sum"] == 0 + 2 + 4
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s", parent) == [(3,)]


def test_a_finished_child_of_a_waiting_parent_survives_prune_end_to_end(dsn: str, workers) -> None:
    workers.start(app="coordengine")
    parent = wfctl.submit(dsn, "fanout", {"n": 2, "wait": True})
    wait_for(lambda: statuses(dsn, parent).get("pending") == 2, what="children started")
    first, second = children(dsn, parent)
    wfctl.send(dsn, first, "release", None)
    wait_for(lambda: statuses(dsn, parent).get("completed") == 1, what="the first child finished")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # its finish is an hour old to a prune of everything older than a minute
        conn.execute("UPDATE workflows SET finished_at = now() - interval '1 hour' WHERE id = %s", (first,))
        control.prune(conn, timedelta(minutes=1), ["completed", "failed", "cancelled"])
    wfctl.send(dsn, second, "release", None)
    assert wfctl.result(dsn, parent, timeout=30)["sum"] == 0 + 2


def test_retry_from_a_recv_step_receives_the_same_message_again(dsn: str, workers) -> None:
    workers.start(app="coordflows")
    wid = wfctl.submit(dsn, "approval", {"order": 3})
    wait_for(
        lambda: rows(dsn, "SELECT wait_kind FROM workflows WHERE id = %s", wid) == [("message",)],
        what="the run to park in its recv",
    )
    wfctl.send(dsn, wid, "approval", "yes")
    assert wfctl.result(dsn, wid, timeout=30)["decision"] == "yes"
    [(recv_step,)] = rows(
        dsn,
        "SELECT step_number FROM workflow_steps WHERE workflow_id = %s AND step_name = 'recv:approval'",
        wid,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE workflows SET status = 'failed' WHERE id = %s", (wid,))
        control.retry(conn, wid, from_step=recv_step)
    # the replay's recv takes the message the forgotten step had taken, not the next or none
    assert wfctl.result(dsn, wid, timeout=30)["decision"] == "yes"
    assert rows(dsn, "SELECT consumed_step FROM workflow_messages WHERE workflow_id = %s", wid) == [
        (recv_step,)
    ]
