"""``wfctl worker --burst``: when to stop, and what the run leaves behind.

A burst worker with nothing runnable asks the database (``worker.burst_outlook``) whether work
of its types becomes due within ``--burst-wait`` (a retry backing off, a short durable sleep, a
short ``--delay``). If so it waits for it, and claims it when it is due; if not, it exits and
says in one line what stays pending: its types' workflows due later (how many, and when the
first and the last are due) and those of types it does not run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from wfctl.operations import WOKEN_BY_WRITE
from wfctl.queries import q
from wfctl.recovery import seconds_text
from wfctl.worker.duties import Alarmed
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session

#: The shortest wait before claiming work found due again.
RECHECK = 0.05


@dataclass(frozen=True)
class Outlook:
    """Pending work as a burst worker sees it (the columns of worker.burst_outlook)."""

    next_due_in: float | None  # seconds until the first of its types is due within the horizon
    later: int  # its types' workflows due after the horizon...
    later_first: datetime | None  # ...the first of them...
    later_last: datetime | None  # ...and the last
    waiting: int  # its types' workflows parked on a wait a write ends (a message, children)
    other_types: int  # pending workflows of types this worker does not run...
    other_type_count: int  # ...how many types those are...
    other_type_names: list[str] | None  # ...and the first five of them
    paused: int = 0  # its types' pending workflows held by a pause (`wfctl limit T --concurrency 0`)


def outlook(conn: psycopg.Connection[Any], types: list[str], horizon: float) -> Outlook:
    with conn.cursor(row_factory=class_row(Outlook)) as cur:
        params = {"types": types, "horizon": horizon, "woken_by_write": list(WOKEN_BY_WRITE)}
        row = cur.execute(q("worker.burst_outlook"), params).fetchone()
    assert row is not None  # an aggregate: always one row
    return row


def finished(session: Session, types: list[str], horizon: float, poll: Alarmed, log: WorkerLog) -> bool:
    """With nothing runnable: if work of ``types`` is due within ``horizon`` (--burst-wait),
    wait for it (``poll`` is due when it is, or sooner) and carry on (False); otherwise log
    what stays behind and finish (True, also when the database refused to say)."""
    found: Outlook | None = session.guarded("burst check", outlook, types, horizon)
    if found is None:
        log.info("burst: no runnable work left; exiting")
        return True
    wait = wait_seconds(found)
    if wait is not None:
        poll.alarm(time.monotonic() + max(wait, RECHECK))
        return False
    log.info(leaving(found, horizon))
    return True


def wait_seconds(found: Outlook) -> float | None:
    """How long to wait before claiming again, or None: nothing is due within the horizon."""
    if found.next_due_in is None:
        return None
    return max(found.next_due_in, 0.0)


def leaving(found: Outlook, horizon: float) -> str:
    """The exit line: what the burst run leaves behind (its log says it, once)."""
    parts = []
    if found.later:
        when = _time(found.later_first)
        if found.later > 1 and found.later_last != found.later_first:
            when = f"the first due at {when}, the last at {_time(found.later_last)}"
        else:
            when = f"due at {when}"
        parts.append(
            f"{found.later} workflow(s) of its types wait beyond --burst-wait "
            f"{seconds_text(horizon) if horizon else '0s'} ({when})"
        )
    if found.waiting:
        parts.append(f"{found.waiting} workflow(s) of its types parked on a message or on child workflows")
    if found.paused:
        parts.append(f"{found.paused} workflow(s) of its types paused (`wfctl limit TYPE --concurrency 0`)")
    if found.other_types:
        names = ", ".join(found.other_type_names or [])
        more = ", ..." if found.other_type_count > len(found.other_type_names or []) else ""
        parts.append(f"{found.other_types} pending workflow(s) of types it does not run ({names}{more})")
    if not parts:
        return "burst: no runnable work left; exiting"
    return "burst: no runnable work left; exiting, leaving " + "; and ".join(parts)


def _time(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
