"""What tests/db/test_manage.py and tests/process/test_manage_workers.py share."""

from __future__ import annotations

import psycopg


def one(dsn: str, sql: str, *params: object) -> tuple:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchone()
