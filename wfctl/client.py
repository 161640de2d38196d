"""Submitting workflows from applications: ``wfctl.submit`` (one) and ``submit_many`` (a batch)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg

from wfctl import jsonvalue
from wfctl.connection import connect
from wfctl.durations import parse_duration
from wfctl.errors import InvalidState, UsageError
from wfctl.queries import q
from wfctl.registry import MAX_TYPE_LENGTH

SUBMIT_TRIES = 5  # insert-or-find rounds for one idempotency key before giving up

#: Largest input accepted, in bytes of JSON (documented in the README). Postgres would take far
#: more; a workflow input this big is almost always a mistake (pass a reference instead).
MAX_INPUT_BYTES = 1_000_000


@dataclass(frozen=True)
class Submitted:
    id: UUID
    created: bool  # False: the idempotency key was used before, this is the existing workflow


def encode_input(value: Any, where: str = "workflow input") -> str:
    try:
        text = jsonvalue.dumps(value)
    except jsonvalue.UnstorableJSON as exc:
        raise UsageError(f"{where} cannot be stored: {exc}") from None
    check_input_size(text, where)
    return text


def check_input_size(text: str, where: str = "workflow input") -> None:
    size = len(text.encode("utf-8"))
    if size > MAX_INPUT_BYTES:
        raise UsageError(f"{where} is {size} bytes, over the limit of {MAX_INPUT_BYTES} bytes")


INT32_MAX = 2**31 - 1


def check_int(value: int | None, what: str, *, minimum: int = -INT32_MAX - 1) -> None:
    """priority and max_retries are integer columns: refuse what they cannot hold."""
    if value is not None and minimum == 0 and value < 0:
        raise UsageError(f"{what} cannot be negative")
    if value is not None and not minimum <= value <= INT32_MAX:
        raise UsageError(f"{what} must be between {minimum} and {INT32_MAX}, not {value}")


def check_type(workflow_type: str) -> None:
    if not workflow_type or len(workflow_type) > MAX_TYPE_LENGTH:
        raise UsageError(f"a workflow type must have 1 to {MAX_TYPE_LENGTH} characters")


def _delay(delay: str | float | timedelta | None) -> timedelta | None:
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        result = delay
    elif isinstance(delay, str):
        result = parse_duration(delay, what="delay")
    else:
        result = timedelta(seconds=float(delay))
    if result < timedelta(0):
        raise UsageError("a delay cannot be negative")
    return result


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
) -> UUID:
    """Enqueue one workflow and return its id. With ``key``, submitting again returns the same id
    and stores nothing new. Runs in the connection's current transaction when there is one, so
    an application can enqueue atomically with its own writes."""
    return submit_one(
        conn_or_dsn,
        workflow_type,
        encode_input(input),
        key=key,
        delay=delay,
        priority=priority,
        max_retries=max_retries,
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
) -> Submitted:
    check_type(workflow_type)
    check_int(priority, "priority")
    check_int(max_retries, "max_retries", minimum=0)
    if input_json is not None:
        check_input_size(input_json)
    params = {
        "workflow_type": workflow_type,
        "input": input_json,
        "key": key,
        "delay": _delay(delay),
        "priority": priority,
        "max_retries": max_retries,
    }
    with _connection(conn_or_dsn) as conn:
        for _ in range(SUBMIT_TRIES):
            row = conn.execute(q("client.submit"), params).fetchone()
            if row is not None:
                return Submitted(id=row[0], created=True)
            # the key was used before (perhaps by a submit committed a moment ago)
            row = conn.execute(q("client.submit_existing"), {"key": key}).fetchone()
            if row is not None:
                return Submitted(id=row[0], created=False)
            # the conflicting workflow was deleted (pruned) between the two statements: again
        # the key conflicts with a row this transaction's snapshot cannot see (a REPEATABLE READ
        # or SERIALIZABLE transaction that began before that workflow was committed)
        raise InvalidState(
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
) -> list[UUID]:
    """Enqueue a batch of one type in a single statement (the caller owns the transaction)."""
    check_type(workflow_type)
    check_int(priority, "priority")
    check_int(max_retries, "max_retries", minimum=0)
    rows = conn.execute(
        q("client.submit_many"),
        {
            "workflow_type": workflow_type,
            "inputs": list(inputs_json),
            "delay": _delay(delay),
            "priority": priority,
            "max_retries": max_retries,
        },
    ).fetchall()
    return [r[0] for r in rows]


def parse_input(text: str) -> str:
    """Validate one JSON document given on the command line; return it normalised."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"malformed JSON input: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return encode_input(value)


def parse_jsonl(data: bytes, source: str) -> list[str]:
    """Validate a JSON Lines file (one workflow input per non-empty line) before anything is
    stored; the first bad line is an error naming its line number."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{source} is not valid UTF-8 (line {line}, byte offset {exc.start})") from None
    inputs: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{source} line {number}: malformed JSON: {exc.msg} "
                f"(column {exc.colno}); nothing was submitted"
            ) from None
        inputs.append(encode_input(value, f"{source} line {number}"))
    if not inputs:
        raise UsageError(f"{source} holds no workflow input (expected one JSON value per line)")
    return inputs
