"""Fenced group commit: the writes that workflow threads ask for, sent as one statement.

A workflow thread builds a ``Request`` and waits on it; the worker's database loop collects
every request waiting at that moment, sends them in one statement (one round trip, one commit),
and resolves each: ``ok`` when the write happened under the thread's epoch, otherwise fenced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg

from wfctl.queries import q

Kind = Literal["step", "park", "complete", "fail", "release"]


@dataclass
class Request:
    """One write for one workflow, fenced by ``epoch``."""

    workflow_id: UUID
    epoch: int
    kind: Kind
    attempt: int
    step: int | None = None
    name: str | None = None
    output: str | None = None  # JSON text: the step's result, or the workflow's for 'complete'
    started: datetime | None = None
    error: str | None = None  # one line, for the workflow row
    detail: str | None = None  # with traceback, for the failed step's row
    final: bool = False
    delay: float | None = None  # seconds of backoff, for a non-final 'fail'
    wake: datetime | None = None  # for 'park'
    # resolution
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    ok: bool = False
    status: str | None = None  # the workflow's status after the write
    run_at: datetime | None = None
    failure: BaseException | None = None  # the database could not be reached for good

    def resolve(self, ok: bool, status: str | None = None, run_at: datetime | None = None) -> None:
        self.ok, self.status, self.run_at = ok, status, run_at
        self.done.set()

    def abort(self, error: BaseException) -> None:
        self.failure = error
        self.done.set()


def flush(conn: psycopg.Connection[Any], batch: list[Request]) -> None:
    """Write ``batch`` in one statement (autocommit: the statement is its transaction) and
    resolve every request. Raises psycopg errors; the caller may re-send the same batch."""
    params: dict[str, list[Any]] = {
        "ids": [],
        "epochs": [],
        "kinds": [],
        "steps": [],
        "names": [],
        "outputs": [],
        "started": [],
        "errors": [],
        "final": [],
        "delays": [],
        "wake": [],
        "attempts": [],
        "details": [],
    }
    for r in batch:
        params["ids"].append(r.workflow_id)
        params["epochs"].append(r.epoch)
        params["kinds"].append(r.kind)
        params["steps"].append(r.step)
        params["names"].append(r.name)
        params["outputs"].append(r.output)
        params["started"].append(r.started)
        params["errors"].append(r.error)
        params["final"].append(r.final)
        params["delays"].append(r.delay)
        params["wake"].append(r.wake)
        params["attempts"].append(r.attempt)
        params["details"].append(r.detail)
    rows = conn.execute(q("worker.flush"), params).fetchall()
    written = {row[0]: row for row in rows}
    for r in batch:
        row = written.get(r.workflow_id)
        if row is None or not row[4]:
            r.resolve(False)
        else:
            r.resolve(True, row[1], row[3])
