"""Coordination from outside a workflow: ``wfctl.send`` a message to one, read what it
published (``wfctl.get_event``), and wait for its result (``wfctl.result``).

Waiting LISTENs on the schema's watch channel (migration 0006) and re-reads when the
workflow's id is announced; without notifications (a connection inside a transaction, or one
through a transaction pooler) it polls, backing off to one read a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg import errors as pg_errors

from wfctl import keys, storedjson
from wfctl.client import _connection
from wfctl.connection import behind_pooler, translate
from wfctl.context import check_label
from wfctl.durations import timeout_seconds
from wfctl.errors import (
    InvalidInput,
    InvalidState,
    NotFound,
    WaitTimeout,
    WorkflowCancelled,
    WorkflowFailed,
)
from wfctl.keys import workflow_uuid
from wfctl.queries import q
from wfctl.validate import check_key, encode_input
from wfctl.words import CANCELLED, COMPLETED, FAILED, FINISHED

T = TypeVar("T")
RECHECK = 5.0  # with notifications, re-read anyway this often (a notification is never relied on alone)
POLL_MAX = 1.0  # without notifications: the longest pause between reads
MAX_MESSAGE_KEY = 200  # characters of a message's idempotency key (workflow_messages' check)


def check_message(topic: object, key: str | None) -> None:
    """A message's topic (1 to 150 characters) and key (None, or 1 to 200 characters)."""
    check_label(topic, "a message topic")
    check_key(key)
    if key is not None and not 1 <= len(key) <= MAX_MESSAGE_KEY:
        raise InvalidInput(f"a message key must have 1 to {MAX_MESSAGE_KEY} characters, not {key[:40]!r}")


@contextmanager
def _errors() -> Iterator[None]:
    """wfctl_send's refusals and database errors as the library's exceptions."""
    try:
        yield
    except pg_errors.NoDataFound as exc:
        raise NotFound(_message(exc)) from exc
    except pg_errors.ObjectNotInPrerequisiteState as exc:
        raise InvalidState(_message(exc)) from exc
    except pg_errors.InvalidParameterValue as exc:
        raise InvalidInput(_message(exc)) from exc
    except pg_errors.ProgramLimitExceeded as exc:  # the run holds as many unread messages as allowed
        raise InvalidState(_message(exc)) from exc
    except psycopg.Error as exc:
        raise translate(exc) from exc


@contextmanager
def _decoding(what: str) -> Iterator[None]:
    """A stored value the connection's JSON decoder cannot read (an integer longer than Python
    reads, nesting deeper: wfctl/storedjson.py) as InvalidState, saying why."""
    try:
        yield
    except storedjson.DECODE_ERRORS as exc:
        raise InvalidState(f"{what} cannot be decoded: {storedjson.describe(exc)}") from None


def _message(exc: psycopg.Error) -> str:
    diag = exc.diag.message_primary
    return diag or str(exc).strip().splitlines()[0]


@dataclass(frozen=True)
class Sent:
    """What ``send_json`` did: the message's id, whether this call stored it (False: its key
    was used before, and ``id`` is the earlier message's), and the run it was sent to."""

    id: int
    created: bool
    workflow_id: UUID


def send(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str | None = None,
    topic: str | None = None,
    payload: Any = None,
    *,
    key: str | None = None,
    to_key: str | None = None,
) -> int:
    """Send ``payload`` (JSON) to the workflow on ``topic``; it gets it from ``ctx.recv(topic)``.
    Returns the message's id. The workflow is named by ``workflow_id`` or by ``to_key``, the
    idempotency key it was submitted with (exactly one of the two). ``key`` is the message's own
    idempotency key: sending again with it returns the first message's id and stores nothing.
    In the connection's transaction when there is one (it is delivered when that commits: an
    outbox). An unknown workflow or ``to_key`` raises ``NotFound``, a finished workflow
    ``InvalidState``, a ``to_key`` that several runs share ``InvalidState`` (the partitioned
    layout only); nothing is stored then."""
    encoded = None if payload is None else encode_input(payload, "message payload")
    return send_json(conn_or_dsn, workflow_id, topic, encoded, key=key, to_key=to_key).id


def send_json(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str | None,
    topic: str | None,
    payload_json: str | None,
    *,
    key: str | None = None,
    to_key: str | None = None,
) -> Sent:
    """``send`` of a payload that is JSON text already checked (``encode_input``, or the CLI's
    ``parse_input``; None: no payload), saying whether a message was stored (and to which
    run): one call of ``wfctl_send_message`` (``wfctl_send``, then whether this transaction
    wrote the message it returned: a concurrent send with the same key may have stored it
    first)."""
    keys.check_one(workflow_id, to_key, key_name="to_key=")
    wid = None if workflow_id is None else workflow_uuid(workflow_id)
    check_message(topic, key)
    with _connection(conn_or_dsn) as conn, _errors():
        target = keys.run_id(conn, wid, to_key)
        params = {"id": target, "topic": topic, "payload": payload_json, "key": key}
        row = conn.execute(q("coordination.send"), params).fetchone()
    assert row is not None
    return Sent(int(row[0]), created=bool(row[1]), workflow_id=target)


def get_event(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str,
    key: str,
    timeout: str | float | timedelta | None = None,
    default: Any = None,
) -> Any:
    """The latest value the workflow published with ``ctx.set_event(key, ...)``. Not set yet:
    wait up to ``timeout`` for it (None: do not wait), then return ``default``; pass
    ``default=...`` (Ellipsis) to raise ``WaitTimeout`` instead. An unknown workflow raises
    ``NotFound``; a finished one that never set it returns ``default`` at once."""
    wid = workflow_uuid(workflow_id)
    check_label(key, "an event key")
    seconds = timeout_seconds(timeout, "timeout") or 0.0

    def read(conn: psycopg.Connection[Any]) -> tuple[bool, Any]:
        with _decoding(f"the value of event {key!r} of workflow {wid}"):
            row = conn.execute(q("coordination.event"), {"id": wid, "key": key}).fetchone()
        if row is None:
            raise NotFound(f"no workflow {wid}")
        status, value, found = row
        if found:
            return True, value
        if status in FINISHED:
            return True, _missing(default, f"workflow {wid} is {status} and never set event {key!r}")
        return False, None

    with _connection(conn_or_dsn) as conn, _errors():
        done, value = _await(conn, wid, seconds, read)
    if done:
        return value
    if not seconds:
        return _missing(default, f"workflow {wid} has not set event {key!r}")
    return _missing(default, f"workflow {wid} did not set event {key!r} within {seconds:g}s", timeout=True)


def _missing(default: Any, message: str, *, timeout: bool = False) -> Any:
    if default is Ellipsis:
        raise WaitTimeout(message) if timeout else NotFound(message)
    return default


def result(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str | None = None,
    timeout: str | float | timedelta | None = None,
    *,
    key: str | None = None,
) -> Any:
    """Wait until the workflow finishes and return its output (the workflow function's return
    value). The workflow is named by ``workflow_id`` or by ``key``, the idempotency key it was
    submitted with (exactly one of the two). Raises ``WorkflowFailed`` or ``WorkflowCancelled``
    when it ended so, ``WaitTimeout`` (a ``TimeoutError``) after ``timeout`` (None: wait as long
    as it takes), ``NotFound`` for an unknown id or key, ``InvalidState`` for a key that several
    runs share (the partitioned layout only). Woken by the workflow's completion (NOTIFY), not
    by polling."""
    keys.check_one(workflow_id, key)
    given = None if workflow_id is None else workflow_uuid(workflow_id)
    seconds = timeout_seconds(timeout, "timeout")
    with _connection(conn_or_dsn) as conn, _errors():
        wid = keys.run_id(conn, given, key)
        done, value = _await(conn, wid, seconds, lambda conn: _outcome(conn, wid))
    if done:
        return value
    raise WaitTimeout(f"workflow {wid} did not finish within {seconds:g}s")


def _outcome(conn: psycopg.Connection[Any], wid: UUID) -> tuple[bool, Any]:
    """(True, its output) once the run completed; raises when it failed or was cancelled."""
    with _decoding(f"the output of workflow {wid}"):
        row = conn.execute(q("coordination.outcome"), {"id": wid}).fetchone()
    if row is None:
        raise NotFound(f"no workflow {wid}")
    status, output, error = row
    if status == COMPLETED:
        return True, output
    if status == FAILED:
        raise WorkflowFailed(wid, error)
    if status == CANCELLED:
        raise WorkflowCancelled(wid, error)
    return False, None


def _await(
    conn: psycopg.Connection[Any],
    wid: UUID,
    seconds: float | None,
    read: Callable[[psycopg.Connection[Any]], tuple[bool, T]],
) -> tuple[bool, T | None]:
    """Call ``read`` until it says done or ``seconds`` pass (None: forever; 0: read once)."""
    done, value = read(conn)
    if done or seconds == 0:
        return done, value
    deadline = None if seconds is None else time.monotonic() + seconds
    notified = conn.autocommit and not behind_pooler(conn)
    if notified:
        conn.execute(q("coordination.listen"))
        conn.execute(q("coordination.watch"), {"id": wid})
    try:
        pause = 0.05
        while True:
            done, value = read(conn)
            if done:
                return done, value
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False, None
            if notified:
                wait = RECHECK if left is None else min(left, RECHECK)
                target = str(wid)
                for note in conn.notifies(timeout=wait):
                    if note.payload == target:
                        break
            else:
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, POLL_MAX)
    finally:
        if notified and not conn.closed:
            conn.execute(q("coordination.unlisten"))
