"""The workflow-facing API: ``Context.step`` and ``Context.sleep`` over a small journal.

The context knows nothing of Postgres or of the worker: it asks a ``Journal`` what step N
recorded before, and tells it to record a new result (durable before the next step starts).
The worker implements the journal over Postgres; a test can implement it in memory.

Control flow that must not be caught by a workflow's ``except Exception`` (losing the lease,
parking for a sleep, being released at shutdown, a failed step) uses BaseException subclasses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from wfctl import jsonvalue
from wfctl.durations import parse_duration

T = TypeVar("T")

SLEEP_STEP = "sleep"
MAX_STEP_NAME = 200  # workflow_steps.step_name is varchar(200)


@dataclass(frozen=True)
class RecordedStep:
    number: int
    name: str
    output: Any  # decoded JSON


class Journal(Protocol):
    """What a Context needs from whoever runs it."""

    def recorded(self, number: int) -> RecordedStep | None:
        """The completed step ``number`` from an earlier attempt, if any."""

    def boundary(self) -> None:
        """Called before a new step starts; raises Released or Lost to stop the run here."""

    def record(self, number: int, name: str, output_json: str, started_at: datetime) -> None:
        """Store step ``number``'s result durably. It may return before the commit: the next
        ``boundary``, ``park`` or the run's end waits for it (and raises Lost if it failed)."""

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        """Store the sleep step and make the workflow runnable again at ``wake_at``."""

    def repark(self, wake_at: datetime) -> None:
        """A replayed sleep whose wake time is still ahead: leave again until ``wake_at``
        (the sleep step is stored already; nothing else is written)."""

    def now(self) -> datetime:
        """The current time, by the database's clock where there is one."""


class ControlFlow(BaseException):
    """Base of the exceptions that stop a workflow function from the outside."""


class Lost(ControlFlow):
    """The lease was lost: the workflow was recovered, cancelled or released elsewhere."""


class Released(ControlFlow):
    """The worker is shutting down: stop at this step boundary, another worker resumes."""


class Parked(ControlFlow):
    """The workflow sleeps until ``wake_at``; its worker slot is free meanwhile."""

    def __init__(self, wake_at: datetime) -> None:
        super().__init__(wake_at)
        self.wake_at = wake_at


class StepFailed(ControlFlow):
    """A step raised: the attempt fails. The original exception is ``__cause__``."""

    def __init__(self, number: int, name: str, error: BaseException, started_at: datetime) -> None:
        super().__init__(f"step {number} ({name!r}) failed: {type(error).__name__}: {error}")
        self.number = number
        self.name = name
        self.error = error
        self.started_at = started_at


class DeterminismError(ControlFlow):
    """The code changed under a running workflow: step N's name differs from the stored one."""


class Context:
    """Passed to every workflow function as its first argument."""

    def __init__(
        self,
        workflow_id: UUID | str,
        workflow_type: str,
        input: Any,
        attempt: int,
        journal: Journal,
    ) -> None:
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.input = input
        self.attempt = attempt
        self._journal = journal
        self._next = 0

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` as step ``name``; on replay return its stored result.

        The result must be JSON-serialisable; it is durably stored before the next step starts
        (or the workflow ends), and what this call returns is the stored JSON value (the same on
        the first run and on replay).
        """
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None:
            return stored.output  # type: ignore[no-any-return]
        self._journal.boundary()
        started = self._journal.now()
        refused = _step_name_problem(name)
        if refused is not None:  # the database would refuse its checkpoint: do not run it
            raise StepFailed(number, name[:MAX_STEP_NAME], ValueError(refused), started)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            raise StepFailed(number, name, exc, started) from exc
        try:
            encoded = jsonvalue.dumps(result)
        except jsonvalue.UnstorableJSON as exc:
            error = TypeError(
                f"step {name!r} returned a value of type {type(result).__name__} "
                f"that cannot be stored as JSON ({exc})"
            )
            raise StepFailed(number, name, error, started) from exc
        self._journal.record(number, name, encoded, started)
        return json.loads(encoded)  # type: ignore[no-any-return]

    def sleep(self, duration: str | float | timedelta) -> None:
        """Sleep durably: the wake time is checkpointed and the worker slot is freed; the
        workflow continues on any worker once the time has come."""
        if isinstance(duration, str):
            delta = parse_duration(duration, what="sleep duration")
        elif isinstance(duration, timedelta):
            delta = duration
        else:
            delta = timedelta(seconds=float(duration))
        number = self._claim_number(SLEEP_STEP)
        stored = self._journal.recorded(number)
        if stored is not None:
            wake_at = datetime.fromisoformat(stored.output["wake_at"])
            if wake_at > self._journal.now():
                # woken early (a retry of a sleeping run): leave again until the same time
                self._journal.repark(wake_at)
                raise Parked(wake_at)
            return
        self._journal.boundary()
        now = self._journal.now()
        wake_at = now + delta
        self._journal.park(number, SLEEP_STEP, json.dumps({"wake_at": wake_at.isoformat()}), wake_at)
        raise Parked(wake_at)

    def _claim_number(self, name: str) -> int:
        self._next += 1
        number = self._next
        stored = self._journal.recorded(number)
        if stored is not None and stored.name != name:
            raise DeterminismError(
                f"workflow code changed under a running workflow: step {number} was "
                f"{stored.name!r} when it was checkpointed, the code now calls {name!r}"
            )
        return number


def _step_name_problem(name: str) -> str | None:
    """Why the database cannot store ``name`` as a step name, or None."""
    if not isinstance(name, str) or not name:
        return f"a step name must be a non-empty string, not {name!r}; the step was not run"
    if len(name) > MAX_STEP_NAME:
        return (
            f"step name {name[:40]!r}... has {len(name)} characters, over the {MAX_STEP_NAME} "
            "that are stored; the step was not run"
        )
    return None


class MemoryJournal:
    """A journal in memory, for testing workflow functions and replay rules without a database."""

    def __init__(self, steps: dict[int, RecordedStep] | None = None) -> None:
        self.steps: dict[int, RecordedStep] = dict(steps or {})
        self.parked_until: datetime | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def recorded(self, number: int) -> RecordedStep | None:
        return self.steps.get(number)

    def boundary(self) -> None:
        return None

    def record(self, number: int, name: str, output_json: str, started_at: datetime) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json))

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json))
        self.parked_until = wake_at

    def repark(self, wake_at: datetime) -> None:
        self.parked_until = wake_at

    def now(self) -> datetime:
        return self.clock()
