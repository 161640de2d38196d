"""A wake-up goes to one idle worker of the workflow's type, in turn, and to the schema's
channel only when no such worker exists (migration 0014).

The workers here are rows in ``workers`` whose channels the test LISTENs on itself, so what
each wake-up reached is read exactly, without timing: a NOTIFY is delivered at its commit, and
the listener's next statement brings it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import wfctl
from wfctl.worker import claims

BROADCAST = "wfctl_new"  # the public schema's channel


@pytest.fixture
def listener(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"LISTEN {BROADCAST}")
        yield conn


def add_worker(
    conn: psycopg.Connection[Any], name: str, types: list[str], *, idle: bool = True, alive: bool = True
) -> str:
    """A worker row, idle or not, heard on its own channel by ``conn``; its channel."""
    channel = conn.execute("SELECT wfctl_worker_channel(%s)", (name,)).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types, dead_after_seconds,"
        " heartbeat_at, idle, wake_channel)"
        " VALUES (%s, 'test', 1, 4, %s, 30, now() - CASE WHEN %s THEN '0s' ELSE '1h' END::interval,"
        " %s, %s)",
        (name, types, alive, idle, channel),
    )
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    return channel


def heard(conn: psycopg.Connection[Any]) -> Counter[tuple[str, str]]:
    """(channel, payload) of every notification that reached ``conn`` so far; a submit's
    payload (where its runs sort: ``at P R C``) as ``at``."""
    conn.execute("SELECT 1")  # brings whatever was committed before it
    return Counter(
        (n.channel, "at" if claims.Announced.parse(n.payload) else n.payload)
        for n in conn.notifies(timeout=0)
    )


def test_a_submit_wakes_one_idle_worker_of_its_type_in_turn(dsn: str, listener: Any) -> None:
    a = add_worker(listener, "a", ["order"])
    b = add_worker(listener, "b", ["order", "mail"])
    add_worker(listener, "c", ["mail"])  # does not run orders
    heard(listener)
    for _ in range(4):
        wfctl.submit(dsn, "order", {})
    assert heard(listener) == Counter({(a, "at"): 2, (b, "at"): 2})


def test_with_no_idle_worker_of_the_type_a_submit_wakes_every_worker(dsn: str, listener: Any) -> None:
    add_worker(listener, "busy", ["order"], idle=False)
    add_worker(listener, "dead", ["order"], alive=False)  # silent past its dead-after
    add_worker(listener, "other", ["mail"])
    heard(listener)
    wfctl.submit(dsn, "order", {})
    assert heard(listener) == Counter({(BROADCAST, "at"): 1})


def test_a_bulk_submit_wakes_one_worker_per_type(dsn: str, listener: Any) -> None:
    a = add_worker(listener, "a", ["order"])
    m = add_worker(listener, "m", ["mail"])
    heard(listener)
    with psycopg.connect(dsn) as conn:  # one transaction, one statement per type
        conn.execute(
            "INSERT INTO workflows (workflow_type, input_data)"
            " SELECT t, '{}' FROM unnest(ARRAY['order', 'order', 'mail', 'report']) AS t"
        )
    # report: nobody idle runs it, so every worker hears it
    assert heard(listener) == Counter({(a, "at"): 1, (m, "at"): 1, (BROADCAST, "at"): 1})


def test_a_submit_s_wake_up_says_where_its_first_run_sorts(dsn: str, listener: Any) -> None:
    """The first in claim order (priority first, then run_at) and the oldest created_at: what a
    worker compares with where its claims resume."""
    a = add_worker(listener, "a", ["order"])
    heard(listener)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO workflows (workflow_type, priority, run_at, created_at)"
            " VALUES ('order', 1, now() - interval '1 hour', now() - interval '2 hours'),"
            "        ('order', 5, now() + interval '1 minute', now()),"
            "        ('order', 5, now(), now() - interval '1 minute')"
        )
        first = conn.execute(
            "SELECT (extract(epoch FROM now()) * 1000000)::bigint,"
            " (extract(epoch FROM now() - interval '2 hours') * 1000000)::bigint"
        ).fetchone()
    assert first is not None
    listener.execute("SELECT 1")
    notes = [(n.channel, n.payload) for n in listener.notifies(timeout=0)]
    assert notes == [(a, f"at 5 {first[0]} {first[1]}")]
    assert claims.Announced.parse(notes[0][1]) == claims.Announced(5, first[0], first[1])


def test_a_message_to_a_waiting_workflow_wakes_one_worker_and_says_scan_from_the_head(
    dsn: str, listener: Any
) -> None:
    a = add_worker(listener, "a", ["order"])
    wid = wfctl.submit(dsn, "order", {})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE workflows SET wait_kind = 'message', wait_topic = 'paid', run_at = 'infinity'"
            " WHERE id = %s",
            (wid,),
        )
    heard(listener)
    wfctl.send(dsn, wid, "paid", 1)
    assert heard(listener) == Counter({(a, "head"): 1})


def test_a_claim_marks_its_worker_idle_only_when_it_leaves_slots_free_and_passes_on_when_full(
    dsn: str,
) -> None:
    from wfctl.worker import claims

    with psycopg.connect(dsn, autocommit=True) as conn:
        add_worker(conn, "w1", ["order"], idle=False)
        other = add_worker(conn, "w2", ["order"])
        for _ in range(3):
            wfctl.submit(conn, "order", {})
        heard(conn)
        policy = {"order": claims.Policy(max_retries=0)}

        def idle() -> bool:
            return bool(conn.execute("SELECT idle FROM workers WHERE id = 'w1'").fetchone()[0])  # type: ignore[index]

        assert len(claims.claim(conn, "w1", policy, 2, addressable=True, room=2).claimed) == 2
        assert not idle()  # full: there may be more, it claims again without being woken
        assert heard(conn) == Counter({(other, ""): 1})  # and it passed a wake-up on
        assert len(claims.claim(conn, "w1", policy, 2, addressable=True, room=2).claimed) == 1
        assert idle()
        assert heard(conn) == Counter()  # not full: nothing passed on
        wfctl.submit(conn, "order", {})
        claims.claim(conn, "w1", policy, 2, addressable=False, room=2)  # it stopped hearing its channel
        assert not idle()
