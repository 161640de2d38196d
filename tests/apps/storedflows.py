"""Workflows for tests/db/test_stored_values.py and tests/process/test_worker_log_escaping.py: runs whose
stored values (input, a step's output, a message, a child's output) a test replaces with SQL by
values Python cannot read, or fills with text that must not reach the worker's log raw. The
types that read values allow retries, so a test can see that such a run fails without them."""

from __future__ import annotations

from typing import Any

from testflows import effect

import wfctl

RETRIES = {"max_retries": 3, "retry_base": 0.02, "retry_cap": 0.05}


@wfctl.workflow("echo", **RETRIES)
def echo(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.step("copy", effect, str(ctx.workflow_id), "copy", data)


@wfctl.workflow("listener", **RETRIES)
def listener(ctx: wfctl.Context, data: Any) -> Any:
    """A step, then park until a message on 'answer' comes: its payload is the output."""
    ctx.step("first", effect, str(ctx.workflow_id), "first", 1)
    return ctx.recv("answer")


@wfctl.workflow("parent", **RETRIES)
def parent(ctx: wfctl.Context, data: Any) -> Any:
    """Start one child of type echo and wait for its output."""
    return ctx.wait(ctx.start_child("echo", {"from": "parent"}))


@wfctl.workflow("raiser", max_retries=0)
def raiser(ctx: wfctl.Context, data: Any) -> None:
    """Fail with the input's message as the error."""
    raise RuntimeError(data["message"])
