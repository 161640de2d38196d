"""Read-only commands: stats, list, show, workers, metrics. Each parses its options, calls one
function of wfctl.reports, and renders the rows (tables, JSON, or Prometheus text)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from wfctl import reports, validate, words
from wfctl.cli import render, render_reports, render_waits
from wfctl.cli.common import (
    ConfigOpt,
    DsnOpt,
    IdOrKeyArg,
    JsonOpt,
    KeyOpt,
    ReplicaOpt,
    Session,
    workflow_named,
)
from wfctl.durations import MIN_SECONDS, MIN_STALE_SECONDS, parse_duration
from wfctl.errors import InvalidInput
from wfctl.prometheus import exposition, generated_family, write_atomically
from wfctl.replica import age_family as replica_age_family

SinceOpt = Annotated[
    str, typer.Option("--since", help="Window: workflows created within this long ago (30s, 5m, 24h, 7d).")
]
StaleOpt = Annotated[
    str | None,
    typer.Option(
        "--stale",
        help="A worker whose last heartbeat is older than this is dead (30s, 5m, ...). Default: each "
        "worker's own heartbeat interval times its missed beats, as the workers' sweep judges it.",
        show_default=False,
    ),
]
TypeOpt = Annotated[
    str | None, typer.Option("--type", help="Only workflows of this type.", show_default=False)
]


def _duration(text: str, option: str) -> timedelta:
    minimum = MIN_STALE_SECONDS if option == "--stale" else MIN_SECONDS
    return parse_duration(text, what=f"{option} duration", allow_zero=False, minimum=minimum)


def _stale(text: str | None) -> timedelta | None:
    """``--stale``, or None: judge each worker by its own recorded heartbeat."""
    return None if text is None else _duration(text, "--stale")


def _type_filter(workflow_type: str | None) -> str | None:
    validate.check_text(workflow_type, "--type")
    return workflow_type


def stats(
    since: SinceOpt = "24h",
    stale: StaleOpt = None,
    workflow_type: TypeOpt = None,
    replica: ReplicaOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Success rate and run time per workflow type, stuck runs, and the slowest steps."""
    window, threshold = _duration(since, "--since"), _stale(stale)
    _type_filter(workflow_type)
    session = Session.create(dsn, config, json)
    with session.connect_reports(replica, quiet=session.json) as conn:
        report = reports.stats(conn, since=window, stale=threshold, workflow_type=workflow_type)
    if session.json:
        render.print_json(
            {
                "as_of": report.as_of,
                "since": since,
                "since_seconds": window.total_seconds(),
                "stale": stale,
                "stale_seconds": threshold.total_seconds() if threshold is not None else None,
                "workflow_type": workflow_type,
                "success_rate": report.success_rate,
                "stuck": report.stuck,
                "slow_steps": report.slow_steps,
            }
        )
    else:
        render_reports.stats_report(report, since, stale)


def list_workflows(
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help=f"Only workflows in these statuses, comma-separated: {', '.join(words.STATUSES)} "
            "(a run parked on a wait is pending: --waiting lists those).",
            show_default=False,
        ),
    ] = None,
    workflow_type: TypeOpt = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only workflows created within this long ago.", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows, from 1.")] = 50,
    waiting: Annotated[
        bool,
        typer.Option(
            "--waiting",
            help="Only workflows parked on a wait (a message, children, a sleep) and not yet due, "
            "with what each waits for and the time left.",
        ),
    ] = False,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="PREFIX",
            help="Only workflows whose idempotency key starts with PREFIX, character for "
            "character (% and _ are themselves); the table adds the key.",
            show_default=False,
        ),
    ] = None,
    replica: ReplicaOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Workflows, newest first. A pending one parked on a wait shows as waiting."""
    window = _duration(since, "--since") if since is not None else None
    _type_filter(workflow_type)
    validate.check_text(key, "--key")
    reports.list_statuses(status)  # a bad one is refused before connecting
    reports.check_limit(limit, "--limit")
    session = Session.create(dsn, config, json)
    with session.connect_reports(replica, quiet=session.json) as conn:
        rows = reports.list_workflows(
            conn,
            status=status,
            workflow_type=workflow_type,
            since=window,
            limit=limit,
            waiting=waiting,
            key_prefix=key,
        )
    if session.json:
        render.print_json(rows)
    elif rows and waiting:
        render_waits.waiting_list(rows)
    elif rows:
        render_reports.workflow_list(rows, keys=key is not None)
    else:
        render.notice("no workflows waiting" if waiting else "no workflows match")


def show(
    workflow_id: IdOrKeyArg = None,
    key: KeyOpt = None,
    traceback: Annotated[
        bool, typer.Option("--traceback", help="Print the error's whole traceback (file and line).")
    ] = False,
    replica: ReplicaOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """One workflow, its steps and its attempts. The workflow is named by its ID or by --key:
    its row, what it waits for, its deadline, input, output and error, a timeline of its steps,
    its attempts, its parent and children, its events and messages."""
    ident = workflow_named(workflow_id, key)
    session = Session.create(dsn, config, json)
    with session.connect_reports(replica, quiet=session.json) as conn:
        detail = reports.show_workflow(conn, ident, key)
    if session.json:
        render.print_json(
            {
                "workflow": detail.workflow,
                "steps": detail.steps,
                "attempts": detail.attempts,
                "children": [
                    {"id": c["id"], "workflow_type": c["workflow_type"], "status": c["status"]}
                    for c in detail.children
                ],
                "children_by_status": detail.children_by_status,
                "events": detail.events,
                "message_topics": detail.message_topics,
                "messages": detail.messages,
            }
        )
    else:
        render_reports.workflow_detail(detail, traceback=traceback, extra=render_waits.summary(detail))
        render_waits.tables(detail)


def workers(
    stale: StaleOpt = None,
    replica: ReplicaOpt = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Registered workers, live ones first. For each: host, pid, heartbeat age and interval,
    workflows running, step calls abandoned at their timeout. Dead: it missed its heartbeats (its
    interval times its missed beats)."""
    threshold = _stale(stale)
    session = Session.create(dsn, config, json)
    with session.connect_reports(replica, quiet=session.json) as conn:
        rows = reports.workers(conn, stale=threshold)
    if session.json:
        render.print_json(rows)
    elif rows:
        render_reports.workers_table(rows)
    else:
        render.notice("no worker has registered yet")


OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write to this file instead of stdout, atomically (a temporary file in the same "
        "directory, renamed over it): for node_exporter's textfile collector. On an error the "
        "file keeps its last good content.",
        show_default=False,
    ),
]


def _check_output(path: Path) -> None:
    """Refuse an --output that cannot be written before asking the database anything."""
    directory = path.parent
    try:
        if path.is_dir():
            raise InvalidInput(
                f"--output {path} is a directory: name the file, such as {path / 'wfctl.prom'}"
            )
        if not directory.is_dir():
            raise InvalidInput(f"--output {path}: there is no directory {directory}")
    except OSError as exc:  # a name too long, a loop of links ...
        raise InvalidInput(f"--output {path}: {exc.strerror or exc}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InvalidInput(
            f"--output {path}: cannot create files in {directory} (the new content is written "
            "there first, then renamed over the file)"
        )


def metrics(
    stale: StaleOpt = None,
    since: Annotated[
        str, typer.Option("--since", help="Window of the step-duration summary (workflows created since).")
    ] = "1h",
    output: OutputOpt = None,
    replica: ReplicaOpt = None,
    max_types: Annotated[
        int,
        typer.Option(
            "--max-types",
            metavar="N",
            help=f"Series of their own for the N workflow types with the most workflows; the "
            f'others are summed under workflow_type="{reports.OTHER_TYPES}" '
            f"(default {reports.MAX_TYPE_SERIES}).",
            show_default=False,
        ),
    ] = reports.MAX_TYPE_SERIES,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Metrics in Prometheus text format. On stdout, or with --output into a file for
    node_exporter's textfile collector (from cron). Every output ends with the gauge
    wfctl_metrics_generated_timestamp_seconds: when the database cannot be read, nothing is
    written, the command exits non-zero, and that gauge's age shows the file is stale."""
    threshold, window = _stale(stale), _duration(since, "--since")
    if output is not None:
        _check_output(output)
    session = Session.create(dsn, config, json)
    with session.connect_reports(replica, quiet=True) as conn:
        families = reports.metric_families(conn, stale=threshold, since=window, max_types=max_types)
    if session.replica_status is not None:
        families.append(replica_age_family(session.replica_status))
    families.append(generated_family(time.time()))
    text = render.to_json(families) + "\n" if session.json else exposition(families)
    if output is None:
        render.raw(text)
        return
    try:
        write_atomically(output, text)
    except OSError as exc:
        raise InvalidInput(
            f"cannot write --output {output}: {exc.strerror or exc}; the file keeps its previous content"
        ) from None


def register(app: typer.Typer) -> None:
    app.command()(stats)
    app.command("list")(list_workflows)
    app.command()(show)
    app.command()(workers)
    app.command()(metrics)
