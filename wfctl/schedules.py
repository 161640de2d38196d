"""Schedules: a run of a workflow type at every tick of a cron expression, in a time zone.

Operators add them (``wfctl schedule add``), code declares them (``@wfctl.workflow(...,
schedule=...)``: each worker that runs the type keeps a schedule named after it, ``declare``),
and whoever is around fires the ticks that are due (``fire_due``): every live worker, as a duty
of its loop (``wfctl/worker/ticks.py``), and ``wfctl tick`` from system cron.

A tick's run is the schedule's input (a JSON object) plus ``"scheduled_at"``, the tick as
ISO 8601 in UTC, stored under the idempotency key ``schedule:NAME:<tick>``. Firing locks the
due schedules (``FOR UPDATE SKIP LOCKED``), inserts their runs and moves ``next_tick_at`` past
now in one transaction, so each tick gives exactly one run however many firers race (migration
0008). After downtime a schedule runs its latest missed tick once; with ``backfill`` the latest
``BACKFILL_LIMIT`` missed ticks, oldest first; the older ones are reported as missed. Adding a
schedule again (an edit), a changed declaration and a resume compute the next tick from now:
they never fire at once.

Every time is the database's, and stored in UTC; the zone decides when ticks fall
(``wfctl/cron.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from wfctl import cron, storedjson
from wfctl.connection import DEFAULT_HOLD, hold_locks_at_most
from wfctl.errors import InvalidInput, InvalidState, NotFound
from wfctl.queries import q
from wfctl.registry import WorkflowType
from wfctl.validate import check_text, check_type, encode_input

#: With backfill, at most this many missed ticks run after downtime (the latest ones).
BACKFILL_LIMIT = 100
#: Due schedules fired per transaction; ``fire_due`` goes on until none is left.
FIRE_BATCH = 100
#: A schedule whose expression or zone this machine cannot evaluate (changed by hand, a zone
#: missing from this machine's tz database) is tried again this much later, not at every turn.
BROKEN_RETRY = timedelta(hours=1)
MAX_NAME_LENGTH = 100
CODE = "code"
CLI = "cli"


@dataclass(frozen=True)
class Schedule:
    name: str
    workflow_type: str
    cron: str
    timezone: str
    input: dict[str, Any] | storedjson.Unreadable  # Unreadable: stored as Python cannot read it
    paused: bool
    backfill: bool
    source: str  # 'code' (declared by @wfctl.workflow) or 'cli'
    next_tick_at: datetime
    last_tick_at: datetime | None
    last_run_id: UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Added:
    schedule: Schedule
    created: bool  # False: a schedule of that name existed and now has this definition


@dataclass(frozen=True)
class Fired:
    """One run submitted for a tick (or by ``trigger``)."""

    schedule: str
    workflow_type: str
    tick: datetime  # what the run's input says in "scheduled_at"
    id: UUID | None  # None: the tick's idempotency key was taken already; nothing new stored


@dataclass(frozen=True)
class Missed:
    """Ticks of a schedule from ``first`` to before ``until`` that no run was submitted for
    (nobody fired them in time, and backfill was off or bounded)."""

    schedule: str
    first: datetime
    until: datetime


@dataclass(frozen=True)
class Broken:
    """A due schedule that cannot be evaluated here; tried again after ``BROKEN_RETRY``."""

    schedule: str
    error: str


@dataclass
class Firing:
    """What ``fire_due`` did."""

    fired: list[Fired]
    missed: list[Missed]
    broken: list[Broken]


@dataclass(frozen=True)
class Declared:
    """What a worker's start did to the schedule of one of its types."""

    name: str
    action: str  # created, changed, dropped, or taken (a `wfctl schedule add` holds the name)
    cron: str


# -- checks ------------------------------------------------------------------------------------


def check_name(name: str) -> None:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidInput(f"a schedule name must have 1 to {MAX_NAME_LENGTH} characters")
    check_text(name, "the schedule name")


def check_input(input_json: str, what: str = "a schedule's input") -> None:
    """The input is a JSON object: each run gets it with "scheduled_at" added."""
    value = json.loads(input_json)
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__
        kind = {"str": "a string", "list": "an array", "bool": "a boolean"}.get(kind, kind)
        if kind in ("int", "float", "Decimal"):
            kind = "a number"
        raise InvalidInput(
            f'{what} must be a JSON object (each run gets it with "scheduled_at" added), not {kind}'
        )


# -- operators ---------------------------------------------------------------------------------


def add(
    conn: psycopg.Connection[Any],
    name: str,
    workflow_type: str,
    expression: str,
    *,
    timezone: str | None = None,
    input: Mapping[str, Any] | None = None,
    backfill: bool = False,
) -> Added:
    """Add the schedule ``name``, or give an existing one this definition (its pause is kept).
    Its first tick is the first after now: adding never fires at once."""
    text = encode_input(dict(input) if isinstance(input, Mapping) else input, "a schedule's input")
    return add_json(
        conn, name, workflow_type, expression, timezone=timezone, input_json=text, backfill=backfill
    )


def add_json(
    conn: psycopg.Connection[Any],
    name: str,
    workflow_type: str,
    expression: str,
    *,
    timezone: str | None = None,
    input_json: str | None = None,
    backfill: bool = False,
) -> Added:
    """``add`` with the input as JSON text already checked (``cli.jsonlines.parse_input``)."""
    check_name(name)
    check_type(workflow_type)
    parsed = cron.parse(expression, timezone)
    text = "{}" if input_json is None or input_json == "null" else input_json
    check_input(text)
    with conn.transaction():
        existing = _one(conn, "schedules.lock", name)
        if existing is not None and existing.source == CODE:
            raise _declared_in_code(name)
        now = _clock(conn)
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                q("schedules.add"),
                {
                    "name": name,
                    "workflow_type": workflow_type,
                    "cron": expression,
                    "timezone": parsed.zone_name,
                    "input": text,
                    "backfill": backfill,
                    "next_tick_at": _next(parsed, now, name),
                },
            ).fetchone()
        if row is None:  # declared by a worker between our look and our insert
            raise _declared_in_code(name)
    return Added(Schedule(**row), created=existing is None)


def _declared_in_code(name: str) -> InvalidState:
    return InvalidState(
        f"schedule {name!r} is declared in code (@wfctl.workflow({name!r}, schedule=...)): change it "
        "there, pause it with `wfctl schedule pause`, or add this one under another name"
    )


def pause(conn: psycopg.Connection[Any], name: str) -> bool:
    """Stop firing ``name``; False when it was paused already."""
    check_name(name)
    changed = conn.execute(q("schedules.pause"), {"name": name}).rowcount
    if not changed:
        get(conn, name)  # NotFound, or it was paused
    return bool(changed)


def resume(conn: psycopg.Connection[Any], name: str) -> bool:
    """Fire ``name`` again from its next tick after now (what fell while it was paused is not
    fired); False when it was not paused."""
    check_name(name)
    with conn.transaction():
        found = _one(conn, "schedules.lock", name)
        if found is None:
            raise _not_found(name)
        if not found.paused:
            return False
        parsed = cron.parse(found.cron, found.timezone)
        conn.execute(q("schedules.resume"), {"name": name, "next_tick_at": _next(parsed, _clock(conn), name)})
    return True


def trigger(conn: psycopg.Connection[Any], name: str) -> Fired:
    """Submit one run of ``name`` now (also when it is paused), with now as "scheduled_at"; its
    ticks are not changed."""
    check_name(name)
    with conn.transaction():
        found = _one(conn, "schedules.lock", name)
        if found is None:
            raise _not_found(name)
        now = _clock(conn)
        key = f"schedule:{name}:trigger:{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
        ids = _insert_runs(conn, [(name, now, key)])
    if key not in ids:  # two triggers in the same microsecond
        raise InvalidState(f"schedule {name!r} was triggered at this very moment already: trigger it again")
    return Fired(name, found.workflow_type, now, ids[key])


def delete(conn: psycopg.Connection[Any], name: str) -> Schedule:
    """Delete ``name`` (the runs it submitted stay)."""
    check_name(name)
    found = get(conn, name)
    row = conn.execute(q("schedules.delete"), {"name": name}).fetchone()
    if row is None:
        raise _not_found(name)
    return found


def get(conn: psycopg.Connection[Any], name: str) -> Schedule:
    found = _one(conn, "schedules.get", name)
    if found is None:
        raise _not_found(name)
    return found


def list_schedules(conn: psycopg.Connection[Any]) -> list[Schedule]:
    with conn.cursor(row_factory=dict_row) as cur:
        storedjson.install(cur)  # an input Python cannot read: an Unreadable, not an error
        return [Schedule(**row) for row in cur.execute(q("schedules.list")).fetchall()]


def _not_found(name: str) -> NotFound:
    return NotFound(f"no schedule named {name!r}", "`wfctl schedules` lists them")


def _one(conn: psycopg.Connection[Any], block: str, name: str) -> Schedule | None:
    with conn.cursor(row_factory=dict_row) as cur:
        storedjson.install(cur)
        row = cur.execute(q(block), {"name": name}).fetchone()
    return Schedule(**row) if row is not None else None


def _clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute(q("schedules.clock")).fetchone()
    assert row is not None
    return cast(datetime, row[0])  # psycopg's rows are untyped: the clock is a timestamptz


def _next(parsed: cron.Cron, now: datetime, name: str) -> datetime:
    found = parsed.next_after(now)
    if found is None:
        raise InvalidInput(f"schedule {name!r} never ticks again (no match within fifty years)")
    return found


# -- code --------------------------------------------------------------------------------------


def declare(
    conn: psycopg.Connection[Any], types: Mapping[str, WorkflowType], *, hold: float = DEFAULT_HOLD
) -> list[Declared]:
    """A worker at start, for the types it runs: the schedule each one's code declares, named
    after the type, is created, or given the code's cron and zone when they changed (its next
    tick from now; an operator's pause is kept); unchanged, it is left alone (its next tick
    too, so a restart neither fires nor skips a tick). The code schedules of types whose code
    declares none any more are deleted. A name taken by a `wfctl schedule add` is left alone.
    Each schedule's row is locked in a transaction that ends after ``hold`` seconds frozen."""
    done: list[Declared] = []
    for name, workflow in sorted(types.items()):
        if workflow.schedule is None:
            continue
        parsed = cron.parse(workflow.schedule, workflow.timezone)
        with conn.transaction():
            hold_locks_at_most(conn, hold)
            found = _one(conn, "schedules.lock", name)
            if found is not None and (found.source != CODE or found.workflow_type != name):
                done.append(Declared(name, "taken", workflow.schedule))
                continue
            if found is not None and (found.cron, found.timezone) == (workflow.schedule, parsed.zone_name):
                continue
            params = {
                "name": name,
                "cron": workflow.schedule,
                "timezone": parsed.zone_name,
                "next_tick_at": _next(parsed, _clock(conn), name),
            }
            if found is None:
                if conn.execute(q("schedules.declare"), params).rowcount:
                    done.append(Declared(name, "created", workflow.schedule))
            else:
                conn.execute(q("schedules.redeclare"), params)
                done.append(Declared(name, "changed", workflow.schedule))
    unscheduled = sorted(name for name, workflow in types.items() if workflow.schedule is None)
    if unscheduled:
        for row in conn.execute(q("schedules.undeclare"), {"types": unscheduled}).fetchall():
            done.append(Declared(row[0], "dropped", row[1]))
    return done


# -- firing ------------------------------------------------------------------------------------


def fire_due(conn: psycopg.Connection[Any], *, hold: float = DEFAULT_HOLD, batch: int = FIRE_BATCH) -> Firing:
    """Submit the runs of every tick that is due, each once (a worker duty, and `wfctl tick`).
    One transaction per ``batch`` schedules, until none is due. The due rows stay locked until
    that transaction ends, and other firers skip them: a process frozen inside it loses it after
    ``hold`` seconds (``hold_locks_at_most``), so the ticks it held are fired by another."""
    firing = Firing([], [], [])
    while True:
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            hold_locks_at_most(conn, hold)
            due = cur.execute(q("schedules.due"), {"limit": batch}).fetchall()
            if not due:
                return firing
            _fire(conn, due, firing)
        if len(due) < batch:
            return firing


def next_due(conn: psycopg.Connection[Any]) -> float | None:
    """Seconds until the earliest tick of an active schedule by the database's clock (0 or less:
    due now), or None when there is no active schedule."""
    row = conn.execute(q("schedules.next_due")).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _fire(conn: psycopg.Connection[Any], due: list[dict[str, Any]], firing: Firing) -> None:
    runs: list[tuple[str, datetime, str]] = []
    moves: dict[str, tuple[datetime, datetime | None, str | None]] = {}  # name -> next, last, key
    for row in due:
        name, now = row["name"], row["now"]
        try:
            parsed = cron.parse(row["cron"], row["timezone"])
            ticks = parsed.ticks_between(row["next_tick_at"], now, BACKFILL_LIMIT if row["backfill"] else 1)
            upcoming = parsed.next_after(now)
        except InvalidInput as exc:
            firing.broken.append(Broken(name, str(exc)))
            moves[name] = (now + BROKEN_RETRY, None, None)
            continue
        if upcoming is None:
            firing.broken.append(Broken(name, "it never ticks again (no match within fifty years)"))
            upcoming = now + BROKEN_RETRY
        if ticks and ticks[0] > row["next_tick_at"]:
            firing.missed.append(Missed(name, row["next_tick_at"], ticks[0]))
        keys = [f"schedule:{name}:{cron.iso(tick)}" for tick in ticks]
        runs.extend((name, tick, key) for tick, key in zip(ticks, keys, strict=True))
        moves[name] = (upcoming, ticks[-1] if ticks else None, keys[-1] if keys else None)
    ids = _insert_runs(conn, runs) if runs else {}
    types = {row["name"]: row["workflow_type"] for row in due}
    for name, tick, key in runs:
        firing.fired.append(Fired(name, types[name], tick, ids.get(key)))
    names = list(moves)
    conn.execute(
        q("schedules.advance"),
        {
            "names": names,
            "next_tick_at": [moves[n][0] for n in names],
            "last_tick_at": [moves[n][1] for n in names],
            "last_run_id": [ids.get(k) if k else None for k in (moves[n][2] for n in names)],
        },
    )


def _insert_runs(conn: psycopg.Connection[Any], runs: list[tuple[str, datetime, str]]) -> dict[str, UUID]:
    """Insert one run per (schedule, tick, key); the ids of those stored, by key."""
    rows = conn.execute(
        q("schedules.insert_runs"),
        {
            "names": [name for name, _, _ in runs],
            "scheduled_at": [cron.iso(tick) for _, tick, _ in runs],
            "keys": [key for _, _, key in runs],
        },
    ).fetchall()
    return {key: wid for wid, _, key in rows}
