"""Lease reconciliation: what a heartbeat's answer means for the executions a worker holds.

A heartbeat returns every (workflow id, lease epoch) the database says this worker runs
(``heartbeat.beat``). The loop compares that with what it holds, keyed the same way:

- an execution running here that the answer leaves out is ``lost``: another worker, ``wfctl
  recover`` or ``wfctl cancel`` took its run, and it stops at its next step;
- an execution that ended here without a committed final write (``unsettled``) is settled once
  the answer leaves it out; while it is listed, the loop ends its attempt itself (an abandon
  write, counted like any failure);
- a run the answer lists that the worker holds nowhere is an ``orphan``, claimed by a statement
  whose reply never arrived: it is handed back (``release``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

import psycopg

from wfctl.queries import q
from wfctl.worker.execution import Execution

Key = tuple[UUID, int]  # one execution: workflow id and the lease epoch it runs under
Owned = Mapping[UUID, int]  # what a heartbeat says the worker runs: workflow id -> epoch


def lost(owned: Owned, running: Iterable[Execution]) -> list[Execution]:
    """The executions still going here whose lease the answer does not confirm."""
    return [
        e for e in running if not e.terminal and not e.lost and owned.get(e.claimed.id) != e.claimed.epoch
    ]


def settled(owned: Owned, unsettled: Iterable[Key]) -> tuple[list[Key], list[Key]]:
    """The unsettled executions split in two: those whose attempt has ended or whose run was
    taken elsewhere (nothing left to do), and those the database still shows running here."""
    done: list[Key] = []
    still: list[Key] = []
    for key in unsettled:
        (still if owned.get(key[0]) == key[1] else done).append(key)
    return done, still


def orphans(owned: Owned, held: Iterable[Key]) -> list[Key]:
    """What the database says this worker runs that it does not hold."""
    known = set(held)
    return [(wid, epoch) for wid, epoch in owned.items() if (wid, epoch) not in known]


def release(conn: psycopg.Connection[Any], owner: str, keys: list[Key]) -> list[UUID]:
    """Hand back the runs of ``keys`` still running under ``owner`` with the same epoch (one
    whose final write committed is left alone); the ids handed back. A wake-up tells the
    other workers."""
    rows = conn.execute(
        q("worker.release_owned"),
        {"id": owner, "ids": [k[0] for k in keys], "epochs": [k[1] for k in keys]},
    ).fetchall()
    if rows:
        conn.execute(q("worker.notify"))
    return [r[0] for r in rows]
