"""The step a running run is in, as its worker's heartbeats report it (migration 0027): written by
the execution that holds the lease only, and trusted by the stuck report only for the step after
the last checkpoint."""

from __future__ import annotations

import uuid
from datetime import timedelta

from helpers import rows
from report_rows import db_now, workflow

from wfctl import reports
from wfctl.worker import heartbeat


def beat(conn, me: heartbeat.Identity, in_flight) -> None:
    heartbeat.beat(conn, me, 4, ["order"], interval=1.0, dead_after=3.0, in_flight=in_flight)


def test_only_the_execution_holding_the_lease_reports_its_step(dsn, conn):
    me = heartbeat.Identity.new()
    beat(conn, me, [])
    now = db_now(conn)
    wid = workflow(conn, now, status="running", lease_owner=me.id, lease_epoch=3, current_step=1)
    # the same run twice in one worker: an old execution (cancelled, retried) still in its step
    beat(conn, me, [(wid, 2, 5, "old"), (wid, 3, 2, "charge")])
    assert rows(dsn, "SELECT step_in_flight, step_in_flight_name FROM workflows WHERE id = %s", wid) == [
        (2, "charge")
    ]
    # a beat without the run (between steps, say) keeps what the last one said
    beat(conn, me, [(uuid.uuid4(), 1, 1, "elsewhere")])
    assert rows(dsn, "SELECT step_in_flight, step_in_flight_name FROM workflows WHERE id = %s", wid) == [
        (2, "charge")
    ]


def test_the_stuck_report_trusts_the_name_only_for_the_step_after_the_checkpoint(conn):
    me = heartbeat.Identity.new()
    beat(conn, me, [])
    now = db_now(conn)
    wid = workflow(conn, now, status="running", lease_owner=me.id, lease_epoch=1, current_step=1)
    beat(conn, me, [(wid, 1, 2, "charge")])
    conn.execute("UPDATE workers SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", (me.id,))
    conn.execute("UPDATE workflows SET updated_at = now() - interval '1 hour' WHERE id = %s", (wid,))
    [row] = reports.stuck(conn)
    assert (row["step_in_flight"], row["step_in_flight_name"]) == (2, "charge")
    # step 2 was checkpointed after the last beat: the name said is no longer the step in flight
    conn.execute("UPDATE workflows SET current_step = 2 WHERE id = %s", (wid,))
    [row] = reports.stuck(conn, stale=timedelta(minutes=5))
    assert (row["step_in_flight"], row["step_in_flight_name"]) == (3, None)
