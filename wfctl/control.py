"""Operator actions on workflows: cancel, retry, prune. Plain values in, plain results out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from wfctl import partitions
from wfctl.durations import as_seconds
from wfctl.errors import InvalidInput, InvalidState, NotFound
from wfctl.queries import q
from wfctl.words import FINISHED, RETRYABLE

PRUNE_BATCH = 1000
#: a cancel that deadlocks with a child's end (which locks the child, then its parent) tries again
DEADLOCK_TRIES = 5


@dataclass(frozen=True)
class Found:
    id: UUID
    status: str
    lease_owner: str | None
    current_step: int


def _lookup(conn: psycopg.Connection[Any], wid: UUID) -> Found:
    with conn.cursor(row_factory=class_row(Found)) as cur:
        return found(wid, cur.execute(q("control.lookup"), {"id": wid}).fetchone())


def found(wid: UUID, row: Found | None) -> Found:
    """The row ``control.lookup`` read for ``wid``; NotFound when there was none."""
    if row is None:
        raise NotFound(f"no workflow {wid}")
    return row


@dataclass(frozen=True)
class CancelledRow:
    """One workflow a cancel cancelled: its id, its status before (``pending`` or ``running``),
    the worker that held its lease last (as ``Cancelled.worker``), and how deep below the
    workflow asked for it is (0: that workflow; 1: a child of it; 2: a grandchild; ...)."""

    id: UUID
    previous_status: str
    worker: str | None
    depth: int  # 0: the workflow asked for; 1: a child of it; ...


@dataclass(frozen=True)
class Cancelled:
    """What ``cancel`` did: the workflow's id, its status before (``pending`` or ``running``),
    the worker that held its lease last (for a running workflow, the one that stops it at its
    next step boundary and commits nothing more for it; a pending one names the worker that
    ran it before, None if none did), and the unfinished descendants cancelled with it,
    shallowest first."""

    id: UUID
    previous_status: str
    worker: str | None
    descendants: tuple[CancelledRow, ...] = ()  # unfinished descendants cancelled with it


def cancel(conn: psycopg.Connection[Any], wid: UUID, reason: str | None = None) -> Cancelled:
    """Cancel the workflow and its unfinished descendants, in one transaction: the workflow
    and the descendants its statement sees, then, each time in a fresh snapshot, those started
    meanwhile (committed while the cancel waited for a lock), until there are none. Once the
    workflow is cancelled no worker can start a child of it, so the loop ends."""
    for tries_left in range(DEADLOCK_TRIES - 1, -1, -1):
        try:
            with conn.transaction():
                return _cancel_tree(conn, wid, reason)
        except psycopg.errors.DeadlockDetected:
            # a child started and ended while the cancel ran, locking child then parent
            if not tries_left:
                raise
    raise AssertionError("unreachable")


def _cancel_tree(conn: psycopg.Connection[Any], wid: UUID, reason: str | None) -> Cancelled:
    params = cancel_params(wid, reason)
    with conn.cursor(row_factory=class_row(CancelledRow)) as cur:
        rows = cur.execute(q("control.cancel"), params).fetchall()
        if not cancels_root(rows):
            raise nothing_to_cancel(wid, _lookup(conn, wid).status)
        params["descendants_only"] = True
        while more := cur.execute(q("control.cancel"), params).fetchall():
            rows.extend(more)
    return cancelled(rows)


# What a cancel sends and what its rows mean, apart from its I/O (here, and wfctl.aio's).


def cancel_params(wid: UUID, reason: str | None) -> dict[str, Any]:
    """The parameters of ``control.cancel``'s first run (the workflow and the descendants it
    sees); the next runs set ``descendants_only``."""
    return {"id": wid, "reason": reason, "descendants_only": False}


def cancels_root(rows: Sequence[CancelledRow]) -> bool:
    """Whether the first run of ``control.cancel`` cancelled the workflow itself (else it had
    finished: ``nothing_to_cancel``, and the transaction is rolled back)."""
    return bool(rows) and rows[0].depth == 0


def nothing_to_cancel(wid: UUID, status: str) -> InvalidState:
    """The error of a cancel of a finished workflow, in ``status``."""
    return InvalidState(f"workflow {wid} is already {status}: there is nothing to cancel")


def cancelled(rows: Sequence[CancelledRow]) -> Cancelled:
    """What the rows of a cancel (the workflow's first: ``cancels_root``) say it did."""
    root = rows[0]
    descendants = sorted(rows[1:], key=lambda row: (row.depth, row.id))
    return Cancelled(root.id, root.previous_status, root.worker, tuple(descendants))


@dataclass(frozen=True)
class Retried:
    """What ``retry`` did: the workflow's id, how many checkpoints it kept (it resumes after
    step ``kept_steps``), and how many descendants that a cancel of it had taken are pending
    again with it."""

    id: UUID
    kept_steps: int  # checkpoints kept: the run resumes after step kept_steps
    descendants: int = 0  # cancelled with it by a cancel's cascade, and pending again with it


def retry(conn: psycopg.Connection[Any], wid: UUID, from_step: int | None = None) -> Retried:
    """Put a failed or cancelled workflow back to pending with its attempt counter reset, in
    one transaction, keeping its checkpoints (those before step ``from_step`` when given), and
    with it the descendants a cancel of it took."""
    params = retry_params(wid, from_step)
    with conn.transaction():
        check_retryable(wid, _lookup(conn, wid).status)
        if from_step is not None:
            conn.execute(q("control.retry_delete_steps"), params)
        found = retried(wid, conn.execute(q("control.retry"), params).fetchall())
        conn.execute(q("control.notify"))
    return found


# What a retry checks and sends and what its rows mean, apart from its I/O (here, and
# wfctl.aio's).


def retry_params(wid: UUID, from_step: int | None) -> dict[str, Any]:
    """Check ``from_step`` (InvalidInput) and return the parameters of ``control.retry`` and
    ``control.retry_delete_steps``."""
    if from_step is not None and from_step < 1:
        raise InvalidInput("--from-step counts from 1")
    return {"id": wid, "from_step": from_step}


def check_retryable(wid: UUID, status: str) -> None:
    """InvalidState unless a workflow in ``status`` can be retried (failed or cancelled)."""
    if status not in RETRYABLE:
        raise InvalidState(f"workflow {wid} is {status}: only a failed or cancelled workflow can be retried")


def retried(wid: UUID, done: Sequence[tuple[Any, ...]]) -> Retried:
    """What the rows of ``control.retry`` (depth, checkpoints kept) say it did; InvalidState
    when the workflow itself is not among them: it changed between the lookup and the update."""
    root = [int(step) for depth, step in done if depth == 0]
    if not root:
        raise InvalidState(f"workflow {wid} changed state meanwhile; look again")
    return Retried(wid, root[0], len(done) - 1)


@dataclass(frozen=True)
class Pruned:
    workflows: int
    steps: int
    workers: int
    #: partitioned layout only (None otherwise): intervals dropped (dry run: that would be),
    #: and those prunable but left for the next prune because their locks were busy
    partitions: int | None = None
    partitions_busy: int = 0


def prune(
    conn: psycopg.Connection[Any],
    older_than: timedelta,
    statuses: Sequence[str],
    *,
    dry_run: bool = False,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> Pruned:
    """Delete finished workflows (and their steps) older than ``older_than``, in batches that
    each commit on their own, then the worker rows stopped or silent since before the cutoff
    that hold nothing; with ``dry_run``, only count what would go."""
    bad = [s for s in statuses if s not in FINISHED]
    if bad:
        raise InvalidInput(
            f"prune removes finished workflows only ({', '.join(FINISHED)}), not {', '.join(bad)}"
        )
    params = {"statuses": list(statuses), "older_than": as_seconds(older_than), "batch": batch}
    dropped: partitions.PartitionPrune | None = None
    if partitions.layout(conn).partitioned:
        # whole intervals first (dropped, not deleted); the rest goes row by row below
        if not dry_run:
            partitions.ensure(conn)
        dropped = partitions.prune(conn, older_than, statuses, dry_run=dry_run)
    if dry_run:
        row = conn.execute(q("control.prune_count"), params).fetchone()
        workers = conn.execute(q("control.prune_workers_count"), params).fetchone()
        assert row is not None and workers is not None
        return Pruned(int(row[0]), int(row[1]), int(workers[0]), *_dropped(dropped))
    workflows = dropped.workflows if dropped else 0
    steps = dropped.steps if dropped else 0
    if progress is not None and workflows:
        progress(workflows)
    while True:
        row = conn.execute(q("control.prune_batch"), params).fetchone()
        assert row is not None
        done_w, done_s = int(row[0]), int(row[1])
        workflows += done_w
        steps += done_s
        if progress is not None and done_w:
            progress(done_w)
        if done_w < batch:
            break
    workers = len(conn.execute(q("control.prune_workers"), params).fetchall())
    return Pruned(workflows, steps, workers, *_dropped(dropped))


def _dropped(dropped: partitions.PartitionPrune | None) -> tuple[int | None, int]:
    return (None, 0) if dropped is None else (dropped.dropped, dropped.busy)


def prune_total(conn: psycopg.Connection[Any], older_than: timedelta, statuses: Sequence[str]) -> int:
    row = conn.execute(
        q("control.prune_count"), {"statuses": list(statuses), "older_than": as_seconds(older_than)}
    ).fetchone()
    return int(row[0]) if row else 0
