"""What tests/db/test_own_schema.py and tests/process/test_own_schema_processes.py share."""

from __future__ import annotations

import psycopg


def app_database(dsn: str) -> None:
    """An application's own tables in public, one of them called workers (other columns)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE workers (name text PRIMARY KEY, shift text NOT NULL)")
        conn.execute("INSERT INTO workers VALUES ('ada', 'early'), ('bob', 'late')")
