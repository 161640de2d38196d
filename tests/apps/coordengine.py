"""Workflows for the coordination engine tests (tests/process/test_coordination.py): messages, events,
child workflows, deadlines. Steps log real executions through testflows.effect / gate."""

from __future__ import annotations

import time
from typing import Any

from testflows import effect, gate

import wfctl


@wfctl.workflow("inbox", max_retries=5)
def inbox(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    """Receive ``data['count']`` messages on 'go'; between them a gated step (a test may hold
    the worker there and kill it)."""
    wid = str(ctx.workflow_id)
    got = []
    for index in range(data.get("count", 1)):
        got.append(ctx.recv("go", timeout=data.get("timeout")))
        ctx.step(f"after-{index}", gate, wid, f"after-{index}", index)
    return {"got": got}


@wfctl.workflow("progress")
def progress(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    ctx.set_event("stage", "started")
    ctx.recv("continue")
    ctx.set_event("stage", "finished")
    return "done"


@wfctl.workflow("leaf", max_retries=0)
def leaf(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    if data.get("fail"):
        raise wfctl.PermanentError(f"leaf {data['n']} refused")
    if data.get("wait"):
        ctx.recv("release")
    return ctx.step("double", effect, str(ctx.workflow_id), "double", data["n"] * 2)


@wfctl.workflow("fanout", max_retries=2)
def fanout(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    wid = str(ctx.workflow_id)
    ids = []
    for n in range(data["n"]):
        ids.append(
            ctx.start_child(
                "leaf", {"n": n, "fail": n in data.get("fail", []), "wait": data.get("wait", False)}
            )
        )
        if n == 0:
            ctx.step("after-first-child", gate, wid, "after-first-child", 0)
    try:
        outputs = ctx.wait(ids, timeout=data.get("timeout"))
    except wfctl.ChildFailed as exc:
        return {"failed": exc.workflow_id, "status": exc.status, "error": exc.error}
    return {"sum": sum(outputs), "ids": ids}


@wfctl.workflow("nested", max_retries=0)
def nested(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    return ctx.run_child(
        "leaf", {"n": data["n"], "wait": data.get("wait", False)}, timeout=data.get("child_timeout")
    )


@wfctl.workflow("slowsteps", max_retries=3)
def slowsteps(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    for index in range(data["steps"]):
        ctx.step(f"s{index}", _nap, data["nap"])
    return data["steps"]


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@wfctl.workflow("held", max_retries=3)
def held(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    ctx.step("hold", gate, str(ctx.workflow_id), "hold", 1)
    return "released"


@wfctl.workflow("timed_hold", max_retries=3, timeout="2s")
def timed_hold(ctx: wfctl.Context, data: Any) -> str:
    """The type's deadline is 2 s; its one step holds its worker while the gate file exists
    (a step that takes too long, or never returns)."""
    ctx.step("hold", gate, str(ctx.workflow_id), "hold", 1)
    return "released"


@wfctl.workflow("bulk", max_retries=0)
def bulk(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    ids = ctx.start_children(
        "leaf",
        [{"n": n} for n in range(data["n"])],
        keys=[f"{ctx.workflow_id}-{n}" for n in range(data["n"])],
    )
    return sum(ctx.wait(ids))


@wfctl.workflow("stranger_wait", max_retries=3)
def stranger_wait(ctx: wfctl.Context, data: dict[str, Any]) -> Any:
    return ctx.wait(data["id"])


@wfctl.workflow("short_child", timeout="1s")
def short_child(ctx: wfctl.Context, data: Any) -> None:
    ctx.recv("never")


@wfctl.workflow("short_child_parent", max_retries=0)
def short_child_parent(ctx: wfctl.Context, data: Any) -> Any:
    try:
        return ctx.run_child("short_child")
    except wfctl.ChildFailed as exc:
        return {"status": exc.status, "error": exc.error}


@wfctl.workflow("orphaner", max_retries=0)
def orphaner(ctx: wfctl.Context, data: Any) -> str:
    ctx.start_child("leaf", {"n": 1})
    return "left a child running"
