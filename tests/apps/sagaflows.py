"""Workflows for the tests of ``wfctl.StepError`` on real workers
(tests/process/test_step_errors_workers.py).

Every step function appends "<workflow id> <step>" to $WFCTL_TEST_LOG (see testflows.py), so a
test counts real executions. A file "$WFCTL_TEST_GATE-<name>" steers them: ``reserve`` fails
while "-out" exists; ``refund`` blocks while "-refund" exists; the saga's handler (workflow code
between catching the StepError and its next step) blocks while "-handler" exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from testflows import _record, effect

import wfctl


class OutOfStock(Exception):
    pass


def _gate(name: str) -> str:
    return os.environ.get("WFCTL_TEST_GATE", "") + f"-{name}"


def _hold(name: str) -> None:
    while os.path.exists(_gate(name)):
        time.sleep(0.01)


def reserve(wid: str) -> str:
    _record(f"{wid} reserve")
    if os.path.exists(_gate("out")):
        raise OutOfStock("no lamps left")
    return "reserved"


def reserve_once_short(wid: str) -> str:
    """Fails the first time it runs for ``wid``, then reserves."""
    log = Path(os.environ["WFCTL_TEST_LOG"])
    before = log.read_text().split("\n").count(f"{wid} reserve") if log.exists() else 0
    _record(f"{wid} reserve")
    if before == 0:
        raise OutOfStock("no lamps left yet")
    return "reserved"


def refuse(wid: str) -> str:
    _record(f"{wid} reserve")
    raise wfctl.PermanentError("lamps are discontinued")


def refund(wid: str) -> str:
    _record(f"{wid} refund")
    _hold("refund")
    return "refunded"


@wfctl.workflow("saga", max_retries=1, retry_base=0.02, retry_cap=0.05)
def saga(ctx: wfctl.Context, data: Any) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    ctx.step("charge", effect, wid, "charge", "charged")
    try:
        ctx.step("reserve", reserve, wid)
    except wfctl.StepError as failed:
        _record(f"{wid} handler")
        _hold("handler")
        return {"refund": ctx.step("refund", refund, wid), "why": failed.message}
    return {"reserved": True}


@wfctl.workflow("strict", max_retries=1, retry_base=0.02, retry_cap=0.05)
def strict(ctx: wfctl.Context, data: Any) -> str:
    wid = str(ctx.workflow_id)
    ctx.step("charge", effect, wid, "charge", "charged")
    return str(ctx.step("reserve", reserve_once_short, wid))


@wfctl.workflow("strict-permanent", max_retries=3, retry_base=0.02, retry_cap=0.05)
def strict_permanent(ctx: wfctl.Context, data: Any) -> str:
    return str(ctx.step("reserve", refuse, str(ctx.workflow_id)))


@wfctl.workflow("caught-then-raised", max_retries=1, retry_base=0.02, retry_cap=0.05)
def caught_then_raised(ctx: wfctl.Context, data: Any) -> str:
    try:
        ctx.step("reserve", reserve, str(ctx.workflow_id))
    except wfctl.StepError as failed:
        raise RuntimeError(f"gave up: {failed.message}") from failed
    return "reserved"
