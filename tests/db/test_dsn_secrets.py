"""Secrets in DSNs and `wfctl init` from libpq's environment.

- every secret connection key (``password``, ``sslpassword``, any key ending in ``password``,
  ``oauth_client_secret``) is masked wherever a DSN is printed, and a wfctl.toml holding one
  is written 0600 and warned about when others can read it;
- `init` from PG* variables writes a DSN that keeps every connection parameter set there
  (except the password, which it says it left out), and names the server it really used.
"""

from __future__ import annotations

import json
import os
import stat

import psycopg
import pytest
from psycopg import conninfo, pq

from wfctl.config import Target, dsn_from_libpq_env, load_config, write_config
from wfctl.connection import describe, is_secret, mask_dsn, scrub

SECRET = "Hunter2-sslkey-Pass"


@pytest.mark.parametrize(
    "dsn",
    [
        f"host=h sslpassword={SECRET} dbname=d",
        f"host=h sslpassword='{SECRET}' password=other dbname=d",
        f"postgresql://u@h/d?sslpassword={SECRET}&sslmode=require",
        f"host=h oauth_client_secret={SECRET}",
    ],
)
def test_every_secret_key_is_masked(dsn):
    masked = mask_dsn(dsn)
    assert SECRET not in masked and "other" not in masked and "***" in masked
    assert SECRET not in scrub(f"error near {SECRET}", dsn)


def test_secret_keys():
    assert all(is_secret(k) for k in ("password", "sslpassword", "oauth_client_secret", "PASSWORD"))
    assert not any(is_secret(k) for k in ("passfile", "sslkey", "user", "host"))
    # whatever this libpq masks in its own dialogs is a secret to wfctl too
    for option in pq.Conninfo.get_defaults():
        if option.dispchar == b"*":
            assert is_secret(option.keyword.decode())


def test_config_with_sslpassword_is_written_private_and_warned_about(clean_env):
    path = write_config(load_config(), Target(dsn=f"host=h sslpassword={SECRET}", source="--dsn"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_config().warnings == ()
    path.chmod(0o644)
    assert any("holds a password" in w and "chmod 600" in w for w in load_config().warnings)


def test_db_url_status_and_init_mask_sslpassword(cli, empty_dsn, clean_env):
    dsn = f"{empty_dsn} sslpassword={SECRET}"  # unused on a socket, but kept in the DSN
    url = cli("db", "url", "--dsn", dsn)
    assert url.exit_code == 0 and SECRET not in url.output and "sslpassword=***" in url.stdout
    init = cli("init", "--dsn", dsn)
    assert init.exit_code == 0, init.output
    assert SECRET not in init.output and "sslpassword=***" in init.stderr
    config = clean_env / "wfctl.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and SECRET in config.read_text()
    status = cli("db", "status", "--json")  # from the file init wrote
    assert status.exit_code == 0, status.output
    assert SECRET not in status.output and json.loads(status.stdout)["dsn"].endswith("sslpassword=***")
    config.chmod(0o644)
    warned = cli("db", "url")
    assert "readable by other users" in warned.stderr and SECRET not in warned.output


def pg_environment(dsn: str) -> dict[str, str]:
    """The PG* variables that point libpq at the server of ``dsn``."""
    names = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "dbname": "PGDATABASE",
        "password": "PGPASSWORD",
    }
    params = conninfo.conninfo_to_dict(dsn)
    return {names[k]: str(v) for k, v in params.items() if k in names and v}


def test_init_from_pg_environment_keeps_every_parameter(cli, empty_dsn, clean_env, monkeypatch):
    env = pg_environment(empty_dsn)
    extra = {
        "PGSSLMODE": "disable",
        "PGSSLROOTCERT": "/etc/ssl/certs/db-root.pem",
        "PGTARGETSESSIONATTRS": "any",
        "PGCONNECT_TIMEOUT": "7",
        "PGAPPNAME": "cron-wfctl",
        "PGPASSWORD": env.get("PGPASSWORD", "unused-socket-password"),
    }
    for name, value in {**env, **extra}.items():
        monkeypatch.setenv(name, value)
    result = cli("init")
    assert result.exit_code == 0, result.output
    written = load_config().get("database", "dsn")
    params = conninfo.conninfo_to_dict(written)
    for name, key in (
        ("PGSSLMODE", "sslmode"),
        ("PGSSLROOTCERT", "sslrootcert"),
        ("PGTARGETSESSIONATTRS", "target_session_attrs"),
        ("PGCONNECT_TIMEOUT", "connect_timeout"),
        ("PGAPPNAME", "application_name"),
        ("PGHOST", "host"),
        ("PGDATABASE", "dbname"),
    ):
        assert params.get(key) == os.environ[name], (key, written)
    assert "password" not in params and extra["PGPASSWORD"] not in result.output
    with psycopg.connect(empty_dsn) as conn:
        info = conn.info
        server = f"{info.user}@{info.host}:{info.port}/{info.dbname}"
    assert f"in {server} (applied" in result.stderr, result.stderr
    assert "localhost" not in result.stderr and "(database: )" not in result.stderr
    assert "not recorded in wfctl.toml: PGPASSWORD" in result.stderr
    # a job without that environment (cron) connects the same way, from the file alone
    for name in {**env, **extra}:
        if name != "PGPASSWORD":
            monkeypatch.delenv(name)
    again = cli("init")
    assert again.exit_code == 0 and "up to date" in again.stderr, again.output


def test_every_libpq_environment_variable_is_recorded(monkeypatch, clean_env):
    options = [o for o in pq.Conninfo.get_defaults() if o.envvar]
    for option in options:
        monkeypatch.setenv(option.envvar.decode(), f"v-{option.keyword.decode()}")
    params = conninfo.conninfo_to_dict(dsn_from_libpq_env())
    for option in options:
        key = option.keyword.decode()
        if is_secret(key):
            assert key not in params
        else:
            assert params.get(key) == f"v-{key}", key


def test_describe_says_what_the_defaults_are(monkeypatch, clean_env):
    monkeypatch.setenv("PGUSER", "app")
    monkeypatch.setenv("PGDATABASE", "shop")
    described = describe("")
    assert "localhost" not in described
    assert described == "app@(default Unix socket)/shop"
    monkeypatch.setenv("PGHOST", "db1")
    monkeypatch.setenv("PGPORT", "6432")
    assert describe("") == "app@db1:6432/shop"
    assert describe("host=db2 dbname=other") == "app@db2:6432/other"


@pytest.mark.parametrize("table", ["database", "reports"])
def test_a_password_in_any_dsn_of_a_readable_config_draws_the_warning(clean_env, table):
    config = clean_env / "wfctl.toml"
    config.write_text(f'[{table}]\ndsn = "postgresql://u:{SECRET}@h/db"\n')
    config.chmod(0o644)
    assert load_config().warnings == (
        f"{config} holds a password and is readable by other users: run `chmod 600 {config}`",
    )
    config.chmod(0o600)
    assert load_config().warnings == ()


@pytest.mark.parametrize("table", ["database", "reports"])
@pytest.mark.parametrize(
    ("value", "found"),
    [
        (f'["postgresql://u:{SECRET}@h/db"]', "a list"),
        (f'{{ password = "{SECRET}" }}', "a table"),
        ("12", "an integer"),
    ],
)
def test_a_dsn_of_the_wrong_type_is_named_without_its_value(cli, clean_env, table, value, found):
    config = clean_env / "wfctl.toml"
    config.write_text(f"[{table}]\ndsn = {value}\n")
    config.chmod(0o600)
    result = cli("list")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == f"wfctl: error: {config}: [{table}] dsn must be a string, not {found}\n"
