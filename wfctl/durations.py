"""Durations as operators type them: ``30s``, ``5m``, ``24h``, ``7d`` (and ``250ms``).

A duration goes to the database as an exact number of seconds (``as_seconds`` or
``interval_text``), never as a Python timedelta: psycopg sends a timedelta as an interval with a
day part, and ``now() - interval '1 day'`` is 23 or 25 hours on a daylight-saving day in the
session's time zone.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TypeAlias

from wfctl.errors import InvalidInput

#: A duration as the library takes one: a string as operators type it ("30s", "5m", "1h"), a
#: number of seconds, or a ``timedelta``.
Duration: TypeAlias = str | float | timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
MAX_SECONDS = 100 * 365 * 86400.0  # beyond this, timestamps overflow (and it is a typo anyway)
#: The finest duration accepted: anything shorter (but not zero) is refused as a typo.
MIN_SECONDS = 0.001
#: The shortest heartbeat-staleness threshold (``--stale``): below a second, live workers
#: between two heartbeats would count as dead.
MIN_STALE_SECONDS = 1.0
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)\s*$")
_MICROSECOND = timedelta(microseconds=1)


def parse_duration(
    text: str, *, what: str = "duration", allow_zero: bool = True, minimum: float = MIN_SECONDS
) -> timedelta:
    """Parse ``text`` into a timedelta, or raise InvalidInput with one line saying what is accepted.

    Zero is accepted when ``allow_zero``; any other value must be at least ``minimum`` seconds
    (1ms unless the caller asks for more)."""
    match = _PATTERN.match(text or "")
    if not match:
        raise InvalidInput(f"invalid {what} {text!r}: use a number and a unit, such as 30s, 5m, 24h or 7d")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value > MAX_SECONDS:
        raise InvalidInput(f"invalid {what} {text!r}: longer than the limit of 100 years")
    if value == 0:
        if not allow_zero:
            raise InvalidInput(f"invalid {what} {text!r}: must be greater than zero")
    elif value < max(minimum, MIN_SECONDS):
        shortest = format_minimum(max(minimum, MIN_SECONDS))
        raise InvalidInput(f"invalid {what} {text!r}: shorter than the minimum of {shortest}")
    return timedelta(seconds=value)


#: The longest retry_base or retry_cap accepted (``@wfctl.workflow``, ``@wfctl.step``): a backoff
#: must stay a time the database can add to now().
MAX_RETRY_DELAY = timedelta(days=100 * 365)


def retry_delay(value: str | float | timedelta, what: str) -> timedelta:
    """A ``retry_base`` or ``retry_cap``: ``"500ms"``, seconds, or a timedelta, 0 to 100 years."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not 0 <= value <= MAX_RETRY_DELAY.total_seconds():
            raise InvalidInput(f"{what} must be between 0 and 100 years, not {value!r} seconds")
        delta = timedelta(seconds=value)
    elif isinstance(value, str):
        delta = parse_duration(value, what=what)
    else:
        raise InvalidInput(f"{what} must be a duration such as '500ms', not {value!r}")
    if not timedelta(0) <= delta <= MAX_RETRY_DELAY:
        raise InvalidInput(f"{what} must be between 0 and 100 years, not {delta}")
    return delta


def format_minimum(seconds: float) -> str:
    """``0.001`` -> ``1ms``, ``1.0`` -> ``1s`` (for error messages)."""
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def as_seconds(delta: timedelta) -> float:
    """A timedelta as seconds, for SQL such as ``make_interval(secs => %(x)s)``."""
    return delta.total_seconds()


def interval_text(delta: timedelta) -> str:
    """A timedelta as interval input that holds exact seconds (``'86400.000000 seconds'``, which
    PostgreSQL keeps as 24:00:00, never as ``1 day``), for SQL written ``%(x)s::interval``."""
    micros = delta // _MICROSECOND
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d} seconds"


def format_duration(seconds: float | None) -> str:
    """Render seconds compactly for tables: ``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``."""
    if seconds is None:
        return "-"
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def duration(value: str | float | timedelta, what: str) -> timedelta:
    """A duration as the library takes one: a string (``30s``, ``5m``), a number of seconds or a
    timedelta; malformed and negative ones are refused."""
    if isinstance(value, str):
        delta = parse_duration(value, what=what)
    elif isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        delta = timedelta(seconds=float(value))
    else:
        raise InvalidInput(f"{what} must be a duration such as '30s', not {value!r}")
    if delta < timedelta(0):
        raise InvalidInput(f"{what} cannot be negative")
    return delta


def timeout_seconds(value: str | float | timedelta | None, what: str) -> float | None:
    """A timeout as seconds (None: none); negative or malformed ones are refused."""
    if value is None:
        return None
    return as_seconds(duration(value, what))


def timeout_message(given: str | float | timedelta | None, seconds: float | None) -> str | None:
    """The error a run fails with at its deadline: ``timed out after 1h``."""
    if seconds is None:
        return None
    text = given if isinstance(given, str) else _compact(seconds)
    return f"timed out after {text.strip()}"


def _compact(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
