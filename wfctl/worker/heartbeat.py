"""Heartbeats: the worker row's liveness, and what the database thinks the worker runs.

Each beat also records the worker's heartbeat interval and the silence after which it counts as
dead (``WorkerOptions.dead_after``): the sweep, ``recover``'s guard and the reports read them
from its row, so every worker is judged by its own heartbeat."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from wfctl import __version__, schema
from wfctl.queries import q


@dataclass(frozen=True)
class BeatRow:
    """A row of worker.heartbeat: a workflow the database says this worker runs, or (without
    an id) when the first run of its types parked until a time falls due."""

    id: UUID | None
    lease_epoch: int | None
    next_due_in: float | None


@dataclass(frozen=True)
class Beat:
    """What a beat learnt: {workflow id: epoch} of the runs the database says this worker runs,
    and, for the pool's timer, in how many seconds a parked run of its types falls due (None:
    none within the horizon, or not asked)."""

    owned: dict[UUID, int]
    next_due_in: float | None = None


@dataclass(frozen=True)
class Identity:
    id: str
    hostname: str
    pid: int

    @classmethod
    def new(cls) -> Identity:
        host = socket.gethostname()
        pid = os.getpid()
        return cls(id=f"{host}:{pid}:{uuid.uuid4().hex[:6]}", hostname=host, pid=pid)


def beat(
    conn: psycopg.Connection[Any],
    me: Identity,
    concurrency: int,
    types: list[str],
    *,
    interval: float,
    dead_after: float,
    addressable: bool = False,
    abandoned: int = 0,
    horizon: float = 0.0,
    in_flight: Sequence[tuple[UUID, int, int, str]] = (),
) -> Beat:
    """Refresh the worker row (with its heartbeat ``interval`` and ``dead_after``, in seconds,
    and how many step calls that outlived their timeout still run in it, ``abandoned``) and the
    ``updated_at`` of its running workflows, with the step each is in (``in_flight``: run id,
    lease epoch, step number, step name; an execution whose epoch is no longer the run's writes
    nothing), in one statement. With a ``horizon`` (seconds;
    the pool's timer), also look for the first run of ``types`` parked until a time that falls
    due within it."""
    with conn.cursor(row_factory=class_row(BeatRow)) as cur:
        rows = cur.execute(
            q("worker.heartbeat"),
            {
                "id": me.id,
                "hostname": me.hostname,
                "pid": me.pid,
                "concurrency": concurrency,
                "types": types,
                "version": __version__,
                "schema_version": schema.latest_version(),
                "interval": interval,
                "dead_after": dead_after,
                "addressable": addressable,
                "abandoned": abandoned,
                "horizon": horizon,
                "flight_ids": [run for run, _, _, _ in in_flight],
                "flight_epochs": [epoch for _, epoch, _, _ in in_flight],
                "flight_steps": [number for _, _, number, _ in in_flight],
                "flight_names": [name for _, _, _, name in in_flight],
            },
        ).fetchall()
    owned = {row.id: row.lease_epoch for row in rows if row.id is not None and row.lease_epoch is not None}
    due = [row.next_due_in for row in rows if row.id is None and row.next_due_in is not None]
    return Beat(owned, min(due, default=None))


def stopped(conn: psycopg.Connection[Any], me: Identity) -> None:
    conn.execute(q("worker.stopped"), {"id": me.id})
