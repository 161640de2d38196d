"""Coordination from outside a workflow: ``wfctl.send`` a message to one, read what it
published (``wfctl.get_event``), and wait for its result (``wfctl.result``).

Waiting LISTENs on the schema's watch channel (migration 0006) and re-reads when the
workflow's id is announced; without notifications (a connection inside a transaction, or one
through a transaction pooler) it polls, backing off to one read a second.

What the calls check and send, what a row read means and when a wait reads again are functions
and classes apart from the I/O (``Message``, ``sent``, ``Wait`` and its ``Steps``):
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

from wfctl import keys, storedjson, tracing
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
from wfctl.keys import workflow_uuid
from wfctl.queries import q
from wfctl.validate import check_key, encode_input
from wfctl.words import CANCELLED, COMPLETED, FAILED, FINISHED

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
    return send_json(conn_or_dsn, workflow_id, topic, encode_payload(payload), key=key, to_key=to_key).id


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
    message = Message.of(workflow_id, topic, payload_json, key, to_key)
    with tracing.sending(message.topic) as traced, _connection(conn_or_dsn) as conn, database_errors():
        wid = keys.run_id(conn, message.given, message.to_key)
        traced.submitted(wid)
        params = message.params(wid, traced.trace_context)
        return sent(conn.execute(q("coordination.send"), params).fetchone(), wid)


def encode_payload(payload: Any) -> str | None:
    """A message's payload as checked JSON text (``InvalidInput`` when it is not JSON that a
    run's input could be); None for None, a message without payload."""
    return None if payload is None else encode_input(payload, "message payload")


@dataclass(frozen=True)
class Message:
    """A send's checked arguments (``of``): the run it goes to, by id (``given``) or by
    ``to_key``, and the parameters of the statement ``coordination.send`` once the driver has
    the run's id (``params``): what ``send_json`` and ``wfctl.aio.send`` send."""

    given: UUID | None
    to_key: str | None
    topic: str
    payload_json: str | None
    key: str | None

    @classmethod
    def of(
        cls,
        workflow_id: UUID | str | None,
        topic: str | None,
        payload_json: str | None,
        key: str | None,
        to_key: str | None,
    ) -> Message:
        """Check a send's arguments (``InvalidInput``): exactly one of ``workflow_id`` and
        ``to_key``, a workflow id that is a UUID, the topic and the message's key."""
        given = keys.given(workflow_id, to_key, key_name="to_key=")
        check_message(topic, key)
        assert isinstance(topic, str), "check_message lets text through only"
        return cls(given, to_key, topic, payload_json, key)

    def params(self, wid: UUID, trace_context: str | None = None) -> dict[str, Any]:
        """The parameters of ``coordination.send`` to the run ``wid`` (``given``, or the run
        of ``to_key``: ``keys.run_id``), with the sender's trace context (None: not traced)."""
        return {
            "id": wid,
            "topic": self.topic,
            "payload": self.payload_json,
            "key": self.key,
            "trace_context": trace_context,
        }


def sent(row: tuple[Any, ...] | None, wid: UUID) -> Sent:
    """What the row of ``coordination.send`` to the run ``wid`` says (the function always
    returns one)."""
    assert row is not None
    return Sent(int(row[0]), created=bool(row[1]), workflow_id=wid)


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
    return drive(conn_or_dsn, ResultWait(workflow_id, timeout, key))


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
    ``wfctl.aio`` on an asyncio one: the I/O is all that differs, and so does the lookup of
    a run named by its idempotency key (``name``), which needs the connection."""

    def __init__(self, given: UUID | None, run_key: str | None, seconds: float | None) -> None:
        self.given = given  # the run's id, when the caller gave it
        self.run_key = run_key  # else the idempotency key it was submitted with
        self.seconds = seconds  # None: as long as it takes; 0: read once
        self._wid = given

    block: ClassVar[str]  # the SQL block that reads it (one row: see ``settle``), with ``params``

    def name(self, wid: UUID) -> None:
        """Say which run the wait is for: ``given``, or the run of ``run_key``, which the driver
        looks up on its connection (``keys.run_id``) before it takes the steps."""
        self._wid = wid

    @property
    def wid(self) -> UUID:
        """The run's id (``name``)."""
        assert self._wid is not None, "the driver names the run before it takes the steps"
        return self._wid

    @property
    @abstractmethod
    def what(self) -> str:
        """What a value read that cannot be decoded is called."""

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
        super().__init__(wid, None, timeout_seconds(timeout, "timeout") or 0.0)
        self.key = key
        self.default = default

    @property
    def what(self) -> str:
        return f"the value of event {self.key!r} of workflow {self.wid}"

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

    def __init__(
        self, workflow_id: UUID | str | None, timeout: Duration | None, key: str | None = None
    ) -> None:
        given = keys.given(workflow_id, key)
        super().__init__(given, key, timeout_seconds(timeout, "timeout"))

    @property
    def what(self) -> str:
        return f"the output of workflow {self.wid}"

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
    with _connection(conn_or_dsn) as conn, database_errors():
        wait.name(keys.run_id(conn, wait.given, wait.run_key))
        steps = Steps(wait)
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
