"""A workflow for the failover test: a few steps that take a little time, each leaving a trace.

Every step appends two lines to the file in $WFCTL_TEST_LOG, outside the checkpoint:

    <workflow id> <step> start <unix time>
    <workflow id> <step> done <token> <unix time>

and returns ``{"token": token}``, a fresh random token, as its checkpointed output. Since a step
starts only after the previous step's checkpoint was acknowledged (committed), a "start" line of
step N+1 proves that the checkpoint of step N was acknowledged, and its token says which
execution's output must be stored.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import wfctl

STEPS = ("s1", "s2", "s3", "s4")


def _record(line: str) -> None:
    path = os.environ.get("WFCTL_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def traced(wid: str, name: str, seconds: float) -> dict[str, str]:
    _record(f"{wid} {name} start {time.time():.6f}")
    time.sleep(seconds)
    token = uuid.uuid4().hex
    _record(f"{wid} {name} done {token} {time.time():.6f}")
    return {"token": token}


@wfctl.workflow("relay", max_retries=5, retry_base=0.05, retry_cap=0.5)
def relay(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    seconds = float(data.get("ms", 50)) / 1000
    tokens = [ctx.step(name, traced, wid, name, seconds)["token"] for name in STEPS]
    return {"tokens": tokens}
