"""The client API for asyncio applications: ``submit``, ``send``, ``get_event`` and ``result``
of ``wfctl``, as coroutines that do not block the event loop.

Each takes the arguments of its blocking twin, checks them the same way, raises the same errors
(``wfctl.WfctlError`` and its subclasses, with the same messages) and returns the same values.
``target`` is a DSN (the call opens a connection of its own and closes it) or a psycopg
``AsyncConnection``: ``submit`` and ``send`` then run in its current transaction when there is
one (they commit or roll back with it), as the blocking calls do with a ``Connection``.

``result`` and ``get_event`` with a timeout wait without a thread: on a connection in
autocommit mode that talks to PostgreSQL directly, they await the workflow's announcement
(LISTEN/NOTIFY, through ``AsyncConnection.notifies``); on one inside a transaction or behind a
transaction pooler, they poll with ``asyncio.sleep``, backing off to one read a second.
Cancelling the task that waits (``asyncio.wait_for``, ``asyncio.timeout``, a request whose
client went away) ends the wait: the connection stops listening and stays usable. An
``AsyncConnection`` runs one statement or wait at a time: awaits that should run at once need
a connection each (a DSN, or a pool's).

What a call checks and sends, what a row read means, and when a wait reads again are the
functions of ``wfctl.client`` and ``wfctl.coordination`` that the blocking calls use: only the
I/O is here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeAlias
from uuid import UUID

import psycopg

from wfctl import client, coordination, keys
from wfctl.connection import connecting, dsn_target, pooled, search_path_refused, translate
from wfctl.coordination import Do
from wfctl.durations import Duration
from wfctl.errors import InvalidInput
from wfctl.queries import q
from wfctl.validate import encode_input

__all__ = ["Target", "get_event", "result", "send", "submit"]

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
    async with _connection(target) as conn:
        with client.database_errors():
            for _ in range(client.SUBMIT_TRIES):
                found = client.submitted(await _fetchone(conn, "client.submit", params))
                if found is not None:
                    return found.id
    raise client.unseen_key(key)


async def send(
    target: Target,
    workflow_id: UUID | str | None = None,
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
    async with _connection(target) as conn:
        with coordination.database_errors():
            wid = await _run_id(conn, message.given, message.to_key)
            return coordination.sent(await _fetchone(conn, "coordination.send", message.params(wid)), wid).id


async def get_event(
    target: Target,
    workflow_id: UUID | str,
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
    workflow_id: UUID | str | None = None,
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
