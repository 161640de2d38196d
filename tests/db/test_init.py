"""`wfctl init`, `wfctl db`, and the one-line errors every command gives."""

from __future__ import annotations

import json
import stat
import uuid

import psycopg
import pytest
from helpers import free_port, with_db

import wfctl
from wfctl import schema
from wfctl.queries import composed


def test_init_installs_then_changes_nothing(cli, empty_dsn, clean_env):
    first = cli("init", "--dsn", empty_dsn)
    assert first.exit_code == 0, first.output
    assert f"installed schema version {schema.latest_version()}" in first.stderr
    assert first.stdout == ""
    config = clean_env / "wfctl.toml"
    assert config.exists() and empty_dsn.split()[0] in config.read_text()
    second = cli("init")  # now from the config file it wrote
    assert second.exit_code == 0, second.output
    assert "up to date" in second.stderr and "nothing changed" in second.stderr


def test_init_json(cli, empty_dsn):
    result = cli("init", "--dsn", empty_dsn, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["schema_version"] == schema.latest_version()
    assert data["applied"] == [f"{m.version:04d}_{m.name}" for m in schema.migrations()]


def test_global_options_before_the_command(cli, empty_dsn):
    result = cli("--dsn", empty_dsn, "init")
    assert result.exit_code == 0, result.output


INSERT_ORDER = "INSERT INTO workflows (workflow_type) VALUES ('order') RETURNING id"


def test_init_upgrades_a_version_1_database(cli, empty_dsn, monkeypatch):
    """A database installed by a wfctl that knew only migration 1: other commands refuse it and
    say to run `wfctl init`, which applies the rest and keeps the rows."""
    first = schema.migrations()[:1]
    with monkeypatch.context() as patched, psycopg.connect(empty_dsn, autocommit=True) as conn:
        patched.setattr(schema, "migrations", lambda: first)
        assert schema.migrate(conn).after == 1
        old = conn.execute(INSERT_ORDER).fetchone()[0]
    latest = schema.latest_version()
    assert latest >= 2

    refused = cli("list", "--dsn", empty_dsn)
    assert refused.exit_code == 5
    assert refused.stderr == (
        f"wfctl: error: the database schema is version 1, older than this wfctl's {latest} "
        f"(wfctl {wfctl.__version__}) (run `wfctl init` with this release to upgrade it; the "
        "workers of the release before keep running)\n"
    )
    status = json.loads(cli("db", "status", "--dsn", empty_dsn, "--json").stdout)
    assert (status["schema_version"], status["schema_latest"]) == (1, latest)

    upgraded = cli("init", "--dsn", empty_dsn)
    assert upgraded.exit_code == 0, upgraded.output
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in schema.migrations()[1:])
    assert f"upgraded from version 1 to schema version {latest}" in upgraded.stderr
    assert f"(applied {names})" in upgraded.stderr and "0001" not in upgraded.stderr
    assert "up to date" in cli("init", "--dsn", empty_dsn).stderr
    assert cli("list", "--dsn", empty_dsn).exit_code == 0

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        new = conn.execute(INSERT_ORDER).fetchone()[0]
        retries = dict(conn.execute("SELECT id, max_retries FROM workflows").fetchall())
    # a row stored before the upgrade keeps the value the old default gave it
    assert retries == {old: 3, new: None}


def test_unreachable_host_is_one_line(cli):
    port = free_port()
    result = cli("init", "--dsn", f"host=127.0.0.1 port={port} dbname=x connect_timeout=3")
    assert result.exit_code == 4
    assert result.stderr.startswith("wfctl: error: cannot connect to 127.0.0.1:")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_bad_dsn_syntax_never_echoes_the_password(cli):
    result = cli("init", "--dsn", "host=h password=se cret")
    assert result.exit_code == 3
    assert "invalid DSN" in result.stderr
    assert "cret" not in result.output and "se " not in result.output
    assert result.stderr.count("\n") == 1


def test_unknown_dsn_option(cli):
    result = cli("init", "--dsn", "hots=localhost")
    assert result.exit_code == 3 and 'invalid connection option "hots"' in result.stderr


def test_invalid_config_file_is_one_line(cli, clean_env):
    (clean_env / "wfctl.toml").write_text("[database\n")
    result = cli("init")
    assert result.exit_code == 3 and "not valid TOML" in result.stderr
    assert result.stderr.count("\n") == 1


def test_unreadable_config_file(cli, clean_env):
    (clean_env / "wfctl.toml").mkdir()
    result = cli("db", "status")
    assert result.exit_code == 3 and "cannot read config file" in result.stderr
    assert result.stderr.count("\n") == 1


def test_named_config_must_exist(cli, tmp_path):
    result = cli("db", "status", "--config", str(tmp_path / "nope.toml"))
    assert result.exit_code == 3 and "does not exist" in result.stderr


@pytest.fixture
def password_role(pg_server, empty_dsn):
    if pg_server.tcp_port is None:
        pytest.skip("the test server does not listen on TCP")
    role = f"wfctl_pw_{uuid.uuid4().hex[:8]}"  # roles are the server's: one per test (xdist)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-horse'")
    yield role
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_wrong_password_is_one_line_and_masked(cli, pg_server, empty_dsn, password_role):
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    dsn = pg_server.tcp_dsn(dbname, password_role, "wrong-battery")
    result = cli("--debug", "init", "--dsn", dsn)
    assert result.exit_code == 4
    assert "authentication failed" in result.stderr
    assert "wrong-battery" not in result.output


def test_permission_denied_on_create(cli, pg_server, empty_dsn, password_role):
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    dsn = pg_server.tcp_dsn(dbname, password_role, "right-horse")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    result = cli("init", "--dsn", dsn)
    assert result.exit_code == 8, result.output
    assert result.stderr.startswith("wfctl: error: permission denied")
    assert "right-horse" not in result.output and result.stderr.count("\n") == 1
    with psycopg.connect(empty_dsn) as conn:  # nothing half-written
        assert conn.execute("SELECT to_regclass('workflows')").fetchone()[0] is None


def test_init_writes_private_config_for_password_dsn(cli, pg_server, empty_dsn, password_role, clean_env):
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(composed("admin.create_database", name=dbname + "_pw"))
        conn.execute(f"ALTER DATABASE {dbname}_pw OWNER TO {password_role}")
    try:
        dsn = pg_server.tcp_dsn(dbname + "_pw", password_role, "right-horse")
        result = cli("init", "--dsn", dsn)
        assert result.exit_code == 0, result.output
        assert "right-horse" not in result.output
        config = clean_env / "wfctl.toml"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
    finally:
        with psycopg.connect(with_db(empty_dsn, "postgres"), autocommit=True) as conn:
            conn.execute(composed("admin.drop_database", name=dbname + "_pw"))


def test_db_status_reports_schema(cli, dsn):
    result = cli("db", "status", "--dsn", dsn, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == schema.latest_version()
    assert {t["table_name"] for t in data["tables"]} >= {"workflows", "workflow_steps", "workers"}


def test_db_status_without_schema_says_what_to_run(cli, empty_dsn):
    result = cli("db", "status", "--dsn", empty_dsn)
    assert result.exit_code == 0
    assert "wfctl init" in result.stderr


def test_db_stop_refuses_external_database(cli, dsn):
    result = cli("--dsn", dsn, "db", "stop")
    assert result.exit_code == 2 and "not the embedded server" in result.stderr


def test_db_url_masks_password(cli):
    result = cli("db", "url", "--dsn", "host=h port=1 password=s3cret dbname=d")
    assert result.exit_code == 0 and "s3cret" not in result.stdout and "***" in result.stdout
