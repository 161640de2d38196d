"""What the wait columns of ``workflows`` hold after each transition of a parked run
(wfctl/operations.py): a wait lives until its step is checkpointed, not only while the run is
parked.

Every transition that ends a wait (the message taken, the children's outcomes read, the
timeout reached, a ``retry --from-step`` that forgets the wait) leaves no wait column set. The
transitions that only end the parking (a claim, a recover, the run's deadline, a cancel, a
retry that keeps the wait) keep what the replay needs to meet the same wait at the same step
with the same deadline; the replay then ends it like any other.

The run is driven as a worker drives it (claims.claim, calls.execute, recovery, control), on
the real schema; the wait columns are whatever columns of ``workflows`` start with ``wait_``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from wfctl import control, recovery
from wfctl.operations import Op
from wfctl.worker import claims
from wfctl.worker.calls import Call, execute

TYPE = "waits"
POLICY = {TYPE: claims.Policy(max_retries=3)}


def wait_columns(conn: psycopg.Connection[Any]) -> list[str]:
    found = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'workflows' AND column_name LIKE 'wait\\_%%' ORDER BY column_name"
    ).fetchall()
    return [r[0] for r in found]


def set_columns(conn: psycopg.Connection[Any], wid: UUID) -> dict[str, Any]:
    """The wait columns of ``wid`` that are set."""
    columns = wait_columns(conn)
    row = conn.execute(f"SELECT {', '.join(columns)} FROM workflows WHERE id = %s", (wid,)).fetchone()
    assert row is not None
    return {c: v for c, v in zip(columns, row, strict=True) if v is not None}


def claim(conn: psycopg.Connection[Any], wid: UUID) -> claims.Claimed:
    [claimed] = [c for c in claims.claim(conn, "w1", POLICY, 10).claimed if c.id == wid]
    return claimed


def step(
    conn: psycopg.Connection[Any], c: claims.Claimed, op: Op, name: str, **params: Any
) -> tuple[str, Any]:
    call = Call(op, c.id, c.epoch, c.attempt, 1, name, datetime.now(UTC), params)
    execute(conn, call)
    return call.state or "", call.output


def recv(conn: psycopg.Connection[Any], c: claims.Claimed, timeout: float | None = 3600) -> tuple[str, Any]:
    return step(conn, c, Op.RECV, "recv:go", topic="go", timeout=timeout)


def parked_on_a_message(conn: psycopg.Connection[Any], deadline: bool = False) -> UUID:
    """A run parked in ``ctx.recv('go', timeout=3600)`` at step 1 (with a run deadline an hour
    ahead: ``deadline``)."""
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, deadline_at, deadline_error)"
        " VALUES (%s, CASE WHEN %s THEN now() + interval '1 hour' END, 'too slow') RETURNING id",
        (TYPE, deadline),
    ).fetchone()
    assert row is not None
    wid: UUID = row[0]
    assert recv(conn, claim(conn, wid))[0] == "parked"
    assert set(set_columns(conn, wid)) == {"wait_kind", "wait_step", "wait_deadline", "wait_topic"}
    return wid


def send(conn: psycopg.Connection[Any], wid: UUID) -> None:
    conn.execute("SELECT wfctl_send_message(%s, 'go', '\"hi\"'::jsonb, NULL)", (wid,))


def past_its_wait_deadline(conn: psycopg.Connection[Any], wid: UUID) -> None:
    """The wait's timeout passed (moved into the past rather than waited for)."""
    conn.execute(
        "UPDATE workflows SET wait_deadline = now() - interval '1 second', run_at = now() WHERE id = %s",
        (wid,),
    )


def test_the_wait_columns_are_the_ones_this_test_knows(conn):
    assert wait_columns(conn) == [
        "wait_deadline",
        "wait_ids",
        "wait_kind",
        "wait_remaining",
        "wait_step",
        "wait_topic",
    ]


def test_taking_the_message_ends_the_wait(conn):
    wid = parked_on_a_message(conn)
    send(conn, wid)
    assert recv(conn, claim(conn, wid)) == ("done", {"payload": "hi", "message": 1})
    assert set_columns(conn, wid) == {}


def test_the_timeout_ends_the_wait(conn):
    wid = parked_on_a_message(conn)
    past_its_wait_deadline(conn, wid)
    assert recv(conn, claim(conn, wid)) == ("done", {"payload": None, "timed_out": True})
    assert set_columns(conn, wid) == {}


@pytest.mark.parametrize("finished", [True, False], ids=["children-done", "children-timeout"])
def test_the_end_of_a_wait_for_children_leaves_no_wait_column(conn, finished):
    row = conn.execute("INSERT INTO workflows (workflow_type) VALUES (%s) RETURNING id", (TYPE,)).fetchone()
    assert row is not None
    parent: UUID = row[0]
    c = claim(conn, parent)
    state, ids = step(
        conn, c, Op.START_CHILDREN, "start_children:kid", type="kid", inputs=["1", "2"],
        keys=[None, None], priority=None, timeout=None, timeout_error=None, many=True, trace_context=None,
    )  # fmt: skip
    assert state == "done"
    conn.execute("UPDATE workflows SET current_step = 1 WHERE id = %s", (parent,))
    join = {"ids": ids, "timeout": 3600}
    call = Call(Op.JOIN, c.id, c.epoch, c.attempt, 2, "wait", datetime.now(UTC), join)
    execute(conn, call)
    assert call.state == "parked"
    assert set(set_columns(conn, parent)) == {
        "wait_kind", "wait_step", "wait_deadline", "wait_ids", "wait_remaining",
    }  # fmt: skip
    if finished:  # the children end: the last one wakes the parent
        conn.execute(
            "UPDATE workflows SET status = 'completed', output_data = '1' WHERE parent_id = %s", (parent,)
        )
    else:
        past_its_wait_deadline(conn, parent)
    c = claim(conn, parent)
    call = Call(Op.JOIN, c.id, c.epoch, c.attempt, 2, "wait", datetime.now(UTC), join)
    execute(conn, call)
    assert call.state == "done"
    assert ("children" in call.output) is finished and bool(call.output.get("timed_out")) is not finished
    assert set_columns(conn, parent) == {}


def test_a_claim_ends_the_parking_and_keeps_the_wait_with_its_deadline(conn):
    wid = parked_on_a_message(conn)
    deadline = set_columns(conn, wid)["wait_deadline"]
    conn.execute("UPDATE workflows SET run_at = now() WHERE id = %s", (wid,))  # woken
    c = claim(conn, wid)
    kept = set_columns(conn, wid)
    assert kept == {"wait_step": 1, "wait_deadline": deadline, "wait_topic": "go"}
    assert (c.parked_step, c.parked_name) == (1, "recv:go")  # the replay meets the same wait
    # the replay parks again with the deadline the wait first parked with, not a new one
    assert recv(conn, c, timeout=99999)[0] == "parked"
    assert set_columns(conn, wid)["wait_deadline"] == deadline


def test_a_recover_keeps_the_wait_and_the_replay_ends_it(conn):
    wid = parked_on_a_message(conn)
    send(conn, wid)
    claim(conn, wid)  # its worker (which has no row in workers: stale at once) dies here
    assert [r.id for r in recovery.recover(conn, None)] == [wid]
    assert set(set_columns(conn, wid)) == {"wait_step", "wait_deadline", "wait_topic"}
    assert recv(conn, claim(conn, wid))[0] == "done"
    assert set_columns(conn, wid) == {}


@pytest.mark.parametrize("end", ["cancel", "deadline"])
def test_a_retry_after_the_run_ended_in_its_wait_keeps_the_wait_and_the_replay_ends_it(conn, end):
    wid = parked_on_a_message(conn, deadline=end == "deadline")
    if end == "cancel":
        control.cancel(conn, wid)
    else:
        conn.execute("UPDATE workflows SET deadline_at = now() WHERE id = %s", (wid,))
        assert [e.id for e in recovery.expire(conn)] == [wid]
        assert "wait_kind" not in set_columns(conn, wid)  # failed: no longer parked
    assert {"wait_step", "wait_deadline", "wait_topic"} <= set(set_columns(conn, wid))
    control.retry(conn, wid)
    # which wait the run is in stays; its deadline starts afresh
    assert set_columns(conn, wid) == {"wait_topic": "go"}
    c = claim(conn, wid)
    assert (c.parked_step, c.parked_name) == (1, "recv:go")
    send(conn, wid)
    assert recv(conn, c)[0] == "done"
    assert set_columns(conn, wid) == {}


def test_a_retry_from_the_wait_step_forgets_the_wait(conn):
    wid = parked_on_a_message(conn)
    control.cancel(conn, wid)
    control.retry(conn, wid, from_step=1)
    assert set_columns(conn, wid) == {}
    assert claim(conn, wid).parked_step is None
