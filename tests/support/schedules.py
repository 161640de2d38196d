"""What tests/db/test_schedules.py and tests/process/test_schedules_workers.py share."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from helpers import rows


def db_now(dsn: str) -> datetime:
    return rows(dsn, "SELECT now()")[0][0]


def ticks(dsn: str, name: str) -> list[datetime]:
    """The ticks the runs of schedule ``name`` were submitted for, in order (one per run)."""
    found = rows(
        dsn,
        "SELECT input_data->>'scheduled_at' FROM workflows WHERE idempotency_key LIKE %s"
        " AND idempotency_key NOT LIKE %s ORDER BY 1",
        f"schedule:{name}:%",
        f"schedule:{name}:trigger:%",
    )
    return [datetime.fromisoformat(t) for (t,) in found]


def schedule_row(dsn: str, name: str) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute("SELECT * FROM workflow_schedules WHERE name = %s", (name,)).fetchone()


def iso(instant: datetime) -> str:
    return f"{instant.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def _due_schedules(dsn: str, count: int, missed: int) -> None:
    """``count`` backfilling schedules, each ``missed`` minutes behind."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_schedules (name, workflow_type, cron, backfill, next_tick_at)"
            " SELECT 'race-' || n, 'stamp', '* * * * *', true,"
            " date_trunc('minute', now()) - make_interval(mins => %s - 1)"
            " FROM generate_series(1, %s) n",
            (missed, count),
        )
