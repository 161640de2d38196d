"""Workflows that park, for tests/db/test_cli_waits.py (what show, list, stats, metrics, cancel and
recover say about waiting workflows). A test runs its worker with ``--types`` leaving out
``idle``, so children of that type stay pending."""

from __future__ import annotations

from typing import Any

from testflows import effect, gate

import wfctl


@wfctl.workflow("approval", max_retries=0)
def approval(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    """Publish a link, then wait for a message on 'approval'."""
    ctx.set_event("link", {"url": f"https://pay.example/{ctx.workflow_id}"})
    decision = ctx.recv("approval", timeout=data.get("timeout"))
    return {"decision": decision}


@wfctl.workflow("quick", max_retries=0)
def quick(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    return int(ctx.step("double", effect, str(ctx.workflow_id), "double", data["n"] * 2))


@wfctl.workflow("idle", max_retries=0)
def idle(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    """Never run by the tests' workers: its workflows stay pending."""
    return int(data.get("n", 0))


@wfctl.workflow("fan", max_retries=0)
def fan(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    """``quick`` children first, then ``idle`` ones, and a join of them all."""
    ids = [ctx.start_child("quick", {"n": n}) for n in range(data["quick"])]
    ids += [ctx.start_child("idle", {"n": n}) for n in range(data["idle"])]
    return sum(ctx.wait(ids, timeout=data.get("timeout")))


@wfctl.workflow("nap", max_retries=0)
def nap(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    ctx.step("before", effect, str(ctx.workflow_id), "before", 1)
    ctx.sleep(data.get("sleep", "1h"))
    return "rested"


@wfctl.workflow("held", max_retries=0)
def held(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Start an ``idle`` child, then run a step held by the gate file (running until released)."""
    ctx.start_child("idle", {"n": 0})
    return str(ctx.step("hold", gate, str(ctx.workflow_id), "hold", "released"))


@wfctl.workflow("family", max_retries=0)
def family(ctx: wfctl.Context, data: dict[str, Any]) -> list[Any]:
    """A ``held`` child (running, with an ``idle`` grandchild) and two ``idle`` children, joined."""
    ids = [ctx.start_child("held"), ctx.start_child("idle", {"n": 1}), ctx.start_child("idle", {"n": 2})]
    return list(ctx.wait(ids))
