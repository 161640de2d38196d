"""Stored JSON values that Python cannot read: an integer of more than 4300 digits, nesting
deeper than the recursion limit.

wfctl_submit and wfctl_send refuse them (and what else wfctl.submit refuses: more than 500
levels, more than 1,000,000 bytes), with a message naming the limit. A value stored another way
(plain SQL by a role with table privileges, or before these checks) fails the one run that
holds it, at once and without retries: never the worker, never the other runs of its claim.
The library and the CLI say in one line that they cannot decode it.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import psycopg
import pytest
from helpers import rows
from psycopg import errors

import wfctl
from wfctl import validate

APP = "storedflows"
LONG = "9" * 5000  # an integer Python will not read (more than 4300 digits)
DEEP = "[" * 5000 + "]" * 5000  # nested deeper than Python's recursion limit
HOSTILE = {
    "digits": (f'{{"n": {LONG}}}', "it holds an integer of 5000 digits, more than Python reads (4300)"),
    "depth": (DEEP, "it is nested deeper than Python reads"),
}


def insert(conn: psycopg.Connection, workflow_type: str, text: str) -> str:
    """A workflow inserted with plain SQL, its input the JSON ``text``."""
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, input_data) VALUES (%s, %s::jsonb) RETURNING id",
        (workflow_type, text),
    ).fetchone()
    assert row is not None
    return str(row[0])


def outcome(dsn: str, wid: str) -> tuple[str, int, str | None]:
    found = rows(dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid)
    status, attempt, error = found[0]
    return status, attempt, error


# -- the worker ------------------------------------------------------------------------------------


def test_an_input_the_worker_cannot_decode_fails_its_run_and_no_other(conn, dsn, workers):
    innocent = [insert(conn, "echo", json.dumps({"i": i})) for i in range(3)]
    bad = {kind: insert(conn, "echo", text) for kind, (text, _) in HOSTILE.items()}
    innocent += [insert(conn, "echo", json.dumps({"i": i})) for i in range(3, 6)]
    log = workers.run(app=APP)  # exits 0: asserted by run()
    for kind, wid in bad.items():
        status, attempt, error = outcome(dsn, wid)
        assert (status, attempt) == ("failed", 1), (kind, status, attempt, error)  # no retries
        assert error == f"input cannot be decoded: {HOSTILE[kind][1]}"
        assert f"{wid} input cannot be decoded" in log
    for wid in innocent:
        assert outcome(dsn, wid) == ("completed", 1, None)
    assert "internal error" not in log


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_message_the_worker_cannot_decode_fails_the_run_that_receives_it(conn, dsn, workers, kind):
    wid = insert(conn, "listener", "null")
    workers.run(app=APP)  # parks in ctx.recv("answer")
    assert rows(dsn, "SELECT status, wait_kind FROM workflows WHERE id = %s", wid) == [("pending", "message")]
    neighbour = insert(conn, "echo", '{"i": 1}')
    conn.execute(  # wfctl_send refuses it: stored with plain SQL (its trigger wakes the run)
        "INSERT INTO workflow_messages (workflow_id, topic, payload) VALUES (%s, 'answer', %s::jsonb)",
        (wid, HOSTILE[kind][0]),
    )
    workers.run(app=APP)
    status, attempt, error = outcome(dsn, wid)
    assert (status, attempt) == ("failed", 1)
    assert error == f"the message received on 'answer' cannot be decoded: {HOSTILE[kind][1]}"
    assert outcome(dsn, neighbour) == ("completed", 1, None)


def test_a_child_output_the_worker_cannot_decode_fails_the_parent_that_waits(conn, dsn, workers):
    wid = insert(conn, "parent", "null")
    workers.run("--types", "parent", app=APP)  # starts its child, parks waiting for it
    (child,) = rows(dsn, "SELECT id FROM workflows WHERE parent_id = %s", wid)[0]
    conn.execute(  # the child "completes" with an output no worker could have written
        "UPDATE workflows SET status = 'completed', output_data = %s::jsonb, finished_at = now() "
        "WHERE id = %s",
        (HOSTILE["digits"][0], child),
    )
    workers.run("--types", "parent", app=APP)
    status, attempt, error = outcome(dsn, wid)
    assert (status, attempt) == ("failed", 1)
    assert error == f"the output of a child workflow cannot be decoded: {HOSTILE['digits'][1]}"


def test_a_checkpoint_the_worker_cannot_decode_fails_the_replay(conn, dsn, workers):
    wid = insert(conn, "listener", "null")
    workers.run(app=APP)  # checkpoints step 1 ("first"), parks in ctx.recv("answer")
    conn.execute(
        "UPDATE workflow_steps SET output_data = %s::jsonb WHERE workflow_id = %s AND step_number = 1",
        (HOSTILE["depth"][0], wid),
    )
    conn.execute("SELECT wfctl_send(%s, 'answer', '42')", (wid,))
    log = workers.run(app=APP)
    status, attempt, error = outcome(dsn, wid)
    assert (status, attempt) == ("failed", 1)
    assert error == f"the output of a completed step cannot be decoded: {HOSTILE['depth'][1]}"
    assert "internal error" not in log


# -- the library and the CLI ------------------------------------------------------------------------


@pytest.fixture
def unreadable_run(conn) -> str:
    """A completed workflow whose output and event 'k' are values Python cannot read."""
    wid = insert(conn, "echo", "null")
    conn.execute(
        "UPDATE workflows SET status = 'completed', output_data = %s::jsonb, finished_at = now() "
        "WHERE id = %s",
        (HOSTILE["digits"][0], wid),
    )
    conn.execute(
        "INSERT INTO workflow_events (workflow_id, key, value, step_number) VALUES (%s, 'k', %s::jsonb, 1)",
        (wid, HOSTILE["depth"][0]),
    )
    return wid


def test_result_and_get_event_say_they_cannot_decode_the_value(dsn, unreadable_run):
    with pytest.raises(wfctl.InvalidState, match=r"output of workflow .* cannot be decoded: it holds an int"):
        wfctl.result(dsn, unreadable_run)
    with pytest.raises(wfctl.InvalidState, match=r"event 'k' .* cannot be decoded: it is nested deeper"):
        wfctl.get_event(dsn, unreadable_run, "k")


def test_wait_and_event_commands_give_one_line_and_exit_7(workers, unreadable_run):
    for args, said in (
        (("wait", unreadable_run), "it holds an integer of 5000 digits"),
        (("event", unreadable_run, "k"), "it is nested deeper than Python reads"),
    ):
        result = workers.wfctl(*args)
        assert result.exit_code == 7, result.output
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1, result.stderr
        assert "cannot be decoded" in result.stderr and said in result.stderr


def test_schedules_show_a_placeholder_for_an_input_they_cannot_decode(conn, workers):
    conn.execute(
        "INSERT INTO workflow_schedules (name, workflow_type, cron, input, next_tick_at) "
        "VALUES ('nightly', 'echo', '0 3 * * *', %s::jsonb, now() + interval '1 day')",
        (HOSTILE["digits"][0],),
    )
    table = workers.wfctl("schedules")
    assert table.exit_code == 0, table.output
    assert "nightly" in table.stdout
    listed = workers.wfctl("--json", "schedules")
    assert listed.exit_code == 0, listed.output
    (schedule,) = json.loads(listed.stdout)
    assert schedule["input"].startswith("(a stored value that cannot be decoded: it holds an integer of 5000")


# -- the SQL functions refuse what the library refuses ----------------------------------------------------

REFUSED = {
    "an integer of 4301 digits": ("9" * 4301, "holds an integer of 4301 digits, more than the 4300"),
    "a negative one": ("-" + "9" * 4301, "holds an integer of 4301 digits"),
    "a number stored as 5001 digits": ("1e5000", "holds an integer of 5001 digits"),
    "501 levels": ("[" * 501 + "]" * 501, "is nested more than 500 levels deep (the limit)"),
    "501 levels of objects": ('{"a":' * 501 + "1" + "}" * 501, "is nested more than 500 levels deep"),
    "1,000,001 bytes": (json.dumps("x" * 999_999), "is 1000001 bytes, over the limit of 1000000 bytes"),
    "1,000,001 bytes of items": (
        json.dumps([*[1] * 400_000, "x" * 199_997]),  # 1,400,001 bytes as jsonb writes it
        "is 1000001 bytes, over the limit of 1000000 bytes",
    ),
    "far more bytes": (
        json.dumps(["xx"] * 600_000),  # 3,600,000 bytes as jsonb writes it
        "is more than 2400000 bytes, over the limit of 1000000 bytes",
    ),
}
TAKEN = {
    "an integer of 4300 digits": "9" * 4300,
    "a long number with a fraction": "9" * 5000 + ".5",
    "500 levels": "[" * 500 + "]" * 500,
    "1,000,000 bytes": json.dumps("x" * 999_998),
    "1,000,000 bytes of items": json.dumps([*[1] * 400_000, "x" * 199_996]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_submit_and_send_from_sql_refuse_what_the_library_refuses(conn, dsn, case):
    text, said = REFUSED[case]
    with pytest.raises(errors.InvalidParameterValue, match="^" + re.escape(f"workflow input {said}")):
        conn.execute("SELECT wfctl_submit('echo', %s::jsonb)", (text,))
    target = insert(conn, "listener", "null")
    with pytest.raises(errors.InvalidParameterValue, match="^" + re.escape(f"message payload {said}")):
        conn.execute("SELECT wfctl_send(%s, 'answer', %s::jsonb)", (target, text))
    assert rows(dsn, "SELECT count(*) FROM workflows") == [(1,)]  # the target alone
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]
    with pytest.raises(wfctl.InvalidInput):  # the library refuses the same value
        validate.encode_input(validate.load_json(text, "workflow input"))


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_submit_and_send_from_sql_take_values_at_the_limits(conn, case):
    text = TAKEN[case]
    validate.encode_input(validate.load_json(text, "workflow input"))  # the library takes it too
    conn.execute("SELECT wfctl_submit('echo', %s::jsonb)", (text,))
    target = insert(conn, "listener", "null")
    conn.execute("SELECT wfctl_send(%s, 'answer', %s::jsonb)", (target, text))


def test_a_decimal_stored_as_a_too_long_integer_is_refused_by_the_library(workers):
    with pytest.raises(wfctl.InvalidInput, match="stored as an integer of 5001 digits"):
        validate.encode_input({"n": Decimal("1E+5000")})
    assert validate.encode_input({"n": Decimal("1E+4299")}) == '{"n": 1E+4299}'
    result = workers.wfctl("submit", "echo", '{"n": 1e5000}')
    assert result.exit_code == 2, result.output
    assert "stored as an integer of 5001 digits" in result.stderr
