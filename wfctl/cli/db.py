"""``wfctl db``: the database wfctl is configured for, and the embedded server's life cycle."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from wfctl import partitions, schema, schema_trust
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.config import ConfigRefused, describe_data_dir_origin, printable_dsn
from wfctl.connection import describe, mask_dsn
from wfctl.embedded import EmbeddedServer
from wfctl.errors import ConnectionFailed, InvalidInput

#: What `db url` says on stderr when it hid something (a word without "secret": tests look for
#: fragments of a password such as "se cret" in everything printed).
HIDDEN_NOTICE = "passwords in this DSN are shown as ***: `wfctl db url --reveal` prints them"

app = typer.Typer(help="The configured database and the embedded PostgreSQL server.", no_args_is_help=True)


def _embedded(session: Session) -> EmbeddedServer:
    target = session.target()
    if not target.embedded or target.data_dir is None:
        raise InvalidInput(
            f"the configured database ({mask_dsn(target.dsn)}, from {target.source}) "
            "is not the embedded server"
        )
    return EmbeddedServer(target.data_dir, notice=render.notice)


@app.command()
def status(dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Where the database is and why (config file, data directory), whether it runs, and the
    schema installed in it; starts nothing. When the config file is refused or the database
    cannot be reached, which config and database, on stderr, before the error."""
    session = Session.create(dsn, config, json)
    session.announce = False  # the report says it
    session.name_config = False
    try:
        cfg = session.config()
    except ConfigRefused as refused:
        render.notice(f"config: {refused.path} ({refused.describe()})")
        raise
    target = session.target()
    info: dict[str, object] = {
        "config": str(cfg.path) if cfg.exists else None,
        "config_from": cfg.describe_origin(),
        "source": target.source,
        "embedded": target.embedded,
        "wfctl_schema": target.schema or schema.DEFAULT_SCHEMA,
    }
    if target.embedded:
        server = _embedded(session)
        st = server.status()
        info.update(
            running=st.running,
            pid=st.pid,
            server_user=st.user,
            postgres=st.version,
            data_dir=str(st.data_dir),
            data_dir_from=describe_data_dir_origin(target, cfg),
            dsn=st.dsn,
        )
        if not st.running:
            _report(session, info, [])
            return
    else:
        info.update(dsn=mask_dsn(target.dsn), database=describe(session.dsn()))
    try:
        conn = session.connect(check_schema=False)
    except ConnectionFailed:
        # an error prints nothing on stdout: which config and database, said on stderr first
        render.notice(f"config: {info['config'] or 'none'} ({info['config_from']}); database: {info['dsn']}")
        raise
    with conn:
        seen = schema.overview(conn)
        trusted = schema_trust.inspect(conn, seen.schema) if seen.schema else None
        current = (seen.schema_version or 0) >= schema.latest_version()
        layout = partitions.layout(conn) if current else None
        parts = partitions.partitions(conn) if layout and layout.partitioned else []
        lowest = schema.floor(conn) if current else None
    info.update(
        running=True,
        server_version=seen.server_version,
        role=seen.role,
        database_name=seen.database,
        schema=seen.schema,
        schema_version=seen.schema_version,
        schema_latest=schema.latest_version(),
    )
    if lowest is not None:
        # the oldest release schema this database still runs, and the contracts init left for later
        waiting = [c.label for c in schema.waiting_contracts(seen.schema_version or 0, lowest)]
        info.update(schema_runs_releases_from=lowest or None, contracts_waiting=waiting)
    if trusted is not None:
        info.update(
            schema_owner=trusted.describe_owner(),
            schema_installed_by=trusted.installer,
            schema_creators=list(trusted.creators),
            schema_untrusted_creators=list(trusted.untrusted_to_use),
        )
    if layout is not None:
        info.update(
            layout=layout.name,
            partition_interval=f"{layout.interval_days}d" if layout.interval_days else None,
        )
    tables = seen.tables
    _report(session, info, tables, parts if layout and layout.partitioned else None)


def _report(
    session: Session,
    info: dict[str, object],
    tables: list[dict[str, Any]],  # schema.overview's rows, untyped as psycopg gives them
    parts: list[partitions.Partition] | None = None,
) -> None:
    if session.json:
        extra = {} if parts is None else {"partitions": [_partition_json(p) for p in parts]}
        render.print_json({**info, "tables": tables, **extra})
        return
    pairs = [(k.replace("_", " "), _shown(k, v)) for k, v in info.items()]
    render.key_values("Database", pairs)
    if tables:
        render.table(
            "Schema",
            ["table", "columns", "indexes", "rows", "size"],
            [
                (t["table_name"], t["columns"], t["indexes"], t["rows"], f"{int(t['bytes']) // 1024} kB")
                for t in tables
            ],
            justify=["left", "right", "right", "right", "right"],
        )
    elif info.get("running") and not info.get("schema_version"):
        render.notice("no wfctl schema in this database yet: run `wfctl init`")
    untrusted = info.get("schema_untrusted_creators")
    if isinstance(untrusted, list) and untrusted:  # status() stores a list of role names
        render.warn(
            f"roles other than the schema's owner may CREATE in schema {info.get('schema')} "
            f"({', '.join(untrusted)}): their operators and functions would run as wfctl's roles, "
            "so every other command refuses it (REVOKE CREATE ON SCHEMA ... FROM ...)"
        )
    if parts:
        render.table(
            "Partitions",
            ["table", "partition", "from", "to", "rows (estimate)", "size"],
            [
                (
                    p.parent,
                    p.partition,
                    "default" if p.is_default else _when(p.range_start),
                    "" if p.is_default else _when(p.range_end),
                    p.rows_estimate,
                    f"{p.bytes // 1024} kB",
                )
                for p in parts
            ],
            justify=["left", "left", "left", "left", "right", "right"],
        )


def _shown(key: str, value: object) -> object:
    """A value as the table shows it: the contracts waiting by name, or none."""
    if key == "contracts_waiting" and isinstance(value, list):
        return ", ".join(value) or "none"
    return value


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _partition_json(p: partitions.Partition) -> dict[str, object]:
    return {
        "table": p.parent,
        "partition": p.partition,
        "default": p.is_default,
        "from": p.range_start.isoformat() if p.range_start else None,
        "to": p.range_end.isoformat() if p.range_end else None,
        "rows_estimate": p.rows_estimate,
        "bytes": p.bytes,
    }


@app.command()
def partition(
    partition_interval: Annotated[
        str,
        typer.Option("--partition-interval", help="One partition per 1d, 7d or 30d of created_at."),
    ] = partitions.DEFAULT_INTERVAL,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Convert this database to the partitioned layout (workflows, steps and attempts in time
    partitions), in one transaction; stop every worker first."""
    session = Session.create(dsn, config, json)
    days = partitions.parse_interval(partition_interval)
    with session.connect() as conn:
        done = partitions.convert(conn, days)
    if session.json:
        render.print_json(
            {
                "layout": partitions.PARTITIONED,
                "partition_interval": f"{days}d",
                "workflows": done.workflows,
                "steps": done.steps,
                "attempts": done.attempts,
                "partitions": done.partitions,
            }
        )
        return
    render.notice(
        f"converted to the partitioned layout, one partition per {days}d: {done.partitions} "
        f"interval(s), {done.workflows} workflow(s), {done.steps} step(s) and {done.attempts} "
        "attempt(s) copied"
    )


@app.command()
def url(
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    reveal: Annotated[
        bool, typer.Option("--reveal", help="Print passwords (and other secret keys) instead of ***.")
    ] = False,
) -> None:
    """Print a DSN of the configured database that psql and libpq take as it is (starting the
    embedded server if needed); passwords are shown as *** unless --reveal."""
    session = Session.create(dsn, config)
    text, hidden = printable_dsn(session.target(), session.dsn(), reveal=reveal)
    render.line(text)
    if hidden:
        render.notice(HIDDEN_NOTICE)


@app.command()
def start(config: ConfigOpt = None) -> None:
    """Start the embedded PostgreSQL (commands start it on demand anyway)."""
    session = Session.create(None, config)
    server = _embedded(session)
    if not server.ensure_running():
        render.notice(f"the embedded PostgreSQL is already running (data in {server.pgdata})")
    else:
        render.notice(f"started the embedded PostgreSQL (data in {server.pgdata})")


@app.command()
def stop(config: ConfigOpt = None) -> None:
    """Stop the embedded PostgreSQL (its data stays; the next command starts it again)."""
    session = Session.create(None, config)
    server = _embedded(session)
    result = server.stop()
    if result.stopped and result.deleted:
        render.notice(
            f"stopped the embedded PostgreSQL (pid {result.pid}) whose data directory {server.pgdata} "
            "had been deleted; the next command starts a new, empty one"
        )
    elif result.stopped:
        render.notice(f"stopped the embedded PostgreSQL (pid {result.pid}; data kept in {server.pgdata})")
    elif result.stale:
        render.notice(
            f"the embedded PostgreSQL is not running (its postmaster.pid named process {result.pid}, "
            "which is not this data directory's server: left alone, and the stale file removed)"
        )
    else:
        render.notice("the embedded PostgreSQL is not running")
