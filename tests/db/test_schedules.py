"""Schedules at the SQL level and through the in-process CLI: one catch-up run after downtime
(every missed tick with --backfill), pause, resume, edit, trigger and delete, `wfctl tick`
racing itself, and the CLI's table and JSON. The tests with real workers (one run per tick
across four workers, code-declared schedules) are in tests/process/test_schedules_workers.py."""

from __future__ import annotations

import io
import itertools
import json
import threading
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
from helpers import rows
from support.schedules import _due_schedules, db_now, iso, ok, schedule_row, ticks

import wfctl
from wfctl import schedules
from wfctl.registry import Registry, WorkflowType
from wfctl.worker import ticks as tick_duty
from wfctl.worker.duties import Duties
from wfctl.worker.log import WorkerLog


def set_due(dsn: str, name: str, sql_instant: str) -> datetime:
    """Make ``name``'s next tick ``sql_instant`` (an expression: the past, for a downtime)."""
    return rows(
        dsn,
        f"UPDATE workflow_schedules SET next_tick_at = {sql_instant} WHERE name = %s RETURNING next_tick_at",
        name,
    )[0][0]


def declared(schedule: str | None, timezone: str | None = None) -> dict[str, WorkflowType]:
    """What a worker whose code registers 'nightly' with this schedule passes to declare."""
    registry = Registry()
    wfctl.workflow("nightly", schedule=schedule, timezone=timezone, registry=registry)(lambda c, d: d)
    return dict(registry.types)


def test_code_schedules_keep_a_pause_follow_changes_and_go_with_the_code(dsn, conn, cli):
    """What each worker's start does (schedules.declare, as Worker.run calls it)."""
    assert [(d.name, d.action) for d in schedules.declare(conn, declared("0 3 * * *"))] == [
        ("nightly", "created")
    ]
    # restarted with the same code: nothing changes (no tick fired or skipped by the restart)
    set_due(dsn, "nightly", "now() + interval '1 hour'")
    ok(cli("schedule", "pause", "nightly", "--dsn", dsn))
    kept = schedule_row(dsn, "nightly")
    assert schedules.declare(conn, declared("0 3 * * *")) == []
    assert schedule_row(dsn, "nightly") == kept

    # a changed cron: the new definition, next tick from now, still paused
    changed = schedules.declare(conn, declared("30 2 * * *", "Europe/Berlin"))
    assert [(d.name, d.action, d.cron) for d in changed] == [("nightly", "changed", "30 2 * * *")]
    row = schedule_row(dsn, "nightly")
    assert (row["cron"], row["timezone"], row["paused"]) == ("30 2 * * *", "Europe/Berlin", True)
    berlin = row["next_tick_at"].astimezone(ZoneInfo("Europe/Berlin"))
    assert (berlin.hour, berlin.minute) in ((2, 30), (3, 0))  # 03:00 on the night clocks go forward
    assert timedelta(0) < row["next_tick_at"] - db_now(dsn) <= timedelta(days=1, hours=1)

    # an operator cannot add over it
    refused = cli("schedule", "add", "nightly", "nightly", "0 * * * *", "--dsn", dsn)
    assert refused.exit_code == 7 and "is declared in code" in refused.stderr

    # the code drops it: the next worker deletes it; a type without one is left alone
    dropped = schedules.declare(conn, declared(None))
    assert [(d.name, d.action) for d in dropped] == [("nightly", "dropped")]
    assert schedule_row(dsn, "nightly") is None

    # a name an operator holds is not taken over by the code, nor deleted when the code drops it
    ok(cli("schedule", "add", "nightly", "stamp", "0 12 * * *", "--dsn", dsn))
    held = schedule_row(dsn, "nightly")
    assert [(d.name, d.action) for d in schedules.declare(conn, declared("0 3 * * *"))] == [
        ("nightly", "taken")
    ]
    assert schedules.declare(conn, declared(None)) == []
    assert schedule_row(dsn, "nightly") == held


def test_the_tick_duty_wakes_at_the_earliest_tick_within_its_interval():
    """On a fake clock: due again at the next tick (plus 2 ms), never later than the interval,
    never sooner than 50 ms; after a refused statement, after the interval."""
    now = [100.0]
    answers: list[tick_duty.Outcome | None] = []
    duty = tick_duty.TickDuty(
        10.0, lambda: answers.pop(0), WorkerLog("plain", io.StringIO()), clock=lambda: now[0]
    )
    duties = Duties(lambda: now[0])
    duties.add(duty)
    for next_in, due in ((0.5, 100.502), (30.0, 110.0), (None, 110.0), (-3.0, 100.05)):
        answers.append(tick_duty.Outcome(schedules.Firing([], [], []), next_in))
        assert duties.run_due() == ["ticks"]
        assert duty.next_at == pytest.approx(due), next_in
        now[0] = 100.0
        duty.next_at = 0.0
    answers.append(None)
    duties.run_due()
    assert duty.next_at == pytest.approx(110.0)


def test_tick_fires_the_latest_missed_tick_once_and_says_nothing_when_nothing_is_due(dsn, cli):
    ok(cli("schedule", "add", "hourly", "stamp", "0 * * * *", "--input", '{"site": "b"}', "--dsn", dsn))
    assert cli("tick", "--dsn", dsn).output == ""  # nothing due: silent, for cron
    missed_from = set_due(dsn, "hourly", "date_trunc('hour', now()) - interval '5 hours'")
    out = ok(cli("tick", "--dsn", dsn))
    now = db_now(dsn)
    [tick] = ticks(dsn, "hourly")  # one run: the latest tick
    hour = now.replace(minute=0, second=0, microsecond=0)
    assert tick in (hour, hour - timedelta(hours=1))  # (an hour may turn between two statements)
    assert tick - missed_from >= timedelta(hours=5)
    assert out.splitlines() == [
        f"missed schedule hourly: ticks from {iso(missed_from)} to before {iso(tick)} were not run",
        f"fired schedule hourly for {iso(tick)}: stamp {rows(dsn, 'SELECT id FROM workflows')[0][0]}",
    ]
    assert rows(dsn, "SELECT input_data FROM workflows")[0][0] == {"site": "b", "scheduled_at": iso(tick)}
    row = schedule_row(dsn, "hourly")
    assert row["next_tick_at"] > now and row["last_tick_at"] == tick
    assert row["last_run_id"] == rows(dsn, "SELECT id FROM workflows")[0][0]
    assert cli("tick", "--dsn", dsn).output == ""
    assert json.loads(ok(cli("tick", "--json", "--dsn", dsn))) == []


def test_backfill_runs_every_missed_tick_up_to_the_bound(dsn, cli):
    ok(cli("schedule", "add", "filled", "stamp", "* * * * *", "--backfill", "--dsn", dsn))
    start = set_due(dsn, "filled", "date_trunc('minute', now()) - interval '5 minutes'")
    fired = json.loads(ok(cli("tick", "--json", "--dsn", dsn)))
    found = ticks(dsn, "filled")
    assert found[0] == start
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(found))
    assert [f["scheduled_at"] for f in fired] == [iso(t) for t in found]
    assert 6 <= len(found) <= 7 and all(f["action"] == "fired" and f["id"] for f in fired)

    ok(cli("schedule", "add", "long", "stamp", "* * * * *", "--backfill", "--dsn", dsn))
    start = set_due(dsn, "long", "date_trunc('minute', now()) - interval '300 minutes'")
    fired = json.loads(ok(cli("tick", "--json", "--dsn", dsn)))
    found = ticks(dsn, "long")
    assert len(found) == schedules.BACKFILL_LIMIT  # the latest 100, never a storm
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(found))
    missed = [f for f in fired if f["action"] == "missed"]
    assert missed == [
        {
            "action": "missed",
            "schedule": "long",
            "first": iso(start),
            "until": iso(found[0]),
        }
    ]


def test_pause_resume_edit_trigger_and_delete(dsn, cli):
    ok(cli("schedule", "add", "s", "stamp", "0 0 1 1 *", "--dsn", dsn))  # yearly: no tick meanwhile
    # pause stops firing
    set_due(dsn, "s", "now() - interval '10 minutes'")
    assert ok(cli("schedule", "pause", "s", "--dsn", dsn)) == "paused schedule s\n"
    assert ok(cli("schedule", "pause", "s", "--dsn", dsn)) == "schedule s was paused already\n"
    assert cli("tick", "--dsn", dsn).output == "" and ticks(dsn, "s") == []
    # resume does not fire at once: the next tick is the first after now
    resumed = json.loads(ok(cli("schedule", "resume", "s", "--json", "--dsn", dsn)))
    assert resumed["paused"] is False and resumed["changed"] is True
    assert datetime.fromisoformat(resumed["next_tick_at"]) > db_now(dsn)
    assert cli("tick", "--dsn", dsn).output == "" and ticks(dsn, "s") == []
    assert ok(cli("schedule", "resume", "s", "--dsn", dsn)) == "schedule s was not paused\n"
    # an edit (add again) does not fire at once either, and keeps a pause
    set_due(dsn, "s", "now() - interval '10 minutes'")
    ok(cli("schedule", "pause", "s", "--dsn", dsn))
    edited = cli("schedule", "add", "s", "stamp", "0 12 1 */3 *", "--tz", "Asia/Tokyo", "--dsn", dsn)
    assert edited.stdout.startswith('replaced schedule s: stamp at "0 12 1 */3 *" Asia/Tokyo; next tick ')
    assert "it stays paused" in edited.stdout
    row = schedule_row(dsn, "s")
    assert (row["cron"], row["timezone"], row["paused"]) == ("0 12 1 */3 *", "Asia/Tokyo", True)
    tokyo = row["next_tick_at"].astimezone(ZoneInfo("Asia/Tokyo"))
    assert row["next_tick_at"] > db_now(dsn)
    assert (tokyo.month in (1, 4, 7, 10), tokyo.day, tokyo.hour, tokyo.minute) == (True, 1, 12, 0)
    ok(cli("schedule", "resume", "s", "--dsn", dsn))
    assert cli("tick", "--dsn", dsn).output == "" and ticks(dsn, "s") == []
    # trigger: one run now, also when paused; the ticks do not move
    ok(cli("schedule", "pause", "s", "--dsn", dsn))
    before = schedule_row(dsn, "s")
    wid = ok(cli("schedule", "trigger", "s", "--dsn", dsn)).strip()
    run = rows(
        dsn, "SELECT workflow_type, input_data, idempotency_key, created_at FROM workflows WHERE id = %s", wid
    )
    assert len(run) == 1 and run[0][0] == "stamp"
    assert run[0][1] == {"scheduled_at": iso(run[0][3])}
    assert run[0][2].startswith("schedule:s:trigger:")
    again = json.loads(ok(cli("schedule", "trigger", "s", "--json", "--dsn", dsn)))
    assert again["schedule"] == "s" and again["id"] != wid
    assert schedule_row(dsn, "s") == before
    # delete: gone, its runs stay
    assert ok(cli("schedule", "delete", "s", "--dsn", dsn)) == "deleted schedule s\n"
    assert schedule_row(dsn, "s") is None
    assert rows(dsn, "SELECT count(*) FROM workflows")[0][0] == 2
    assert json.loads(ok(cli("schedules", "--json", "--dsn", dsn))) == []


def test_concurrent_firers_store_each_tick_once(dsn):
    """Eight connections fire the same due schedules at the same moment, three rounds."""
    _due_schedules(dsn, 40, 3)
    results: list[list[schedules.Fired]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def fire() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                barrier.wait(timeout=30)
                results.append(schedules.fire_due(conn, batch=7).fired)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    fired = [f for batch in results for f in batch]
    assert all(f.id is not None for f in fired)  # no firer even tried a tick another stored
    assert len({(f.schedule, f.tick) for f in fired}) == len(fired) >= 120
    assert rows(dsn, "SELECT count(*) FROM workflows")[0][0] == len(fired)


def test_a_locked_schedule_is_skipped_not_waited_for(dsn, cli):
    _due_schedules(dsn, 2, 1)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM workflow_schedules WHERE name = 'race-1' FOR UPDATE")
        out = ok(cli("tick", "--dsn", dsn))
        assert out.count("fired schedule race-2 ") in (1, 2) and "race-1" not in out  # (a minute may turn)
        holder.rollback()
    assert ok(cli("tick", "--dsn", dsn)).count("fired schedule race-1 ") in (1, 2)


def test_the_schedules_table_and_json(dsn, cli):
    assert cli("schedules", "--dsn", dsn).stderr.startswith("wfctl: no schedules")
    assert json.loads(ok(cli("schedules", "--json", "--dsn", dsn))) == []
    added = json.loads(
        ok(
            cli(
                "schedule", "add", "report", "stamp", "0 9 * * MON-FRI", "--tz", "Europe/Berlin",
                "--input", '{"to": "ops"}', "--json", "--dsn", dsn,
            )
        )
    )  # fmt: skip
    assert added["created"] is True and added["input"] == {"to": "ops"} and added["source"] == "cli"
    ok(cli("schedule", "add", "fast", "stamp", "*/15 * * * * *", "--backfill", "--dsn", dsn))
    ok(cli("schedule", "pause", "fast", "--dsn", dsn))
    table = ok(cli("schedules", "--dsn", dsn))
    header = next(line for line in table.splitlines() if "name" in line)
    for column in ("name", "type", "cron", "zone", "next tick", "last tick", "state", "source"):
        assert column in header
    report = next(line for line in table.splitlines() if "report" in line)
    assert "0 9 * * MON-FRI" in report and "Europe/Berlin" in report and "active" in report
    assert " 09:00:00 CE" in report  # the next tick in the schedule's zone (CET or CEST)
    fast = next(line for line in table.splitlines() if "fast" in line)
    assert "paused, backfill" in fast and "*/15 * * * * *" in fast
    listed = json.loads(ok(cli("schedules", "--json", "--dsn", dsn)))
    assert [(s["name"], s["paused"], s["backfill"], s["timezone"]) for s in listed] == [
        ("fast", True, True, "UTC"),
        ("report", False, False, "Europe/Berlin"),
    ]
    nxt = datetime.fromisoformat(listed[1]["next_tick_at"])
    assert nxt.weekday() < 5 and nxt > db_now(dsn)


def test_an_unknown_type_is_a_warning_or_with_strict_a_refusal(dsn, cli):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types)"
            " VALUES ('h:1:abcdef', 'h', 1, 1, '{stamp}')"
        )
    warned = cli("schedule", "add", "s", "stmap", "* * * * *", "--dsn", dsn)
    assert warned.exit_code == 0 and "no worker has registered workflow type 'stmap'" in warned.stderr
    refused = cli("schedule", "add", "t", "stmap", "* * * * *", "--strict", "--dsn", dsn)
    assert refused.exit_code == 2 and "unknown workflow type 'stmap'" in refused.stderr
    assert [r["name"] for r in json.loads(ok(cli("schedules", "--json", "--dsn", dsn)))] == ["s"]


def test_deleting_a_code_schedule_warns_that_workers_add_it_again(dsn, cli):
    rows(
        dsn,
        "INSERT INTO workflow_schedules (name, workflow_type, cron, source, next_tick_at)"
        " VALUES ('nightly', 'nightly', '0 3 * * *', 'code', now() + interval '1 hour') RETURNING name",
    )
    gone = cli("schedule", "delete", "nightly", "--dsn", dsn)
    assert gone.exit_code == 0 and "the next worker that starts with it adds it again" in gone.stderr


@pytest.mark.parametrize("bad", ["0 61 * * * *", "* * * * *"])
def test_a_schedule_the_machine_cannot_evaluate_is_reported_and_postponed(dsn, cli, bad):
    """A row changed by hand (here: a minute 61, or a zone this machine does not know)."""
    zone = "Mars/Olympus" if bad == "* * * * *" else "UTC"
    rows(
        dsn,
        "INSERT INTO workflow_schedules (name, workflow_type, cron, timezone, next_tick_at)"
        " VALUES ('odd', 'stamp', %s, %s, now() - interval '1 minute') RETURNING name",
        bad,
        zone,
    )
    result = cli("tick", "--dsn", dsn)
    assert result.exit_code == 0 and result.stdout == ""
    assert "wfctl: warning: schedule odd cannot be fired: " in result.stderr
    assert schedule_row(dsn, "odd")["next_tick_at"] > db_now(dsn) + timedelta(minutes=59)
    assert rows(dsn, "SELECT count(*) FROM workflows")[0][0] == 0
