"""A schema of its own: `wfctl init --schema NAME` and `[database] schema`
put every wfctl table, function and trigger in that schema, in a database that has its own
`workers` table; the SQL functions work whatever the caller's search_path; two schemas in one
database run independently (their own migration lock, their own NOTIFY channel); through
PgBouncer it works when the pooled connections get the search_path another way, and refuses
clearly when they do not."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import servers
from helpers import isolated_env, rows, wait_for, wfctl_command

import wfctl
from wfctl import schema

APP_WORKERS = "SELECT name, shift FROM public.workers ORDER BY name"


def app_database(dsn: str) -> None:
    """An application's own tables in public, one of them called workers (other columns)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE workers (name text PRIMARY KEY, shift text NOT NULL)")
        conn.execute("INSERT INTO workers VALUES ('ada', 'early'), ('bob', 'late')")


def worker_env(config: Path, tmp_path: Path) -> dict[str, str]:
    return isolated_env(WFCTL_CONFIG=str(config), WFCTL_TEST_LOG=str(tmp_path / "effects.log"))


def burst(config: Path, tmp_path: Path, *extra: str) -> str:
    result = wfctl_command(
        "worker", "--app", "testflows", "--burst", "--poll", "100ms", "--heartbeat", "200ms",
        "--log-format", "plain", *extra, env=worker_env(config, tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_works_in_a_schema_of_its_own(cli, empty_dsn, clean_env, tmp_path):
    app_database(empty_dsn)
    before = rows(empty_dsn, APP_WORKERS)

    init = cli("init", "--schema", "wf", "--dsn", empty_dsn)
    assert init.exit_code == 0, init.output
    config = clean_env / "wfctl.toml"
    assert 'schema = "wf"' in config.read_text()
    assert f"wrote {config} (database: " in init.stderr and ", schema: wf)" in init.stderr
    assert ", schema wf (applied 0001_initial" in init.stderr, init.stderr

    wid = cli("submit", "three", "{}").stdout.strip()
    failing = cli("submit", "flaky", '{"fail_times": 9}', "--max-retries", "0").stdout.strip()
    log = burst(config, tmp_path)
    assert "completed" in log, log
    listed = {w["id"]: w["status"] for w in json.loads(cli("list", "--json").stdout)}
    assert listed == {wid: "completed", failing: "failed"}
    stats = json.loads(cli("stats", "--json").stdout)
    assert sorted(r["workflow_type"] for r in stats["success_rate"]) == ["flaky", "three"]
    assert len(json.loads(cli("workers", "--json").stdout)) == 1
    assert cli("recover", "--stale", "1s").exit_code == 0
    retried = cli("retry", failing)
    assert retried.exit_code == 0, retried.output
    assert cli("cancel", failing).exit_code == 0
    assert cli("show", wid, "--json").exit_code == 0
    assert "wfctl_workflows" in cli("metrics").stdout

    dry = cli("prune", "--older-than", "1ms", "--dry-run", "--json")
    assert json.loads(dry.stdout) == {"dry_run": True, "workflows": 2, "steps": 5, "workers": 1}
    pruned = cli("prune", "--older-than", "1ms")
    assert pruned.stdout == "removed 2 workflow(s) and 5 step(s), and 1 old worker row(s)\n", pruned.output

    status = json.loads(cli("db", "status", "--json").stdout)
    assert (status["schema"], status["wfctl_schema"]) == ("wf", "wf")
    assert status["schema_version"] == schema.latest_version()
    assert {t["table_name"] for t in status["tables"]} >= {
        "workflows", "workflow_steps", "workers", "wfctl_schema_migrations"
    }  # fmt: skip
    assert next(t for t in status["tables"] if t["table_name"] == "workers")["rows"] == 0  # wf's, pruned

    # the application's workers table is untouched, and public holds nothing of wfctl's
    assert rows(empty_dsn, APP_WORKERS) == before
    assert rows(
        empty_dsn,
        "SELECT to_regclass('public.workflows'), to_regclass('public.wfctl_schema_migrations'),"
        " to_regprocedure('public.wfctl_submit(text, jsonb, text, interval, integer, integer)')",
    ) == [(None, None, None)]
    assert rows(empty_dsn, "SELECT count(*) FROM wf.workflow_steps") == [(0,)]


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


def test_two_schemas_in_one_database_run_independently(cli, run_wfctl, empty_dsn, clean_env, tmp_path):
    configs = {name: tmp_path / f"{name}.toml" for name in ("a", "b")}
    assert cli("init", "--schema", "a", "--dsn", empty_dsn, "--config", str(configs["a"])).exit_code == 0
    # b installs while a's migration lock is held: each schema has its own
    with psycopg.connect(empty_dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [schema.lock_key("a")])
        b = run_wfctl("init", "--schema", "b", "--dsn", empty_dsn, "--config", str(configs["b"]), timeout=30)
        assert b.exit_code == 0, b.output

    got: list[str] = []
    with psycopg.connect(empty_dsn, autocommit=True) as listener:
        listener.add_notify_handler(lambda n: got.append(n.channel))
        listener.execute("LISTEN wfctl_new_b")
        in_a = cli("submit", "three", "{}", "--config", str(configs["a"])).stdout.strip()
        in_b = cli("submit", "three", "{}", "--config", str(configs["b"])).stdout.strip()
        wait_for(lambda: listener.execute("SELECT 1") and got, timeout=10, what="b's notification")
        listener.execute("SELECT 1")
    assert got == ["wfctl_new_b"]  # a's submit did not wake b's workers

    burst(configs["b"], tmp_path)
    status = {
        name: {w["id"]: w["status"] for w in json.loads(cli("list", "--json", "--config", str(path)).stdout)}
        for name, path in configs.items()
    }
    assert status == {"a": {in_a: "pending"}, "b": {in_b: "completed"}}
    burst(configs["a"], tmp_path)
    assert rows(empty_dsn, "SELECT status FROM a.workflows UNION ALL SELECT status FROM b.workflows") == [
        ("completed",),
        ("completed",),
    ]


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


# -- through PgBouncer ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bouncer() -> Iterator[servers.PgBouncer]:
    servers.require_postgres()
    servers.require_pgbouncer()
    base = servers.make_base("wfctl-schema-pgb-")
    with contextlib.ExitStack() as stack:
        stack.callback(servers.remove, base)
        server = stack.enter_context(servers.Postgres.init(base, settings=servers.FAST))
        yield stack.enter_context(servers.PgBouncer(server, pool_size=2))


def pgbouncer_admin(bouncer: servers.PgBouncer, command: str) -> None:
    with psycopg.connect(bouncer.dsn("pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor) as c:
        c.execute(command)  # a fixed word from the test (simple query protocol: a ClientCursor)


def test_through_pgbouncer_the_schema_needs_the_role_s_search_path(cli, bouncer, clean_env, tmp_path):
    """PgBouncer 1.18 refuses the startup parameter `options` that carries the search_path: one
    line naming it. Told to ignore it, the pooled connections get the role's search_path: wrong
    (public) is refused before anything is written; ALTER ROLE ... SET search_path = wf works,
    worker and commands included."""
    name = f"wfctl_sch_{uuid.uuid4().hex[:10]}"
    bouncer.server.create_database(name)
    dsn = bouncer.dsn(name)
    direct = bouncer.server.dsn(name)
    config = tmp_path / "wfctl.toml"
    config.write_text(f'[database]\ndsn = {json.dumps(dsn)}\nschema = "wf"\n')

    refused = cli("init", "--config", str(config))
    assert refused.exit_code == 4, refused.output
    assert "unsupported startup parameter: options" in refused.stderr
    assert "a pooler refused the options that set wfctl's schema" in refused.stderr

    ini = bouncer.ini.read_text()
    try:
        bouncer.ini.write_text(ini + "ignore_startup_parameters = extra_float_digits, options\n")
        pgbouncer_admin(bouncer, "RELOAD")
        dropped = cli("init", "--config", str(config))
        assert dropped.exit_code == 3, dropped.output
        assert "its search_path is '\"$user\", public', not the schema 'wf'" in dropped.stderr, dropped.stderr
        assert rows(direct, "SELECT to_regclass('public.workflows'), to_regnamespace('wf')") == [(None, None)]

        with psycopg.connect(direct, autocommit=True) as conn:
            conn.execute(f"ALTER ROLE {servers.SERVER_USER} IN DATABASE {name} SET search_path = wf")
        pgbouncer_admin(bouncer, "RECONNECT")  # server connections made before keep the old path
        init = cli("init", "--config", str(config))
        assert init.exit_code == 0, init.output
        wid = cli("submit", "three", "{}", "--config", str(config)).stdout.strip()
        log = burst(config, tmp_path)
        assert "pooler" in log and "completed" in log, log
        listed = json.loads(cli("list", "--json", "--config", str(config)).stdout)
        assert [(w["id"], w["status"]) for w in listed] == [(wid, "completed")]
        assert rows(direct, "SELECT count(*) FROM wf.workflows") == [(1,)]
    finally:
        bouncer.ini.write_text(ini)
        pgbouncer_admin(bouncer, "RELOAD")


def test_the_sql_reference_names_every_object_wfctl_creates(cli, empty_dsn, clean_env):
    """The SQL reference's list of objects against what the migrations really create."""
    readme = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "sql.md").read_text()
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
