"""What tests/db/test_security.py and tests/process/test_security_processes.py share."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

PASSWORD = "Pa55-" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def pw_role(pg_server) -> Iterator[str]:
    """A login role whose TCP connections need PASSWORD."""
    if pg_server.tcp_port is None:
        pytest.skip("the test server does not listen on TCP")
    role = f"wfctl_sec_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(PASSWORD))
        )
    yield role
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def pw_dsn(pg_server, empty_dsn, pw_role) -> str:
    """A TCP DSN with PASSWORD in it, for an empty database that the role owns."""
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(dbname), sql.Identifier(pw_role))
        )
    return pg_server.tcp_dsn(dbname, pw_role, PASSWORD)


def no_password(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, "the password was printed"


def write_config(path: Path, dsn: str, mode: int) -> None:
    path.write_text(f"[database]\ndsn = {json.dumps(dsn)}\n")
    path.chmod(mode)
