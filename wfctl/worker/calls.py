"""Coordination steps (ctx.recv, ctx.wait, ctx.start_child(ren), ctx.set_event) as database calls.

Unlike a checkpoint, such a step must read before it writes (is there a message? have the
children finished?), and the answer decides between checkpointing and parking. Each is one SQL
function (migration 0006; its block of sql/queries/worker.sql is named in wfctl/operations.py)
that locks the workflow's row, checks the lease epoch and the run's deadline (migration 0016),
and does the whole step in one transaction. A workflow thread
builds a ``Call`` and waits on it; the worker's database loop runs it on its connection,
between group commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from wfctl.operations import OPERATIONS, Op, operation
from wfctl.queries import q
from wfctl.worker.latch import Latch

#: The coordination steps there are (op names).
OPS = tuple(Op)


def _run(conn: psycopg.Connection[Any], op: Op, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run ``op``'s statement (its block of sql/queries/worker.sql) and return its row."""
    return conn.execute(q(OPERATIONS[op].block), params).fetchone()


class Call(Latch):
    """One coordination step of one execution, fenced by ``epoch``. After ``wait()``: ``state``
    is 'done' (``output`` is the checkpointed output), 'parked', 'fenced', 'refused' (``output``
    says why: the step can never succeed) or 'expired' (past the run's deadline nothing was
    done; ``output`` is the deadline's error); or ``failure`` says the database refused it or
    could not be reached for good."""

    __slots__ = (
        "attempt",
        "epoch",
        "failure",
        "name",
        "op",
        "output",
        "params",
        "started",
        "state",
        "step",
        "workflow_id",
    )

    def __init__(
        self,
        op: Op | str,
        workflow_id: UUID,
        epoch: int,
        attempt: int,
        step: int,
        name: str,
        started: datetime,
        params: dict[str, Any],
    ) -> None:
        self.op = operation(op).op
        self.workflow_id, self.epoch, self.attempt = workflow_id, epoch, attempt
        self.step, self.name, self.started, self.params = step, name, started, params
        self.state: str | None = None
        self.output: Any = None
        self.failure: BaseException | None = None
        Latch.__init__(self)

    def resolve(self, state: str, output: Any) -> None:
        self.state, self.output = state, output
        self.open()

    def abort(self, error: BaseException) -> None:
        self.failure = error
        self.open()


def execute(conn: psycopg.Connection[Any], call: Call) -> None:
    """Run ``call`` (autocommit: one transaction) and resolve it. Raises psycopg errors; the
    caller may run it again after a lost connection (the functions answer a re-send as they
    answered the first)."""
    params = {
        "id": call.workflow_id,
        "epoch": call.epoch,
        "attempt": call.attempt,
        "step": call.step,
        "name": call.name,
        "started": call.started,
        **call.params,
    }
    for name in OPERATIONS[call.op].uuids:  # lists of workflow ids, sent as uuid[]
        params[name] = [UUID(i) for i in call.params[name]]
    row = _run(conn, call.op, params)
    assert row is not None
    call.resolve(row[0], row[1])
