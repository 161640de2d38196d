"""The rules that let two releases run on one schema: from the first release that runs on newer
schemas on, a migration only adds, and only a contract removes."""

from __future__ import annotations

import re

from wfctl import schema

#: Statements that take something away from a release built for an older schema, or change it
#: under its feet: they belong in a contract (sql/contracts/). Dropping a constraint is not among
#: them: it only lets more through (a CHECK widened for a new wait kind is dropped and re-added).
REMOVING = re.compile(
    r"\b(DROP\s+(TABLE|COLUMN|FUNCTION|PROCEDURE|INDEX|TRIGGER|VIEW|TYPE|SEQUENCE)"
    r"|RENAME\b|ALTER\s+COLUMN\s+\w+\s+(SET\s+DATA\s+)?TYPE|SET\s+NOT\s+NULL)",
    re.IGNORECASE,
)


def _code(sql: str) -> str:
    """The statements without their comments."""
    return re.sub(r"--[^\n]*", "", sql)


def test_a_migration_after_the_first_overlapping_release_only_adds():
    offenders = []
    for migration in schema.migrations():
        found = REMOVING.search(_code(migration.sql()))
        if migration.version > schema.OVERLAP_FROM and found:
            offenders.append(f"{migration.label}: {found.group(0)!r}")
    assert offenders == [], "these remove or change what an older release needs: write a contract"


def test_the_rule_catches_a_removal():
    assert REMOVING.search(_code("ALTER TABLE workers DROP COLUMN idle;"))
    assert REMOVING.search(_code("DROP FUNCTION wfctl_send(uuid, text, jsonb, text);"))
    assert REMOVING.search(_code("ALTER TABLE workflows ALTER COLUMN priority TYPE bigint;"))
    assert not REMOVING.search(_code("-- DROP TABLE x\nALTER TABLE workers ADD COLUMN y int;"))


def test_contracts_are_numbered_by_the_schema_that_no_longer_needs_them():
    numbers = [c.version for c in schema.contracts()]
    assert numbers == sorted(set(numbers))
    assert all(schema.OVERLAP_FROM < n <= schema.latest_version() for n in numbers)
