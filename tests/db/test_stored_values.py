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

import pytest
from helpers import rows
from psycopg import errors
from support.stored_values import insert

import wfctl
from wfctl import validate


def test_result_and_get_event_say_they_cannot_decode_the_value(dsn, unreadable_run):
    with pytest.raises(wfctl.InvalidState, match=r"output of workflow .* cannot be decoded: it holds an int"):
        wfctl.result(dsn, unreadable_run)
    with pytest.raises(wfctl.InvalidState, match=r"event 'k' .* cannot be decoded: it is nested deeper"):
        wfctl.get_event(dsn, unreadable_run, "k")


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
