"""Whom wfctl's schema makes us trust, and refusing a schema that would make us trust others.

Whoever owns a schema, or may CREATE in it, can run code as the roles that use it: a trigger
on a table that ``init`` writes to, or an operator that fits a query better than the catalog's
(``=(varchar, varchar)`` for ``status = 'pending'``: PostgreSQL picks the exact match, wherever
it is in the search_path). So ``init`` installs only in a schema owned by the role running it
(or by a superuser), where no other role may CREATE and no other role owns wfctl's tables, a
function or an operator; every other command refuses a schema where a role other than its
owner, the role that installed wfctl and a superuser may CREATE, or owns a function or an
operator (one made while it could still create there). The queries themselves run with the
catalog alone on the search_path (``schema_trust.catalog_only``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from wfctl.errors import ConfigError
from wfctl.queries import q

_REVOKE_HINT = "revoke it, e.g. REVOKE CREATE ON SCHEMA {schema} FROM {who}, then run the command again"


@dataclass(frozen=True)
class SchemaTrust:
    """A schema's owner and who may create objects in it, as ``wfctl db status`` reports them."""

    schema: str
    owner: str
    owner_stands_for: str  # pg_database_owner: the database's owner; else the owner itself
    owner_trusted: bool  # the role running wfctl, or a superuser
    installer: str | None  # the owner of wfctl_schema_migrations (None: wfctl not installed)
    installer_trusted: bool
    creators: tuple[str, ...]  # roles besides the owner that may CREATE in it (PUBLIC: all)
    untrusted_to_install: tuple[str, ...]
    untrusted_to_use: tuple[str, ...]
    me: str

    def describe_owner(self) -> str:
        if self.owner_stands_for != self.owner:
            return f"{self.owner} (the database's owner, {self.owner_stands_for})"
        return self.owner


@contextmanager
def _catalog_only(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Inside: the search_path is the catalog alone; after: as it was (a rolled-back savepoint,
    or transaction, that wrote nothing)."""
    with conn.transaction(force_rollback=True):
        conn.execute(q("schema_trust.catalog_only"))
        yield


def inspect(conn: psycopg.Connection[Any], schema: str) -> SchemaTrust | None:
    """Who owns ``schema`` and who may create in it; None when there is no such schema."""
    with _catalog_only(conn):
        row = conn.execute(q("schema_trust.schema_trust"), {"schema": schema}).fetchone()
    if row is None:
        return None
    return SchemaTrust(
        schema=row[0],
        owner=row[1],
        owner_stands_for=row[2] or row[1],
        owner_trusted=bool(row[3]),
        installer=row[4],
        installer_trusted=bool(row[5]),
        creators=tuple(row[6]),
        untrusted_to_install=tuple(row[7]),
        untrusted_to_use=tuple(row[8]),
        me=row[9],
    )


def _creators_refusal(found: SchemaTrust, untrusted: tuple[str, ...], doing: str) -> ConfigError:
    who = ", ".join("every role (PUBLIC)" if r == "PUBLIC" else f"role {r}" for r in untrusted)
    return ConfigError(
        f"{doing}: {who} may CREATE in schema {found.schema}, and an operator or function made "
        f"there would run as {found.me} in wfctl's queries",
        _REVOKE_HINT.format(schema=found.schema, who=untrusted[0]),
    )


def check_install(conn: psycopg.Connection[Any], schema: str) -> None:
    """Refuse to install in (or upgrade) ``schema`` unless the role running it, or a superuser,
    owns the schema and everything of wfctl's in it, and no other role may create there."""
    found = inspect(conn, schema)
    if found is None:
        return  # created by init: ours
    doing = f"refusing to install wfctl in schema {schema}"
    if not found.owner_trusted:
        raise ConfigError(
            f"{doing}: it is owned by {found.describe_owner()}, not by {found.me} or a superuser, "
            "and its owner could run code as you there",
            "use a schema you own (`wfctl init --schema NAME` creates one), or have its owner run init",
        )
    if found.untrusted_to_install:
        raise _creators_refusal(found, found.untrusted_to_install, doing)
    foreign = _foreign_objects(conn, schema, use=False)
    if foreign:
        raise _objects_refusal(found, foreign, doing, f"{found.me} or a superuser")


def _foreign_objects(conn: psycopg.Connection[Any], schema: str, *, use: bool) -> list[tuple[str, str, str]]:
    with _catalog_only(conn):
        rows = conn.execute(q("schema_trust.foreign_objects"), {"schema": schema, "use": use}).fetchall()
    return [(str(kind), str(name), str(owner)) for kind, name, owner in rows]


def _objects_refusal(
    found: SchemaTrust, foreign: list[tuple[str, str, str]], doing: str, trusted: str
) -> ConfigError:
    kind, name, owner = foreign[0]
    more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
    return ConfigError(
        f"{doing}: the {kind} {name} is owned by {owner}, not by {trusted}{more}, "
        "and wfctl's queries would run it or write beside it",
        "drop it or change its owner if it is yours, or install in a schema of its own (--schema NAME)",
    )


def check_use(conn: psycopg.Connection[Any], schema: str) -> None:
    """Refuse to work in ``schema`` when a role other than its owner, the role that installed
    wfctl there, the role running this and a superuser may create objects in it."""
    found = inspect(conn, schema)
    if found is None:
        return
    doing = f"refusing to use schema {schema}"
    if found.untrusted_to_use:
        raise _creators_refusal(found, found.untrusted_to_use, doing)
    foreign = _foreign_objects(conn, schema, use=True)
    if foreign:
        raise _objects_refusal(
            found, foreign, doing, f"{found.me}, the schema's owner, wfctl's installer or a superuser"
        )
