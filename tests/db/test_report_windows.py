"""The windows and durations of the reports (rows inserted with SQL).

A workflow's duration (list, show, the p50/p95 of stats) is the time its run spent in its steps,
so time spent waiting (a retry days later, a durable sleep, a backoff) does not count; and a step
whose start (the worker's clock) is a little before its workflow's creation (the database's)
still counts in the window of its workflow.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from report_rows import db_now, step, workflow

from wfctl import reports

DAY = timedelta(hours=24)
STALE = timedelta(minutes=5)


def by_type(rows: list[dict]) -> dict[str, dict]:
    return {r["workflow_type"]: r for r in rows}


def test_a_step_that_starts_before_its_workflow_was_created_still_counts(conn):
    """A step's start is the worker's clock, its workflow's creation the database's: a worker a
    little behind writes a start before the creation. Near the window's edge such a step was
    dropped from the slow steps (and the run's duration), though its workflow is in the window."""
    now = db_now(conn)
    edge = workflow(conn, now, age=DAY - timedelta(seconds=30), run=timedelta(seconds=4))
    created = now - DAY + timedelta(seconds=30)
    step(conn, edge, 1, "charge", start=created - timedelta(seconds=45), seconds=3)  # clock 45s behind
    step(conn, edge, 2, "ship", start=created - timedelta(seconds=41), seconds=1)
    report = reports.stats(conn, since=DAY, stale=STALE)
    steps = {r["step_name"]: r for r in report.slow_steps}
    assert set(steps) == {"charge", "ship"}
    assert (steps["charge"]["count"], steps["charge"]["max_seconds"]) == (1, Decimal("3.000"))
    assert by_type(report.success_rate)["order"]["p50_seconds"] == Decimal("4.000")
    # wfctl metrics reads the same window
    families = {f.name: f for f in reports.metric_families(conn, stale=STALE, since=DAY)}
    counted = {s.labels["step_name"]: s.value for s in families["wfctl_step_duration_window_steps"].samples}
    assert counted == {"charge": 1, "ship": 1}


def test_duration_is_the_time_in_steps_not_the_wait_for_a_retry(conn):
    """A run that failed, waited 19 hours for `wfctl retry` and then finished has the duration of
    its steps (2s + 3s), not the 19 hours since its first claim (which `show` gives as elapsed)."""
    now = db_now(conn)
    created = now - timedelta(hours=20)
    retried = workflow(
        conn,
        now,
        age=timedelta(hours=20),
        started_at=created + timedelta(seconds=1),
        finished_at=now - timedelta(hours=1) + timedelta(seconds=4),
        attempt=1,
    )
    step(conn, retried, 1, "charge", start=created + timedelta(seconds=1), seconds=2)
    step(conn, retried, 2, "ship", start=now - timedelta(hours=1) + timedelta(seconds=1), seconds=3)
    quick = workflow(conn, now, age=timedelta(hours=2), run=timedelta(seconds=7))
    step(conn, quick, 1, "charge", start=now - timedelta(hours=2) + timedelta(seconds=1), seconds=7)
    parked = workflow(conn, now, age=timedelta(hours=3), run=timedelta(hours=2))  # a durable sleep
    start = now - timedelta(hours=3) + timedelta(seconds=1)
    step(conn, parked, 1, "charge", start=start, seconds=1)
    step(conn, parked, 2, "follow_up", start=start + timedelta(hours=2), seconds=2)

    order = by_type(reports.stats(conn, since=DAY, stale=STALE).success_rate)["order"]
    assert (order["p50_seconds"], order["p95_seconds"]) == (Decimal("5.000"), Decimal("6.800"))
    listed = {r["id"]: r["duration_seconds"] for r in reports.list_workflows(conn)}
    assert listed == {retried: Decimal("5.000"), quick: Decimal("7.000"), parked: Decimal("3.000")}
    shown = reports.show_workflow(conn, retried).workflow
    assert shown["duration_seconds"] == Decimal("5.000")
    assert shown["elapsed_seconds"] == Decimal(19 * 3600 + 3)
