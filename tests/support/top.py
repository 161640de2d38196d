"""A database with runs in every state for `wfctl top`'s tests (tests/db/test_top_snapshot.py,
tests/db/test_top_app.py), inserted with SQL as the report tests insert theirs.

Type ``order``: two completed in the last ten seconds, one 65 seconds ago and one 20 minutes
ago (outside the sparkline's ten minutes), one failed 30 seconds ago, one running on a live
worker and one on a dead worker (stuck), one pending, and one parked on each wait kind; a
concurrency limit of 1. Type ``mail``: one completed 3 seconds ago and one pending."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from report_rows import db_now, step, worker, workflow

from wfctl import limits

LIVE = "live.example:1:aaaa"
DEAD = "dead.example:2:bbbb"
STOPPED = "stopped.example:3:cccc"
RUN = timedelta(seconds=2)


@dataclass(frozen=True)
class Seeded:
    now: datetime
    stuck: UUID
    failed: UUID
    pending: UUID


def _finished(conn: psycopg.Connection[Any], now: datetime, ago: float, **values: Any) -> UUID:
    """A run that finished ``ago`` seconds before ``now`` after RUN, with one step of RUN."""
    age = timedelta(seconds=ago + 1) + RUN
    run = workflow(conn, now, age=age, run=RUN, **values)
    step(conn, run, 1, "charge", start=now - age + timedelta(seconds=1), seconds=RUN.total_seconds())
    return run


def seed(conn: psycopg.Connection[Any]) -> Seeded:
    now = db_now(conn)
    worker(conn, now, LIVE, concurrency=4)
    worker(conn, now, DEAD, silent=timedelta(hours=1))
    worker(conn, now, STOPPED, stopped=True, silent=timedelta(days=1))
    for ago in (4, 6, 65, 1200):
        _finished(conn, now, ago, workflow_type="order")
    failed = _finished(
        conn, now, 30, workflow_type="order", status="failed", error_message="card declined\nTraceback"
    )
    minute = timedelta(minutes=1)
    workflow(conn, now, workflow_type="order", status="running", age=minute, lease_owner=LIVE, attempt=1)
    stuck = workflow(
        conn, now, workflow_type="order", status="running", age=timedelta(hours=2), lease_owner=DEAD,
        attempt=1, updated_at=now - timedelta(hours=1),
    )  # fmt: skip
    pending = workflow(conn, now, workflow_type="order", status="pending", age=minute)
    later = now + timedelta(hours=1)
    workflow(conn, now, workflow_type="order", status="pending", age=minute, wait_kind="sleep", run_at=later)
    workflow(
        conn, now, workflow_type="order", status="pending", age=minute, wait_kind="message",
        wait_topic="paid", run_at=later,
    )  # fmt: skip
    workflow(
        conn, now, workflow_type="order", status="pending", age=minute, wait_kind="children",
        wait_ids=[], wait_remaining=1, run_at=later,
    )  # fmt: skip
    _finished(conn, now, 3, workflow_type="mail")
    workflow(conn, now, workflow_type="mail", status="pending", age=minute)
    limits.set_limits(conn, "order", concurrency=1)
    return Seeded(now=now, stuck=stuck, failed=failed, pending=pending)
