"""The flush statement's inputs: array literals built by hand must round-trip exactly, a step's
start time is stored to the microsecond, and a checkpoint followed by its completion in one
batch travels as one row."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from support import run_states as states

from wfctl.operations import WaitKind
from wfctl.words import HANDLED, RETRYING, STATUSES
from wfctl.worker.checkpoints import Request, _array, _text_array, merge

TRICKY = ['{"a": "b\\"c"}', None, "x,y", "back\\slash", '"q"', "NULL", "", " sp ", "{}", "ünï"]


def test_text_array_round_trips(conn):
    assert conn.execute("SELECT %s::text[]", (_text_array(TRICKY),)).fetchone()[0] == TRICKY


@pytest.mark.parametrize(
    ("values", "sql_type"),
    [
        ([uuid.uuid4(), None, uuid.uuid4()], "uuid[]"),
        ([1, None, 2**40], "bigint[]"),
        ([True, False, None], "bool[]"),
        ([0.25, None, 1e-9], "float8[]"),
        ([datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), None], "timestamptz[]"),
    ],
)
def test_plain_arrays_round_trip(conn, values, sql_type):
    assert conn.execute(f"SELECT %s::{sql_type}", (_array(values),)).fetchone()[0] == values


def test_the_words_the_flush_sends_unquoted_round_trip(conn):
    # statuses, step statuses, wait kinds and outcomes travel without quotes (checkpoints._write)
    words = [*STATUSES, HANDLED, RETRYING, *map(str, WaitKind), "parked", "error", "released", None]
    assert conn.execute("SELECT %s::text[]", (_array(words),)).fetchone()[0] == words


def test_json_texts_become_jsonb(conn):
    texts = ['{"ok": true}', "1", None, '"s"', "[1, 2]"]
    got = conn.execute("SELECT %s::jsonb[]", (_text_array(texts),)).fetchone()[0]
    assert got == [{"ok": True}, 1, None, "s", [1, 2]]


def test_checkpoint_and_completion_merge():
    a, b = uuid.uuid4(), uuid.uuid4()
    step_a = Request(a, 1, "step", 1, step=3, name="s3", output="3")
    step_b = Request(b, 1, "step", 1, step=1, name="s1", output="1")
    done_a = Request(a, 1, "complete", 1, result='{"ok": true}')
    rows = merge([step_a, step_b, done_a])
    assert rows == [(step_a, done_a), (step_b,)]
    # a completion whose checkpoint already went out travels alone
    assert merge([done_a]) == [(done_a,)]


@pytest.mark.parametrize(
    "started",
    [
        datetime(2026, 12, 7, 21, 3, 4, 567891, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2106, 2, 7, 6, 28, 16, 1, tzinfo=UTC),
    ],
)
def test_step_start_time_is_stored_to_the_microsecond(dsn, conn, started):
    states.submitted(dsn, "timed")
    c = states.claim(conn, "timed")
    states.written(conn, Request(c.id, c.epoch, "step", c.attempt, step=1, name="s", started=started))
    stored = conn.execute(
        "SELECT started_at FROM workflow_steps WHERE workflow_id = %s AND step_number = 1", (c.id,)
    ).fetchone()[0]
    assert stored == started
