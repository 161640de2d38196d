"""Runs in each state, driven as a worker drives them: submitted with ``wfctl.submit``, taken by
the claim (``claims.claim``), ended by the group commit (``checkpoints.flush``) and parked by the
coordination steps' SQL (``calls.execute``), on the real schema, with no worker process. Each
state uses a workflow type of its own, so that a claim takes exactly the run it is meant to.

For tests/db/test_operator_api.py and tests/db/test_business_keys.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg

import wfctl
from wfctl.operations import Op
from wfctl.worker import claims
from wfctl.worker.calls import Call, execute
from wfctl.worker.checkpoints import Request, flush

WORKER = "host-ops:4242:abcdef"
MAX_RETRIES = 2  # what the claims below fill in for a run submitted without max_retries


def claim(conn: psycopg.Connection[Any], workflow_type: str) -> claims.Claimed:
    """The one runnable run of ``workflow_type``, claimed by WORKER."""
    taken = claims.claim(conn, WORKER, {workflow_type: claims.Policy(MAX_RETRIES)}, 10).claimed
    assert len(taken) == 1, [c.id for c in taken]
    return taken[0]


def written(conn: psycopg.Connection[Any], *batch: Request) -> None:
    """Send ``batch`` through the group commit; each write must be taken."""
    flush(conn, list(batch))
    assert all(r.ok for r in batch), [(r.kind, r.ok) for r in batch]


def step(conn: psycopg.Connection[Any], c: claims.Claimed, number: int, output: Any) -> None:
    """Checkpoint step ``number`` of a claimed run."""
    written(
        conn,
        Request(
            c.id, c.epoch, "step", c.attempt, step=number, name=f"step{number}", output=json.dumps(output),
            started=datetime.now(UTC),
        ),
    )  # fmt: skip


def completed(conn: psycopg.Connection[Any], c: claims.Claimed, output: Any) -> None:
    """Complete a claimed run after one checkpointed step, with ``output``."""
    step(conn, c, 1, "charged")
    written(conn, Request(c.id, c.epoch, "complete", c.attempt, result=json.dumps(output), expect=1))


def failed(conn: psycopg.Connection[Any], c: claims.Claimed, error: str) -> None:
    """Fail a claimed run for good (no retry left), with ``error``."""
    written(
        conn, Request(c.id, c.epoch, "fail", c.attempt, error=error, traceback="Traceback ...", final=True)
    )


def asleep(conn: psycopg.Connection[Any], c: claims.Claimed, wake: datetime) -> None:
    """Park a claimed run in ``ctx.sleep`` until ``wake``."""
    written(conn, Request(c.id, c.epoch, "park", c.attempt, wake=wake))


def coordination(
    conn: psycopg.Connection[Any], c: claims.Claimed, op: Op, number: int, name: str, **params: Any
) -> Call:
    call = Call(op, c.id, c.epoch, c.attempt, number, name, datetime.now(UTC), params)
    execute(conn, call)
    return call


def on_a_message(conn: psycopg.Connection[Any], c: claims.Claimed, topic: str, timeout: float | None) -> None:
    """Park a claimed run in ``ctx.recv(topic, timeout)`` at step 1."""
    call = coordination(conn, c, Op.RECV, 1, f"recv:{topic}", topic=topic, timeout=timeout)
    assert call.state == "parked", (call.state, call.output)


def on_children(conn: psycopg.Connection[Any], c: claims.Claimed, child_type: str, count: int) -> list[UUID]:
    """Start ``count`` children of ``child_type`` (step 1) and park the claimed run in
    ``ctx.wait`` on them (step 2), with no timeout; returns the children's ids."""
    started = coordination(
        conn, c, Op.START_CHILDREN, 1, f"start_children:{child_type}", type=child_type,
        inputs=[json.dumps(n) for n in range(count)], keys=[None] * count, priority=None, timeout=None,
        timeout_error=None, many=True, trace_context=None,
    )  # fmt: skip
    assert started.state == "done", (started.state, started.output)
    ids = [UUID(str(i)) for i in started.output]
    conn.execute("UPDATE workflows SET current_step = 1 WHERE id = %s", (c.id,))  # the step's checkpoint
    waited = coordination(conn, c, Op.JOIN, 2, "wait", ids=[str(i) for i in ids], timeout=None)
    assert waited.state == "parked", (waited.state, waited.output)
    return ids


def submitted(dsn: str, workflow_type: str, key: str | None = None, **options: Any) -> UUID:
    return wfctl.submit(dsn, workflow_type, {"for": workflow_type}, key=key, **options)
