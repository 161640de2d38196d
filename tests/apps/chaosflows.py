"""The workflow the chaos run (tests/chaos.py, tests/process/test_chaos.py) drives through kills and a
database restart.

``chaos3`` has three steps; each sleeps a few milliseconds (the input's ``ms``: a list of three
durations, so the driver decides how long a run is) and then appends one line

    <workflow id> <step number> <attempt> <pid>

to the file named by ``$WFCTL_CHAOS_LOG``: a record of every REAL execution, outside the
checkpoint, that survives both a SIGKILL of the worker and a restart of the database. Each line
is one ``write(2)`` on an ``O_APPEND`` descriptor, so lines from many threads and processes never
interleave, and a process killed mid-step leaves either the whole line or none.

The record is written first, then the step sleeps (as a step that calls another service and
then waits for it): a worker killed during the sleep, or whose checkpoint never committed, has
produced the effect, and the step runs again elsewhere. Those are the duplicate executions the
chaos run counts and bounds.

``max_retries`` is high because every recovery of a killed worker's run counts as an attempt.
"""

from __future__ import annotations

import os
import time
from typing import Any

from appendlog import append_line

import wfctl


def effect(wid: str, number: int, attempt: int, ms: float) -> int:
    append_line("WFCTL_CHAOS_LOG", f"{wid} {number} {attempt} {os.getpid()}")
    if ms > 0:
        time.sleep(ms / 1000)
    return number


@wfctl.workflow("chaos3", max_retries=1000, retry_base=0.05, retry_cap=0.5)
def chaos3(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    ms = list((data or {}).get("ms") or [3, 3, 3])
    total = 0
    for number, name in enumerate(("one", "two", "three"), start=1):
        total += ctx.step(name, effect, wid, number, ctx.attempt, ms[number - 1])
    return {"sum": total}
