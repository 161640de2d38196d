"""Commands that change state: init (and, as the engine grows, submit, worker, recover)."""

from __future__ import annotations

import typer

from wfctl import schema
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.config import write_config
from wfctl.connection import describe, mask_dsn
from wfctl.errors import ConfigError


def init(dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Install or upgrade the wfctl schema; write wfctl.toml when there is none.

    Safe to run several at once and to re-run: an up-to-date database is left unchanged.
    """
    session = Session.create(dsn, config, json)
    cfg = session.config(must_exist=False)
    target = session.target()
    with session.connect(check_schema=False) as conn:
        result = schema.migrate(conn)
        where = "the embedded PostgreSQL" if target.embedded else describe(session.dsn())
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
            }
        )
    else:
        if not result.applied:
            render.notice(f"schema is up to date (version {result.after}) in {where}; nothing changed")
        else:
            names = ", ".join(f"{m.version:04d}_{m.name}" for m in result.applied)
            verb = "installed" if result.before == 0 else f"upgraded from version {result.before} to"
            render.notice(f"{verb} schema version {result.after} in {where} (applied {names})")
        if written:
            what = "the embedded PostgreSQL" if target.embedded else mask_dsn(target.dsn)
            render.notice(f"wrote {written} (database: {what})")


def register(app: typer.Typer) -> None:
    app.command()(init)
