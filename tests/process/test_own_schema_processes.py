"""A schema of its own: `wfctl init --schema NAME` and `[database] schema` put every wfctl table,
function and trigger in that schema, in a database that has its own `workers` table; the SQL
functions work whatever the caller's search_path; two schemas in one database run independently
(their own migration lock, their own NOTIFY channel); through PgBouncer it works when the pooled
connections get the search_path another way, and refuses clearly when they do not.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_own_schema.py.
"""

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
from support.own_schema import app_database

from wfctl import schema

APP_WORKERS = "SELECT name, shift FROM public.workers ORDER BY name"


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
