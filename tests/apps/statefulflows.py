"""The workflows tests/process/test_stateful.py (and tests/process/test_stateful_regressions.py) drive.

``sf-flow`` runs the items its input lists, in order: ``{"steps": [[kind, arg], ...]}``. Each
item takes one engine step number, except ``children`` (one per child, then one for the wait).
Kinds:

- ``ok``: returns at once;
- ``raise``: raises ``RuntimeError`` while ``ctx.attempt <= arg`` (an ordinary failed attempt);
- ``exit``: calls ``sys.exit(3)`` while ``ctx.attempt <= arg`` (a ``BaseException`` from
  workflow code, which ``ctx.step`` does not catch);
- ``base``: raises ``Abort``, a ``BaseException`` of its own, while ``ctx.attempt <= arg``;
- ``fatal``: raises ``wfctl.PermanentError``: the run fails at once, without retries;
- ``saga``: raises ``RuntimeError`` every time; the workflow catches the ``wfctl.StepError`` and
  runs an ``undo`` step: two step numbers (the handled failure, then the undo), and the item's
  output is the undo's;
- ``flaky``: a step with tries of its own (``@wfctl.step(retries=2)``, a short backoff waited in
  place): a try fails while the step's tries so far, over every attempt and worker, number at
  most ``arg`` (1: the second try succeeds; 4: the attempt uses its three tries and fails, the
  next attempt's second try succeeds);
- ``parked``: ``@wfctl.step(retries=1)`` with a backoff over 2s: its first try ever fails and the
  run parks until the next one (the count is stored with the run);
- ``slowtry``: ``@wfctl.step(retries=1, timeout="300ms")``: its first try ever takes 1.2s, so
  the worker stops waiting for it and counts a failed try (the call runs on, its result thrown
  away); the second try returns at once;
- ``gate``: blocks until the file ``$WFCTL_SF_GATES/<workflow id>`` (or ``$WFCTL_SF_GATES/ALL``)
  exists, so the test can hold one specific run inside a step and release it; with an ``arg``
  k > 0, the file ``<workflow id>-k`` opens this gate alone (the others of the run stay shut);
- ``sleep``: ``ctx.sleep(arg)``, a durable sleep of ``arg`` (a duration such as ``"300ms"``);
- ``long``: a step whose name is longer than the 200 characters ``workflow_steps.step_name``
  holds: the database would refuse its checkpoint;
- ``recv``: ``ctx.recv(topic, timeout=timeout)`` with ``arg = [topic, timeout or null]``; its
  item's output is the payload received (``None`` when the timeout passed);
- ``event``: ``ctx.set_event("progress", n)``, n counting the run's ``event`` items from 1
  (the item's output is n);
- ``children``: ``arg = [[spec, ...], catch, together]``: ``ctx.start_child("sf-flow",
  {"steps": spec})`` for each spec (1-3), one step each, or with ``together`` one
  ``ctx.start_children`` step for all of them; then ``ctx.wait`` for all of them (one step); the
  item's output is the children's outputs, in order. A child that failed or was cancelled
  raises ``wfctl.ChildFailed``: with ``catch`` the item's output is then ``{"caught": child id,
  "status": its status}``, without it the run fails (ChildFailed is permanent).

Every step function first appends one line

    <workflow id> <step number> <kind> <attempt> <epoch> <nonce> <unix time> <pid>

to ``$WFCTL_SF_LOG`` (one ``write(2)`` on an ``O_APPEND`` descriptor: whole lines only, even
from many threads and processes, even under SIGKILL), then does what its kind says and returns
the nonce (a try of ``flaky``, ``parked`` and ``slowtry`` also appends one byte to
``$WFCTL_SF_LOG.tries-<workflow id>-<step number>``, whose size is then the step's tries so
far), which becomes the step's checkpoint: a stored output names the very execution that
produced it (the time and the worker's process id let the test judge the step against the
run's deadline and the worker's pauses). The workflow returns ``{"outputs": [...]}``, one
output per item (``None`` for a sleep), as the context handed them back.

The lease epoch is not part of the workflow API; it is read from the worker's execution object
behind the context (``ctx._journal.claimed.epoch``), a private attribute: when the engine
changes it, the line carries ``?`` and the stateful test says that this helper needs updating.

A worker started with ``$WFCTL_SF_PATCHED`` set runs the code of a deploy that put a patch in
front of each run's first durable wait (its first ``recv`` or ``sleep`` item)::

    if ctx.patched("sf-patch"):
        ctx.step(...)  # a ``patch`` effect, logged like the others; its output is not returned

A run that reaches that point on the patched code takes the patch (its marker is one step, the
effect the next, and its items after it move two steps on); a run that passed that point, or
parked in the wait there, on the old code keeps to the old path.

``sf-capped`` runs the same items with the same retry policy, under a concurrency limit of
``CAPPED_CONCURRENCY`` declared in code: the stateful test overrides it at run time
with ``wfctl limit``, and ``--clear`` brings it back. (Children are always ``sf-flow``.)
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

from appendlog import append_line

import wfctl

POLICY_MAX_RETRIES = 2  # the types' policy, for a submit that leaves max_retries unset
CAPPED_CONCURRENCY = 2  # sf-capped's limit in code


class Abort(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


def epoch_of(ctx: wfctl.Context) -> str:
    claimed = getattr(getattr(ctx, "_journal", None), "claimed", None)
    epoch = getattr(claimed, "epoch", None)
    return "?" if epoch is None else str(int(epoch))


def gate_open(wid: str, number: int = 0) -> bool:
    gates = os.environ.get("WFCTL_SF_GATES")
    if not gates:
        return True
    names = ["ALL", wid] + ([f"{wid}-{number}"] if number else [])
    return any(os.path.exists(os.path.join(gates, name)) for name in names)


def run_step(wid: str, number: int, kind: str, attempt: int, epoch: str, arg: Any) -> str:
    nonce = uuid.uuid4().hex[:12]
    append_line(
        "WFCTL_SF_LOG", f"{wid} {number} {kind} {attempt} {epoch} {nonce} {time.time():.6f} {os.getpid()}"
    )
    if kind == "raise" and attempt <= arg:
        raise RuntimeError(f"step {number} fails on attempt {attempt}")
    if kind == "exit" and attempt <= arg:
        sys.exit(3)
    if kind == "base" and attempt <= arg:
        raise Abort(f"step {number} aborts on attempt {attempt}")
    if kind == "fatal":
        raise wfctl.PermanentError(f"step {number} fails for good")
    if kind == "saga":
        raise RuntimeError(f"step {number} fails, to be undone")
    if kind == "gate":
        while not gate_open(wid, arg):
            time.sleep(0.01)
    if kind in STEP_TRIES:
        made = count_try(wid, number)
        if kind == "flaky" and made <= arg:
            raise RuntimeError(f"try {made} of step {number} fails")
        if kind == "parked" and made == 1:
            raise RuntimeError(f"try 1 of step {number} fails; the next is a while off")
        if kind == "slowtry" and made == 1:
            time.sleep(SLOW_TRY)
    return nonce


def count_try(wid: str, number: int) -> int:
    """Count one more try of step ``number`` of run ``wid``: the tries so far, this one
    included (one byte per try, appended: whole, from any thread or process)."""
    path = f"{os.environ['WFCTL_SF_LOG']}.tries-{wid}-{number}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


SLOW_TRY = 1.2  # seconds the first try of a ``slowtry`` step takes, past its timeout
# the tries a step of each kind gets in one attempt (retries + 1); every other kind gets one
STEP_TRIES = {"flaky": 3, "parked": 2, "slowtry": 2}


@wfctl.step(retries=STEP_TRIES["flaky"] - 1, retry_base="20ms", retry_cap="50ms")
def flaky_step(wid: str, number: int, kind: str, attempt: int, epoch: str, arg: Any) -> str:
    return run_step(wid, number, kind, attempt, epoch, arg)


@wfctl.step(retries=STEP_TRIES["parked"] - 1, retry_base="4400ms", retry_cap="4400ms")
def parked_step(wid: str, number: int, kind: str, attempt: int, epoch: str, arg: Any) -> str:
    return run_step(wid, number, kind, attempt, epoch, arg)


@wfctl.step(retries=STEP_TRIES["slowtry"] - 1, retry_base="20ms", timeout="300ms")
def slow_step(wid: str, number: int, kind: str, attempt: int, epoch: str, arg: Any) -> str:
    return run_step(wid, number, kind, attempt, epoch, arg)


STEP_FUNCTIONS = {"flaky": flaky_step, "parked": parked_step, "slowtry": slow_step}


EVENT_KEY = "progress"
PATCH_ENV = "WFCTL_SF_PATCHED"
PATCH_NAME = "sf-patch"
WAIT_KINDS = ("recv", "sleep")  # the items a run parks in: the patch goes in front of the first


@wfctl.workflow("sf-flow", max_retries=POLICY_MAX_RETRIES, retry_base=0.05, retry_cap=0.2)
def flow(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    return run_items(ctx, data)


@wfctl.workflow(
    "sf-capped",
    max_retries=POLICY_MAX_RETRIES,
    retry_base=0.05,
    retry_cap=0.2,
    concurrency=CAPPED_CONCURRENCY,
)
def capped(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    return run_items(ctx, data)


def run_items(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    epoch = epoch_of(ctx)
    outputs: list[Any] = []
    number = 0  # the engine's step number of the item
    events = 0
    patch = bool(os.environ.get(PATCH_ENV))
    for kind, arg in data["steps"]:
        if patch and kind in WAIT_KINDS:
            patch = False
            if ctx.patched(PATCH_NAME):
                number += 2  # the marker, then the patch's effect
                ctx.step(f"s{number}-patch", run_step, wid, number, "patch", ctx.attempt, epoch, 0)
        number += 1
        if kind == "sleep":
            ctx.sleep(arg)
            outputs.append(None)
        elif kind == "recv":
            topic, timeout = arg
            outputs.append(ctx.recv(topic, timeout=timeout))
        elif kind == "event":
            events += 1
            ctx.set_event(EVENT_KEY, events)
            outputs.append(events)
        elif kind == "saga":
            try:
                ctx.step(f"s{number}-saga", run_step, wid, number, "saga", ctx.attempt, epoch, arg)
            except wfctl.StepError:
                number += 1
                undo = ctx.step(f"s{number}-undo", run_step, wid, number, "undo", ctx.attempt, epoch, 0)
                outputs.append(undo)
        elif kind == "children":
            specs, catch, together = arg
            if together:
                ids = ctx.start_children("sf-flow", [{"steps": spec} for spec in specs])
                number += 1  # one start_children step, then the wait
            else:
                ids = [ctx.start_child("sf-flow", {"steps": spec}) for spec in specs]
                number += len(specs)  # the start_child steps, then the wait
            try:
                outputs.append(ctx.wait(ids))
            except wfctl.ChildFailed as exc:
                if not catch:
                    raise
                outputs.append({"caught": exc.workflow_id, "status": exc.status})
        else:
            name = f"s{number}-{kind}" + ("-" + "x" * 200 if kind == "long" else "")
            fn = STEP_FUNCTIONS.get(kind, run_step)
            outputs.append(ctx.step(name, fn, wid, number, kind, ctx.attempt, epoch, arg))
    return {"outputs": outputs}
