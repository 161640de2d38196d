"""Which run a command or a call names: its id, or its business key, the idempotency key it was
submitted with (``submit(..., key=...)``, ``wfctl submit --key``).

Exactly one of the two names a run. A key names the one run submitted with it: none is
``NotFound``; two or more (possible only in the partitioned layout, where a trigger rather than
a unique index keeps keys apart: sql/queries/keys.sql) is ``InvalidState`` naming them, and
nothing is done to either. ``list`` takes a key prefix instead (``prefix_params``).
"""

from __future__ import annotations

from typing import Any, TypeAlias
from uuid import UUID

import psycopg

from wfctl.errors import InvalidInput, InvalidState, NotFound
from wfctl.printable import printable
from wfctl.queries import q
from wfctl.validate import check_text

#: A workflow id as the library takes one: a ``uuid.UUID`` or its text.
WorkflowId: TypeAlias = UUID | str

#: How many of the runs that share a key an error names.
NAMED = 3
#: The characters of a key an error message shows (the rest is elided).
SHOWN = 100
#: The largest code point: the successor of a prefix drops it from the end.
_LAST = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


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


def given(workflow_id: UUID | str | None, key: str | None, *, key_name: str = "key=") -> UUID | None:
    """The id given (parsed: InvalidInput when it is not a UUID), after checking that exactly
    one of id and key was (``check_one``); None when the run is named by its key."""
    check_one(workflow_id, key, key_name=key_name)
    return None if workflow_id is None else workflow_uuid(workflow_id)


def run_id(conn: psycopg.Connection[Any], workflow_id: UUID | None, key: str | None) -> UUID:
    """``workflow_id`` itself, or the id of the run submitted with idempotency key ``key`` (one
    index lookup: keys.runs). NotFound when no run has the key; InvalidState naming the runs
    when several share it (the partitioned layout only)."""
    if workflow_id is not None:
        return workflow_id
    assert key is not None, "check_one lets exactly one through"
    return only_run(key, [r[0] for r in conn.execute(q("keys.runs"), runs_params(key))])


def runs_params(key: str) -> dict[str, Any]:
    """The parameters of ``keys.runs``, the lookup of the runs with idempotency key ``key``
    (as many as an error names, and one more to tell that there are more)."""
    return {"key": key, "limit": NAMED + 1}


def only_run(key: str, found: list[UUID]) -> UUID:
    """The one run that ``keys.runs`` found (``found``) for ``key``: NotFound when none,
    InvalidState naming them when several share it."""
    if not found:
        raise NotFound(f"no workflow with idempotency key {shown(key)}")
    if len(found) > 1:
        ids = ", ".join(str(i) for i in found[:NAMED]) + (", ..." if len(found) > NAMED else "")
        raise InvalidState(
            f"idempotency key {shown(key)} names more than one workflow ({ids}, newest first): "
            "name one by its id"
        )
    return found[0]


def successor(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point order
    (its last character but U+10FFFF moved up by one, past the surrogates); None when there is
    none (an empty prefix, or one of U+10FFFF only)."""
    kept = prefix.rstrip(chr(_LAST))
    if not kept:
        return None
    point = ord(kept[-1]) + 1
    if point in _SURROGATES:
        point = _SURROGATES.stop
    return kept[:-1] + chr(point)


def prefix_params(conn: psycopg.Connection[Any], prefix: str | None) -> dict[str, Any]:
    """The parameters of a search for the keys that start with ``prefix`` (None: no search), as
    reports.list_workflows takes them: the prefix itself and, where the database orders text by
    code point (keys.code_point_order), the range [prefix, successor), which holds exactly the
    keys that start with it there, so that the key's index serves the search."""
    if prefix is None:
        return prefix_range(None, None)
    check_text(prefix, "the idempotency key prefix")
    return prefix_range(prefix, conn.execute(q("keys.code_point_order")).fetchone())


def prefix_range(prefix: str | None, order: tuple[Any, ...] | None) -> dict[str, Any]:
    """``prefix_params`` of a prefix already checked, and the row ``keys.code_point_order``
    read (None when there is no prefix, and nothing was read)."""
    if prefix is None:
        return {"key_prefix": None, "key_ranged": False, "key_below": None}
    return {"key_prefix": prefix, "key_ranged": bool(order and order[0]), "key_below": successor(prefix)}
