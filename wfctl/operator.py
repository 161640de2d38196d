"""The operator API: what ``wfctl show``, ``list``, ``cancel`` and ``retry`` do, for an
application, with the same meaning and the same errors.

Each function takes a DSN or a psycopg connection (as ``wfctl.submit`` does), names a run by its
id or by its business key, the idempotency key it was submitted with (wfctl/keys.py), calls the
engine function the command calls (wfctl/reports.py, wfctl/control.py) and returns typed values.
Errors are the ``wfctl.WfctlError`` subclasses; the CLI turns the same ones into its exit codes.

With a connection, nothing is committed or rolled back that the caller did not ask for: the
reads run in its transaction when one is open; ``cancel`` and ``retry`` run in a savepoint of
the caller's transaction, which the caller commits (on a connection that is not in autocommit
mode and has none open, they open one, as a statement does there, and leave it open, as
``submit`` does); on a connection in autocommit mode, each commits at once.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.pq import TransactionStatus

from wfctl import control, keys, reports, storedjson
from wfctl.client import _connection, database_errors
from wfctl.control import Cancelled, Retried
from wfctl.durations import Duration, duration
from wfctl.errors import InvalidState
from wfctl.operations import WAITS
from wfctl.queries import q
from wfctl.validate import check_text


@dataclass(frozen=True)
class WaitStatus:
    """What a run parked by ``ctx.recv``, ``ctx.wait`` or ``ctx.sleep`` waits for (its status
    stays ``pending`` meanwhile).

    :ivar kind: ``message``, ``children`` or ``sleep``.
    :ivar state: ``waiting`` while it is parked and not due (``wfctl show`` gives its status as
        ``waiting``); ``woken`` once a message came, its last child finished or its time is
        up, until a worker takes it (``pending (woken)``).
    :ivar description: what ``wfctl show`` says it waits for: ``a message on 'approval'``,
        ``2 of 3 child workflows``, ``a sleep``.
    :ivar topic: the topic of a message wait; None for the other kinds.
    :ivar remaining: the children a ``children`` wait still waits for, of ``total``.
    :ivar total: the children of a ``children`` wait.
    :ivar until: when it is woken if no message or child does it first: the end of a sleep,
        the timeout of a message or children wait; None when the wait has no timeout.
    """

    kind: str
    state: str
    description: str
    topic: str | None
    remaining: int | None
    total: int | None
    until: datetime | None


@dataclass(frozen=True)
class RunStatus:
    """One run as ``wfctl.get`` reads it: the row ``wfctl show`` reads, without its steps,
    attempts, children, events and messages.

    :ivar id: the run's id.
    :ivar workflow_type: its type.
    :ivar status: the stored status: ``pending``, ``running``, ``completed``, ``failed`` or
        ``cancelled`` (a parked run is ``pending``, with ``wait`` set).
    :ivar attempt: the attempt it is in, from 1 (``wfctl retry`` sets it back to 1).
    :ivar attempts_allowed: ``max_retries + 1``; None while a run submitted without
        ``max_retries`` has not been claimed (the first claim fills in its type's policy).
    :ivar current_step: the number of the last step checkpointed (0: none yet).
    :ivar wait: what it is parked on; None when it is not parked.
    :ivar deadline_at: its deadline (a ``timeout``); None without one.
    :ivar error_message: the error it failed with, the reason it was cancelled, or the error of
        its last failed attempt while it backs off before the next; None otherwise (``wfctl
        retry`` clears it).
    :ivar output: its output, decoded from JSON: what ``wfctl.result`` returns once it has
        completed; None before.
    :ivar idempotency_key: the key it was submitted with; None without one.
    :ivar created_at: when it was submitted.
    :ivar started_at: when a worker first claimed it; None before.
    :ivar finished_at: when it completed, failed or was cancelled; None before.
    :ivar updated_at: when its row last changed.
    :ivar parent_id: the workflow that started it (``ctx.start_child``); None for a run
        submitted from outside.
    """

    id: UUID
    workflow_type: str
    status: str
    attempt: int
    attempts_allowed: int | None
    current_step: int
    wait: WaitStatus | None
    deadline_at: datetime | None
    error_message: str | None
    output: Any
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    parent_id: UUID | None


@dataclass(frozen=True)
class RunSummary:
    """One run as ``wfctl.list`` lists it: the row ``wfctl list`` reads, lighter than a
    ``RunStatus`` (no output, deadline, parent or attempts allowed: ``wfctl.get`` reads those,
    one run at a time). Its fields mean what ``RunStatus``'s of the same names mean.

    :ivar id: the run's id.
    :ivar workflow_type: its type.
    :ivar status: the stored status (a parked run is ``pending``, with ``wait`` set).
    :ivar attempt: the attempt it is in, from 1.
    :ivar current_step: the number of the last step checkpointed (0: none yet).
    :ivar wait: what it is parked on; None when it is not parked.
    :ivar error_message: the error it failed with, or why it was cancelled; None otherwise.
    :ivar idempotency_key: the key it was submitted with; None without one.
    :ivar created_at: when it was submitted.
    :ivar started_at: when a worker first claimed it; None before.
    :ivar finished_at: when it completed, failed or was cancelled; None before.
    """

    id: UUID
    workflow_type: str
    status: str
    attempt: int
    current_step: int
    wait: WaitStatus | None
    error_message: str | None
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


def _wait(found: Mapping[str, Any] | None) -> WaitStatus | None:
    """A report row's ``waiting_for`` (wfctl/waits.py) as a WaitStatus."""
    if found is None:
        return None
    kind = found["kind"]
    wait = WAITS.get(kind)
    return WaitStatus(
        kind=str(kind),
        state=found["state"],
        description=wait.shown(found) if wait is not None else str(kind),
        topic=found["topic"],
        remaining=found["remaining"],
        total=found["total"],
        until=found["until"],
    )


def _join_callers_transaction(conn: psycopg.Connection[Any]) -> None:
    """On a connection that is not in autocommit mode and has no transaction open, open the
    caller's (psycopg begins one before any statement), so that control's transaction is a
    savepoint of it and commits nothing: the caller commits, as after ``wfctl.submit``."""
    if outside_callers_transaction(conn.autocommit, conn.info.transaction_status):
        conn.execute(q("operator.begin"))


# The pure parts of the calls, apart from their I/O (here, and wfctl.aio's).


def outside_callers_transaction(autocommit: bool, status: TransactionStatus) -> bool:
    """Whether a connection (its ``autocommit`` and ``info.transaction_status``) is to begin
    the caller's transaction (``operator.begin``) before ``cancel`` or ``retry`` runs in a
    savepoint of it: one not in autocommit mode that has none open."""
    return not autocommit and status == TransactionStatus.IDLE


def list_window(type: str | None, since: Duration | None) -> timedelta | None:
    """Check ``list``'s ``type`` (InvalidInput) and return its ``since`` as a timedelta (the
    other filters are ``reports.list_params``'s)."""
    check_text(type, "type")
    return None if since is None else duration(since, "since")


def run_status(row: Mapping[str, Any]) -> RunStatus:
    """The row ``reports.workflow_row`` read (its JSON decoded by ``storedjson.loads``) as a
    RunStatus; InvalidState when its output is a value Python cannot read."""
    output = row["output_data"]
    unreadable = storedjson.reason(output)
    if unreadable is not None:
        raise InvalidState(f"the output of workflow {row['id']} cannot be decoded: {unreadable}")
    max_retries = row["max_retries"]
    return RunStatus(
        id=row["id"],
        workflow_type=row["workflow_type"],
        status=row["status"],
        attempt=row["attempt"],
        attempts_allowed=None if max_retries is None else max_retries + 1,
        current_step=row["current_step"],
        wait=_wait(row["waiting_for"]),
        deadline_at=row["deadline_at"],
        error_message=row["error_message"],
        output=output,
        idempotency_key=row["idempotency_key"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        updated_at=row["updated_at"],
        parent_id=row["parent_id"],
    )


def run_summary(row: Mapping[str, Any]) -> RunSummary:
    """A row of ``reports.list_workflows`` (with ``waiting_for``) as a RunSummary."""
    return RunSummary(
        id=row["id"],
        workflow_type=row["workflow_type"],
        status=row["status"],
        attempt=row["attempt"],
        current_step=row["current_step"],
        wait=_wait(row["waiting_for"]),
        error_message=row["error_message"],
        idempotency_key=row["idempotency_key"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def get(
    target: psycopg.Connection[Any] | str, id: UUID | str | None = None, *, key: str | None = None
) -> RunStatus:
    """The run named by ``id`` or by ``key``, the idempotency key it was submitted with
    (exactly one of the two), as ``wfctl show`` reads it: its row, in one snapshot.

    :param target: a DSN, or a psycopg connection (read in its transaction when one is open).
    :param id: the run's id, a ``uuid.UUID`` or its text.
    :param key: the idempotency key it was submitted with.
    :raises wfctl.NotFound: no run has that id or key.
    :raises wfctl.InvalidState: several runs share the key (only the partitioned layout lets
        that happen; the message names them); or the output is a value Python cannot read
        (stored with plain SQL), as ``wfctl.result`` raises it.
    :raises wfctl.InvalidInput: both ``id`` and ``key``, or neither; an id that is not a UUID.
    """
    given = keys.given(id, key)
    with _connection(target) as conn, database_errors():
        return run_status(reports.workflow_row(conn, given, key, json_loads=storedjson.loads))


def list(
    target: psycopg.Connection[Any] | str,
    *,
    type: str | None = None,
    status: str | None = None,
    since: str | float | timedelta | None = None,
    key: str | None = None,
    limit: int = 100,
) -> builtins.list[RunSummary]:
    """Runs newest first, as ``wfctl list`` lists them, each a ``RunSummary`` (the list reads
    one row per run; ``wfctl.get`` reads one run's whole ``RunStatus``).

    :param target: a DSN, or a psycopg connection (read in its transaction when one is open).
    :param type: only runs of this workflow type.
    :param status: only runs in this status (``pending``, ``running``, ``completed``,
        ``failed``, ``cancelled``; a parked run is ``pending``), or in any of several
        separated by commas (``"failed,cancelled"``).
    :param since: only runs created within this long ago: a duration string (``"24h"``),
        seconds, or a ``timedelta``, above 0.
    :param key: only runs whose idempotency key starts with this prefix, compared character
        for character (``%`` and ``_`` are themselves); ``""`` lists every run that has a key.
    :param limit: at most this many runs, from 1.
    :raises wfctl.InvalidInput: a status that is not one, a ``since`` or ``limit`` out of
        range, a type or key that is not valid text.
    """
    window = list_window(type, since)
    with _connection(target) as conn, database_errors():
        rows = reports.list_workflows(
            conn, status=status, workflow_type=type, since=window, limit=limit, key_prefix=key
        )
    return [run_summary(r) for r in rows]


def cancel(
    target: psycopg.Connection[Any] | str,
    id: UUID | str | None = None,
    *,
    key: str | None = None,
    reason: str | None = None,
) -> Cancelled:
    """Cancel the run named by ``id`` or by ``key`` (exactly one of the two) and its unfinished
    descendants, as ``wfctl cancel`` does: a pending run at once, a running one too, and its
    worker stops it at its next step boundary and commits nothing more for it.

    :param target: a DSN (committed at once), or a psycopg connection (in the caller's
        transaction: see the module's notes above).
    :param id: the run's id, a ``uuid.UUID`` or its text.
    :param key: the idempotency key it was submitted with.
    :param reason: kept as its error message (default ``cancelled by an operator``).
    :return: what was cancelled.
    :raises wfctl.NotFound: no run has that id or key.
    :raises wfctl.InvalidState: the run has finished (completed, failed or cancelled), and
        nothing is done; or several runs share the key (the partitioned layout only).
    :raises wfctl.InvalidInput: both ``id`` and ``key``, or neither; a bad id or reason.
    """
    given = keys.given(id, key)
    check_text(reason, "the reason")
    with _connection(target) as conn, database_errors():
        wid = keys.run_id(conn, given, key)
        _join_callers_transaction(conn)
        return control.cancel(conn, wid, reason)


def retry(
    target: psycopg.Connection[Any] | str,
    id: UUID | str | None = None,
    *,
    key: str | None = None,
    from_step: int | None = None,
) -> Retried:
    """Put the failed or cancelled run named by ``id`` or by ``key`` (exactly one of the two)
    back to pending, as ``wfctl retry`` does: its attempt counter reset, its checkpoints kept,
    and with it the descendants a cancel of it took.

    :param target: a DSN (committed at once), or a psycopg connection (in the caller's
        transaction: see the module's notes above).
    :param id: the run's id, a ``uuid.UUID`` or its text.
    :param key: the idempotency key it was submitted with.
    :param from_step: forget the checkpoints of this step and later (from 1; default: keep
        them all).
    :return: what was done.
    :raises wfctl.NotFound: no run has that id or key.
    :raises wfctl.InvalidState: the run is pending, running or completed, and nothing is done;
        or several runs share the key (the partitioned layout only).
    :raises wfctl.InvalidInput: both ``id`` and ``key``, or neither; a bad id; ``from_step``
        below 1.
    """
    given = keys.given(id, key)
    with _connection(target) as conn, database_errors():
        wid = keys.run_id(conn, given, key)
        _join_callers_transaction(conn)
        return control.retry(conn, wid, from_step)
