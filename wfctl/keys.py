"""Which run a command or a call names: its id, or its business key, the idempotency key it was
submitted with (``submit(..., key=...)``, ``wfctl submit --key``).

Exactly one of the two names a run. A key names the one run submitted with it: none is
``NotFound``; two or more (possible only in the partitioned layout, where a trigger rather than
a unique index keeps keys apart: sql/queries/keys.sql) is ``InvalidState`` naming them, and
nothing is done to either.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from wfctl.errors import InvalidInput, InvalidState, NotFound
from wfctl.printable import printable
from wfctl.queries import q
from wfctl.validate import check_text

#: How many of the runs that share a key an error names.
NAMED = 3
#: The characters of a key an error message shows (the rest is elided).
SHOWN = 100


def workflow_uuid(value: UUID | str) -> UUID:
    """A workflow id given as a UUID or its text (InvalidInput when it is not one)."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise InvalidInput(f"{str(value)[:60]!r} is not a workflow id (a UUID)") from None


def shown(key: str) -> str:
    """A key as a message quotes it: control and invisible characters escaped
    (wfctl/printable.py), at most SHOWN characters."""
    if len(key) > SHOWN:
        return f"'{printable(key[:SHOWN])}...' ({len(key)} characters)"
    return f"'{printable(key)}'"


def check_one(
    workflow_id: object, key: str | None, *, id_name: str = "its id", key_name: str = "key="
) -> None:
    """Exactly one of ``workflow_id`` and ``key`` given (InvalidInput otherwise), and a key that
    can be compared with stored text (valid UTF-8, no NUL). ``id_name`` and ``key_name`` are how
    the caller spells the two in the message: ``its ID`` and ``--key`` on the command line."""
    if workflow_id is not None and key is not None:
        raise InvalidInput(f"name the workflow by {id_name} or by {key_name}, not both")
    if workflow_id is None and key is None:
        raise InvalidInput(f"name the workflow by {id_name} or by {key_name}")
    check_text(key, "the idempotency key")


def run_id(conn: psycopg.Connection[Any], workflow_id: UUID | None, key: str | None) -> UUID:
    """``workflow_id`` itself, or the id of the run submitted with idempotency key ``key`` (one
    index lookup: keys.runs). NotFound when no run has the key; InvalidState naming the runs
    when several share it (the partitioned layout only)."""
    if workflow_id is not None:
        return workflow_id
    assert key is not None, "check_one lets exactly one through"
    found: list[UUID] = [r[0] for r in conn.execute(q("keys.runs"), {"key": key, "limit": NAMED + 1})]
    if not found:
        raise NotFound(f"no workflow with idempotency key {shown(key)}")
    if len(found) > 1:
        ids = ", ".join(str(i) for i in found[:NAMED]) + (", ..." if len(found) > NAMED else "")
        raise InvalidState(
            f"idempotency key {shown(key)} names more than one workflow ({ids}, newest first): "
            "name one by its id"
        )
    return found[0]
