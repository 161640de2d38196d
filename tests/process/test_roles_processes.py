"""Roles by job, `wfctl init --grant-worker/--grant-submit/--grant-read ROLE`: each can do its job
and nothing more. A submit role submits, sends and reads a run's result by id (the Python API and
the CLI) through functions that run as the schema's owner and bound what it stores, with no
privilege on any table; a read role runs the reports and writes nothing; a worker role runs a
worker.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_roles.py.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import isolated_env, wfctl_command

import wfctl
from wfctl.coordination import send_json


def denied(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


def test_each_role_does_its_job(jobs, tmp_path):
    made, names = jobs
    submitter, reader, worker = (made.dsn_of(names[j]) for j in ("submit", "read", "worker"))

    # the submit role: the Python API, and the CLI
    wid = wfctl.submit(submitter, "approval", {"order": 7}, key="order-7")
    assert wfctl.submit(submitter, "approval", {"order": 8}, key="order-7") == wid
    first = send_json(submitter, wid, "approval", '{"ok": true}', key="m1")
    again = send_json(submitter, wid, "approval", "{}", key="m1")
    assert (first.created, again.created, again.id) == (True, False, first.id)
    with pytest.raises(wfctl.WaitTimeout):
        wfctl.result(submitter, wid, timeout=0.2)  # no worker yet
    env = isolated_env(WFCTL_DSN=submitter)
    cli_submit = wfctl_command("submit", "quick", '{"n": 21}', "--json", env=env)
    assert cli_submit.exit_code == 0, cli_submit.output
    quick = json.loads(cli_submit.stdout)["id"]

    # ... and nothing else
    for statement in (
        "SELECT * FROM workflows",
        "SELECT * FROM workflow_messages",
        f"UPDATE workflows SET status = 'completed', output_data = '1' WHERE id = '{wid}'",
        "INSERT INTO workflows (workflow_type) VALUES ('sneaky')",
        "DELETE FROM workflows",
    ):
        denied(submitter, statement)

    # the worker role runs them
    worker_env = isolated_env(WFCTL_DSN=worker, WFCTL_TEST_LOG=str(tmp_path / "effects.log"))
    burst = wfctl_command(
        "worker", "--app", "coordflows", "--burst", "--poll", "100ms", "--log-format", "plain", env=worker_env
    )
    assert burst.exit_code == 0, burst.output
    assert wfctl.result(submitter, quick, timeout=30) == {"n": 42}
    assert wfctl.result(submitter, wid, timeout=30) is not None
    assert wfctl.get_event(submitter, wid, "link")["url"] == "https://pay.example/7"
    with pytest.raises(wfctl.NotFound):
        wfctl.result(submitter, "00000000-0000-0000-0000-000000000000", timeout=0)
    waited = wfctl_command("wait", quick, "--json", env=env)
    assert waited.exit_code == 0, waited.output

    # the read role: reports, no writes
    read_env = isolated_env(WFCTL_DSN=reader)
    for command in (("stats", "--json"), ("list", "--json"), ("show", str(wid)), ("metrics",)):
        result = wfctl_command(*command, env=read_env)
        assert result.exit_code == 0, (command, result.output)
    listed = {w["id"] for w in json.loads(wfctl_command("list", "--json", env=read_env).stdout)}
    assert {str(wid), quick} <= listed
    refused = wfctl_command("submit", "quick", '{"n": 1}', env=read_env)
    assert refused.exit_code == 8 and "permission denied" in refused.stderr, refused.output
    for statement in (
        f"UPDATE workflows SET status = 'completed' WHERE id = '{wid}'",
        "INSERT INTO workflows (workflow_type) VALUES ('sneaky')",
        "DELETE FROM workflow_steps",
    ):
        denied(reader, statement)
