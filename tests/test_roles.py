"""Roles by job, `wfctl init --grant-worker/--grant-submit/--grant-read ROLE`: each can do its
job and nothing more. A submit role submits, sends and reads a run's result by id (the Python
API and the CLI) through functions that run as the schema's owner and bound what it stores,
with no privilege on any table; a read role runs the reports and writes nothing; a worker
role runs a worker."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from helpers import isolated_env, wfctl_command
from roles import Roles

import wfctl
from wfctl import validate
from wfctl.coordination import send_json


@pytest.fixture
def jobs(cli, dsn: str) -> Iterator[tuple[Roles, dict[str, str]]]:
    made = Roles(dsn)
    try:
        names = {job: made.create(f"wfctl_{job}") for job in ("worker", "submit", "read")}
        result = cli(
            "init", "--dsn", dsn, "--grant-worker", names["worker"],
            "--grant-submit", names["submit"], "--grant-read", names["read"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"granted role '{names['submit']}' submit, send and read a result by id" in result.stderr
        yield made, names
    finally:
        made.drop_all()


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


def test_grant_is_the_worker_grant(cli, dsn):
    made = Roles(dsn)
    try:
        role = made.create("wfctl_old")
        result = cli("init", "--dsn", dsn, "--grant", role, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["granted"] == [role] and data["granted_jobs"] == [{"role": role, "job": "worker"}]
        with psycopg.connect(made.dsn_of(role), autocommit=True) as conn:
            conn.execute("UPDATE workflows SET priority = 0 WHERE false")
    finally:
        made.drop_all()
    assert "--grant-worker" in cli("init", "--help").stdout


SUBMIT_ONE = "wfctl_submit_one('approval', %s::jsonb, NULL, NULL, 0, NULL, NULL, NULL, NULL)"
SUBMIT_MANY = "wfctl_submit_many('approval', ARRAY[%s::jsonb], NULL, 0, NULL, NULL, NULL, NULL)"


def test_the_submit_functions_bound_what_a_submit_role_stores(jobs):
    made, names = jobs
    submitter = made.dsn_of(names["submit"])
    with psycopg.connect(submitter, autocommit=True) as conn:
        assert conn.execute("SELECT wfctl_max_unconsumed_messages()").fetchone() == (
            validate.MAX_UNCONSUMED_MESSAGES,
        )
        wid = conn.execute("SELECT wfctl_submit('approval', '{}')").fetchone()[0]
        big = json.dumps("x" * validate.MAX_INPUT_BYTES)
        over = "over the limit of 1000000 bytes"
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=over):
            conn.execute("SELECT wfctl_send(%s, 't', %s::jsonb)", (wid, big))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=over):
            conn.execute("SELECT wfctl_submit('approval', %s::jsonb)", (big,))
        for call in (SUBMIT_ONE, SUBMIT_MANY):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=over):
                conn.execute(f"SELECT * FROM {call}", (big,))
        digits = '{"n": ' + "9" * 5000 + "}"
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="integer of 5000 digits"):
            conn.execute(f"SELECT * FROM {SUBMIT_ONE}", (digits,))
    # the largest inputs the library accepts fit
    zeros = [0] * (validate.MAX_INPUT_BYTES // 2 - 1)
    assert wfctl.submit(submitter, "approval", zeros)
    # a run takes at most so many unread messages
    with psycopg.connect(made.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_messages (workflow_id, topic) SELECT %s, 't' FROM generate_series(1, %s)",
            (wid, validate.MAX_UNCONSUMED_MESSAGES),
        )
    with pytest.raises(wfctl.InvalidState, match="messages that no recv took yet"):
        wfctl.send(submitter, wid, "t", {"one": "more"})
    with psycopg.connect(made.dsn, autocommit=True) as conn:
        held = conn.execute("SELECT count(*) FROM workflow_messages WHERE workflow_id = %s", [wid]).fetchone()
    assert held == (validate.MAX_UNCONSUMED_MESSAGES,)
