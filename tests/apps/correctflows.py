"""Workflows for the regression tests of the worker's correctness fixes (tests/db/test_correctness.py).

Every step function appends "<workflow id> <step>" to $WFCTL_TEST_LOG (see testflows.py), so a
test counts real executions. ``gated`` blocks while the file "$WFCTL_TEST_GATE-<name>" exists,
so a test can hold a run inside one particular step.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from testflows import _record, effect

import wfctl

sys.set_int_max_str_digits(0)  # let a step return an integer too long for jsonb's numeric


def gated(wid: str, name: str, value: Any) -> Any:
    _record(f"{wid} {name}")
    gate = os.environ.get("WFCTL_TEST_GATE", "") + f"-{name}"
    while os.path.exists(gate):
        time.sleep(0.01)
    return value


def exits(wid: str, name: str) -> None:
    _record(f"{wid} {name}")
    sys.exit(3)


@wfctl.workflow("c-longname", max_retries=1, retry_base=0.02, retry_cap=0.05)
def longname(ctx: wfctl.Context, data: Any) -> str:
    ctx.step("x" * 250, effect, str(ctx.workflow_id), "long", 1)
    return "never"


@wfctl.workflow("c-exit", max_retries=1, retry_base=0.02, retry_cap=0.05)
def exit_in_step(ctx: wfctl.Context, data: Any) -> str:
    ctx.step("bye", exits, str(ctx.workflow_id), "bye")
    return "never"


@wfctl.workflow("c-huge", max_retries=1, retry_base=0.02, retry_cap=0.05)
def huge(ctx: wfctl.Context, data: Any) -> str:
    """The step's result is refused by the database (numeric overflow) at checkpoint time."""
    ctx.step("huge", effect, str(ctx.workflow_id), "huge", 10**140000)
    return "done"


@wfctl.workflow("c-gates", max_retries=2, retry_base=0.02, retry_cap=0.05)
def gates(ctx: wfctl.Context, data: Any) -> int:
    wid = str(ctx.workflow_id)
    a = ctx.step("g1", gated, wid, "g1", 1)
    b = ctx.step("g2", gated, wid, "g2", 2)
    c = ctx.step("g3", gated, wid, "g3", 3)
    return a + b + c


@wfctl.workflow("c-sleeper")
def sleeper(ctx: wfctl.Context, data: Any) -> str:
    wid = str(ctx.workflow_id)
    ctx.step("before", effect, wid, "before", 1)
    ctx.sleep(data.get("sleep", "1h"))
    ctx.step("after", effect, wid, "after", 2)
    return "woke"
