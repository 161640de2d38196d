"""A workflow type with a concurrency limit whose steps record every execution: a claim of it
waits on the limit's row (wfctl_claim_allowed locks it), which a test can hold to stop a worker
in the middle of its claim (tests/process/test_paused_claim.py)."""

from __future__ import annotations

from typing import Any

from testflows import effect

import wfctl


@wfctl.workflow("paced", concurrency=2, max_retries=2)
def paced(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    wid = str(ctx.workflow_id)
    ctx.step("s1", effect, wid, "s1", 1)
    ctx.step("s2", effect, wid, "s2", 2)
    return "done"
