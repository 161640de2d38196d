"""Version 1 of the 'deploy' workflow (tests/process/test_patching.py): reserve, wait for 'go', charge,
wait for 'confirm', ship."""

from __future__ import annotations

from typing import Any

from testflows import effect

import wfctl


@wfctl.workflow("deploy", max_retries=0)
def deploy(ctx: wfctl.Context, data: Any) -> list[str]:
    wid = str(ctx.workflow_id)
    path = [ctx.step("reserve", effect, wid, "reserve", "reserve")]
    ctx.recv("go")
    path.append(ctx.step("charge", effect, wid, "charge", "charge"))
    ctx.recv("confirm")
    path.append(ctx.step("ship", effect, wid, "ship", "ship"))
    return path
