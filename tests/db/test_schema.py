"""The schema: a superset of the reference design, installed by migrations, version-checked."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from helpers import PARTITIONED_RUN

from wfctl import schema
from wfctl.errors import SchemaError

REFERENCE_COLUMNS = {
    "workflows": {
        "id": "uuid",
        "workflow_type": "character varying",
        "status": "character varying",
        "input_data": "jsonb",
        "current_step": "integer",
        "max_retries": "integer",
        "error_message": "text",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
    },
    "workflow_steps": {
        "id": None,  # SERIAL in the reference; bigint identity here (same meaning, more room)
        "workflow_id": "uuid",
        "step_number": "integer",
        "step_name": "character varying",
        "status": "character varying",
        "output_data": "jsonb",
        "started_at": "timestamp with time zone",
        "completed_at": "timestamp with time zone",
        "error_message": "text",
    },
}


def reference_queries() -> list[str]:
    from helpers import REFERENCE_SQL

    text = REFERENCE_SQL.read_text()
    statements = [s.strip() for s in text.split(";")]
    return [s for s in statements if re.match(r"^(--[^\n]*\n\s*)*SELECT", s)]


def columns(conn: psycopg.Connection, table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_name = %s AND table_schema = current_schema()",
        (table,),
    ).fetchall()
    return dict(rows)


@pytest.mark.parametrize("table", sorted(REFERENCE_COLUMNS))
def test_reference_columns_present_with_same_types(conn, table):
    have = columns(conn, table)
    for name, kind in REFERENCE_COLUMNS[table].items():
        assert name in have, f"{table}.{name} missing"
        if kind is not None:
            assert have[name] == kind, f"{table}.{name} is {have[name]}, reference says {kind}"


def test_engine_columns_present(conn):
    have = columns(conn, "workflows")
    for name in (
        "attempt",
        "run_at",
        "priority",
        "idempotency_key",
        "output_data",
        "lease_owner",
        "lease_epoch",
    ):
        assert name in have
    assert {"id", "hostname", "pid", "heartbeat_at"} <= set(columns(conn, "workers"))


@pytest.mark.skipif(PARTITIONED_RUN, reason="the reference design's step INSERT has no partition key")
def test_reference_insert_and_queries_run_unchanged(conn):
    conn.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('order', '{\"amount\": 12}')")
    wid = conn.execute("SELECT id FROM workflows").fetchone()[0]
    conn.execute(
        "INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at,"
        " completed_at) VALUES (%s, 1, 'charge', 'completed', now() - interval '3 seconds', now())",
        (wid,),
    )
    conn.execute("UPDATE workflows SET status = 'completed'")
    queries = reference_queries()
    assert len(queries) == 3
    success, stuck, slow = (conn.execute(sql).fetchall() for sql in queries)
    assert success == [("order", 1, 1, pytest.approx(100.0))]
    assert stuck == []
    assert slow[0][:2] == ("order", "charge") and float(slow[0][2]) == pytest.approx(3.0, abs=0.1)


def test_plain_insert_gets_engine_defaults(conn):
    conn.execute("INSERT INTO workflows (workflow_type) VALUES ('order')")
    row = conn.execute(
        "SELECT status, attempt, max_retries, lease_epoch, run_at <= now() FROM workflows"
    ).fetchone()
    # max_retries NULL: the type's registered policy, filled in when a worker claims it
    assert row == ("pending", 1, None, 0, True)


def test_runnable_set_has_partial_index(conn):
    indexdef = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'workflows_runnable_idx'"
    ).fetchone()[0]
    assert "WHERE" in indexdef and "pending" in indexdef


def test_migrate_is_idempotent(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        first = schema.migrate(conn)
        second = schema.migrate(conn)
        assert [m.version for m in first.applied] == [m.version for m in schema.migrations()]
        assert second.applied == () and second.before == schema.latest_version()
        assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations WHERE version > 0").fetchone()[
            0
        ] == len(schema.migrations())


def test_concurrent_migrations_apply_once(empty_dsn):
    results: list[schema.MigrateResult] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                barrier.wait()
                results.append(schema.migrate(conn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(1 for r in results if r.applied) == 1  # a new install is one transaction
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations WHERE version > 0").fetchone()[
            0
        ] == len(schema.migrations())


def test_check_refuses_missing_old_and_new(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(SchemaError, match=r"no wfctl schema.*wfctl init"):
            schema.check(conn)
        schema.migrate(conn)
        assert schema.check(conn) == schema.latest_version()
        # a newer release's schema still runs this one until a contract removes what it needs
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (999, 'future')")
        assert schema.check(conn) == 999
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (-999, 'future')")
        with pytest.raises(SchemaError, match=r"too old for the database.*before schema 999.*upgrade wfctl"):
            schema.check(conn)
        conn.execute("DELETE FROM wfctl_schema_migrations")
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (0, 'ancient')")
        with pytest.raises(SchemaError):
            schema.check(conn)


def test_check_refuses_older(empty_dsn, monkeypatch):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        schema.migrate(conn)
        latest = schema.latest_version()
        monkeypatch.setattr(schema, "latest_version", lambda: latest + 1)
        with pytest.raises(SchemaError, match=rf"version {latest}, older.*wfctl init"):
            schema.check(conn)


def test_migrations_are_numbered_without_gaps():
    versions = [m.version for m in schema.migrations()]
    assert versions == list(range(1, len(versions) + 1))
