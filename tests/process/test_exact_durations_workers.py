"""Durations reach the database as exact seconds.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_exact_durations.py.
"""

from __future__ import annotations

import json

import psycopg
from support.exact_durations import (
    HOUR,
    WORKER_IN,
    WORKER_OUT,
    add_worker,
    add_workflow,
    warped,
)


def test_stale_thresholds_are_exact_hours(cli, dsn, moment):
    warp = warped(dsn, moment)
    with psycopg.connect(dsn, autocommit=True) as conn:
        add_worker(conn, WORKER_IN, moment - 23.5 * HOUR)
        add_worker(conn, WORKER_OUT, moment - 24.5 * HOUR)
        held = add_workflow(
            conn,
            moment - 30 * HOUR,
            status="running",
            lease_owner=WORKER_IN,
            started_at=moment - 29 * HOUR,
            updated_at=moment - 29 * HOUR,
        )
        lost = add_workflow(
            conn,
            moment - 30 * HOUR,
            status="running",
            lease_owner=WORKER_OUT,
            started_at=moment - 29 * HOUR,
            updated_at=moment - 29 * HOUR,
        )
    workers = cli("workers", "--stale", "24h", "--json", "--dsn", warp)
    assert workers.exit_code == 0, workers.output
    states = {w["id"]: w["state"] for w in json.loads(workers.stdout)}
    assert states == {WORKER_IN: "live", WORKER_OUT: "dead"}
    stats = cli("stats", "--stale", "24h", "--json", "--dsn", warp)
    assert [str(r["id"]) for r in json.loads(stats.stdout)["stuck"]] == [lost]
    dry = cli("recover", "--stale", "24h", "--dry-run", "--json", "--dsn", warp)
    assert dry.exit_code == 0, dry.output
    assert [r["id"] for r in json.loads(dry.stdout)] == [lost]
    done = cli("recover", "--stale", "24h", "--json", "--dsn", warp)
    assert [r["id"] for r in json.loads(done.stdout)] == [lost]
    with psycopg.connect(dsn) as conn:
        statuses = dict(conn.execute("SELECT id::text, status FROM workflows").fetchall())
    assert statuses == {held: "running", lost: "pending"}
