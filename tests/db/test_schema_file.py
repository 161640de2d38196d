"""sql/schema.sql and sql/schema-partitioned.sql say what the migrations create: each is
compared with what wfctl.schemadump prints from a freshly migrated database (tables, columns,
constraints, indexes, triggers and every function as pg_get_functiondef() prints it)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from helpers import HERE

from wfctl import schemadump

SQL = HERE.parent / "sql"


def differences(path: Path, expected: str, command: str, limit: int = 60) -> str:
    """Why ``path`` is not ``expected``, as a unified diff, and how to regenerate it; "" when
    it is."""
    found = path.read_text(encoding="utf-8") if path.exists() else ""
    if found == expected:
        return ""
    diff = list(
        difflib.unified_diff(
            found.splitlines(), expected.splitlines(), f"{path.name} (in the tree)", "migrated", lineterm=""
        )
    )
    shown = "\n".join(diff[:limit]) + (f"\n... {len(diff) - limit} more lines" if len(diff) > limit else "")
    return (
        f"{path.name} is not what the migrations create; regenerate it from the top of the checkout"
        f" (SERVER_DSN: a server where you may create a database):\n    {command}\n{shown}"
    )


@pytest.mark.parametrize(
    ("name", "partitioned", "command"),
    [
        ("schema.sql", False, schemadump.REGENERATE),
        ("schema-partitioned.sql", True, schemadump.REGENERATE_PARTITIONED),
    ],
)
def test_the_schema_file_is_what_the_migrations_create(pg_server, name, partitioned, command) -> None:
    with schemadump.fresh_database(pg_server.admin_dsn, partitioned=partitioned) as conn:
        printed = schemadump.dump(conn)
    assert "NOT APPLIED BY ANYTHING" in printed and "CREATE OR REPLACE FUNCTION public.wfctl_now()" in printed
    problem = differences(SQL / name, printed, command)
    assert problem == "", problem


def test_a_stale_schema_file_fails_with_a_diff_and_the_command_that_regenerates_it(tmp_path) -> None:
    stale = tmp_path / "schema.sql"
    stale.write_text("CREATE TABLE workflows (\n    id uuid NOT NULL\n);\n")
    problem = differences(stale, "CREATE TABLE workflows (\n    id uuid NOT NULL,\n    x int\n);\n", "REGEN")
    assert problem.splitlines()[:2] == [
        "schema.sql is not what the migrations create; regenerate it from the top of the checkout"
        " (SERVER_DSN: a server where you may create a database):",
        "    REGEN",
    ]
    assert "-    id uuid NOT NULL" in problem and "+    x int" in problem


def test_the_dump_command_says_how_to_use_it() -> None:
    assert schemadump.main([]) == 2
    assert schemadump.main(["host=/nonexistent port=1 dbname=x connect_timeout=1"]) == 1
