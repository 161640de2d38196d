"""Workflows for the --burst-wait and sweep tests (tests/process/test_burst_wait.py, tests/db/test_sweep.py).

Like testflows, every step appends "<workflow id> <step>" to $WFCTL_TEST_LOG, and a step called
through ``gate`` blocks while the file $WFCTL_TEST_GATE exists.
"""

from __future__ import annotations

from typing import Any

from testflows import boom, effect, gate

import wfctl


@wfctl.workflow("retry-in-1s", max_retries=2, retry_base=1, retry_cap=1)
def retry_in_1s(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    """Fails its first attempt; the retry is due 0.5 to 1 s later (equal jitter on 1 s)."""
    wid = str(ctx.workflow_id)
    if ctx.attempt == 1:
        ctx.step("call", boom, wid, "call", "the service is down on the first try")
    ctx.step("call", effect, wid, "call", ctx.attempt)
    return ctx.attempt


@wfctl.workflow("nap")
def nap(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Sleeps (durably) for data["sleep"], then one more step."""
    wid = str(ctx.workflow_id)
    ctx.step("before", effect, wid, "before", 1)
    ctx.sleep(data["sleep"])
    ctx.step("after", effect, wid, "after", 2)
    return "woke"


@wfctl.workflow("held", max_retries=3)
def held(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    """One step held on the gate (a worker to kill or freeze inside it), then one more."""
    wid = str(ctx.workflow_id)
    ctx.step("one", gate, wid, "one", 1)
    ctx.step("two", effect, wid, "two", 2)
    return ctx.attempt
