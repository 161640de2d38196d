"""Commands that change state: init, submit, worker, recover."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import IO, Annotated, Any
from uuid import UUID

import psycopg
import typer

from wfctl import client, recovery, schema, words
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.config import recorded_dsn, unrecorded_libpq_env, write_config
from wfctl.connection import describe_connection, mask_dsn
from wfctl.durations import MIN_STALE_SECONDS, parse_duration
from wfctl.errors import AppError, ConfigError, UsageError
from wfctl.queries import q
from wfctl.registry import load_app
from wfctl.worker import options as worker_options
from wfctl.worker.log import WorkerLog
from wfctl.worker.options import default_text
from wfctl.worker.runner import Worker

SUBMIT_BATCH = 1000  # workflows per INSERT of an --input-file ...
SUBMIT_BATCH_BYTES = 4_000_000  # ... and at most about this many bytes of input JSON


def init(
    grant: Annotated[
        list[str] | None,
        typer.Option("--grant", help="Give this role what workers need (no DDL); repeatable."),
    ] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Install or upgrade the wfctl schema; write wfctl.toml when there is none.

    Safe to run several at once and to re-run: an up-to-date database is left unchanged.
    """
    session = Session.create(dsn, config, json)
    for role in grant or []:
        client.check_text(role, "--grant")
    cfg = session.config(must_exist=False)
    target = session.target()
    with session.connect(check_schema=False) as conn:
        result = schema.migrate(conn)
        for role in grant or []:
            schema.grant_worker(conn, role)
        where = "the embedded PostgreSQL" if target.embedded else describe_connection(conn)
    written = None
    if not cfg.exists:
        try:
            written = write_config(cfg, target)
        except FileExistsError:
            written = None  # another `wfctl init` wrote it a moment ago
        except OSError as exc:
            raise ConfigError(f"cannot write {cfg.path}: {exc.strerror}") from None
    if session.json:
        render.print_json(
            {
                "database": where,
                "schema_version_before": result.before,
                "schema_version": result.after,
                "applied": [f"{m.version:04d}_{m.name}" for m in result.applied],
                "config_written": str(written) if written else None,
                "granted": list(grant or []),
            }
        )
        return
    for role in grant or []:
        render.notice(f"granted role {role!r} what a worker needs (read/write the wfctl tables, no DDL)")
    if not result.applied:
        render.notice(f"schema is up to date (version {result.after}) in {where}; nothing changed")
    else:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in result.applied)
        verb = "installed" if result.before == 0 else f"upgraded from version {result.before} to"
        render.notice(f"{verb} schema version {result.after} in {where} (applied {names})")
    if written:
        recorded = recorded_dsn(target)
        what = "the embedded PostgreSQL" if recorded is None else mask_dsn(recorded) or "libpq's defaults"
        render.notice(f"wrote {written} (database: {what})")
        unrecorded = unrecorded_libpq_env() if target.source == "PG* environment" else []
        if unrecorded:
            render.notice(
                f"not recorded in {written.name}: {', '.join(unrecorded)} (a job without them in "
                "its environment connects without them; a password belongs in ~/.pgpass or PGPASSFILE)"
            )


def submit(
    workflow_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="The workflow type, as registered with @wfctl.workflow.")
    ],
    input_json: Annotated[
        str | None, typer.Argument(metavar="[JSON]", help="The input, one JSON value.")
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option("--input-file", help="JSON Lines file (or - for stdin): one workflow per line."),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Idempotency key: the same key twice stores one workflow.")
    ] = None,
    delay: Annotated[
        str | None, typer.Option("--delay", help="Start no earlier than this from now (10m, 2h).")
    ] = None,
    priority: Annotated[int, typer.Option("--priority", help="Higher runs first.")] = 0,
    max_retries: Annotated[
        int | None,
        typer.Option("--max-retries", help="Retries after the first attempt (default: the type's)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Submit even if no worker has registered TYPE.")
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Enqueue workflows; print the new id (one per line for --input-file) on stdout."""
    session = Session.create(dsn, config, json)
    if input_json is not None and input_file is not None:
        raise UsageError("give the input either as JSON or with --input-file, not both")
    if input_file is not None and key is not None:
        raise UsageError("--key applies to a single workflow, not to --input-file")
    client.check_int(priority, "--priority")
    client.check_int(max_retries, "--max-retries", minimum=0)
    client.check_type(workflow_type)
    client.check_key(key)
    delay_value = parse_duration(delay, what="--delay") if delay is not None else None
    if input_file is None:
        single = client.parse_input(input_json) if input_json is not None else "null"
        with session.connect() as conn:
            if not force:
                _check_known_type(conn, workflow_type)
            done = client.submit_one(
                conn,
                workflow_type,
                single,
                key=key,
                delay=delay_value,
                priority=priority,
                max_retries=max_retries,
            )
            if not done.created:
                render.notice(
                    f"key {key!r} was used before: this is the existing workflow, nothing new was stored"
                )
        if session.json:
            render.print_json({"id": str(done.id), "created": done.created})
        else:
            render.line(str(done.id))
        return
    source = "stdin" if input_file == "-" else input_file
    with _open_input_file(input_file) as stream:
        spool = client.read_jsonl(stream, source)  # every line checked before anything is stored
    with spool, session.connect() as conn:
        if not force:
            _check_known_type(conn, workflow_type)
        ids = _submit_batches(conn, workflow_type, spool, delay_value, priority, max_retries)
    if session.json:
        render.print_json({"ids": [str(i) for i in ids], "count": len(ids)})
    else:
        sys.stdout.write("".join(f"{i}\n" for i in ids))
        sys.stdout.flush()
        render.notice(f"submitted {len(ids)} workflow(s) of type {workflow_type!r}")


@contextmanager
def _open_input_file(path: str) -> Iterator[IO[bytes]]:
    """The --input-file as a binary stream, read line by line (``-``: stdin)."""
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"cannot read --input-file {path}: {exc.strerror}") from None
    with stream:
        yield stream


def _check_known_type(conn: psycopg.Connection[Any], workflow_type: str) -> None:
    known = [r[0] for r in conn.execute(q("client.known_types")).fetchall()]
    if known and workflow_type not in known:
        raise UsageError(
            f"unknown workflow type {workflow_type!r}: no worker has registered it "
            f"(known: {', '.join(known)}); use --force to submit it anyway"
        )


def _submit_batches(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    inputs: client.SpooledInputs,
    delay: timedelta | None,
    priority: int,
    max_retries: int | None,
) -> list[UUID]:
    ids: list[UUID] = []
    with conn.transaction(), render.progress("submitting", total=inputs.count) as advance:
        for chunk in inputs.batches(SUBMIT_BATCH, SUBMIT_BATCH_BYTES):
            ids.extend(
                client.submit_many(
                    conn, workflow_type, chunk, delay=delay, priority=priority, max_retries=max_retries
                )
            )
            advance(len(chunk))
    return ids


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
    burst: Annotated[bool, typer.Option("--burst", help="Exit 0 once no runnable work is left.")] = False,
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
    """Run workflows: claim, execute, checkpoint, until SIGTERM (or, with --burst, no work)."""
    session = Session.create(dsn, config)
    cfg = session.config()
    module = app or cfg.get("worker", "app")
    if not module:
        raise AppError(
            "no --app given and no [worker] app in wfctl.toml: which module registers the workflows?"
        )
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else None
    options = worker_options.resolve(
        cfg.data.get("worker", {}),
        concurrency=concurrency,
        types=wanted,
        heartbeat=heartbeat_every,
        grace=grace,
        poll=poll,
        no_listen=no_listen,
        burst=burst,
        log_format=log_format,
    )
    for name in options.types or []:
        client.check_text(name, "--types")
    registry = load_app(module)
    if options.types:
        unknown = [t for t in options.types if registry.get(t) is None]
        if unknown:
            raise UsageError(
                f"--types names {', '.join(unknown)}, which {module} does not register "
                f"(it registers: {', '.join(registry.names())})"
            )
    dsn_value = session.dsn()
    log = WorkerLog(options.log_format, quiet=quiet)  # type: ignore[arg-type]
    code = Worker(dsn_value, registry, options, log).run()
    raise typer.Exit(code)


def recover(
    stale: Annotated[
        str, typer.Option("--stale", help="Requeue runs whose worker's heartbeat is older than this.")
    ] = "5m",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be recovered; change nothing.")
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Requeue running workflows whose worker died (for cron: silent when there is nothing to do)."""
    session = Session.create(dsn, config, json)
    threshold = parse_duration(stale, what="--stale", allow_zero=False, minimum=MIN_STALE_SECONDS)
    with session.connect() as conn:
        rows = recovery.recover(conn, threshold, dry_run=dry_run)
    if session.json:
        render.print_json([{**r.__dict__, "dry_run": dry_run} for r in rows])
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


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command()(submit)
    app.command()(worker)
    app.command()(recover)
