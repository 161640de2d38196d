"""Durations reach the database as exact seconds.

psycopg sends a timedelta of 24 hours as the interval ``1 day``, and ``now() - interval '1 day'``
in a session whose time zone has daylight-saving time is 23 hours back on the day the clocks
spring forward and 25 hours back on the day they fall back. These tests run wfctl against a
database whose clock (``wfctl_now()``, stopped with the schema's fake clock) is on such a day, in
the time zone Europe/Berlin, with rows 23.5 and 24.5 hours old, and
check that every ``24h`` means 86,400 seconds: windows (stats, list), thresholds (recover,
stats, workers, prune) and delays (submit).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from support.exact_durations import (
    HOUR,
    WORKER_IN,
    add_worker,
    add_workflow,
    warped,
)

import wfctl
from wfctl.durations import interval_text, parse_duration
from wfctl.errors import InvalidInput

BEFORE_SPRING = datetime(2026, 3, 28, 11, 0, tzinfo=UTC)  # 12:00 CET; 1 day later is 23h later


def test_stats_and_list_windows_are_exact_hours(cli, dsn, moment):
    warp = warped(dsn, moment)
    with psycopg.connect(dsn, autocommit=True) as conn:
        inside = add_workflow(
            conn,
            moment - 23.5 * HOUR,
            status="completed",
            started_at=moment - 23.4 * HOUR,
            finished_at=moment - 23.3 * HOUR,
        )
        outside = add_workflow(
            conn,
            moment - 24.5 * HOUR,
            status="completed",
            started_at=moment - 24.4 * HOUR,
            finished_at=moment - 24.3 * HOUR,
        )
        for wid, created in ((inside, moment - 23.5 * HOUR), (outside, moment - 24.5 * HOUR)):
            conn.execute(
                "INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at,"
                " completed_at, attempt, lease_epoch, workflow_created_at)"
                " SELECT id, 1, 'charge', 'completed', %s, %s, 1, 1, created_at FROM workflows WHERE id = %s",
                (created + 0.1 * HOUR, created + 0.2 * HOUR, wid),
            )
    stats = cli("stats", "--since", "24h", "--json", "--dsn", warp)
    assert stats.exit_code == 0, stats.output
    report = json.loads(stats.stdout)
    assert report["since_seconds"] == 86400
    assert [r["total"] for r in report["success_rate"]] == [1], "the 24h window is not 86,400 seconds"
    assert [r["count"] for r in report["slow_steps"]] == [1]
    listed = cli("list", "--since", "24h", "--json", "--dsn", warp)
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.stdout)] == [inside]


def test_prune_older_than_is_exact_hours(cli, dsn, moment):
    warp = warped(dsn, moment)
    with psycopg.connect(dsn, autocommit=True) as conn:
        young = add_workflow(conn, moment - 30 * HOUR, status="completed", finished_at=moment - 23.5 * HOUR)
        old = add_workflow(conn, moment - 30 * HOUR, status="completed", finished_at=moment - 24.5 * HOUR)
    dry = cli("prune", "--older-than", "24h", "--dry-run", "--json", "--dsn", warp)
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["workflows"] == 1
    done = cli("prune", "--older-than", "24h", "--json", "--dsn", warp)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["workflows"] == 1
    with psycopg.connect(dsn) as conn:
        left = [str(r[0]) for r in conn.execute("SELECT id FROM workflows").fetchall()]
    assert left == [young] and old not in left


def test_submit_delay_is_exact_hours(cli, dsn, clean_env):
    warp = warped(dsn, BEFORE_SPRING)
    one = cli("submit", "order", "{}", "--delay", "24h", "--force", "--dsn", warp)
    assert one.exit_code == 0, one.output
    (clean_env / "in.jsonl").write_text('{"n": 1}\n')
    batch = cli("submit", "order", "--input-file", "in.jsonl", "--delay", "1d", "--force", "--dsn", warp)
    assert batch.exit_code == 0, batch.output
    with psycopg.connect(warp) as conn:
        wfctl.submit(conn, "order", {}, delay=timedelta(days=1))
        wfctl.submit(conn, "order", {}, delay="24h")
        conn.commit()
        waits = conn.execute("SELECT extract(epoch FROM run_at - wfctl_now()) FROM workflows")
        assert [float(w[0]) for w in waits.fetchall()] == [86400.0] * 4


def test_interval_text_is_exact_seconds():
    assert interval_text(timedelta(days=1)) == "86400.000000 seconds"
    assert interval_text(timedelta(milliseconds=1)) == "0.001000 seconds"
    assert interval_text(timedelta(days=36500, microseconds=5)) == "3153600000.000005 seconds"


@pytest.mark.parametrize(
    ("text", "minimum", "message"),
    [
        ("0.0000001s", 0.001, "shorter than the minimum of 1ms"),
        ("0.5ms", 0.001, "shorter than the minimum of 1ms"),
        ("0.0000001s", 1.0, "shorter than the minimum of 1s"),
        ("999ms", 1.0, "shorter than the minimum of 1s"),
    ],
)
def test_durations_below_the_minimum_are_refused(text, minimum, message):
    with pytest.raises(InvalidInput, match=message):
        parse_duration(text, what="--stale", minimum=minimum)


def test_minimum_durations_and_zero_are_accepted():
    assert parse_duration("1ms") == timedelta(milliseconds=1)
    assert parse_duration("1s", minimum=1.0) == timedelta(seconds=1)
    assert parse_duration("1000ms", minimum=1.0) == timedelta(seconds=1)
    assert parse_duration("0s") == timedelta(0)  # --delay 0s, --grace 0s: no wait
    with pytest.raises(InvalidInput, match="must be greater than zero"):
        parse_duration("0s", allow_zero=False)


def test_recover_refuses_a_threshold_under_a_second(cli, dsn):
    """`recover --stale 0.0000001s` used to requeue the runs of live workers."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        add_worker(conn, WORKER_IN, datetime.now(UTC))
        wid = add_workflow(conn, datetime.now(UTC), status="running", lease_owner=WORKER_IN)
    result = cli("recover", "--stale", "0.0000001s", "--dsn", dsn)
    assert result.exit_code == 2 and "minimum of 1s" in result.stderr, result.output
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone() == ("running",)
