"""Flow control from the command line: ``wfctl limit TYPE`` sets (or clears) a type's
concurrency, per-key and rate limits at run time, ``wfctl limits`` lists what is in force.
Workers apply a change from their next claim; the command wakes idle ones."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from wfctl import limits
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.errors import InvalidInput
from wfctl.validate import check_type


def _source(row: limits.LimitRow, kind: str, text: str | None) -> str | None:
    source = row.source(kind)
    return None if text is None or source is None else f"{text} ({source})"


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _rate(count: int | None, seconds: float | None) -> str | None:
    return None if count is None else str(limits.Rate(count, seconds or 0.0))


def _as_dict(row: limits.LimitRow) -> dict[str, Any]:
    effective = row.effective()
    return {
        "workflow_type": row.workflow_type,
        "concurrency": effective.concurrency,
        "key_concurrency": effective.key_concurrency,
        "rate": None if effective.rate is None else str(effective.rate),
        "set": {
            "concurrency": row.concurrency,
            "key_concurrency": row.key_concurrency,
            "rate": _rate(row.rate_count, row.rate_seconds),
        },
        "code": {
            "concurrency": row.code_concurrency,
            "key_concurrency": row.code_key_concurrency,
            "rate": _rate(row.code_rate_count, row.code_rate_seconds),
        },
        "running": row.running,
        "runnable": row.runnable,
        "running_keys": row.running_keys,
        "changed_at": row.changed_at,
    }


def _show(found: list[limits.LimitRow], json: bool) -> None:
    if json:
        render.print_json([_as_dict(row) for row in found])
        return
    table_rows = []
    for row in found:
        effective = row.effective()
        table_rows.append(
            (
                row.workflow_type,
                _source(row, "concurrency", _text(effective.concurrency)),
                _source(row, "key_concurrency", _text(effective.key_concurrency)),
                _source(row, "rate_count", _text(effective.rate)),
                row.running,
                row.running_keys if effective.key_concurrency is not None else None,
                row.runnable,
            )
        )
    render.table(
        None,
        ["type", "concurrency", "per key", "rate", "running", "keys running", "runnable"],
        table_rows,
        justify=["left", "right", "right", "right", "right", "right", "right"],
    )


def limit(
    workflow_type: Annotated[str, typer.Argument(metavar="TYPE", help="The workflow type.")],
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            help="At most N runs of the type hold a lease at once, across all workers (0 pauses it).",
        ),
    ] = None,
    per_key: Annotated[
        int | None,
        typer.Option("--per-key", help="At most K running per concurrency key; claims rotate across keys."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", help="At most COUNT/WINDOW starts, evenly spread: 100/1m, 20/s."),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Drop the limits set here; the code's (if any) apply again.")
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Set a workflow type's limits at run time, without a deploy. They are stored in the
    database; workers apply them from their next claim. Without options, show the type's limits."""
    session = Session.create(dsn, config, json)
    check_type(workflow_type)
    given = concurrency is not None or per_key is not None or rate is not None
    if clear and given:
        raise InvalidInput("--clear drops every limit set here: give it alone")
    if concurrency is not None:
        limits.check_limit(concurrency, "--concurrency")
    if per_key is not None:
        limits.check_limit(per_key, "--per-key", allow_zero=False)
    parsed = None if rate is None else limits.parse_rate(rate, "--rate")
    with session.connect() as conn:
        if clear:
            if not limits.clear(conn, workflow_type):
                render.notice(f"no limits were set on {workflow_type} with wfctl limit: nothing changed")
        elif given:
            limits.set_limits(
                conn, workflow_type, concurrency=concurrency, key_concurrency=per_key, rate=parsed
            )
        else:
            limits.check_known(conn, workflow_type)
        found = limits.list_limits(conn, workflow_type)
    if not found and not session.json:
        render.notice(f"{workflow_type} has no limits")
        return
    _show(found, session.json)


def limits_(
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """List the workflow types with limits in force. For each limit: the value and who set it
    (code or `wfctl limit`), with what runs now."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        found = limits.list_limits(conn)
    if not found and not session.json:
        render.notice("no workflow type has limits")
        return
    _show(found, session.json)


def register(app: typer.Typer) -> None:
    app.command()(limit)
    app.command("limits")(limits_)
