"""The schema's fake clock for tests (importable as ``fakeclock``): the row ('fake_now', value)
of wfctl_settings, which wfctl_now() returns in place of now() (migration 0022). It stands still
until a test moves it, and every session of the database reads it at its next statement: the
test's own, a worker's, a CLI command's. Only the schema's owner may write it."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg


def stop(dsn: str, at: datetime | None = None) -> datetime:
    """Stop the clock at ``at`` (the database's real now() when None); return that instant."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO wfctl_settings (name, value) VALUES ('fake_now', coalesce(%s, now())::text)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value RETURNING value::timestamptz",
            (at,),
        ).fetchone()
    assert row is not None
    return row[0]


def advance(dsn: str, by: timedelta) -> datetime:
    """Move the stopped clock forward by ``by``; return the new instant."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "UPDATE wfctl_settings SET value = (value::timestamptz + %s)::text WHERE name = 'fake_now'"
            " RETURNING value::timestamptz",
            (by,),
        ).fetchone()
    assert row is not None, "the clock is not stopped: call stop() first"
    return row[0]


def release(dsn: str) -> None:
    """Back to the real clock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM wfctl_settings WHERE name = 'fake_now'")
