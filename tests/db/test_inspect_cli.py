"""The inspect commands through the CLI: stats, list, show, workers (tables, JSON, errors)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from report_rows import db_now, runner, step, worker, workflow

import wfctl as wfctl_api


@pytest.fixture
def wfctl(clean_env):
    return runner()


@pytest.fixture
def filled(conn):
    """A few workflows of two types, one stuck on a dead worker, with steps."""
    now = db_now(conn)
    worker(conn, now, "alive-host:10:aa")
    worker(conn, now, "dead-host:11:bb", silent=timedelta(minutes=20))
    done = workflow(conn, now, status="completed", run=timedelta(seconds=4), input_data='{"n": 1}')
    started = now - timedelta(hours=1) + timedelta(seconds=1)  # as workflow() sets it
    step(conn, done, 1, "validate", start=started + timedelta(seconds=0.1), seconds=0.2)
    step(conn, done, 2, "charge_card", start=started + timedelta(seconds=0.5), seconds=3)
    failed = workflow(conn, now, status="failed", error_message="card declined")
    stuck = workflow(conn, now, status="running", lease_owner="dead-host:11:bb", current_step=1)
    step(conn, stuck, 1, "validate", start=now - timedelta(minutes=50), seconds=0.1)
    workflow(conn, now, workflow_type='weird "type" \\ here', status="pending")
    return {"done": done, "failed": failed, "stuck": stuck}


def test_stats_tables(wfctl, dsn, filled):
    result = wfctl("stats", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Success rate by workflow type, created in the last 24h" in out
    assert "Stuck runs" in out and str(filled["stuck"]) in out and "2 (after 1 validate)" in out
    assert "Slowest steps" in out and "charge_card" in out
    # the only message: the pending workflow of a type no live worker runs
    weird = 'weird "type" \\ here'
    assert result.stderr == (
        f"wfctl: 1 pending workflow(s) of type {weird!r} wait for a worker: no live worker runs this type\n"
    )
    order_line = next(line for line in out.splitlines() if "│ order" in line)
    assert "33.3%" in order_line  # 1 of the 3 order workflows completed


def test_stats_json_keys_are_the_column_names(wfctl, dsn, filled):
    result = wfctl("stats", "--dsn", dsn, "--json", "--since", "2h", "--stale", "10m")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"since", "stale", "as_of", "workflow_type", "success_rate", "stuck", "slow_steps"}
    assert data["since"] == "2h" and data["since_seconds"] == 7200 and data["stale_seconds"] == 600
    order = next(r for r in data["success_rate"] if r["workflow_type"] == "order")
    assert {"workflow_type", "total", "completed", "failed", "running", "pending", "cancelled"} <= set(order)
    assert {"success_pct", "p50_seconds", "p95_seconds"} <= set(order)
    assert (order["total"], order["completed"], order["success_pct"]) == (3, 1, 33.3)
    assert [r["id"] for r in data["stuck"]] == [str(filled["stuck"])]
    assert data["stuck"][0]["step_name"] == "validate"
    slow = {r["step_name"]: r for r in data["slow_steps"]}
    assert slow["charge_card"]["avg_seconds"] == 3.0 and slow["charge_card"]["count"] == 1


def test_stats_empty_window_is_one_line_and_valid_json(wfctl, dsn):
    result = wfctl("stats", "--dsn", dsn)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == ["wfctl: no workflows were created in the last 24h"]
    data = json.loads(wfctl("stats", "--dsn", dsn, "--json").stdout)
    assert (data["success_rate"], data["stuck"], data["slow_steps"]) == ([], [], [])


def test_the_stuck_table_names_a_step_in_flight_that_an_earlier_try_named(wfctl, dsn, conn):
    now = db_now(conn)
    worker(conn, now, "dead-host:11:bb", silent=timedelta(minutes=20))
    stuck = workflow(conn, now, status="running", lease_owner="dead-host:11:bb", current_step=1)
    step(conn, stuck, 1, "validate", start=now - timedelta(minutes=50), seconds=0.1)
    step(conn, stuck, 2, "charge_card", start=now - timedelta(minutes=49), seconds=1, status="retrying")
    result = wfctl("stats", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if str(stuck)[:8] in line)
    assert "2 charge_card" in line and "after" not in line


def test_stats_stuck_runs_show_even_when_the_window_is_empty(wfctl, dsn, conn):
    now = db_now(conn)
    old = workflow(conn, now, status="running", lease_owner="gone:1:x", age=timedelta(days=3))
    result = wfctl("stats", "--dsn", dsn, "--since", "1h")
    assert result.exit_code == 0
    assert "no workflows were created in the last 1h" in result.stderr
    assert str(old) in result.stdout and "missing" in result.stdout


@pytest.mark.parametrize("option", ["--since", "--stale"])
def test_stats_bad_duration_is_one_line_exit_2(wfctl, dsn, option):
    result = wfctl("stats", "--dsn", dsn, option, "yesterday")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid" in lines[0] and "yesterday" in lines[0]


def test_list_table_and_json(wfctl, dsn, filled):
    table = wfctl("list", "--dsn", dsn)
    assert table.exit_code == 0, table.output
    assert str(filled["failed"]) in table.stdout and "card declined" in table.stdout
    data = json.loads(wfctl("list", "--dsn", dsn, "--json", "--status", "failed").stdout)
    assert [r["id"] for r in data] == [str(filled["failed"])]
    assert data[0]["error_message"] == "card declined" and data[0]["status"] == "failed"
    limited = json.loads(wfctl("list", "--dsn", dsn, "--json", "--limit", "2").stdout)
    assert len(limited) == 2
    weird = json.loads(wfctl("list", "--dsn", dsn, "--json", "--type", 'weird "type" \\ here').stdout)
    assert len(weird) == 1


def test_list_takes_several_statuses_separated_by_commas(wfctl, dsn, filled):
    both = json.loads(wfctl("list", "--dsn", dsn, "--json", "--status", "failed, running,failed").stdout)
    assert sorted(r["id"] for r in both) == sorted([str(filled["failed"]), str(filled["stuck"])])
    assert {r["status"] for r in both} == {"failed", "running"}
    assert [str(r.id) for r in wfctl_api.list(dsn, status="running,failed")] == [r["id"] for r in both]


def test_global_options_before_the_command(wfctl, dsn, filled):
    data = json.loads(wfctl("--dsn", dsn, "--json", "list", "--status", "running").stdout)
    assert [r["id"] for r in data] == [str(filled["stuck"])]


def test_list_empty(wfctl, dsn):
    result = wfctl("list", "--dsn", dsn)
    assert result.exit_code == 0 and result.stdout == "" and "no workflows match" in result.stderr
    assert json.loads(wfctl("list", "--dsn", dsn, "--json").stdout) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "done"], "pending, running, completed, failed, cancelled"),
        (["--status", "failed,done"], "invalid status 'done'"),
        (["--status", "waiting"], "a run parked on a wait is pending; list those with --waiting"),
        (["--since", "soon"], "soon"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_list_bad_options_are_one_line_exit_2(wfctl, dsn, args, expected):
    result = wfctl("list", "--dsn", dsn, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_show_table_with_timeline(wfctl, dsn, filled):
    result = wfctl("show", str(filled["done"]), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"Workflow {filled['done']}" in out
    assert '"n": 1' in out  # the input
    bars = [line for line in out.splitlines() if "█" in line]
    assert len(bars) == 2
    assert "validate" in bars[0] and "charge_card" in bars[1]
    # the second step starts later and lasts longer: its bar begins right of the first's and is wider
    first, second = (b[b.index("█") :] for b in bars)
    assert bars[1].index("█") > bars[0].index("█")
    assert second.count("█") > first.count("█")


def test_show_json(wfctl, dsn, filled):
    result = wfctl("show", str(filled["failed"]), "--json", "--dsn", dsn)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["workflow"]["id"] == str(filled["failed"])
    assert data["workflow"]["error_message"] == "card declined" and data["steps"] == []


def test_show_of_a_run_in_its_sleep_does_not_call_the_sleep_completed(wfctl, dsn, conn):
    now = db_now(conn)
    wake = now + timedelta(hours=2)
    parked = workflow(
        conn, now, status="pending", current_step=2, wait_kind="sleep", run_at=wake, started_at=now
    )
    step(conn, parked, 1, "charge", start=now - timedelta(minutes=5), seconds=1)
    step(
        conn,
        parked,
        2,
        "sleep",
        start=now - timedelta(minutes=4),
        seconds=0,
        output_data=json.dumps({"wake_at": wake.isoformat()}),
    )
    out = wfctl("show", str(parked), "--dsn", dsn).stdout
    sleep_line = next(line for line in out.splitlines() if "│ sleep " in line)
    assert "sleeping, until" in sleep_line and "completed" not in sleep_line
    assert json.loads(wfctl("show", str(parked), "--json", "--dsn", dsn).stdout)["steps"][1]["sleeping_until"]
    # once the sleep's time has passed it is over, whether or not a worker took the run yet
    conn.execute("UPDATE workflows SET run_at = now() - interval '1 second' WHERE id = %s", (parked,))
    out = wfctl("show", str(parked), "--dsn", dsn).stdout
    assert "completed" in next(line for line in out.splitlines() if "│ sleep " in line)


def test_show_of_a_run_that_goes_on_puts_an_earlier_attempts_error_under_it(wfctl, dsn, conn):
    now = db_now(conn)
    retrying = workflow(
        conn, now, status="pending", attempt=2, max_retries=3, error_message="ValueError: card declined"
    )
    conn.execute(
        "INSERT INTO workflow_attempts (workflow_id, workflow_created_at, lease_epoch, attempt, worker_id,"
        " started_at, ended_at, outcome, last_step, error)"
        " SELECT id, created_at, 1, 1, 'w:1:a', now() - interval '1 minute', now(), 'error', 0,"
        " 'ValueError: card declined' FROM workflows WHERE id = %s",
        (retrying,),
    )
    out = wfctl("show", str(retrying), "--dsn", dsn).stdout
    assert "Error of attempt 1 (the run goes on, in attempt 2)" in out
    assert "\nError\n" not in f"\n{out}"
    # finished: the error is the run's own
    conn.execute("UPDATE workflows SET status = 'failed', finished_at = now() WHERE id = %s", (retrying,))
    out = wfctl("show", str(retrying), "--dsn", dsn).stdout
    assert "\nError\n" in f"\n{out}" and "Error of attempt" not in out


def test_show_errors(wfctl, dsn):
    malformed = wfctl("show", "not-a-uuid", "--dsn", dsn)
    assert malformed.exit_code == 2 and "not a UUID" in malformed.stderr
    assert len(malformed.stderr.strip().splitlines()) == 1
    unknown = wfctl("show", "00000000-0000-0000-0000-000000000001", "--dsn", dsn)
    assert unknown.exit_code == 6 and "no workflow with id" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1 and unknown.stdout == ""


def test_workers(wfctl, dsn, filled):
    result = wfctl("workers", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    alive = next(line for line in lines if "alive-host:10:aa" in line)
    dead = next(line for line in lines if "dead-host:11:bb" in line)
    assert "live" in alive and "dead" in dead and "1/4" in dead
    data = json.loads(wfctl("workers", "--dsn", dsn, "--json", "--stale", "1h").stdout)
    assert [(w["id"], w["state"], w["running"]) for w in data] == [
        ("alive-host:10:aa", "live", 0),
        ("dead-host:11:bb", "live", 1),
    ]


def test_workers_none(wfctl, dsn):
    result = wfctl("workers", "--dsn", dsn)
    assert result.exit_code == 0 and result.stdout == "" and "no worker" in result.stderr
    assert json.loads(wfctl("workers", "--dsn", dsn, "--json").stdout) == []


def test_commands_refuse_a_database_without_the_schema(wfctl, empty_dsn):
    for command in ("stats", "list", "workers", "metrics"):
        result = wfctl(command, "--dsn", empty_dsn)
        assert result.exit_code == 5, (command, result.output)
