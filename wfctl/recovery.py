"""Requeueing runs whose worker died: ``wfctl recover --stale 5m`` (from cron), the sweep live
workers run (each worker judged by its own recorded heartbeat), and the guard that keeps
``recover`` from judging a live worker by a threshold shorter than its own. Also failing the
runs whose deadline passed, pending or running (``expire``), which both do too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from wfctl.connection import connection_lost
from wfctl.durations import as_seconds, format_minimum
from wfctl.errors import InvalidInput
from wfctl.queries import q


@dataclass(frozen=True)
class Recovered:
    id: UUID
    workflow_type: str
    status: str  # 'pending' (requeued) or 'failed' (no retries left)
    attempt: int
    lease_epoch: int
    current_step: int
    previous_owner: str | None
    owner_heartbeat: datetime | None
    #: claimed ahead by its worker and never started: handed back, not charged an attempt
    claimed_ahead: bool | None = False


@dataclass(frozen=True)
class Expired:
    """A run failed because its deadline passed (recovery.expire)."""

    id: UUID
    workflow_type: str
    error_message: str


EXPIRE_BATCH = 1000


def expire(conn: psycopg.Connection[Any]) -> list[Expired]:
    """Fail every run past its deadline, pending (queued, parked, backing off, requeued from a
    dead worker) or running: a worker duty and part of ``wfctl recover``. The epoch is raised,
    so a running one's worker commits nothing more for it (its step in flight is fenced)."""
    found: list[Expired] = []
    with conn.cursor(row_factory=class_row(Expired)) as cur:
        while True:
            batch = cur.execute(q("recovery.expire"), {"limit": EXPIRE_BATCH}).fetchall()
            found.extend(batch)
            if len(batch) < EXPIRE_BATCH:
                return found


def expire_due(conn: psycopg.Connection[Any], failing: Sequence[UUID] = ()) -> list[Expired]:
    """What ``expire`` would fail now, changing nothing (``wfctl recover --dry-run``); with
    ``failing``, the runs a recover would fail before it expires (stale, out of retries)."""
    with conn.cursor(row_factory=class_row(Expired)) as cur:
        return cur.execute(q("recovery.expire_due"), {"failing": list(failing)}).fetchall()


@dataclass(frozen=True)
class LiveWorker:
    """A live worker's heartbeat as its row records it (recovery.slowest_live_worker)."""

    id: str
    heartbeat_seconds: float | None  # None: recorded by a wfctl older than schema version 4
    dead_after_seconds: float


def recover(
    conn: psycopg.Connection[Any], stale: timedelta | None, *, dry_run: bool = False
) -> list[Recovered]:
    """Requeue (or fail, when out of retries) every running workflow whose owner's heartbeat is
    older than ``stale``, or, with ``stale=None``, older than the owner's own recorded
    ``dead_after`` (what the sweep does). One statement: concurrent calls requeue each workflow
    once. A run its worker claimed ahead and never started is handed back uncharged
    (``claimed_ahead``). The threshold goes to the database as exact seconds (see
    wfctl.durations)."""
    rows = _requeue(conn, stale, dry_run=dry_run, sweep=False)
    assert rows is not None  # only a sweep can find the sweep lock taken
    return rows


def _requeue(
    conn: psycopg.Connection[Any], stale: timedelta | None, *, dry_run: bool, sweep: bool
) -> list[Recovered] | None:
    name = "recovery.stale_runs" if dry_run else "recovery.recover"
    seconds = None if stale is None else as_seconds(stale)
    with conn.cursor(row_factory=class_row(Recovered)) as cur:
        rows = cur.execute(q(name), {"stale": seconds, "sweep": sweep}).fetchall()
    if any(r.id is None for r in rows):  # the sweep lock was taken: another worker sweeps
        return None
    if rows and not dry_run:
        # the requeue is committed: a wake-up that cannot be sent (the connection lost just
        # now) must not hide what was done; idle workers find the runs at their next poll, and
        # the caller's next statement meets the lost connection
        try:
            conn.execute(q("recovery.notify"))
        except psycopg.OperationalError as exc:
            if not connection_lost(conn, exc):
                raise
    return rows


def sweep(conn: psycopg.Connection[Any]) -> list[Recovered] | None:
    """The sweep a live worker runs as one of its duties: requeue the runs of every worker
    silent for longer than its own ``dead_after``, through the same statement, fencing and
    retry accounting as ``recover``, which takes the sweep lock first (one sweeper at a time,
    nobody waits for it) and holds it only for that one statement. None when another worker
    holds the lock (it is sweeping now)."""
    return _requeue(conn, None, dry_run=False, sweep=True)


def slowest_live_worker(conn: psycopg.Connection[Any]) -> LiveWorker | None:
    """The live worker that may stay silent longest before it counts as dead (None: none)."""
    with conn.cursor(row_factory=class_row(LiveWorker)) as cur:
        return cur.execute(q("recovery.slowest_live_worker")).fetchone()


def check_threshold(conn: psycopg.Connection[Any], stale: timedelta, *, option: str = "--stale") -> None:
    """Refuse a threshold shorter than the silence a live worker is allowed (its heartbeat
    interval times its missed beats): with it, ``recover`` would requeue runs that worker is
    still running. InvalidInput names the worker, its heartbeat and what to do."""
    live = slowest_live_worker(conn)
    if live is None or stale.total_seconds() >= live.dead_after_seconds:
        return
    beat = (
        f"heartbeat every {seconds_text(live.heartbeat_seconds)}"
        if live.heartbeat_seconds is not None
        else "heartbeat interval not recorded"
    )
    needed = seconds_text(live.dead_after_seconds)
    raise InvalidInput(
        f"{option} {seconds_text(stale.total_seconds())} is shorter than the "
        f"{needed} of silence after which live worker {live.id} ({beat}) counts as dead: "
        f"its runs would be requeued while it runs them; use {option} {needed} or more, or "
        "--force"
    )


def seconds_text(seconds: float) -> str:
    """``300`` -> ``5m``, ``30`` -> ``30s``, ``0.2`` -> ``200ms`` (for messages)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return format_minimum(seconds)
