"""Workflows for the flow-control tests (tests/db/test_limits.py): types with limits declared in
code, and one without any (limits are set on it at run time with `wfctl limit`)."""

from __future__ import annotations

import time
from typing import Any

import wfctl


def pause(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@wfctl.workflow("capped", concurrency=3, max_retries=0)
def capped(ctx: wfctl.Context, data: dict[str, Any]) -> float:
    return float(ctx.step("work", pause, data.get("pause", 0.05)))


@wfctl.workflow("plain", max_retries=0)
def plain(ctx: wfctl.Context, data: dict[str, Any]) -> float:
    """No limit in code: the tests set and clear limits on it with `wfctl limit`."""
    return float(ctx.step("work", pause, data.get("pause", 0.05)))


@wfctl.workflow("tenant", key_concurrency=2, max_retries=0)
def tenant(ctx: wfctl.Context, data: dict[str, Any]) -> float:
    return float(ctx.step("work", pause, data.get("pause", 0.02)))


@wfctl.workflow("metered", rate="20/s", max_retries=0)
def metered(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    return int(ctx.step("work", lambda: data.get("n", 0)))


@wfctl.workflow("gated", concurrency=1, max_retries=0)
def gated(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    """Parks on a message when asked to: a parked run holds no lease, so it does not count."""
    if data.get("wait"):
        return ctx.recv("go")
    return ctx.step("work", pause, data.get("pause", 0.05))


@wfctl.workflow("quota", concurrency=4, key_concurrency=1, rate="30/m", max_retries=0)
def quota(ctx: wfctl.Context, data: dict[str, Any]) -> float:
    """Every kind of limit declared in code (tests/process/test_cli_limits.py: what `wfctl limits` says)."""
    return float(ctx.step("work", pause, data.get("pause", 0)))


@wfctl.workflow("swift", max_retries=0)
def swift(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """No limit (tests/db/test_claim_order.py: an urgent run among a limited type's backlog)."""
    return str(ctx.step("work", lambda: "swift"))
