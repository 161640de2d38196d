"""OpenTelemetry spans (wfctl/tracing.py) of a submit, of the executions of its run in this
process (the worker's own code: a claim and an ``Execution``), of its steps and of their tries,
into the SDK's in-memory exporter; parks and wake-ups; and the trace a run keeps across them.
(A real worker process continuing a submit's trace: tests/process/test_tracing_processes.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeclock
import psycopg
import pytest
from helpers import rows
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support import executions

import wfctl
from wfctl import recovery, tracing
from wfctl.registry import Registry
from wfctl.worker import claims
from wfctl.worker.transactions import TransactionPool

AT = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
REGISTRY = Registry()
tried: list[int] = []


class Flaky(Exception):
    pass


@wfctl.step(retries=2, retry_base=0.01, retry_cap=0.02)
def flaky(order: str) -> str:
    tried.append(1)
    if len(tried) == 1:
        raise Flaky(f"first try of {order} failed")
    return f"charged {order}"


@wfctl.workflow("traced", max_retries=0, registry=REGISTRY)
def traced(ctx: wfctl.Context, data: Any) -> Any:
    ctx.step("reserve", lambda: "reserved")
    return ctx.step("charge", flaky, data["order"])


@wfctl.workflow("napping", max_retries=0, registry=REGISTRY)
def napping(ctx: wfctl.Context, data: Any) -> Any:
    ctx.step("before", lambda: 1)
    ctx.sleep("1h")
    return ctx.step("after", lambda: 2)


@wfctl.step(retries=1, retry_base=0.01, retry_cap=0.02)
def debit(conn: psycopg.Connection[Any]) -> int:
    tried.append(1)
    if len(tried) == 1:
        raise Flaky("locked")
    return conn.execute("SELECT 90").fetchone()[0]  # type: ignore[index]


@wfctl.workflow("paying", max_retries=0, registry=REGISTRY)
def paying(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.transaction("debit", debit)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    tried.clear()
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = named(exporter, name)
    return span


def traceparent(span: ReadableSpan) -> str:
    c = span.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def test_a_run_has_spans_for_its_execution_steps_and_tries(dsn, spans):
    wid = wfctl.submit(dsn, "traced", {"order": "o-1"})
    execution = executions.execute(dsn, REGISTRY)
    assert execution.outcome == "completed"

    submit = one(spans, "wfctl.submit traced")
    assert submit.kind == SpanKind.PRODUCER
    assert submit.attributes == {
        "wfctl.workflow.type": "traced",
        "wfctl.workflow.id": str(wid),
        "wfctl.submit.created": True,
    }
    run = one(spans, "wfctl.run traced")
    assert run.kind == SpanKind.CONSUMER
    assert dict(run.attributes or {}) == {
        "wfctl.workflow.id": str(wid),
        "wfctl.workflow.type": "traced",
        "wfctl.attempt": 1,
        "wfctl.lease.epoch": 1,
        "wfctl.resumed": False,
        "wfctl.outcome": "completed",
    }
    reserve, charge = one(spans, "wfctl.step reserve"), one(spans, "wfctl.step charge")
    assert reserve.attributes == {
        "wfctl.step.number": 1,
        "wfctl.step.name": "reserve",
        "wfctl.step.kind": "step",
    }
    assert charge.attributes is not None and charge.attributes["wfctl.step.number"] == 2
    for step in (reserve, charge):
        assert step.parent is not None and step.parent.span_id == run.context.span_id
        assert step.status.status_code == StatusCode.UNSET
    # a step without retries has no span per try; one with retries has one per try, under it
    assert named(spans, "wfctl.try reserve") == []
    first, second = sorted(named(spans, "wfctl.try charge"), key=lambda s: s.start_time or 0)
    assert [t.attributes["wfctl.step.try"] for t in (first, second) if t.attributes] == [1, 2]
    assert all(t.parent is not None and t.parent.span_id == charge.context.span_id for t in (first, second))
    assert first.status.status_code == StatusCode.ERROR and second.status.status_code == StatusCode.UNSET
    [event] = first.events
    assert event.name == "exception" and event.attributes is not None
    assert str(event.attributes["exception.type"]).endswith("Flaky")
    assert event.attributes["exception.message"] == "first try of o-1 failed"
    # the execution continues the submit's trace, as a child of its span, through the database
    assert {s.context.trace_id for s in (submit, run, reserve, charge, first, second)} == {
        submit.context.trace_id
    }
    assert run.parent is not None and run.parent.span_id == submit.context.span_id
    assert run.parent.is_remote
    [(stored,)] = rows(dsn, "SELECT trace_context FROM workflows WHERE id = %s", wid)
    assert stored == traceparent(submit)


def test_a_step_that_fails_records_its_error_and_the_execution_its_outcome(dsn, spans):
    broken = Registry()

    @wfctl.workflow("broken", max_retries=0, registry=broken)
    def fails(ctx: wfctl.Context, data: Any) -> Any:
        return ctx.step("explode", _explode)

    wfctl.submit(dsn, "broken")
    assert executions.execute(dsn, broken).outcome == "failed"
    step = one(spans, "wfctl.step explode")
    assert step.status.status_code == StatusCode.ERROR
    assert [e.attributes["exception.type"] for e in step.events if e.attributes] == ["ValueError"]
    run = one(spans, "wfctl.run broken")
    assert run.attributes is not None and run.attributes["wfctl.outcome"] == "failed"
    assert run.status.status_code == StatusCode.ERROR


def test_a_transactional_step_has_a_span_and_one_per_try(dsn, spans):
    wfctl.submit(dsn, "paying")
    pool = TransactionPool(dsn, 1)
    try:
        assert executions.execute(dsn, REGISTRY, pool=pool).outcome == "completed"
    finally:
        pool.close()
    step = one(spans, "wfctl.step debit")
    assert step.attributes is not None and step.attributes["wfctl.step.kind"] == "transaction"
    tries = sorted(named(spans, "wfctl.try debit"), key=lambda s: s.start_time or 0)
    assert [t.status.status_code for t in tries] == [StatusCode.ERROR, StatusCode.UNSET]
    assert all(t.parent is not None and t.parent.span_id == step.context.span_id for t in tries)


def _explode() -> None:
    raise ValueError("no such sku")


def test_a_run_that_parks_says_what_for_and_the_next_execution_that_it_resumed(dsn, spans):
    fakeclock.stop(dsn, AT)
    wfctl.submit(dsn, "napping")
    assert executions.execute(dsn, REGISTRY).outcome == "parked"
    fakeclock.advance(dsn, timedelta(hours=1, seconds=1))
    assert executions.execute(dsn, REGISTRY).outcome == "completed"

    parked, woken = sorted(named(spans, "wfctl.run napping"), key=lambda s: s.start_time or 0)
    assert parked.attributes is not None and parked.attributes["wfctl.outcome"] == "parked"
    [event] = [e for e in parked.events if e.name == "wfctl.parked"]
    assert event.attributes is not None
    assert event.attributes["wfctl.park.waiting_for"] == "sleep"
    until = datetime.fromisoformat(str(event.attributes["wfctl.park.until"]))
    assert AT + timedelta(hours=1) <= until < AT + timedelta(hours=1, seconds=30)  # the execution's clock
    assert woken.attributes is not None and woken.attributes["wfctl.resumed"] is True
    assert [e.attributes for e in woken.events if e.name == "wfctl.resumed"] == [{"wfctl.step.number": 2}]
    # the replay runs only the step after the sleep
    assert [s.name for s in spans.get_finished_spans() if s.name.startswith("wfctl.step")] == [
        "wfctl.step before",
        "wfctl.step after",
    ]


def test_a_recovered_run_stays_in_its_submits_trace(dsn, conn, spans):
    wid = wfctl.submit(dsn, "traced", {"order": "o-3"})
    # a worker claimed it and died before it ran a step (its execution never started here)
    fakeclock.stop(dsn, AT)
    [claimed] = claims.claim(conn, "gone", {"traced": claims.Policy(3)}, 1).claimed
    assert claimed.trace_context is not None
    assert [r.id for r in recovery.recover(conn, timedelta(0))] == [wid]
    execution = executions.execute(dsn, REGISTRY)
    assert execution.outcome == "completed" and execution.claimed.attempt == 2
    submit, run = one(spans, "wfctl.submit traced"), one(spans, "wfctl.run traced")
    assert run.context.trace_id == submit.context.trace_id
    assert run.parent is not None and run.parent.span_id == submit.context.span_id
    assert run.attributes is not None and run.attributes["wfctl.attempt"] == 2
    assert run.attributes["wfctl.lease.epoch"] == execution.claimed.epoch


def test_the_parked_run_and_its_wake_up_share_the_submits_trace(dsn, spans):
    fakeclock.stop(dsn, AT)
    with tracing.tracer().start_as_current_span("checkout") as caller:  # type: ignore[union-attr]
        wfctl.submit(dsn, "napping")
    executions.execute(dsn, REGISTRY)
    fakeclock.advance(dsn, timedelta(hours=1, seconds=1))
    executions.execute(dsn, REGISTRY)
    runs = named(spans, "wfctl.run napping")
    assert len(runs) == 2
    submit = one(spans, "wfctl.submit napping")
    assert submit.parent is not None and submit.parent.span_id == caller.get_span_context().span_id
    assert {s.context.trace_id for s in [*runs, submit]} == {caller.get_span_context().trace_id}
    assert all(r.parent is not None and r.parent.span_id == submit.context.span_id for r in runs)


def test_a_batch_submit_stores_one_context_for_its_runs(dsn, conn, spans):
    from wfctl import client

    ids = client.submit_many(conn, "traced", ['{"order": "a"}', '{"order": "b"}'])
    batch = one(spans, "wfctl.submit traced")
    assert batch.attributes is not None and batch.attributes["wfctl.batch.size"] == 2
    stored = {r[0] for r in rows(dsn, "SELECT trace_context FROM workflows WHERE id = ANY(%s)", ids)}
    assert stored == {traceparent(batch)}


def test_a_send_has_a_span(dsn, spans):
    fakeclock.stop(dsn, AT)
    wid = wfctl.submit(dsn, "napping")
    wfctl.send(dsn, wid, "approval", {"ok": True})
    send = one(spans, "wfctl.send")
    assert send.attributes == {"wfctl.message.topic": "approval", "wfctl.workflow.id": str(wid)}


def test_without_tracing_nothing_is_stored_and_no_span_is_made(dsn, spans):
    tracing.use(None)
    wid = wfctl.submit(dsn, "traced", {"order": "o-2"})
    assert rows(dsn, "SELECT trace_context FROM workflows WHERE id = %s", wid) == [(None,)]
    assert executions.execute(dsn, REGISTRY).outcome == "completed"
    assert spans.get_finished_spans() == ()


def test_the_old_submit_signatures_still_work_and_store_no_context(dsn, conn):
    [(_, created)] = conn.execute(
        "SELECT * FROM wfctl_submit_one('traced', '{}', NULL, NULL, 0, NULL, NULL, NULL, NULL)"
    ).fetchall()
    many = [
        r[0]
        for r in conn.execute(
            "SELECT * FROM wfctl_submit_many('traced', ARRAY['{}'::jsonb], NULL, 0, NULL, NULL, NULL, NULL)"
        )
    ]
    assert created and len(many) == 1
    assert rows(dsn, "SELECT trace_context FROM workflows ORDER BY id") == [(None,), (None,)]


def test_a_trace_context_over_its_bound_is_refused(dsn, conn):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="at most 1024 characters"):
        conn.execute(
            "SELECT * FROM wfctl_submit_one('traced', '{}', NULL, NULL, 0, NULL, NULL, NULL, NULL, %s)",
            ["x" * 1025],
        )


def test_a_traced_send_stores_its_context_with_the_message_and_an_untraced_one_none(dsn, conn, spans):
    wid = wfctl.submit(dsn, "napping")
    wfctl.send(dsn, wid, "approval", {"ok": True}, key="first")
    send = one(spans, "wfctl.send")
    tracing.use(None)
    wfctl.send(dsn, wid, "approval", {"ok": False}, key="second")
    # the signature before the context
    conn.execute("SELECT * FROM wfctl_send_message(%s, 'approval', NULL, 'third')", [wid])
    stored = rows(dsn, "SELECT idempotency_key, trace_context FROM workflow_messages ORDER BY id")
    assert stored == [("first", traceparent(send)), ("second", None), ("third", None)]


def test_a_message_trace_context_over_its_bound_is_refused_and_nothing_is_sent(dsn, conn):
    wid = wfctl.submit(dsn, "napping")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="at most 1024 characters"):
        conn.execute("SELECT * FROM wfctl_send_message(%s, 'approval', NULL, NULL, %s)", [wid, "x" * 1025])
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


@wfctl.workflow("family", max_retries=0, registry=REGISTRY)
def family(ctx: wfctl.Context, data: Any) -> Any:
    kids = ctx.start_children("kid", [1, 2])
    return kids


@wfctl.workflow("kid", max_retries=0, registry=REGISTRY)
def kid(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("grow", lambda: data * 2)


def test_a_traced_runs_children_are_in_its_trace_under_its_run_span(dsn, conn, spans):
    parent = wfctl.submit(dsn, "family")
    assert executions.execute(dsn, REGISTRY).outcome == "completed"
    run = one(spans, "wfctl.run family")
    stored = conn.execute("SELECT trace_context FROM workflows WHERE parent_id = %s", (parent,)).fetchall()
    assert stored == [(traceparent(run),), (traceparent(run),)]
    executions.execute(dsn, REGISTRY)
    executions.execute(dsn, REGISTRY)
    kids = named(spans, "wfctl.run kid")
    assert len(kids) == 2
    assert all(k.context.trace_id == run.context.trace_id for k in kids)
    assert all(k.parent is not None and k.parent.span_id == run.context.span_id for k in kids)


def test_an_untraced_runs_children_carry_no_trace_context(dsn, conn):
    parent = wfctl.submit(dsn, "family")
    assert executions.execute(dsn, REGISTRY).outcome == "completed"
    stored = conn.execute("SELECT trace_context FROM workflows WHERE parent_id = %s", (parent,)).fetchall()
    assert stored == [(None,), (None,)]
