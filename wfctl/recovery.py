"""Requeueing runs whose worker died: ``wfctl recover --stale 5m`` (from cron)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from wfctl.durations import as_seconds
from wfctl.queries import q


@dataclass(frozen=True)
class Recovered:
    id: UUID
    workflow_type: str
    status: str  # 'pending' (requeued) or 'failed' (no retries left)
    attempt: int
    lease_epoch: int
    current_step: int
    previous_owner: str | None
    owner_heartbeat: datetime | None


def recover(conn: psycopg.Connection[Any], stale: timedelta, *, dry_run: bool = False) -> list[Recovered]:
    """Requeue (or fail, when out of retries) every running workflow whose owner's heartbeat is
    older than ``stale``. One statement: concurrent calls requeue each workflow once. The threshold
    goes to the database as exact seconds (see wfctl.durations)."""
    name = "recovery.stale_runs" if dry_run else "recovery.recover"
    with conn.cursor(row_factory=class_row(Recovered)) as cur:
        rows = cur.execute(q(name), {"stale": as_seconds(stale)}).fetchall()
    if rows and not dry_run:
        conn.execute(q("recovery.notify"))
    return rows
