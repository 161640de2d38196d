"""``wfctl worker`` and ``wfctl recover``: run workflows, and requeue those whose worker died."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer

from wfctl import recovery, validate, words
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.durations import MIN_STALE_SECONDS, parse_duration
from wfctl.errors import InvalidInput
from wfctl.registry import load_app
from wfctl.worker import options as worker_options
from wfctl.worker.log import WorkerLog
from wfctl.worker.options import default_text


def worker(
    app: Annotated[
        str | None, typer.Option("--app", help="Module that registers the workflows (default: [worker] app).")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", "-c", help=f"Workflows run at once (default {default_text('concurrency')})."
        ),
    ] = None,
    types: Annotated[str | None, typer.Option("--types", help="Only these types, comma-separated.")] = None,
    heartbeat_every: Annotated[
        str | None,
        typer.Option("--heartbeat", help=f"Heartbeat interval (default {default_text('heartbeat')})."),
    ] = None,
    grace: Annotated[
        str | None,
        typer.Option(
            "--grace",
            help=f"On SIGTERM, how long running steps may take (default {default_text('grace')}).",
        ),
    ] = None,
    poll: Annotated[
        str | None,
        typer.Option(
            "--poll", help=f"Polling interval, the fallback to LISTEN (default {default_text('poll')})."
        ),
    ] = None,
    burst: Annotated[
        bool,
        typer.Option(
            "--burst", help="Exit 0 once no runnable work is left, nor any due within --burst-wait."
        ),
    ] = False,
    burst_wait: Annotated[
        str | None,
        typer.Option(
            "--burst-wait",
            help="With --burst, wait for work due within this long: retries, short sleeps "
            f"(default {default_text('burst_wait')}; 0s exits at once).",
        ),
    ] = None,
    missed_beats: Annotated[
        int | None,
        typer.Option(
            "--missed-beats",
            help="A worker that misses this many heartbeats is dead and its runs are requeued "
            f"by the others (default {default_text('missed_beats')}).",
        ),
    ] = None,
    no_sweep: Annotated[
        bool,
        typer.Option(
            "--no-sweep", help="Do not requeue the runs of dead workers (leave it to `wfctl recover`)."
        ),
    ] = False,
    health_port: Annotated[
        int | None,
        typer.Option(
            "--health-port",
            help="Serve a readiness check over HTTP on this port: 200 while connected and "
            "heartbeating, 503 otherwise.",
        ),
    ] = None,
    health_host: Annotated[
        str | None,
        typer.Option(
            "--health-host", help=f"Address --health-port listens on (default {default_text('health_host')})."
        ),
    ] = None,
    health_file: Annotated[
        str | None,
        typer.Option(
            "--health-file",
            help="Touch this file at each successful heartbeat; remove it on exit.",
        ),
    ] = None,
    no_listen: Annotated[
        bool,
        typer.Option(
            "--no-listen",
            help="Poll only, no LISTEN and no prepared statements (PgBouncer transaction pooling).",
        ),
    ] = False,
    log_format: Annotated[str | None, typer.Option("--log-format", help="auto, rich, plain or json.")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Log only failures and worker events.")
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run workflows until SIGTERM. It claims, executes and checkpoints them (with --burst, until
    no work is left)."""
    session = Session.create(dsn, config)
    session.may_create = True
    session.quiet = quiet
    cfg = session.config()
    module = app or cfg.get("worker", "app")
    if not module:
        raise InvalidInput(  # a missing option, as any other (exit 2): no module was tried
            "no --app given and no [worker] app in wfctl.toml: which module registers the workflows?"
        )
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else None
    if burst_wait is not None and not burst:
        raise InvalidInput("--burst-wait applies to --burst only")
    if health_host is not None and health_port is None and cfg.get("worker", "health_port") is None:
        raise InvalidInput("--health-host needs --health-port (or [worker] health_port)")
    options = worker_options.resolve(
        cfg.data.get("worker", {}),
        concurrency=concurrency,
        types=wanted,
        heartbeat=heartbeat_every,
        grace=grace,
        poll=poll,
        no_listen=no_listen,
        burst=burst,
        burst_wait=burst_wait,
        missed_beats=missed_beats,
        no_sweep=no_sweep,
        health_port=health_port,
        health_host=health_host,
        health_file=health_file,
        log_format=log_format,
    )
    for name in options.types or []:
        validate.check_text(name, "--types")
    registry = load_app(module)
    if options.types:
        unknown = [t for t in options.types if registry.get(t) is None]
        if unknown:
            raise InvalidInput(
                f"--types names {', '.join(unknown)}, which {module} does not register "
                f"(it registers: {', '.join(registry.names())})"
            )
    dsn_value = session.dsn()
    log = WorkerLog(options.log_format, quiet=quiet)  # type: ignore[arg-type]  # WorkerOptions refuses others
    from wfctl.worker.runner import Worker  # (only this command loads the engine)

    code = Worker(dsn_value, registry, options, log).run()
    raise typer.Exit(code)


def recover(
    stale: Annotated[
        str | None,
        typer.Option(
            "--stale",
            help="Requeue runs whose worker's heartbeat is older than this (30s, 5m, ...). Default: "
            "each worker's own heartbeat interval times its missed beats, as the workers' sweep and "
            "`wfctl stats` judge it.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be recovered; change nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Recover even with a --stale shorter than a live worker's heartbeat allows "
            "(its interval times its missed beats).",
        ),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Requeue the runs of dead workers and fail the runs past their deadline. For cron: silent
    when there is nothing to do. Live workers do both themselves (the
    sweep, the deadline duty); this is for cron and for deployments without long-lived workers."""
    session = Session.create(dsn, config, json)
    threshold = (
        None
        if stale is None
        else parse_duration(stale, what="--stale", allow_zero=False, minimum=MIN_STALE_SECONDS)
    )
    expired: list[recovery.Expired] = []
    with session.connect() as conn:
        if threshold is not None and not force:
            recovery.check_threshold(conn, threshold)
        rows = recovery.recover(conn, threshold, dry_run=dry_run)
        try:
            if dry_run:
                expired = recovery.expire_due(conn, [r.id for r in rows if r.status == words.FAILED])
            else:
                expired = recovery.expire(conn)  # after the requeue: a requeued run past its deadline too
        except psycopg.Error:
            # the requeue is committed (its own statement): say what it did before the error
            # (the connection lost, the exit code 4) is reported
            _report_recovered(session, rows, [], dry_run)
            raise
    _report_recovered(session, rows, expired, dry_run)


def _report_recovered(
    session: Session, rows: list[recovery.Recovered], expired: list[recovery.Expired], dry_run: bool
) -> None:
    if session.json:
        render.print_json(
            [{"action": "recovered", **r.__dict__, "dry_run": dry_run} for r in rows]
            + [
                {"action": "expired", **e.__dict__, "status": words.FAILED, "dry_run": dry_run}
                for e in expired
            ]
        )
        return
    for r in rows:
        verb = (
            ("would requeue" if dry_run else "requeued")
            if r.status == words.PENDING
            else ("would fail" if dry_run else "failed")
        )
        seen = render.cell(r.owner_heartbeat) if r.owner_heartbeat else "never"
        render.line(
            f"{verb} {r.id} {r.workflow_type} attempt={r.attempt} epoch={r.lease_epoch} "
            f"step={r.current_step} worker={r.previous_owner or '-'} last_heartbeat={seen}"
        )
    for e in expired:
        verb, outcome = ("would expire", "would fail") if dry_run else ("expired", "failed")
        render.line(f'{verb} {e.id} {e.workflow_type}: past its deadline, {outcome} with "{e.error_message}"')


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(recover)
