"""Liveness that agrees with reality: every worker is judged by the heartbeat it recorded.

- `workers` and `metrics` call a worker live only while its heartbeat is fresh by its own rule
  (interval times missed beats), and `metrics` never counts more live workers than are running;
- `recover --stale X` refuses an X shorter than a live worker's rule (exit 2, one line naming
  the worker, its heartbeat and `--force`), and `--force` passes;
- the stuck report follows the sweep's rule unless `--stale` is given;
- `stats` and `list` mark pending workflows of a type no live worker runs.

A SIGKILLed worker turning dead, and the guard reading a real worker's heartbeat:
tests/process/test_liveness_workers.py."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
from helpers import rows
from report_rows import db_now, runner, worker, workflow
from support.liveness import metric_workers, states

from wfctl import recovery, reports, schema

HEARTBEAT = 0.2  # the workers fixture's --heartbeat 200ms


def recorded_worker(conn, ident: str, *, silent: float, every: float, dead_after: float, types=()) -> None:
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at, heartbeat_seconds,"
        " dead_after_seconds, workflow_types)"
        " VALUES (%s, 'h', 1, 4, now() - make_interval(secs => %s), %s, %s, %s)",
        (ident, silent, every, dead_after, list(types)),
    )


def test_each_worker_is_judged_by_its_own_heartbeat(dsn, conn):
    recorded_worker(conn, "fast:1:a", silent=5, every=1, dead_after=3)  # missed its beats
    recorded_worker(conn, "slow:2:b", silent=5, every=10, dead_after=30)  # between two beats
    now = db_now(conn)
    worker(conn, now, "legacy:3:c", silent=timedelta(minutes=2))  # no interval recorded: 5m
    worker(conn, now, "quit:4:d", stopped=True)
    expected = {"fast:1:a": "dead", "slow:2:b": "live", "legacy:3:c": "live", "quit:4:d": "stopped"}
    assert states(dsn) == expected
    assert metric_workers(dsn) == {"live": 2, "dead": 1, "stopped": 1}
    # --stale still judges everyone by one threshold, for those who ask
    assert states(dsn, "--stale", "4s") == {**expected, "slow:2:b": "dead", "legacy:3:c": "dead"}
    assert states(dsn, "--stale", "1h")["fast:1:a"] == "live"
    # what the rows say about each worker's heartbeat
    data = {w["id"]: w for w in json.loads(runner()("workers", "--dsn", dsn, "--json").stdout)}
    assert (data["slow:2:b"]["heartbeat_seconds"], data["slow:2:b"]["dead_after_seconds"]) == (10, 30)
    assert (data["legacy:3:c"]["heartbeat_seconds"], data["legacy:3:c"]["dead_after_seconds"]) == (None, 300)
    table = runner()("workers", "--dsn", dsn)
    slow = next(line for line in table.stdout.splitlines() if "slow:2:b" in line)
    assert "live" in slow and "30.0s" in slow
    assert "dead after" in table.stdout.splitlines()[1]


def test_stuck_follows_the_sweeps_rule_unless_told_otherwise(conn):
    recorded_worker(conn, "fast:1:a", silent=5, every=1, dead_after=3)
    recorded_worker(conn, "slow:2:b", silent=5, every=10, dead_after=30)
    now = db_now(conn)
    old = timedelta(minutes=10)
    dead = workflow(conn, now, status="running", lease_owner="fast:1:a", updated_at=now - old)
    workflow(conn, now, status="running", lease_owner="slow:2:b", updated_at=now - old)
    assert [r["id"] for r in reports.stuck(conn)] == [dead]
    assert len(reports.stuck(conn, stale=timedelta(seconds=4))) == 2
    assert reports.stats(conn, since=timedelta(days=1)).stuck[0]["id"] == dead
    families = {f.name: f for f in reports.metric_families(conn, since=timedelta(hours=1))}
    assert families["wfctl_workflows_stuck"].samples[0].value == 1
    assert "its own interval times its missed beats" in families["wfctl_workers"].help


def test_migration_4_gives_existing_workers_the_old_five_minutes(empty_dsn, monkeypatch):
    """A database with workers from before migration 4 (one of them still running an older wfctl
    during the upgrade): they get no interval and the 5 minutes `recover` used by default, so
    nobody judges them sooner than cron did, and they keep beating with their old statement."""
    before = [m for m in schema.migrations() if m.version < 4]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with monkeypatch.context() as patched:
            patched.setattr(schema, "migrations", lambda: tuple(before))
            schema.migrate(conn)
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at)"
            " VALUES ('old:1:a', 'h', 1, 4, now() - interval '2 minutes'),"
            " ('old:2:b', 'h', 2, 4, now() - interval '10 minutes')"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, lease_owner, updated_at)"
            " VALUES ('order', 'running', 'old:1:a', now() - interval '2 minutes'),"
            " ('order', 'running', 'old:2:b', now() - interval '10 minutes')"
        )
        assert schema.migrate(conn).after == schema.latest_version()
        assert conn.execute(
            "SELECT id, heartbeat_seconds, dead_after_seconds FROM workers ORDER BY id"
        ).fetchall() == [("old:1:a", None, 300), ("old:2:b", None, 300)]
        # the old worker's heartbeat (the statement of a wfctl before version 4) still works
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency) VALUES ('old:1:a', 'h', 1, 4)"
            " ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), stopped_at = NULL"
        )
        assert {w["id"]: w["state"] for w in reports.workers(conn)} == {"old:1:a": "live", "old:2:b": "dead"}
        swept = recovery.sweep(conn)
        assert swept is not None and [r.previous_owner for r in swept] == ["old:2:b"]


def test_recover_refuses_a_threshold_shorter_than_a_live_workers_rule(cli, dsn, conn):
    recorded_worker(conn, "fast:1:a", silent=0, every=0.2, dead_after=1)
    recorded_worker(conn, "k8s:2:b", silent=5, every=10, dead_after=30)  # live: between two beats
    recorded_worker(conn, "crashed:3:c", silent=600, every=60, dead_after=180)  # dead: not a limit
    now = db_now(conn)
    stuck = workflow(conn, now, status="running", lease_owner="k8s:2:b", updated_at=now - timedelta(hours=1))

    refused = cli("recover", "--stale", "2s", "--dsn", dsn)
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr == (
        "wfctl: error: --stale 2s is shorter than the 30s of silence after which live worker k8s:2:b "
        "(heartbeat every 10s) counts as dead: its runs would be requeued while it runs them; use "
        "--stale 30s or more, or --force\n"
    )
    assert cli("recover", "--stale", "29s", "--dry-run", "--dsn", dsn).exit_code == 2  # dry runs too
    assert rows(dsn, "SELECT status, lease_epoch FROM workflows WHERE id = %s", stuck) == [("running", 0)]
    assert cli("recover", "--stale", "30s", "--dsn", dsn).stdout == ""  # long enough: allowed

    forced = cli("recover", "--stale", "2s", "--force", "--dsn", dsn)
    assert forced.exit_code == 0 and forced.stdout.startswith(f"requeued {stuck} order")
    assert rows(dsn, "SELECT status, lease_epoch FROM workflows WHERE id = %s", stuck) == [("pending", 1)]
    # without --stale each worker is judged by its own rule: nothing to guard, nothing taken
    # from a live worker that beats every 5 minutes
    recorded_worker(conn, "batch:4:d", silent=60, every=300, dead_after=900)
    slow = workflow(conn, now, status="running", lease_owner="batch:4:d", updated_at=now - timedelta(hours=1))
    default = cli("recover", "--dsn", dsn)
    assert (default.exit_code, default.stdout, default.stderr) == (0, "", "")
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", slow) == [("running",)]


def test_recover_without_stale_takes_exactly_the_runs_stats_calls_stuck(cli, dsn, conn):
    recorded_worker(conn, "fast:1:a", silent=5, every=1, dead_after=3)  # dead by its own rule
    recorded_worker(conn, "slow:2:b", silent=5, every=10, dead_after=30)  # live: between two beats
    now = db_now(conn)
    old = now - timedelta(minutes=10)
    dead = workflow(conn, now, status="running", lease_owner="fast:1:a", updated_at=old, current_step=2)
    workflow(conn, now, status="running", lease_owner="slow:2:b", updated_at=old)
    listed = json.loads(cli("stats", "--dsn", dsn, "--json").stdout)["stuck"]
    assert [r["id"] for r in listed] == [str(dead)]
    assert (listed[0]["step_in_flight"], listed[0]["current_step"]) == (3, 2)
    dry = json.loads(cli("recover", "--dry-run", "--json", "--dsn", dsn).stdout)
    assert [r["id"] for r in dry if r["action"] == "recovered"] == [str(dead)]
    done = cli("recover", "--dsn", dsn)
    assert done.exit_code == 0 and done.stdout.startswith(f"requeued {dead} ")
    assert json.loads(cli("stats", "--dsn", dsn, "--json").stdout)["stuck"] == []


def test_the_guard_counts_workers_from_before_the_recorded_interval_as_five_minutes(cli, dsn, conn):
    worker(conn, db_now(conn), "legacy:1:a", silent=timedelta(seconds=30))
    result = cli("recover", "--stale", "1m", "--dsn", dsn)
    assert result.exit_code == 2
    assert "than the 5m of silence after which live worker legacy:1:a (heartbeat interval not recorded)" in (
        result.stderr
    )
    assert cli("recover", "--stale", "5m", "--dsn", dsn).exit_code == 0


def test_stats_and_list_mark_pending_runs_of_a_type_no_live_worker_runs(dsn, conn):
    now = db_now(conn)
    recorded_worker(conn, "live:1:a", silent=0, every=10, dead_after=30, types=["order"])
    recorded_worker(conn, "dead:2:b", silent=60, every=10, dead_after=30, types=["refund"])
    waiting = workflow(conn, now, status="pending")
    orphan = workflow(conn, now, workflow_type="refund", status="pending")
    done = workflow(conn, now, workflow_type="refund", status="completed")

    report = reports.stats(conn, since=timedelta(days=1))
    marks = {r["workflow_type"]: r["no_live_worker"] for r in report.success_rate}
    assert marks == {"order": False, "refund": True}
    listed = {r["id"]: r["no_live_worker"] for r in reports.list_workflows(conn)}
    assert listed == {waiting: False, orphan: True, done: False}

    stats = runner()("stats", "--dsn", dsn)
    assert stats.exit_code == 0
    assert stats.stderr.splitlines()[0] == (
        "wfctl: 1 pending workflow(s) of type 'refund' wait for a worker: no live worker runs this type"
    )
    data = json.loads(runner()("stats", "--dsn", dsn, "--json").stdout)
    assert {r["workflow_type"]: r["no_live_worker"] for r in data["success_rate"]} == marks
    assert data["stale"] is None and data["stale_seconds"] is None
    table = runner()("list", "--dsn", dsn)
    assert next(line for line in table.stdout.splitlines() if str(orphan) in line).count("(no live worker)")
    assert "(no live worker)" not in next(line for line in table.stdout.splitlines() if str(waiting) in line)
    as_json = json.loads(runner()("list", "--dsn", dsn, "--json").stdout)
    assert {r["id"]: r["no_live_worker"] for r in as_json} == {str(k): v for k, v in listed.items()}
