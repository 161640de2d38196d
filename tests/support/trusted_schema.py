"""What tests/db/test_trusted_schema.py and tests/process/test_trusted_schema_processes.py share."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from roles import Roles


@pytest.fixture
def installed_roles(dsn: str) -> Iterator[Roles]:
    made = Roles(dsn)
    try:
        yield made
    finally:
        made.drop_all()


def run(dsn: str, *statements: str | sql.Composable, role: str | None = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if role is not None:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]
