"""A schema wfctl works in must not let other roles run code as the roles that use it: `init` refuses
a schema another role owns, one where other roles may CREATE, and one holding wfctl's tables (or
any function or operator) another role owns; every other command refuses a schema where roles it
does not trust may CREATE; `db status` says who owns the schema and who may create in it. The
attacks are real: a trigger on a table `init` writes to, and an operator `=(varchar, varchar)`
that fits `status = 'pending'` better than the catalog's, each trying to make their owner a
superuser.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_trusted_schema.py.
"""

from __future__ import annotations

import json

import psycopg
from helpers import isolated_env, wfctl_command
from psycopg import sql
from support.trusted_schema import run

import wfctl


def hostile_operator(dsn: str, mallory: str) -> None:
    """What the review did: CREATE on public for every role (PostgreSQL before 15, and clusters
    pg_upgrade'd from one), then mallory's `=(varchar, varchar)`, which `status = 'pending'`
    resolves to: it notes who ran it, and makes mallory a superuser when a superuser runs it."""
    run(
        dsn,
        "GRANT CREATE ON SCHEMA public TO PUBLIC",
        "CREATE TABLE public.captured (who text)",
        "GRANT INSERT ON public.captured TO PUBLIC",
    )
    run(
        dsn,
        sql.SQL(
            """CREATE FUNCTION public.hostile_eq(a varchar, b varchar) RETURNS boolean
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.captured VALUES (current_user);
                BEGIN
                    EXECUTE format('ALTER ROLE %I SUPERUSER', {owner});
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
                RETURN a::text = b::text;
            END $$"""
        ).format(owner=sql.Literal(mallory)),
        "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.hostile_eq)",
        role=mallory,
    )


def test_commands_refuse_a_schema_where_others_may_create(dsn, installed_roles, tmp_path):
    mallory = installed_roles.create("mallory")
    wid = str(wfctl.submit(dsn, "three", {}))
    hostile_operator(dsn, mallory)
    env = isolated_env(WFCTL_DSN=dsn, WFCTL_TEST_LOG=str(tmp_path / "effects.log"))

    for command in (
        ("worker", "--app", "testflows", "--burst", "--poll", "100ms", "--log-format", "plain"),
        ("list",),
        ("stats",),
        ("show", wid),
    ):
        result = wfctl_command(*command, env=env)
        assert result.exit_code == 3, (command, result.output)
        said = "refusing to use schema public: every role (PUBLIC) may CREATE in schema public"
        assert said in result.stderr
        assert "Traceback" not in result.output

    assert not installed_roles.is_superuser(mallory)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT who FROM public.captured").fetchall() == []
        assert conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone() == ("pending",)

    status = wfctl_command("db", "status", "--json", env=env)
    assert status.exit_code == 0, status.output
    found = json.loads(status.stdout)
    assert found["schema_owner"] == "pg_database_owner (the database's owner, postgres)"
    assert found["schema_creators"] == ["PUBLIC"]
    assert found["schema_untrusted_creators"] == ["PUBLIC"]

    # mallory may no longer create, but what she made stays hers
    run(dsn, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    listed = wfctl_command("list", env=env)
    assert listed.exit_code == 3, listed.output
    assert (
        f"refusing to use schema public: the operator public.=(character varying,character varying) "
        f"is owned by {mallory}"
    ) in listed.stderr
    run(dsn, "DROP OPERATOR public.= (varchar, varchar)", "DROP FUNCTION public.hostile_eq(varchar, varchar)")
    assert wfctl_command("list", env=env).exit_code == 0
    assert not installed_roles.is_superuser(mallory)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT who FROM public.captured").fetchall() == []
