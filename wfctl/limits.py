"""Flow-control limits of a workflow type: parsing what users type, what code declares, what
operators set and list.

A type may carry a global concurrency limit (at most N runs hold a lease at once, across all
workers), a rate limit (at most N executions start per window, spread evenly) and a per-key
limit (at most K running per ``concurrency_key``, with claims rotating across keys). The
database enforces them in the claim (``wfctl_claim_allowed``, migrations 0007 and 0017); this
module parses and checks them and reads and writes ``workflow_limits`` (sql/queries/limits.sql).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from wfctl.connection import DEFAULT_HOLD, hold_locks_at_most
from wfctl.durations import parse_duration
from wfctl.errors import InvalidInput
from wfctl.queries import q

#: The largest limit accepted (an int column; anything near it is a typo).
MAX_LIMIT = 1_000_000
MAX_KEY_LENGTH = 200

_RATE = re.compile(r"^\s*([0-9]+)\s*/\s*(\S+)\s*$")
_BARE_UNITS = {"ms", "s", "m", "h", "d", "w"}


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts per ``seconds``."""

    count: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.count}/{format_window(self.seconds)}"


def format_window(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}" if seconds != size else unit
    return f"{seconds * 1000:g}ms"


def parse_rate(text: object, what: str = "rate") -> Rate:
    """``"100/1m"``, ``"20/s"``, ``"5/30s"`` -> Rate; anything else raises InvalidInput."""
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise InvalidInput(f"invalid {what} {text!r}: use a count and a window, such as 100/1m or 20/s")
    match = _RATE.match(text)
    if not match:
        raise InvalidInput(f"invalid {what} {text!r}: use a count and a window, such as 100/1m or 20/s")
    count = int(match.group(1))
    window = match.group(2)
    if window in _BARE_UNITS:
        window = "1" + window
    seconds = parse_duration(window, what=f"{what} window").total_seconds()
    if seconds <= 0:
        raise InvalidInput(f"invalid {what} {text!r}: the window must be longer than zero")
    if not 1 <= count <= MAX_LIMIT:
        raise InvalidInput(f"invalid {what} {text!r}: the count must be between 1 and {MAX_LIMIT}")
    return Rate(count, seconds)


def check_limit(value: object, what: str, *, allow_zero: bool = True) -> int:
    """A concurrency limit: a whole number from 0 (paused) or 1 up to MAX_LIMIT."""
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_LIMIT:
        raise InvalidInput(f"{what} must be a whole number from {lowest} to {MAX_LIMIT}, not {value!r}")
    return value


def check_key(value: object) -> str:
    """A concurrency key: 1 to MAX_KEY_LENGTH characters of text without NUL."""
    if not isinstance(value, str):
        problem = f"not {type(value).__name__}"
    elif not 1 <= len(value) <= MAX_KEY_LENGTH:
        problem = f"not {len(value)}"
    elif "\x00" in value:
        problem = "without NUL"
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            problem = "in UTF-8 (it holds a lone surrogate)"
        else:
            return value
    raise InvalidInput(f"a concurrency key must be 1 to {MAX_KEY_LENGTH} characters of text, {problem}")


@dataclass(frozen=True)
class Limits:
    """What code declares on ``@wfctl.workflow`` (None: no limit of that kind)."""

    concurrency: int | None = None
    key_concurrency: int | None = None
    rate: Rate | None = None

    def any(self) -> bool:
        return self.concurrency is not None or self.key_concurrency is not None or self.rate is not None


def declared(concurrency: object, key_concurrency: object, rate: object) -> Limits:
    """Check the decorator's arguments."""
    limit = None if concurrency is None else check_limit(concurrency, "concurrency", allow_zero=False)
    per_key = None
    if key_concurrency is not None:
        per_key = check_limit(key_concurrency, "key_concurrency", allow_zero=False)
    return Limits(
        concurrency=limit,
        key_concurrency=per_key,
        rate=None if rate is None else parse_rate(rate),
    )


def declare(
    conn: psycopg.Connection[Any], types: Iterable[tuple[str, Limits]], *, hold: float = DEFAULT_HOLD
) -> int:
    """Write what the code declares for these types, (name, limits) pairs (a worker at start);
    how many rows changed. The rows stay locked (every claim of these types waits for them) in a
    transaction that ends after ``hold`` seconds should this process freeze in it."""
    items = sorted(types, key=lambda item: item[0])
    rates = [lim.rate for _, lim in items]
    names = [name for name, _ in items]
    with conn.transaction():
        hold_locks_at_most(conn, hold)
        conn.execute(q("limits.lock"), {"types": names})
        row = conn.execute(
            q("limits.declare"),
            {
                "types": names,
                "concurrency": [lim.concurrency for _, lim in items],
                "key_concurrency": [lim.key_concurrency for _, lim in items],
                "rate_count": [r.count if r else None for r in rates],
                "rate_seconds": [r.seconds if r else None for r in rates],
            },
        ).fetchone()
    return int(row[0]) if row else 0


def check_known(conn: psycopg.Connection[Any], workflow_type: str) -> None:
    row = conn.execute(q("limits.known"), {"type": workflow_type}).fetchone()
    if not (row and row[0]):
        raise InvalidInput(
            f"unknown workflow type {workflow_type!r}: no worker has registered it and no workflow "
            "of it exists (start a worker that runs it first)"
        )


def set_limits(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    *,
    concurrency: int | None = None,
    key_concurrency: int | None = None,
    rate: Rate | None = None,
) -> None:
    """Set the operator's values given (None keeps the current one); workers apply them from
    their next claim (they are woken to claim at once)."""
    if concurrency is None and key_concurrency is None and rate is None:
        raise InvalidInput("give at least one of --concurrency, --per-key, --rate (or --clear)")
    if concurrency is not None:
        check_limit(concurrency, "--concurrency")
    if key_concurrency is not None:
        check_limit(key_concurrency, "--per-key", allow_zero=False)
    check_known(conn, workflow_type)
    conn.execute(
        q("limits.set"),
        {
            "type": workflow_type,
            "concurrency": concurrency,
            "key_concurrency": key_concurrency,
            "rate_count": rate.count if rate else None,
            "rate_seconds": rate.seconds if rate else None,
        },
    )


def clear(conn: psycopg.Connection[Any], workflow_type: str) -> bool:
    """Drop the operator's values for the type (the code's apply again); False: none were set."""
    check_known(conn, workflow_type)
    return conn.execute(q("limits.clear"), {"type": workflow_type}).fetchone() is not None


@dataclass(frozen=True)
class LimitRow:
    workflow_type: str
    concurrency: int | None
    key_concurrency: int | None
    rate_count: int | None
    rate_seconds: float | None
    code_concurrency: int | None
    code_key_concurrency: int | None
    code_rate_count: int | None
    code_rate_seconds: float | None
    running: int
    runnable: int
    running_keys: int
    changed_at: datetime

    def effective(self) -> Limits:
        rate = (
            Rate(self.rate_count, self.rate_seconds or 0.0)
            if self.rate_count is not None
            else Rate(self.code_rate_count, self.code_rate_seconds or 0.0)
            if self.code_rate_count is not None
            else None
        )
        return Limits(
            concurrency=self.concurrency if self.concurrency is not None else self.code_concurrency,
            key_concurrency=(
                self.key_concurrency if self.key_concurrency is not None else self.code_key_concurrency
            ),
            rate=rate,
        )

    def source(self, kind: str) -> str | None:
        """Who set the limit in force of this kind: "set" (an operator), "code", or None."""
        if getattr(self, kind) is not None:
            return "set"
        if getattr(self, f"code_{kind}") is not None:
            return "code"
        return None


def list_limits(conn: psycopg.Connection[Any], workflow_type: str | None = None) -> list[LimitRow]:
    with conn.cursor(row_factory=class_row(LimitRow)) as cur:
        return cur.execute(q("limits.list"), {"type": workflow_type}).fetchall()
