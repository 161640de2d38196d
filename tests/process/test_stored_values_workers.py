"""Stored JSON values that Python cannot read: an integer of more than 4300 digits, nesting deeper
than the recursion limit.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_stored_values.py.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from helpers import rows
from support.stored_values import HOSTILE, insert

import wfctl
from wfctl import validate

APP = "storedflows"


def outcome(dsn: str, wid: str) -> tuple[str, int, str | None]:
    found = rows(dsn, "SELECT status, attempt, error_message FROM workflows WHERE id = %s", wid)
    status, attempt, error = found[0]
    return status, attempt, error


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


def test_a_decimal_stored_as_a_too_long_integer_is_refused_by_the_library(workers):
    with pytest.raises(wfctl.InvalidInput, match="stored as an integer of 5001 digits"):
        validate.encode_input({"n": Decimal("1E+5000")})
    assert validate.encode_input({"n": Decimal("1E+4299")}) == '{"n": 1E+4299}'
    result = workers.wfctl("submit", "echo", '{"n": 1e5000}')
    assert result.exit_code == 2, result.output
    assert "stored as an integer of 5001 digits" in result.stderr
