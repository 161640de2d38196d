"""Heartbeats: the worker row's liveness, and what the database thinks the worker runs.

Each beat also records the worker's heartbeat interval and the silence after which it counts as
dead (``WorkerOptions.dead_after``): the sweep, ``recover``'s guard and the reports read them
from its row, so every worker is judged by its own heartbeat."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from wfctl import __version__
from wfctl.queries import q


@dataclass(frozen=True)
class Held:
    """A workflow the database says this worker runs (worker.heartbeat's rows)."""

    id: UUID
    lease_epoch: int


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
) -> dict[UUID, int]:
    """Refresh the worker row (with its heartbeat ``interval`` and ``dead_after``, in seconds,
    and how many step calls that outlived their timeout still run in it, ``abandoned``) and the
    ``updated_at`` of its running workflows, in one statement. Returns
    {workflow id: epoch} of the workflows the database says this worker runs."""
    with conn.cursor(row_factory=class_row(Held)) as cur:
        rows = cur.execute(
            q("worker.heartbeat"),
            {
                "id": me.id,
                "hostname": me.hostname,
                "pid": me.pid,
                "concurrency": concurrency,
                "types": types,
                "version": __version__,
                "interval": interval,
                "dead_after": dead_after,
                "addressable": addressable,
                "abandoned": abandoned,
            },
        ).fetchall()
    return {row.id: row.lease_epoch for row in rows}


def stopped(conn: psycopg.Connection[Any], me: Identity) -> None:
    conn.execute(q("worker.stopped"), {"id": me.id})
