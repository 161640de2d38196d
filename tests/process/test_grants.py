"""`wfctl init --grant ROLE`: a worker role gets what it needs and no DDL."""

from __future__ import annotations

import signal
import uuid

import psycopg
import pytest
from helpers import wait_for, with_db
from psycopg import conninfo, sql

import wfctl


@pytest.fixture
def role(empty_dsn):
    name = f"wfctl_worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_role(dsn: str, role: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    return with_db(dsn, str(params["dbname"]), user=role)


def test_worker_runs_under_a_granted_role_without_ddl(cli, workers, empty_dsn, role):
    result = cli("init", "--grant", role, "--dsn", empty_dsn)
    assert result.exit_code == 0, result.output
    assert f"granted role '{role}'" in result.stderr
    role_dsn = as_role(empty_dsn, role)
    workers.dsn = role_dsn  # every process of this test connects as the worker role
    wid = str(wfctl.submit(role_dsn, "three", {}))
    proc = workers.start()
    wait_for(
        lambda: workers.wfctl("show", wid, "--json").stdout.count('"completed"') >= 1,
        what="the workflow to complete under the worker role",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert workers.wfctl("recover", "--stale", "5m").exit_code == 0
    assert workers.wfctl("stats", "--json").exit_code == 0
    with psycopg.connect(role_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone() == ("completed",)
        for ddl in (
            "CREATE TABLE sneaky (x int)",
            "DROP TABLE workflows",
            "ALTER TABLE workflows ADD COLUMN x int",
            "DELETE FROM workflow_steps",
            "TRUNCATE workflows",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(ddl)


def test_grant_to_an_unknown_role(cli, empty_dsn):
    result = cli("init", "--grant", "no_such_role_xyz", "--dsn", empty_dsn)
    assert result.exit_code == 6 and "no database role 'no_such_role_xyz'" in result.stderr
