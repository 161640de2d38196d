"""``wfctl.aio``, the client API for asyncio applications, against a real server: each call on a
DSN and on a psycopg ``AsyncConnection`` (in the caller's transaction), the errors of its
blocking twin with the same messages, ``result`` woken by the NOTIFY of a completion, a
cancelled wait that leaves its connection clean, and many waits on one event loop.

No worker runs here: a run is completed, failed or cancelled by updating its row (the trigger
that announces an awaited run's end fires on that update) or by ``wfctl.control.cancel``. Each
test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from helpers import rows
from psycopg.pq import TransactionStatus
from support import run_states as states
from support.own_schema import app_database
from test_business_keys import shared_key
from test_operator_api import runs_in_each_state

import wfctl
from wfctl import aio, control, coordination
from wfctl.connection import with_search_path
from wfctl.control import Cancelled, Retried

UNKNOWN = "6f1c1b7e-0000-4000-8000-000000000000"


async def aconnect(dsn: str, *, autocommit: bool = True) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit)


def finish(dsn: str, wid: object, status: str = "completed", output: str | None = None, error=None) -> None:
    """End a run from another connection, as a worker's last commit would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE workflows SET status = %s, output_data = %s::jsonb, error_message = %s,"
            " finished_at = now() WHERE id = %s",
            (status, output, error, wid),
        )


def set_event(dsn: str, wid: object, key: str, value: str) -> None:
    """Publish an event from another connection as ``ctx.set_event`` does: the row and the
    announcement on the watch channel, in one commit."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO workflow_events (workflow_id, key, value, step_number)"
            " VALUES (%s, %s, %s::jsonb, 1)",
            (wid, key, value),
        )
        conn.execute("SELECT pg_notify(wfctl_watch_channel(), %s)", (str(wid),))


async def until(dsn: str, sql: str, *params: object, timeout: float = 30.0) -> None:
    """Await the moment ``sql`` (one boolean) reads true, without blocking the event loop."""
    deadline = time.monotonic() + timeout
    async with await aconnect(dsn) as conn:
        while True:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, f"not within {timeout}s: {sql}"
            await asyncio.sleep(0.02)


def error_of(call: Callable[[], object]) -> Exception:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")


async def aerror_of(call: Awaitable[object]) -> Exception:
    try:
        await call
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")


def assert_same_error(blocking: Exception, awaited: Exception) -> None:
    assert type(awaited) is type(blocking), (blocking, awaited)
    assert str(awaited) == str(blocking)
    assert isinstance(awaited, wfctl.WfctlError)


class Announcements:
    """aio's waits for an announcement: how many began, and what each ended with (True: the
    announcement came)."""

    def __init__(self) -> None:
        self.begun = 0
        self.heard: list[bool] = []

    async def begun_at_least(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.begun < count:
            assert time.monotonic() < deadline, f"{self.begun} of {count} waits began listening"
            await asyncio.sleep(0.01)


@pytest.fixture
def announcements(monkeypatch) -> Announcements:
    """A spy on aio's waits for an announcement, with the re-read of a listening wait pushed
    out to an hour: only a notification ends such a wait sooner."""
    monkeypatch.setattr(coordination, "RECHECK", 3600.0)
    seen = Announcements()
    listen = aio._announced

    async def spy(conn: psycopg.AsyncConnection[Any], wid: Any, seconds: float) -> bool:
        seen.begun += 1
        came = await listen(conn, wid, seconds)
        seen.heard.append(came)
        return came

    monkeypatch.setattr(aio, "_announced", spy)
    return seen


# -- submit ------------------------------------------------------------------------------------


def test_submit_on_a_dsn_stores_what_the_blocking_submit_stores(dsn):
    async def main() -> tuple[Any, Any, Any]:
        keyed = await aio.submit(dsn, "order", {"n": 1}, key="order-1")
        again = await aio.submit(dsn, "order", {"n": 2}, key="order-1")
        full = await aio.submit(
            dsn,
            "order",
            [1, "two"],
            delay="10m",
            priority=5,
            max_retries=0,
            timeout="1h",
            concurrency_key="acme",
        )
        return keyed, again, full

    keyed, again, full = asyncio.run(main())
    assert again == keyed and wfctl.submit(dsn, "order", None, key="order-1") == keyed
    assert rows(dsn, "SELECT input_data FROM workflows WHERE id = %s", keyed) == [({"n": 1},)]
    assert rows(
        dsn,
        "SELECT input_data, priority, max_retries, concurrency_key, deadline_error,"
        " run_at > now() + interval '9 minutes', deadline_at > now() + interval '59 minutes'"
        " FROM workflows WHERE id = %s",
        full,
    ) == [([1, "two"], 5, 0, "acme", "timed out after 1h", True, True)]


@pytest.mark.parametrize(
    "bad",
    [
        {"input": float("nan")},
        {"input": "\x00"},
        {"input": {1, 2}},
        {"workflow_type": ""},
        {"priority": 2**40},
        {"max_retries": -1},
        {"delay": "soon"},
        {"delay": -1},
        {"timeout": 0},
        {"key": "a\x00b"},
        {"concurrency_key": ""},
    ],
    ids=repr,
)
def test_submit_refuses_what_the_blocking_submit_refuses_with_its_message(dsn, bad):
    args: dict[str, Any] = {"workflow_type": "order", **bad}
    blocking = error_of(lambda: wfctl.submit(dsn, **args))
    awaited = asyncio.run(aerror_of(aio.submit(dsn, **args)))
    assert_same_error(blocking, awaited)
    assert isinstance(awaited, wfctl.InvalidInput)
    assert rows(dsn, "SELECT count(*) FROM workflows") == [(0,)]


def test_submit_and_send_on_a_connection_commit_or_roll_back_with_its_transaction(dsn):
    async def main() -> Any:
        async with await aconnect(dsn, autocommit=False) as conn:
            ghost = await aio.submit(conn, "order", {"n": 0})
            await aio.send(conn, ghost, "go", "never")
            await conn.rollback()
            kept = await aio.submit(conn, "order", {"n": 1}, key="kept")
            await aio.send(conn, kept, "go", "once", key="m")
            assert rows(dsn, "SELECT count(*) FROM workflows") == [(0,)]  # not yet committed
            await conn.commit()
            async with conn.transaction(force_rollback=True):  # the block style
                await aio.submit(conn, "order", {"n": 2})
        return kept

    kept = asyncio.run(main())
    assert rows(dsn, "SELECT id, idempotency_key FROM workflows") == [(kept, "kept")]
    assert rows(dsn, "SELECT workflow_id, payload, idempotency_key FROM workflow_messages") == [
        (kept, "once", "m")
    ]


def test_a_connection_that_is_not_an_async_one_is_refused(dsn):
    with psycopg.connect(dsn) as blocking:
        error = asyncio.run(aerror_of(aio.submit(blocking, "order")))  # type: ignore[arg-type]
    assert isinstance(error, wfctl.InvalidInput)
    assert "psycopg.AsyncConnection, not a Connection" in str(error)


def test_connection_and_schema_errors_are_the_blocking_ones(empty_dsn, tmp_path):
    unreachable = f"host={tmp_path} port=1 connect_timeout=2"
    for target, kind in (
        (empty_dsn, wfctl.SchemaError),
        (unreachable, wfctl.ConnectionFailed),
        ("host=x port=notaport = =", wfctl.ConfigError),
    ):
        blocking = error_of(lambda target=target: wfctl.submit(target, "order"))
        awaited = asyncio.run(aerror_of(aio.submit(target, "order")))
        assert_same_error(blocking, awaited)
        assert isinstance(awaited, kind)
    schema_error = asyncio.run(aerror_of(aio.submit(empty_dsn, "order")))
    assert isinstance(schema_error.__cause__, psycopg.errors.UndefinedFunction)


def test_a_dsn_with_a_schema_of_its_own_is_checked_and_used(cli, empty_dsn):
    app_database(empty_dsn)
    assert cli("init", "--schema", "wf", "--dsn", empty_dsn).exit_code == 0
    target = with_search_path(empty_dsn, "wf")

    async def main() -> Any:
        wid = await aio.submit(target, "order", {"n": 1})
        return wid, await aio.get_event(target, wid, "k", default="unset")

    wid, event = asyncio.run(main())
    assert event == "unset"
    assert rows(empty_dsn, "SELECT count(*) FROM wf.workflows WHERE id = %s", wid) == [(1,)]


# -- send --------------------------------------------------------------------------------------


def test_send_stores_a_keyed_message_once(dsn):
    wid = wfctl.submit(dsn, "order")

    async def main() -> tuple[int, int, int]:
        async with await aconnect(dsn) as conn:
            first = await aio.send(conn, wid, "go", {"by": "ada"}, key="k")
        again = await aio.send(dsn, str(wid), "go", {"by": "bob"}, key="k")
        bare = await aio.send(dsn, wid, "other")
        return first, again, bare

    first, again, bare = asyncio.run(main())
    assert again == first == wfctl.send(dsn, wid, "go", "x", key="k")
    assert rows(dsn, "SELECT id, topic, payload FROM workflow_messages ORDER BY id") == [
        (first, "go", {"by": "ada"}),
        (bare, "other", None),
    ]


def test_send_refuses_what_the_blocking_send_refuses_and_stores_nothing(dsn):
    done = wfctl.submit(dsn, "order")
    finish(dsn, done, output='"ok"')
    pending = wfctl.submit(dsn, "order")
    cases = [
        ((UNKNOWN, "go", 1), {}, wfctl.NotFound),
        ((done, "go", 1), {}, wfctl.InvalidState),
        (("not-an-id", "go", 1), {}, wfctl.InvalidInput),
        ((pending, "x" * 151, 1), {}, wfctl.InvalidInput),
        ((pending, "go", {"a": {1}}), {}, wfctl.InvalidInput),
        ((pending, "go", float("inf")), {}, wfctl.InvalidInput),
        ((pending, "go", 1), {"key": "k" * 201}, wfctl.InvalidInput),
    ]
    for args, kwargs, kind in cases:
        blocking = error_of(lambda args=args, kwargs=kwargs: wfctl.send(dsn, *args, **kwargs))
        awaited = asyncio.run(aerror_of(aio.send(dsn, *args, **kwargs)))
        assert_same_error(blocking, awaited)
        assert isinstance(awaited, kind), args
    assert "is completed" in str(asyncio.run(aerror_of(aio.send(dsn, done, "go"))))
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


# -- get_event ---------------------------------------------------------------------------------


def test_get_event_reads_the_latest_value_and_the_defaults(dsn):
    wid = wfctl.submit(dsn, "order")
    set_event(dsn, wid, "stage", '"packed"')

    async def main() -> list[Any]:
        async with await aconnect(dsn) as conn:
            on_conn = await aio.get_event(conn, wid, "stage")
        return [
            on_conn,
            await aio.get_event(dsn, str(wid), "stage", timeout=5, default=...),
            await aio.get_event(dsn, wid, "missing"),
            await aio.get_event(dsn, wid, "missing", default="not yet"),
            await aio.get_event(dsn, wid, "missing", timeout="50ms", default="late"),
        ]

    assert asyncio.run(main()) == ["packed", "packed", None, "not yet", "late"]


def test_get_event_raises_what_the_blocking_get_event_raises(dsn):
    wid = wfctl.submit(dsn, "order")
    done = wfctl.submit(dsn, "order")
    finish(dsn, done, output="1")
    cases = [
        ((UNKNOWN, "k"), {}, wfctl.NotFound),
        (("nope", "k"), {}, wfctl.InvalidInput),
        ((wid, ""), {}, wfctl.InvalidInput),
        ((wid, "k"), {"timeout": "soon"}, wfctl.InvalidInput),
        ((wid, "k"), {"default": ...}, wfctl.NotFound),  # not set, no timeout
        ((done, "k"), {"default": ...}, wfctl.NotFound),  # finished without it
    ]
    for args, kwargs, kind in cases:
        blocking = error_of(lambda args=args, kwargs=kwargs: wfctl.get_event(dsn, *args, **kwargs))
        awaited = asyncio.run(aerror_of(aio.get_event(dsn, *args, **kwargs)))
        assert_same_error(blocking, awaited)
        assert isinstance(awaited, kind), (args, kwargs)
    timed_out = asyncio.run(aerror_of(aio.get_event(dsn, wid, "k", timeout=0.2, default=...)))
    assert isinstance(timed_out, wfctl.WaitTimeout) and isinstance(timed_out, TimeoutError)
    assert str(timed_out) == f"workflow {wid} did not set event 'k' within 0.2s"


def test_get_event_of_a_finished_run_that_never_set_it_does_not_wait(dsn):
    done = wfctl.submit(dsn, "order")
    finish(dsn, done, output="1")

    async def main() -> Any:
        # a wait for the whole timeout would end in asyncio's TimeoutError, failing the test
        return await asyncio.wait_for(aio.get_event(dsn, done, "k", timeout=3600, default="gone"), 30)

    assert asyncio.run(main()) == "gone"


def test_get_event_is_woken_by_the_announcement_of_the_value(dsn, announcements):
    wid = wfctl.submit(dsn, "order")

    async def main() -> Any:
        waiting = asyncio.create_task(aio.get_event(dsn, wid, "stage", timeout=3600, default=...))
        await announcements.begun_at_least(1)
        await asyncio.to_thread(set_event, dsn, wid, "stage", '"shipped"')
        return await asyncio.wait_for(waiting, 30)

    assert asyncio.run(main()) == "shipped"
    assert announcements.heard == [True]


# -- result ------------------------------------------------------------------------------------


def test_result_returns_the_output_of_a_finished_run(dsn):
    wid = wfctl.submit(dsn, "order")
    finish(dsn, wid, output='{"total": 12, "items": ["boots"]}')

    async def main() -> list[Any]:
        async with await aconnect(dsn) as conn:
            on_conn = await aio.result(conn, wid)
        async with await aconnect(dsn, autocommit=False) as conn:
            in_transaction = await aio.result(conn, str(wid), timeout=0)
        return [on_conn, in_transaction, await aio.result(dsn, wid, timeout="1s")]

    assert asyncio.run(main()) == [{"total": 12, "items": ["boots"]}] * 3


def test_result_raises_what_the_blocking_result_raises(dsn, conn):
    failed = wfctl.submit(dsn, "order")
    finish(dsn, failed, status="failed", error="ValueError: bad sku")
    cancelled = wfctl.submit(dsn, "order")
    control.cancel(conn, cancelled, reason="the customer kept the boots")
    pending = wfctl.submit(dsn, "order")
    cases = [
        ((failed,), wfctl.WorkflowFailed),
        ((cancelled,), wfctl.WorkflowCancelled),
        ((UNKNOWN,), wfctl.NotFound),
        (("nope",), wfctl.InvalidInput),
        ((pending, 0), wfctl.WaitTimeout),
        ((pending, "0.2s"), wfctl.WaitTimeout),
        ((pending, "later"), wfctl.InvalidInput),
    ]
    for args, kind in cases:
        blocking = error_of(lambda args=args: wfctl.result(dsn, *args))
        awaited = asyncio.run(aerror_of(aio.result(dsn, *args)))
        assert_same_error(blocking, awaited)
        assert isinstance(awaited, kind), args
    error = asyncio.run(aerror_of(aio.result(dsn, failed)))
    assert isinstance(error, wfctl.WorkflowFailed) and error.error == "ValueError: bad sku"
    reason = asyncio.run(aerror_of(aio.result(dsn, cancelled)))
    assert isinstance(reason, wfctl.WorkflowCancelled) and reason.reason == "the customer kept the boots"
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", pending) == [("pending",)]


def test_result_and_get_event_say_they_cannot_decode_the_value(dsn, unreadable_run):
    for blocking_call, awaited_call in (
        (lambda: wfctl.result(dsn, unreadable_run), aio.result(dsn, unreadable_run)),
        (lambda: wfctl.get_event(dsn, unreadable_run, "k"), aio.get_event(dsn, unreadable_run, "k")),
    ):
        awaited = asyncio.run(aerror_of(awaited_call))
        assert_same_error(error_of(blocking_call), awaited)
        assert isinstance(awaited, wfctl.InvalidState) and "cannot be decoded" in str(awaited)


def test_result_is_woken_by_the_notify_of_a_completion_from_another_connection(dsn, announcements):
    wid = wfctl.submit(dsn, "order")

    async def main() -> tuple[Any, float]:
        waiting = asyncio.create_task(aio.result(dsn, wid))
        await announcements.begun_at_least(1)  # it listens, and waits for the announcement
        assert rows(dsn, "SELECT awaited FROM workflows WHERE id = %s", wid) == [(True,)]
        finished_at = time.monotonic()
        await asyncio.to_thread(finish, dsn, wid, "completed", '"done"')
        output = await asyncio.wait_for(waiting, 30)
        return output, time.monotonic() - finished_at

    output, took = asyncio.run(main())
    assert output == "done"
    # the announcement ended the wait (its re-read was an hour away), and within seconds
    assert announcements.heard == [True]
    assert took < 10 < coordination.RECHECK


def test_result_on_a_connection_in_a_transaction_polls_without_listening(dsn, monkeypatch):
    """No notification reaches a connection inside a transaction: the wait reads again after
    a pause that backs off, and does not mark the run awaited (nor LISTEN)."""
    monkeypatch.setattr(coordination, "POLL_MAX", 0.1)
    wid = wfctl.submit(dsn, "order")

    async def main() -> Any:
        async with await aconnect(dsn, autocommit=False) as conn:
            waiting = asyncio.create_task(aio.result(conn, wid, timeout=60))
            await until(
                dsn,
                "SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'idle in transaction'",
            )
            await asyncio.to_thread(finish, dsn, wid, "completed", "7")
            output = await asyncio.wait_for(waiting, 30)
            channels = await (await conn.execute("SELECT count(*) FROM pg_listening_channels()")).fetchone()
            return output, channels

    assert asyncio.run(main()) == (7, (0,))
    assert rows(dsn, "SELECT awaited FROM workflows WHERE id = %s", wid) == [(False,)]


# -- cancellation and many waits -----------------------------------------------------------------


async def listening_channels(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    cursor = await conn.execute("SELECT pg_listening_channels()")
    return [r[0] for r in await cursor.fetchall()]


def test_a_cancelled_wait_leaves_its_connection_usable_and_unlistened(dsn, announcements):
    wid = wfctl.submit(dsn, "order")

    async def main() -> None:
        async with await aconnect(dsn) as conn:
            # asyncio.wait_for cancels the wait at its own timeout
            with pytest.raises(TimeoutError) as info:
                await asyncio.wait_for(aio.result(conn, wid), 0.5)
            assert not isinstance(info.value, wfctl.WaitTimeout)  # asyncio's, not the library's
            assert announcements.begun == 1  # it was cancelled while it listened
            assert await listening_channels(conn) == []
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

            # a task cancelled while it waits for the announcement
            waiting = asyncio.create_task(aio.result(conn, wid))
            await announcements.begun_at_least(2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await listening_channels(conn) == []
            # the connection serves the next call, a wait that listens included
            await asyncio.to_thread(finish, dsn, wid, "completed", '"after"')
            assert await asyncio.wait_for(aio.result(conn, wid, timeout=30), 30) == "after"
            assert await listening_channels(conn) == []

    asyncio.run(main())


def test_a_cancelled_poll_in_a_transaction_leaves_the_transaction_usable(dsn):
    wid = wfctl.submit(dsn, "order")

    async def main() -> None:
        async with await aconnect(dsn, autocommit=False) as conn:
            await conn.execute("CREATE TEMP TABLE mine (n int)")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(aio.result(conn, wid), 0.3)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            await conn.execute("INSERT INTO mine VALUES (1)")  # the transaction goes on
            cursor = await conn.execute("SELECT count(*) FROM mine")
            assert await cursor.fetchone() == (1,)
            await conn.rollback()

    asyncio.run(main())


def test_fifty_waits_on_one_event_loop_all_return(dsn, announcements):
    ids = [wfctl.submit(dsn, "order", {"n": n}) for n in range(50)]

    async def main() -> list[Any]:
        waits = [asyncio.create_task(aio.result(dsn, wid, timeout=120)) for wid in ids]
        await announcements.begun_at_least(50, timeout=60)
        with psycopg.connect(dsn, autocommit=True) as conn:  # one commit ends them all
            conn.execute(
                "UPDATE workflows SET status = 'completed', output_data = input_data, finished_at = now()"
                " WHERE id = ANY(%s::uuid[])",
                (ids,),
            )
        return await asyncio.wait_for(asyncio.gather(*waits), 60)

    assert asyncio.run(main()) == [{"n": n} for n in range(50)]
    assert announcements.heard == [True] * 50


# -- by business key: result and send ----------------------------------------------------------


def test_result_and_send_by_key_reach_the_run_with_that_key(dsn, conn):
    done = states.submitted(dsn, "ship-done", "order-done")
    states.completed(conn, states.claim(conn, "ship-done"), {"tracking": "ZX-1"})
    waiting = states.submitted(dsn, "approve", "order-7")
    states.on_a_message(conn, states.claim(conn, "approve"), "approval", timeout=None)

    async def main() -> tuple[Any, Any, int, int, int]:
        async with await aconnect(dsn, autocommit=False) as aconn:
            async with aconn.transaction(force_rollback=True):
                rolled = await aio.send(aconn, topic="approval", payload={"no": 1}, to_key="order-7")
            on_conn = await aio.result(aconn, key="order-done", timeout=0)
        first = await aio.send(dsn, topic="approval", payload={"ok": True}, to_key="order-7", key="m1")
        again = await aio.send(dsn, None, "approval", {"ok": False}, to_key="order-7", key="m1")
        return on_conn, await aio.result(dsn, key="order-done"), rolled, first, again

    on_conn, on_dsn, rolled, first, again = asyncio.run(main())
    assert on_conn == on_dsn == {"tracking": "ZX-1"} == wfctl.result(dsn, key="order-done")
    assert again == first != rolled
    assert rows(dsn, "SELECT id, workflow_id, payload FROM workflow_messages") == [
        (first, waiting, {"ok": True})
    ]
    refused = asyncio.run(aerror_of(aio.send(dsn, topic="approval", to_key="order-done")))
    assert_same_error(error_of(lambda: wfctl.send(dsn, topic="approval", to_key="order-done")), refused)
    assert isinstance(refused, wfctl.InvalidState) and done != waiting


# -- the operator API: get, list, cancel, retry -------------------------------------------------


def test_get_and_list_say_what_the_blocking_ones_say_on_a_dsn_and_a_connection(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    ids = [runs.pending, runs.running, runs.on_message, runs.asleep, runs.on_children, *runs.children]
    ids += [runs.completed, runs.failed, runs.cancelled]
    filters: list[dict[str, Any]] = [
        {},
        {"status": "failed"},
        {"type": "ops-sleep"},
        {"limit": 3},
        {"key": "order-"},
        {"key": "order-fail"},
        {"key": "order-", "status": "pending", "type": "ops-sleep"},
        {"key": "order-nothing"},
        {"since": "1h"},
        {"since": 3600},
        {"since": timedelta(hours=1)},
    ]

    async def main() -> tuple[list[Any], list[Any]]:
        got: list[Any] = []
        listed: list[Any] = []
        async with await aconnect(dsn) as aconn:
            for wid in ids:
                got.append(await aio.get(dsn, wid))
                got.append(await aio.get(aconn, str(wid)))  # the id as text too
            for run in got[::2]:
                if run.idempotency_key is not None:
                    got.append(await aio.get(aconn, key=run.idempotency_key))
            for where in filters:
                listed.append(await aio.list(dsn, **where))
                listed.append(await aio.list(aconn, **where))
        return got, listed

    got, listed = asyncio.run(main())
    want = [wfctl.get(dsn, wid) for wid in ids]
    assert got[: 2 * len(ids) : 2] == got[1 : 2 * len(ids) : 2] == want
    assert got[2 * len(ids) :] == [run for run in want if run.idempotency_key is not None]
    assert all(isinstance(run, wfctl.RunStatus) for run in got)
    assert len(listed[0]) == 10 and listed[0][0].wait is None  # a child, the newest
    for index, where in enumerate(filters):
        blocking = wfctl.list(dsn, **where)
        assert listed[2 * index] == listed[2 * index + 1] == blocking, where
        assert all(isinstance(row, wfctl.RunSummary) for row in blocking)
    assert [r.id for r in listed[2]] == [runs.failed]


def test_cancel_and_retry_return_what_the_engine_did(dsn, conn):
    runs = runs_in_each_state(dsn, conn)

    async def main() -> list[Any]:
        async with await aconnect(dsn) as aconn:
            return [
                await aio.cancel(dsn, runs.on_children),
                await aio.retry(aconn, key="order-parent"),
                await aio.cancel(aconn, key="order-running", reason="stop"),
                await aio.retry(dsn, runs.failed, from_step=1),
            ]

    parent, again, running, failed = asyncio.run(main())
    assert (parent.id, parent.previous_status, parent.worker) == (runs.on_children, "pending", states.WORKER)
    assert [(d.id, d.previous_status, d.depth) for d in parent.descendants] == [
        (child, "pending", 1) for child in sorted(runs.children)
    ]
    assert again == Retried(runs.on_children, kept_steps=1, descendants=2)
    assert running == Cancelled(runs.running, "running", states.WORKER)
    assert failed == Retried(runs.failed, kept_steps=0)
    assert rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", runs.running) == [
        ("cancelled", "stop")
    ]
    assert wfctl.get(dsn, runs.failed).status == wfctl.get(dsn, runs.children[0]).status == "pending"


def both_errors(blocking: Callable[[], object], awaited: Awaitable[object]) -> Exception:
    """The error of the blocking call and of its async twin, checked to be the same; the latter."""
    first = error_of(blocking)
    second = asyncio.run(aerror_of(awaited))
    assert_same_error(first, second)
    return second


def operator_calls(target: Any, wid: object = None, key: str | None = None) -> dict[str, tuple[Any, Any]]:
    """Each call that names one run, blocking and async, by ``wid`` or by ``key``."""
    return {
        "get": (lambda: wfctl.get(target, wid, key=key), lambda: aio.get(target, wid, key=key)),
        "cancel": (lambda: wfctl.cancel(target, wid, key=key), lambda: aio.cancel(target, wid, key=key)),
        "retry": (lambda: wfctl.retry(target, wid, key=key), lambda: aio.retry(target, wid, key=key)),
        "result": (
            lambda: wfctl.result(target, wid, timeout=0, key=key),
            lambda: aio.result(target, wid, timeout=0, key=key),
        ),
        "send": (
            lambda: wfctl.send(target, wid, "approval", {"ok": True}, to_key=key),
            lambda: aio.send(target, wid, "approval", {"ok": True}, to_key=key),
        ),
    }


def test_an_unknown_id_or_key_is_not_found_as_for_the_blocking_calls(dsn):
    missing = uuid4()
    for blocking, awaited in operator_calls(dsn, missing).values():
        assert isinstance(both_errors(blocking, awaited()), wfctl.NotFound)
    for name, (blocking, awaited) in operator_calls(dsn, key="no-such-order").items():
        found = both_errors(blocking, awaited())
        assert str(found) == "no workflow with idempotency key 'no-such-order'", name
    escaped = both_errors(lambda: wfctl.get(dsn, key="evil\x1b[2J\n"), aio.get(dsn, key="evil\x1b[2J\n"))
    assert str(escaped) == "no workflow with idempotency key 'evil\\x1b[2J\\x0a'"
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


def test_an_id_and_a_key_together_or_neither_is_invalid_input(dsn):
    wid = states.submitted(dsn, "ops", "order-1")
    for blocking, awaited in operator_calls(dsn, wid, key="order-1").values():
        assert "not both" in str(both_errors(blocking, awaited()))
    for blocking, awaited in operator_calls(dsn).values():
        assert isinstance(both_errors(blocking, awaited()), wfctl.InvalidInput)
    assert "not a workflow id" in str(both_errors(lambda: wfctl.get(dsn, "x"), aio.get(dsn, "x")))
    assert "NUL" in str(both_errors(lambda: wfctl.get(dsn, key="o\x00"), aio.get(dsn, key="o\x00")))
    assert "NUL" in str(both_errors(lambda: wfctl.list(dsn, key="o\x00"), aio.list(dsn, key="o\x00")))
    bad = "r\x00"
    assert "NUL" in str(
        both_errors(lambda: wfctl.cancel(dsn, wid, reason=bad), aio.cancel(dsn, wid, reason=bad))
    )
    assert wfctl.get(dsn, wid).status == "pending"  # nothing was done to it


def test_cancel_of_a_finished_run_and_retry_of_an_unfinished_one_are_invalid_state(dsn, conn):
    runs = runs_in_each_state(dsn, conn)
    before = rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id")
    cases = [
        ("cancel", (runs.completed,), {}, wfctl.InvalidState),
        ("cancel", (), {"key": "order-failed"}, wfctl.InvalidState),
        ("retry", (runs.running,), {}, wfctl.InvalidState),
        ("retry", (), {"key": "order-pending"}, wfctl.InvalidState),
        ("retry", (runs.failed,), {"from_step": 0}, wfctl.InvalidInput),
        ("list", (), {"status": "done"}, wfctl.InvalidInput),
        ("list", (), {"since": "soon"}, wfctl.InvalidInput),
        ("list", (), {"since": 0}, wfctl.InvalidInput),
        ("list", (), {"limit": 0}, wfctl.InvalidInput),
        ("list", (), {"type": "t\x00"}, wfctl.InvalidInput),
    ]
    for name, args, kwargs, kind in cases:
        blocking = getattr(wfctl, name)
        awaited = getattr(aio, name)(dsn, *args, **kwargs)
        refused = both_errors(lambda b=blocking, a=args, k=kwargs: b(dsn, *a, **k), awaited)
        assert isinstance(refused, kind), (name, args, kwargs)
    assert rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id") == before


def test_an_output_python_cannot_read_is_invalid_state_as_for_get(dsn):
    wid = states.submitted(dsn, "ops", "order-deep")
    finish(dsn, wid, output="[" * 5000 + "]" * 5000)
    got = both_errors(lambda: wfctl.get(dsn, key="order-deep"), aio.get(dsn, key="order-deep"))
    assert isinstance(got, wfctl.InvalidState) and "cannot be decoded" in str(got)
    assert [r.id for r in asyncio.run(aio.list(dsn, key="order-deep"))] == [wid]  # no output read


def test_operator_calls_refuse_a_blocking_connection(dsn, conn):
    for awaited in (
        aio.get(conn, UNKNOWN),
        aio.list(conn),
        aio.cancel(conn, UNKNOWN),
        aio.retry(conn, UNKNOWN),
    ):
        refused = asyncio.run(aerror_of(awaited))
        assert isinstance(refused, wfctl.InvalidInput) and "AsyncConnection" in str(refused)


# -- the operator API on a connection -----------------------------------------------------------


def test_on_a_connection_everything_runs_in_the_callers_transaction(dsn):
    wid = states.submitted(dsn, "ops", "order-1")

    async def main() -> None:
        async with await aconnect(dsn, autocommit=False) as aconn:
            async with aconn.transaction(force_rollback=True):
                mine = await aio.submit(aconn, "ops", {}, key="order-2")  # seen only here
                assert (await aio.get(aconn, key="order-2")).id == mine
                assert {r.id for r in await aio.list(aconn, key="order-")} == {wid, mine}
                assert (await aio.cancel(aconn, key="order-1")).id == wid
                assert (await aio.get(aconn, wid)).status == "cancelled"
                assert await aio.retry(aconn, wid) == Retried(wid, 0)
                assert (await aio.cancel(aconn, wid, reason="no")).previous_status == "pending"
                assert (await aio.get(dsn, wid)).status == "pending"  # nothing committed meanwhile
            assert aconn.info.transaction_status == TransactionStatus.IDLE

    asyncio.run(main())
    assert wfctl.get(dsn, wid).status == "pending"
    with pytest.raises(wfctl.NotFound):
        wfctl.get(dsn, key="order-2")


def test_an_error_inside_the_callers_transaction_leaves_it_usable(dsn):
    wid = states.submitted(dsn, "ops", "order-1")

    async def main() -> None:
        async with await aconnect(dsn, autocommit=False) as aconn, aconn.transaction(force_rollback=True):
            await aio.cancel(aconn, wid)
            assert isinstance(await aerror_of(aio.cancel(aconn, key="order-1")), wfctl.InvalidState)
            assert isinstance(await aerror_of(aio.retry(aconn, key="nobody")), wfctl.NotFound)
            assert aconn.info.transaction_status == TransactionStatus.INTRANS
            assert (await aio.retry(aconn, wid)).id == wid  # the transaction goes on

    asyncio.run(main())
    assert wfctl.get(dsn, wid).status == "pending"


def test_without_autocommit_cancel_leaves_the_transaction_to_the_caller(dsn):
    wid = states.submitted(dsn, "ops", "order-1")

    async def main() -> None:
        async with await aconnect(dsn, autocommit=False) as aconn:  # no transaction open
            assert aconn.info.transaction_status == TransactionStatus.IDLE
            await aio.cancel(aconn, wid)
            assert aconn.info.transaction_status == TransactionStatus.INTRANS  # open, not committed
            assert wfctl.get(dsn, wid).status == "pending"
            await aconn.rollback()
            assert wfctl.get(dsn, wid).status == "pending"
            await aio.cancel(aconn, key="order-1")
            assert aconn.info.transaction_status == TransactionStatus.INTRANS
            await aconn.commit()
            assert wfctl.get(dsn, wid).status == "cancelled"
            await aio.retry(aconn, wid)
            assert wfctl.get(dsn, wid).status == "cancelled"
            await aconn.commit()

    asyncio.run(main())
    assert wfctl.get(dsn, wid).status == "pending"


def test_in_autocommit_mode_cancel_and_retry_commit_at_once(dsn):
    wid = states.submitted(dsn, "ops", "order-1")

    async def main() -> None:
        async with await aconnect(dsn) as aconn:
            await aio.cancel(aconn, key="order-1")
            assert aconn.info.transaction_status == TransactionStatus.IDLE
            assert wfctl.get(dsn, wid).status == "cancelled"
            await aio.retry(aconn, wid)
            assert wfctl.get(dsn, wid).status == "pending"

    asyncio.run(main())


def test_reads_on_a_connection_leave_no_transaction_open(dsn):
    wid = states.submitted(dsn, "ops", "order-1")

    async def main() -> None:
        async with await aconnect(dsn, autocommit=False) as aconn:
            assert (await aio.get(aconn, key="order-1")).id == wid
            assert [r.id for r in await aio.list(aconn, key="order")] == [wid]
            assert aconn.info.transaction_status == TransactionStatus.IDLE

    asyncio.run(main())


# -- a key two runs share (the partitioned layout) -----------------------------------------------


@pytest.mark.parametrize("layout", ["partitioned"], indirect=True)
def test_a_key_two_runs_share_names_both_and_acts_on_neither(dsn, layout):
    older, newer = shared_key(dsn)
    before = rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id")
    named = f"idempotency key 'order-7' names more than one workflow ({newer}, {older}, newest first): "
    named += "name one by its id"

    async def main() -> list[Exception]:
        async with await aconnect(dsn) as aconn:
            refused = [
                await aerror_of(awaited()) for _, awaited in operator_calls(dsn, key="order-7").values()
            ]
            refused += [
                await aerror_of(awaited()) for _, awaited in operator_calls(aconn, key="order-7").values()
            ]
        return refused

    for refused in asyncio.run(main()):
        assert isinstance(refused, wfctl.InvalidState) and str(refused) == named
    assert rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id") == before
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]
    listed = asyncio.run(aio.list(dsn, key="order-7"))  # the list shows both
    assert [r.id for r in listed] == [newer, older]
