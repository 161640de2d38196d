"""Fenced group commit: the writes that workflow threads ask for, sent as one statement.

A workflow thread builds a ``Request`` and waits on it; the worker's database loop collects
every request waiting at that moment, sends them in one statement (one round trip, one commit),
and resolves each: ``ok`` when the write happened under the thread's epoch, otherwise fenced.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg

from wfctl.queries import q

Kind = Literal["step", "park", "complete", "fail", "release"]


class Request:
    """One write for one workflow, fenced by ``epoch``; the asking thread waits on ``wait()``."""

    __slots__ = (
        "_done",
        "attempt",
        "delay",
        "detail",
        "epoch",
        "error",
        "expect",
        "failure",
        "final",
        "kind",
        "name",
        "ok",
        "output",
        "result",
        "started",
        "step",
        "wake",
        "workflow_id",
    )

    def __init__(
        self,
        workflow_id: UUID,
        epoch: int,
        kind: Kind,
        attempt: int,
        *,
        step: int | None = None,
        name: str | None = None,
        output: str | None = None,  # JSON text: the step's result
        result: str | None = None,  # JSON text: the workflow's return value, for 'complete'
        started: datetime | None = None,
        error: str | None = None,  # one line, for the workflow row
        detail: str | None = None,  # with traceback, for the failed step's row
        final: bool = False,
        delay: float | None = None,  # seconds of backoff, for a non-final 'fail'
        wake: datetime | None = None,  # for 'park'
        expect: int | None = None,  # for 'complete': the last step the run checkpointed
    ) -> None:
        self.workflow_id, self.epoch, self.kind, self.attempt = workflow_id, epoch, kind, attempt
        self.step, self.name, self.output, self.started = step, name, output, started
        self.result = result
        self.expect = expect
        self.error, self.detail, self.final, self.delay, self.wake = error, detail, final, delay, wake
        self.ok = False
        self.failure: BaseException | None = None  # the database could not be reached for good
        # a one-shot latch: held from creation, released once resolved (cheaper than an Event)
        self._done = threading.Lock()
        self._done.acquire()

    def wait(self) -> None:
        self._done.acquire()

    def resolve(self, ok: bool) -> None:
        self.ok = ok
        self._done.release()

    def abort(self, error: BaseException) -> None:
        self.failure = error
        self._done.release()

    @property
    def key(self) -> tuple[UUID, int]:
        """One execution of one workflow: the id and the lease epoch it runs under."""
        return (self.workflow_id, self.epoch)


#: The longest backoff or sleep the database is asked to add to now() (100 years): a retry
#: policy that computes more must not produce a timestamp the database refuses.
MAX_DELAY_SECONDS = 100 * 365.25 * 86400


def merge(batch: list[Request]) -> list[tuple[Request, ...]]:
    """Rows to send: one per request, except that an execution's checkpoint followed by its
    completion in the same batch travel as one row (one UPDATE of the workflow, one step row).
    An execution is (workflow id, epoch): a stale epoch's request never merges with a fresh
    one of the same workflow."""
    rows: list[tuple[Request, ...]] = []
    last_step: dict[tuple[UUID, int], int] = {}
    for r in batch:
        index = last_step.pop(r.key, None)
        if index is not None and r.kind == "complete" and r.step is None:
            rows[index] = (*rows[index], r)
            continue
        if r.kind == "step":
            last_step[r.key] = len(rows)
        rows.append((r,))
    return rows


def _array(values: list[Any]) -> str:
    """A Postgres array literal of values that need no quoting (uuid, numbers, booleans,
    timestamps): the SQL casts it to its type."""
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def _text_array(values: list[str | None]) -> str:
    """A Postgres array literal of strings, each quoted and escaped."""
    return (
        "{"
        + ",".join(
            "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values
        )
        + "}"
    )


def _storable_text(value: str | None) -> str | None:
    """Text columns cannot hold U+0000 and UTF-8 cannot carry a lone surrogate: an exception
    message or a step name with either must not sink the group commit it travels in."""
    if value is None or (value.isascii() and "\x00" not in value):
        return value
    return value.replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")


def flush(conn: psycopg.Connection[Any], batch: list[Request]) -> None:
    """Write ``batch`` in one statement (autocommit: the statement is its transaction) and
    resolve every request. Raises psycopg errors; the caller may re-send the same batch.

    The columns travel as array literals built here: a handful of C-speed string joins, where
    psycopg's generic list adaptation costs a Python-level pass per element and per list."""
    groups = merge(batch)
    firsts = [g[0] for g in groups]
    lasts = [g[-1] for g in groups]
    params = {
        "ids": _array([r.workflow_id for r in firsts]),
        "epochs": _array([r.epoch for r in firsts]),
        "kinds": _text_array([r.kind for r in lasts]),
        "steps": _array([r.step for r in firsts]),
        "names": _text_array([_storable_text(r.name) for r in firsts]),
        "outputs": _text_array([r.output for r in firsts]),
        "started": _array([r.started for r in firsts]),
        "errors": _text_array([_storable_text(r.error) for r in lasts]),
        "final": _array([r.final for r in lasts]),
        "delays": _array([_clamp(r.delay) for r in lasts]),
        "wake": _array([r.wake for r in lasts]),
        "attempts": _array([r.attempt for r in firsts]),
        "details": _text_array([_storable_text(r.detail) for r in lasts]),
        "results": _text_array([r.result for r in lasts]),
        "expects": _array([r.expect for r in lasts]),
    }
    rows = conn.execute(q("worker.flush"), params).fetchall()
    written = {(row[0], int(row[1])) for row in rows if row[2]}
    for group in groups:
        ok = group[0].key in written
        for r in group:
            r.resolve(ok)


def _clamp(delay: float | None) -> float | None:
    if delay is None:
        return None
    return min(max(delay, 0.0), MAX_DELAY_SECONDS)
