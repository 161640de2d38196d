"""The workflows of the coordination benchmark (bench/coordination.py).

Run by ``wfctl worker --app bench.coord_app`` from the repository root. A workflow that is
timed records ``time.time()`` in a step as soon as it runs again (its output ``{"at": ...}``);
the benchmark compares that with the time it took just before committing the send or submit,
on the same machine.

- ``coord_start``: the baseline, one step that records the time (same shape as ``coord_recv``
  without the wait);
- ``coord_recv``: parks in ``ctx.recv("go")``, then the same step;
- ``coord_parent``: starts one ``coord_child`` (a ``coord_recv`` under another name) and parks
  in ``ctx.wait`` on it, then the same step;
- ``coord_fan``: starts ``n`` ``coord_leaf`` children (``ctx.start_child`` in a loop, or one
  ``ctx.start_children`` with ``batch``) and joins them with one ``ctx.wait``;
- ``coord_leaf``: one step, a no-op, or a sleep of ``ms`` milliseconds (standing for work).
"""

from __future__ import annotations

import time
from typing import Any

import wfctl

TOPIC = "go"


def _now() -> float:
    return time.time()


def _work(i: int, ms: float) -> int:
    if ms > 0:
        time.sleep(ms / 1000)
    return i


@wfctl.workflow("coord_start")
def coord_start(ctx: wfctl.Context, data: Any) -> dict[str, float]:
    return {"at": ctx.step("run", _now)}


def _recv_then_run(ctx: wfctl.Context) -> dict[str, float]:
    ctx.recv(TOPIC)
    return {"at": ctx.step("run", _now)}


@wfctl.workflow("coord_recv")
def coord_recv(ctx: wfctl.Context, data: Any) -> dict[str, float]:
    return _recv_then_run(ctx)


@wfctl.workflow("coord_child")
def coord_child(ctx: wfctl.Context, data: Any) -> dict[str, float]:
    return _recv_then_run(ctx)


@wfctl.workflow("coord_parent")
def coord_parent(ctx: wfctl.Context, data: Any) -> dict[str, float]:
    child = ctx.start_child("coord_child")
    ctx.wait(child)
    return {"at": ctx.step("run", _now)}


@wfctl.workflow("coord_fan")
def coord_fan(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, int]:
    inputs = [{"i": i, "ms": data.get("ms", 0)} for i in range(data["n"])]
    if data.get("batch"):
        ids = ctx.start_children("coord_leaf", inputs)
    else:
        ids = [ctx.start_child("coord_leaf", i) for i in inputs]
    outputs = ctx.wait(ids)
    return {"children": len(outputs)}


@wfctl.workflow("coord_leaf")
def coord_leaf(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, int]:
    return {"i": ctx.step("work", _work, data.get("i", 0), data.get("ms", 0))}


#: every type above, for the benchmark's bookkeeping
TYPES = ("coord_start", "coord_recv", "coord_child", "coord_parent", "coord_fan", "coord_leaf")
