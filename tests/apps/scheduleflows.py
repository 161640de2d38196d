"""Workflows for the schedule tests (tests/db/test_schedules.py).

``stamp`` records the tick it was submitted for ("<workflow id> <scheduled_at>" in
$WFCTL_TEST_LOG, like testflows' steps). ``nightly`` declares the schedule that
$WFCTL_TEST_SCHEDULE gives, in the zone $WFCTL_TEST_TZ (none when the variable is empty), so a
test can start workers whose code declares a schedule, changes it, or drops it.
"""

from __future__ import annotations

import os
from typing import Any

from testflows import effect

import wfctl


@wfctl.workflow("stamp")
def stamp(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    return ctx.step("stamp", effect, str(ctx.workflow_id), data["scheduled_at"], data["scheduled_at"])


@wfctl.workflow(
    "nightly",
    schedule=os.environ.get("WFCTL_TEST_SCHEDULE") or None,
    timezone=(os.environ.get("WFCTL_TEST_TZ") or None) if os.environ.get("WFCTL_TEST_SCHEDULE") else None,
)
def nightly(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    return ctx.step("report", effect, str(ctx.workflow_id), "report", data["scheduled_at"])
