"""wfctl_now(), the one clock of the protocol (migration 0022): now() unless the schema's owner
stopped the test-only fake clock (the row 'fake_now' of wfctl_settings), and then that instant
for every decision and every write: a sleep's wake-up and the claim, deadlines, the prune
window, heartbeats' staleness and schedules' ticks. No other role can move it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import fakeclock
import psycopg
import pytest
from helpers import rows
from roles import Roles

import wfctl
from wfctl import control, recovery, schedules
from wfctl.worker import claims

AT = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
HOUR = timedelta(hours=1)


def wfctl_now(dsn: str) -> datetime:
    return rows(dsn, "SELECT wfctl_now()")[0][0]


def claim(conn: psycopg.Connection[Any], types: tuple[str, ...] = ("plain",)) -> list[claims.Claimed]:
    return claims.claim(conn, "w1", {t: claims.Policy(3) for t in types}, 10, claims.Frontier()).claimed


def test_the_clock_is_the_transactions_until_it_is_stopped_and_then_stands_still(dsn, conn) -> None:
    with psycopg.connect(dsn) as tx:
        real, clock = tx.execute("SELECT now(), wfctl_now()").fetchone()  # type: ignore[misc]
        assert clock == real
    assert fakeclock.stop(dsn, AT) == AT
    assert wfctl_now(dsn) == AT == wfctl_now(dsn)
    assert fakeclock.advance(dsn, HOUR) == AT + HOUR == wfctl_now(dsn)
    # what the engine writes is on the same clock: a submit, and the claim the worker times by
    wid = wfctl.submit(dsn, "plain", {})
    assert rows(dsn, "SELECT created_at, run_at, updated_at FROM workflows WHERE id = %s", wid) == [
        (AT + HOUR, AT + HOUR, AT + HOUR)
    ]
    [claimed] = claim(conn)
    assert claimed.db_now == AT + HOUR
    assert rows(dsn, "SELECT started_at FROM workflows WHERE id = %s", wid) == [(AT + HOUR,)]
    fakeclock.release(dsn)
    assert wfctl_now(dsn) > datetime.now(UTC) - HOUR


def test_a_value_that_is_not_an_instant_is_refused(dsn) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.InvalidDatetimeFormat):
        conn.execute("INSERT INTO wfctl_settings (name, value) VALUES ('fake_now', 'soon')")
    assert rows(dsn, "SELECT count(*) FROM wfctl_settings WHERE name = 'fake_now'") == [(0,)]
    assert wfctl_now(dsn) > datetime.now(UTC) - HOUR


def test_no_role_but_the_owner_can_move_the_clock(cli, dsn) -> None:
    """A submit role cannot push its own deadline back: it may not write wfctl_settings, and a
    setting of its own session (a custom GUC, which any role may set) is not read at all."""
    made = Roles(dsn)
    try:
        names = {job: made.create(f"wfctl_{job}") for job in ("worker", "submit", "read")}
        args = [a for job, name in names.items() for a in (f"--grant-{job}", name)]
        assert cli("init", "--dsn", dsn, *args).exit_code == 0
        for job, name in names.items():
            with psycopg.connect(made.dsn_of(name), autocommit=True) as conn:
                for statement in (
                    "INSERT INTO wfctl_settings (name, value) VALUES ('fake_now', '2099-01-01')",
                    "UPDATE wfctl_settings SET value = '2099-01-01' WHERE name = 'fake_now'",
                ):
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(statement)
                conn.execute("SET wfctl.fake_now = '2099-01-01 00:00:00+00'")
                (clock,) = conn.execute("SELECT wfctl_now()").fetchone()  # type: ignore[misc]
                assert clock.year < 2099, job
        with psycopg.connect(made.dsn_of(names["submit"]), autocommit=True) as conn:
            conn.execute("SET wfctl.fake_now = '2099-01-01 00:00:00+00'")
            (wid, _created) = conn.execute(
                "SELECT * FROM wfctl_submit_one('plain', '{}', NULL, NULL, 0, NULL, 60, 'late', NULL)"
            ).fetchone()  # type: ignore[misc]
        ((left,),) = rows(
            dsn, "SELECT extract(epoch FROM deadline_at - now()) FROM workflows WHERE id = %s", wid
        )
        assert 0 < float(left) <= 60
    finally:
        made.drop_all()


def test_a_sleep_and_a_delay_come_due_when_the_clock_reaches_them(dsn, conn) -> None:
    fakeclock.stop(dsn, AT)
    napping = wfctl.submit(dsn, "plain", {}, delay="1h")
    conn.execute(
        "UPDATE workflows SET wait_kind = 'sleep', run_at = %s WHERE id = %s", (AT + 2 * HOUR, napping)
    )
    later = wfctl.submit(dsn, "plain", {}, delay="1h")
    assert claim(conn) == []
    fakeclock.advance(dsn, HOUR)
    assert [c.id for c in claim(conn)] == [later]
    fakeclock.advance(dsn, HOUR)
    assert [c.id for c in claim(conn)] == [napping]


def test_a_deadline_passes_when_the_clock_passes_it(dsn, conn) -> None:
    fakeclock.stop(dsn, AT)
    wid = wfctl.submit(dsn, "nobody-runs", {}, timeout="1h")
    assert recovery.expire(conn) == []
    fakeclock.advance(dsn, HOUR - timedelta(microseconds=1))
    assert recovery.expire(conn) == []
    fakeclock.advance(dsn, timedelta(microseconds=1))
    assert [e.id for e in recovery.expire(conn)] == [wid]
    finished = rows(dsn, "SELECT status, finished_at FROM workflows WHERE id = %s", wid)
    assert finished == [("failed", AT + HOUR)]


def test_the_prune_window_and_a_heartbeats_staleness_are_read_on_the_clock(dsn, conn) -> None:
    fakeclock.stop(dsn, AT)
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, dead_after_seconds)"
        " VALUES ('w1', 'h', 1, 1, 30)"
    )
    held = conn.execute(
        "INSERT INTO workflows (workflow_type, status, lease_owner)"
        " VALUES ('plain', 'running', 'w1') RETURNING id"
    ).fetchone()[0]  # type: ignore[index]
    done = conn.execute(
        "INSERT INTO workflows (workflow_type, status, finished_at)"
        " VALUES ('plain', 'completed', wfctl_now()) RETURNING id"
    ).fetchone()[0]  # type: ignore[index]
    assert recovery.recover(conn, None) == []  # its 30s of silence have not passed
    assert control.prune(conn, HOUR, ["completed"]).workflows == 0
    fakeclock.advance(dsn, timedelta(seconds=31))
    assert [r.id for r in recovery.recover(conn, None)] == [held]
    fakeclock.advance(dsn, HOUR)
    assert control.prune(conn, HOUR, ["completed"]).workflows == 1
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE id = %s", done) == [(0,)]


def test_a_schedule_fires_when_the_clock_reaches_its_tick(dsn, conn) -> None:
    fakeclock.stop(dsn, AT)
    schedules.add(conn, "hourly", "plain", "0 * * * *")
    tick = AT.replace(minute=0, second=0) + HOUR
    assert rows(dsn, "SELECT next_tick_at FROM workflow_schedules") == [(tick,)]
    assert schedules.fire_due(conn).fired == []
    fakeclock.stop(dsn, tick)
    assert [f.tick for f in schedules.fire_due(conn).fired] == [tick]
    assert rows(dsn, "SELECT created_at FROM workflows") == [(tick,)]


def test_the_real_clock_costs_what_now_costs_and_the_fake_one_only_while_set(dsn, conn) -> None:
    """Without the row, wfctl_now() is inlined to now() (nothing reads a table per row of an
    insert's defaults); the row makes it read the fake clock, and deleting it undoes that."""

    def plan() -> str:
        return "\n".join(r[0] for r in conn.execute("EXPLAIN VERBOSE SELECT wfctl_now()").fetchall())

    assert "Output: now()" in plan()
    fakeclock.stop(dsn)
    assert "wfctl_fake_now()" in plan()
    fakeclock.release(dsn)
    assert "Output: now()" in plan()
