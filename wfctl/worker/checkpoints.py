"""Fenced group commit: the writes that workflow threads ask for, sent as one statement.

A workflow thread builds a ``Request`` and waits on it; the worker's database loop collects
every request waiting at that moment, sends them in one statement (one round trip, one commit),
and resolves each: ``ok`` when the write happened under the thread's epoch, otherwise fenced.
The run's deadline fences like the epoch: past it only a "timeout" write is taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg

from wfctl.operations import WaitKind
from wfctl.queries import numbered
from wfctl.words import COMPLETED, FAILED, HANDLED, PENDING, RETRYING, RUNNING
from wfctl.worker.latch import Latch, open_in_turn
from wfctl.worker.targets import PARENTS, PartitionTargets, Targets

#: "timeout": the run failed at its deadline, with its deadline error: the one write the
#: database takes past the deadline, and only then (every other kind is refused past it).
Kind = Literal["step", "park", "complete", "fail", "release", "timeout"]
#: The writes after which the thread that sent them is free: the next runs claimed ahead start
#: with the same group commit (``started``; wfctl/worker/runner.py, Worker._flush).
ENDING: frozenset[str] = frozenset({"park", "complete", "fail", "release", "timeout"})


class Request(Latch):
    """One write for one workflow, fenced by ``epoch``; the asking thread waits on ``wait()``
    until the batch holding it committed (``ok``: it was not fenced out) or failed for good
    (``failure``)."""

    __slots__ = (
        "attempt",
        "delay",
        "epoch",
        "error",
        "expect",
        "failure",
        "final",
        "kind",
        "name",
        "ok",
        "output",
        "partition",
        "result",
        "retrying",
        "started",
        "step",
        "traceback",
        "tries",
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
        error: str | None = None,  # one line ("ValueError: bad sku"), for the workflow and step rows
        traceback: str | None = None,  # the error's traceback, for the workflow and its attempt
        final: bool = False,
        delay: float | None = None,  # seconds of backoff, for a non-final 'fail'
        wake: datetime | None = None,  # for 'park'
        expect: int | None = None,  # for 'complete': the last step the run checkpointed
        partition: int | None = None,  # the oid of the workflows partition holding the run
        tries: int = 1,  # the step row: the tries its function took
        retrying: bool = False,  # for 'park': the step row records failed tries, the run parks until the next
    ) -> None:
        self.workflow_id, self.epoch, self.kind, self.attempt = workflow_id, epoch, kind, attempt
        self.step, self.name, self.output, self.started = step, name, output, started
        self.result = result
        self.expect = expect
        self.partition = partition
        self.error, self.traceback = error, traceback
        self.final, self.delay, self.wake = final, delay, wake
        self.tries, self.retrying = tries, retrying
        self.ok = False
        self.failure: BaseException | None = None  # the database could not be reached for good
        Latch.__init__(self)

    def abort(self, error: BaseException) -> None:
        self.failure = error
        self.open()

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
    timestamps, and the lower-case words of statuses, outcomes and wait kinds): the SQL casts
    it to its type."""
    return "{" + ",".join(["NULL" if v is None else str(v) for v in values]) + "}"


def _text_array(values: list[str | None]) -> str:
    """A Postgres array literal of strings, each quoted and escaped."""
    return (
        "{"
        + ",".join(
            ["NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
        )
        + "}"
    )


def storable_text(value: str | None) -> str | None:
    """Text columns cannot hold U+0000 and UTF-8 cannot carry a lone surrogate: an exception
    message or a step name with either must not sink the group commit it travels in."""
    if value is None or (value.isascii() and "\x00" not in value):
        return value
    return value.replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")


@dataclass(slots=True)
class Target:
    """What one row of the flush statement sets: the workflow's new values (None or False:
    keep what is there), the status it must be in, and the step row it writes, if any.
    The statement knows no kinds of write; a new kind is a new way to fill a Target."""

    workflow_id: UUID
    epoch: int
    attempt: int
    require_status: str = RUNNING
    expect: int | None = None  # current_step must equal this (a completion's last checkpoint)
    status: str | None = None
    current_step: int | None = None
    set_output: bool = False
    output: str | None = None  # JSON text: the workflow's return value
    set_error: bool = False  # sets error_message and error_traceback
    error: str | None = None
    traceback: str | None = None
    attempt_inc: int = 0
    run_at: datetime | None = None  # absolute (a durable sleep's wake time)...
    run_delay: float | None = None  # ...or seconds from the database's now()
    finish: bool = False
    step: int | None = None  # the step row: its number (None: no step row)
    step_name: str | None = None
    step_status: str | None = None
    step_output: str | None = None  # JSON text
    step_started: datetime | None = None
    step_error: str | None = None
    step_tries: int | None = None
    wait_kind: str | None = None  # what a parked run waits for (None: nothing, e.g. a step's next try)
    outcome: str | None = None  # the execution ends: how (closes its workflow_attempts row)
    timeout: bool = False  # the run timed out: written only past its deadline (others only before)


def _step_row(t: Target, r: Request, *, failed: bool = False) -> None:
    t.step, t.step_name, t.step_started, t.step_tries = r.step, r.name, r.started, r.tries
    if failed:
        t.step_status, t.step_error = FAILED, r.error
    elif r.retrying:  # tries failed, the run parks until the next: the tries made, the last error
        t.step_status, t.step_output, t.step_error = RETRYING, r.output, r.error
    elif r.error is not None:  # a step whose StepError the workflow handled: its history
        t.step_status, t.step_output, t.step_error = HANDLED, r.output, r.error
    else:
        t.step_status, t.step_output = COMPLETED, r.output


def target(group: tuple[Request, ...]) -> Target:
    """The values one merged group of requests sets (see ``merge``): one request, or an
    execution's checkpoint followed by its completion."""
    first, last = group[0], group[-1]
    t = Target(first.workflow_id, first.epoch, first.attempt)
    kind = last.kind
    if first.kind == "step":  # a checkpoint, alone or carrying its completion
        _step_row(t, first)
        t.status, t.current_step = RUNNING, first.step
    if kind == "park":
        t.status, t.run_at, t.outcome = PENDING, last.wake, "parked"
        # a sleep (a replayed one too) waits for its time; a step's next try is a backoff
        t.wait_kind = None if last.retrying else str(WaitKind.SLEEP)
        if last.step is not None:  # a new sleep (a replayed one only leaves again)
            _step_row(t, last)
            t.current_step = last.step
    elif kind == "complete":
        t.status, t.set_output, t.output, t.finish = COMPLETED, True, last.result, True
        t.set_error, t.error, t.traceback = True, None, None
        t.outcome = "completed"
        if first is last:  # its last checkpoint went earlier: it must have committed
            t.expect = last.expect
    elif kind == "fail":
        t.status = FAILED if last.final else PENDING
        t.set_error, t.error = True, storable_text(last.error)
        t.traceback, t.outcome = storable_text(last.traceback), "error"
        t.attempt_inc = 0 if last.final else 1
        t.run_delay = _clamp(last.delay) or 0.0
        t.finish = last.final
        if last.step is not None:
            _step_row(t, last, failed=True)
    elif kind == "release":
        t.status, t.run_delay, t.outcome = PENDING, 0.0, "released"
    elif kind == "timeout":
        t.status, t.set_error, t.error, t.traceback = FAILED, True, storable_text(last.error), None
        t.finish, t.outcome, t.timeout = True, "error", True
    return t


def flush(
    conn: psycopg.Connection[Any],
    batch: list[Request],
    targets: PartitionTargets | None = None,
    started: tuple[str, int] | None = None,
) -> None:
    """Write ``batch`` and resolve every request: one statement (autocommit: the statement is
    its transaction) per partition its runs are in (``targets``: the partitioned layout; None:
    through the parent tables). ``started`` (worker id, ahead_seq): the worker starts the runs
    it claimed ahead up to that one once the first statement commits (workers.started_seq,
    migration 0019). Raises psycopg errors; the caller may re-send the same batch, so nothing
    is resolved before every statement has succeeded."""
    groups = merge(batch)
    by_partition: dict[int | None, list[tuple[Request, ...]]] = {}
    for group in groups:
        by_partition.setdefault(group[0].partition if targets is not None else None, []).append(group)
    fenced: set[tuple[UUID, int]] = set()
    for partition, part in by_partition.items():
        fenced |= _write_in_partition(conn, part, partition, targets, started)
        started = None
    for r in batch:
        r.ok = not fenced or r.key not in fenced  # (no key hashed when nothing was fenced)
    open_in_turn(batch)


def _write_in_partition(
    conn: psycopg.Connection[Any],
    groups: list[tuple[Request, ...]],
    partition: int | None,
    targets: PartitionTargets | None,
    started: tuple[str, int] | None = None,
) -> set[tuple[UUID, int]]:
    """Write ``groups`` in the tables of ``partition``; if one is gone (renamed or dropped
    by hand since it was looked up), through the parents, which find any run by key. Returns
    the executions it stored nothing of (fenced out)."""
    where = targets.of(conn, partition) if targets is not None else PARENTS
    try:
        return _write(conn, groups, where, started)
    except psycopg.errors.UndefinedTable:
        if targets is None or partition is None or where == PARENTS:
            raise
        targets.forget(partition)
        return _write(conn, groups, PARENTS, started)


def _write(
    conn: psycopg.Connection[Any],
    groups: list[tuple[Request, ...]],
    where: Targets,
    started: tuple[str, int] | None = None,
) -> set[tuple[UUID, int]]:
    """One statement: the (id, epoch) of the executions it stored nothing of (fenced out).

    The columns travel as array literals built here: a handful of C-speed string joins, where
    psycopg's generic list adaptation costs a Python-level pass per element and per list."""
    rows = [target(g) for g in groups]
    params = {
        "ids": _array([t.workflow_id.hex for t in rows]),  # (hex: a fifth of str()'s cost)
        "epochs": _array([t.epoch for t in rows]),
        "require": _array([t.require_status for t in rows]),
        "expects": _array([t.expect for t in rows]),
        "statuses": _array([t.status for t in rows]),
        "current": _array([t.current_step for t in rows]),
        "do_output": _array([t.set_output for t in rows]),
        "results": _text_array([t.output for t in rows]),
        "do_error": _array([t.set_error for t in rows]),
        "errors": _text_array([t.error for t in rows]),
        "attempt_inc": _array([t.attempt_inc for t in rows]),
        "run_at": _array([t.run_at for t in rows]),
        "delays": _array([t.run_delay for t in rows]),
        "finish": _array([t.finish for t in rows]),
        "attempts": _array([t.attempt for t in rows]),
        "steps": _array([t.step for t in rows]),
        "names": _text_array([storable_text(t.step_name) for t in rows]),
        "step_status": _array([t.step_status for t in rows]),
        "outputs": _text_array([t.step_output for t in rows]),
        # seconds since the epoch (the SQL's to_timestamp): a float's repr costs a third of a
        # datetime's str()
        "started": _array([None if t.step_started is None else t.step_started.timestamp() for t in rows]),
        "step_errors": _text_array([storable_text(t.step_error) for t in rows]),
        "step_tries": _array([t.step_tries for t in rows]),
        "wait_kinds": _array([t.wait_kind for t in rows]),
        "tracebacks": _text_array([t.traceback for t in rows]),
        "outcomes": _array([t.outcome for t in rows]),
        "timeouts": _array([t.timeout for t in rows]),
        "owner": started[0] if started is not None else None,
        "started_seq": started[1] if started is not None else None,
    }
    statement = numbered("worker.flush", workflows=where.workflows, workflow_attempts=where.attempts)
    with psycopg.RawCursor(conn) as cur:
        cur.execute(statement.text, statement.args(params))
        return {(row[0], row[1]) for row in cur.fetchall()}


def _clamp(delay: float | None) -> float | None:
    if delay is None:
        return None
    return min(max(delay, 0.0), MAX_DELAY_SECONDS)
