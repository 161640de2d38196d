"""The coordination steps and the waits they park in, described once each.

A coordination step (``ctx.recv``, ``ctx.wait``, ``ctx.start_child(ren)``, ``ctx.set_event``) is
one SQL function call that reads before it writes and may park the run (docs/explanation/
coordination.md). What is said about each here is read by ``Context`` (its step names), the
worker (wfctl/worker/calls.py runs its SQL block, wfctl/worker/execution.py knows whether it
may park and what it waits for), ``MemoryJournal`` (wfctl/testing.py), ``waits.py`` and the
renderers of ``show``, ``list``, the metrics and the worker's ``parked`` log line.

A parked run is 'pending' with ``wait_kind`` set: one of the kinds of ``WAITS``, each saying
which wait columns of ``workflows`` it fills and how ``show``, ``list`` and the log describe it.
The wait columns live as long as the wait does, not as the parking: a claim (the run woken, or
due at its timeout) and the failure of a parked run by its deadline clear ``wait_kind`` only,
so that the replay meets the same wait at ``wait_step`` with the deadline it parked with
(``wfctl_wait_deadline``), and a ``retry`` keeps which wait the run was in (``worker.claim``'s
``parked_step``); the wait ends, all its columns cleared, when its step is checkpointed
(``wfctl_step_done``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class WaitKind(StrEnum):
    """What ``workflows.wait_kind`` holds (its CHECK constraint, migration 0006)."""

    SLEEP = "sleep"
    MESSAGE = "message"
    CHILDREN = "children"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class Wait:
    """One kind of wait.

    ``details``: the keys ``waiting_for`` (wfctl/waits.py) fills for it from the report's
    ``wait_<key>`` columns (the others are None). ``shown``: what ``show`` and ``list`` say it
    waits for, from ``waiting_for``. ``logged``: what ``Parked.waiting_for`` and the worker's
    ``parked`` log line say, from the parked step's own values (a topic, a count of children).
    ``woken_by_write``: a write wakes it (a message, the last child ending); otherwise only
    its time does (a sleep)."""

    kind: WaitKind
    parked_by: str
    details: tuple[str, ...]
    shown: Callable[[Mapping[str, Any]], str]
    logged: Callable[[Mapping[str, Any]], str]
    woken_by_write: bool


WAITS: Mapping[WaitKind, Wait] = {
    w.kind: w
    for w in (
        Wait(
            WaitKind.SLEEP,
            parked_by="ctx.sleep",
            details=(),
            shown=lambda found: "a sleep",
            logged=lambda found: "sleep",
            woken_by_write=False,
        ),
        Wait(
            WaitKind.MESSAGE,
            parked_by="ctx.recv",
            details=("topic",),
            shown=lambda found: f"a message on {found['topic']!r}",
            logged=lambda found: f"a message on {found['topic']!r}",
            woken_by_write=True,
        ),
        Wait(
            WaitKind.CHILDREN,
            parked_by="ctx.wait",
            details=("remaining", "total"),
            shown=lambda found: f"{found['remaining']} of {_plural(found['total'] or 0, 'child workflow')}",
            logged=lambda found: f"{found['count']} child workflow(s)",
            woken_by_write=True,
        ),
    )
}

#: The wait kinds, in the order metrics and docs list them.
WAIT_KINDS: tuple[WaitKind, ...] = tuple(WAITS)
#: The kinds a write wakes (worker.burst_outlook counts them as waiting, not as due later).
WOKEN_BY_WRITE: tuple[str, ...] = tuple(str(w.kind) for w in WAITS.values() if w.woken_by_write)


class Op(StrEnum):
    """The coordination steps there are."""

    RECV = "recv"
    JOIN = "join"
    START_CHILDREN = "start_children"
    SET_EVENT = "set_event"


#: The step name of ctx.wait (a join on children).
WAIT_STEP = "wait"


def recv_step_name(topic: str) -> str:
    """The step name of ``ctx.recv(topic)``."""
    return f"recv:{topic}"


@dataclass(frozen=True)
class Operation:
    """One coordination step.

    ``block``: its SQL (a named block of sql/queries/worker.sql, ``SELECT state, output FROM
    wfctl_..._step(...)``). ``parks``: the kind of wait it may park in (None: it never parks).
    ``waits_on``: the values ``WAITS[parks].logged`` describes, from the step's parameters.
    ``uuids``: parameters that are lists of workflow ids (sent as uuid[]). ``received``: what
    its output holds, for an error that names it."""

    op: Op
    api: str
    block: str
    parks: WaitKind | None = None
    waits_on: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    uuids: tuple[str, ...] = ()
    received: Callable[[int, str, Mapping[str, Any]], str] | None = None

    def parked_text(self, params: Mapping[str, Any]) -> str:
        """What a run parked in this step waits for (``Parked.waiting_for``, the log line)."""
        if self.parks is None or self.waits_on is None:
            raise ValueError(f"coordination step {self.op!s} does not park")
        return WAITS[self.parks].logged(self.waits_on(params))

    def what_came(self, number: int, name: str, params: Mapping[str, Any]) -> str:
        """What this step's output holds (a message, a child's output, the step's output)."""
        if self.received is not None:
            return self.received(number, name, params)
        return f"the output of step {number} ({name!r})"


OPERATIONS: Mapping[Op, Operation] = {
    o.op: o
    for o in (
        Operation(
            Op.RECV,
            api="ctx.recv",
            block="worker.recv",
            parks=WaitKind.MESSAGE,
            waits_on=lambda params: {"topic": params["topic"]},
            received=lambda number, name, params: f"the message received on {params['topic']!r}",
        ),
        Operation(
            Op.JOIN,
            api="ctx.wait",
            block="worker.join",
            parks=WaitKind.CHILDREN,
            waits_on=lambda params: {"count": len(params["ids"])},
            uuids=("ids",),
            received=lambda number, name, params: "the output of a child workflow",
        ),
        Operation(Op.START_CHILDREN, api="ctx.start_child(ren)", block="worker.start_children"),
        Operation(Op.SET_EVENT, api="ctx.set_event", block="worker.set_event"),
    )
}


def operation(op: Op | str) -> Operation:
    """The description of ``op``; ValueError for a step that does not exist."""
    try:
        return OPERATIONS[Op(op)]
    except ValueError:
        raise ValueError(f"unknown coordination step {op!r}") from None
