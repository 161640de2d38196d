"""Durations as operators type them: ``30s``, ``5m``, ``24h``, ``7d`` (and ``250ms``)."""

from __future__ import annotations

import re
from datetime import timedelta

from wfctl.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
MAX_SECONDS = 100 * 365 * 86400.0  # beyond this, timestamps overflow (and it is a typo anyway)
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")


def parse_duration(text: str, *, what: str = "duration", allow_zero: bool = True) -> timedelta:
    """Parse ``text`` into a timedelta, or raise UsageError with one line saying what is accepted."""
    match = _PATTERN.match(text or "")
    if not match:
        raise UsageError(f"invalid {what} {text!r}: use a number and a unit, such as 30s, 5m, 24h or 7d")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value > MAX_SECONDS:
        raise UsageError(f"invalid {what} {text!r}: longer than the limit of 100 years")
    if value == 0 and not allow_zero:
        raise UsageError(f"invalid {what} {text!r}: must be greater than zero")
    return timedelta(seconds=value)


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
