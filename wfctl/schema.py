"""Schema migrations (``sql/migrations/NNNN_name.sql``), contracts (``sql/contracts/``) and the
version check every command runs.

Releases overlap during an upgrade (docs/guides/upgrade.md). Migrations only add, so a release
runs on any schema from its own version (``latest_version``) up; what a release no longer needs
is removed by a contract, which ``wfctl init`` applies once no live worker of an older release
remains. A contract NNNN removes what releases built for a schema before NNNN needed; it is
recorded in ``wfctl_schema_migrations`` with its number negated, and the highest one applied is
the database's floor: a release older than the floor is refused with a message that says so.

A new install runs in one transaction, its contracts applied at once; in an upgrade, each
migration and each contract runs in a transaction of its own. Each takes an advisory lock, so
concurrent ``wfctl init`` runs are safe: the first applies, the others wait and then find nothing
to do. A statement that waits for a table lock holds back every statement queued behind it (the
workers' claims among them), so each waits at most ``LOCK_TIMEOUT`` and the transaction is
retried after a pause. They run in the schema the connection's search_path names (``[database]
schema``: wfctl's connections set it; the schema is created first when missing), each schema
with its own lock, so two wfctl schemas in one database are installed independently.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from wfctl import __version__, schema_trust
from wfctl.errors import InvalidState, NotFound, SchemaError
from wfctl.queries import composed, q, sql_root

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_PLAIN_SCHEMA = re.compile(r"[a-z_][a-z0-9_]*")
DEFAULT_SCHEMA = "public"

#: The first schema version whose release runs on newer schemas: migrations after it only add
#: (tests/unit/test_migration_rules.py holds them to it).
OVERLAP_FROM = 30

#: How long one statement of a migration or a contract waits for a lock before its transaction
#: is rolled back and retried (the longest it can hold a worker's claim back), how many times,
#: and the pause before the n-th retry (n times this, at most LOCK_PAUSE_MAX).
LOCK_TIMEOUT = "500ms"
LOCK_TRIES = 40
LOCK_PAUSE = 0.1
LOCK_PAUSE_MAX = 2.0


@dataclass(frozen=True)
class Migration:
    """A migration (``sql/migrations/``) or a contract (``sql/contracts/``)."""

    version: int
    name: str
    path: Path

    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def _numbered(folder: str) -> list[Migration]:
    found: list[Migration] = []
    root = sql_root() / folder
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        match = _FILE.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), path))
    return found


@cache
def migrations() -> tuple[Migration, ...]:
    found = _numbered("migrations")
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return tuple(found)


@cache
def contracts() -> tuple[Migration, ...]:
    """The contracts, in order: each numbered after the first schema that no longer needs what
    it removes (a migration of that number exists), numbers rising."""
    found = _numbered("contracts")
    versions = [c.version for c in found]
    if versions != sorted(set(versions)) or any(v <= OVERLAP_FROM or v > latest_version() for v in versions):
        raise RuntimeError(
            f"contracts must be numbered once each, above {OVERLAP_FROM} and at most the latest "
            f"migration ({latest_version()}), found {versions}"
        )
    return tuple(found)


def latest_version() -> int:
    """The schema version this release is built for: the number of its latest migration."""
    return migrations()[-1].version


def current_version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema version of the database, or None when wfctl was never installed there."""
    row = conn.execute(q("schema.version_table_exists")).fetchone()
    if not row or not row[0]:
        return None
    row = conn.execute(q("schema.current_version")).fetchone()
    return int(row[0]) if row else 0


def floor(conn: psycopg.Connection[Any]) -> int:
    """The oldest release schema the database still runs: the highest contract applied (0:
    none)."""
    row = conn.execute(q("schema.floor")).fetchone()
    return int(row[0]) if row else 0


def current_schema(conn: psycopg.Connection[Any]) -> str | None:
    """The schema wfctl's tables are in: the first of the search_path that exists."""
    who = conn.execute(q("admin.whoami")).fetchone()
    return str(who[2]) if who and who[2] is not None else None


def _refuse_if_passed(conn: psycopg.Connection[Any], version: int) -> None:
    """Refuse a newer schema (``version``) whose contracts removed what this release needs."""
    lowest = floor(conn)
    if lowest > latest_version():
        raise SchemaError(
            f"this wfctl {__version__} (schema {latest_version()}) is too old for the database: its "
            f"schema (version {version}) no longer keeps what releases before schema {lowest} need",
            f"upgrade wfctl on this machine to a release built for schema {lowest} or later",
        )


def waiting_contracts(version: int, lowest: int) -> list[Migration]:
    """The contracts a schema of ``version`` whose floor is ``lowest`` has not applied yet."""
    return [c for c in contracts() if lowest < c.version <= version]


def check(conn: psycopg.Connection[Any]) -> int:
    """Refuse a schema where roles wfctl does not trust may create objects (``trust``), a
    database without the schema, one older than this release, and one whose contracts removed
    what this release needs. A newer schema that still keeps it is accepted."""
    here = current_schema(conn)
    if here is not None:
        schema_trust.check_use(conn, here)
    version = current_version(conn)
    latest = latest_version()
    if version is None or version == 0:
        raise SchemaError("this database has no wfctl schema", "run `wfctl init` to install it")
    if version < latest:
        raise SchemaError(
            f"the database schema is version {version}, older than this wfctl's {latest} "
            f"(wfctl {__version__})",
            "run `wfctl init` with this release to upgrade it; the workers of the release before "
            "keep running",
        )
    if version > latest:
        _refuse_if_passed(conn, version)
    return version


@dataclass(frozen=True)
class MigrateResult:
    before: int
    after: int
    applied: tuple[Migration, ...]
    schema: str | None = None  # the schema wfctl's tables are in
    lock_retries: int = 0  # transactions rolled back because a lock was not had in LOCK_TIMEOUT


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


@dataclass
class _Locked:
    """Runs one change (a migration, a contract) in a transaction of its own under the schema's
    advisory lock, retried while its statements cannot have their locks within LOCK_TIMEOUT."""

    conn: psycopg.Connection[Any]
    key: str
    sleep: Callable[[float], None] = time.sleep
    retries: int = 0

    def run(self, what: str, change: Callable[[], bool]) -> bool:
        """``change`` (True: it applied, False: nothing left to do) under the lock."""
        for attempt in range(1, LOCK_TRIES + 1):
            try:
                with self.conn.transaction():
                    self.conn.execute(q("schema.lock"), {"key": self.key})  # waits for another init
                    self.conn.execute(q("schema.lock_timeout"), {"timeout": LOCK_TIMEOUT})
                    return change()
            except pg_errors.LockNotAvailable:
                self.retries += 1
                if attempt == LOCK_TRIES:
                    break
                self.sleep(min(LOCK_PAUSE * attempt, LOCK_PAUSE_MAX))
        raise InvalidState(
            f"{what} did not get its locks: {LOCK_TRIES} tries each waited {LOCK_TIMEOUT} and gave up "
            "(a long transaction holds a wfctl table; see pg_stat_activity); what was applied "
            "before it stays",
            "run `wfctl init` again once that transaction has ended",
        )


def _setup(conn: psycopg.Connection[Any], key: str, own: str | None) -> set[int]:
    """Create the schema (when the search_path names a missing one) and the version table, after
    the trust check; the numbers recorded."""
    with conn.transaction():
        conn.execute(q("schema.lock"), {"key": key})
        if own is not None and not conn.execute(q("schema.schema_exists"), {"schema": own}).fetchone():
            conn.execute(composed("schema.create_schema", schema=own))
        here = own if own is not None else current_schema(conn)
        if here is not None:
            schema_trust.check_install(conn, here)
        conn.execute(q("schema.create_version_table"))
        return {int(row[0]) for row in conn.execute(q("schema.applied")).fetchall()}


def migrate(
    conn: psycopg.Connection[Any],
    *,
    target: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> MigrateResult:
    """Apply every missing migration (up to ``target``, the latest by default), each in its own
    transaction under the schema's lock, in the schema the search_path names
    (``search_path_schema``: created when missing), else in the connection's current schema. A
    database newer than this release is left as it is, refused only when its contracts removed
    what this release needs."""
    own = search_path_schema(conn)
    key = lock_key(own)
    done = _setup(conn, key, own)
    before = max((v for v in done if v > 0), default=0)
    latest = latest_version()
    if before > latest:
        _refuse_if_passed(conn, before)
        return MigrateResult(before=before, after=before, applied=(), schema=current_schema(conn))
    locked = _Locked(conn, key, sleep)
    missing = [m for m in migrations() if m.version not in done and (target is None or m.version <= target)]
    applied: list[Migration] = []
    if before == 0 and missing:
        # a new install: no worker runs yet, so all of it in one transaction (a concurrent init
        # finds it done)
        if locked.run("the schema's installation", functools.partial(_install, conn, missing)):
            applied = missing
    else:
        for migration in missing:
            if locked.run(
                f"migration {migration.label}", functools.partial(_apply_migration, conn, migration)
            ):
                applied.append(migration)
    after = current_version(conn) or 0
    return MigrateResult(
        before=before,
        after=after,
        applied=tuple(applied),
        schema=current_schema(conn),
        lock_retries=locked.retries,
    )


def _install(conn: psycopg.Connection[Any], missing: list[Migration]) -> bool:
    """A new install: the migrations, then the contracts they allow (no older release ever ran
    here, so nothing waits for one)."""
    if conn.execute(q("schema.current_version")).fetchone() != (0,):
        return False  # another `wfctl init` installed it while this one waited
    for migration in missing:
        _apply_migration(conn, migration)
    for item in waiting_contracts(missing[-1].version, 0):
        _apply_contract(conn, item, True, [])
    return True


def _apply_migration(conn: psycopg.Connection[Any], migration: Migration) -> bool:
    if conn.execute(q("schema.is_applied"), {"version": migration.version}).fetchone():
        return False  # another `wfctl init` applied it while this one waited
    conn.execute(migration.sql().encode())  # several statements: simple query protocol
    # never prepared: run once per migration, it would pass psycopg's threshold (5) on a fresh
    # install and leave a prepared statement on a pooled server connection
    conn.execute(q("schema.record"), {"version": migration.version, "name": migration.name}, prepare=False)
    return True


@dataclass(frozen=True)
class ContractResult:
    """What ``contract`` did: the contracts applied, the ones left for later (``waiting``: the
    first of them is held back by ``older_workers``, live workers of an older release)."""

    applied: tuple[Migration, ...] = ()
    waiting: tuple[Migration, ...] = ()
    older_workers: tuple[dict[str, Any], ...] = ()
    lock_retries: int = 0


def contract(
    conn: psycopg.Connection[Any], *, force: bool = False, sleep: Callable[[float], None] = time.sleep
) -> ContractResult:
    """Apply the contracts the schema's version allows and its floor has not passed, in order,
    each once no live worker of a release built for an older schema remains (``force``: at
    once, breaking such workers)."""
    pending = waiting_contracts(current_version(conn) or 0, floor(conn))
    locked = _Locked(conn, lock_key(search_path_schema(conn)), sleep)
    applied: list[Migration] = []
    for index, item in enumerate(pending):
        older: list[dict[str, Any]] = []
        if locked.run(f"contract {item.label}", functools.partial(_apply_contract, conn, item, force, older)):
            applied.append(item)
        elif older:
            return ContractResult(tuple(applied), tuple(pending[index:]), tuple(older), locked.retries)
    return ContractResult(tuple(applied), (), (), locked.retries)


def _apply_contract(
    conn: psycopg.Connection[Any], item: Migration, force: bool, older: list[dict[str, Any]]
) -> bool:
    """``item`` applied, unless another init did, or (without ``force``) live workers of an older
    release still need it: then ``older`` holds them."""
    if floor(conn) >= item.version:
        return False  # another `wfctl init` applied it while this one waited
    if not force:
        cur = conn.execute(q("schema.older_live_workers"), {"version": item.version})
        names = [c.name for c in cur.description or []]
        older.extend(dict(zip(names, row, strict=True)) for row in cur.fetchall())
        if older:
            return False
    conn.execute(item.sql().encode())
    conn.execute(q("schema.record_contract"), {"version": item.version, "name": item.name}, prepare=False)
    return True


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
