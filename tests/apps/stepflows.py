"""Workflows for ``@wfctl.step`` on real workers (tests/process/test_step_options_workers.py).

Every step function appends "<workflow id> <what>" to $WFCTL_TEST_LOG (see testflows.py), so a
test counts real tries. A file "$WFCTL_TEST_GATE-<name>" steers them: the bank is down (every
try raises) while "-down" exists; ``hang`` blocks while "-hang" exists.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from testflows import _record, effect

import wfctl


class CardDeclined(Exception):
    pass


def _gate(name: str) -> str:
    return os.environ.get("WFCTL_TEST_GATE", "") + f"-{name}"


def _tries(wid: str, what: str) -> int:
    """How many times "<wid> <what>" was recorded so far."""
    log = Path(os.environ["WFCTL_TEST_LOG"])
    return log.read_text().split("\n").count(f"{wid} {what}") if log.exists() else 0


@wfctl.step(retries=3, retry_base="50ms", retry_cap="200ms")
def flaky(wid: str) -> str:
    """Fails its first two tries for ``wid``, then charges."""
    _record(f"{wid} charge")
    if _tries(wid, "charge") <= 2:
        raise ConnectionError(f"try {_tries(wid, 'charge')} failed")
    return "charged"


@wfctl.step(retries=2, retry_base="50ms", retry_cap="100ms")
def declined(wid: str) -> str:
    _record(f"{wid} charge")
    raise CardDeclined(f"declined at try {_tries(wid, 'charge')}")


@wfctl.step(retries=5, retry_base="50ms")
def stolen(wid: str) -> str:
    _record(f"{wid} charge")
    raise wfctl.PermanentError("card reported stolen")


@wfctl.step(retries=2, retry_base="1m", retry_cap="1h")
def bank_later(wid: str) -> str:
    """A long backoff (30 s to 1 min, then 1 to 2 min): the run parks between tries."""
    _record(f"{wid} charge")
    if os.path.exists(_gate("down")):
        raise ConnectionError("the bank is down")
    return "charged"


@wfctl.step(retries=1, retry_base="2s", retry_cap="2s")
def bank_soon(wid: str) -> str:
    """A short backoff (1 to 2 s): waited in the worker's thread."""
    _record(f"{wid} charge")
    if os.path.exists(_gate("down")):
        raise ConnectionError("the bank is down")
    return "charged"


@wfctl.step(timeout="300ms")
def hang(wid: str) -> str:
    _record(f"{wid} hang")
    while os.path.exists(_gate("hang")):
        time.sleep(0.01)
    _record(f"{wid} late")
    return "late"


@wfctl.step(retries=2, retry_base="2s", retry_cap="2s", timeout="300ms")
def hang_then_charge(wid: str) -> str:
    """``hang`` with tries: a try past 300 ms is abandoned and tried again after 1 to 2 s."""
    return hang(wid)


@wfctl.step(timeout="300ms")
async def hang_async(wid: str) -> str:
    _record(f"{wid} hang")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _record(f"{wid} cancelled")
        raise
    return "late"


@wfctl.workflow("flaky-charge", max_retries=0)
def flaky_charge(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", flaky, str(ctx.workflow_id))


@wfctl.workflow("charge-or-apologise", max_retries=0)
def charge_or_apologise(ctx: wfctl.Context, data: Any) -> Any:
    wid = str(ctx.workflow_id)
    try:
        return ctx.step("charge", declined, wid)
    except wfctl.StepError as failed:
        return {"apology": ctx.step("apologise", effect, wid, "apologise", "sorry"), "why": failed.message}


@wfctl.workflow("charge-strictly", max_retries=1, retry_base=0.02, retry_cap=0.05)
def charge_strictly(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", declined, str(ctx.workflow_id))


@wfctl.workflow("charge-stolen", max_retries=3, retry_base=0.02, retry_cap=0.05)
def charge_stolen(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", stolen, str(ctx.workflow_id))


@wfctl.workflow("charge-later", max_retries=0)
def charge_later(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", bank_later, str(ctx.workflow_id))


@wfctl.workflow("charge-soon", max_retries=2, retry_base=0.02, retry_cap=0.05)
def charge_soon(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", bank_soon, str(ctx.workflow_id))


def _caught(ctx: wfctl.Context, fn: Any) -> Any:
    try:
        return ctx.step("charge", fn, str(ctx.workflow_id))
    except wfctl.StepError as failed:
        return {"error_type": failed.error_type, "message": failed.message}


@wfctl.workflow("hang-once", max_retries=0)
def hang_once(ctx: wfctl.Context, data: Any) -> Any:
    return _caught(ctx, hang)


@wfctl.workflow("hang-then-charge", max_retries=2, retry_base=0.02, retry_cap=0.05)
def hang_then_charge_flow(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("charge", hang_then_charge, str(ctx.workflow_id))


@wfctl.workflow("hang-async", max_retries=0)
def hang_once_async(ctx: wfctl.Context, data: Any) -> Any:
    return _caught(ctx, hang_async)


@wfctl.workflow("plain", max_retries=0)
def plain(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("one", effect, str(ctx.workflow_id), "one", 1)
