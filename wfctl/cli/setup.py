"""``wfctl init``: install or upgrade the schema, grant roles, write wfctl.toml."""

from __future__ import annotations

from typing import Annotated

import typer

from wfctl import schema, validate
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.config import recorded_dsn, unrecorded_libpq_env, write_config
from wfctl.connection import describe_connection, mask_dsn
from wfctl.errors import ConfigError


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
        validate.check_text(role, "--grant")
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


def register(app: typer.Typer) -> None:
    app.command()(init)
