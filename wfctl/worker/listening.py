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

A burst would pass the duty down the waiting workers one claim at a time: each takes it,
LISTENs, claims, fills its threads and leaves it to the next. So when the lock comes with at
least as many runs due as the waiting worker has threads, the same round trip passes it on
(``passed``): the worker claims without listening, and the next waiting worker is handed the
lock by the server at once. A passed worker whose claim then comes back short asks for the
duty again at once (and waits for it next time without passing it on), so a pool that has
worker threads free is never left deaf for longer than it was before.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from psycopg.pq import DiagnosticField, ExecStatus

from wfctl.queries import q
from wfctl.worker import claims

#: What a wait that ended without the lock may say: its lock_timeout passed, or it was cancelled.
ENDED = (b"55P03", b"57014")
#: Seconds to wait for the reply of a wait past its lock_timeout before cancelling it.
REPLY_GRACE = 2.0
#: How many entries of the runnable index, per thread free, a wait that got the lock reads to
#: tell whether the duty should be passed on (an estimate, never a scan of the backlog).
SCAN_PER_THREAD = 4


class Wait(NamedTuple):
    """How a wait for the duty ended: the lock came (``got``), and was passed on at once."""

    got: bool
    passed: bool = False


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

    def send_wait(self, conn: psycopg.Connection[Any], timeout: float, threads: int) -> None:
        """Ask for the duty, waiting at most ``timeout`` seconds on the server; the reply comes
        on the connection's socket (``finish_wait``). With ``threads`` free (0: never), pass the
        duty on as it comes if as many runs are due: the claim would fill them."""
        millis = max(1, int(timeout * 1000))
        threads = max(0, threads)
        statement = sql.SQL(q("worker.listen_wait")).format(
            pool=sql.Literal(self.pool),
            millis=sql.Literal(str(millis)),
            slots=sql.Literal(threads),
            scan=sql.Literal(threads * SCAN_PER_THREAD),
            types=sql.Literal(self.types),
        )
        # two statements, one round trip: the simple protocol, never a prepared statement
        conn.pgconn.send_query(statement.as_bytes(conn))

    def finish_wait(self, conn: psycopg.Connection[Any], *, cancel: bool) -> Wait:
        """Read the wait's reply, cancelling it first with ``cancel`` (a stop, a thread that
        needs the loop). When the lock came and was not passed on, LISTEN then (``take``). A
        lost connection raises ``psycopg.OperationalError``; the wait is over either way. A
        failure of the second statement (the pass) leaves the lock held, not passed."""
        pgconn = conn.pgconn
        if cancel:
            conn.cancel_safe(timeout=REPLY_GRACE)
        results: list[Any] = []
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
            results.append(result)
        if not results or results[0].status != ExecStatus.TUPLES_OK:
            problem = results[0] if results else None
            if (
                problem is not None
                and problem.status == ExecStatus.FATAL_ERROR
                and problem.error_field(DiagnosticField.SQLSTATE) not in ENDED
            ):
                message = problem.error_message or b"the listening wait failed"
                raise psycopg.DatabaseError(message.decode(errors="replace").strip())
            return Wait(got=False)
        passed = (
            len(results) > 1
            and results[1].status == ExecStatus.TUPLES_OK
            and results[1].get_value(0, 0) == b"t"
        )
        return Wait(got=True, passed=passed)

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
