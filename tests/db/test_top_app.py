"""`wfctl top`'s live view headless (Textual's pilot, in-process) on a seeded database
(tests/support/top.py): the panes, the type filter, a run opened, cancel after a confirmation,
q, and a connection that goes away mid-session. Refreshes are driven by awaiting
``refresh_now``: the timer's interval is an hour."""

from __future__ import annotations

import asyncio
import functools

import psycopg
import pytest
from support.top import seed

from wfctl.cli.common import Session
from wfctl.cli.top import _actions
from wfctl.cli.top_app import RunScreen, TopApp
from wfctl.connection import connect
from wfctl.top.source import Source

SIZE = (160, 60)


def in_a_loop(test):
    """Run an async test in an event loop of its own (the pilot needs one)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def _app(dsn: str) -> TopApp:
    source = Source(lambda: connect(dsn))
    return TopApp(source, _actions(Session(dsn_option=dsn), standby=False), refresh=3600, first=source.take())


def _keys(app: TopApp, table: str) -> list[str]:
    from textual.widgets import DataTable

    return [str(key.value) for key in app.query_one(f"#{table}", DataTable).rows]


def _status(conn: psycopg.Connection, run) -> str:
    row = conn.execute("SELECT status FROM workflows WHERE id = %s", (run,)).fetchone()
    return row[0]


@in_a_loop
async def test_the_panes_show_the_data_a_type_filter_narrows_them_and_q_exits(dsn, conn, clean_env):
    seeded = seed(conn)
    app = _app(dsn)
    async with app.run_test(size=SIZE) as pilot:
        assert _keys(app, "types") == ["mail", "order"]
        assert _keys(app, "stuck") == [str(seeded.stuck)]
        assert _keys(app, "failures") == [str(seeded.failed)]
        assert _keys(app, "limits") == ["order"]
        assert "2 stuck" not in app.screen_text() and "1 stuck" in app.screen_text()
        await pilot.press("slash", *"mail", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert app.source.workflow_type == "mail"
        assert _keys(app, "types") == ["mail"]
        assert _keys(app, "stuck") == [] and _keys(app, "limits") == []
        await pilot.press("f", *"nosuch", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.source.workflow_type == "mail"  # an unknown type leaves the filter as it was
        assert "unknown workflow type 'nosuch'" in app.screen_text()
        await pilot.press("slash", "ctrl+a", "ctrl+k", "enter")  # empty: every type
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _keys(app, "types") == ["mail", "order"]
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


@in_a_loop
async def test_enter_opens_a_run_and_cancel_acts_only_after_yes(dsn, conn, clean_env):
    seeded = seed(conn)
    app = _app(dsn)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#stuck").focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == seeded.stuck
        shown = app.screen_text()
        assert str(seeded.stuck) in shown and "running" in shown
        await pilot.press("c")
        await pilot.pause()
        assert "(y/n)" in app.screen_text()
        await pilot.press("n")
        await pilot.pause()
        assert _status(conn, seeded.stuck) == "running"
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _status(conn, seeded.stuck) == "cancelled"
        assert f"cancelled {seeded.stuck}" in app.screen_text()
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _status(conn, seeded.stuck) == "pending"
        assert f"retrying {seeded.stuck}" in app.screen_text()


@in_a_loop
async def test_a_lost_connection_shows_the_banner_and_the_next_refresh_recovers(dsn, conn, clean_env):
    seed(conn)
    app = _app(dsn)
    async with app.run_test(size=SIZE) as pilot:
        pid = app.source.conn.info.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await app.refresh_now()
        await pilot.pause()
        assert app.failure is not None
        assert "database unreachable:" in app.screen_text() and "retrying" in app.screen_text()
        assert app.query_one("#panes").has_class("stale")
        assert _keys(app, "types") == ["mail", "order"]  # the last data stays, marked stale
        # a server that refuses connections: still the banner, no traceback
        good = app.source.connect
        app.source.connect = lambda: connect("host=/nonexistent-wfctl-top port=1 dbname=x")
        await app.refresh_now()
        await pilot.pause()
        assert app.failure is not None and "cannot connect" in app.failure
        app.source.connect = good
        await app.refresh_now()
        await pilot.pause()
        assert app.failure is None
        assert not app.query_one("#panes").has_class("stale")
        assert "database unreachable" not in app.screen_text()
        assert app.source.conn is not None and app.source.conn.info.backend_pid != pid


@pytest.mark.parametrize(
    ("refresh", "message"),
    [
        ("0s", "invalid --refresh duration '0s': must be greater than zero"),
        ("soon", "invalid --refresh duration 'soon': use a number and a unit, such as 30s, 5m, 24h or 7d"),
        ("10ms", "invalid --refresh duration '10ms': shorter than the minimum of 500ms"),
    ],
)
def test_a_bad_refresh_is_refused_in_one_line_before_connecting(cli, refresh, message):
    result = cli("top", "--refresh", refresh, "--dsn", "host=/nonexistent-wfctl-top port=1 dbname=x")
    assert (result.exit_code, result.stderr.splitlines()) == (2, [f"wfctl: error: {message}"])


def test_an_unknown_type_and_a_missing_terminal_are_refused_in_one_line(dsn, conn, cli):
    seed(conn)
    unknown = cli("top", "--dsn", dsn, "--type", "nosuch")
    assert unknown.exit_code == 2 and unknown.stderr.startswith(
        "wfctl: error: unknown workflow type 'nosuch'"
    )
    piped = cli("top", "--dsn", dsn, "--type", "order")
    assert piped.exit_code == 2 and piped.stderr.splitlines() == [
        "wfctl: error: wfctl top needs a terminal; `wfctl stats` reports once, to a pipe or a file"
    ]


def test_an_unreachable_database_or_a_missing_schema_is_refused_as_stats_refuses_it(empty_dsn, cli):
    gone = cli("top", "--dsn", "host=/nonexistent-wfctl-top port=1 dbname=x")
    assert gone.exit_code == 4 and gone.stderr.startswith("wfctl: error: cannot connect")
    missing = cli("top", "--dsn", empty_dsn)
    stats = cli("stats", "--dsn", empty_dsn)
    assert missing.exit_code == stats.exit_code == 5 and missing.stderr == stats.stderr
