"""Schedules from the command line: ``wfctl schedule add|pause|resume|trigger|delete``, the
``wfctl schedules`` table, and ``wfctl tick``, which fires the due ticks once (for system cron
where no worker runs all the time). Each is one call of wfctl/schedules.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from wfctl import cron, schedules, validate
from wfctl.cli import jsonlines, render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.cli.submit import _unknown_type
from wfctl.errors import InvalidInput

app = typer.Typer(
    help="Run a workflow type on a cron schedule: add, pause, resume, trigger, delete.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]


def _name(name: str) -> str:
    schedules.check_name(name)
    return name


@app.command()
def add(
    name: NameArg,
    workflow_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="The workflow type each tick submits a run of.")
    ],
    expression: Annotated[
        str,
        typer.Argument(
            metavar="CRON",
            help='Five fields ("0 * * * *": hourly), or six with the seconds first ("*/5 * * * * *").',
        ),
    ],
    input_json: Annotated[
        str | None,
        typer.Option(
            "--input",
            help='Each run\'s input, a JSON object; "scheduled_at" (the tick, ISO 8601 UTC) is added.',
            show_default=False,
        ),
    ] = None,
    tz: Annotated[
        str | None,
        typer.Option(
            "--tz", help="The time zone the expression is read in (default: UTC).", show_default=False
        ),
    ] = None,
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill",
            help=f"After downtime, run every missed tick (the latest {schedules.BACKFILL_LIMIT}), not "
            "only the latest.",
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Refuse a TYPE no worker has registered (instead of a warning)."),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Add a schedule, or give an existing one a new definition; its next tick is the first after
    now (adding never fires at once)."""
    session = Session.create(dsn, config, json)
    _name(name)
    validate.check_type(workflow_type)
    parsed = cron.parse(expression, tz)  # before connecting: bad input never needs the database
    text = "{}"
    if input_json is not None:
        text = jsonlines.parse_input(input_json, "the schedule's --input", "JSON --input")
        schedules.check_input(text, "--input")
    with session.connect() as conn:
        unknown = _unknown_type(conn, workflow_type, strict=strict)
        done = schedules.add_json(
            conn, name, workflow_type, expression, timezone=tz, input_json=text, backfill=backfill
        )
    if unknown:
        render.warn(unknown)
    schedule = done.schedule
    if session.json:
        render.print_json({**_as_json(schedule), "created": done.created})
        return
    verb = "added" if done.created else "replaced"
    state = " (it stays paused: `wfctl schedule resume`)" if schedule.paused else ""
    render.line(
        f"{verb} schedule {name}: {workflow_type} at {_quoted(expression)} {parsed.zone_name}; "
        f"next tick {_in_zone(schedule.next_tick_at, schedule.timezone)}{state}"
    )


@app.command()
def pause(name: NameArg, dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Stop firing a schedule (its runs already submitted are not touched)."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        changed = schedules.pause(conn, _name(name))
    if session.json:
        render.print_json({"name": name, "paused": True, "changed": changed})
    else:
        render.line(f"paused schedule {name}" if changed else f"schedule {name} was paused already")


@app.command()
def resume(name: NameArg, dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Fire a paused schedule again, from its next tick after now (ticks that fell while it was
    paused are not fired)."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        changed = schedules.resume(conn, _name(name))
        schedule = schedules.get(conn, name)
    if session.json:
        render.print_json({**_as_json(schedule), "changed": changed})
        return
    when = _in_zone(schedule.next_tick_at, schedule.timezone)
    render.line(
        f"resumed schedule {name}: next tick {when}" if changed else f"schedule {name} was not paused"
    )


@app.command()
def trigger(name: NameArg, dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Submit one run of a schedule now (also when paused), with now as "scheduled_at"; print
    its id. Its ticks do not change."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        fired = schedules.trigger(conn, _name(name))
    if session.json:
        render.print_json(_fired_json(fired))
    else:
        render.line(str(fired.id))


@app.command()
def delete(name: NameArg, dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """Delete a schedule (the runs it submitted stay)."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        gone = schedules.delete(conn, _name(name))
    if gone.source == schedules.CODE:
        render.warn(
            f"schedule {name} is declared in code: the next worker that starts with it adds it again "
            "(`wfctl schedule pause` keeps it off)"
        )
    if session.json:
        render.print_json({"name": name, "deleted": True, "source": gone.source})
    else:
        render.line(f"deleted schedule {name}")


def list_schedules(dsn: DsnOpt = None, config: ConfigOpt = None, json: JsonOpt = False) -> None:
    """List the schedules. For each: type, cron expression and zone, next and last tick (in the
    schedule's zone), paused or active, and where it comes from (code or cli); --json adds the
    last tick's run id and each schedule's input."""
    session = Session.create(dsn, config, json)
    with session.connect() as conn:
        found = schedules.list_schedules(conn)
    if session.json:
        render.print_json([_as_json(s) for s in found])
        return
    if not found:
        render.notice("no schedules (`wfctl schedule add NAME TYPE CRON`, or schedule= on @wfctl.workflow)")
        return
    render.table(
        None,
        ["name", "type", "cron", "zone", "next tick", "last tick", "state", "source"],
        [
            [
                s.name,
                s.workflow_type,
                s.cron,
                s.timezone,
                None if s.paused else _in_zone(s.next_tick_at, s.timezone),
                None if s.last_tick_at is None else _in_zone(s.last_tick_at, s.timezone),
                ("paused" if s.paused else "active") + (", backfill" if s.backfill else ""),
                s.source,
            ]
            for s in found
        ],
    )


def tick(
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only what needs attention (missed ticks, schedules that cannot be fired), "
            "not each run submitted: for cron, which mails what is printed.",
        ),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Fire every schedule tick that is due, once. For system cron where no worker runs all the
    time (live workers do it themselves): one line per run submitted, nothing when none was due."""
    session = Session.create(dsn, config, json)
    session.quiet = quiet
    with session.connect() as conn:
        firing = schedules.fire_due(conn)
    if session.json:
        render.print_json(
            [{"action": "fired", **_fired_json(f)} for f in firing.fired]
            + [
                {
                    "action": "missed",
                    "schedule": m.schedule,
                    "first": cron.iso(m.first),
                    "until": cron.iso(m.until),
                }
                for m in firing.missed
            ]
            + [{"action": "broken", "schedule": b.schedule, "error": b.error} for b in firing.broken]
        )
        return
    for missed in firing.missed:
        render.line(
            f"missed schedule {missed.schedule}: ticks from {cron.iso(missed.first)} to before "
            f"{cron.iso(missed.until)} were not run"
        )
    for fired in [] if quiet else firing.fired:
        what = fired.id if fired.id is not None else "stored before"
        render.line(
            f"fired schedule {fired.schedule} for {cron.iso(fired.tick)}: {fired.workflow_type} {what}"
        )
    for broken in firing.broken:
        retry = schedules.BROKEN_RETRY
        render.warn(f"schedule {broken.schedule} cannot be fired: {broken.error} (tried again in {retry})")


def _quoted(expression: str) -> str:
    return f'"{expression}"'


def _in_zone(instant: datetime, zone_name: str) -> str:
    """An instant as the schedule's zone shows it (what its cron expression is read in)."""
    try:
        _, zone = cron.zone(zone_name)
    except InvalidInput:
        return instant.isoformat()
    return instant.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _as_json(schedule: schedules.Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "workflow_type": schedule.workflow_type,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "input": schedule.input,
        "paused": schedule.paused,
        "backfill": schedule.backfill,
        "source": schedule.source,
        "next_tick_at": schedule.next_tick_at,
        "last_tick_at": schedule.last_tick_at,
        "last_run_id": schedule.last_run_id,
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


def _fired_json(fired: schedules.Fired) -> dict[str, Any]:
    return {
        "schedule": fired.schedule,
        "workflow_type": fired.workflow_type,
        "scheduled_at": cron.iso(fired.tick),
        "id": fired.id,
    }


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="schedule")
    root.command("schedules")(list_schedules)
    root.command()(tick)
