"""A schema wfctl works in must not let other roles run code as the roles that use it: `init`
refuses a schema another role owns, one where other roles may CREATE, and one holding wfctl's
tables (or any function or operator) another role owns; every other command refuses a schema
where roles it does not trust may CREATE; `db status` says who owns the schema and who may
create in it. The attacks are real: a trigger on a table `init` writes to, and an operator
`=(varchar, varchar)` that fits `status = 'pending'` better than the catalog's, each trying to
make their owner a superuser."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from roles import Roles
from support.trusted_schema import run

import wfctl

#: A trigger function its owner hopes a superuser fires: it makes the owner a superuser.
ESCALATE = """
CREATE FUNCTION {schema}.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', {owner});
    RETURN NEW;
EXCEPTION WHEN insufficient_privilege THEN
    RETURN NEW;
END $$
"""


@pytest.fixture
def roles(empty_dsn: str) -> Iterator[Roles]:
    made = Roles(empty_dsn)
    try:
        yield made
    finally:
        made.drop_all()


def trap_table(dsn: str, schema: str, owner: str) -> None:
    """As ``owner``: a wfctl_schema_migrations in ``schema`` whose insert trigger makes ``owner``
    a superuser when a superuser inserts."""
    run(
        dsn,
        sql.SQL(ESCALATE).format(schema=sql.Identifier(schema), owner=sql.Literal(owner)),
        sql.SQL(
            "CREATE TABLE {}.wfctl_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        ).format(sql.Identifier(schema)),
        sql.SQL(
            "CREATE TRIGGER trap BEFORE INSERT ON {}.wfctl_schema_migrations "
            "FOR EACH ROW EXECUTE FUNCTION {}.escalate()"
        ).format(sql.Identifier(schema), sql.Identifier(schema)),
        role=owner,
    )


def refused(result, *words: str) -> None:
    assert result.exit_code == 3, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def has_table(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def test_init_refuses_a_schema_another_role_owns(cli, empty_dsn, roles):
    mallory = roles.create("mallory")
    run(empty_dsn, sql.SQL("CREATE SCHEMA mal AUTHORIZATION {}").format(sql.Identifier(mallory)))
    trap_table(empty_dsn, "mal", mallory)

    result = cli("init", "--schema", "mal", "--dsn", empty_dsn)

    refused(result, "refusing to install wfctl in schema mal", f"owned by {mallory}")
    assert not roles.is_superuser(mallory)
    assert not has_table(empty_dsn, "mal.workflows")


def test_init_refuses_wfctl_tables_another_role_owns(cli, empty_dsn, roles):
    """A schema the superuser owns, where mallory could create once: her table stays hers."""
    mallory = roles.create("mallory")
    grant = sql.SQL("GRANT CREATE, USAGE ON SCHEMA wf TO {}").format(sql.Identifier(mallory))
    run(empty_dsn, "CREATE SCHEMA wf", grant)
    trap_table(empty_dsn, "wf", mallory)
    run(empty_dsn, sql.SQL("REVOKE CREATE ON SCHEMA wf FROM {}").format(sql.Identifier(mallory)))

    result = cli("init", "--schema", "wf", "--dsn", empty_dsn)

    refused(result, "the table wf.wfctl_schema_migrations is owned by " + mallory)
    assert not roles.is_superuser(mallory)
    assert not has_table(empty_dsn, "wf.workflows")


@pytest.mark.parametrize("grantee", ["PUBLIC", "mallory"])
def test_init_refuses_a_schema_others_may_create_in(cli, empty_dsn, roles, grantee):
    mallory = roles.create("mallory")
    who = sql.SQL("PUBLIC") if grantee == "PUBLIC" else sql.Identifier(mallory)
    run(empty_dsn, sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(who))

    result = cli("init", "--dsn", empty_dsn)

    named = "every role (PUBLIC)" if grantee == "PUBLIC" else f"role {mallory}"
    refused(result, "refusing to install wfctl in schema public", f"{named} may CREATE in schema public")
    assert "REVOKE CREATE ON SCHEMA public FROM" in result.stderr
    assert not has_table(empty_dsn, "public.workflows")


def test_the_trust_check_is_not_fooled_by_operators_in_the_schema(dsn, installed_roles):
    """The check reads the catalog with the catalog alone on its search_path: an operator made
    for its own comparisons (name = name, name ~~ text) does not run."""
    mallory = installed_roles.create("mallory")
    run(
        dsn,
        "GRANT CREATE ON SCHEMA public TO PUBLIC",
        "CREATE TABLE public.captured (who text)",
        "GRANT INSERT ON public.captured TO PUBLIC",
    )
    run(
        dsn,
        """CREATE FUNCTION public.hostile_name_eq(a name, b name) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.captured VALUES (current_user); RETURN false; END $$""",
        "CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.hostile_name_eq)",
        "CREATE OPERATOR public.~~ (LEFTARG = name, RIGHTARG = name, FUNCTION = public.hostile_name_eq)",
        role=mallory,
    )
    from wfctl import schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(wfctl.ConfigError, match=r"every role \(PUBLIC\) may CREATE"):
            schema.check(conn)
        assert conn.execute("SELECT who FROM public.captured").fetchall() == []
        # and the session's search_path is as it was
        assert conn.execute("SHOW search_path").fetchone() == ('"$user", public',)
