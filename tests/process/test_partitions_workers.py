"""The time-partitioned layout: `wfctl init --partitioned`, `wfctl db partition`, idempotency keys
without a unique index, prune dropping whole intervals, partitions made ahead of time (and rows
moved out of the default partition), the reference queries pruned to their window, `wfctl db
status`

The tests of it that start worker processes; those that need only the database are in
tests/db/test_partitions.py.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import PARTITIONED_RUN, rows
from support.partitions import OLD, partition_names

import wfctl


def test_the_engine_runs_and_step_rows_carry_the_partition_key(pdsn, workers):
    workers.dsn = pdsn
    wid = str(wfctl.submit(pdsn, "three", {"n": 2}))
    workers.run()
    assert rows(pdsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("completed",)]
    mismatched = rows(
        pdsn,
        "SELECT count(*) FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id"
        " WHERE s.workflow_created_at IS DISTINCT FROM w.created_at"
        " UNION ALL SELECT count(*) FROM workflow_attempts a JOIN workflows w ON w.id = a.workflow_id"
        " WHERE a.workflow_created_at IS DISTINCT FROM w.created_at",
    )
    assert mismatched == [(0,), (0,)]
    assert rows(pdsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", wid) == [(3,)]


def test_a_missing_partition_is_made_and_its_rows_leave_the_default_partition(pdsn, workers):
    with psycopg.connect(pdsn, autocommit=True) as conn:
        # a run created 20 days ahead (a clock skewed client): no partition yet, so the default
        wid = conn.execute(
            "INSERT INTO workflows (workflow_type, created_at) VALUES ('three', now() + interval '20 days')"
            " RETURNING id"
        ).fetchone()[0]
        assert conn.execute("SELECT count(*) FROM workflows_default").fetchone() == (1,)
        # the duty's partition ahead is dropped; a worker makes it again at its start
        last = conn.execute(
            "SELECT max(partition) FROM wfctl_partitions() WHERE parent = 'workflow_attempts'"
        ).fetchone()[0]
        for table in ("workflow_attempts", "workflow_steps", "workflows"):
            conn.execute(f"DROP TABLE {last.replace('workflow_attempts', table)}")
        moved = conn.execute(
            "SELECT wfctl_create_partition("
            " wfctl_partition_start(now() + interval '20 days', interval '1 day'))"
        ).fetchone()[0]
        assert moved == 1
        assert conn.execute("SELECT count(*) FROM workflows_default").fetchone() == (0,)
        assert (
            conn.execute("SELECT tableoid::regclass::text FROM workflows WHERE id = %s", (wid,))
            .fetchone()[0]
            .startswith("workflows_p")
        )
    workers.dsn = pdsn
    log = workers.run()
    assert "created the partitions of 1 interval(s) ahead" in log, log
    assert last in partition_names(pdsn)


@pytest.mark.skipif(PARTITIONED_RUN, reason="the run's databases are partitioned already")
def test_convert_an_existing_database_with_runs_in_every_status(cli, dsn, workers):
    finished = [str(wfctl.submit(dsn, "three", {"n": n})) for n in range(3)]
    workers.run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        statuses = ("pending", "running", "completed", "failed", "cancelled")
        for status in statuses:
            conn.execute(
                f"INSERT INTO workflows (workflow_type, status, created_at, idempotency_key)"
                f" VALUES ('three', %s, {OLD}, %s)",
                (status, f"key-{status}"),
            )
        before = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("workflows", "workflow_steps", "workflow_attempts")
        }
        snapshot = conn.execute("SELECT id, status, created_at FROM workflows ORDER BY id").fetchall()
        conn.execute("CREATE ROLE wfctl_conv_worker")
    try:
        assert cli("init", "--grant", "wfctl_conv_worker", "--dsn", dsn).exit_code == 0
        # a live worker: refused
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO workers (id, hostname, pid, concurrency) VALUES ('h:1:a', 'h', 1, 1)")
        refused = cli("db", "partition", "--dsn", dsn)
        assert refused.exit_code == 7 and "live worker h:1:a is running" in refused.stderr, refused.output
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE workers SET stopped_at = now()")

        done = cli("db", "partition", "--partition-interval", "7d", "--json", "--dsn", dsn)
        assert done.exit_code == 0, done.output
        report = json.loads(done.stdout)
        copied = (report["workflows"], report["steps"], report["attempts"])
        assert copied == (before["workflows"], before["workflow_steps"], before["workflow_attempts"])
        assert rows(dsn, "SELECT id, status, created_at FROM workflows ORDER BY id") == snapshot
        assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_created_at IS NULL") == [(0,)]
        assert rows(dsn, "SELECT relkind FROM pg_class WHERE relname = 'workflows'") == [("p",)]
        # the grant was carried over, and the old tables are gone
        assert rows(
            dsn, "SELECT has_table_privilege('wfctl_conv_worker', 'workflows', 'INSERT'),"
            " has_sequence_privilege('wfctl_conv_worker', 'workflow_steps_id_seq', 'USAGE'),"
            " to_regnamespace('wfctl_unpartitioned_public')"
        ) == [(True, True, None)]  # fmt: skip
        # an old key is still taken; the engine runs on the new tables
        assert str(wfctl.submit(dsn, "three", {}, key="key-failed")) in {str(i) for (i,) in rows(
            dsn, "SELECT id FROM workflows WHERE idempotency_key = 'key-failed'")}  # fmt: skip
        again = str(wfctl.submit(dsn, "three", {"n": 9}))
        workers.run()
        assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", again) == [("completed",)]
        assert all(
            rows(dsn, "SELECT status FROM workflows WHERE id = %s", w) == [("completed",)] for w in finished
        )
        status = json.loads(cli("db", "status", "--json", "--dsn", dsn).stdout)
        assert status["partition_interval"] == "7d"
        twice = cli("db", "partition", "--dsn", dsn)
        assert twice.exit_code == 7 and "partitioned already" in twice.stderr
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP OWNED BY wfctl_conv_worker")
            conn.execute("DROP ROLE wfctl_conv_worker")
