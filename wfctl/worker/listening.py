"""The listening duty: of a pool's idle workers, one LISTENs at a time.

Every NOTIFY committed in a database makes every session that LISTENs there read the
notification queue in a transaction of its own, whatever its channel: with W idle workers
listening, each submit cost W more transactions. So of the workers of one *pool* (the same
schema, the same workflow types) only the one that holds the pool's session lock
(``worker.listen_wait``) LISTENs, on its schema's channel and its own, and only its claims mark
it idle, so the submit trigger addresses its wake-ups to it alone.

A worker with nothing to do (no run, no write, not stopping) that does not hold the duty waits
for the lock on its loop connection: the statement is sent without waiting for its reply, and
the loop sleeps on the socket as it sleeps on wake-ups, until the lock comes, its next heartbeat
(when it also runs the other duties that came due: the holder runs them on time for the pool)
or an alarm of a run it parked. The wait carries that time as its ``lock_timeout``, so it ends
on the server, with no cancel request; a stop cancels it. The holder leaves the duty
when a claim fills its threads (``worker.listen_release``), and the next waiting worker takes
it, LISTENs and claims at once; a holder that dies ends its session, and the lock with it. A
worker with runs in hand and threads free takes the duty without waiting when no one holds it
(``worker.listen_try``, at most once per poll interval), so a pool whose workers are all
partly busy still has one that listens.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import DiagnosticField, ExecStatus

from wfctl.queries import q
from wfctl.worker import claims

#: What a wait that ended without the lock may say: its lock_timeout passed, or it was cancelled.
ENDED = (b"55P03", b"57014")
#: Seconds to wait for the reply of a wait past its lock_timeout before cancelling it.
REPLY_GRACE = 2.0


class Listening:
    """The duty of worker ``owner`` in the pool of ``types``: ``held`` while it LISTENs."""

    def __init__(self, types: Iterable[str], owner: str) -> None:
        self.types = sorted(types)
        self.pool = ",".join(self.types)
        self.owner = owner
        self.held = False

    def lost(self) -> None:
        """The session ended: the lock and the LISTEN went with it."""
        self.held = False

    def send_wait(self, conn: psycopg.Connection[Any], timeout: float) -> None:
        """Ask for the duty, waiting at most ``timeout`` seconds on the server; the reply comes
        on the connection's socket (``finish_wait``)."""
        millis = max(1, int(timeout * 1000))
        conn.pgconn.send_query_params(
            q("worker.listen_wait").encode(), [self.pool.encode(), str(millis).encode()]
        )

    def finish_wait(self, conn: psycopg.Connection[Any], *, cancel: bool) -> bool:
        """Read the wait's reply, cancelling it first with ``cancel`` (a stop, a thread that
        needs the loop); True when the duty came (LISTEN then: ``take``). A lost connection
        raises ``psycopg.OperationalError``; the wait is over either way."""
        pgconn = conn.pgconn
        if cancel:
            conn.cancel_safe(timeout=REPLY_GRACE)
        got = False
        problem: bytes | None = None
        deadline = time.monotonic() + REPLY_GRACE
        while True:
            while pgconn.is_busy():
                left = deadline - time.monotonic()
                if left <= 0:  # the server did not end the wait in time: make it
                    conn.cancel_safe(timeout=REPLY_GRACE)
                    deadline = time.monotonic() + REPLY_GRACE
                    continue
                select.select([pgconn.socket], [], [], left)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                break
            if result.status == ExecStatus.TUPLES_OK:
                got = True
            elif result.status == ExecStatus.FATAL_ERROR:
                state = result.error_field(DiagnosticField.SQLSTATE)
                if state not in ENDED:
                    problem = result.error_message
        if problem is not None:
            raise psycopg.DatabaseError(problem.decode(errors="replace").strip())
        return got

    def try_take(self, conn: psycopg.Connection[Any]) -> bool:
        """Take the duty if no worker of the pool holds it (then LISTEN); whether it did."""
        row = conn.execute(q("worker.listen_try"), {"pool": self.pool}).fetchone()
        if row is None or not row[0]:
            return False
        self.take(conn)
        return True

    def take(self, conn: psycopg.Connection[Any]) -> None:
        """The lock came: LISTEN, as the pool's listening worker, the pool's only idle one."""
        claims.listen(conn, self.owner)
        conn.execute(q("worker.listen_only"), {"owner": self.owner, "types": self.types})
        self.held = True

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Leave the duty: UNLISTEN and unlock. The wake-ups that came meanwhile are dropped: the
        worker that takes the duty next claims as it takes it, and sees their runs."""
        # two statements in one round trip: the simple protocol, never a prepared statement
        conn.execute(sql.SQL(q("worker.listen_release")).format(pool=sql.Literal(self.pool)), prepare=False)
        for _ in conn.notifies(timeout=0):
            pass
        self.held = False
