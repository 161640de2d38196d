"""The descriptions of wfctl/operations.py agree with the schema and with what reads them: every
coordination step has its SQL block and a play in MemoryJournal, every wait kind the schema
allows is described, and the texts ``show``, ``list`` and the worker's log give are the
description's."""

from __future__ import annotations

import re

import pytest

from wfctl import testing
from wfctl.cli import render_waits
from wfctl.context import MemoryJournal
from wfctl.operations import OPERATIONS, WAIT_KINDS, WAITS, WOKEN_BY_WRITE, Op, WaitKind, operation
from wfctl.queries import q


def test_every_step_is_described_once_with_a_block_that_calls_a_step_function():
    assert list(OPERATIONS) == list(Op)
    for op, described in OPERATIONS.items():
        assert described.op is op
        assert re.search(r"FROM wfctl_\w+_step\(", q(OPERATIONS[op].block)), described.block


def test_a_step_that_parks_says_in_which_wait_and_what_it_waits_for():
    parking = {op: d.parks for op, d in OPERATIONS.items() if d.parks is not None}
    assert parking == {Op.RECV: WaitKind.MESSAGE, Op.JOIN: WaitKind.CHILDREN}
    assert OPERATIONS[Op.RECV].parked_text({"topic": "go"}) == "a message on 'go'"
    assert OPERATIONS[Op.JOIN].parked_text({"ids": ["a", "b"]}) == "2 child workflow(s)"
    with pytest.raises(ValueError, match="does not park"):
        OPERATIONS[Op.SET_EVENT].parked_text({})


def test_an_unknown_step_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown coordination step 'teleport'"):
        operation("teleport")
    assert operation("recv") is OPERATIONS[Op.RECV]


def test_memory_journal_plays_every_step_and_is_the_one_of_wfctl_testing():
    assert MemoryJournal is testing.MemoryJournal
    assert set(testing._PLAYS) == set(Op)
    with pytest.raises(ValueError, match="unknown coordination step"):
        MemoryJournal().coordinate("teleport", 1, "x", {})  # type: ignore[arg-type]


def test_the_wait_kinds_are_the_ones_the_schema_allows(conn):
    row = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'workflows_wait_kind_check'"
    ).fetchone()
    assert row is not None
    assert sorted(re.findall(r"'(\w+)'::text", row[0])) == sorted(WAIT_KINDS)
    assert set(WOKEN_BY_WRITE) == {WaitKind.MESSAGE, WaitKind.CHILDREN}


@pytest.mark.parametrize(
    ("found", "shown"),
    [
        ({"kind": "sleep"}, "a sleep"),
        ({"kind": "message", "topic": "go"}, "a message on 'go'"),
        ({"kind": "children", "remaining": 3, "total": 1000}, "3 of 1000 child workflows"),
        ({"kind": "children", "remaining": 1, "total": 1}, "1 of 1 child workflow"),
        ({"kind": "nap"}, "nap"),  # a kind this version does not know: its name
    ],
)
def test_show_and_list_describe_a_wait_as_its_kind_says(found, shown):
    assert render_waits.what(found) == shown
    if found["kind"] in WAITS:
        assert WAITS[found["kind"]].shown(found) == shown
