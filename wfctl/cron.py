"""Cron expressions in a time zone: checking them, and the instants at which they tick.

The expressions are cronsim's (https://github.com/cuu508/cronsim): five fields, ``minute hour
day-of-month month day-of-week``, with Debian cron's syntax (lists, ranges, steps, names such
as ``MON`` and ``JAN``) plus ``L``, ``LW`` and ``MON#2``; or six fields with the seconds first,
as DBOS and Quartz write them (``*/5 * * * * *``: every five seconds).

A schedule's zone decides when its ticks fall; the instants themselves are timezone-aware
datetimes, stored in UTC. Daylight-saving changes, for a five-field expression that names its
minute and hour (``30 2 * * *``), follow Debian cron: a local time that does not exist (02:30 on
the night the clocks go forward) ticks at the first minute that does exist (03:00), and a local
time that happens twice (02:30 on the night they go back) ticks once, the first time. A
six-field expression whose seconds are ``0`` means the same as its five-field form and is
evaluated as one. Other six-field expressions, and every-minute or every-hour ones, are
evaluated on the real timeline: ``*/10 * * * *`` ticks every ten minutes through both nights.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from cronsim import CronSim, CronSimError

from wfctl.errors import InvalidInput

DEFAULT_ZONE = "UTC"
MAX_EXPRESSION_LENGTH = 200
MAX_ZONE_LENGTH = 100
#: The form users are told about when an expression does not parse.
FORMS = "five fields (minute hour day-of-month month day-of-week) or six with the seconds first"
_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cron:
    """A checked expression and its zone."""

    expression: str  # as the user wrote it
    zone_name: str
    zone: tzinfo
    fields: str  # what cronsim evaluates: six fields with seconds 0 become five

    def ticks_between(self, since: datetime, until: datetime, limit: int) -> list[datetime]:
        """The latest ``limit`` ticks at or after ``since`` and at or before ``until``, oldest
        first, in UTC. However long the span, the work is bounded by ``limit``: the search goes
        backwards from ``until`` to find where the last ``limit`` ticks start, then forwards from
        there, so the ticks are the ones the forward iteration (``next_after``) gives."""
        if limit < 1 or until < since:
            return []
        start = since
        for found, tick in enumerate(self._iterate(until + _ONE_MICROSECOND, reverse=True), start=1):
            if tick < since:
                break
            if found == limit:
                start = tick
                break
        ticks: list[datetime] = []
        for tick in self._forward_from(start - _ONE_MICROSECOND, limit * 2 + 10):
            if tick > until:
                break
            if tick >= since:
                ticks.append(tick)
        return ticks[-limit:]

    def next_after(self, instant: datetime) -> datetime | None:
        """The first tick strictly after ``instant`` (UTC), or None when there is none within
        fifty years (cronsim's horizon)."""
        for tick in self._forward_from(instant, 1):
            return tick
        return None

    def _forward_from(self, instant: datetime, count: int) -> list[datetime]:
        """Up to ``count`` ticks strictly after ``instant``, strictly increasing. Debian's
        daylight-saving rule can give a local time already passed (02:30 asked for at 02:10
        after the clocks went back): such a tick is dropped."""
        out: list[datetime] = []
        last = instant
        for tick in self._iterate(instant, reverse=False):
            if tick <= last:
                continue
            out.append(tick)
            last = tick
            if len(out) >= count:
                break
        return out

    def _iterate(self, instant: datetime, *, reverse: bool) -> _Ticks:
        return _Ticks(CronSim(self.fields, instant.astimezone(self.zone), reverse=reverse))


class _Ticks:
    """cronsim's iterator as UTC instants, stopping at its fifty-year horizon; bounded, since a
    caller that filters out what it cannot use must not loop for ever."""

    LIMIT = 100_000

    def __init__(self, sim: CronSim) -> None:
        self.sim = sim
        self.left = self.LIMIT

    def __iter__(self) -> _Ticks:
        return self

    def __next__(self) -> datetime:
        self.left -= 1
        if self.left < 0:
            raise StopIteration
        return next(self.sim).astimezone(UTC)


def zone(name: str | None) -> tuple[str, tzinfo]:
    """The IANA time zone ``name`` (``None``: UTC); InvalidInput when there is no such zone."""
    if name is None:
        return DEFAULT_ZONE, UTC
    if not isinstance(name, str) or not name or len(name) > MAX_ZONE_LENGTH or "\x00" in name:
        raise InvalidInput(f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC")
    if name == "localtime":
        raise InvalidInput(
            "time zone 'localtime' is whatever the machine that evaluates it says: name the zone, "
            "such as Europe/Berlin or UTC"
        )
    try:
        return name, zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        pass
    hint = _suggest(name)
    raise InvalidInput(
        f"unknown time zone {name!r}: "
        + (f"did you mean {hint}?" if hint else "use an IANA name such as Europe/Berlin or UTC")
    )


def _suggest(name: str) -> str | None:
    """The zone that differs from ``name`` only in case (europe/berlin), if any."""
    try:
        known = zoneinfo.available_timezones()
    except OSError:
        return None
    folded = {k.casefold(): k for k in known}
    return folded.get(name.casefold())


def parse(expression: str, timezone: str | None = None) -> Cron:
    """Check ``expression`` in ``timezone`` (None: UTC); InvalidInput when either is bad or the
    expression never ticks."""
    name, tz = zone(timezone)
    if not isinstance(expression, str):
        raise InvalidInput(f"a cron expression is text, not {expression!r}")
    text = " ".join(expression.split())
    if not text or len(text) > MAX_EXPRESSION_LENGTH or not text.isascii():
        raise InvalidInput(f"invalid cron expression {expression!r}: use {FORMS}")
    parts = text.split(" ")
    fields = " ".join(parts[1:]) if len(parts) == 6 and parts[0] == "0" else text
    cron = Cron(expression=expression, zone_name=name, zone=tz, fields=fields)
    try:
        first = cron.next_after(datetime.now(UTC))
    except CronSimError as exc:
        reason = str(exc).rstrip(".")
        detail = reason[0].lower() + reason[1:] if reason else "not understood"
        raise InvalidInput(f"invalid cron expression {expression!r}: {detail}; use {FORMS}") from None
    except (ValueError, OverflowError) as exc:  # a number cronsim accepts but datetime cannot hold
        raise InvalidInput(f"invalid cron expression {expression!r}: {exc}; use {FORMS}") from None
    if first is None:
        raise InvalidInput(f"cron expression {expression!r} never ticks (no match within fifty years)")
    return cron


def check(expression: str | None, timezone: str | None) -> None:
    """The decorator's ``schedule`` and ``timezone``: InvalidInput when they are bad."""
    if expression is not None:
        parse(expression, timezone)
    elif timezone is not None:
        zone(timezone)


def iso(instant: datetime) -> str:
    """A tick as it appears in a run's input and idempotency key: ``2026-12-03T14:00:00Z``."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
