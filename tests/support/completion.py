"""What tests/db/test_completion_values.py and tests/process/test_completion_shell.py share: a
database with something of every kind the completions offer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from report_rows import db_now, workflow


def seed(conn: psycopg.Connection, dsn: str, wfctl: Callable[..., Any]) -> dict[str, str]:
    """Two registered types, a run parked on a message, a finished run, two schedules (added
    through ``wfctl``, the test's way of running the CLI)."""
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types)"
        " VALUES ('h:1:a', 'h', 1, 4, ARRAY['order', 'refund'])"
    )
    now = db_now(conn)
    parked = workflow(conn, now, status="pending", wait_kind="message", wait_topic="approval")
    done = workflow(conn, now, status="completed")
    for name in ("nightly", "hourly"):
        assert wfctl("--dsn", dsn, "schedule", "add", name, "order", "0 * * * *").exit_code == 0
    return {"parked": str(parked), "done": str(done)}
