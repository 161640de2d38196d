"""The wfctl protocol in one readable file: ``sql/schema.sql`` (and the partitioned layout's
``sql/schema-partitioned.sql``), printed from the catalogue of a freshly migrated database.

``python -m wfctl.schemadump SERVER_DSN [--partitioned]`` creates a throwaway database on the
server SERVER_DSN names (its role must be allowed to create databases), applies every migration
there (then converts it to the partitioned layout with ``--partitioned``), prints the schema and
drops the database. tests/db/test_schema_file.py holds the files to what it prints.

Nothing applies these files: the migrations (wfctl/schema.py) install and upgrade a database.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg.rows import dict_row

from wfctl import partitions, schema
from wfctl.queries import composed, q

REGENERATE = "python -m wfctl.schemadump SERVER_DSN > sql/schema.sql"
REGENERATE_PARTITIONED = "python -m wfctl.schemadump SERVER_DSN --partitioned > sql/schema-partitioned.sql"

_HEADER = """\
-- The wfctl schema as the migrations leave it: {layout}, after migration {version:04d}, in
-- the schema public (another schema: its name in place of public).
--
-- NOT APPLIED BY ANYTHING. sql/migrations/NNNN_*.sql install and upgrade a database (`wfctl
-- init`); this file describes the present for a reader. tests/db/test_schema_file.py compares it
-- with a freshly migrated database; after a new migration regenerate it:
--
--     {command}
--
-- Tables in alphabetical order, each with its columns, constraints, indexes and triggers;
-- then the sequences no column owns; then the functions, each as pg_get_functiondef() prints
-- it. Privileges are not shown: `wfctl init --grant-JOB` gives them (sql/queries/grants.sql).
"""

_UNPARTITIONED = """\
--
-- The partitioned layout (`wfctl db partition`, docs/explanation/partitions.md) differs:
-- sql/schema-partitioned.sql. In short: workflows, workflow_steps and workflow_attempts are
-- partitioned by range of the run's created_at (their keys gain it), with one partition per
-- interval and a default partition each (not shown there); workflows_idempotency_key_key gives
-- way to the index workflows_idempotency_idx and the trigger workflows_idempotency; and
-- workflows_finished_brin indexes finished_at. wfctl_settings records the layout.
"""

_PARTITIONED = """\
--
-- The partitions themselves (workflows_pYYYYMMDD, ..., workflows_default, ...) are not shown:
-- they are made as time goes by (wfctl_ensure_partitions) and take their parents' columns,
-- indexes and triggers. The unpartitioned layout: sql/schema.sql.
"""


def dump(conn: psycopg.Connection[Any]) -> str:
    """The schema of ``conn``'s search_path as sql/schema.sql shows it."""
    cur = conn.cursor(row_factory=dict_row)
    version_row = cur.execute(q("schemadump.version")).fetchone()
    version = int(version_row["version"]) if version_row else 0
    tables = cur.execute(q("schemadump.tables")).fetchall()
    partitioned = any(t["partitioned"] for t in tables)
    header = _HEADER.format(
        layout="the partitioned layout" if partitioned else "the unpartitioned layout",
        version=version,
        command=REGENERATE_PARTITIONED if partitioned else REGENERATE,
    )
    parts = [header + (_PARTITIONED if partitioned else _UNPARTITIONED)]
    for table in tables:
        parts.append(_table(cur, table))
    sequences = [row["name"] for row in cur.execute(q("schemadump.sequences")).fetchall()]
    if sequences:
        parts.append(_banner("sequences") + "".join(f"CREATE SEQUENCE {name};\n" for name in sequences))
    for function in cur.execute(q("schemadump.functions")).fetchall():
        parts.append(_banner(f"function {function['name']}") + function["definition"].rstrip() + ";\n")
    return "\n".join(parts)


def _banner(title: str) -> str:
    return f"-- {title} " + "-" * max(3, 95 - len(title)) + "\n\n"


def _table(cur: psycopg.Cursor[dict[str, Any]], table: dict[str, Any]) -> str:
    columns = cur.execute(q("schemadump.columns"), {"table": table["oid"]}).fetchall()
    width = max(len(c["name"]) for c in columns)
    lines = [_column(c, width) for c in columns]
    for constraint in cur.execute(q("schemadump.constraints"), {"table": table["oid"]}).fetchall():
        lines.append(f"CONSTRAINT {constraint['name']} {constraint['definition']}")
    text = f"CREATE TABLE {table['name']} (\n" + ",\n".join(f"    {line}" for line in lines) + "\n)"
    if table["partition_key"]:
        text += f" PARTITION BY {table['partition_key']}"
    if table["options"]:
        text += f" WITH ({', '.join(table['options'])})"
    text += ";\n"
    for block in ("schemadump.indexes", "schemadump.triggers"):
        rows = cur.execute(q(block), {"table": table["oid"]}).fetchall()
        text += "".join(f"{row['definition']};\n" for row in rows)
    return _banner(f"table {table['name']}") + text


def _column(column: dict[str, Any], width: int) -> str:
    line = f"{column['name'].ljust(width)}  {column['type']}"
    if column["identity"]:
        line += " GENERATED " + ("ALWAYS" if column["identity"] == "a" else "BY DEFAULT") + " AS IDENTITY"
    if column["not_null"]:
        line += " NOT NULL"
    if column["default_value"] is not None:
        line += f" DEFAULT {column['default_value']}"
    return line


@contextmanager
def fresh_database(server_dsn: str, *, partitioned: bool = False) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a throwaway database on ``server_dsn``'s server with every migration
    applied in the schema public (converted to the partitioned layout with ``partitioned``);
    dropped afterwards."""
    name = f"wfctl_schemadump_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(composed("admin.create_database", name=name))
    try:
        params = conninfo.conninfo_to_dict(server_dsn)
        params["dbname"] = name
        with psycopg.connect(conninfo.make_conninfo("", **params), autocommit=True) as conn:
            schema.migrate(conn)
            if partitioned:
                partitions.convert(conn, 1)
            yield conn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(composed("admin.drop_database", name=name))


def main(argv: Sequence[str]) -> int:
    args = [a for a in argv if a != "--partitioned"]
    if len(args) != 1 or args[0].startswith("-"):
        print(f"usage: {REGENERATE}  (or {REGENERATE_PARTITIONED})", file=sys.stderr)
        return 2
    try:
        with fresh_database(args[0], partitioned="--partitioned" in argv) as conn:
            text = dump(conn)
    except psycopg.Error as exc:
        print(f"wfctl.schemadump: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
