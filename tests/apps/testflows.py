"""Workflows the tests run in real worker processes.

Every step function appends a line "<workflow id> <step>" to the file in $WFCTL_TEST_LOG,
outside the checkpoint, so a test can count real executions. A step called through ``gate``
blocks while the file $WFCTL_TEST_GATE exists, so a test can hold a worker inside a step.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import wfctl


def _record(line: str) -> None:
    path = os.environ.get("WFCTL_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def effect(wid: str, name: str, value: Any) -> Any:
    _record(f"{wid} {name}")
    return value


def gate(wid: str, name: str, value: Any) -> Any:
    _record(f"{wid} {name}")
    gate_file = os.environ.get("WFCTL_TEST_GATE")
    while gate_file and os.path.exists(gate_file):
        time.sleep(0.01)
    return value


def second_gate(wid: str, name: str, value: Any) -> Any:
    """Like ``gate``, on the file $WFCTL_TEST_GATE with ``.second`` appended."""
    _record(f"{wid} {name}")
    gate_file = os.environ.get("WFCTL_TEST_GATE")
    while gate_file and os.path.exists(gate_file + ".second"):
        time.sleep(0.01)
    return value


def boom(wid: str, name: str, message: str) -> None:
    _record(f"{wid} {name}")
    raise RuntimeError(message)


@wfctl.workflow("three")
def three(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    gated = data.get("gate")
    a = ctx.step("one", gate if gated == 1 else effect, wid, "one", 1)
    b = ctx.step("two", gate if gated == 2 else effect, wid, "two", 2)
    c = ctx.step("three", gate if gated == 3 else effect, wid, "three", 3)
    return {"sum": a + b + c}


@wfctl.workflow("held_twice")
def held_twice(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Held in step one by the gate file and in step two by the second gate file: a test can
    hold the worker in step one, then in the checkpoint between, then in step two."""
    wid = str(ctx.workflow_id)
    ctx.step("one", gate, wid, "one", 1)
    ctx.step("two", second_gate, wid, "two", 2)
    return "done"


@wfctl.workflow("flaky", max_retries=3, retry_base=0.05, retry_cap=0.2)
def flaky(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    ctx.step("prepare", effect, wid, "prepare", "ok")
    if ctx.attempt <= data.get("fail_times", 1):
        ctx.step("charge", boom, wid, "charge", f"card declined on attempt {ctx.attempt}")
    ctx.step("charge", effect, wid, "charge", ctx.attempt)
    return {"attempt": ctx.attempt}


@wfctl.workflow("doomed", max_retries=1, retry_base=0.02, retry_cap=0.05)
def doomed(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    ctx.step("only", boom, str(ctx.workflow_id), "only", "always broken")


@wfctl.workflow("sleeper")
def sleeper(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    wid = str(ctx.workflow_id)
    ctx.step("before", effect, wid, "before", 1)
    ctx.sleep(data.get("sleep", "1s"))
    ctx.step("after", effect, wid, "after", 2)
    return "woke"


@wfctl.workflow("changing", max_retries=2, retry_base=0.02)
def changing(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Variant 1 checkpoints "first" and "second", then fails so the run is retried; variant 2
    (a code change between attempts, $WFCTL_TEST_VARIANT=2) renamed step 2."""
    wid = str(ctx.workflow_id)
    ctx.step("first", effect, wid, "first", 1)
    if os.environ.get("WFCTL_TEST_VARIANT") == "2":
        ctx.step("second-v2", effect, wid, "second-v2", 2)
        return "v2"
    ctx.step("second", effect, wid, "second", 2)
    ctx.step("third", boom, wid, "third", "fail so that the run is retried")
    return "v1"


@wfctl.workflow("badoutput", max_retries=0)
def badoutput(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    ctx.step("set", effect, str(ctx.workflow_id), "set", {1, 2})


@wfctl.workflow("kills_worker", max_retries=0)
def kills_worker(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    """Its first attempt SIGKILLs the worker running it, before any step: the attempt counts."""
    _record(f"{ctx.workflow_id} start")
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"
