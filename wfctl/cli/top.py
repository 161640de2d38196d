"""``wfctl top``: the live view. Parses its options as ``stats`` does, reads a first snapshot
(so that a bad option, an unreachable database or a missing schema is the usual one-line
error and exit code), then runs the Textual app (wfctl/cli/top_app.py, imported only here)."""

from __future__ import annotations

import sys
from typing import Annotated
from uuid import UUID

import typer

from wfctl import control
from wfctl.cli.common import ConfigOpt, DsnOpt, ReplicaOpt, Session
from wfctl.cli.inspect import SinceOpt, StaleOpt, TypeOpt, _duration, _stale, _type_filter
from wfctl.cli.manage import cancelled_text, retried_text
from wfctl.config import resolve_reports_target
from wfctl.durations import parse_duration
from wfctl.errors import InvalidInput
from wfctl.top.actions import Actions
from wfctl.top.source import Source

#: The shortest --refresh: a refresh sends about ten statements.
MIN_REFRESH_SECONDS = 0.5


def top(
    refresh: Annotated[
        str, typer.Option("--refresh", help="Read the database again this often (2s, 500ms, 1m).")
    ] = "2s",
    workflow_type: TypeOpt = None,
    since: SinceOpt = "1h",
    stale: StaleOpt = None,
    replica: ReplicaOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
) -> None:
    """A live view of runs, workers, limits and steps, read again every --refresh. It shows
    completions per second per type with the last ten minutes, runs running, pending and parked,
    stuck runs, workers and their load, limits, the slowest steps (over --since). Keys: Tab
    moves between panes, / filters by type, Enter opens a run, c and r cancel and retry it (on
    the primary), q quits."""
    every = parse_duration(refresh, what="--refresh duration", allow_zero=False, minimum=MIN_REFRESH_SECONDS)
    window, threshold = _duration(since, "--since"), _stale(stale)
    _type_filter(workflow_type)
    session = Session.create(dsn, config)
    standby = resolve_reports_target(replica, session.config(), session.target()) is not None
    source = Source(
        lambda: session.connect_reports(replica, quiet=True),
        workflow_type=workflow_type,
        stale=threshold,
        since=window,
        standby=standby,
    )
    try:
        if workflow_type is not None:
            source.check_type(workflow_type)
        first = source.take()
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise InvalidInput("wfctl top needs a terminal; `wfctl stats` reports once, to a pipe or a file")
        from wfctl.cli.top_app import TopApp  # Textual loads only for `wfctl top`

        app = TopApp(source, _actions(session, standby), refresh=every.total_seconds(), first=first)
        app.run()
    finally:
        source.close()


def _actions(session: Session, standby: bool) -> Actions:
    """Cancel and retry as ``wfctl cancel`` and ``wfctl retry`` run them: on the primary, in a
    connection of their own (the view may read from a standby, which refuses writes)."""

    def cancel(run_id: UUID) -> str:
        with session.connect() as conn:
            return cancelled_text(run_id, control.cancel(conn, run_id))

    def retry(run_id: UUID) -> str:
        with session.connect() as conn:
            return retried_text(run_id, control.retry(conn, run_id))

    return Actions(cancel, retry, "on the primary" if standby else "")


def register(app: typer.Typer) -> None:
    app.command()(top)
