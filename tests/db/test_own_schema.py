"""A schema of its own: `wfctl init --schema NAME` and `[database] schema`
put every wfctl table, function and trigger in that schema, in a database that has its own
`workers` table; the SQL functions work whatever the caller's search_path; two schemas in one
database run independently (their own migration lock, their own NOTIFY channel); through
PgBouncer it works when the pooled connections get the search_path another way, and refuses
clearly when they do not."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import REPO, rows, wait_for
from support.own_schema import app_database

import wfctl
from wfctl import schema


def test_the_functions_work_from_any_search_path(cli, empty_dsn, clean_env):
    """`wf.wfctl_submit(...)` from a session whose search_path does not include wf, and its
    trigger wakes wf's workers on their own channel."""
    app_database(empty_dsn)
    assert cli("init", "--schema", "wf", "--dsn", empty_dsn).exit_code == 0
    got: list[str] = []
    with psycopg.connect(empty_dsn, autocommit=True) as listener, psycopg.connect(empty_dsn) as app:
        listener.add_notify_handler(lambda n: got.append(n.channel))
        listener.execute("LISTEN wfctl_new_wf")
        listener.execute("LISTEN wfctl_new")
        # the caller's own temporary workflows table does not stand in for wf.workflows
        app.execute("CREATE TEMP TABLE workflows (id uuid, workflow_type text)")
        wid = app.execute("SELECT wf.wfctl_submit('three', '{\"n\": 1}', p_key => 'k1')").fetchone()[0]
        again = app.execute("SELECT wf.wfctl_submit('three', NULL, p_key => 'k1')").fetchone()[0]
        assert app.execute("SELECT count(*) FROM workflows").fetchone() == (0,)
        app.commit()
        assert again == wid
        wait_for(lambda: listener.execute("SELECT 1") and got, timeout=10, what="a notification")
        listener.execute("SELECT 1")
    assert got == ["wfctl_new_wf"]  # one statement, one notification, not on public's channel
    assert rows(empty_dsn, "SELECT id, input_data FROM wf.workflows") == [(wid, {"n": 1})]
    assert rows(empty_dsn, "SELECT wf.wfctl_channel()") == [("wfctl_new_wf",)]


def test_public_stays_the_default(conn):
    """Without a schema nothing moves: public's channel is wfctl_new, as before version 3."""
    assert conn.execute("SELECT wfctl_channel()").fetchone() == ("wfctl_new",)
    config = conn.execute(
        "SELECT proconfig FROM pg_proc WHERE proname = 'wfctl_submit'"
        " AND pronamespace = 'public'::regnamespace"
    ).fetchone()
    assert config == (["search_path=public, pg_temp"],)
    assert schema.lock_key(None) == schema.lock_key("public") == "wfctl.schema"


def test_every_function_is_pinned_to_its_schema(cli, empty_dsn, clean_env):
    """A function that resolved names through the caller's search_path could be handed another
    role's table of the same name; CREATE OR REPLACE in a later migration drops the pin. (The
    one-line SQL functions stay inlinable, which a pin would prevent: they name no table.)"""
    assert cli("init", "--schema", "wf", "--dsn", empty_dsn).exit_code == 0
    unpinned = rows(
        empty_dsn,
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace = 'wf'::regnamespace AND p.proname LIKE 'wfctl%%'"
        " AND (p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'sql') OR p.prosecdef)"
        " AND NOT coalesce('search_path=wf, pg_temp' = ANY (p.proconfig), false)"
        " ORDER BY 1",
    )
    assert unpinned == []


def test_db_url_gives_a_dsn_that_finds_the_schema(cli, empty_dsn, clean_env):
    assert cli("init", "--schema", "wf", "--dsn", empty_dsn).exit_code == 0
    url = cli("db", "url")
    assert url.exit_code == 0 and url.stderr == "", url.output
    dsn = url.stdout.strip()
    assert "search_path=wf" in dsn
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_schema(), count(*) FROM workflows").fetchone() == ("wf", 0)
    # the library takes it as it is
    wid = wfctl.submit(dsn, "three", {"n": 2})
    assert rows(empty_dsn, "SELECT id FROM wf.workflows") == [(wid,)]


def test_a_long_schema_name_gets_a_channel_that_fits(cli, empty_dsn, clean_env):
    name = "s" * 63
    assert cli("init", "--schema", name, "--dsn", empty_dsn).exit_code == 0
    channel = rows(empty_dsn, f"SELECT {name}.wfctl_channel()")[0][0]
    assert channel == ("wfctl_new_" + name)[:63]
    assert cli("submit", "three", "{}").exit_code == 0  # the trigger's pg_notify takes it


@pytest.mark.parametrize("name", ["Wf", "wf-x", "1wf", "pg_wf", "s" * 64, "", "w f", "wf;drop"])
def test_a_bad_schema_name_is_one_line(cli, clean_env, name):
    result = cli("init", "--schema", name, "--dsn", "host=/nonexistent dbname=x")
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("wfctl: error: --schema ")
        and "is not a schema name" in lines[0]
    )
    assert not (clean_env / "wfctl.toml").exists()


def test_a_bad_schema_in_the_config_is_one_line(cli, clean_env):
    (clean_env / "wfctl.toml").write_text('[database]\ndsn = "host=/nonexistent"\nschema = "Has Caps"\n')
    result = cli("list")
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"wfctl: error: {clean_env / 'wfctl.toml'}: [database] schema 'Has Caps' is not a schema name wfctl"
        " accepts: use lower-case letters, digits and _, starting with a letter or _, at most 63"
        " characters, not starting with pg_\n"
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('schema = "other"\n', "says schema = 'other'"),
        ("", "names no schema (so wfctl uses public)"),
    ],
)
def test_init_schema_must_agree_with_the_config(cli, empty_dsn, clean_env, body, says):
    config = clean_env / "wfctl.toml"
    config.write_text(f"[database]\ndsn = {json.dumps(empty_dsn)}\n{body}")
    result = cli("init", "--schema", "wf")
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"wfctl: error: --schema wf, but {config} {says}"
        ' (set schema = "wf" in its [database] table, or leave --schema out)\n'
    )
    assert rows(empty_dsn, "SELECT count(*) FROM pg_namespace WHERE nspname IN ('wf', 'other')") == [(0,)]
    assert rows(empty_dsn, "SELECT to_regclass('public.workflows')") == [(None,)]


def test_the_sql_reference_names_every_object_wfctl_creates(cli, empty_dsn, clean_env):
    """The SQL reference's list of objects against what the migrations really create."""
    readme = (REPO / "docs" / "reference" / "sql.md").read_text()
    start = readme.index("What wfctl creates, all in one schema")
    section = readme[start : readme.index("\n\n", readme.index("\n- ", start))]
    assert cli("init", "--schema", "wf", "--dsn", empty_dsn).exit_code == 0
    created = rows(
        empty_dsn,
        "SELECT relname FROM pg_class WHERE relnamespace = 'wf'::regnamespace"
        " UNION SELECT proname FROM pg_proc WHERE pronamespace = 'wf'::regnamespace"
        " UNION SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        "  WHERE c.relnamespace = 'wf'::regnamespace AND NOT t.tgisinternal",
    )
    assert len(created) >= 20
    assert [name for (name,) in created if f"`{name}" not in section] == []
