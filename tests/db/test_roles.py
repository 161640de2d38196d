"""Roles by job, `wfctl init --grant-worker/--grant-submit/--grant-read ROLE`: each can do its
job and nothing more. A submit role submits, sends and reads a run's result by id (the Python
API and the CLI) through functions that run as the schema's owner and bound what it stores,
with no privilege on any table; a read role runs the reports and writes nothing; a worker
role runs a worker."""

from __future__ import annotations

import json

import psycopg
import pytest
from roles import Roles

import wfctl
from wfctl import validate


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
