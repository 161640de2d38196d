"""Rows for the report tests, inserted directly with SQL, and an in-process CLI runner."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from helpers import Result
from psycopg import sql
from typer.testing import CliRunner


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def insert(conn: psycopg.Connection, table: str, **values: Any) -> Any:
    """INSERT one row of ``values`` into ``table``; returns its id."""
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(table),
        sql.SQL(", ").join(sql.Identifier(k) for k in values),
        sql.SQL(", ").join(sql.Placeholder(k) for k in values),
    )
    row = conn.execute(query, values).fetchone()
    assert row is not None
    return row[0]


def workflow(
    conn: psycopg.Connection,
    now: datetime,
    *,
    workflow_type: str = "order",
    status: str = "completed",
    age: timedelta = timedelta(hours=1),
    run: timedelta | None = timedelta(seconds=10),
    **extra: Any,
) -> UUID:
    """A workflow created ``age`` ago; started a second later, and (for finished statuses)
    finished after ``run``."""
    created = now - age
    values: dict[str, Any] = {
        "workflow_type": workflow_type,
        "status": status,
        "created_at": created,
        "updated_at": created,
        "run_at": created,
    }
    if status != "pending" and run is not None:
        values["started_at"] = created + timedelta(seconds=1)
        if status in ("completed", "failed", "cancelled"):
            values["finished_at"] = created + timedelta(seconds=1) + run
            values["updated_at"] = values["finished_at"]
    values.update(extra)
    return insert(conn, "workflows", **values)  # type: ignore[no-any-return]


def step(
    conn: psycopg.Connection,
    workflow_id: UUID,
    number: int,
    name: str,
    *,
    start: datetime,
    seconds: float,
    status: str = "completed",
    **extra: Any,
) -> int:
    # the run's created_at: the partition key of the step rows in the partitioned layout
    row = conn.execute("SELECT created_at FROM workflows WHERE id = %s", (workflow_id,)).fetchone()
    assert row is not None
    extra.setdefault("workflow_created_at", row[0])
    return insert(  # type: ignore[no-any-return]
        conn,
        "workflow_steps",
        workflow_id=workflow_id,
        step_number=number,
        step_name=name,
        status=status,
        started_at=start,
        completed_at=start + timedelta(seconds=seconds),
        attempt=1,
        lease_epoch=1,
        **extra,
    )


def worker(
    conn: psycopg.Connection,
    now: datetime,
    ident: str,
    *,
    silent: timedelta = timedelta(seconds=2),
    stopped: bool = False,
    concurrency: int = 4,
) -> str:
    beat = now - silent
    return insert(  # type: ignore[no-any-return]
        conn,
        "workers",
        id=ident,
        hostname=ident.split(":")[0],
        pid=1234,
        started_at=beat - timedelta(hours=1),
        heartbeat_at=beat,
        stopped_at=beat if stopped else None,
        concurrency=concurrency,
        version="test",
    )


def runner() -> Any:
    """Run wfctl in-process (without the ``cli`` fixture's clean environment)."""
    from wfctl.cli.app import app

    cli = CliRunner()

    def invoke(*args: str) -> Result:
        result = cli.invoke(app, list(args), catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    return invoke
