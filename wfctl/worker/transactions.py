"""Transactional steps: ``ctx.transaction(name, fn)`` runs ``fn(conn)`` in the same PostgreSQL
transaction that writes the step's checkpoint, fenced by the lease epoch in that transaction.

The application's writes and the checkpoint commit together or not at all, so they happen
exactly once however the worker dies: before the commit nothing of either is stored and the
step runs again on replay; after it, the replay returns the checkpoint and ``fn`` is not
called again. The connections come from a small pool (psycopg-pool), not from the worker
loop's connection, and hold no session state (no prepared statements), so they work through
PgBouncer in transaction mode.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool

from wfctl.queries import q


class Fenced(Exception):
    """The execution no longer holds the run: nothing was committed."""


class TransactionPool:
    """The worker's pool for transactional steps, opened at the first one."""

    def __init__(self, dsn: str, size: int) -> None:
        self.dsn = dsn
        self.size = max(1, size)
        self._pool: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()

    def pool(self) -> ConnectionPool[Any]:
        with self._lock:
            if self._pool is None:
                params = conninfo.conninfo_to_dict(self.dsn)
                params.setdefault("application_name", "wfctl worker transaction")
                params.setdefault("connect_timeout", "10")
                self._pool = ConnectionPool(
                    conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None}),
                    kwargs={"autocommit": False, "prepare_threshold": None},
                    min_size=1,
                    max_size=self.size,
                    open=True,
                    name="wfctl-transactions",
                )
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def run_step(
    pool: TransactionPool,
    workflow_id: UUID,
    epoch: int,
    attempt: int,
    step: int,
    name: str,
    started: datetime,
    fn: Callable[[psycopg.Connection[Any]], str],
) -> Any:
    """Run ``fn`` (which returns the step's output as JSON text) and checkpoint it in one
    transaction; return the stored output. Raises Fenced when the lease moved on, and lets
    ``fn``'s own exceptions through (rolled back). When the connection fails around the commit
    the outcome is looked up: a committed step is returned, anything else raises the error (the
    attempt fails and the replay runs the step again: nothing of it was stored)."""
    key = {"id": workflow_id, "epoch": epoch, "step": step}
    try:
        with pool.pool().connection() as conn:
            with conn.transaction():
                if conn.execute(q("worker.transaction_fence"), key).fetchone() is None:
                    raise Fenced()
                done = conn.execute(q("worker.transaction_recorded"), key).fetchone()
                if done is not None:
                    return done[0]
                output = fn(conn)
                conn.execute(
                    q("worker.transaction_checkpoint"),
                    {**key, "attempt": attempt, "name": name, "output": output, "started": started},
                )
                stored = conn.execute(q("worker.transaction_recorded"), key).fetchone()
            assert stored is not None
            return stored[0]
    except psycopg.OperationalError:
        with pool.pool().connection() as conn:
            done = conn.execute(q("worker.transaction_recorded"), key).fetchone()
            conn.rollback()
        if done is not None:
            return done[0]
        raise
