"""``@wfctl.step``: retries with backoff and a timeout, held without a database through
``MemoryJournal`` (the same rules on real workers: tests/process/test_step_options_workers.py;
the rows they write: tests/db/test_step_tries.py).

A try that raises is tried again, within the attempt, up to ``retries`` more times; only then
does the workflow get ``StepError``. A short backoff waits where the step runs (in memory: not
at all, its delay is noted); a long one parks the run with the record of the tries, from which
the next call in the same attempt goes on counting, never past ``retries + 1`` tries."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import wait_for

import wfctl
from wfctl.context import Context, DeterminismError, Parked
from wfctl.errors import StepTimeout
from wfctl.journal import HandledFailure, RecordedStep, Retrying
from wfctl.registry import Registry
from wfctl.steps import DEFAULT, StepOptions, options_of
from wfctl.testing import MemoryJournal
from wfctl.tries import SHORT_BACKOFF, next_delay, tries_before

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


class Flaky:
    """A step function that raises for its first ``failures`` calls, then returns."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self, order: str) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"call {self.calls} failed")
        return f"charged {order}"


def journal_at(now: datetime = NOW) -> MemoryJournal:
    journal = MemoryJournal()
    journal.clock = lambda: now
    return journal


def ctx_of(journal: MemoryJournal, attempt: int = 1, **options: Any) -> Context:
    return Context("w-1", "order", {}, attempt, journal, **options)


# -- the decorator -------------------------------------------------------------------------------


def test_the_decorator_returns_the_function_with_its_options_attached():
    def charge(order: str) -> str:
        return order

    decorated = wfctl.step(retries=3, retry_base="500ms", retry_cap="30s", timeout="20s")(charge)
    assert decorated is charge and charge("A") == "A"  # called directly, it is the function
    assert options_of(charge) == StepOptions(
        3, timedelta(milliseconds=500), timedelta(seconds=30), 20.0, "timed out after 20s"
    )
    assert isinstance(options_of(charge), wfctl.StepOptions)

    @wfctl.step
    def bare() -> None: ...

    assert options_of(bare) == DEFAULT == StepOptions()
    assert options_of(lambda: 1) == DEFAULT  # undecorated: one try, no timeout
    assert (DEFAULT.retries, DEFAULT.timeout) == (0, None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": -1}, "retries must be a whole number from 0 to 1000, not -1"),
        ({"retries": 1001}, "retries must be a whole number from 0 to 1000, not 1001"),
        ({"retries": True}, "retries must be a whole number"),
        ({"retries": 2.5}, "retries must be a whole number"),
        ({"retry_base": "often"}, "invalid retry_base 'often'"),
        ({"retry_cap": -1}, "retry_cap must be between 0 and 100 years"),
        ({"retry_cap": [1]}, "retry_cap must be a duration"),
        ({"timeout": "0s"}, "step timeout must be positive"),
        ({"timeout": "-5s"}, "invalid step timeout"),
        ({"timeout": "soon"}, "invalid step timeout 'soon'"),
        ({"timeout": object()}, "step timeout must be a duration"),
    ],
)
def test_bad_options_are_refused_when_decorating_with_one_line(options, message):
    with pytest.raises(wfctl.InvalidInput) as info:
        wfctl.step(**options)
    assert message in str(info.value) and "\n" not in str(info.value)


# -- retries within the attempt ------------------------------------------------------------------


def test_a_step_that_fails_twice_then_succeeds_takes_three_tries_in_one_call():
    charge = wfctl.step(retries=3, retry_base="100ms", retry_cap="1s")(Flaky(2))
    journal = journal_at()
    assert ctx_of(journal).step("charge", charge, "A-1") == "charged A-1"
    assert charge.calls == 3
    assert journal.steps[1] == RecordedStep(1, "charge", "charged A-1", tries=3)
    # backoff after try k: 100ms * 2**(k-1), capped, "equal jitter" (half of it to all of it)
    first, second = journal.backoffs
    assert 0.05 <= first <= 0.1 and 0.1 <= second <= 0.2


def test_an_undecorated_step_is_tried_once():
    flaky = Flaky(1)
    journal = journal_at()
    with pytest.raises(wfctl.StepError, match="call 1 failed"):
        ctx_of(journal).step("charge", flaky, "A-1")
    assert flaky.calls == 1 and journal.backoffs == []


def test_retries_exhausted_an_uncaught_step_error_and_the_next_attempt_tries_afresh():
    charge = wfctl.step(retries=2, retry_base="10ms")(Flaky(5))
    journal = journal_at()
    with pytest.raises(wfctl.StepError) as info:
        ctx_of(journal).step("charge", charge, "A-1")
    assert charge.calls == 3  # retries + 1
    assert isinstance(info.value.__cause__, ConnectionError) and info.value.message == "call 3 failed"
    assert journal.steps == {}  # uncaught: no history; the step runs again in the next attempt
    assert ctx_of(journal, attempt=2).step("charge", charge, "A-1") == "charged A-1"
    assert charge.calls == 6 and journal.steps[1].tries == 3  # its calls 4 and 5 fail, 6 returns


def test_retries_exhausted_and_caught_the_saga_goes_on_with_the_failure_as_history():
    charge = wfctl.step(retries=1, retry_base="10ms")(Flaky(9))
    refunds: list[str] = []

    def saga(ctx: Context) -> str:
        try:
            return str(ctx.step("charge", charge, "A-1"))
        except wfctl.StepError as failed:
            why = failed.message
        return str(ctx.step("apologise", lambda: refunds.append(why) or "sorry"))

    journal = journal_at()
    assert saga(ctx_of(journal)) == "sorry"
    assert charge.calls == 2 and refunds == ["call 2 failed"]
    handled = journal.steps[1]
    assert handled.failure == HandledFailure("ConnectionError", "call 2 failed") and handled.tries == 2
    assert saga(ctx_of(journal, attempt=2)) == "sorry"  # a replay: no try at all
    assert charge.calls == 2


@pytest.mark.parametrize("error", [wfctl.PermanentError, KeyError])
def test_permanent_errors_and_dont_retry_types_are_not_tried_again(error):
    charge = wfctl.step(retries=5, retry_base="10ms")(Flaky(9, error))
    journal = journal_at()
    with pytest.raises(wfctl.StepError):
        ctx_of(journal, dont_retry=(KeyError,)).step("charge", charge, "A-1")
    assert charge.calls == 1 and journal.backoffs == []


def test_the_count_goes_on_from_a_record_of_the_same_attempt_only():
    record = RecordedStep(
        1, "charge", None, retrying=Retrying(2, HandledFailure("ValueError", "no"), attempt=1)
    )
    assert tries_before(record, 1) == 2
    assert tries_before(record, 2) == 0  # a new attempt gives the step all its tries again
    assert tries_before(None, 1) == 0
    assert tries_before(RecordedStep(1, "charge", "done"), 1) == 0


def test_a_failed_try_is_followed_by_another_while_one_is_left_and_the_error_allows():
    options = StepOptions(retries=3, retry_base=timedelta(milliseconds=100), retry_cap=timedelta(seconds=1))
    delays = [next_delay(made, options, retryable=True) for made in (1, 2, 3, 4)]
    assert delays[3] is None  # try 4 was the last of 1 + 3
    bounds = [(0.05, 0.1), (0.1, 0.2), (0.2, 0.4)]  # base * 2**(try-1), with equal jitter
    assert all(d is not None and low <= d <= high for d, (low, high) in zip(delays, bounds, strict=False))
    assert next_delay(1, options, retryable=False) is None
    many = StepOptions(retries=3)
    assert next_delay(10, many, retryable=True) is None  # a record past what the options allow now


def test_a_record_with_more_tries_than_the_options_allow_now_gets_one_more_try():
    charge = wfctl.step(retries=3, retry_base="1ms")(Flaky(99))
    journal = journal_at()
    journal.steps[1] = RecordedStep(
        1, "charge", None, retrying=Retrying(9, HandledFailure("E", "no"), attempt=1)
    )
    with pytest.raises(wfctl.StepError):
        ctx_of(journal).step("charge", charge, "A-1")
    assert charge.calls == 1 and journal.failed_step is not None and journal.failed_step.tries == 10


# -- a long backoff parks ------------------------------------------------------------------------


def test_a_long_backoff_parks_and_the_next_call_goes_on_counting_up_to_retries_plus_one():
    charge = wfctl.step(retries=3, retry_base="10s", retry_cap="1m")(Flaky(9))
    journal = journal_at()
    waits: list[datetime] = []
    for tries in (1, 2, 3):
        with pytest.raises(Parked) as parked:
            ctx_of(journal).step("charge", charge, "A-1")
        record = journal.steps[1].retrying
        assert record is not None and record.tries == tries == charge.calls
        assert record.failure == HandledFailure("ConnectionError", f"call {tries} failed")
        assert parked.value.wake_at == record.next_at == journal.parked_until
        assert parked.value.waiting_for == f"step 'charge''s try {tries + 1}"
        waits.append(record.next_at - NOW)
    # 10s * 2**(try-1), with jitter: each a backoff longer than SHORT_BACKOFF
    assert [timedelta(seconds=5) <= waits[0] <= timedelta(seconds=10), waits[2] <= timedelta(seconds=40)] == [
        True,
        True,
    ]
    with pytest.raises(wfctl.StepError, match="call 4 failed"):
        ctx_of(journal).step("charge", charge, "A-1")
    assert charge.calls == 4  # retries + 1 in all, never more, never counted afresh
    assert 1 not in journal.steps  # uncaught: the failure replaced the record


def test_a_parked_step_that_succeeds_at_its_next_try_is_a_result():
    charge = wfctl.step(retries=2, retry_base="1m")(Flaky(1))
    journal = journal_at()
    with pytest.raises(Parked):
        ctx_of(journal).step("charge", charge, "A-1")
    assert ctx_of(journal).step("charge", charge, "A-1") == "charged A-1"
    assert journal.steps[1] == RecordedStep(1, "charge", "charged A-1", tries=2)
    assert ctx_of(journal).step("charge", charge, "A-1") == "charged A-1"  # replayed
    assert charge.calls == 2


def test_the_short_backoff_bound():
    assert SHORT_BACKOFF == 2.0
    fast = wfctl.step(retries=1, retry_base="4s", retry_cap="4s")(Flaky(1))
    journal = journal_at()  # 4s with jitter: 2s to 4s, parked unless exactly 2s
    with pytest.raises(Parked):
        ctx_of(journal).step("charge", fast, "A-1")
    short = wfctl.step(retries=1, retry_base="2s", retry_cap="2s")(Flaky(1))
    other = journal_at()  # 1s to 2s: waited where the step runs
    assert ctx_of(other).step("charge", short, "A-1") == "charged A-1"
    assert len(other.backoffs) == 1 and 1.0 <= other.backoffs[0] <= SHORT_BACKOFF


def test_a_record_of_tries_met_by_another_kind_of_step_is_a_code_change():
    record = Retrying(1, HandledFailure("ValueError", "no"), attempt=1, next_at=NOW)
    journal = MemoryJournal({1: RecordedStep(1, "sleep", None, retrying=record)})
    with pytest.raises(DeterminismError, match="being retried"):
        ctx_of(journal).sleep("1s")


# -- timeouts ------------------------------------------------------------------------------------


def test_a_sync_call_past_its_timeout_is_abandoned_and_its_late_result_dropped():
    release = threading.Event()
    ended = threading.Event()

    @wfctl.step(timeout="200ms")
    def slow() -> str:
        release.wait(30)
        ended.set()
        return "late"

    journal = journal_at()
    with pytest.raises(wfctl.StepError) as info:
        ctx_of(journal).step("slow", slow)
    assert (info.value.error_type, info.value.message) == ("StepTimeout", "step 'slow' timed out after 200ms")
    assert isinstance(info.value.__cause__, StepTimeout) and isinstance(info.value.__cause__, TimeoutError)
    assert journal.caller.abandoned == 1  # it runs on in its thread
    release.set()
    assert ended.wait(30)
    # the count drops as the thread ends, just after its last statement
    wait_for(lambda: journal.caller.abandoned == 0, what="the abandoned call to be counted out")
    assert journal.steps == {} and journal.failed_step is not None  # "late" is never stored


def test_a_timed_out_try_is_retried_like_any_failed_try():
    calls: list[int] = []

    @wfctl.step(timeout="100ms", retries=1, retry_base="1ms")
    def once_slow() -> str:
        calls.append(1)
        if len(calls) == 1:
            threading.Event().wait(1.0)
        return "in time"

    journal = journal_at()
    assert ctx_of(journal).step("s", once_slow) == "in time"
    assert journal.steps[1].tries == 2 and journal.caller.abandoned in (0, 1)


def test_an_async_step_is_awaited_on_the_loop_and_cancelled_at_its_timeout():
    seen: list[str] = []

    @wfctl.step(timeout="200ms")
    async def stuck() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async def quick(value: int) -> int:
        await asyncio.sleep(0)
        return value * 2

    journal = journal_at()
    ctx = ctx_of(journal)
    assert ctx.step("quick", quick, 21) == 42  # no timeout: awaited to its end
    with pytest.raises(wfctl.StepError, match="step 'stuck' timed out after 200ms"):
        ctx.step("stuck", stuck)
    assert seen == ["cancelled"] and journal.caller.abandoned == 0  # nothing left behind
    journal.caller.close()


def test_an_async_step_own_timeout_error_is_not_taken_for_the_step_timeout():
    @wfctl.step(timeout="10s")
    async def refuses() -> None:
        raise TimeoutError("the bank did not answer")

    with pytest.raises(wfctl.StepError) as info:
        ctx_of(journal_at()).step("refuses", refuses)
    assert (info.value.error_type, info.value.message) == ("TimeoutError", "the bank did not answer")


# -- transactional steps -------------------------------------------------------------------------


def test_a_transactional_step_retries_each_try_in_a_transaction_of_its_own():
    tries: list[Any] = []

    @wfctl.step(retries=2, retry_base="1ms")
    def debit(connection: Any) -> int:
        tries.append(connection)
        if len(tries) < 3:
            raise LookupError("locked")
        return 90

    journal = journal_at()
    journal.connection = "conn"
    assert ctx_of(journal).transaction("debit", debit) == 90
    assert tries == ["conn"] * 3 and journal.steps[1].tries == 3


def test_a_timeout_is_refused_for_a_transactional_step_at_the_call():
    calls: list[Any] = []

    @wfctl.step(timeout="5s")
    def debit(connection: Any) -> int:
        calls.append(connection)
        return 1

    with pytest.raises(wfctl.InvalidInput, match=r"transactional step 'debit'.*statement_timeout") as info:
        ctx_of(journal_at()).transaction("debit", debit)
    assert "\n" not in str(info.value) and calls == []


def test_an_async_workflow_function_is_refused_when_decorating_with_one_line():
    registry = Registry()
    with pytest.raises(wfctl.InvalidInput) as refused:

        @wfctl.workflow("async-flow", registry=registry)
        async def flow(ctx: Context, data: Any) -> Any:
            return data

    assert str(refused.value) == (
        "workflow 'async-flow' is an async def function; a workflow function is a plain def "
        "(its steps may be async def: ctx.step awaits them on the worker's event loop)"
    )
    assert "async-flow" not in registry.types
