"""The tries of one step (``@wfctl.step(retries=...)``): try, and after a failure that may be
retried, back off and try again, until a try succeeds or none is left.

Where a backoff is spent is the journal's business (``Journal.retry_later``): up to
``SHORT_BACKOFF`` it waits where the step runs (the worker's thread, watching its stop and the
lease every ``WAIT_SLICE``); a longer one parks the run with a durable record of the tries made
(a ``retrying`` step row), from which the next execution in the same attempt goes on counting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wfctl.journal import HandledFailure, Retrying
from wfctl.steps import StepOptions
from wfctl.worker.retry import backoff

#: Seconds: a backoff up to this long waits in the worker's thread; a longer one parks the run
#: (its slot is freed, and its row is due again at the next try). Two seconds: shorter than a
#: park and a claim are worth, and short enough that a worker's stop never waits on it.
SHORT_BACKOFF = 2.0
#: Seconds between two looks at the worker's stop and the lease during a short backoff.
WAIT_SLICE = 0.2


@dataclass(frozen=True)
class Tried:
    """How a step's tries ended: ``result`` of the last try, or ``error`` (no try left, or one
    not to retry), after ``tries`` tries in this attempt (those of a parked record included)."""

    result: Any
    error: Exception | None
    tries: int


def next_try(name: str, tries: int) -> str:
    """What a run parked for its step's next try waits for (``Parked.waiting_for``)."""
    return f"step {name!r}'s try {tries + 1}"


def failure_of(error: BaseException) -> HandledFailure:
    """What is stored of a try's error: its type's name and its message."""
    return HandledFailure(type(error).__name__, str(error))


def run_tries(
    once: Callable[[int], Any],
    options: StepOptions,
    *,
    attempt: int,
    before: Retrying | None,
    retryable: Callable[[Exception], bool],
    retry_later: Callable[[Retrying, float], None],
) -> Tried:
    """Call ``once(try_number)`` until it returns, or raises an error that is not ``retryable``,
    or the last of ``1 + options.retries`` tries has failed. ``before``: the record of the tries
    this ``attempt`` made before the run parked (``retry_later`` parks it again, or waits).
    Exceptions that are not ``Exception`` (the journal's control flow) go through at once."""
    made = before.tries if before is not None and before.attempt == attempt else 0
    while True:
        made += 1
        try:
            return Tried(once(made), None, made)
        except Exception as error:
            if not retryable(error) or made > options.retries:
                return Tried(None, error, made)
            delay = backoff(made, options.retry_base, options.retry_cap)
            retry_later(Retrying(made, failure_of(error), attempt), delay)
