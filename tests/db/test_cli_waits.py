"""What the CLI says about waiting workflows: `show` of a workflow
parked on a message, on children, on a sleep; `list --waiting`; `stats` never reports a waiting
workflow as stuck nor as backlog; the `metrics` gauge; `cancel` of a parent names the
descendants it cancelled; `recover` fails runs past their deadline (and `--dry-run` does not).
Real workers run tests/apps/waitflows.py; children of type ``idle`` are run by no worker."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

from helpers import rows
from report_rows import db_now, workflow
from support.cli_waits import line_of, show, show_json

import wfctl


def test_list_waiting_refuses_another_status_and_says_when_none_waits(cli, dsn: str) -> None:
    bad = cli("list", "--waiting", "--status", "running", "--dsn", dsn)
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        "wfctl: error: --waiting lists parked workflows, which are pending: it cannot be combined "
        "with --status running"
    ]
    wfctl.submit(dsn, "idle", {})  # pending, but waits for no wake-up
    empty = cli("list", "--waiting", "--status", "pending", "--dsn", dsn)
    assert empty.exit_code == 0 and empty.stdout == "" and empty.stderr == "wfctl: no workflows waiting\n"


def test_recover_fails_runs_past_their_deadline_and_dry_run_does_not(cli, dsn: str, conn) -> None:
    late = wfctl.submit(dsn, "idle", {}, timeout="1h")
    conn.execute("UPDATE workflows SET deadline_at = now() - interval '1 minute' WHERE id = %s", (late,))
    on_time = wfctl.submit(dsn, "idle", {}, timeout="1h")
    # running on a worker nobody knows, past its deadline: requeued, then failed
    lost = workflow(
        conn,
        db_now(conn),
        workflow_type="idle",
        status="running",
        lease_owner="gone:1:x",
        age=timedelta(minutes=10),
        deadline_at=db_now(conn) - timedelta(seconds=30),
        deadline_error="timed out after 5m",
    )

    def statuses() -> dict[str, str]:
        return {str(i): s for i, s in rows(dsn, "SELECT id, status FROM workflows")}

    before = statuses()
    dry = cli("recover", "--dry-run", "--dsn", dsn)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[0].startswith(f"would requeue {lost} idle attempt=2")
    assert dry.stdout.splitlines()[1:] == [
        f'would expire {late} idle: past its deadline, would fail with "timed out after 1h"',
        f'would expire {lost} idle: past its deadline, would fail with "timed out after 5m"',
    ]
    dry_json = json.loads(cli("recover", "--dry-run", "--json", "--dsn", dsn).stdout)
    assert [(r["action"], r["id"], r["dry_run"]) for r in dry_json] == [
        ("recovered", str(lost), True),
        ("expired", str(late), True),
        ("expired", str(lost), True),
    ]
    assert statuses() == before  # nothing changed

    done = cli("recover", "--json", "--dsn", dsn)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert sorted((r["action"], r["id"]) for r in report) == sorted(
        [("recovered", str(lost)), ("expired", str(late)), ("expired", str(lost))]
    )
    expired = {r["id"]: r for r in report if r["action"] == "expired"}
    assert expired[str(late)]["status"] == "failed" and expired[str(late)]["dry_run"] is False
    assert rows(
        dsn, "SELECT id, status, error_message FROM workflows ORDER BY error_message NULLS FIRST"
    ) == [
        (on_time, "pending", None),
        (late, "failed", "timed out after 1h"),
        (lost, "failed", "timed out after 5m"),
    ]
    again = cli("recover", "--dsn", dsn)
    assert again.exit_code == 0 and again.stdout == "" and again.stderr == ""


def test_recover_text_names_each_expired_run(cli, dsn: str, conn) -> None:
    late = wfctl.submit(dsn, "idle", {}, timeout="10m")
    conn.execute("UPDATE workflows SET deadline_at = now() - interval '1 second' WHERE id = %s", (late,))
    result = cli("recover", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.stdout == f'expired {late} idle: past its deadline, failed with "timed out after 10m"\n'


def test_show_draws_stored_topics_keys_and_values_as_text(cli, dsn: str, conn) -> None:
    """A wait, a message and an event written with SQL, as any client of the database could."""
    esc, title = "\x1b", "\x1b]0;pwned\x07"
    now = db_now(conn)
    wid = workflow(
        conn,
        now,
        workflow_type="[red]t[/red]",
        status="pending",
        wait_kind="message",
        wait_topic=f"top[/b]{esc}[2J",
        run_at=now + timedelta(hours=1),
        wait_deadline=now + timedelta(hours=1),
    )
    conn.execute(
        "INSERT INTO workflow_messages (workflow_id, topic) VALUES (%s, %s)", (wid, f"other[/i]{title}")
    )
    conn.execute(
        "INSERT INTO workflow_events (workflow_id, key, value) VALUES (%s, %s, %s)",
        (wid, "key[/k]\x9b", json.dumps({"v": f"[bold]{esc}[31m\x85"})),
    )
    out = show(cli, dsn, wid)
    assert "a message on 'top[/b]\\x1b[2J' (1 unconsumed message on other topics)" in out
    assert "other[/i]\\x1b]0;pwned\\x07" in out
    assert "key[/k]\\x9b" in out and '{"v": "[bold]\\u001b[31m\\u0085"}' in out
    assert not re.findall(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", out)
    listed = cli("list", "--waiting", "--dsn", dsn).stdout
    assert "top[/b]\\x1b[2J" in listed and not re.findall(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", listed)
    data = show_json(cli, dsn, wid)
    assert data["workflow"]["waiting_for"]["topic"] == f"top[/b]{esc}[2J"
    assert data["events"][0]["key"] == "key[/k]\x9b"


def test_show_of_an_unknown_id_is_one_line(cli, dsn: str) -> None:
    missing = uuid.uuid4()
    result = cli("show", str(missing), "--dsn", dsn)
    assert result.exit_code == 6 and result.stdout == ""
    assert result.stderr == f"wfctl: error: no workflow with id {missing}\n"


def test_a_finished_workflows_deadline_is_not_counted_down(cli, dsn: str, conn) -> None:
    wid = wfctl.submit(conn, "quick", None, timeout="1h")
    conn.execute("UPDATE workflows SET status = 'completed', finished_at = now() WHERE id = %s", (wid,))
    out = show(cli, dsn, wid)
    assert line_of(out, "deadline").endswith("(no longer applies: finished)"), out
