"""The order a claim takes runs in: by priority, then run_at, then id, across limited and unlimited
types alike. Limits (a type's concurrency, its rate, the per-key limits and their rotation) only
hold runs back; they never put a limited type's runs ahead of others'.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_claim_order.py.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import client, jsonvalue

# The engine's promises here hold in both table layouts: each test runs in each.
pytestmark = pytest.mark.layouts

APP = "limitflows"


def test_an_urgent_run_overtakes_a_limited_backlog_on_a_worker(dsn: str, workers) -> None:
    """End to end: 300 runs of plain under a limit it never reaches (`wfctl limit plain
    --concurrency 1000`) are under way on a worker when a run of an unlimited type is submitted
    at priority 100: it runs next, after at most what the worker had already claimed."""
    with psycopg.connect(dsn) as conn:
        client.submit_many(conn, "plain", [jsonvalue.dumps({"pause": 0.05})] * 300)
    result = workers.wfctl("limit", "plain", "--concurrency", "1000")
    assert result.exit_code == 0, result.output
    workers.start("--concurrency", "4", app=APP)
    done = "SELECT count(*) FROM workflows WHERE workflow_type = 'plain' AND status = 'completed'"
    wait_for(lambda: rows(dsn, done)[0][0] >= 8, what="the backlog under way")
    urgent = wfctl.submit(dsn, "swift", {}, priority=100)
    assert wfctl.result(dsn, urgent, timeout=60) == "swift"
    (between,) = rows(
        dsn,
        "SELECT count(*) FROM workflows p, workflows u WHERE u.id = %s AND p.workflow_type = 'plain'"
        " AND p.started_at > u.created_at AND p.started_at < u.started_at",
        urgent,
    )[0]
    print(f"\n{between} plain runs started between the urgent run's submit and its start")
    # what the worker had claimed ahead (up to 2 x 4) and a claim in flight; not the backlog
    assert between <= 16, between
