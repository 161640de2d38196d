"""cancel, retry, prune: operator actions and their one-line errors."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from helpers import rows
from support.executions import execute
from support.manage import one

import wfctl
from wfctl import control
from wfctl.registry import Registry


def test_cancel_pending_then_again_is_an_error(cli, dsn):
    wid = str(wfctl.submit(dsn, "order", {}))
    result = cli("cancel", wid, "--dsn", dsn)
    assert result.exit_code == 0 and "cancelled" in result.stderr
    assert one(dsn, "SELECT status, finished_at IS NOT NULL FROM workflows WHERE id = %s", wid) == (
        "cancelled",
        True,
    )
    again = cli("cancel", wid, "--dsn", dsn)
    assert again.exit_code == 7 and "already cancelled" in again.stderr
    assert again.stderr.count("\n") == 1


def test_cancel_unknown_and_malformed_ids(cli, dsn):
    missing = cli("cancel", str(uuid.uuid4()), "--dsn", dsn)
    assert missing.exit_code == 6 and "no workflow" in missing.stderr
    bad = cli("cancel", "not-a-uuid", "--dsn", dsn)
    assert bad.exit_code == 2 and "invalid workflow id" in bad.stderr


def test_retry_from_step_forgets_later_checkpoints(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        wid = conn.execute(
            "INSERT INTO workflows (workflow_type, status, current_step) VALUES"
            " ('three', 'failed', 3) RETURNING id"
        ).fetchone()[0]
        for n in (1, 2, 3):
            conn.execute(
                "INSERT INTO workflow_steps"
                " (workflow_id, step_number, step_name, status, workflow_created_at)"
                " SELECT id, %s, 's', 'completed', created_at FROM workflows WHERE id = %s",
                (n, wid),
            )
    result = cli("retry", str(wid), "--from-step", "2", "--dsn", dsn, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["resumes_after_step"] == 1
    assert one(dsn, "SELECT array_agg(step_number) FROM workflow_steps WHERE workflow_id = %s", wid) == ([1],)
    assert one(dsn, "SELECT status, current_step FROM workflows WHERE id = %s", wid) == ("pending", 1)


class Declined(Exception):
    pass


def test_retry_keeps_a_handled_failure_as_history_when_it_is_the_last_step(dsn):
    """The run caught its only step's failure and then failed: the retried run's journal has
    the failure (current_step counts it), so the replay raises it without calling the step."""
    registry = Registry()
    tried: list[str] = []

    def reserve() -> str:
        tried.append("reserve")
        raise Declined("no stock")

    @wfctl.workflow("give-up", max_retries=0, registry=registry)
    def give_up(ctx: wfctl.Context, data: Any) -> str:
        try:
            return str(ctx.step("reserve", reserve))
        except wfctl.StepError as failed:
            raise RuntimeError(f"gave up: {failed.message}") from failed

    wid = wfctl.submit(dsn, "give-up", {})
    assert execute(dsn, registry).outcome == "failed"
    with psycopg.connect(dsn, autocommit=True) as conn:
        control.retry(conn, wid)
    assert rows(dsn, "SELECT status, attempt, current_step FROM workflows WHERE id = %s", wid) == [
        ("pending", 1, 1)
    ]
    replay = execute(dsn, registry)
    assert replay.claimed.journal[1].failure is not None
    assert replay.outcome == "failed" and tried == ["reserve"]  # raised again, not called again
    assert rows(dsn, "SELECT error_message FROM workflows WHERE id = %s", wid) == [
        ("RuntimeError: gave up: no stock",)
    ]


def test_retry_of_a_pending_or_running_one_is_an_error(cli, dsn):
    wid = str(wfctl.submit(dsn, "order", {}))
    result = cli("retry", wid, "--dsn", dsn)
    assert result.exit_code == 7 and "is pending" in result.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE workflows SET status = 'running'")
    result = cli("retry", wid, "--dsn", dsn)
    assert result.exit_code == 7 and "is running" in result.stderr
    assert one(dsn, "SELECT status FROM workflows") == ("running",)


def seed_old(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, finished_at, created_at)"
            " SELECT 'old', s, now() - interval '40 days', now() - interval '41 days'"
            " FROM unnest(ARRAY['completed', 'failed', 'cancelled']) s, generate_series(1, 1100)"
        )
        conn.execute(
            "INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, workflow_created_at)"
            " SELECT id, 1, 's', 'completed', created_at FROM workflows"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, finished_at) VALUES"
            " ('new', 'completed', now()), ('old-pending', 'pending', NULL)"
        )
        conn.execute(
            "UPDATE workflows SET updated_at = now() - interval '40 days' WHERE workflow_type = 'old-pending'"
        )


def test_prune_in_batches(cli, dsn):
    seed_old(dsn)
    dry = cli("prune", "--older-than", "30d", "--dry-run", "--dsn", dsn)
    assert dry.exit_code == 0 and dry.stdout.startswith("would remove 3300 workflow(s) and 3300 step(s)")
    assert one(dsn, "SELECT count(*) FROM workflows") == (3302,)
    only_failed = cli("prune", "--older-than", "30d", "--status", "failed", "--dsn", dsn, "--json")
    assert json.loads(only_failed.stdout)["workflows"] == 1100
    result = cli("prune", "--older-than", "30d", "--dsn", dsn)
    assert result.exit_code == 0 and result.stdout.startswith("removed 2200 workflow(s) and 2200 step(s)")
    assert one(dsn, "SELECT count(*) FROM workflow_steps") == (0,)
    assert one(dsn, "SELECT array_agg(workflow_type ORDER BY workflow_type) FROM workflows") == (
        ["new", "old-pending"],
    )
    quiet = cli("prune", "--older-than", "30d", "--dsn", dsn)
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")


def test_prune_refuses_unfinished_and_bad_words(cli, dsn):
    running = cli("prune", "--older-than", "30d", "--status", "running", "--dsn", dsn)
    assert running.exit_code == 2 and "invalid status running" in running.stderr
    typo = cli("prune", "--older-than", "30d", "--status", "complete", "--dsn", dsn)
    assert typo.exit_code == 2 and "complete" in typo.stderr
    bad = cli("prune", "--older-than", "thirty days", "--dsn", dsn)
    assert bad.exit_code == 2 and "invalid --older-than" in bad.stderr
