"""`wfctl worker --burst` that finishes the job: it waits for work of its types
that becomes due within `--burst-wait` (10s by default: a retry backing off, a short sleep), and
on exit says what it leaves behind."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from helpers import rows

import wfctl
from wfctl.worker.burst import Outlook, leaving, wait_seconds


def status(dsn: str, wid: str) -> tuple:
    return rows(dsn, "SELECT status, attempt FROM workflows WHERE id = %s", wid)[0]


def test_burst_waits_for_a_retry_due_in_a_second_then_exits(workers, dsn):
    wid = str(wfctl.submit(dsn, "retry-in-1s", {}))
    began = time.monotonic()
    log = workers.run(app="burstflows")
    took = time.monotonic() - began
    assert status(dsn, wid) == ("completed", 2)  # the retry ran in the same burst
    assert "burst: no runnable work left; exiting" in log.splitlines()[-2]  # then 'stopped'
    assert "leaving" not in log
    retry = re.search(r"retry_in=([0-9.]+)s", log)
    assert retry is not None and 0.5 <= float(retry.group(1)) <= 1.0
    assert took >= 0.5


def test_burst_wait_zero_exits_at_once_and_says_what_waits(workers, dsn):
    wid = str(wfctl.submit(dsn, "retry-in-1s", {}))
    log = workers.run("--burst-wait", "0s", app="burstflows")
    assert status(dsn, wid) == ("pending", 2)
    line = next(line for line in log.splitlines() if "burst:" in line)
    assert "leaving 1 workflow(s) of its types wait beyond --burst-wait 0s (due at " in line


def test_burst_reports_what_it_leaves_behind_beyond_the_horizon(workers, dsn):
    napping = str(wfctl.submit(dsn, "nap", {"sleep": "1h"}))
    later = str(wfctl.submit(dsn, "nap", {"sleep": "1s"}, delay="2h"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('nobody-runs', '{}')")
    began = time.monotonic()
    log = workers.run("--burst-wait", "2s", app="burstflows")
    assert time.monotonic() - began < 30  # it did not wait an hour
    assert status(dsn, napping) == ("pending", 1) and status(dsn, later) == ("pending", 1)
    wake, start = rows(
        dsn,
        "SELECT (SELECT run_at FROM workflows WHERE id = %s), (SELECT run_at FROM workflows WHERE id = %s)",
        napping,
        later,
    )[0]
    line = next(line for line in log.splitlines() if "burst:" in line)
    first, last = (
        t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z") for t in (wake, start)
    )
    assert line.endswith(
        "burst: no runnable work left; exiting, leaving 2 workflow(s) of its types wait beyond "
        f"--burst-wait 2s (the first due at {first}, the last at {last}); and 1 pending workflow(s) "
        "of types it does not run (nobody-runs)"
    )


def test_burst_waits_for_a_short_sleep(workers, dsn):
    wid = str(wfctl.submit(dsn, "nap", {"sleep": "1s"}))
    log = workers.run(app="burstflows")
    assert status(dsn, wid) == ("completed", 1)
    assert log.count("parked") == 1 and "leaving" not in log
    assert [e for w, e in workers.effects() if w == wid] == ["before", "after"]


def test_outlook_decisions():
    moment = datetime(2026, 12, 2, 12, 3, 10, tzinfo=UTC)
    nothing = Outlook(None, 0, None, None, 0, 0, 0, None)
    assert wait_seconds(nothing) is None
    assert leaving(nothing, 10) == "burst: no runnable work left; exiting"
    soon = Outlook(0.7, 0, None, None, 0, 0, 0, None)
    assert wait_seconds(soon) == 0.7
    assert wait_seconds(Outlook(-0.2, 0, None, None, 0, 0, 0, None)) == 0.0  # due already
    three = Outlook(None, 3, moment, moment, 0, 0, 0, None)
    assert leaving(three, 10) == (
        "burst: no runnable work left; exiting, leaving 3 workflow(s) of its types wait beyond "
        "--burst-wait 10s (due at 2026-12-02T12:03:10Z)"
    )
    many = Outlook(None, 0, None, None, 0, 9, 7, ["a", "b", "c", "d", "e"])
    assert leaving(many, 600).endswith("9 pending workflow(s) of types it does not run (a, b, c, d, e, ...)")
    assert leaving(Outlook(None, 1, moment, moment + timedelta(hours=1), 0, 0, 0, None), 60).endswith(
        "--burst-wait 1m (due at 2026-12-02T12:03:10Z)"
    )
    parked = Outlook(None, 0, None, None, 4, 0, 0, None)
    assert leaving(parked, 10) == (
        "burst: no runnable work left; exiting, leaving 4 workflow(s) of its types parked on a "
        "message or on child workflows"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--burst-wait", "5s"], "wfctl: error: --burst-wait applies to --burst only\n"),
        (["--burst", "--burst-wait", "2h"], "wfctl: error: --burst-wait must be at most 60m\n"),
        (
            ["--burst", "--burst-wait", "soon"],
            "wfctl: error: invalid --burst-wait 'soon': use a number and a unit, such as 30s, 5m, 24h "
            "or 7d\n",
        ),
        (["--missed-beats", "1"], "wfctl: error: --missed-beats must be between 2 and 100\n"),
    ],
)
def test_bad_burst_and_missed_beats_options(workers, args, message):
    result = workers.wfctl("worker", "--app", "burstflows", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)
