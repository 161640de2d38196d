"""wfctl/cron.py on its own (no database): five and six fields, time zones, the nights the clocks
change, the ticks between two instants (bounded however long the span), and bad expressions and
zones; and the decorator's schedule= and timezone= checked when the module is imported."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import wfctl
from wfctl import cron
from wfctl.registry import Registry

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold)  # type: ignore[misc]


def forward(expression: str, zone: str | None, since: datetime, until: datetime) -> list[datetime]:
    """Every tick in [since, until], one next_after at a time."""
    parsed = cron.parse(expression, zone)
    found: list[datetime] = []
    at = since - timedelta(microseconds=1)
    while (tick := parsed.next_after(at)) is not None and tick <= until:
        found.append(tick)
        at = tick
    return found


def test_five_fields_and_six_with_the_seconds_first():
    hourly = cron.parse("0 * * * *")
    assert hourly.next_after(utc(2026, 12, 3, 14, 0, 0)) == utc(2026, 12, 3, 15)  # strictly after
    assert hourly.next_after(utc(2026, 12, 3, 13, 59, 59, 999999)) == utc(2026, 12, 3, 14)
    every5 = cron.parse("*/5 * * * * *")
    assert every5.ticks_between(utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 12), 10) == [
        utc(2026, 1, 1, 0, 0, 0),
        utc(2026, 1, 1, 0, 0, 5),
        utc(2026, 1, 1, 0, 0, 10),
    ]
    assert cron.parse("15 30 2 * * *").next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 2, 30, 15)
    assert cron.parse("0 9 * * MON-FRI").next_after(utc(2026, 12, 5)) == utc(2026, 12, 7, 9)  # a Monday
    assert cron.parse("  0   9 * *  *  ").fields == "0 9 * * *"


def test_a_zone_decides_when_ticks_fall_and_instants_are_utc():
    nine = cron.parse("0 9 * * *", "Europe/Berlin")
    assert nine.zone_name == "Europe/Berlin"
    assert nine.next_after(utc(2026, 12, 3, 12)) == utc(2026, 12, 4, 8)  # CET: UTC+1
    assert nine.next_after(utc(2026, 7, 3, 12)) == utc(2026, 7, 4, 7)  # CEST: UTC+2
    assert nine.next_after(utc(2026, 12, 3, 12)).tzinfo is UTC
    assert cron.parse("0 9 * * *").zone_name == "UTC"
    assert cron.iso(local(BERLIN, 2026, 12, 3, 15, 0, 0)) == "2026-12-03T14:00:00Z"


def test_spring_forward_a_skipped_local_time_ticks_once_at_the_first_minute_that_exists():
    """Europe/Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist."""
    ticks = forward("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), utc(2026, 3, 31))
    assert [t.astimezone(BERLIN).strftime("%d %H:%M %Z") for t in ticks] == [
        "27 02:30 CET",
        "28 02:30 CET",
        "29 03:00 CEST",  # Debian cron's rule: the job runs, at the first minute after the gap
        "30 02:30 CEST",
    ]
    # written with seconds 0 it is the same expression, evaluated the same way
    assert forward("0 30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), utc(2026, 3, 31)) == ticks
    # a frequent schedule is not bent: every 30 minutes, the hour that does not exist has none
    half = forward("*/30 * * * *", "Europe/Berlin", utc(2026, 3, 29, 0), utc(2026, 3, 29, 2))
    assert [t.astimezone(BERLIN).strftime("%H:%M") for t in half] == [
        "01:00",
        "01:30",
        "03:00",
        "03:30",
        "04:00",
    ]
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(half))


def test_fall_back_a_repeated_local_time_ticks_once():
    """Europe/Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice."""
    ticks = forward("30 2 * * *", "Europe/Berlin", utc(2026, 10, 23), utc(2026, 10, 27))
    assert [t.astimezone(BERLIN).strftime("%d %H:%M %Z") for t in ticks] == [
        "23 02:30 CEST",
        "24 02:30 CEST",
        "25 02:30 CEST",  # the first 02:30, not the second
        "26 02:30 CET",
    ]
    assert forward("0 30 2 * * *", "Europe/Berlin", utc(2026, 10, 23), utc(2026, 10, 27)) == ticks
    # asked after the second 02:10 (already past the first 02:30): the next is the next day's
    after = local(BERLIN, 2026, 10, 25, 2, 10, fold=1)
    assert cron.parse("30 2 * * *", "Europe/Berlin").next_after(after) == utc(2026, 10, 26, 1, 30)
    # every 30 minutes runs through the repeated hour on the real timeline: 6 ticks in 3 hours
    half = forward("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23), utc(2026, 10, 25, 1, 59))
    assert len(half) == 6 and all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(half))
    # a six-field expression with other seconds is on the real timeline too: both 02:30s
    both = forward("5 30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert [t.astimezone(BERLIN).strftime("%H:%M:%S %Z") for t in both] == ["02:30:05 CEST", "02:30:05 CET"]


def test_ticks_between_gives_the_latest_ticks_oldest_first_and_is_bounded():
    every_second = cron.parse("* * * * * *")
    since, until = utc(2020, 1, 1), utc(2026, 1, 1, 0, 0, 0, 500000)  # six years of seconds
    latest = every_second.ticks_between(since, until, 1)
    assert latest == [utc(2026, 1, 1)]
    hundred = every_second.ticks_between(since, until, 100)
    assert (
        len(hundred) == 100 and hundred[0] == utc(2025, 12, 31, 23, 58, 21) and hundred[-1] == utc(2026, 1, 1)
    )
    assert every_second.ticks_between(until, since, 5) == []
    assert every_second.ticks_between(since, until, 0) == []
    daily = cron.parse("0 3 * * *", "Europe/Berlin")
    assert daily.ticks_between(utc(2026, 1, 1, 2), utc(2026, 1, 1, 2), 5) == [utc(2026, 1, 1, 2)]  # inclusive
    assert daily.ticks_between(utc(2026, 1, 1, 2, 0, 1), utc(2026, 1, 2, 1, 59, 59), 5) == []


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"])
def test_ticks_between_agrees_with_stepping_forward_across_the_clock_changes(zone):
    """The latest ``limit`` ticks as the backward search finds them are the ones stepping
    forward finds, whatever the span, expression and clock change (random spans, fixed seed)."""
    rng = random.Random(zone)
    expressions = ["30 2 * * *", "0 2 * * *", "*/30 * * * *", "0 * * * *", "15,45 1-3 * * *", "0 30 2 * * *"]
    expressions += ["*/20 * * * * *", "59 1 * * *", "5 2 * * 1-5", "0 0 * * 0"]
    starts = [utc(2026, 3, 7, 20), utc(2026, 3, 28, 20), utc(2026, 10, 3, 20), utc(2026, 10, 24, 20)]
    for _ in range(20):
        expression = rng.choice(expressions)
        since = rng.choice(starts) + timedelta(seconds=rng.randint(0, 2 * 86400))
        longest = 1200 if expression.startswith("*/20") else 6 * 3600  # seconds: a shorter span
        until = since + timedelta(seconds=rng.randint(0, longest))
        every = forward(expression, zone, since, until)
        parsed = cron.parse(expression, zone)
        for limit in (1, 3, 100):
            assert parsed.ticks_between(since, until, limit) == every[-limit:], (expression, since, until)


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("61 * * * *", "bad minute"),
        ("* * *", "wrong number of fields"),
        ("* * * * * * *", "wrong number of fields"),
        ("a b c d e", "bad minute"),
        ("0 0 31 2 *", "bad day-of-month"),
        ("0 0 * 13 *", "bad month"),
        ("", "use five fields"),
        ("0 0 * * * ☃", "use five fields"),
        ("* " * 200, "use five fields"),
    ],
)
def test_a_malformed_expression_is_invalid_input(expression, says):
    with pytest.raises(wfctl.InvalidInput, match="invalid cron expression") as caught:
        cron.parse(expression)
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("zone", "says"),
    [
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus': use an IANA name"),
        ("europe/berlin", "did you mean Europe/Berlin?"),
        ("../etc/passwd", "unknown time zone"),
        ("/etc/localtime", "unknown time zone"),
        ("", "unknown time zone"),
        ("Europe", "unknown time zone"),
        ("UTC\x00", "unknown time zone"),
        ("localtime", "is whatever the machine that evaluates it says"),
    ],
)
def test_an_unknown_zone_is_invalid_input(zone, says):
    with pytest.raises(wfctl.InvalidInput, match="time zone") as caught:
        cron.parse("0 * * * *", zone)
    assert says in str(caught.value)


def test_the_decorator_checks_schedule_and_timezone_at_import():
    registry = Registry()
    with pytest.raises(wfctl.InvalidInput, match="invalid cron expression '0 25 \\* \\* \\*': bad hour"):
        wfctl.workflow("r", schedule="0 25 * * *", registry=registry)
    with pytest.raises(wfctl.InvalidInput, match="unknown time zone 'Europe/Berln'"):
        wfctl.workflow("r", schedule="0 * * * *", timezone="Europe/Berln", registry=registry)
    with pytest.raises(wfctl.InvalidInput, match="timezone is only meaningful with schedule"):
        wfctl.workflow("r", timezone="Europe/Berlin", registry=registry)
    wfctl.workflow("r", schedule="*/5 * * * * *", timezone="Europe/Berlin", registry=registry)(lambda c, d: d)
    declared = registry.get("r")
    assert declared is not None and (declared.schedule, declared.timezone) == (
        "*/5 * * * * *",
        "Europe/Berlin",
    )
