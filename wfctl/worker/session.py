"""The worker loop's one database connection: connecting, reconnecting, and running a statement.

Connecting sets the session up for the loop: stored values Python cannot read come back as an
``Unreadable``, statements are prepared at their first execution, and the worker LISTENs for
wake-ups; a transaction pooler found in between (PgBouncer) turns the last two off, and the
worker polls. When the connection drops, ``Session.run`` reconnects with backoff and sends the
statement again: the loop's writes are idempotent under the same lease epoch. Any other
database error is a refusal of that statement. ``Session.guarded`` is the one place a refusal is
logged and carried on from: the duties and the loop's own statements go through it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg

from wfctl import storedjson
from wfctl.connection import behind_pooler, connect, connection_lost, scrub
from wfctl.queries import q
from wfctl.worker import claims
from wfctl.worker.log import WorkerLog
from wfctl.worker.options import WorkerOptions

RECONNECT_MAX_DELAY = 5.0
#: Seconds a worker's idle session lasts at least before the server ends it (a frozen worker's:
#: twice its dead-after, at least this): a short pause keeps its session and its claim's reply.
FROZEN_SESSION_FLOOR = 60.0
REFUSAL_REPEAT = 60.0  # seconds before the same refusal is logged again
#: What ``Session.guarded`` may return for a refused statement whose result is None anyway.
REFUSED: Final = object()


class GaveUp(Exception):
    """The connection is gone and the worker stopped trying to reconnect (it is stopping)."""


class Session:
    """The loop's connection (``conn``, None while there is none) to ``dsn``, as worker ``me``.
    ``deadline`` says when the stop's grace period ends (None: not stopping), after which a
    reconnect gives up; ``reconnected`` runs after each successful reconnect."""

    def __init__(
        self,
        dsn: str,
        options: WorkerOptions,
        log: WorkerLog,
        me: str,
        *,
        deadline: Callable[[], float | None],
        reconnected: Callable[[], None],
        listen_at_connect: bool = True,
    ) -> None:
        self.dsn = dsn
        self.options = options
        self.log = log
        self.me = me
        self.conn: psycopg.Connection[Any] | None = None
        self.pooled = False  # found a transaction pooler in between: poll, prepare nothing
        self.in_statement = False  # the loop waits for the database (for the watchdog)
        self._deadline = deadline
        self._reconnected = reconnected
        self._last_refusal: tuple[str, float] = ("", 0.0)
        # LISTEN as soon as connected; off when the listening duty decides (wfctl/worker/listening.py)
        self.listen_at_connect = listen_at_connect

    def open(self) -> psycopg.Connection[Any]:
        """Connect (at start: an error is raised, not retried)."""
        self.conn = self._connect()
        return self.conn

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self.dsn, prepare=False, application_name="wfctl worker")
        # a stored value Python cannot read (an input, a step's output, a message) comes back
        # as an Unreadable that fails its run, not as an error that fails the whole claim
        storedjson.install(conn)
        direct = self.options.prepare or self.options.listen
        if direct and behind_pooler(conn):
            if not self.pooled:
                self.log.warning(
                    "this connection goes through a pooler (PgBouncer?): polling every "
                    f"{self.options.poll:g}s, without LISTEN and without server-side prepares "
                    "(as with --no-listen)"
                )
            self.pooled = True
        if self.pooled:
            return conn
        if self.options.prepare:
            # at the first execution: a statement planned generically over 41 partitions costs
            # 5-20 ms, and psycopg's default (the sixth) planned each one five times per worker
            conn.prepare_threshold = 0
            conn.execute(q("worker.session_setup"))
        if self.options.listen and self.listen_at_connect:
            claims.listen(conn, self.me)
        elif self.options.listen:  # the listening duty: a frozen holder's session ends
            limit = str(int(max(self.options.dead_after * 2, FROZEN_SESSION_FLOOR) * 1000))
            conn.execute(q("worker.idle_session_limit"), {"limit": limit})
        return conn

    def listening(self) -> bool:
        """Whether this session may LISTEN (not --no-listen, no pooler in between)."""
        return self.options.listen and not self.pooled

    def connected(self) -> bool:
        conn = self.conn
        return conn is not None and not conn.closed

    def drop(self) -> None:
        """Close the connection: the next statement reconnects (a new session)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def cancel_statement(self) -> None:
        """The watchdog: cancel the statement the loop waits on."""
        conn = self.conn
        if conn is not None:
            conn.cancel_safe(timeout=1.0)

    def reconnect(self, error: BaseException, action: str) -> None:
        """Reconnect with backoff; GaveUp if the worker is stopping and its grace is over."""
        self.log.warning(
            f"lost the database connection during {action} ({self.one_line(error)}); reconnecting"
        )
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
        delay = 0.1
        started = time.monotonic()
        while True:
            deadline = self._deadline()
            if deadline is not None and time.monotonic() > deadline:
                raise GaveUp(self.one_line(error))
            try:
                self.conn = self._connect()
            except Exception:
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            self.log.info(f"reconnected after {time.monotonic() - started:.1f}s")
            self._reconnected()
            return

    def run(self, action: str, fn: Callable[..., Any], *args: Any, resend: bool = True) -> Any:
        """Run ``fn(conn, *args)``, reconnecting and retrying when the connection was lost
        (with ``resend=False``: reconnecting, and returning None instead of sending it again).
        Any other database error (a statement timeout, a deadlock, a value the database
        refuses, a full disk) is a refusal of this statement: it is raised to the caller,
        which fails what it must and carries on; re-sending it would fail the same way."""
        while True:
            conn = self.conn
            try:
                if conn is None:
                    raise psycopg.OperationalError("not connected")
                self.in_statement = True
                try:
                    return fn(conn, *args)
                finally:
                    self.in_statement = False
            except psycopg.Error as exc:
                if conn is not None and not connection_lost(conn, exc):
                    raise
                self.reconnect(exc, action)
                if not resend:
                    return None

    def guarded(
        self, action: str, fn: Callable[..., Any], *args: Any, otherwise: Any = None, resend: bool = True
    ) -> Any:
        """``run``, with a refusal logged (``refused``) and ``otherwise`` returned in place of
        the result: for the statements after which the loop carries on whatever the answer."""
        try:
            return self.run(action, fn, *args, resend=resend)
        except psycopg.Error as exc:
            self.refused(action, exc)
            return otherwise

    def refused(self, action: str, error: psycopg.Error) -> None:
        """Log a refused statement (once a minute for the same message)."""
        text = self.one_line(error)
        last, when = self._last_refusal
        now = time.monotonic()
        if text != last or now - when > REFUSAL_REPEAT:
            self._last_refusal = (text, now)
            self.log.warning(f"the database refused the {action} ({text}); carrying on")

    def one_line(self, error: BaseException) -> str:
        """The first line of ``error``, without the DSN's secrets."""
        text = str(error).strip().splitlines()
        return scrub(text[0] if text else type(error).__name__, self.dsn)
