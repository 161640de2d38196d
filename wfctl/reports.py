"""Read-only reports: stats, list, show, workers and metrics, as plain rows.

Each function takes a connection and plain values and returns dicts keyed by the SQL column names
of ``sql/queries/reports.sql`` (or dataclasses of them), so that one function serves the Rich
tables, ``--json``, the Prometheus text and the tests. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from wfctl.errors import NotFound, UsageError
from wfctl.prometheus import Family, Sample, exposition
from wfctl.queries import q
from wfctl.words import STATUSES, check_status, parse_id

Row = dict[str, Any]
Conn = psycopg.Connection[Any]

#: The words workflows.status may hold, in life-cycle order.
#: Worker states of the ``workers`` report.
WORKER_STATES = ("live", "dead", "stopped")


@dataclass(frozen=True)
class StatsReport:
    as_of: datetime
    since: timedelta
    stale: timedelta
    workflow_type: str | None
    success_rate: list[Row]
    stuck: list[Row]
    slow_steps: list[Row]

    @property
    def window_empty(self) -> bool:
        """No workflow was created in the window (there may still be stuck runs, from before)."""
        return not self.success_rate


@dataclass(frozen=True)
class WorkflowDetail:
    workflow: Row
    steps: list[Row]


def _rows(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(q(name), params or {})
        return cur.fetchall()


@contextmanager
def _snapshot(conn: Conn) -> Iterator[None]:
    """Run the statements of one report in one read-only snapshot (inside the caller's
    transaction when there is one)."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    with conn.transaction():
        conn.execute(q("reports.snapshot"))
        yield


def _as_of(conn: Conn) -> datetime:
    row = conn.execute(q("reports.as_of")).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _positive(value: timedelta, what: str) -> timedelta:
    if value <= timedelta(0):
        raise UsageError(f"{what} must be greater than zero")
    return value


def stats(conn: Conn, *, since: timedelta, stale: timedelta, workflow_type: str | None = None) -> StatsReport:
    """Success rate per type and slowest steps over the window, and the stuck runs."""
    window = {"since": _positive(since, "the window"), "workflow_type": workflow_type}
    with _snapshot(conn):
        return StatsReport(
            as_of=_as_of(conn),
            since=since,
            stale=stale,
            workflow_type=workflow_type,
            success_rate=_rows(conn, "reports.success_rate", window),
            stuck=stuck(conn, stale=stale, workflow_type=workflow_type),
            slow_steps=_rows(conn, "reports.slow_steps", window),
        )


def stuck(conn: Conn, *, stale: timedelta, workflow_type: str | None = None) -> list[Row]:
    """Running workflows whose owner's heartbeat is older than ``stale``, or whose owner shut
    down or is unknown."""
    params = {"stale": _positive(stale, "the stale threshold"), "workflow_type": workflow_type}
    return _rows(conn, "reports.stuck", params)


def list_workflows(
    conn: Conn,
    *,
    status: str | None = None,
    workflow_type: str | None = None,
    since: timedelta | None = None,
    limit: int = 50,
) -> list[Row]:
    """Workflows newest first, optionally of one status and type, created within ``since``."""
    if limit < 1:
        raise UsageError(f"invalid limit {limit}: must be at least 1")
    params = {
        "status": check_status(status) if status is not None else None,
        "workflow_type": workflow_type,
        "since": _positive(since, "the window") if since is not None else None,
        "limit": limit,
    }
    return _rows(conn, "reports.list_workflows", params)


def show_workflow(conn: Conn, workflow_id: str | UUID) -> WorkflowDetail:
    """One workflow's row and its steps in order; NotFound when there is no such id."""
    ident = workflow_id if isinstance(workflow_id, UUID) else parse_id(workflow_id)
    with _snapshot(conn):
        found = _rows(conn, "reports.workflow", {"id": ident})
        if not found:
            raise NotFound(f"no workflow with id {ident}")
        return WorkflowDetail(workflow=found[0], steps=_rows(conn, "reports.workflow_steps", {"id": ident}))


def workers(conn: Conn, *, stale: timedelta) -> list[Row]:
    """Every registered worker with its state (live, dead, stopped) and running count."""
    return _rows(conn, "reports.workers", {"stale": _positive(stale, "the stale threshold")})


def metric_families(conn: Conn, *, stale: timedelta, since: timedelta) -> list[Family]:
    """What ``wfctl metrics`` exposes, read in one snapshot."""
    with _snapshot(conn):
        counts = _rows(conn, "reports.workflow_counts")
        pending = _rows(conn, "reports.oldest_pending")[0]
        stuck_rows = stuck(conn, stale=stale)
        worker_rows = workers(conn, stale=stale)
        window = {"since": _positive(since, "the window"), "workflow_type": None}
        steps = _rows(conn, "reports.slow_steps", window)
    return [
        _workflow_family(counts),
        Family(
            "wfctl_workflows_running",
            "gauge",
            "Workflows running now (all types).",
            (Sample(sum(r["workflows"] for r in counts if r["status"] == "running")),),
        ),
        Family(
            "wfctl_workflows_stuck",
            "gauge",
            f"Running workflows whose worker's heartbeat is older than {_human(stale)}, "
            "or whose worker stopped or is unknown.",
            (Sample(len(stuck_rows)),),
        ),
        Family(
            "wfctl_workflows_runnable",
            "gauge",
            "Pending workflows whose run_at has come (waiting for a worker).",
            (Sample(int(pending["runnable"])),),
        ),
        Family(
            "wfctl_oldest_pending_age_seconds",
            "gauge",
            "Seconds the oldest runnable pending workflow has waited since its run_at (0: none).",
            (Sample(float(pending["oldest_pending_age_seconds"])),),
        ),
        Family(
            "wfctl_workers",
            "gauge",
            f"Registered workers by state (dead: heartbeat older than {_human(stale)}).",
            tuple(
                Sample(sum(1 for w in worker_rows if w["state"] == state), {"state": state})
                for state in WORKER_STATES
            ),
        ),
        _step_family(steps, since),
    ]


def _workflow_family(counts: list[Row]) -> Family:
    by_key = {(r["workflow_type"], r["status"]): int(r["workflows"]) for r in counts}
    types = sorted({r["workflow_type"] for r in counts})
    return Family(
        "wfctl_workflows",
        "gauge",
        "Workflows in the database by type and status.",
        tuple(
            Sample(by_key.get((kind, status), 0), {"workflow_type": kind, "status": status})
            for kind in types
            for status in STATUSES
        ),
    )


def _step_family(steps: list[Row], since: timedelta) -> Family:
    samples: list[Sample] = []
    for row in sorted(steps, key=lambda r: (r["workflow_type"], r["step_name"] or "")):
        labels = {"workflow_type": row["workflow_type"], "step_name": row["step_name"] or ""}
        for quantile, column in (("0.5", "p50_seconds"), ("0.95", "p95_seconds")):
            samples.append(Sample(float(row[column]), {**labels, "quantile": quantile}))
        samples.append(Sample(float(row["sum_seconds"]), labels, "_sum"))
        samples.append(Sample(int(row["count"]), labels, "_count"))
    return Family(
        "wfctl_step_duration_seconds",
        "summary",
        f"Duration of completed steps of the workflows created in the last {_human(since)}, "
        "by workflow type and step name.",
        tuple(samples),
    )


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def metrics(conn: Conn, *, stale: timedelta, since: timedelta) -> str:
    """The Prometheus text exposition of :func:`metric_families`."""
    return exposition(metric_families(conn, stale=stale, since=since))
