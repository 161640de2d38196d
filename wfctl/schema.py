"""Schema migrations (``sql/migrations/NNNN_name.sql``) and the version check every command runs.

Migrations apply in order inside one transaction holding an advisory lock, so concurrent
``wfctl init`` runs are safe: the first applies, the others wait and then find nothing to do.
They run in the schema the connection's search_path names (``[database] schema``: wfctl's
connections set it; the schema is created first when missing), each schema with its own lock,
so two wfctl schemas in one database are installed independently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psycopg

from wfctl import schema_trust
from wfctl.errors import NotFound, SchemaError
from wfctl.queries import composed, q, sql_root

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_PLAIN_SCHEMA = re.compile(r"[a-z_][a-z0-9_]*")
DEFAULT_SCHEMA = "public"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


@cache
def migrations() -> tuple[Migration, ...]:
    found: list[Migration] = []
    for path in sorted((sql_root() / "migrations").iterdir()):
        match = _FILE.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), path))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def current_version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema version of the database, or None when wfctl was never installed there."""
    row = conn.execute(q("schema.version_table_exists")).fetchone()
    if not row or not row[0]:
        return None
    row = conn.execute(q("schema.current_version")).fetchone()
    return int(row[0]) if row else 0


def current_schema(conn: psycopg.Connection[Any]) -> str | None:
    """The schema wfctl's tables are in: the first of the search_path that exists."""
    who = conn.execute(q("admin.whoami")).fetchone()
    return str(who[2]) if who and who[2] is not None else None


def check(conn: psycopg.Connection[Any]) -> int:
    """Refuse a schema where roles wfctl does not trust may create objects (``trust``), and a
    database whose schema is missing, older or newer than this wfctl's."""
    here = current_schema(conn)
    if here is not None:
        schema_trust.check_use(conn, here)
    version = current_version(conn)
    latest = latest_version()
    if version is None or version == 0:
        raise SchemaError("this database has no wfctl schema", "run `wfctl init` to install it")
    if version < latest:
        raise SchemaError(
            f"the database schema is version {version}, older than this wfctl's {latest}",
            "run `wfctl init` to upgrade it",
        )
    if version > latest:
        raise SchemaError(
            f"the database schema is version {version}, newer than this wfctl understands ({latest})",
            "upgrade wfctl on this machine",
        )
    return version


@dataclass(frozen=True)
class MigrateResult:
    before: int
    after: int
    applied: tuple[Migration, ...]
    schema: str | None = None  # the schema wfctl's tables are in


def search_path_schema(conn: psycopg.Connection[Any]) -> str | None:
    """The schema the connection's search_path names when it is exactly one plain schema name
    (as wfctl sets it for ``[database] schema``); None for anything else, such as PostgreSQL's
    default ``"$user", public``."""
    row = conn.execute(q("admin.search_path")).fetchone()
    value = str(row[0]) if row else ""
    return value if _PLAIN_SCHEMA.fullmatch(value) else None


def lock_key(schema: str | None) -> str:
    """The advisory lock key of ``migrate`` for a schema: the same as before schemas existed for
    the default one, so an older wfctl's `init` and this one's still take turns."""
    if schema is None or schema == DEFAULT_SCHEMA:
        return "wfctl.schema"
    return f"wfctl.schema.{schema}"


def migrate(conn: psycopg.Connection[Any]) -> MigrateResult:
    """Apply every missing migration, under the schema's lock, in one transaction, in the schema
    the search_path names (``search_path_schema``: created when missing), else in the
    connection's current schema."""
    with conn.transaction():
        own = search_path_schema(conn)
        conn.execute(q("schema.lock"), {"key": lock_key(own)})
        if own is not None and not conn.execute(q("schema.schema_exists"), {"schema": own}).fetchone():
            conn.execute(composed("schema.create_schema", schema=own))
        here = own if own is not None else current_schema(conn)
        if here is not None:
            schema_trust.check_install(conn, here)
        conn.execute(q("schema.create_version_table"))
        done = {int(row[0]) for row in conn.execute(q("schema.applied")).fetchall()}
        before = max(done, default=0)
        if before > latest_version():
            raise SchemaError(
                f"the database schema is version {before}, newer than this wfctl understands "
                f"({latest_version()})",
                "upgrade wfctl on this machine",
            )
        applied: list[Migration] = []
        for migration in migrations():
            if migration.version in done:
                continue
            conn.execute(migration.sql().encode())  # several statements: simple query protocol
            # never prepared: run once per migration, it would pass psycopg's threshold (5) on a
            # fresh install and leave a prepared statement on a pooled server connection
            conn.execute(
                q("schema.record"), {"version": migration.version, "name": migration.name}, prepare=False
            )
            applied.append(migration)
        who = conn.execute(q("admin.whoami")).fetchone()
    return MigrateResult(
        before=before, after=latest_version(), applied=tuple(applied), schema=str(who[2]) if who else own
    )


#: The jobs ``wfctl init --grant-JOB ROLE`` gives a role, each a block of sql/queries/grants.sql.
JOBS = ("worker", "submit", "read")


def grant(conn: psycopg.Connection[Any], role: str, job: str) -> None:
    """Give ``role`` what ``job`` needs: ``worker`` (read and write the tables, no DDL, no
    DELETE), ``submit`` (submit, send, read a run's outcome by id: through functions only) or
    ``read`` (the reports: read every table, write none)."""
    if job == "worker":
        block = "grants.grant_worker"
    elif job == "submit":
        block = "grants.grant_submit"
    elif job == "read":
        block = "grants.grant_read"
    else:
        raise ValueError(f"no such job {job!r}")
    if not conn.execute(q("grants.role_exists"), {"role": role}).fetchone():
        raise NotFound(f"no database role {role!r}: create it first (CREATE ROLE {role} LOGIN ...)")
    here = current_schema(conn)
    assert here is not None
    with conn.transaction():
        conn.execute(composed(block, role=role, schema=here))


@dataclass(frozen=True)
class Overview:
    """What ``wfctl db status`` reports about a reachable database."""

    server_version: str
    role: str
    database: str
    schema: str
    schema_version: int | None
    tables: list[dict[str, Any]]  # one per wfctl table: name, columns, indexes, rows, bytes


def overview(conn: psycopg.Connection[Any]) -> Overview:
    """The server, the role and schema we are connected as, and the wfctl tables installed."""
    version = conn.execute(q("admin.server_version")).fetchone()
    who = conn.execute(q("admin.whoami")).fetchone()
    installed = current_version(conn)
    tables: list[dict[str, Any]] = []
    if installed:
        cur = conn.execute(q("admin.schema_overview"))
        names = [c.name for c in cur.description or []]
        tables = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        for table in tables:
            counted = conn.execute(composed("admin.count_rows", table=table["table_name"])).fetchone()
            table["rows"] = counted[0] if counted else None
    return Overview(
        server_version=version[0] if version else "",
        role=who[0] if who else "",
        database=who[1] if who else "",
        schema=who[2] if who else "",
        schema_version=installed,
        tables=tables,
    )
