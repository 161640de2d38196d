"""What tests/db/test_input_stream.py and tests/process/test_input_stream_processes.py share."""

from __future__ import annotations

import psycopg


def count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM workflows").fetchone()[0]
