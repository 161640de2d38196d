"""The operator API (wfctl/operator.py): ``wfctl.get``, ``list``, ``cancel`` and ``retry`` say
and do what ``wfctl show``, ``list``, ``cancel`` and ``retry`` do, with the same errors, on a
DSN and on a connection inside the caller's transaction.

The runs are driven as a worker drives them (tests/support/run_states.py) under the schema's
fake clock, so every timestamp of a ``RunStatus`` is known: submitted at AT, claimed a minute
later (CLAIMED), ended or parked a minute after that (ENDED).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import fakeclock
import psycopg
import pytest
from helpers import rows
from psycopg.pq import TransactionStatus
from support import run_states as states

import wfctl
from wfctl.control import Cancelled, Retried

AT = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
CLAIMED, ENDED = AT + MINUTE, AT + 2 * MINUTE
OUTPUT = {"total": 12.5, "items": [1, 2], "note": "ok"}


@dataclass(frozen=True)
class Runs:
    pending: UUID
    running: UUID
    on_message: UUID
    asleep: UUID
    on_children: UUID
    children: tuple[UUID, ...]
    completed: UUID
    failed: UUID
    cancelled: UUID


def runs_in_each_state(dsn: str, conn: psycopg.Connection[Any]) -> Runs:
    """A run in each state, each with a key ``order-<state>`` (the children without one)."""
    fakeclock.stop(dsn, AT)
    pending = states.submitted(dsn, "ops-pending", "order-pending", timeout="1h", max_retries=4)
    running = states.submitted(dsn, "ops-running", "order-running")
    on_message = states.submitted(dsn, "ops-message", "order-message")
    asleep = states.submitted(dsn, "ops-sleep", "order-sleep")
    on_children = states.submitted(dsn, "ops-parent", "order-parent")
    completed = states.submitted(dsn, "ops-completed", "order-completed")
    failed = states.submitted(dsn, "ops-failed", "order-failed")
    cancelled = states.submitted(dsn, "ops-cancelled", "order-cancelled")
    fakeclock.advance(dsn, MINUTE)
    kinds = ("running", "message", "sleep", "parent", "completed", "failed")
    claimed = {kind: states.claim(conn, f"ops-{kind}") for kind in kinds}
    fakeclock.advance(dsn, MINUTE)
    states.step(conn, claimed["running"], 1, "reserved")
    states.on_a_message(conn, claimed["message"], "approval", timeout=600)
    states.asleep(conn, claimed["sleep"], wake=ENDED + timedelta(hours=1))
    children = states.on_children(conn, claimed["parent"], "ops-child", 2)
    states.completed(conn, claimed["completed"], OUTPUT)
    states.failed(conn, claimed["failed"], "ValueError: bad sku")
    assert wfctl.cancel(dsn, key="order-cancelled", reason="the customer left") == Cancelled(
        cancelled, "pending", None
    )
    return Runs(
        pending, running, on_message, asleep, on_children, tuple(children), completed, failed, cancelled
    )


def status(run: UUID, **fields: Any) -> wfctl.RunStatus:
    """The RunStatus of a run submitted at AT without options, claimed at CLAIMED by a worker
    whose policy gave it MAX_RETRIES, and last changed at ENDED; ``fields`` say what differs."""
    base: dict[str, Any] = {
        "id": run,
        "status": "running",
        "attempt": 1,
        "attempts_allowed": states.MAX_RETRIES + 1,
        "current_step": 0,
        "wait": None,
        "deadline_at": None,
        "error_message": None,
        "output": None,
        "created_at": AT,
        "started_at": CLAIMED,
        "finished_at": None,
        "updated_at": ENDED,
        "parent_id": None,
    }
    return wfctl.RunStatus(**{**base, **fields})


def test_get_gives_every_field_of_a_run_in_each_state(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    expected = [
        status(
            runs.pending, workflow_type="ops-pending", status="pending", attempts_allowed=5,
            deadline_at=AT + timedelta(hours=1), idempotency_key="order-pending", started_at=None,
            updated_at=AT,
        ),
        status(runs.running, workflow_type="ops-running", current_step=1, idempotency_key="order-running"),
        status(
            runs.on_message, workflow_type="ops-message", status="pending", idempotency_key="order-message",
            wait=wfctl.WaitStatus(
                kind="message", state="waiting", description="a message on 'approval'", topic="approval",
                remaining=None, total=None, until=ENDED + timedelta(seconds=600),
            ),
        ),
        status(
            runs.asleep, workflow_type="ops-sleep", status="pending", idempotency_key="order-sleep",
            wait=wfctl.WaitStatus(
                kind="sleep", state="waiting", description="a sleep", topic=None, remaining=None,
                total=None, until=ENDED + timedelta(hours=1),
            ),
        ),
        status(
            runs.on_children, workflow_type="ops-parent", status="pending", idempotency_key="order-parent",
            current_step=1,
            wait=wfctl.WaitStatus(
                kind="children", state="waiting", description="2 of 2 child workflows", topic=None,
                remaining=2, total=2, until=None,
            ),
        ),
        status(
            runs.children[0], workflow_type="ops-child", status="pending", attempts_allowed=None,
            idempotency_key=None, created_at=ENDED, started_at=None, parent_id=runs.on_children,
        ),
        status(
            runs.completed, workflow_type="ops-completed", status="completed", current_step=1,
            output=OUTPUT, idempotency_key="order-completed", finished_at=ENDED,
        ),
        status(
            runs.failed, workflow_type="ops-failed", status="failed", error_message="ValueError: bad sku",
            idempotency_key="order-failed", finished_at=ENDED,
        ),
        status(
            runs.cancelled, workflow_type="ops-cancelled", status="cancelled", attempts_allowed=None,
            error_message="the customer left", idempotency_key="order-cancelled", started_at=None,
            finished_at=ENDED,
        ),
    ]  # fmt: skip
    for want in expected:
        assert wfctl.get(dsn, want.id) == want
        assert wfctl.get(dsn, str(want.id)) == want  # the id as text too
        if want.idempotency_key is not None:
            assert wfctl.get(dsn, key=want.idempotency_key) == want
    # the output is what wfctl.result returns for the completed run
    assert wfctl.get(dsn, runs.completed).output == wfctl.result(dsn, key="order-completed", timeout=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        expected[0].status = "failed"  # type: ignore[misc]


def test_a_woken_run_says_so_until_a_worker_takes_it(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    wfctl.send(dsn, topic="approval", payload={"ok": True}, to_key="order-message")
    found = wfctl.get(dsn, runs.on_message)
    assert found.status == "pending" and found.wait is not None
    assert (found.wait.kind, found.wait.state, found.wait.topic) == ("message", "woken", "approval")


def test_list_gives_the_newest_first_with_the_filters_of_wfctl_list(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    everything = wfctl.list(dsn)
    assert len(everything) == 10
    order = rows(dsn, "SELECT id FROM workflows ORDER BY created_at DESC, id DESC")
    assert [r.id for r in everything] == [r[0] for r in order]
    assert {r.id for r in everything[:2]} == set(runs.children)  # created last
    # each row says what get says, less what only get reads
    for row in everything:
        whole = wfctl.get(dsn, row.id)
        assert dataclasses.asdict(row) == {
            f.name: dataclasses.asdict(whole)[f.name] for f in dataclasses.fields(wfctl.RunSummary)
        }
    assert [r.id for r in wfctl.list(dsn, status="failed")] == [runs.failed]
    assert [r.id for r in wfctl.list(dsn, type="ops-sleep")] == [runs.asleep]
    assert [r.id for r in wfctl.list(dsn, limit=3)] == [r.id for r in everything[:3]]
    keyed = wfctl.list(dsn, key="order-")
    assert len(keyed) == 8 and {r.idempotency_key for r in keyed} == {
        f"order-{s}"
        for s in ("pending", "running", "message", "sleep", "parent", "completed", "failed", "cancelled")
    }
    assert [r.id for r in wfctl.list(dsn, key="order-fail")] == [runs.failed]
    assert [r.id for r in wfctl.list(dsn, key="order-", status="pending", type="ops-sleep")] == [runs.asleep]
    assert wfctl.list(dsn, key="order-nothing") == []
    # since: a duration string, seconds or a timedelta, against the database's clock
    fakeclock.advance(dsn, timedelta(hours=2))
    late = states.submitted(dsn, "ops-late", "order-late")
    for since in ("1h", 3600, 3600.0, timedelta(hours=1)):
        assert [r.id for r in wfctl.list(dsn, since=since)] == [late], since
    assert len(wfctl.list(dsn, since="3h")) == 11


def test_cancel_and_retry_return_what_the_engine_did(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    done = wfctl.cancel(dsn, runs.on_children)
    # parked: pending, and the worker that parked it is still named
    assert (done.id, done.previous_status, done.worker) == (runs.on_children, "pending", states.WORKER)
    assert sorted(d.id for d in done.descendants) == sorted(runs.children)
    assert {(d.previous_status, d.depth) for d in done.descendants} == {("pending", 1)}
    assert wfctl.get(dsn, runs.children[0]).status == "cancelled"
    assert wfctl.retry(dsn, key="order-parent") == Retried(runs.on_children, kept_steps=1, descendants=2)
    assert wfctl.get(dsn, runs.children[0]).status == "pending"
    assert wfctl.cancel(dsn, key="order-running") == Cancelled(runs.running, "running", states.WORKER)
    # the worker's next write is fenced out; the run stays cancelled
    assert wfctl.get(dsn, runs.running).status == "cancelled"
    assert wfctl.retry(dsn, runs.failed, from_step=1) == Retried(runs.failed, kept_steps=0)
    retried = wfctl.get(dsn, runs.failed)
    assert (retried.status, retried.attempt, retried.error_message) == ("pending", 1, None)


# -- errors ---------------------------------------------------------------------------------------


def calls(dsn: str, wid: object = None, key: str | None = None) -> dict[str, Any]:
    """Each call of the API that names one run, by ``wid`` or by ``key``."""
    return {
        "get": lambda: wfctl.get(dsn, wid, key=key),
        "cancel": lambda: wfctl.cancel(dsn, wid, key=key),
        "retry": lambda: wfctl.retry(dsn, wid, key=key),
        "result": lambda: wfctl.result(dsn, wid, timeout=0, key=key),
        "send": lambda: wfctl.send(dsn, wid, "approval", {"ok": True}, to_key=key),
    }


def test_an_unknown_id_or_key_is_not_found(dsn):
    missing = uuid4()
    for call in calls(dsn, missing).values():
        with pytest.raises(wfctl.NotFound, match=str(missing)):
            call()
    for name, call in calls(dsn, key="no-such-order").items():
        with pytest.raises(wfctl.NotFound) as found:
            call()
        assert str(found.value) == "no workflow with idempotency key 'no-such-order'", name
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


def test_a_key_is_escaped_for_the_terminal_in_the_message(dsn):
    with pytest.raises(wfctl.NotFound) as found:
        wfctl.get(dsn, key="evil\x1b[2J\u202ekey\n")
    assert str(found.value) == "no workflow with idempotency key 'evil\\x1b[2J\\u202ekey\\x0a'"
    with pytest.raises(wfctl.NotFound) as long:
        wfctl.get(dsn, key="k" * 500)
    assert str(long.value) == f"no workflow with idempotency key '{'k' * 100}...' (500 characters)"


def test_an_id_and_a_key_together_or_neither_is_invalid_input(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    for call in calls(dsn, wid, key="order-1").values():
        with pytest.raises(wfctl.InvalidInput, match="not both"):
            call()
    for call in calls(dsn).values():
        with pytest.raises(wfctl.InvalidInput, match=r"^name the workflow by its id or by (to_)?key=$"):
            call()
    with pytest.raises(wfctl.InvalidInput, match="not a workflow id"):
        wfctl.get(dsn, "order-1")
    with pytest.raises(wfctl.InvalidInput, match="NUL"):
        wfctl.get(dsn, key="order\x00")
    assert wfctl.get(dsn, wid).status == "pending"  # nothing was done to it


def test_cancel_of_a_finished_run_and_retry_of_an_unfinished_one_are_invalid_state(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    before = rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id")
    with pytest.raises(wfctl.InvalidState, match="is already completed: there is nothing to cancel"):
        wfctl.cancel(dsn, runs.completed)
    with pytest.raises(wfctl.InvalidState, match="is already failed"):
        wfctl.cancel(dsn, key="order-failed")
    with pytest.raises(wfctl.InvalidState, match="is running: only a failed or cancelled workflow"):
        wfctl.retry(dsn, runs.running)
    with pytest.raises(wfctl.InvalidState, match="is pending"):
        wfctl.retry(dsn, key="order-pending")
    with pytest.raises(wfctl.InvalidState, match="is completed"):
        wfctl.retry(dsn, key="order-completed")
    with pytest.raises(wfctl.InvalidInput, match="counts from 1"):
        wfctl.retry(dsn, runs.failed, from_step=0)
    with pytest.raises(wfctl.InvalidInput, match="invalid status 'done'"):
        wfctl.list(dsn, status="done")
    with pytest.raises(wfctl.InvalidInput, match="invalid since 'soon'"):
        wfctl.list(dsn, since="soon")
    with pytest.raises(wfctl.InvalidInput, match="must be greater than zero"):
        wfctl.list(dsn, since=0)
    with pytest.raises(wfctl.InvalidInput, match=r"^limit must be a whole number from 1 to \d+, not 0$"):
        wfctl.list(dsn, limit=0)
    assert rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id") == before


def test_an_output_python_cannot_read_is_invalid_state_as_for_result(dsn, conn):
    wid = states.submitted(dsn, "ops", "order-deep")
    conn.execute(
        "UPDATE workflows SET status = 'completed', output_data = %s::jsonb WHERE id = %s",
        ("[" * 5000 + "]" * 5000, wid),
    )
    with pytest.raises(wfctl.InvalidState, match="cannot be decoded: it is nested deeper") as got:
        wfctl.get(dsn, key="order-deep")
    with pytest.raises(wfctl.InvalidState) as waited:
        wfctl.result(dsn, wid)
    assert str(got.value) == str(waited.value)
    assert [r.id for r in wfctl.list(dsn, key="order-deep")] == [wid]  # the list reads no output


# -- on a connection ------------------------------------------------------------------------------


def test_on_a_connection_everything_runs_in_the_callers_transaction(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    with psycopg.connect(dsn) as conn:
        with conn.transaction(force_rollback=True):
            mine = wfctl.submit(conn, "ops", {}, key="order-2")  # not committed: seen only here
            assert wfctl.get(conn, key="order-2").id == mine
            assert {r.id for r in wfctl.list(conn, key="order-")} == {wid, mine}
            assert wfctl.cancel(conn, key="order-1").id == wid
            assert wfctl.get(conn, wid).status == "cancelled"
            assert wfctl.retry(conn, wid) == Retried(wid, 0)
            assert wfctl.cancel(conn, wid, reason="changed my mind").previous_status == "pending"
            assert wfctl.get(dsn, wid).status == "pending"  # nothing committed meanwhile
        # the caller rolled back: all of it is gone
        assert conn.info.transaction_status == TransactionStatus.IDLE
    assert wfctl.get(dsn, wid).status == "pending"
    with pytest.raises(wfctl.NotFound):
        wfctl.get(dsn, key="order-2")


def test_an_error_inside_the_callers_transaction_leaves_it_usable(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    with psycopg.connect(dsn) as conn, conn.transaction(force_rollback=True):
        wfctl.cancel(conn, wid)
        with pytest.raises(wfctl.InvalidState, match="already cancelled"):
            wfctl.cancel(conn, key="order-1")
        with pytest.raises(wfctl.NotFound):
            wfctl.retry(conn, key="nobody")
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        assert wfctl.retry(conn, wid).id == wid  # the transaction goes on


def test_without_autocommit_cancel_leaves_the_transaction_to_the_caller_as_submit_does(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    with psycopg.connect(dsn) as conn:  # not in autocommit mode, no transaction open
        assert conn.info.transaction_status == TransactionStatus.IDLE
        wfctl.cancel(conn, wid)
        assert conn.info.transaction_status == TransactionStatus.INTRANS  # open, not committed
        assert wfctl.get(dsn, wid).status == "pending"
        conn.rollback()
        assert wfctl.get(dsn, wid).status == "pending"
        wfctl.cancel(conn, key="order-1")  # by key: the lookup opens the transaction
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        assert wfctl.get(dsn, wid).status == "pending"
        conn.commit()
        assert wfctl.get(dsn, wid).status == "cancelled"
        wfctl.retry(conn, wid)
        assert wfctl.get(dsn, wid).status == "cancelled"
        conn.commit()
    assert wfctl.get(dsn, wid).status == "pending"


def test_in_autocommit_mode_cancel_and_retry_commit_at_once(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        wfctl.cancel(conn, key="order-1")
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert wfctl.get(dsn, wid).status == "cancelled"
        wfctl.retry(conn, wid)
        assert wfctl.get(dsn, wid).status == "pending"


def test_reads_on_a_connection_leave_no_transaction_open(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    with psycopg.connect(dsn) as conn:
        assert wfctl.get(conn, key="order-1").id == wid
        assert [r.id for r in wfctl.list(conn, key="order")] == [wid]
        assert conn.info.transaction_status == TransactionStatus.IDLE
