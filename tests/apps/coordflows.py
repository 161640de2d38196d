"""Workflows for the coordination commands' tests (tests/db/test_cli_coordination.py): `wfctl send`,
`wfctl event`, `wfctl wait` and `wfctl submit --timeout` against a real worker. Steps log real
executions through testflows.effect / gate (a gated step holds its worker while the file
$WFCTL_TEST_GATE exists)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from testflows import boom, effect, gate

import wfctl


@wfctl.workflow("approval", max_retries=0)
def approval(ctx: wfctl.Context, data: dict[str, Any] | None) -> dict[str, Any]:
    """Ask, publish the payment link, then park until a message on 'approval' comes."""
    data = data or {}
    wid = str(ctx.workflow_id)
    ctx.step("ask", effect, wid, "ask", "asked")
    ctx.set_event("link", {"url": f"https://pay.example/{data.get('order', 1)}", "amount": 12.5})
    decision = ctx.recv("approval")
    ctx.step("decide", effect, wid, "decide", decision)
    return {"order": data.get("order", 1), "decision": decision}


@wfctl.workflow("stages", max_retries=0)
def stages(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Publish the stage, then hold the worker in a gated step: the run is unfinished (running)
    while its event is there to read."""
    wid = str(ctx.workflow_id)
    ctx.step("start", effect, wid, "start", 1)
    ctx.set_event("stage", {"stage": "charging", "exact": Decimal("0.12345678901234567890123")})
    ctx.step("charge", gate, wid, "charge", 2)
    return "charged"


@wfctl.workflow("timed_stages", max_retries=0, timeout="2s")
def timed_stages(ctx: wfctl.Context, data: Any) -> str:
    """The type's deadline is 2 s; its gated step holds the worker for as long as a test says."""
    ctx.step("charge", gate, str(ctx.workflow_id), "charge", 1)
    return "charged"


@wfctl.workflow("declines", max_retries=0)
def declines(ctx: wfctl.Context, data: dict[str, Any] | None) -> None:
    data = data or {}
    ctx.step("charge", boom, str(ctx.workflow_id), "charge", data.get("message", "card declined"))


@wfctl.workflow("quick", max_retries=0)
def quick(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    return {"n": ctx.step("double", effect, str(ctx.workflow_id), "double", data["n"] * 2)}
