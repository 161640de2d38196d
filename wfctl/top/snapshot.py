"""What one refresh of ``wfctl top`` reads, as plain data: a ``Snapshot`` built by ``take``
from a connection, in one read-only snapshot. The reports come from wfctl.reports and
wfctl.limits (stuck runs, slowest steps, workers, limits, recent failures); what they do not
have (the unfinished runs per type, the completions per type over the last ten minutes) from
``sql/queries/top.sql``. Nothing here draws."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from wfctl import limits, replica, reports
from wfctl.durations import interval_text
from wfctl.queries import q
from wfctl.words import FAILED

Row = dict[str, Any]
Conn = psycopg.Connection[Any]

#: The width of one bar of the throughput sparkline, and how many bars it has (ten minutes).
BUCKET_SECONDS = 10
BUCKETS = 60
WINDOW = timedelta(seconds=BUCKET_SECONDS * BUCKETS)
#: The wait kinds a parked run is counted by (the columns of top.type_states).
PARKED_KINDS = ("sleep", "message", "children")
#: How many of the newest failed runs the failures pane lists.
FAILURES = 20
#: The window of the slowest steps, as ``wfctl stats --since`` (workflows created since).
DEFAULT_SINCE = timedelta(hours=1)


@dataclass(frozen=True)
class TypeRow:
    """One workflow type now: its unfinished runs, and what finished in the last ten minutes."""

    workflow_type: str
    running: int = 0
    pending: int = 0  # the backlog: queued, backing off, woken
    parked: Mapping[str, int] = field(default_factory=dict)  # by wait kind (PARKED_KINDS)
    failed: int = 0  # failed in the last ten minutes
    completions: tuple[int, ...] = (0,) * BUCKETS  # per bucket, oldest first, the last ends now

    @property
    def per_second(self) -> float:
        """Completions per second now: over the last bucket (BUCKET_SECONDS)."""
        return self.completions[-1] / BUCKET_SECONDS

    @property
    def parked_total(self) -> int:
        return sum(self.parked.values())


@dataclass(frozen=True)
class Snapshot:
    as_of: datetime
    workflow_type: str | None  # the type filter, None: every type
    types: list[TypeRow]
    stuck: list[Row]  # reports.stuck
    slow_steps: list[Row] | None  # reports.stats' slow_steps over ``since``; None: not read
    workers: list[Row]  # reports.workers
    limits: list[limits.LimitRow]  # limits.list_limits: the types with a limit in force
    failures: list[Row]  # reports.list_workflows: the newest failed runs
    since: timedelta = DEFAULT_SINCE
    replica: replica.ReplicaStatus | None = None  # read from a standby: how current it is

    @property
    def completions(self) -> tuple[int, ...]:
        """Completions of every type shown, per bucket, oldest first."""
        return tuple(sum(bars) for bars in zip(*(t.completions for t in self.types), strict=True)) or (
            (0,) * BUCKETS
        )

    @property
    def per_second(self) -> float:
        """Completions per second now, of every type shown."""
        return self.completions[-1] / BUCKET_SECONDS


def _rows(conn: Conn, name: str, params: Mapping[str, Any]) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(q(name), params).fetchall()


def take(
    conn: Conn,
    *,
    workflow_type: str | None = None,
    stale: timedelta | None = None,
    since: timedelta = DEFAULT_SINCE,
    standby: bool = False,
    slow_steps: bool = True,
) -> Snapshot:
    """Everything one refresh shows, read in one read-only (REPEATABLE READ) transaction, of
    one type (``workflow_type``) or all. ``stale`` judges workers as ``wfctl stats --stale``
    (None: each by its own heartbeat); ``since`` is the window of the slowest steps;
    ``standby``: the connection is to a standby, and the snapshot says how current it is.
    Without ``slow_steps`` the slowest steps are not read (``slow_steps`` is None): they cost
    more than everything else together (reports.stats over the window), and change slowly."""
    with conn.transaction():
        conn.execute(q("reports.snapshot"))
        conn.execute(q("reports.no_jit"))
        if slow_steps:
            stats = reports.stats(conn, since=since, stale=stale, workflow_type=workflow_type)
            as_of, stuck, steps = stats.as_of, stats.stuck, stats.slow_steps
        else:
            stuck, steps = reports.stuck(conn, stale=stale, workflow_type=workflow_type), None
            as_of = _rows(conn, "reports.as_of", {})[0]["as_of"]
        filtered = {"workflow_type": workflow_type}
        states = _rows(conn, "top.type_states", filtered)
        window = {**filtered, "window": interval_text(WINDOW), "bucket": BUCKET_SECONDS}
        finished = _rows(conn, "top.finished", window)
        found_limits = limits.list_limits(conn, workflow_type)
        failures = reports.list_workflows(conn, status=FAILED, workflow_type=workflow_type, limit=FAILURES)
        workers = reports.workers(conn, stale=stale)
        status = replica.status(conn) if standby else None
    return Snapshot(
        as_of=as_of,
        workflow_type=workflow_type,
        types=type_rows(states, finished),
        stuck=stuck,
        slow_steps=steps,
        workers=workers,
        limits=found_limits,
        failures=failures,
        since=since,
        replica=status,
    )


def type_rows(states: list[Row], finished: list[Row]) -> list[TypeRow]:
    """One TypeRow per type found in either statement's rows, by name."""
    names = sorted({r["workflow_type"] for r in states} | {r["workflow_type"] for r in finished})
    by_state = {r["workflow_type"]: r for r in states}
    bars: dict[str, list[int]] = {name: [0] * BUCKETS for name in names}
    failed: dict[str, int] = dict.fromkeys(names, 0)
    for row in finished:
        bucket = int(row["bucket"])
        if 0 <= bucket < BUCKETS:  # bucket 0 ends now: the last bar
            bars[row["workflow_type"]][BUCKETS - 1 - bucket] += int(row["completed"])
        failed[row["workflow_type"]] += int(row["failed"])
    found = []
    for name in names:
        state = by_state.get(name, {})
        found.append(
            TypeRow(
                workflow_type=name,
                running=int(state.get("running", 0)),
                pending=int(state.get("pending", 0)),
                parked={kind: int(state.get(f"parked_{kind}", 0)) for kind in PARKED_KINDS},
                failed=failed[name],
                completions=tuple(bars[name]),
            )
        )
    return found
