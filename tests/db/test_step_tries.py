"""The rows of ``@wfctl.step``'s tries (migration 0024), written and read back by the worker's
own code in this process: a claim, an ``Execution`` whose writes are flushed at once, and the
reports. A long backoff parks the run with a ``retrying`` step row (the tries made, the last
error, the next try's time) that the next claim hands back, so that the replay goes on counting;
``wfctl show`` lists the tries; ``retry`` starts them afresh; a worker's heartbeat carries its
abandoned calls to ``wfctl workers``. (The rules without a database: tests/unit/
test_step_options.py; on real workers: tests/process/test_step_options_workers.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeclock
import psycopg
import pytest
from helpers import rows
from support import executions

import wfctl
from wfctl import control, reports
from wfctl.journal import HandledFailure, Retrying
from wfctl.registry import Registry
from wfctl.worker import claims, heartbeat
from wfctl.worker.execution import Execution
from wfctl.worker.transactions import TransactionPool

AT = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
calls: list[str] = []


class Declined(Exception):
    pass


@wfctl.step(retries=2, retry_base="1m", retry_cap="1h")
def charge(order: str) -> str:
    calls.append(f"charge {order}")
    if order.startswith("bad"):
        raise Declined(f"card declined ({len(calls)})")
    if order == "once-bad" and calls.count("charge once-bad") == 1:
        raise Declined("first try declined")
    return f"charged {order}"


@wfctl.step(retries=2, retry_base="1m")
def debit(conn: psycopg.Connection[Any]) -> int:
    calls.append("debit")
    if calls.count("debit") == 1:
        raise Declined("locked")
    return 90


REGISTRY = Registry()


@wfctl.workflow("pay", max_retries=2, registry=REGISTRY)
def pay(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    return ctx.step("charge", charge, data["order"])


@wfctl.workflow("pay-in-tx", max_retries=0, registry=REGISTRY)
def pay_in_tx(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.transaction("debit", debit)


@pytest.fixture(autouse=True)
def fresh_calls() -> Iterator[None]:
    calls.clear()
    yield
    calls.clear()


def execute(dsn: str, *, pool: TransactionPool | None = None) -> Execution:
    return executions.execute(dsn, REGISTRY, pool=pool)


def step_rows(dsn: str, wid: object) -> list[tuple[Any, ...]]:
    return rows(
        dsn,
        "SELECT step_number, status, tries, attempt, error_message, output_data FROM workflow_steps"
        " WHERE workflow_id = %s ORDER BY step_number",
        wid,
    )


def test_a_long_backoff_parks_with_a_record_the_next_claim_goes_on_counting_from(dsn, conn):
    fakeclock.stop(dsn, AT)
    wid = wfctl.submit(dsn, "pay", {"order": "bad-1"})
    first = execute(dsn)
    assert first.outcome == "parked" and calls == ["charge bad-1"]
    [(number, status, tries, attempt, error, output)] = step_rows(dsn, wid)
    assert (number, status, tries, attempt, error) == (1, "retrying", 1, 1, "Declined: card declined (1)")
    due = datetime.fromisoformat(output["next_try_at"])
    assert output == {
        "tries": 1,
        "type": "Declined",
        "message": "card declined (1)",
        "next_try_at": due.isoformat(),
    }
    # 1m * 2**0 with jitter, from the database's clock (the execution's follows it from the claim)
    assert AT + timedelta(seconds=30) <= due <= AT + timedelta(seconds=61)
    # pending until the next try, waiting for nothing but its time (as a failed attempt's backoff)
    assert rows(
        dsn, "SELECT status, attempt, run_at, wait_kind, current_step FROM workflows WHERE id = %s", wid
    ) == [("pending", 1, due, None, 1)]
    assert rows(dsn, "SELECT outcome FROM workflow_attempts WHERE workflow_id = %s", wid) == [("parked",)]
    # not claimable before the next try; then the claim hands the record back with the journal
    assert claims.claim(conn, "tester", {"pay": claims.Policy(2)}, 1, claims.Frontier()).claimed == []
    fakeclock.advance(dsn, timedelta(minutes=2))
    second = execute(dsn)  # try 2 fails: parked again, the count goes on
    assert second.claimed.journal[1].retrying == Retrying(
        1, HandledFailure("Declined", "card declined (1)"), attempt=1, next_at=due
    )
    assert second.outcome == "parked" and [r[1:4] for r in step_rows(dsn, wid)] == [("retrying", 2, 1)]
    fakeclock.advance(dsn, timedelta(minutes=5))
    third = execute(dsn)  # try 3, the last: the step error is uncaught, the attempt fails
    assert third.outcome == "retry"
    assert calls == ["charge bad-1"] * 3  # retries + 1, never more
    assert [r[1:5] for r in step_rows(dsn, wid)] == [("failed", 3, 1, "Declined: card declined (3)")]
    # the next attempt tries afresh (the failed row is not in its journal)
    conn.execute('UPDATE workflows SET input_data = \'{"order": "once-bad"}\' WHERE id = %s', (wid,))
    fakeclock.advance(dsn, timedelta(hours=1))
    fourth = execute(dsn)
    assert fourth.outcome == "parked" and [r[1:4] for r in step_rows(dsn, wid)] == [("retrying", 1, 2)]
    fakeclock.advance(dsn, timedelta(hours=1))
    assert execute(dsn).outcome == "completed"
    assert [r[1:4] for r in step_rows(dsn, wid)] == [("completed", 2, 2)]
    assert wfctl.result(dsn, wid, timeout=1) == "charged once-bad"


def test_show_lists_the_tries_and_the_next_try_of_a_retrying_step(dsn):
    fakeclock.stop(dsn, AT)
    wid = wfctl.submit(dsn, "pay", {"order": "bad-2"})
    execute(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [step] = reports.show_workflow(conn, wid).steps
    due = datetime.fromisoformat(step["output_data"]["next_try_at"])
    assert (step["status"], step["tries"], step["next_try_at"]) == ("retrying", 1, due)


def test_a_transactional_step_records_its_tries_in_its_transaction(dsn):
    wid = wfctl.submit(dsn, "pay-in-tx", {})
    fakeclock.stop(dsn, AT)
    pool = TransactionPool(dsn, 1)
    try:
        assert execute(dsn, pool=pool).outcome == "parked"  # a 1m backoff: parked, not waited
        assert [r[1:3] for r in step_rows(dsn, wid)] == [("retrying", 1)]
        fakeclock.advance(dsn, timedelta(minutes=2))
        assert execute(dsn, pool=pool).outcome == "completed"
    finally:
        pool.close()
    assert [r[1:3] for r in step_rows(dsn, wid)] == [("completed", 2)]
    assert calls == ["debit", "debit"]


def test_retry_starts_the_tries_afresh(dsn, conn):
    """The record of a step's tries counts within an attempt; a retried run starts at attempt 1,
    so `wfctl retry` removes it (a record of attempt 1 would otherwise count again)."""
    fakeclock.stop(dsn, AT)
    wid = wfctl.submit(dsn, "pay", {"order": "bad-3"})
    assert execute(dsn).outcome == "parked"
    assert [r[1:4] for r in step_rows(dsn, wid)] == [("retrying", 1, 1)]
    control.cancel(conn, wid)
    control.retry(conn, wid)
    assert step_rows(dsn, wid) == []
    assert rows(dsn, "SELECT status, attempt, current_step FROM workflows WHERE id = %s", wid) == [
        ("pending", 1, 0)
    ]
    replay = execute(dsn)
    assert replay.claimed.journal == {} and replay.outcome == "parked"
    assert [r[1:4] for r in step_rows(dsn, wid)] == [("retrying", 1, 1)]  # counted afresh


def test_the_heartbeat_carries_the_abandoned_calls_to_the_workers_report(dsn, conn):
    me = heartbeat.Identity.new()
    heartbeat.beat(conn, me, 4, ["pay"], interval=1.0, dead_after=3.0, abandoned=3)
    [row] = reports.workers(conn)
    assert (row["id"], row["abandoned_calls"]) == (me.id, 3)
    heartbeat.beat(conn, me, 4, ["pay"], interval=1.0, dead_after=3.0)
    assert reports.workers(conn)[0]["abandoned_calls"] == 0
