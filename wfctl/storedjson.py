"""Reading stored JSON values that Python may not be able to read.

Any client of the database can store a value: through ``wfctl_submit`` and ``wfctl_send``
(which refuse what wfctl's own writers refuse, migration 0020), or with plain SQL where its role
may. jsonb takes integers of any length and nesting far deeper than Python's ``json`` module
reads: ``json.loads`` raises ValueError for an integer of more than 4300 digits
(``sys.get_int_max_str_digits()``) and RecursionError for a value nested about 1000 deep. psycopg
decodes json and jsonb columns with ``json.loads`` as it fetches a row, so one such value would
make the fetch of its whole result raise.

``loads`` never raises: what it cannot read comes back as an ``Unreadable`` saying why, in
place of the value. ``install`` makes it the decoder of a connection or cursor (not a global
setting: the application's own connections keep psycopg's); whoever reads a value from there
checks for ``Unreadable`` and decides what the value's owner sees (the worker fails the run, the
library and the CLI give a one-line error).
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads

from wfctl.jsonvalue import PYTHON_INT_DIGITS

_DIGITS = re.compile(r"value has (\d+) digits")


class Unreadable:
    """A stored JSON value Python cannot read; ``reason`` says why, as ``it holds ...``."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unreadable({self.reason!r})"


#: What a JSON decoder raises for a value Python cannot read.
DECODE_ERRORS = (ValueError, RecursionError)


def describe(error: BaseException) -> str:
    """Why a decoder raised ``error`` (one of DECODE_ERRORS), as ``it holds ...``."""
    if isinstance(error, RecursionError):
        return "it is nested deeper than Python reads"
    if isinstance(error, json.JSONDecodeError):
        return f"it is not valid JSON ({error})"
    text = str(error).strip()
    found = _DIGITS.search(text)
    if found is not None:  # Python's own words: "... value has 5000 digits; use ..."
        return f"it holds an integer of {found.group(1)} digits, more than Python reads ({PYTHON_INT_DIGITS})"
    return f"it cannot be read ({text.splitlines()[0][:200] if text else type(error).__name__})"


def loads(data: str | bytes) -> Any:
    """``json.loads(data)``, or an ``Unreadable`` when Python cannot read it."""
    try:
        return json.loads(data)
    except DECODE_ERRORS as exc:
        return Unreadable(describe(exc))


def install(context: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> None:
    """Decode json and jsonb with ``loads`` on this connection (or cursor only)."""
    set_json_loads(loads, context)


def reason(value: Any) -> str | None:
    """Why ``value`` (as ``loads`` returned it) could not be read, or None when it was."""
    return value.reason if isinstance(value, Unreadable) else None
