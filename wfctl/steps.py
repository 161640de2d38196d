"""``@wfctl.step``: the options of a step function (retries, backoff, timeout), checked when the
function is decorated and attached to it. ``ctx.step`` and ``ctx.transaction`` read them from
the function they are given (``options_of``); an undecorated function has ``DEFAULT``: one try,
no timeout. How the tries run is wfctl/tries.py; one try under a timeout, wfctl/caller.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, overload

from wfctl.durations import retry_delay, timeout_message, timeout_seconds
from wfctl.errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])

#: The most retries a step may ask for (tries: one more).
MAX_STEP_RETRIES = 1000
DEFAULT_STEP_RETRY_BASE = timedelta(seconds=1)
DEFAULT_STEP_RETRY_CAP = timedelta(minutes=10)
#: The attribute of a decorated function that holds its options.
ATTRIBUTE = "__wfctl_step__"


@dataclass(frozen=True)
class StepOptions:
    """The options of a step function (``@wfctl.step``).

    ``retries``: tries after the first, within one attempt of the run; a try that raises is
    tried again after ``retry_base * 2**(try-1)`` (capped at ``retry_cap``) with jitter.
    ``timeout``: seconds a try may take (None: as long as it takes); ``timeout_error`` is the
    message of a try that took longer (``step 'x' timed out after 20s``, with the step's name
    for ``{name}``)."""

    retries: int = 0
    retry_base: timedelta = DEFAULT_STEP_RETRY_BASE
    retry_cap: timedelta = DEFAULT_STEP_RETRY_CAP
    timeout: float | None = None
    timeout_error: str | None = None

    def timed_out(self, name: str) -> str:
        """The error of a try of step ``name`` that outlived the timeout."""
        return f"step {name!r} {self.timeout_error or 'timed out'}"


#: The options of a function that is not decorated: one try, no timeout.
DEFAULT = StepOptions()


@overload
def step(fn: F, /) -> F: ...


@overload
def step(
    *,
    retries: int = 0,
    retry_base: str | float | timedelta = DEFAULT_STEP_RETRY_BASE,
    retry_cap: str | float | timedelta = DEFAULT_STEP_RETRY_CAP,
    timeout: str | float | timedelta | None = None,
) -> Callable[[F], F]: ...


def step(
    fn: F | None = None,
    /,
    *,
    retries: int = 0,
    retry_base: str | float | timedelta = DEFAULT_STEP_RETRY_BASE,
    retry_cap: str | float | timedelta = DEFAULT_STEP_RETRY_CAP,
    timeout: str | float | timedelta | None = None,
) -> F | Callable[[F], F]:
    """Give a step function options; ``ctx.step(name, fn)`` and ``ctx.transaction(name, fn)``
    read them from ``fn``. Returns the same function (called directly, it runs once as before).

    ``retries`` (0 to 1000): a try that raises is tried again, within the same attempt of the
    run, after ``retry_base * 2**(try-1)`` (at most ``retry_cap``, with jitter), until
    ``retries`` more tries have failed; only then does the workflow get ``wfctl.StepError``. A
    ``wfctl.PermanentError``, or a type the workflow's ``dont_retry`` names, is not tried again.
    A backoff of up to 2 s waits in the worker; a longer one parks the run until the next try
    (its slot is free meanwhile), and any worker continues the count.
    ``timeout`` ("20s"): the worker waits that long for a try, then counts it failed (``step
    'x' timed out after 20s``). A synchronous function runs on in a thread of its own, its
    result discarded; an ``async def`` function is cancelled. Not for ``ctx.transaction``
    (set ``statement_timeout`` in its transaction instead).
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_STEP_RETRIES:
        raise InvalidInput(f"retries must be a whole number from 0 to {MAX_STEP_RETRIES}, not {retries!r}")
    base = retry_delay(retry_base, "retry_base")
    cap = retry_delay(retry_cap, "retry_cap")
    seconds = timeout_seconds(timeout, "step timeout")
    if seconds is not None and seconds <= 0:
        raise InvalidInput("step timeout must be positive")
    options = StepOptions(retries, base, cap, seconds, timeout_message(timeout, seconds))

    def decorate(function: F) -> F:
        if not callable(function):
            raise InvalidInput(f"@wfctl.step decorates a function, not {function!r}")
        setattr(function, ATTRIBUTE, options)
        return function

    return decorate if fn is None else decorate(fn)


def options_of(fn: object) -> StepOptions:
    """The options ``@wfctl.step`` gave ``fn`` (``DEFAULT`` when none)."""
    found = getattr(fn, ATTRIBUTE, None)
    return found if isinstance(found, StepOptions) else DEFAULT
