"""Two releases side by side: a newer schema runs the release before it, `wfctl init` contracts
only once no live worker of an older release needs what a contract removes, and migrations wait
for their locks briefly and retry instead of holding the workers' statements back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest
from helpers import wait_for

from wfctl import schema
from wfctl.errors import InvalidState, SchemaError

PROBE = "SELECT to_regprocedure('wfctl_legacy_probe()') IS NOT NULL"


@pytest.fixture
def legacy(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A function only releases before the current schema call, and the contract that removes it,
    in a database upgraded from an older release (a new install applies its contracts at once:
    here none is recorded yet)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM wfctl_schema_migrations WHERE version < 0")
        conn.execute("CREATE FUNCTION wfctl_legacy_probe() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    version = schema.latest_version()
    path = tmp_path / f"{version:04d}_drop_legacy_probe.sql"
    path.write_text("DROP FUNCTION wfctl_legacy_probe();\n", encoding="utf-8")
    monkeypatch.setattr(schema, "contracts", lambda: (schema.Migration(version, "drop_legacy_probe", path),))
    return path


def _worker(conn: psycopg.Connection, name: str, schema_version: int | None, state: str = "live") -> None:
    """A workers row of a release built for ``schema_version`` (None: one before workers said)."""
    heartbeat = "wfctl_now() - interval '1 hour'" if state == "dead" else "wfctl_now()"
    stopped = "wfctl_now()" if state == "stopped" else "NULL"
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, schema_version, dead_after_seconds,"
        f" heartbeat_at, stopped_at) VALUES (%s, 'host', %s, 1, '0.0.9', %s, 60, {heartbeat}, {stopped})",
        (name, abs(hash(name)) % 30000, schema_version),
    )


def test_a_newer_schema_runs_this_release_until_a_contract_passes_it(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (999, 'future')")
    assert cli("list", "--dsn", dsn).exit_code == 0
    upgraded = cli("init", "--dsn", dsn)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stderr.startswith("wfctl: schema version 999 in ")
    assert f"is newer than this wfctl's {schema.latest_version()} and still runs it; nothing changed" in (
        upgraded.stderr
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (-999, 'future')")
    for command in (("list",), ("init",)):
        refused = cli(*command, "--dsn", dsn)
        assert refused.exit_code == 5
        assert refused.stderr.count("\n") == 1
        assert (
            "is too old for the database: its schema (version 999) no longer keeps what releases before "
            "schema 999 need (upgrade wfctl on this machine to a release built for schema 999 or later)"
            in refused.stderr
        )


def test_init_leaves_a_contract_for_later_while_an_older_worker_heartbeats(cli, dsn, legacy):
    latest = schema.latest_version()
    with psycopg.connect(dsn, autocommit=True) as conn:
        _worker(conn, "old-live", latest - 1)
        _worker(conn, "unknown-live", None)
        _worker(conn, "old-stopped", latest - 1, "stopped")
        _worker(conn, "old-dead", latest - 1, "dead")
        _worker(conn, "current", latest)
    held = cli("init", "--dsn", dsn)
    assert held.exit_code == 0, held.output
    assert (
        f"left for later: {latest:04d}_drop_legacy_probe; 2 live workers of a release before schema "
        f"{latest} still need it: host:" in held.stderr
    )
    assert "--force" in held.stderr and "contracted" not in held.stderr
    report = json.loads(cli("--json", "init", "--dsn", dsn).stdout)
    assert report["contracted"] == []
    assert report["contracts_waiting"] == [f"{latest:04d}_drop_legacy_probe"]
    assert len(report["waiting_for_workers"]) == 2
    assert all("(wfctl 0.0.9)" in w for w in report["waiting_for_workers"])
    status = json.loads(cli("--json", "db", "status", "--dsn", dsn).stdout)
    assert status["contracts_waiting"] == [f"{latest:04d}_drop_legacy_probe"]
    assert status["schema_runs_releases_from"] is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(PROBE).fetchone()[0]
        assert schema.floor(conn) == 0
        conn.execute("UPDATE workers SET stopped_at = wfctl_now() WHERE id IN ('old-live', 'unknown-live')")

    done = cli("init", "--dsn", dsn)
    assert done.exit_code == 0, done.output
    assert (
        f"contracted: removed what releases before schema {latest} needed ({latest:04d}_drop_legacy_probe)"
        in (done.stderr)
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not conn.execute(PROBE).fetchone()[0]
        assert schema.floor(conn) == latest
        assert schema.check(conn) == latest  # this release is not older than the floor
    again = cli("init", "--dsn", dsn)
    assert "up to date" in again.stderr and "contracted" not in again.stderr
    status = json.loads(cli("--json", "db", "status", "--dsn", dsn).stdout)
    assert (status["contracts_waiting"], status["schema_runs_releases_from"]) == ([], latest)
    assert "contracts waiting          none" in cli("db", "status", "--dsn", dsn).stdout


def test_force_contracts_while_an_older_worker_heartbeats(cli, dsn, legacy):
    with psycopg.connect(dsn, autocommit=True) as conn:
        _worker(conn, "old-live", schema.latest_version() - 1)
    forced = cli("init", "--force", "--dsn", dsn)
    assert forced.exit_code == 0, forced.output
    assert "contracted: removed" in forced.stderr and "left for later" not in forced.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not conn.execute(PROBE).fetchone()[0]


def test_a_contract_floor_refuses_the_release_it_left_behind(dsn, legacy, monkeypatch):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert schema.contract(conn).applied
        latest = schema.latest_version()
        monkeypatch.setattr(schema, "latest_version", lambda: latest - 1)
        monkeypatch.setattr(schema, "current_version", lambda conn: latest)
        with pytest.raises(SchemaError, match=rf"too old for the database.*before schema {latest} need"):
            schema.check(conn)


@pytest.fixture
def locking(empty_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A database at the latest schema, and one more migration that needs the workers table to
    itself (ALTER TABLE), as a release's next one may; its version."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        schema.migrate(conn)
    real = schema.migrations()
    version = real[-1].version + 1
    path = tmp_path / f"{version:04d}_workers_probe.sql"
    path.write_text("ALTER TABLE workers ADD COLUMN probe integer;\n", encoding="utf-8")
    monkeypatch.setattr(
        schema, "migrations", lambda: (*real, schema.Migration(version, "workers_probe", path))
    )
    return version


def test_a_migration_waits_briefly_for_a_lock_and_retries(empty_dsn, locking, monkeypatch):
    """A migration that cannot lock a table within LOCK_TIMEOUT rolls back and tries again after
    a pause; the schema is never half-upgraded, and one that never gets its locks says why."""
    monkeypatch.setattr(schema, "LOCK_TIMEOUT", "50ms")
    monkeypatch.setattr(schema, "LOCK_TRIES", 3)
    with psycopg.connect(empty_dsn, autocommit=True) as conn, psycopg.connect(empty_dsn) as holder:
        holder.execute("LOCK TABLE workers IN ACCESS SHARE MODE")  # a long read of the workers table
        pauses: list[float] = []
        with pytest.raises(
            InvalidState, match=rf"migration {locking:04d}_workers_probe did not get its locks: 3 tries"
        ):
            schema.migrate(conn, sleep=pauses.append)
        assert pauses == [schema.LOCK_PAUSE, schema.LOCK_PAUSE * 2]
        assert schema.current_version(conn) == locking - 1

        def end_the_read(seconds: float) -> None:
            pauses.append(seconds)
            holder.rollback()

        pauses.clear()
        result = schema.migrate(conn, sleep=end_the_read)
        assert (result.before, result.after, result.lock_retries) == (locking - 1, locking, 1)
        assert [m.version for m in result.applied] == [locking]


def test_a_waiting_migration_holds_other_statements_back_only_for_its_lock_timeout(empty_dsn, locking):
    """While the migration waits for a lock a long read holds, a worker's statement on the same
    table queues behind it: it runs once the migration's wait ends (LOCK_TIMEOUT), while the read
    still holds its lock."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn, psycopg.connect(empty_dsn) as holder:
        holder.execute("LOCK TABLE workers IN ACCESS SHARE MODE")
        worker_done = threading.Event()

        def end_the_read(seconds: float) -> None:
            worker_done.wait(30)
            holder.rollback()

        migrating = threading.Thread(target=lambda: schema.migrate(conn, sleep=end_the_read))
        migrating.start()
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as worker:
                waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'workers'::regclass"
                wait_for(
                    lambda: worker.execute(waiting).fetchone()[0], what="the migration to wait for its lock"
                )
                worker.execute("SET statement_timeout = '20s'")
                assert worker.execute("SELECT count(*) FROM workers").fetchone()[0] == 0
                still_held = holder.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()")
                assert still_held.fetchone()[0] > 0
        finally:
            worker_done.set()
            migrating.join()
        assert schema.current_version(conn) == locking


def test_a_new_install_applies_the_contracts_at_once_and_says_only_that_it_installed(cli, empty_dsn):
    installed = cli("init", "--dsn", empty_dsn)
    assert installed.exit_code == 0, installed.output
    assert "installed schema version" in installed.stderr and "contracted" not in installed.stderr
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert schema.floor(conn) == max((c.version for c in schema.contracts()), default=0)
    again = cli("init", "--dsn", empty_dsn)
    assert "up to date" in again.stderr and "contracted" not in again.stderr


def test_a_schema_installed_without_init_has_its_contracts_too(empty_dsn):
    """The demo, the tests' templates and the benchmarks install with schema.migrate alone."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        schema.migrate(conn)
        assert schema.floor(conn) == max((c.version for c in schema.contracts()), default=0)
        assert schema.contract(conn) == schema.ContractResult()
