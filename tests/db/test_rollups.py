"""The hourly and daily rollups that stats and metrics read for long windows (rows inserted with
SQL, rolled up by calling the refresh the workers' duty calls).

What the reports print from rollups is what they print from the base tables alone: the same
counts, sums, averages and maxima, and percentiles within the width of a duration bin (about
5 %). A change to a run of a rolled-up hour (a retry, a late finish, a prune) is read from the
base tables at once, and rolled up again by the next refresh.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from helpers import wait_for
from report_rows import db_now, step, workflow

from wfctl import reports, rollups
from wfctl.reports import StatsReport

WINDOW = timedelta(days=3)
#: a percentile read from the rollups is within one duration bin of the exact one: bins are
#: e^(1/20) wide (5.13 %)
BIN_WIDTH = 0.0513
TYPES = ("order", "refund", "ship")
STEP_NAMES = ("charge", "reserve", "notify")


def history(conn: psycopg.Connection, runs: int = 240, seed: int = 7) -> list[Any]:
    """``runs`` runs created over the last 60 hours (closed hours, 3 h ago and older) of three
    types, mostly finished, with one to three steps of durations spread over four orders of
    magnitude; a few waiting and running ones among the finished."""
    rng = random.Random(seed)
    now = db_now(conn)
    ids = []
    for i in range(runs):
        age = timedelta(hours=3) + timedelta(minutes=rng.randrange(0, 57 * 60))
        status = rng.choices(["completed", "failed", "cancelled", "pending", "running"], [80, 10, 4, 3, 3])[0]
        extra: dict[str, Any] = {}
        if status == "pending" and i % 2:
            extra = {"wait_kind": "sleep", "run_at": now + timedelta(days=1)}
        durations = [round(10 ** rng.uniform(-2, 2), 4) for _ in range(rng.randint(1, 3))]
        wid = workflow(
            conn,
            now,
            workflow_type=TYPES[i % 3],
            status=status,
            age=age,
            run=timedelta(seconds=sum(durations)),
            **extra,
        )
        created = now - age
        if status != "pending":
            start = created + timedelta(seconds=1)
            for number, seconds in enumerate(durations, start=1):
                last = number == len(durations)
                failed = status == "failed" and last
                step(
                    conn,
                    wid,
                    number,
                    STEP_NAMES[number - 1],
                    start=start,
                    seconds=seconds,
                    status="failed" if failed else "completed",
                )
                start += timedelta(seconds=seconds)
        ids.append(wid)
    return ids


def roll_up(conn: psycopg.Connection) -> int:
    """Refresh until every closed hour is rolled up (a refresh counts closed hours from the
    moment of an earlier one whose transaction no running transaction predates: another test's
    session may hold that back for a moment)."""
    computed = [0]

    def caught_up() -> bool:
        computed[0] += rollups.catch_up(conn, hours=1000)
        return not rollups.due(conn) and used(conn, WINDOW) != []

    wait_for(caught_up, what="the rollups to catch up")
    return computed[0]


def used(conn: psycopg.Connection, window: timedelta) -> list[tuple[datetime, str, datetime]]:
    rows = conn.execute(
        "SELECT bucket_start, span, bucket_end FROM wfctl_rollup_window(now() - %s) ORDER BY 1",
        (window,),
    ).fetchall()
    return [tuple(r) for r in rows]


@contextmanager
def without_rollups(conn: psycopg.Connection) -> Iterator[None]:
    """The reports as the base tables alone give them: the rollups deleted in a transaction
    that is rolled back afterwards."""
    conn.autocommit = False
    try:
        conn.execute("DELETE FROM wfctl_rollup_buckets")
        yield
    finally:
        conn.rollback()
        conn.autocommit = True


def close(a: Decimal | None, b: Decimal | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= max(BIN_WIDTH * abs(float(b)), 0.0015)


def assert_same(
    rolled: list[dict], base: list[dict], key: Callable[[dict], Any], exact: tuple[str, ...]
) -> None:
    assert [key(r) for r in rolled] == [key(r) for r in base]
    for r, b in zip(rolled, base, strict=True):
        assert {k: r[k] for k in exact} == {k: b[k] for k in exact}, key(r)
        for name in ("p50_seconds", "p95_seconds"):
            assert close(r[name], b[name]), (key(r), name, r[name], b[name])


RATE_EXACT = ("total", "completed", "failed", "running", "pending", "waiting", "cancelled", "success_pct")
STEPS_EXACT = ("count", "avg_seconds", "max_seconds", "sum_seconds")


def assert_reports_agree(conn: psycopg.Connection, window: timedelta) -> StatsReport:
    rolled = reports.stats(conn, since=window)
    rolled_metrics = reports.metric_families(conn, since=window)
    with without_rollups(conn):
        base = reports.stats(conn, since=window)
        base_metrics = reports.metric_families(conn, since=window)
    assert rolled.success_rate, "no run in the window"
    assert_same(rolled.success_rate, base.success_rate, lambda r: r["workflow_type"], RATE_EXACT)
    assert_same(
        rolled.slow_steps, base.slow_steps, lambda r: (r["workflow_type"], r["step_name"]), STEPS_EXACT
    )
    assert counted(rolled_metrics) == counted(base_metrics)
    rolled_steps, base_steps = step_samples(rolled_metrics), step_samples(base_metrics)
    assert rolled_steps.keys() == base_steps.keys() and rolled_steps
    for key, value in rolled_steps.items():
        if "quantile" in dict(key[1]):
            assert close(Decimal(str(value)), Decimal(str(base_steps[key]))), (key, value, base_steps[key])
        else:
            assert value == pytest.approx(base_steps[key], abs=0.0015), key
    return rolled


def step_samples(families: list[Any]) -> dict[tuple[str, tuple], Any]:
    return {
        (f.name + s.suffix, tuple(sorted(s.labels.items()))): s.value
        for f in families
        if "step" in f.name
        for s in f.samples
    }


def counted(families: list[Any]) -> list[tuple[str, list[tuple[Any, Any]]]]:
    """The metric families that count (not the steps' durations, nor an age that moves with the
    clock), with their samples."""
    return [
        (f.name, [(s.labels, s.value) for s in f.samples])
        for f in families
        if "step" not in f.name and "age" not in f.name
    ]


def test_reports_from_rollups_agree_with_the_base_tables(conn):
    history(conn)
    hours = roll_up(conn)
    assert hours >= 57  # from the first run's hour (60 h ago at most) to the last closed one
    spans = {span for _, span, _ in used(conn, WINDOW)}
    assert spans == {"d", "h"}, "a 3-day window uses days and the hours at its edges"
    for window in (timedelta(hours=6), timedelta(hours=30), WINDOW, timedelta(days=30)):
        assert_reports_agree(conn, window)


def test_the_buckets_a_window_uses_do_not_overlap_and_the_gaps_are_the_rest(conn):
    history(conn, runs=60)
    roll_up(conn)
    start = conn.execute("SELECT now() - %s", (WINDOW,)).fetchone()[0]
    buckets = used(conn, WINDOW)
    gaps = conn.execute(
        "SELECT lo, nullif(hi, 'infinity') FROM wfctl_rollup_gaps(%s) ORDER BY lo", (start,)
    ).fetchall()
    pieces = sorted([(s, e) for s, _, e in buckets] + [tuple(g) for g in gaps], key=lambda p: p[0])
    assert pieces[0][0] == start, "the window's first, partial hour is read from the base tables"
    assert pieces[-1][1] is None, "and so is everything after the last rolled-up hour"
    for (_, end), (nxt, _) in itertools.pairwise(pieces):
        assert end == nxt, "a hole or an overlap between what the rollups and the base tables cover"
    for s, span, e in buckets:
        assert s > start and e - s == (timedelta(days=1) if span == "d" else timedelta(hours=1))


@pytest.mark.parametrize(
    "change",
    [
        # a failed run retried: it leaves its final status
        "UPDATE workflows SET status = 'pending', finished_at = NULL, run_at = now() WHERE id = %(failed)s",
        # a waiting run that finishes days after it was created
        "UPDATE workflows SET status = 'completed', finished_at = now(), started_at = now()"
        " WHERE id = %(pending)s",
        # a prune
        "DELETE FROM workflows WHERE id = %(completed)s",
    ],
    ids=["retry", "late finish", "prune"],
)
def test_a_change_to_a_rolled_up_hour_is_read_from_the_base_tables_until_rolled_up_again(conn, change):
    history(conn)
    roll_up(conn)
    pick = {
        status: conn.execute(
            "SELECT id FROM workflows WHERE status = %s AND created_at < now() - interval '4 hours'"
            " ORDER BY created_at LIMIT 1",
            (status,),
        ).fetchone()[0]
        for status in ("failed", "pending", "completed")
    }
    before = reports.stats(conn, since=WINDOW)
    conn.execute(change, pick)
    marked = conn.execute("SELECT count(*) FROM wfctl_rollup_stale").fetchone()[0]
    assert marked == 1, "the change marked its hour"
    after = assert_reports_agree(conn, WINDOW)  # at once, from the base tables for that hour
    assert after.success_rate != before.success_rate
    roll_up(conn)
    assert conn.execute("SELECT count(*) FROM wfctl_rollup_stale").fetchone()[0] == 0
    assert_reports_agree(conn, WINDOW)


def test_a_run_that_finishes_soon_after_it_was_created_marks_nothing(conn):
    """The hot path: a run finished in the hour it was created in (or the next) cannot be in a
    rolled-up hour, and writes no mark."""
    now = db_now(conn)
    wid = workflow(conn, now, status="running", age=timedelta(seconds=5))
    conn.execute("UPDATE workflows SET status = 'completed', finished_at = now() WHERE id = %s", (wid,))
    conn.execute("DELETE FROM workflows WHERE id = %s", (wid,))
    assert conn.execute("SELECT count(*) FROM wfctl_rollup_stale").fetchone()[0] == 0


def test_an_open_hour_is_not_rolled_up_and_a_truncate_empties_the_rollups(conn):
    now = db_now(conn)
    recent = workflow(conn, now, age=timedelta(minutes=1))  # its hour ends after now - 10 minutes
    history(conn, runs=30)
    roll_up(conn)
    (rolled,) = conn.execute(
        "SELECT count(*) FROM wfctl_rollup_buckets b JOIN workflows w"
        " ON b.bucket_start = wfctl_rollup_hour(w.created_at) WHERE w.id = %s",
        (recent,),
    ).fetchone()
    assert rolled == 0, "an hour that ended less than ten minutes ago is not closed"
    conn.execute("TRUNCATE workflows CASCADE")
    assert conn.execute("SELECT count(*) FROM wfctl_rollup_buckets").fetchone()[0] == 0


def test_one_session_refreshes_at_a_time_and_the_others_do_not_wait(conn, dsn):
    history(conn, runs=30)
    with psycopg.connect(dsn) as holder:
        holder.execute(
            "SELECT pg_advisory_xact_lock(hashtext('wfctl_rollup_refresh'), hashtext(current_schema()))"
        )
        for _ in range(3):
            assert rollups.refresh(conn, 1000) == 0
        assert conn.execute("SELECT count(*) FROM wfctl_rollup_buckets").fetchone()[0] == 0
    assert roll_up(conn) > 0
