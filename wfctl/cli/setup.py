"""``wfctl init``: install or upgrade the schema (in a schema of its own with ``--schema``),
grant roles, write wfctl.toml where none was found (not inside a Python package)."""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
import typer

from wfctl import partitions, schema, validate
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.config import (
    PG_ENVIRONMENT,
    Config,
    check_schema_name,
    package_refusal,
    recorded_dsn,
    unrecorded_libpq_env,
    write_config,
)
from wfctl.connection import describe_connection, mask_dsn
from wfctl.errors import ConfigError, InvalidInput, InvalidState


def init(
    grant: Annotated[
        list[str] | None,
        typer.Option(
            "--grant",
            metavar="ROLE",
            help="The same as --grant-worker (kept for existing scripts); repeatable.",
        ),
    ] = None,
    grant_worker: Annotated[
        list[str] | None,
        typer.Option(
            "--grant-worker",
            metavar="ROLE",
            help="Give this role what workers need: read and write the wfctl tables (no DDL, no "
            "DELETE); repeatable.",
        ),
    ] = None,
    grant_submit: Annotated[
        list[str] | None,
        typer.Option(
            "--grant-submit",
            metavar="ROLE",
            help="Let this role submit, send messages and read a run's result by its id, through "
            "functions only (no table access); repeatable.",
        ),
    ] = None,
    grant_read: Annotated[
        list[str] | None,
        typer.Option(
            "--grant-read",
            metavar="ROLE",
            help="Let this role run the reports (stats, list, show, ...): read the tables, write "
            "nothing; repeatable.",
        ),
    ] = None,
    schema_name: Annotated[
        str | None,
        typer.Option(
            "--schema",
            help="Put every wfctl table, function and trigger in this schema (default: public), "
            "and record it in the wfctl.toml written.",
            show_default=False,
        ),
    ] = None,
    partitioned: Annotated[
        bool,
        typer.Option(
            "--partitioned",
            help="Store workflows, steps and attempts in time partitions (prune drops whole "
            "intervals); an existing database is converted (workers stopped).",
        ),
    ] = False,
    partition_interval: Annotated[
        str | None,
        typer.Option(
            "--partition-interval",
            help="With --partitioned: one partition per 1d, 7d or 30d of created_at [default: 1d].",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Apply the contracts (what older releases need, removed) even while workers of "
            "an older release heartbeat: they fail at their next call to what was removed.",
        ),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Install or upgrade the wfctl schema. It writes wfctl.toml when none is found.

    Migrations only add, so workers of the release before keep running; what they need is
    removed (a contract) by a later init, once none of them heartbeats. Safe to run several at
    once and to re-run: an up-to-date database is left unchanged.
    """
    session = Session.create(dsn, config, json)
    session.announce = False  # init says what it wrote instead
    session.may_create = True
    grants = _grants(grant, grant_worker, grant_submit, grant_read)
    if schema_name is not None:
        check_schema_name(schema_name)
    if partition_interval is not None and not partitioned:
        raise InvalidInput("--partition-interval goes with --partitioned")
    days = None
    if partitioned:
        days = partitions.parse_interval(partition_interval or partitions.DEFAULT_INTERVAL)
    cfg = session.config(must_exist=False)
    if not cfg.exists:
        refusal = package_refusal(cfg)
        if refusal is not None:
            raise refusal
    elif schema_name is not None:
        _check_configured_schema(cfg, schema_name)
    session.schema_option = schema_name
    target = session.target()
    with session.connect(check_schema=False) as conn:
        result = schema.migrate(conn)
        layout = _layout(conn, days)
        contracted = schema.contract(conn, force=force)
        for role, job in grants:
            schema.grant(conn, role, job)
        where = "the embedded PostgreSQL" if target.embedded else describe_connection(conn)
    if target.schema is not None:
        where = f"{where}, schema {result.schema}"
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
                "applied": [m.label for m in result.applied],
                "contracted": [c.label for c in contracted.applied],
                "contracts_waiting": [c.label for c in contracted.waiting],
                "waiting_for_workers": [_worker_label(w) for w in contracted.older_workers],
                "lock_retries": result.lock_retries + contracted.lock_retries,
                "config_written": str(written) if written else None,
                "granted": [role for role, job in grants if job == "worker"],
                "granted_jobs": [{"role": role, "job": job} for role, job in grants],
                "schema": result.schema,
                "layout": layout.name,
                "partition_interval": f"{layout.interval_days}d" if layout.interval_days else None,
            }
        )
        return
    for role, job in grants:
        render.notice(f"granted role {role!r} {_GRANTED[job]}")
    if result.after > schema.latest_version():
        render.notice(
            f"schema version {result.after} in {where} is newer than this wfctl's "
            f"{schema.latest_version()} and still runs it; nothing changed"
        )
    elif not result.applied:
        if not contracted.applied:
            render.notice(f"schema is up to date (version {result.after}) in {where}; nothing changed")
    else:
        names = ", ".join(m.label for m in result.applied)
        verb = "installed" if result.before == 0 else f"upgraded from version {result.before} to"
        render.notice(f"{verb} schema version {result.after} in {where} (applied {names})")
    _tell_contracts(contracted)
    if days is not None:
        render.notice(
            f"layout: partitioned, one partition per {layout.interval_days}d of created_at "
            "(`wfctl db status` lists them)"
        )
    if written:
        recorded = recorded_dsn(target)
        what = "the embedded PostgreSQL" if recorded is None else mask_dsn(recorded) or "libpq's defaults"
        in_schema = f", schema: {target.schema}" if target.schema is not None else ""
        render.notice(f"wrote {written} (database: {what}{in_schema})")
        unrecorded = unrecorded_libpq_env() if target.source == PG_ENVIRONMENT else []
        if unrecorded:
            render.notice(
                f"not recorded in {written.name}: {', '.join(unrecorded)} (a job without them in "
                "its environment connects without them; a password belongs in ~/.pgpass or PGPASSFILE)"
            )


def _worker_label(worker: dict[str, Any]) -> str:
    release = worker["version"] or "unknown release"
    return f"{worker['hostname']}:{worker['pid']} (wfctl {release})"


def _tell_contracts(result: schema.ContractResult) -> None:
    """Say which contracts an upgrade applied and which it left for later, and why (a new
    install applies its contracts with its migrations: ``schema.migrate``)."""
    if result.applied:
        names = ", ".join(c.label for c in result.applied)
        before = result.applied[-1].version
        render.notice(f"contracted: removed what releases before schema {before} needed ({names})")
    if result.waiting:
        names = ", ".join(c.label for c in result.waiting)
        older = result.older_workers
        shown = ", ".join(_worker_label(w) for w in older[:5])
        if len(older) > 5:
            shown += f" and {len(older) - 5} more"
        one = len(older) == 1
        workers = "1 live worker" if one else f"{len(older)} live workers"
        render.notice(
            f"left for later: {names}; {workers} of a release before schema "
            f"{result.waiting[0].version} still need{'s' if one else ''} it: {shown}. Run `wfctl init` "
            f"again once {'it has' if one else 'they have'} stopped (`--force` applies it now and "
            f"breaks {'it' if one else 'them'})"
        )


#: What ``init`` says it gave a role, by job.
_GRANTED = {
    "worker": "what a worker needs (read/write the wfctl tables, no DDL)",
    "submit": "submit, send and read a result by id, through functions only (no table access)",
    "read": "read access for reports (no writes)",
}


def _grants(*by_option: list[str] | None) -> list[tuple[str, str]]:
    """(role, job) for --grant, --grant-worker, --grant-submit and --grant-read, in that order,
    each role checked."""
    found: list[tuple[str, str]] = []
    names = ("--grant", "--grant-worker", "--grant-submit", "--grant-read")
    jobs = ("worker", "worker", "submit", "read")
    for roles, name, job in zip(by_option, names, jobs, strict=True):
        for role in roles or []:
            validate.check_text(role, name)
            if (role, job) not in found:
                found.append((role, job))
    return found


def _layout(conn: psycopg.Connection[Any], days: int | None) -> partitions.Layout:
    """The layout after ``init``: converted to the partitioned one when asked (``days``) and
    not yet; asked with another interval than the database has: refused."""
    current = partitions.layout(conn)
    if days is None:
        return current
    if current.partitioned:
        if current.interval_days != days:
            raise InvalidState(
                f"this database is partitioned every {current.interval_days}d already, not {days}d "
                "(the interval is chosen once)"
            )
        partitions.ensure(conn)
        return current
    partitions.convert(conn, days)
    return partitions.layout(conn)


def _check_configured_schema(cfg: Config, wanted: str) -> None:
    """``--schema`` must agree with the config file in use: wfctl.toml is not rewritten, and a
    schema installed where the config does not point would be one no other command uses."""
    configured = cfg.get("database", "schema")
    if (configured or schema.DEFAULT_SCHEMA) == wanted:
        return
    says = f"says schema = {configured!r}" if configured else "names no schema (so wfctl uses public)"
    raise ConfigError(
        f"--schema {wanted}, but {cfg.path} {says}",
        f'set schema = "{wanted}" in its [database] table, or leave --schema out',
    )


def register(app: typer.Typer) -> None:
    app.command()(init)
