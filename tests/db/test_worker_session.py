"""The worker loop's session (wfctl/worker/session.py) against a real server: a refused statement
goes through the one guard (logged once a minute, the loop carries on with a stand-in result);
a lost connection is reconnected and the statement sent again, or not, as the caller says."""

from __future__ import annotations

import io
from typing import Any

import psycopg
import pytest

from wfctl.worker.log import WorkerLog
from wfctl.worker.options import WorkerOptions
from wfctl.worker.session import REFUSED, GaveUp, Session


def session(dsn: str, stream: io.StringIO, reconnects: list[int], deadline: float | None = None) -> Session:
    return Session(
        dsn,
        WorkerOptions(),
        WorkerLog("plain", stream),
        "test:1:abcdef",
        deadline=lambda: deadline,
        reconnected=lambda: reconnects.append(1),
    )


def divide(conn: psycopg.Connection[Any], by: int) -> int:
    return conn.execute("SELECT 6 / %s", (by,)).fetchone()[0]


def cut(conn: psycopg.Connection[Any], dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))


def test_a_refused_statement_is_logged_once_and_the_guard_returns_its_stand_in(dsn):
    stream, reconnects = io.StringIO(), []
    s = session(dsn, stream, reconnects)
    s.open()
    try:
        assert s.guarded("division", divide, 2) == 3
        assert s.guarded("division", divide, 0, otherwise=[]) == []
        assert s.guarded("division", divide, 0, otherwise=REFUSED) is REFUSED
        assert s.guarded("division", divide, 3) == 2  # the connection is still good
        with pytest.raises(psycopg.errors.DivisionByZero):
            s.run("division", divide, 0)  # unguarded: the caller handles the refusal
    finally:
        s.conn.close()
    refusals = [line for line in stream.getvalue().splitlines() if "refused the division" in line]
    assert len(refusals) == 1, stream.getvalue()  # the same message again within a minute: not logged
    assert "division by zero" in refusals[0] and "carrying on" in refusals[0]
    assert reconnects == []


def test_a_lost_connection_is_reconnected_and_the_statement_sent_again(dsn):
    stream, reconnects = io.StringIO(), []
    s = session(dsn, stream, reconnects)
    first = s.open()
    cut(first, dsn)
    assert s.run("division", divide, 3) == 2
    assert s.conn is not first and s.connected() and reconnects == [1]
    assert "lost the database connection during division" in stream.getvalue()
    cut(s.conn, dsn)
    assert s.run("division", divide, 3, resend=False) is None  # reconnected, not sent again
    assert s.connected() and reconnects == [1, 1]
    s.conn.close()


def test_a_stopping_worker_past_its_grace_gives_up_reconnecting():
    s = session("host=/nonexistent/socket/dir dbname=none", io.StringIO(), [], deadline=0.0)
    with pytest.raises(GaveUp):
        s.run("division", divide, 3)
    assert not s.connected()
