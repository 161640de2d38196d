"""`wfctl prune --dry-run` counts the worker rows it would delete too; `wfctl db url` prints a
DSN that works (`--reveal` for its passwords; without it, one line on stderr says they are
hidden)."""

from __future__ import annotations

import json

import psycopg
from helpers import PARTITIONED_RUN, rows
from psycopg.conninfo import conninfo_to_dict

from wfctl.cli.db import HIDDEN_NOTICE


def seed_workers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at, stopped_at) VALUES"
            " ('old-stopped', 'h', 1, 1, now() - interval '40 days', now() - interval '40 days'),"
            " ('old-silent-idle', 'h', 2, 1, now() - interval '40 days', NULL),"
            " ('old-silent-holding', 'h', 3, 1, now() - interval '40 days', NULL),"
            " ('live', 'h', 4, 1, now(), NULL)"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, lease_owner, lease_epoch)"
            " VALUES ('t', 'running', 'old-silent-holding', 1)"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, finished_at)"
            " VALUES ('t', 'completed', now() - interval '40 days')"
        )


def test_prune_dry_run_reports_the_worker_rows_too(cli, dsn):
    seed_workers(dsn)
    dry = cli("prune", "--older-than", "30d", "--dry-run", "--dsn", dsn)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout == "would remove 1 workflow(s) and 0 step(s), and 2 old worker row(s)\n"
    as_json = json.loads(cli("prune", "--older-than", "30d", "--dry-run", "--dsn", dsn, "--json").stdout)
    partitions = {"partitions": 0, "partitions_busy": 0} if PARTITIONED_RUN else {}
    assert as_json == {"dry_run": True, "workflows": 1, "steps": 0, "workers": 2, **partitions}
    assert rows(dsn, "SELECT count(*) FROM workers") == [(4,)]

    done = cli("prune", "--older-than", "30d", "--dsn", dsn)
    assert done.stdout == "removed 1 workflow(s) and 0 step(s), and 2 old worker row(s)\n", done.output
    assert rows(dsn, "SELECT id FROM workers ORDER BY id") == [("live",), ("old-silent-holding",)]
    again = cli("prune", "--older-than", "30d", "--dry-run", "--dsn", dsn)
    assert (again.exit_code, again.stdout, again.stderr) == (0, "", "")


def test_db_url_hides_passwords_and_says_so_and_reveal_shows_them(cli, clean_env):
    dsn = "host=db1 port=5433 user=u password=pw-1234 dbname=app sslmode=prefer"
    hidden = cli("db", "url", "--dsn", dsn)
    assert hidden.exit_code == 0, hidden.output
    assert conninfo_to_dict(hidden.stdout.strip())["password"] == "***"
    assert "pw-1234" not in hidden.output
    assert hidden.stderr == f"wfctl: {HIDDEN_NOTICE}\n"

    shown = cli("db", "url", "--dsn", dsn, "--reveal")
    assert (shown.exit_code, shown.stderr) == (0, ""), shown.output
    assert conninfo_to_dict(shown.stdout.strip()) == conninfo_to_dict(dsn)

    plain = cli("db", "url", "--dsn", "host=db1 dbname=app")
    assert plain.stderr == "" and conninfo_to_dict(plain.stdout.strip()) == {"host": "db1", "dbname": "app"}


def test_db_url_from_the_pg_environment_works_without_it(cli, dsn, clean_env, monkeypatch):
    """Configured by libpq's variables, `db url` prints them as a DSN (PGPASSWORD too, with
    --reveal) that connects from an environment without them."""
    env = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "dbname": "PGDATABASE",
        "password": "PGPASSWORD",
    }
    params = conninfo_to_dict(dsn)
    for key, name in env.items():
        if params.get(key):
            monkeypatch.setenv(name, str(params[key]))
    monkeypatch.setenv("PGAPPNAME", "from-the-env")
    result = cli("db", "url", "--reveal")
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    printed = result.stdout.strip()
    assert conninfo_to_dict(printed)["application_name"] == "from-the-env"
    for name in [*env.values(), "PGAPPNAME"]:
        monkeypatch.delenv(name, raising=False)
    with psycopg.connect(printed) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (params["dbname"],)
