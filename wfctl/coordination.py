"""Coordination from outside a workflow: ``wfctl.send`` a message to one, read what it
published (``wfctl.get_event``), and wait for its result (``wfctl.result``).

Waiting LISTENs on the schema's watch channel (migration 0006) and re-reads when the
workflow's id is announced; without notifications (a connection inside a transaction, or one
through a transaction pooler) it polls, backing off to one read a second.

What the calls check and send, what a row read means and when a wait reads again are functions
and classes apart from the I/O (``send_params``, ``sent``, ``Wait`` and its ``Steps``):
``wfctl.aio`` does the same on asyncio connections with them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, ClassVar, TypeAlias
from uuid import UUID

import psycopg
from psycopg import errors as pg_errors

from wfctl import storedjson
from wfctl.client import _connection
from wfctl.connection import behind_pooler, translate
from wfctl.context import check_label
from wfctl.durations import Duration, timeout_seconds
from wfctl.errors import (
    InvalidInput,
    InvalidState,
    NotFound,
    WaitTimeout,
    WorkflowCancelled,
    WorkflowFailed,
)
from wfctl.queries import q
from wfctl.validate import check_key, encode_input
from wfctl.words import CANCELLED, COMPLETED, FAILED, FINISHED

RECHECK = 5.0  # with notifications, re-read anyway this often (a notification is never relied on alone)
POLL_MAX = 1.0  # without notifications: the longest pause between reads
MAX_MESSAGE_KEY = 200  # characters of a message's idempotency key (workflow_messages' check)


def workflow_uuid(value: UUID | str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise InvalidInput(f"{str(value)[:60]!r} is not a workflow id (a UUID)") from None


def check_message(topic: object, key: str | None) -> None:
    """A message's topic (1 to 150 characters) and key (None, or 1 to 200 characters)."""
    check_label(topic, "a message topic")
    check_key(key)
    if key is not None and not 1 <= len(key) <= MAX_MESSAGE_KEY:
        raise InvalidInput(f"a message key must have 1 to {MAX_MESSAGE_KEY} characters, not {key[:40]!r}")


@contextmanager
def database_errors() -> Iterator[None]:
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
def decoding(what: str) -> Iterator[None]:
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
    """What ``send_json`` did: the message's id, and whether this call stored it (False: its key
    was used before, and ``id`` is the earlier message's)."""

    id: int
    created: bool


def send(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str,
    topic: str,
    payload: Any = None,
    *,
    key: str | None = None,
) -> int:
    """Send ``payload`` (JSON) to the workflow on ``topic``; it gets it from ``ctx.recv(topic)``.
    Returns the message's id. With ``key``, sending again returns the first message's id and
    stores nothing. In the connection's transaction when there is one (it is delivered when that
    commits: an outbox). An unknown workflow raises ``NotFound``, a finished one ``InvalidState``;
    nothing is stored then."""
    return send_json(conn_or_dsn, workflow_id, topic, encode_payload(payload), key=key).id


def send_json(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str,
    topic: str,
    payload_json: str | None,
    *,
    key: str | None = None,
) -> Sent:
    """``send`` of a payload that is JSON text already checked (``encode_input``, or the CLI's
    ``parse_input``; None: no payload), saying whether a message was stored: one call of
    ``wfctl_send_message`` (``wfctl_send``, then whether this transaction wrote the message it
    returned: a concurrent send with the same key may have stored it first)."""
    params = send_params(workflow_id, topic, payload_json, key)
    with _connection(conn_or_dsn) as conn, database_errors():
        return sent(conn.execute(q("coordination.send"), params).fetchone())


def encode_payload(payload: Any) -> str | None:
    """A message's payload as checked JSON text (``InvalidInput`` when it is not JSON that a
    run's input could be); None for None, a message without payload."""
    return None if payload is None else encode_input(payload, "message payload")


def send_params(
    workflow_id: UUID | str, topic: str, payload_json: str | None, key: str | None
) -> dict[str, Any]:
    """Check the arguments of a send (``InvalidInput``) and return the parameters of the
    statement ``coordination.send``: what ``send_json`` and ``wfctl.aio.send`` send."""
    wid = workflow_uuid(workflow_id)
    check_message(topic, key)
    return {"id": wid, "topic": topic, "payload": payload_json, "key": key}


def sent(row: tuple[Any, ...] | None) -> Sent:
    """What the row of ``coordination.send`` says (the function always returns one)."""
    assert row is not None
    return Sent(int(row[0]), created=bool(row[1]))


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
    return drive(conn_or_dsn, EventWait(workflow_id, key, timeout, default))


def result(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_id: UUID | str,
    timeout: str | float | timedelta | None = None,
) -> Any:
    """Wait until the workflow finishes and return its output (the workflow function's return
    value). Raises ``WorkflowFailed`` or ``WorkflowCancelled`` when it ended so, ``WaitTimeout``
    (a ``TimeoutError``) after ``timeout`` (None: wait as long as it takes), ``NotFound`` for an
    unknown id. Woken by the workflow's completion (NOTIFY), not by polling."""
    return drive(conn_or_dsn, ResultWait(workflow_id, timeout))


# -- waits ------------------------------------------------------------------------------------


class Do(Enum):
    """The steps of a wait besides pauses (a pause is a float: seconds to spend waiting for the
    workflow's announcement when listening, else sleeping)."""

    READ = "read"  # run the wait's statement; reply with the row it fetched
    LISTEN = "listen"  # listen for the workflow's announcement if the connection can


Step: TypeAlias = Do | float


class Wait(ABC):
    """A wait for something of one workflow, without its I/O: which statement reads it, what a
    row means (``settle``), what the wait ends with when its time is up (``expire``), and when
    to read again (``steps``). ``drive`` takes the steps on a blocking connection and
    ``wfctl.aio`` on an asyncio one: the I/O is all that differs."""

    def __init__(self, wid: UUID, seconds: float | None, what: str) -> None:
        self.wid = wid
        self.seconds = seconds  # None: as long as it takes; 0: read once
        self.what = what  # what a value that cannot be decoded is called

    block: ClassVar[str]  # the SQL block that reads it (one row: see ``settle``), with ``params``

    @property
    def params(self) -> dict[str, Any]:
        return {"id": self.wid}

    @abstractmethod
    def settle(self, row: tuple[Any, ...] | None) -> tuple[bool, Any]:
        """(True, the wait's value) when ``row`` ends the wait, (False, None) when it does not;
        raises when it ends the wait with an error."""

    @abstractmethod
    def expire(self) -> Any:
        """The wait's value when its time is up without ``settle`` ending it; or raises."""

    def steps(self) -> Generator[Step, Any, Any]:
        """The wait as steps for a driver (``Do.READ``, ``Do.LISTEN``, pauses), through
        ``Steps``; returns the wait's value. It reads once; unless that ends it, it listens
        (where the connection can) and reads again, which sees an end between the first read
        and the listening, then waits for the announcement (and reads again at least every
        RECHECK seconds: a notification is never relied on alone) or, without notifications,
        polls with a pause that doubles up to POLL_MAX."""
        done, value = self.settle((yield Do.READ))
        if done:
            return value
        if self.seconds == 0:
            return self.expire()
        deadline = None if self.seconds is None else time.monotonic() + self.seconds
        notified = yield Do.LISTEN
        pause = 0.05
        while True:
            done, value = self.settle((yield Do.READ))
            if done:
                return value
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return self.expire()
            if notified:
                yield RECHECK if left is None else min(left, RECHECK)
            else:
                yield pause if left is None else min(pause, left)
                pause = min(pause * 2, POLL_MAX)


class EventWait(Wait):
    """``get_event``: the latest value of an event, waited for up to ``timeout``."""

    block = "coordination.event"

    def __init__(self, workflow_id: UUID | str, key: str, timeout: Duration | None, default: Any) -> None:
        wid = workflow_uuid(workflow_id)
        check_label(key, "an event key")
        super().__init__(
            wid, timeout_seconds(timeout, "timeout") or 0.0, f"the value of event {key!r} of workflow {wid}"
        )
        self.key = key
        self.default = default

    @property
    def params(self) -> dict[str, Any]:
        return {"id": self.wid, "key": self.key}

    def settle(self, row: tuple[Any, ...] | None) -> tuple[bool, Any]:
        if row is None:
            raise NotFound(f"no workflow {self.wid}")
        status, value, found = row
        if found:
            return True, value
        if status in FINISHED:
            return True, self._missing(f"workflow {self.wid} is {status} and never set event {self.key!r}")
        return False, None

    def expire(self) -> Any:
        if not self.seconds:
            return self._missing(f"workflow {self.wid} has not set event {self.key!r}")
        message = f"workflow {self.wid} did not set event {self.key!r} within {self.seconds:g}s"
        return self._missing(message, timeout=True)

    def _missing(self, message: str, *, timeout: bool = False) -> Any:
        if self.default is Ellipsis:
            raise WaitTimeout(message) if timeout else NotFound(message)
        return self.default


class ResultWait(Wait):
    """``result``: the run's output once it has finished, waited for up to ``timeout``."""

    block = "coordination.outcome"

    def __init__(self, workflow_id: UUID | str, timeout: Duration | None) -> None:
        wid = workflow_uuid(workflow_id)
        super().__init__(wid, timeout_seconds(timeout, "timeout"), f"the output of workflow {wid}")

    def settle(self, row: tuple[Any, ...] | None) -> tuple[bool, Any]:
        if row is None:
            raise NotFound(f"no workflow {self.wid}")
        status, output, error = row
        if status == COMPLETED:
            return True, output
        if status == FAILED:
            raise WorkflowFailed(self.wid, error)
        if status == CANCELLED:
            raise WorkflowCancelled(self.wid, error)
        return False, None

    def expire(self) -> Any:
        raise WaitTimeout(f"workflow {self.wid} did not finish within {self.seconds or 0:g}s")


class Steps:
    """A wait's steps (``Wait.steps``) for a driver's ``for`` loop. At a ``Do.READ`` step the
    driver sets ``reply`` to the row; at a ``Do.LISTEN`` step it sets ``listening`` before it
    listens, where it can (the wait hears whether it did, and the driver stops listening at the
    end if it did); at a pause it waits. Once the loop is over, ``value`` is the wait's value
    (an error of the wait leaves the loop)."""

    def __init__(self, wait: Wait) -> None:
        self._steps = wait.steps()
        self._step: Step | None = None
        self.reply: Any = None
        self.listening = False
        self.value: Any = None

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> Step:
        reply = self.listening if self._step is Do.LISTEN else self.reply
        self.reply = None
        try:
            self._step = self._steps.send(reply)
        except StopIteration as end:
            self.value = end.value
            raise StopIteration from None
        return self._step


def drive(conn_or_dsn: psycopg.Connection[Any] | str, wait: Wait) -> Any:
    """Take the steps of ``wait`` on a blocking connection; the wait's value. Listens only on a
    connection in autocommit mode that talks to PostgreSQL directly (a notification reaches
    neither one inside a transaction nor one behind a transaction pooler), and stops listening
    however the wait ends."""
    steps = Steps(wait)
    with _connection(conn_or_dsn) as conn, database_errors():
        try:
            for step in steps:
                if step is Do.READ:
                    with decoding(wait.what):
                        steps.reply = conn.execute(q(wait.block), wait.params).fetchone()
                elif step is Do.LISTEN:
                    if conn.autocommit and not behind_pooler(conn):
                        steps.listening = True
                        conn.execute(q("coordination.listen"))
                        conn.execute(q("coordination.watch"), {"id": wait.wid})
                elif steps.listening:
                    _announced(conn, wait.wid, step)
                else:
                    time.sleep(step)
        finally:
            if steps.listening and not conn.closed:
                conn.execute(q("coordination.unlisten"))
    return steps.value


def _announced(conn: psycopg.Connection[Any], wid: UUID, seconds: float) -> bool:
    """Wait up to ``seconds`` for the announcement of ``wid`` (those of other workflows pass);
    whether it came."""
    return any(note.payload == str(wid) for note in conn.notifies(timeout=seconds))
