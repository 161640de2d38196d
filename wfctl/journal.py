"""What a ``Context`` needs from whoever runs it (a ``Journal``: the worker's ``Execution``, or
``wfctl.testing.MemoryJournal``), the steps it reads back, and the control flow that stops a
workflow function from the outside.

Control flow that must not be caught by a workflow's ``except Exception`` (losing the lease,
parking for a wait, being released at shutdown, a failed step) uses BaseException subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from wfctl.operations import WAITS, Op, WaitKind
from wfctl.steps import StepOptions

#: What ``Parked.waiting_for`` says of a sleep.
SLEEPING = WAITS[WaitKind.SLEEP].logged({})


@dataclass(frozen=True)
class HandledFailure:
    """A step that failed and whose ``StepError`` the workflow handled: what a replay raises."""

    error_type: str
    message: str


@dataclass(frozen=True)
class Retrying:
    """A step whose tries failed so far, with more to come after a backoff long enough that the
    run parked (a ``retrying`` step row): not a result. A replay in the same ``attempt`` tries
    the function again and goes on counting from ``tries``; a later attempt starts afresh."""

    tries: int  # tries made in that attempt, all failed
    failure: HandledFailure  # the last try's error
    attempt: int  # the attempt of the run that made them
    next_at: datetime | None = None  # when the next try is due (set when the run parks)


@dataclass(frozen=True)
class RecordedStep:
    number: int
    name: str
    output: Any  # decoded JSON
    failure: HandledFailure | None = None  # the step failed and the workflow went on
    retrying: Retrying | None = None  # no result yet: tries failed and the run parked for the next
    tries: int = 1  # the tries the step's function took (the last one returned or raised)


class Journal(Protocol):
    """What a Context needs from whoever runs it."""

    def recorded(self, number: int) -> RecordedStep | None:
        """The completed step ``number`` from an earlier attempt, if any."""

    def parked_wait(self, number: int) -> str | None:
        """The step name of the wait (a recv, a wait for children) that the run parked in as
        step ``number`` and has not got past, if any: no step is stored there yet, but the run
        reached that point, and a replay must meet the same wait there."""

    def boundary(self, number: int, name: str) -> None:
        """Called before every new step, wait or marker is taken (``number``, named ``name``:
        what the run is in from now on; nothing is written for a run without it): stores the
        failure a ``fail_step`` left pending, the workflow having gone past it; raises Released
        or Lost to stop the run here."""

    def record(self, number: int, name: str, output_json: str, started_at: datetime, tries: int = 1) -> None:
        """Store step ``number``'s result (its function's try ``tries`` returned it) durably. It
        may return before the commit: the next ``boundary``, ``park`` or the run's end waits for
        it (and raises Lost if it failed)."""

    def fail_step(
        self, number: int, name: str, failure: HandledFailure, started_at: datetime, tries: int = 1
    ) -> None:
        """Step ``number``'s function raised (at its last try, ``tries``), and its StepError
        goes to the workflow. Stored as the run's history (what a replay raises) once the
        workflow goes past it: its next step, wait or end; not stored when that StepError itself
        ends the attempt, so that the step runs again in the next attempt."""

    def call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: StepOptions,
    ) -> Any:
        """One try of step ``name``: ``fn(*args, **kwargs)`` within ``options.timeout``
        (wfctl/caller.py: a coroutine function runs on an event loop; past the timeout the try
        raises ``wfctl.errors.StepTimeout``)."""

    def retry_later(
        self, number: int, name: str, retrying: Retrying, delay: float, started_at: datetime
    ) -> None:
        """Try ``retrying.tries`` of step ``number`` failed; the next one is due in ``delay``
        seconds. Return when it is time for it (a backoff of up to ``tries.SHORT_BACKOFF``),
        or store ``retrying`` (with its ``next_at``) and raise Parked until then."""

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        """Store the sleep step and make the workflow runnable again at ``wake_at``."""

    def repark(self, wake_at: datetime) -> None:
        """A replayed sleep whose wake time is still ahead: leave again until ``wake_at``
        (the sleep step is stored already; nothing else is written)."""

    def now(self) -> datetime:
        """The current time, by the database's clock where there is one."""

    def transaction(self, number: int, name: str, fn: Callable[[Any], str], tries: int = 1) -> Any:
        """Run ``fn(conn)`` (it returns the step's output as JSON text) and checkpoint step
        ``number`` (its try ``tries``) in one database transaction; return the stored output
        (decoded JSON)."""

    def coordinate(self, op: Op, number: int, name: str, params: dict[str, Any]) -> Any:
        """Run coordination step ``number`` (``op``: one of wfctl.operations.OPERATIONS) and
        return the output it checkpointed (decoded JSON); raise Parked when the workflow must
        wait (a message, children). The output and the step's effect commit together."""


class ControlFlow(BaseException):
    """Base of the exceptions that stop a workflow function from the outside."""


class Lost(ControlFlow):
    """The lease was lost: the workflow was recovered, cancelled or released elsewhere."""


class Released(ControlFlow):
    """The worker is shutting down: stop at this step boundary, another worker resumes."""


class Parked(ControlFlow):
    """The workflow waits (until ``wake_at``, or ``None``: until woken); its worker slot is free
    meanwhile. ``waiting_for`` says for what: a sleep, a message, children."""

    def __init__(self, wake_at: datetime | None, waiting_for: str = SLEEPING) -> None:
        super().__init__(wake_at)
        self.wake_at = wake_at
        self.waiting_for = waiting_for


class StepFailed(ControlFlow):
    """A step the database cannot store (a name it refuses, a result that is no JSON): the
    attempt fails, and the workflow cannot catch it (a step whose function raised is a
    ``wfctl.StepError`` instead). The original exception is ``__cause__``."""

    def __init__(self, number: int, name: str, error: BaseException, started_at: datetime) -> None:
        super().__init__(f"step {number} ({name!r}) failed: {type(error).__name__}: {error}")
        self.number = number
        self.name = name
        self.error = error
        self.started_at = started_at


class DeterminismError(ControlFlow):
    """The code changed under a running workflow: step N's name differs from the stored one,
    or from the wait the run parked in at step N."""
