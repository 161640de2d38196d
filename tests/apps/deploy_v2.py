"""Version 2 of 'deploy': a fraud check before the charge, behind ``ctx.patched`` so the runs
that passed that point on version 1 keep their path."""

from __future__ import annotations

from typing import Any

from testflows import effect

import wfctl


@wfctl.workflow("deploy", max_retries=0)
def deploy(ctx: wfctl.Context, data: Any) -> list[str]:
    wid = str(ctx.workflow_id)
    path = [ctx.step("reserve", effect, wid, "reserve", "reserve")]
    ctx.recv("go")
    if ctx.patched("fraud-check"):
        path.append(ctx.step("fraud", effect, wid, "fraud", "fraud"))
    path.append(ctx.step("charge", effect, wid, "charge", "charge"))
    ctx.recv("confirm")
    path.append(ctx.step("ship", effect, wid, "ship", "ship"))
    return path
