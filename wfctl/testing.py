"""What tests use to run a workflow function without a database: ``MemoryJournal``, a
``Journal`` (wfctl/journal.py) kept in memory, which plays the coordination steps of
wfctl/operations.py from dictionaries a test fills and reads.

``wfctl.context.MemoryJournal`` names the same class.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from wfctl.caller import Caller
from wfctl.journal import HandledFailure, Parked, RecordedStep, Retrying
from wfctl.operations import OPERATIONS, WAITS, Op, WaitKind, operation
from wfctl.steps import StepOptions
from wfctl.tries import SHORT_BACKOFF, next_try
from wfctl.words import FINISHED

__all__ = ["MemoryJournal"]


class MemoryJournal:
    """A journal in memory, for testing workflow functions and replay rules without a database.

    Step options (``@wfctl.step``) hold as under a worker: a try past its ``timeout`` fails
    with ``StepTimeout`` (a synchronous function runs on in its own thread, counted in
    ``caller.abandoned``); a backoff of up to 2 s is not waited but appended to ``backoffs``;
    a longer one stores a ``retrying`` step (``steps[n].retrying``: the tries made, the last
    error, the next try's time) and raises ``Parked`` until then, as a sleep does. Call the
    workflow again with the same attempt to go on counting; a new attempt starts afresh."""

    def __init__(self, steps: dict[int, RecordedStep] | None = None) -> None:
        self.steps: dict[int, RecordedStep] = dict(steps or {})
        self.parked_until: datetime | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.messages: dict[str, list[Any]] = {}  # topic -> payloads not yet received
        self.events: dict[str, Any] = {}
        # child id -> {"type", "input", "status", "output", "error"}; set "status" (and
        # "output" or "error") to finish a child, then run the workflow again
        self.children: dict[str, dict[str, Any]] = {}
        self.connection: Any = None  # what ctx.transaction's fn receives (a test may set one)
        # the wait the run last parked in: (step number, step name), as the worker records it
        self.waiting: tuple[int, str] | None = None
        # a step whose StepError went to the workflow: kept in ``steps`` (history) once the
        # workflow goes past it, as the worker does; an uncaught StepError leaves it here, and
        # the step runs again when the workflow function is called again
        self.failed_step: RecordedStep | None = None
        self.caller = Caller()  # runs each try of a step function (timeouts, async functions)
        self.backoffs: list[float] = []  # the short backoffs between tries, in seconds (not waited)

    def recorded(self, number: int) -> RecordedStep | None:
        return self.steps.get(number)

    def parked_wait(self, number: int) -> str | None:
        if self.waiting is None or self.waiting[0] != number or number in self.steps:
            return None
        return self.waiting[1]

    def boundary(self, number: int, name: str) -> None:
        self._keep_failed()

    def _keep_failed(self) -> None:
        failed, self.failed_step = self.failed_step, None
        if failed is not None:
            self.steps[failed.number] = failed

    def record(self, number: int, name: str, output_json: str, started_at: datetime, tries: int = 1) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json), tries=tries)

    def fail_step(
        self, number: int, name: str, failure: HandledFailure, started_at: datetime, tries: int = 1
    ) -> None:
        stored = self.steps.get(number)
        if stored is not None and stored.retrying is not None:
            del self.steps[number]  # the tries are over: the failure replaces their record
        self.failed_step = RecordedStep(number, name, None, failure, tries=tries)

    def call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: StepOptions,
    ) -> Any:
        return self.caller.call(name, fn, args, kwargs, options)

    def retry_later(
        self, number: int, name: str, retrying: Retrying, delay: float, started_at: datetime
    ) -> None:
        if delay <= SHORT_BACKOFF:
            self.backoffs.append(delay)
            return
        due = self.now() + timedelta(seconds=delay)
        self.steps[number] = RecordedStep(
            number, name, None, retrying=dataclasses.replace(retrying, next_at=due), tries=retrying.tries
        )
        self.parked_until = due
        raise Parked(due, next_try(name, retrying.tries))

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json))
        self.parked_until = wake_at

    def repark(self, wake_at: datetime) -> None:
        self.parked_until = wake_at

    def now(self) -> datetime:
        return self.clock()

    def transaction(self, number: int, name: str, fn: Callable[[Any], str], tries: int = 1) -> Any:
        output = json.loads(fn(self.connection))
        self.steps[number] = RecordedStep(number, name, output, tries=tries)
        return output

    def coordinate(self, op: Op, number: int, name: str, params: dict[str, Any]) -> Any:
        play = _PLAYS.get(operation(op).op)
        if play is None:
            raise ValueError(f"MemoryJournal cannot play coordination step {op!s}")
        output = play(self, number, name, params)
        self.steps[number] = RecordedStep(number, name, output)
        return output

    def _park(self, number: int, name: str, waiting_for: str) -> Parked:
        self.waiting = (number, name)
        return Parked(None, waiting_for)

    def _recv(self, number: int, name: str, params: dict[str, Any]) -> Any:
        waiting = self.messages.get(params["topic"])
        if waiting:
            return {"payload": waiting.pop(0)}
        if params["timeout"] == 0:
            return {"payload": None, "timed_out": True}
        raise self._park(number, name, OPERATIONS[Op.RECV].parked_text(params))

    def _set_event(self, number: int, name: str, params: dict[str, Any]) -> Any:
        self.events[params["key"]] = json.loads(params["value"])
        return {"key": params["key"], "value": self.events[params["key"]]}

    def _start_children(self, number: int, name: str, params: dict[str, Any]) -> Any:
        ids = []
        for text in params["inputs"]:
            child = str(UUID(int=len(self.children) + 1))
            self.children[child] = {"type": params["type"], "input": json.loads(text), "status": "pending"}
            ids.append(child)
        return ids if params["many"] else ids[0]

    def _join(self, number: int, name: str, params: dict[str, Any]) -> Any:
        found = [self.children.get(i, {"status": "missing"}) for i in params["ids"]]
        unfinished = sum(1 for c in found if c["status"] not in (*FINISHED, "missing"))
        if unfinished and params["timeout"] == 0:
            return {"timed_out": True, "unfinished": unfinished}
        if unfinished:  # says how many of them have not finished (the worker: how many it waits for)
            raise self._park(number, name, WAITS[WaitKind.CHILDREN].logged({"count": unfinished}))
        return {
            "children": [
                {"id": i, "status": c["status"], "output": c.get("output"), "error": c.get("error")}
                for i, c in zip(params["ids"], found, strict=True)
            ]
        }


Play = Callable[[MemoryJournal, int, str, dict[str, Any]], Any]

#: How MemoryJournal plays each coordination step (tests/db/test_operations.py: every one).
_PLAYS: dict[Op, Play] = {
    Op.RECV: MemoryJournal._recv,
    Op.JOIN: MemoryJournal._join,
    Op.START_CHILDREN: MemoryJournal._start_children,
    Op.SET_EVENT: MemoryJournal._set_event,
}
