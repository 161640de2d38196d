"""The tries of one step (``@wfctl.step(retries=...)``): try, and after a failure that may be
retried, back off and try again, until a try succeeds or none is left. The loop is the
Context's (``Context.step``, ``Context.transaction``: a try costs nothing more than the call
when it succeeds); what it counts from and how long it waits between tries are here.

Where a backoff is spent is the journal's business (``Journal.retry_later``): up to
``SHORT_BACKOFF`` it waits where the step runs (the worker's thread, watching its stop and the
lease every ``WAIT_SLICE``); a longer one parks the run with a durable record of the tries made
(a ``retrying`` step row), from which the next execution in the same attempt goes on counting.
"""

from __future__ import annotations

from wfctl.journal import HandledFailure, RecordedStep
from wfctl.steps import StepOptions
from wfctl.worker.retry import backoff

#: Seconds: a backoff up to this long waits in the worker's thread; a longer one parks the run
#: (its slot is freed, and its row is due again at the next try). Two seconds: shorter than a
#: park and a claim are worth, and short enough that a worker's stop never waits on it.
SHORT_BACKOFF = 2.0
#: Seconds between two looks at the worker's stop and the lease during a short backoff.
WAIT_SLICE = 0.2


def next_try(name: str, tries: int) -> str:
    """What a run parked for its step's next try waits for (``Parked.waiting_for``)."""
    return f"step {name!r}'s try {tries + 1}"


def failure_of(error: BaseException) -> HandledFailure:
    """What is stored of a try's error: its type's name and its message."""
    return HandledFailure(type(error).__name__, str(error))


def tries_before(stored: RecordedStep | None, attempt: int) -> int:
    """The tries of a step that ``attempt`` made before the run parked for the next one
    (``stored``: the step's ``retrying`` record, if any): the count goes on from there. A record
    of an earlier attempt counts for nothing: a new attempt gives the step all its tries again."""
    retrying = stored.retrying if stored is not None else None
    return retrying.tries if retrying is not None and retrying.attempt == attempt else 0


def next_delay(made: int, options: StepOptions, retryable: bool) -> float | None:
    """Try ``made`` of a step failed (``retryable``: with an error that may be tried again):
    seconds to wait before the next try, or None when there is none (the error is not to be
    retried, or that was try ``1 + options.retries``)."""
    if not retryable or made > options.retries:
        return None
    return backoff(made, options.retry_base, options.retry_cap)
