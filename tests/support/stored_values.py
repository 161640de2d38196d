"""What tests/db/test_stored_values.py and tests/process/test_stored_values_workers.py share."""

from __future__ import annotations

import psycopg
import pytest

LONG = "9" * 5000  # an integer Python will not read (more than 4300 digits)


DEEP = "[" * 5000 + "]" * 5000  # nested deeper than Python's recursion limit


HOSTILE = {
    "digits": (f'{{"n": {LONG}}}', "it holds an integer of 5000 digits, more than Python reads (4300)"),
    "depth": (DEEP, "it is nested deeper than Python reads"),
}


def insert(conn: psycopg.Connection, workflow_type: str, text: str) -> str:
    """A workflow inserted with plain SQL, its input the JSON ``text``."""
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s::jsonb) RETURNING id",
        (workflow_type, text),
    ).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def unreadable_run(conn) -> str:
    """A completed workflow whose output and event 'k' are values Python cannot read."""
    wid = insert(conn, "echo", "null")
    conn.execute(
        "UPDATE workflows SET status = 'completed', output_data = %s::jsonb, finished_at = now() "
        "WHERE id = %s",
        (HOSTILE["digits"][0], wid),
    )
    conn.execute(
        "INSERT INTO workflow_events (workflow_id, key, value, step_number) VALUES (%s, 'k', %s::jsonb, 1)",
        (wid, HOSTILE["depth"][0]),
    )
    return wid
