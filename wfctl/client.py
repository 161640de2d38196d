"""Submitting workflows from applications: ``wfctl.submit`` (one) and ``submit_many`` (a batch),
and the workflow types the database has seen registered."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import errors as pg_errors

from wfctl import limits, tracing
from wfctl.connection import connect, translate
from wfctl.durations import Duration, as_seconds, parse_duration, timeout_message, timeout_seconds
from wfctl.errors import InvalidInput, InvalidState
from wfctl.queries import q
from wfctl.validate import check_int, check_key, check_type, encode_input

SUBMIT_TRIES = 5  # insert-or-find rounds for one idempotency key before giving up


@dataclass(frozen=True)
class Submitted:
    id: UUID
    created: bool  # False: the idempotency key was used before, this is the existing workflow


def _delay(delay: str | float | timedelta | None) -> float | None:
    """The delay as exact seconds (for ``make_interval(secs => ...)``), or None."""
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        result = delay
    elif isinstance(delay, str):
        result = parse_duration(delay, what="delay")
    else:
        result = timedelta(seconds=float(delay))
    if result < timedelta(0):
        raise InvalidInput("a delay cannot be negative")
    return as_seconds(result)


def _timeout(timeout: str | float | timedelta | None) -> dict[str, Any]:
    """The deadline parameters of a submit: seconds from now and the error it fails with."""
    seconds = timeout_seconds(timeout, "timeout")
    if seconds is not None and seconds <= 0:
        raise InvalidInput("a timeout must be positive")
    return {"timeout": seconds, "timeout_error": timeout_message(timeout, seconds)}


@contextmanager
def database_errors() -> Iterator[None]:
    """A database error raised while submitting becomes the wfctl error it means (an input over
    the database's limit: InvalidInput; no schema: SchemaError; no privilege: PermissionDenied;
    ...), the driver's error as its cause."""
    try:
        yield
    except pg_errors.InvalidParameterValue as exc:
        raise InvalidInput(exc.diag.message_primary or str(exc).strip().splitlines()[0]) from exc
    except psycopg.Error as exc:
        raise translate(exc) from exc


@contextmanager
def _connection(conn_or_dsn: psycopg.Connection[Any] | str) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(conn_or_dsn, str):
        with connect(conn_or_dsn) as conn:
            yield conn
    else:
        yield conn_or_dsn


def submit(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_type: str,
    input: Any = None,
    *,
    key: str | None = None,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
    timeout: str | float | timedelta | None = None,
    concurrency_key: str | None = None,
) -> UUID:
    """Enqueue one workflow and return its id. With ``key``, submitting again returns the same id
    and stores nothing new. Runs in the connection's current transaction when there is one, so
    an application can enqueue atomically with its own writes. ``timeout`` ("1h") is the run's
    deadline from now: past it the run fails, wherever it is. ``concurrency_key``
    ("customer-42") puts the run under its type's per-key limit (``key_concurrency``)."""
    return submit_one(
        conn_or_dsn,
        workflow_type,
        encode_input(input),
        key=key,
        delay=delay,
        priority=priority,
        max_retries=max_retries,
        timeout=timeout,
        concurrency_key=concurrency_key,
    ).id


def submit_one(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_type: str,
    input_json: str | None,
    *,
    key: str | None = None,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
    timeout: str | float | timedelta | None = None,
    concurrency_key: str | None = None,
) -> Submitted:
    """Enqueue one workflow whose input is JSON text already checked by ``parse_input`` or
    ``encode_input`` (the size limit applies to what the user gave, not to this text)."""
    params = submit_params(
        workflow_type, input_json, key, delay, priority, max_retries, timeout, concurrency_key
    )
    with tracing.submitting(workflow_type) as traced, _connection(conn_or_dsn) as conn, database_errors():
        params["trace_context"] = traced.trace_context
        for _ in range(SUBMIT_TRIES):
            found = submitted(conn.execute(q("client.submit"), params).fetchone())
            if found is not None:
                traced.submitted(found.id, found.created)
                return found
        raise unseen_key(key)


def submit_params(
    workflow_type: str,
    input_json: str | None,
    key: str | None,
    delay: Duration | None,
    priority: int,
    max_retries: int | None,
    timeout: Duration | None,
    concurrency_key: str | None,
    /,
) -> dict[str, Any]:
    """Check the arguments of a submit (``InvalidInput``) and return the parameters of the
    statement ``client.submit``: what ``submit_one`` and ``wfctl.aio.submit`` send. Positional
    only, in the order of ``submit``'s parameters, which its callers pass under the same names."""
    check_type(workflow_type)
    check_key(key)
    run = _run_params(delay, priority, max_retries, timeout, concurrency_key)
    return {"workflow_type": workflow_type, "input": input_json, "key": key, "trace_context": None, **run}


def _run_params(
    delay: Duration | None, priority: int, max_retries: int | None, timeout: Duration | None, key: str | None
) -> dict[str, Any]:
    """The checked parameters that a submit of one run and of a batch share (``key``: the
    concurrency key)."""
    check_int(priority, "priority")
    check_int(max_retries, "max_retries", minimum=0)
    if key is not None:
        limits.check_key(key)
    return {
        "delay": _delay(delay),
        "priority": priority,
        "max_retries": max_retries,
        "concurrency_key": key,
        **_timeout(timeout),
    }


def submitted(row: tuple[Any, ...] | None) -> Submitted | None:
    """What a row of ``client.submit`` says: the run, or None when the key's run was deleted
    (pruned) between the function's two statements, and the submit is to be tried again."""
    return None if row is None else Submitted(id=row[0], created=bool(row[1]))


def unseen_key(key: str | None) -> InvalidState:
    """The error of a submit whose every try found no row: the key conflicts with a row this
    transaction's snapshot cannot see (a REPEATABLE READ or SERIALIZABLE transaction that began
    before that workflow was committed)."""
    return InvalidState(
        f"idempotency key {key!r} belongs to a workflow this transaction cannot see yet "
        "(its snapshot is older); submit again in a new transaction"
    )


def submit_many(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    inputs_json: Sequence[str | None],
    *,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
    timeout: str | float | timedelta | None = None,
    concurrency_key: str | None = None,
) -> list[UUID]:
    """Enqueue a batch of one type in a single statement (the caller owns the transaction)."""
    check_type(workflow_type)
    params = {
        "workflow_type": workflow_type,
        "inputs": list(inputs_json),
        **_run_params(delay, priority, max_retries, timeout, concurrency_key),
    }
    with tracing.submitting(workflow_type, count=len(inputs_json)) as traced, database_errors():
        params["trace_context"] = traced.trace_context
        rows = conn.execute(q("client.submit_many"), params).fetchall()
    return [r[0] for r in rows]


def known_types(conn: psycopg.Connection[Any]) -> list[str]:
    """The workflow types some worker has registered (live or not), sorted."""
    return [r[0] for r in conn.execute(q("client.known_types")).fetchall()]
