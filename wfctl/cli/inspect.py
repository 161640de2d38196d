"""Read-only commands: stats, list, show, workers, metrics. Each parses its options, calls one
function of wfctl.reports, and renders the rows (tables, JSON, or Prometheus text)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from wfctl import reports, validate, words
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.durations import MIN_SECONDS, MIN_STALE_SECONDS, parse_duration
from wfctl.prometheus import exposition

SinceOpt = Annotated[
    str, typer.Option("--since", help="Window: workflows created within this long ago (30s, 5m, 24h, 7d).")
]
StaleOpt = Annotated[
    str,
    typer.Option("--stale", help="A worker whose last heartbeat is older than this is dead (30s, 5m, ...)."),
]
TypeOpt = Annotated[
    str | None, typer.Option("--type", help="Only workflows of this type.", show_default=False)
]


def _duration(text: str, option: str) -> timedelta:
    minimum = MIN_STALE_SECONDS if option == "--stale" else MIN_SECONDS
    return parse_duration(text, what=f"{option} duration", allow_zero=False, minimum=minimum)


def _type_filter(workflow_type: str | None) -> str | None:
    validate.check_text(workflow_type, "--type")
    return workflow_type


def stats(
    since: SinceOpt = "24h",
    stale: StaleOpt = "5m",
    workflow_type: TypeOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Success rate and run time per workflow type, stuck runs, and the slowest steps."""
    window, threshold = _duration(since, "--since"), _duration(stale, "--stale")
    _type_filter(workflow_type)
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        report = reports.stats(conn, since=window, stale=threshold, workflow_type=workflow_type)
    if session.json:
        render.print_json(
            {
                "as_of": report.as_of,
                "since": since,
                "since_seconds": window.total_seconds(),
                "stale": stale,
                "stale_seconds": threshold.total_seconds(),
                "workflow_type": workflow_type,
                "success_rate": report.success_rate,
                "stuck": report.stuck,
                "slow_steps": report.slow_steps,
            }
        )
    else:
        render.stats_report(report, since, stale)


def list_workflows(
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help=f"Only workflows in this status: {', '.join(words.STATUSES)}.",
            show_default=False,
        ),
    ] = None,
    workflow_type: TypeOpt = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only workflows created within this long ago.", show_default=False),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=reports.MAX_LIMIT, help="At most this many rows.")
    ] = 50,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Workflows, newest first."""
    window = _duration(since, "--since") if since is not None else None
    _type_filter(workflow_type)
    if status is not None:
        words.check_status(status)
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        rows = reports.list_workflows(
            conn, status=status, workflow_type=workflow_type, since=window, limit=limit
        )
    if session.json:
        render.print_json(rows)
    elif rows:
        render.workflow_list(rows)
    else:
        render.notice("no workflows match")


def show(
    workflow_id: Annotated[str, typer.Argument(metavar="ID", help="The workflow's id (a UUID).")],
    traceback: Annotated[
        bool, typer.Option("--traceback", help="Print the error's whole traceback (file and line).")
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """One workflow: its row, input, output and error, a timeline of its steps, its attempts."""
    ident = words.parse_id(workflow_id)
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        detail = reports.show_workflow(conn, ident)
    if session.json:
        render.print_json({"workflow": detail.workflow, "steps": detail.steps, "attempts": detail.attempts})
    else:
        render.workflow_detail(detail, traceback=traceback)


def workers(
    stale: StaleOpt = "5m", dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False
) -> None:
    """Registered workers, live ones first: host, pid, heartbeat age, workflows running."""
    threshold = _duration(stale, "--stale")
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        rows = reports.workers(conn, stale=threshold)
    if session.json:
        render.print_json(rows)
    elif rows:
        render.workers_table(rows)
    else:
        render.notice("no worker has registered yet")


def metrics(
    stale: StaleOpt = "5m",
    since: Annotated[
        str, typer.Option("--since", help="Window of the step-duration summary (workflows created since).")
    ] = "1h",
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Prometheus text format on stdout, for node_exporter's textfile collector (from cron:
    write to a temporary file in the collector's directory, then mv it over wfctl.prom)."""
    threshold, window = _duration(stale, "--stale"), _duration(since, "--since")
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        families = reports.metric_families(conn, stale=threshold, since=window)
    if session.json:
        render.print_json(families)
    else:
        render.raw(exposition(families))


def register(app: typer.Typer) -> None:
    app.command()(stats)
    app.command("list")(list_workflows)
    app.command()(show)
    app.command()(workers)
    app.command()(metrics)
