"""Schedules on real workers: one run per tick across four workers, the latest missed tick (or
every one, with --backfill) after downtime, `wfctl tick` racing the workers, code-declared
schedules, the schedules guide's sample. The tests that need only the database are in
tests/db/test_schedules.py.

WFCTL_SCHEDULE_SECONDS (default 20) is how long the every-second schedule runs in the first test;
run it for a minute by hand: ``WFCTL_SCHEDULE_SECONDS=60 pytest -s -k every_second``.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta

from helpers import APPS, HERE, isolated_env, rows, wait_for, wfctl_process
from markdown_blocks import blocks
from support.schedules import _due_schedules, db_now, iso, ok, schedule_row, ticks

APP = "scheduleflows"


SECONDS = int(os.environ.get("WFCTL_SCHEDULE_SECONDS", "20"))


ONE = timedelta(seconds=1)


def wait_until(dsn: str, instant: datetime, what: str) -> None:
    """Until the database's clock has passed ``instant``."""
    seconds = (instant - db_now(dsn)).total_seconds()
    wait_for(lambda: db_now(dsn) >= instant, timeout=max(seconds, 0) + 30, what=what)


def live_workers(dsn: str) -> int:
    return rows(dsn, "SELECT count(*) FROM workers WHERE stopped_at IS NULL")[0][0]


def gaps(found: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive ticks more than a second apart."""
    return [(a, b) for a, b in itertools.pairwise(found) if b - a > ONE]


def test_a_schedule_every_second_gives_one_run_per_tick_across_four_workers(dsn, workers, cli):
    for _ in range(4):
        workers.start(app=APP)
    wait_for(lambda: live_workers(dsn) == 4, what="four workers")
    ok(cli("schedule", "add", "every", "stamp", "* * * * * *", "--dsn", dsn))
    added = schedule_row(dsn, "every")["created_at"]
    wait_until(dsn, added + timedelta(seconds=SECONDS), f"{SECONDS} s of ticks")
    ok(cli("schedule", "pause", "every", "--dsn", dsn))
    paused = schedule_row(dsn, "every")["updated_at"]

    found = ticks(dsn, "every")
    # the ticks that fell while it was active: the whole seconds after the add, up to the pause
    expected = int(paused.timestamp()) - int(added.timestamp())
    twice = [t for t, n in Counter(found).items() if n > 1]
    late = rows(
        dsn,
        "SELECT max(late), percentile_cont(0.5) WITHIN GROUP (ORDER BY late)"
        " FROM (SELECT created_at - (input_data->>'scheduled_at')::timestamptz AS late FROM workflows"
        "       WHERE idempotency_key LIKE 'schedule:every:%') t",
    )[0]
    # which worker submitted each run (its log says so): all of them take part, none twice
    by_worker = [proc.log_path.read_text().count("submitted by schedule every ") for proc in workers.procs]
    print(
        f"\nevery second for {SECONDS}s on 4 workers: {len(found)} runs for {expected} ticks, "
        f"{len(twice)} ticks twice, gaps {gaps(found)}, lateness max {late[0]} median {late[1]}, "
        f"runs submitted per worker {by_worker}"
    )
    assert twice == []
    assert abs(len(found) - expected) <= 1, (len(found), expected)
    assert gaps(found) == [], "a tick was skipped while workers ran"
    assert found[0] - added <= timedelta(seconds=2) and paused - found[-1] <= timedelta(seconds=2)
    assert sum(by_worker) == len(found)
    # and the runs ran, each tick's step once
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM workflows WHERE status <> 'completed'")[0][0] == 0,
        what="the scheduled runs to complete",
    )
    stamped = Counter(tick for _, tick in workers.effects())
    assert sorted(stamped) == sorted(iso(t) for t in found)
    assert set(stamped.values()) == {1}


def test_after_downtime_the_latest_missed_tick_runs_once_or_every_tick_with_backfill(dsn, workers, cli):
    first = [workers.start(app=APP) for _ in range(2)]
    wait_for(lambda: live_workers(dsn) == 2, what="two workers")
    ok(cli("schedule", "add", "plain", "stamp", "* * * * * *", "--dsn", dsn))
    ok(cli("schedule", "add", "filled", "stamp", "* * * * * *", "--backfill", "--dsn", dsn))
    wait_for(lambda: len(ticks(dsn, "plain")) >= 2 and len(ticks(dsn, "filled")) >= 2, what="ticks")
    for proc in first:
        proc.kill()
        proc.wait(timeout=10)
    stopped = db_now(dsn)
    before = {name: ticks(dsn, name)[-1] for name in ("plain", "filled")}
    wait_until(dsn, stopped + timedelta(seconds=3), "three seconds without workers")
    assert {name: ticks(dsn, name)[-1] for name in ("plain", "filled")} == before, "fired with no worker"
    restarted = db_now(dsn)
    workers.start(app=APP)
    wait_for(
        lambda: all(t and t[-1] >= restarted + ONE for t in (ticks(dsn, "plain"), ticks(dsn, "filled"))),
        what="ticks after the restart",
    )
    ok(cli("schedule", "pause", "plain", "--dsn", dsn))
    ok(cli("schedule", "pause", "filled", "--dsn", dsn))

    plain = ticks(dsn, "plain")
    # the first run after the downtime is the catch-up: the latest tick due when the worker
    # came back (none of the ticks that fell while no worker ran, but that one)
    catch_up = min(t for t in plain if t > before["plain"])
    assert catch_up >= restarted - ONE
    assert catch_up - before["plain"] >= timedelta(seconds=3)
    assert len([t for t in plain if before["plain"] < t <= restarted]) <= 1
    filled = ticks(dsn, "filled")
    assert gaps(filled) == [], "backfill skipped a tick"
    assert len(filled) == len(set(filled))
    assert len([t for t in filled if before["filled"] < t <= restarted]) >= 3
    log = workers.procs[-1].log_path.read_text()
    assert "schedule plain: the ticks from" in log and "were not run" in log
    assert "schedule filled: the ticks from" not in log


def test_a_worker_declares_its_code_schedule_and_fires_it(dsn, workers):
    live = workers.start(app=APP, env={"WFCTL_TEST_SCHEDULE": "* * * * * *"})
    wait_for(lambda: len(ticks(dsn, "nightly")) >= 2, what="the code schedule to fire")
    live.send_signal(signal.SIGTERM)
    assert live.wait(timeout=30) == 0
    assert 'schedule nightly created: "* * * * * *" (declared in code)' in live.log_path.read_text()
    row = schedule_row(dsn, "nightly")
    assert (row["source"], row["workflow_type"], row["timezone"]) == ("code", "nightly", "UTC")
    assert gaps(ticks(dsn, "nightly")) == []


def test_tick_fires_each_tick_once_when_two_run_at_once(dsn):
    _due_schedules(dsn, 60, 5)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
    env["WFCTL_DSN"] = dsn
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "wfctl", "tick", "--json"],
            cwd=APPS,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    fired = [f for out, _ in outputs for f in json.loads(out)]
    keys = [(f["schedule"], f["scheduled_at"]) for f in fired]
    assert len(keys) == len(set(keys)) and all(f["id"] for f in fired)
    stored = rows(dsn, "SELECT count(*), count(DISTINCT idempotency_key) FROM workflows")[0]
    assert stored[0] == stored[1] == len(fired) >= 300


def test_the_schedules_guide_sample_runs_on_a_worker(dsn, cli, tmp_path):
    """The schedules guide's shop/digest.py on a real worker, and its session's commands."""
    guide = HERE.parent / "docs" / "guides" / "schedules.md"
    readme = [b for b in blocks(guide) if b.marker == "sample: file shop/digest.py"]
    session = [b for b in blocks(guide) if "wfctl schedule trigger" in b.text]
    assert len(readme) == 1 and len(session) == 1
    root = tmp_path / "project"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "digest.py").write_text(readme[0].text)
    log = tmp_path / "worker.log"
    args = ["worker", "--app", "shop.digest", "--heartbeat", "200ms", "--log-format", "plain"]
    proc = wfctl_process(args, env=isolated_env(WFCTL_DSN=dsn), log_path=log, cwd=root)
    try:
        wait_for(lambda: " ready " in log.read_text() or proc.poll() is not None, what="the worker")
        digest = schedule_row(dsn, "daily_digest")
        assert (digest["cron"], digest["timezone"], digest["source"]) == (
            "0 8 * * MON-FRI",
            "Europe/Berlin",
            "code",
        )
        lines = session[0].text.splitlines()
        for line in lines:
            if line.startswith("$ wfctl schedule add"):
                ok(cli(*shlex.split(line[len("$ wfctl ") :]), "--dsn", dsn))
        wid = ok(cli("schedule", "trigger", "acme-prices", "--dsn", dsn)).strip()
        waited = ok(cli("wait", wid, "--timeout", "30s", "--dsn", dsn))
        assert waited == lines[lines.index("$ wfctl wait $id") + 1] + "\n"
        wid = ok(cli("schedule", "trigger", "daily_digest", "--dsn", dsn)).strip()
        output = json.loads(ok(cli("wait", wid, "--timeout", "30s", "--dsn", dsn)))
        tick = rows(dsn, "SELECT input_data->>'scheduled_at' FROM workflows WHERE id = %s", wid)[0][0]
        assert output == {"day": tick[:10], "orders": 17}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
