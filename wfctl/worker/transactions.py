"""Transactional steps: ``ctx.transaction(name, fn)`` runs ``fn(conn)`` in the same PostgreSQL
transaction that writes the step's checkpoint, fenced by the lease epoch in that transaction.

The application's writes and the checkpoint commit together or not at all, so they happen
exactly once however the worker dies: before the commit nothing of either is stored and the
step runs again on replay; after it, the replay returns the checkpoint and ``fn`` is not
called again. The order inside the transaction (docs/explanation/transactions.md):

1. ``SET LOCAL idle_in_transaction_session_timeout`` to the worker's ``dead_after``: a worker
   frozen inside the transaction loses it (and every lock it holds) once the others would take
   it for dead;
2. ``fn(conn)``, holding no lock of wfctl's: a frozen or slow ``fn`` blocks no recovery, cancel
   or claim of the run;
3. the fence: lock the workflow's row, still this epoch and ``running``, not past its deadline,
   the step not checkpointed yet (each under ``SET LOCAL statement_timeout``);
4. the checkpoint, then COMMIT. A zombie's fence fails, and its writes roll back with it.

The connections come from a small pool (psycopg-pool), not from the worker loop's connection,
and keep no session state (no prepared statements, only ``SET LOCAL``), so they work through
PgBouncer in transaction mode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from wfctl import storedjson
from wfctl.connection import set_local
from wfctl.errors import PermanentError
from wfctl.queries import q

_NOTHING = object()


class Fenced(Exception):
    """The execution no longer holds the run (another epoch, cancelled): nothing was committed."""


class Expired(Exception):
    """The run's deadline passed before the step could commit: nothing was committed. The
    message is the run's deadline error."""


class _Unsure(Exception):
    """The transaction failed after ``fn`` returned: it may have committed (a lost reply)."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


class TransactionPool:
    """The worker's pool for transactional steps, opened at the first one. ``hold`` (seconds,
    the worker's ``dead_after``) bounds how long a transaction may sit idle, and how long the
    fence may wait for the workflow's row."""

    def __init__(self, dsn: str, size: int, hold: float = 30.0) -> None:
        self.dsn = dsn
        self.size = max(1, size)
        self.hold_ms = str(max(1, round(hold * 1000)))
        self._pool: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()

    def pool(self) -> ConnectionPool[Any]:
        with self._lock:
            if self._pool is None:
                params = conninfo.conninfo_to_dict(self.dsn)
                params.setdefault("application_name", "wfctl worker transaction")
                params.setdefault("connect_timeout", "10")
                self._pool = ConnectionPool(
                    conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None}),
                    kwargs={"autocommit": False, "prepare_threshold": None},
                    min_size=1,
                    max_size=self.size,
                    open=True,
                    name="wfctl-transactions",
                    # a connection the server closed meanwhile (restart, failover) is replaced
                    # before fn sees it, not found broken by fn's first statement
                    check=ConnectionPool.check_connection,
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
    *,
    tries: int | None = None,
) -> Any:
    """Run ``fn`` (which returns the step's output as JSON text) and checkpoint it in one
    transaction, with the number of ``tries`` it took (None: one, or what the step's row said);
    return the stored output (decoded JSON). Raises Fenced when the lease moved on
    and Expired past the run's deadline (both rolled back), and lets ``fn``'s own exceptions
    through (rolled back). When the transaction fails after ``fn`` returned (the connection lost
    around the commit) the outcome is looked up: a step this epoch committed is returned, and
    ``fn`` is never called again for it; otherwise the error is raised (nothing was stored, the
    attempt fails, and the replay runs the step again)."""
    key = {"id": workflow_id, "epoch": epoch, "step": step}
    try:
        return _transaction(pool, key, attempt, name, started, fn, tries)
    except _Unsure as unsure:
        try:
            with pool.pool().connection() as conn, conn.transaction(), _reading(conn) as cur:
                found = cur.execute(q("worker.transaction_recorded"), key).fetchone()
        except psycopg.Error:
            raise unsure.error from None
        if found is not None:
            return found[0]
        raise unsure.error from None


def _transaction(
    pool: TransactionPool,
    key: dict[str, Any],
    attempt: int,
    name: str,
    started: datetime,
    fn: Callable[[psycopg.Connection[Any]], str],
    tries: int | None = None,
) -> Any:
    recorded: Any = _NOTHING
    output = ""
    fn_returned = False
    with pool.pool().connection() as conn:
        try:
            with conn.transaction() as tx:
                set_local(conn, "idle_in_transaction_session_timeout", pool.hold_ms)
                output = fn(conn)
                fn_returned = True
                _check_still_open(conn, name)
                set_local(conn, "statement_timeout", pool.hold_ms)
                with _reading(conn) as cur:
                    fence = cur.execute(q("worker.transaction_fence"), key).fetchone()
                if fence is None:
                    raise Fenced()
                expired, done, stored = fence
                if expired is not None:
                    raise Expired(expired)
                if done:  # never overwrite a checkpoint: keep the first one
                    recorded = stored
                    raise psycopg.Rollback(tx)
                conn.execute(
                    q("worker.transaction_checkpoint"),
                    {**key, "attempt": attempt, "name": name, "output": output, "started": started},
                )
                if tries is not None:  # the checkpoint keeps a parked record's count: the truth
                    conn.execute(q("worker.transaction_tries"), {**key, "tries": tries})
            # COMMIT: sent as the block above exits
        except psycopg.Error as exc:
            if fn_returned:  # the fence, the checkpoint or the COMMIT: its reply may be lost
                raise _Unsure(exc) from exc
            raise
    return json.loads(output) if recorded is _NOTHING else recorded


def _reading(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """A cursor that reads a stored output Python cannot read as an ``Unreadable`` (the
    connection itself, which ``fn`` gets, keeps psycopg's decoder)."""
    cur = conn.cursor()
    storedjson.install(cur)
    return cur


def _check_still_open(conn: psycopg.Connection[Any], name: str) -> None:
    """``fn`` must leave its transaction open and usable for the checkpoint."""
    status = conn.info.transaction_status
    if status == TransactionStatus.IDLE:
        # a COMMIT sent as SQL committed fn's writes so far without the checkpoint: a retry would
        # write them again, so the run fails at once
        raise PermanentError(
            f"transactional step {name!r}: fn ended the transaction itself (COMMIT or ROLLBACK); "
            "its writes must commit with the step's checkpoint, so leave commit and rollback to "
            "ctx.transaction"
        )
    if status == TransactionStatus.INERROR:
        raise RuntimeError(
            f"transactional step {name!r}: fn returned with its transaction aborted by an "
            "error it caught; nothing was stored"
        )
