"""wfctl.reports against a real PostgreSQL: stats, list, show, workers (rows inserted with SQL)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from helpers import PARTITIONED_RUN
from report_rows import db_now, step, worker, workflow

from wfctl import reports
from wfctl.errors import InvalidInput, NotFound
from wfctl.prometheus import label_translation

DAY = timedelta(hours=24)
STALE = timedelta(minutes=5)


def by_type(rows: list[dict]) -> dict[str, dict]:
    return {r["workflow_type"]: r for r in rows}


def test_success_rate_counts_statuses_in_the_window(conn):
    now = db_now(conn)
    for seconds in (10, 20, 30, 40):
        done = workflow(conn, now, status="completed", run=timedelta(seconds=seconds))
        step(conn, done, 1, "work", start=now - timedelta(minutes=59), seconds=seconds)
    failed = workflow(conn, now, status="failed", run=timedelta(seconds=100))
    step(conn, failed, 1, "work", start=now - timedelta(minutes=59), seconds=100, status="failed")
    workflow(conn, now, status="running")
    workflow(conn, now, status="pending")
    workflow(conn, now, status="cancelled", run=None)
    workflow(conn, now, status="completed", age=timedelta(days=3))  # outside the window
    workflow(conn, now, workflow_type="email", status="failed")

    report = reports.stats(conn, since=DAY, stale=STALE)
    rates = by_type(report.success_rate)
    order = rates["order"]
    assert (order["total"], order["completed"], order["failed"]) == (8, 4, 1)
    assert (order["running"], order["pending"], order["cancelled"]) == (1, 1, 1)
    assert order["success_pct"] == Decimal("50.0")
    # finished runs with a start, by the time in their steps: 10, 20, 30, 40 and 100 seconds
    assert order["p50_seconds"] == Decimal("30.000")
    assert order["p95_seconds"] == Decimal("88.000")
    assert rates["email"]["success_pct"] == Decimal("0.0")
    assert [r["workflow_type"] for r in report.success_rate] == ["order", "email"]  # biggest first
    assert not report.window_empty


def test_success_rate_window_and_type_filter(conn):
    now = db_now(conn)
    workflow(conn, now, age=timedelta(hours=2))
    workflow(conn, now, age=timedelta(hours=30))
    workflow(conn, now, workflow_type="email")

    assert (
        by_type(reports.stats(conn, since=timedelta(hours=3), stale=STALE).success_rate)["order"]["total"]
        == 1
    )
    assert (
        by_type(reports.stats(conn, since=timedelta(days=2), stale=STALE).success_rate)["order"]["total"] == 2
    )
    only = reports.stats(conn, since=DAY, stale=STALE, workflow_type="email")
    assert [r["workflow_type"] for r in only.success_rate] == ["email"]
    empty = reports.stats(conn, since=timedelta(minutes=1), stale=STALE)
    assert empty.window_empty and empty.slow_steps == []


def test_stuck_runs_are_those_whose_owner_is_gone(conn):
    now = db_now(conn)
    worker(conn, now, "live:1:a", silent=timedelta(seconds=3))
    worker(conn, now, "dead:2:b", silent=timedelta(minutes=12))
    worker(conn, now, "stopped:3:c", silent=timedelta(seconds=3), stopped=True)
    healthy = workflow(conn, now, status="running", lease_owner="live:1:a", current_step=1)
    dead = workflow(conn, now, status="running", lease_owner="dead:2:b", current_step=2)
    step(conn, dead, 1, "validate", start=now - timedelta(minutes=30), seconds=1)
    step(conn, dead, 2, "charge_card", start=now - timedelta(minutes=29), seconds=1)
    stopped = workflow(conn, now, status="running", lease_owner="stopped:3:c", current_step=0)
    missing = workflow(
        conn, now, status="running", lease_owner="vanished:4:d", updated_at=now - timedelta(minutes=20)
    )
    old = workflow(conn, now, status="running", lease_owner="dead:2:b", age=timedelta(days=9))
    workflow(conn, now, status="completed", lease_owner="dead:2:b")  # finished: not stuck

    rows = reports.stuck(conn, stale=STALE)
    found = {r["id"]: r for r in rows}
    assert set(found) == {dead, stopped, missing, old}
    assert healthy not in found
    assert (found[dead]["current_step"], found[dead]["step_name"]) == (2, "charge_card")
    assert found[dead]["owner_state"] == "dead"
    assert 12 * 60 <= found[dead]["age_seconds"] < 13 * 60
    assert found[stopped]["owner_state"] == "stopped" and found[stopped]["step_name"] is None
    assert found[missing]["owner_state"] == "missing"
    assert 20 * 60 <= found[missing]["age_seconds"] < 21 * 60  # from updated_at: no heartbeat
    assert rows[0]["id"] == missing  # longest silent first
    # a longer threshold forgives the worker that was silent for 12 minutes
    assert dead not in {r["id"] for r in reports.stuck(conn, stale=timedelta(minutes=15))}
    # the stats report lists stuck runs whatever their age, filtered by type
    assert old in {r["id"] for r in reports.stats(conn, since=DAY, stale=STALE).stuck}
    assert reports.stats(conn, since=DAY, stale=STALE, workflow_type="email").stuck == []


def test_slow_steps_average_p95_and_count_per_type_and_step(conn):
    now = db_now(conn)
    for index, seconds in enumerate((1.0, 2.0, 3.0, 10.0)):
        wid = workflow(conn, now, age=timedelta(hours=1, minutes=index))
        start = now - timedelta(minutes=50)
        step(conn, wid, 1, "validate", start=start, seconds=0.5)
        step(conn, wid, 2, "charge", start=start, seconds=seconds)
    failed = workflow(conn, now, status="failed")
    step(conn, failed, 1, "charge", start=now, seconds=99, status="failed")  # not a completion
    old = workflow(conn, now, age=timedelta(days=2))
    step(conn, old, 1, "charge", start=now - timedelta(days=2), seconds=500)  # outside the window
    other = workflow(conn, now, workflow_type="email")
    step(conn, other, 1, "send", start=now, seconds=0.25)

    rows = reports.stats(conn, since=DAY, stale=STALE).slow_steps
    assert [(r["workflow_type"], r["step_name"]) for r in rows] == [
        ("order", "charge"),
        ("order", "validate"),
        ("email", "send"),
    ]
    charge = rows[0]
    assert charge["count"] == 4
    assert charge["avg_seconds"] == Decimal("4.000")
    assert charge["p50_seconds"] == Decimal("2.500")
    assert charge["p95_seconds"] == Decimal("8.950")
    assert charge["max_seconds"] == Decimal("10.000")
    assert charge["sum_seconds"] == Decimal("16.000")
    only = reports.stats(conn, since=DAY, stale=STALE, workflow_type="email").slow_steps
    assert [r["step_name"] for r in only] == ["send"]


def test_stats_rejects_a_non_positive_window(conn):
    with pytest.raises(InvalidInput):
        reports.stats(conn, since=timedelta(0), stale=STALE)


def test_list_is_newest_first_with_filters(conn):
    now = db_now(conn)
    ids = [workflow(conn, now, age=timedelta(minutes=m)) for m in (50, 40, 30, 20, 10)]
    failed = workflow(conn, now, status="failed", age=timedelta(minutes=5), error_message="boom\nsecond line")
    email = workflow(conn, now, workflow_type="email", status="pending", age=timedelta(minutes=1))
    ancient = workflow(conn, now, age=timedelta(days=40))

    rows = reports.list_workflows(conn)
    assert [r["id"] for r in rows] == [email, failed, *reversed(ids), ancient]
    assert [r["id"] for r in reports.list_workflows(conn, limit=2)] == [email, failed]
    assert [r["id"] for r in reports.list_workflows(conn, status="failed")] == [failed]
    assert [r["id"] for r in reports.list_workflows(conn, workflow_type="email")] == [email]
    recent = reports.list_workflows(conn, since=timedelta(minutes=25))
    assert [r["id"] for r in recent] == [email, failed, ids[4], ids[3]]
    assert rows[1]["error_message"] == "boom\nsecond line"
    assert rows[2]["duration_seconds"] is None  # no step stored: no duration
    assert rows[0]["duration_seconds"] is None  # pending: never started


def test_list_rejects_a_bad_status_and_limit(conn):
    with pytest.raises(InvalidInput, match="use one of pending, running, completed, failed, cancelled"):
        reports.list_workflows(conn, status="done")
    with pytest.raises(InvalidInput):
        reports.list_workflows(conn, limit=0)


def test_show_returns_the_row_and_the_step_timeline(conn):
    now = db_now(conn)
    wid = workflow(
        conn,
        now,
        status="failed",
        age=timedelta(minutes=10),
        run=timedelta(seconds=9),
        input_data='{"amount": 12}',
        output_data=None,
        error_message="card declined",
        attempt=4,
    )
    start = now - timedelta(minutes=10) + timedelta(seconds=1)
    step(
        conn,
        wid,
        2,
        "charge",
        start=start + timedelta(seconds=3),
        seconds=6,
        status="failed",
        error_message="card declined",
    )
    step(
        conn, wid, 1, "validate", start=start + timedelta(seconds=0.5), seconds=2, output_data='{"ok": true}'
    )

    detail = reports.show_workflow(conn, str(wid))
    assert detail.workflow["id"] == wid and detail.workflow["status"] == "failed"
    assert detail.workflow["input_data"] == {"amount": 12}
    assert detail.workflow["error_message"] == "card declined"
    assert detail.workflow["duration_seconds"] == Decimal("8.000")  # in its steps: 2 + 6
    assert detail.workflow["elapsed_seconds"] == Decimal("9.000")  # first claim to finish
    assert [s["step_number"] for s in detail.steps] == [1, 2]
    first, second = detail.steps
    assert (first["offset_seconds"], first["duration_seconds"]) == (Decimal("0.500"), Decimal("2.000"))
    assert (second["offset_seconds"], second["duration_seconds"]) == (Decimal("3.000"), Decimal("6.000"))
    assert first["output_data"] == {"ok": True} and second["error_message"] == "card declined"


def test_show_errors(conn):
    with pytest.raises(InvalidInput, match="not a UUID"):
        reports.show_workflow(conn, "12345")
    with pytest.raises(NotFound):
        reports.show_workflow(conn, "00000000-0000-0000-0000-000000000000")


def test_workers_states_and_running_counts(conn):
    now = db_now(conn)
    worker(conn, now, "a:1:x", silent=timedelta(seconds=1))
    worker(conn, now, "b:2:y", silent=timedelta(minutes=30))
    worker(conn, now, "c:3:z", silent=timedelta(hours=2), stopped=True)
    worker(conn, now, "d:4:w", silent=timedelta(seconds=40))
    for _ in range(3):
        workflow(conn, now, status="running", lease_owner="a:1:x")
    workflow(conn, now, status="completed", lease_owner="a:1:x")
    workflow(conn, now, status="running", lease_owner="b:2:y")

    rows = reports.workers(conn, stale=STALE)
    assert [(r["id"], r["state"], r["alive"], r["running"]) for r in rows] == [
        ("a:1:x", "live", True, 3),
        ("d:4:w", "live", True, 0),
        ("b:2:y", "dead", False, 1),
        ("c:3:z", "stopped", False, 0),
    ]
    assert 30 * 60 <= rows[2]["heartbeat_age_seconds"] < 31 * 60
    assert [r["state"] for r in reports.workers(conn, stale=timedelta(seconds=10))][:2] == ["live", "dead"]


def test_reports_join_the_callers_transaction_or_leave_none_open(dsn, conn):
    now = db_now(conn)
    reports.stats(conn, since=DAY, stale=STALE)
    assert conn.info.transaction_status.name == "IDLE"  # autocommit: its own snapshot, closed
    with psycopg.connect(dsn) as tx:  # not autocommit: a transaction is open after this insert
        workflow(tx, now, workflow_type="uncommitted")
        report = reports.stats(tx, since=DAY, stale=STALE)
        assert [r["workflow_type"] for r in report.success_rate] == ["uncommitted"]
        tx.rollback()
    assert reports.stats(conn, since=DAY, stale=STALE).window_empty


def plan_indexes(conn, name: str, params: dict) -> set[str]:
    """The indexes the plan of a reports query uses when sequential scans are ruled out (so the
    test data's size does not matter): an index missing here cannot serve the query at all."""
    import json

    from psycopg import sql

    from wfctl.queries import q

    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(sql.SQL(q(name))), params).fetchone()
    found: set[str] = set()

    def walk(node: dict) -> None:
        if "Index Name" in node:
            found.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    walk(plan[0]["Plan"])
    # in the partitioned layout a plan names the partitions' indexes: each stands for the index of
    # the partitioned table it was made from
    return {top_index(conn, name) for name in found}


def top_index(conn, name: str) -> str:
    """The index of the partitioned table that index ``name`` of a partition belongs to (or
    ``name`` itself)."""
    while True:
        row = conn.execute(
            "SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE i.inhrelid = to_regclass(%s)",
            (name,),
        ).fetchone()
        if row is None:
            return name
        name = row[0]


# In the partitioned layout a report's window prunes whole partitions, and what is left is read
# by whatever plan suits a partition's size (bench/partitions.py measures those plans); the plan
# of the stuck report, over the running runs' index, is the same in both layouts.
PLANNED_BY_PARTITION = {
    "reports.success_rate",
    "reports.slow_steps",
    "reports.step_metrics",
    "reports.workflow_counts",
    "reports.list_workflows",
}


@pytest.mark.parametrize(
    ("name", "params", "indexes"),
    [
        (
            # the hours not rolled up by time, the unfinished runs of the others by status, a run's
            # steps by its id, the rollups by hour
            "reports.success_rate",
            {"since": DAY, "workflow_type": None},
            {
                "workflows_created_idx",
                "idx_workflows_status",
                "workflow_steps_workflow_id_step_number_key",
                "wfctl_rollup_counts_pkey",
            },
        ),
        (
            "reports.slow_steps",
            {"since": DAY, "workflow_type": None},
            {"workflow_steps_started_idx", "wfctl_rollup_durations_bucket_idx"},
        ),
        (
            "reports.workflow_counts",
            {**label_translation(), "other": "(other)", "max_types": 5},
            {"workflows_created_idx", "idx_workflows_status", "wfctl_rollup_counts_pkey"},
        ),
        (
            "reports.step_metrics",
            {"since": DAY, **label_translation(), "kept": ["order"], "other": "(other)"},
            {"workflow_steps_started_idx"},
        ),
        ("reports.stuck", {"stale": STALE, "workflow_type": None}, {"workflows_running_owner_idx"}),
        (
            "reports.list_workflows",
            {
                "status": "failed",
                "statuses": None,
                "workflow_type": None,
                "since": None,
                "limit": 50,
                "waiting": False,
                "key_prefix": None,
                "key_ranged": False,
                "key_below": None,
            },
            {"idx_workflows_status"},
        ),
    ],
)
def test_report_queries_can_use_their_indexes(conn, name, params, indexes):
    if PARTITIONED_RUN and name in PLANNED_BY_PARTITION:
        pytest.skip("the partitioned layout plans it by partition")
    assert indexes <= plan_indexes(conn, name, params)
