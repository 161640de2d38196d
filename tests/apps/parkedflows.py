"""One workflow type, 'parcel', in the versions of its code that tests/process/test_patching_parked.py
deploys under runs parked in a wait. $WFCTL_TEST_CODE names the version a worker runs:

- ``old``: step ``a``, wait for the message ``go``, step ``b``.
- ``patched``: ``if ctx.patched("x"): step c`` at the wait, the wait, then
  ``if ctx.patched("after"): step d`` after it, then ``b``.
- ``topic``: the wait is for ``went`` instead.
- ``step``: a plain step ``c`` where the wait was, then the wait.
- ``sleep``: a durable sleep where the wait was.
- ``children``: a wait for a child where the wait for the message was.

'kid' (the same in every version) waits for the message ``release``; 'brood' starts one and
waits for it: in ``old``, ``a``, the child, the wait; in ``patched``, ``if ctx.patched("x"):
step c`` at the wait; in ``recv``, a wait for the message ``go`` where the wait for the child
was.
"""

from __future__ import annotations

import os
from typing import Any

from testflows import effect

import wfctl

CODE = os.environ.get("WFCTL_TEST_CODE", "old")


@wfctl.workflow("parcel", max_retries=0)
def parcel(ctx: wfctl.Context, data: Any) -> list[str]:
    wid = str(ctx.workflow_id)
    path = [ctx.step("a", effect, wid, "a", "a")]
    if CODE == "patched":
        if ctx.patched("x"):
            path.append(ctx.step("c", effect, wid, "c", "c"))
        ctx.recv("go")
        if ctx.patched("after"):
            path.append(ctx.step("d", effect, wid, "d", "d"))
    elif CODE == "topic":
        ctx.recv("went")
    elif CODE == "step":
        path.append(ctx.step("c", effect, wid, "c", "c"))
        ctx.recv("go")
    elif CODE == "sleep":
        ctx.sleep(0.01)
    elif CODE == "children":
        ctx.wait(ctx.start_child("kid"))
    else:
        ctx.recv("go")
    path.append(ctx.step("b", effect, wid, "b", "b"))
    return path


@wfctl.workflow("kid", max_retries=0)
def kid(ctx: wfctl.Context, data: Any) -> str:
    ctx.recv("release")
    return "grown"


@wfctl.workflow("brood", max_retries=0)
def brood(ctx: wfctl.Context, data: Any) -> list[str]:
    wid = str(ctx.workflow_id)
    path = [ctx.step("a", effect, wid, "a", "a")]
    child = ctx.start_child("kid")
    if CODE == "patched":
        if ctx.patched("x"):
            path.append(ctx.step("c", effect, wid, "c", "c"))
        path.append(ctx.wait(child))
    elif CODE == "recv":
        ctx.recv("go")
    else:
        path.append(ctx.wait(child))
    path.append(ctx.step("b", effect, wid, "b", "b"))
    return path
