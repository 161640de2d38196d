"""Database roles for tests that need more than the superuser (importable as ``roles``). Roles are
the cluster's, not one database's, and xdist workers share the server: every name is new, and
``Roles.drop_all`` drops what the test's roles own in its database, then the roles."""

from __future__ import annotations

import uuid

import psycopg
from helpers import with_db
from psycopg import conninfo, sql


class Roles:
    """Roles made for one test in the database of ``dsn`` (a superuser's DSN)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.names: list[str] = []

    def create(self, prefix: str, options: str = "LOGIN NOSUPERUSER") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} " + options).format(sql.Identifier(name)))  # type: ignore[arg-type]
        self.names.append(name)
        return name

    def dsn_of(self, role: str) -> str:
        """The test database's DSN, connecting as ``role``."""
        return with_db(self.dsn, str(conninfo.conninfo_to_dict(self.dsn)["dbname"]), user=role)

    def is_superuser(self, role: str) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        assert row is not None
        return bool(row[0])

    def drop_all(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in reversed(self.names):
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
