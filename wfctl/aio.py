"""The client API for asyncio applications: ``submit``, ``send``, ``get_event`` and ``result``
of ``wfctl``, and its operator API, ``get``, ``list``, ``cancel`` and ``retry``, as coroutines
that do not block the event loop.

Each takes the arguments of its blocking twin, checks them the same way, raises the same errors
(``wfctl.WfctlError`` and its subclasses, with the same messages) and returns the same values.
``target`` is a DSN (the call opens a connection of its own and closes it) or a psycopg
``AsyncConnection``: ``submit`` and ``send`` then run in its current transaction when there is
one (they commit or roll back with it), as the blocking calls do with a ``Connection``;
``get`` and ``list`` read in it, and ``cancel`` and ``retry`` run in a savepoint of it (on a
connection not in autocommit mode that has none open, they open one and leave it open; in
autocommit mode they commit at once), as ``wfctl.cancel`` and ``wfctl.retry`` do.

``result`` and ``get_event`` with a timeout wait without a thread: on a connection in
autocommit mode that talks to PostgreSQL directly, they await the workflow's announcement
(LISTEN/NOTIFY, through ``AsyncConnection.notifies``); on one inside a transaction or behind a
transaction pooler, they poll with ``asyncio.sleep``, backing off to one read a second.
Cancelling the task that waits (``asyncio.wait_for``, ``asyncio.timeout``, a request whose
client went away) ends the wait: the connection stops listening and stays usable. An
``AsyncConnection`` runs one statement or wait at a time: awaits that should run at once need
a connection each (a DSN, or a pool's).

What a call checks and sends, what a row read means, and when a wait reads again are the
functions of ``wfctl.client``, ``wfctl.coordination``, ``wfctl.keys``, ``wfctl.reports``,
``wfctl.operator`` and ``wfctl.control`` that the blocking calls use: only the I/O is here,
with the lookup of a run by its idempotency key, which needs the connection.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeAlias
from uuid import UUID

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, dict_row
from psycopg.types.json import set_json_loads

from wfctl import client, control, coordination, keys, operator, reports, storedjson, tracing
from wfctl.connection import connecting, dsn_target, pooled, search_path_refused, translate
from wfctl.control import Cancelled, Retried
from wfctl.coordination import Do
from wfctl.durations import Duration
from wfctl.errors import InvalidInput
from wfctl.keys import WorkflowId
from wfctl.operator import RunStatus, RunSummary
from wfctl.queries import q
from wfctl.validate import check_text, encode_input

__all__ = ["Target", "cancel", "get", "get_event", "list", "result", "retry", "send", "submit"]

Target: TypeAlias = psycopg.AsyncConnection[Any] | str
"""Where a call runs: a DSN (the call opens a connection of its own and closes it), or an open
``psycopg.AsyncConnection`` (in its current transaction, if there is one)."""


async def submit(
    target: Target,
    workflow_type: str,
    input: Any = None,
    *,
    key: str | None = None,
    delay: Duration | None = None,
    priority: int = 0,
    max_retries: int | None = None,
    timeout: Duration | None = None,
    concurrency_key: str | None = None,
) -> UUID:
    """Enqueue one workflow and return its id: ``wfctl.submit`` for asyncio. With ``key``,
    submitting again returns the same id and stores nothing new. Runs in the connection's
    current transaction when there is one, so an application can enqueue atomically with its
    own writes. ``timeout`` ("1h") is the run's deadline from now; ``concurrency_key`` puts the
    run under its type's per-key limit. Bad arguments raise ``InvalidInput``."""
    params = client.submit_params(
        workflow_type, encode_input(input), key, delay, priority, max_retries, timeout, concurrency_key
    )
    with tracing.submitting(workflow_type) as traced:
        params["trace_context"] = traced.trace_context
        async with _connection(target) as conn:
            with client.database_errors():
                for _ in range(client.SUBMIT_TRIES):
                    found = client.submitted(await _fetchone(conn, "client.submit", params))
                    if found is not None:
                        traced.submitted(found.id, found.created)
                        return found.id
        raise client.unseen_key(key)


async def send(
    target: Target,
    workflow_id: WorkflowId | None = None,
    topic: str | None = None,
    payload: Any = None,
    *,
    key: str | None = None,
    to_key: str | None = None,
) -> int:
    """Send ``payload`` (JSON) to the workflow on ``topic`` and return the message's id:
    ``wfctl.send`` for asyncio. The workflow gets it from ``ctx.recv(topic)``; it is named by
    ``workflow_id`` or by ``to_key``, the idempotency key it was submitted with (exactly one of
    the two). With ``key``, the message's own idempotency key, sending again returns the first
    message's id and stores nothing. In the connection's transaction when there is one
    (delivered when that commits: an outbox). An unknown workflow or ``to_key`` raises
    ``NotFound``, a finished workflow ``InvalidState``, a ``to_key`` that several runs share
    ``InvalidState`` (the partitioned layout only); nothing is stored then."""
    message = coordination.Message.of(workflow_id, topic, coordination.encode_payload(payload), key, to_key)
    with tracing.sending(message.topic) as traced:
        async with _connection(target) as conn:
            with coordination.database_errors():
                wid = await _run_id(conn, message.given, message.to_key)
                traced.submitted(wid)
                row = await _fetchone(conn, "coordination.send", message.params(wid, traced.trace_context))
                return coordination.sent(row, wid).id


async def get_event(
    target: Target,
    workflow_id: WorkflowId,
    key: str,
    timeout: Duration | None = None,
    default: Any = None,
) -> Any:
    """The latest value the workflow published with ``ctx.set_event(key, ...)``:
    ``wfctl.get_event`` for asyncio. Not set yet: wait up to ``timeout`` for it (None: do not
    wait), then return ``default``; pass ``default=...`` (Ellipsis) to raise ``WaitTimeout``
    instead. An unknown workflow raises ``NotFound``; a finished one that never set it returns
    ``default`` at once."""
    return await _drive(target, coordination.EventWait(workflow_id, key, timeout, default))


async def result(
    target: Target,
    workflow_id: WorkflowId | None = None,
    timeout: Duration | None = None,
    *,
    key: str | None = None,
) -> Any:
    """Wait until the workflow finishes and return its output: ``wfctl.result`` for asyncio.
    The workflow is named by ``workflow_id`` or by ``key``, the idempotency key it was submitted
    with (exactly one of the two). Raises ``WorkflowFailed`` or ``WorkflowCancelled`` when it
    ended so, ``WaitTimeout`` (a ``TimeoutError``) after ``timeout`` (None: wait as long as it
    takes, 0: look once), ``NotFound`` for an unknown id or key, ``InvalidState`` for a key
    that several runs share (the partitioned layout only). Woken by the workflow's completion
    (NOTIFY) where the connection can listen; cancelling the awaiting task leaves the
    connection usable."""
    return await _drive(target, coordination.ResultWait(workflow_id, timeout, key))


async def get(target: Target, id: WorkflowId | None = None, *, key: str | None = None) -> RunStatus:
    """The run named by ``id`` or by ``key``, the idempotency key it was submitted with
    (exactly one of the two): ``wfctl.get`` for asyncio, read in one snapshot (in the
    connection's transaction when one is open). Raises ``NotFound`` for an unknown id or key,
    ``InvalidState`` for a key several runs share (the partitioned layout only) or an output
    Python cannot read, ``InvalidInput`` for both or neither, or an id that is not a UUID."""
    given = keys.given(id, key)
    async with _connection(target) as conn:
        with client.database_errors():
            async with _snapshot(conn):
                wid = await _run_id(conn, given, key)
                found = await _rows(conn, "reports.workflow", {"id": wid}, json_loads=storedjson.loads)
    return operator.run_status(reports.found_workflow(wid, found))


async def list(
    target: Target,
    *,
    type: str | None = None,
    status: str | None = None,
    since: Duration | None = None,
    key: str | None = None,
    limit: int = 100,
) -> builtins.list[RunSummary]:
    """Runs newest first, each a ``RunSummary``: ``wfctl.list`` for asyncio, with its filters
    (``type``; ``status``; ``since``, a duration; ``key``, a prefix of the idempotency key;
    ``limit``, from 1), read in one snapshot. Bad filters raise ``InvalidInput``."""
    window = operator.list_window(type, since)
    params = reports.list_params(status=status, workflow_type=type, since=window, limit=limit, waiting=False)
    if key is not None:
        check_text(key, "the idempotency key prefix")
    async with _connection(target) as conn:
        with client.database_errors():
            async with _snapshot(conn):
                order = None if key is None else await _fetchone(conn, "keys.code_point_order")
                params.update(keys.prefix_range(key, order))
                rows = await _rows(conn, "reports.list_workflows", params)
    return [operator.run_summary(row) for row in reports.listed(rows)]


async def cancel(
    target: Target, id: WorkflowId | None = None, *, key: str | None = None, reason: str | None = None
) -> Cancelled:
    """Cancel the run named by ``id`` or by ``key`` (exactly one of the two) and its unfinished
    descendants: ``wfctl.cancel`` for asyncio, returning what it cancelled. On a DSN it commits
    at once; on a connection it runs in a savepoint of the caller's transaction (one it opens,
    and leaves open, on a connection not in autocommit mode that has none), which the caller
    commits. A finished run raises ``InvalidState`` and nothing is done; ``NotFound`` and
    ``InvalidInput`` as for ``get``."""
    given = keys.given(id, key)
    check_text(reason, "the reason")
    async with _connection(target) as conn:
        with client.database_errors():
            wid = await _run_id(conn, given, key)
            await _join_callers_transaction(conn)
            for last in _tries(control.DEADLOCK_TRIES):
                try:
                    async with conn.transaction():
                        return await _cancel_tree(conn, wid, reason)
                except psycopg.errors.DeadlockDetected:
                    # a child started and ended while the cancel ran, locking child then parent
                    if last:
                        raise
    raise AssertionError("unreachable")


async def retry(
    target: Target, id: WorkflowId | None = None, *, key: str | None = None, from_step: int | None = None
) -> Retried:
    """Put the failed or cancelled run named by ``id`` or by ``key`` (exactly one of the two)
    back to pending, its checkpoints kept (those before ``from_step``, from 1, when given):
    ``wfctl.retry`` for asyncio, in the caller's transaction as ``cancel`` is. A pending,
    running or completed run raises ``InvalidState`` and nothing is done; ``NotFound`` and
    ``InvalidInput`` as for ``get``."""
    given = keys.given(id, key)
    async with _connection(target) as conn:
        with client.database_errors():
            wid = await _run_id(conn, given, key)
            await _join_callers_transaction(conn)
            params = control.retry_params(wid, from_step)
            async with conn.transaction():
                control.check_retryable(wid, (await _lookup(conn, wid)).status)
                if from_step is not None:
                    await conn.execute(q("control.retry_delete_steps"), params)
                cursor = await conn.execute(q("control.retry"), params)
                done = control.retried(wid, await cursor.fetchall())
                await conn.execute(q("control.notify"))
    return done


# -- the I/O ---------------------------------------------------------------------------------


async def _drive(target: Target, wait: coordination.Wait) -> Any:
    """Take the steps of ``wait`` (``coordination.Steps``) on an asyncio connection, as
    ``coordination.drive`` takes them on a blocking one; the wait's value."""
    async with _connection(target) as conn:
        with coordination.database_errors():
            wait.name(await _run_id(conn, wait.given, wait.run_key))
            steps = coordination.Steps(wait)
            try:
                for step in steps:
                    if step is Do.READ:
                        with coordination.decoding(wait.what):
                            steps.reply = await _fetchone(conn, wait.block, wait.params)
                    elif step is Do.LISTEN:
                        if conn.autocommit and not await _behind_pooler(conn):
                            steps.listening = True
                            await conn.execute(q("coordination.listen"))
                            await conn.execute(q("coordination.watch"), {"id": wait.wid})
                    elif steps.listening:
                        await _announced(conn, wait.wid, step)
                    else:
                        await asyncio.sleep(step)
            finally:
                if steps.listening and not conn.closed:
                    await conn.execute(q("coordination.unlisten"))
    return steps.value


async def _announced(conn: psycopg.AsyncConnection[Any], wid: UUID, seconds: float) -> bool:
    """Wait up to ``seconds`` for the announcement of ``wid`` (those of other workflows pass);
    whether it came. The generator of notifications holds the connection's lock: it is closed
    here, not whenever it is collected."""
    async with aclosing(conn.notifies(timeout=seconds)) as notes:
        async for note in notes:
            if note.payload == str(wid):
                return True
    return False


async def _cancel_tree(conn: psycopg.AsyncConnection[Any], wid: UUID, reason: str | None) -> Cancelled:
    """``wfctl.control``'s cancel of the workflow and of its unfinished descendants, in the
    transaction the caller opened: the first statement, then again for the descendants started
    meanwhile, until there are none."""
    params = control.cancel_params(wid, reason)
    async with conn.cursor(row_factory=class_row(control.CancelledRow)) as cur:
        await cur.execute(q("control.cancel"), params)
        rows = await cur.fetchall()
        if not control.cancels_root(rows):
            raise control.nothing_to_cancel(wid, (await _lookup(conn, wid)).status)
        params["descendants_only"] = True
        while True:
            await cur.execute(q("control.cancel"), params)
            more = await cur.fetchall()
            if not more:
                return control.cancelled(rows)
            rows.extend(more)


def _tries(count: int) -> Iterator[bool]:
    """``count`` tries, each saying whether it is the last."""
    return (left == 0 for left in range(count - 1, -1, -1))


async def _lookup(conn: psycopg.AsyncConnection[Any], wid: UUID) -> control.Found:
    """``control.lookup``: the workflow's status and lease; NotFound when there is none."""
    async with conn.cursor(row_factory=class_row(control.Found)) as cur:
        await cur.execute(q("control.lookup"), {"id": wid})
        return control.found(wid, await cur.fetchone())


async def _join_callers_transaction(conn: psycopg.AsyncConnection[Any]) -> None:
    """``wfctl.operator``'s: on a connection not in autocommit mode with no transaction open,
    begin the caller's, so that ``cancel`` and ``retry`` run in a savepoint of it."""
    if operator.outside_callers_transaction(conn.autocommit, conn.info.transaction_status):
        await conn.execute(q("operator.begin"))


@asynccontextmanager
async def _snapshot(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """``wfctl.reports``' snapshot: the reads of one call in one read-only snapshot, inside
    the caller's transaction when there is one."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    async with conn.transaction():
        await conn.execute(q("reports.snapshot"))
        yield


async def _rows(
    conn: psycopg.AsyncConnection[Any],
    block: str,
    params: dict[str, Any],
    *,
    json_loads: Callable[[str | bytes], Any] | None = None,
) -> builtins.list[dict[str, Any]]:
    """The rows of the SQL block ``block`` as dicts keyed by column, their JSON decoded with
    ``json_loads`` (None: the connection's decoder)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        if json_loads is not None:
            set_json_loads(json_loads, cur)
        await cur.execute(q(block), params)
        return await cur.fetchall()


async def _run_id(conn: psycopg.AsyncConnection[Any], workflow_id: UUID | None, key: str | None) -> UUID:
    """``wfctl.keys.run_id`` on an asyncio connection: ``workflow_id``, or the one run of
    ``key``."""
    if workflow_id is not None:
        return workflow_id
    assert key is not None, "keys.check_one lets exactly one through"
    cursor = await conn.execute(q("keys.runs"), keys.runs_params(key))
    return keys.only_run(key, [row[0] for row in await cursor.fetchall()])


async def _fetchone(
    conn: psycopg.AsyncConnection[Any], block: str, params: dict[str, Any] | None = None
) -> tuple[Any, ...] | None:
    """The first row of the SQL block ``block``."""
    cursor = await conn.execute(q(block), params)
    return await cursor.fetchone()


async def _behind_pooler(conn: psycopg.AsyncConnection[Any]) -> bool:
    """``wfctl.connection.behind_pooler`` on an asyncio connection."""
    return pooled(await _fetchone(conn, "admin.backend_pid"), conn.info.backend_pid)


@asynccontextmanager
async def _connection(target: Target) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The caller's connection, or one opened for ``target``, a DSN, and closed after."""
    if isinstance(target, str):
        async with await _connect(target) as conn:
            yield conn
    elif isinstance(target, psycopg.AsyncConnection):
        yield target
    else:
        raise InvalidInput(
            f"wfctl.aio takes a DSN or a psycopg.AsyncConnection, not a {type(target).__name__}"
            " (wfctl itself takes a blocking psycopg.Connection)"
        )


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    """``wfctl.connection.connect`` for asyncio: autocommit, no server-side prepared statements,
    the same errors, and the same check that the server applied the DSN's schema."""
    where = dsn_target(dsn)
    with connecting(dsn):
        conn = await psycopg.AsyncConnection.connect(where.conninfo, autocommit=True, prepare_threshold=None)
    if where.search_path is None:
        return conn
    try:
        row = await _fetchone(conn, "admin.search_path")
    except psycopg.Error as exc:
        await conn.close()
        raise translate(exc, dsn) from None
    refused = search_path_refused(row, where.search_path, dsn)
    if refused is not None:
        await conn.close()
        raise refused
    return conn
