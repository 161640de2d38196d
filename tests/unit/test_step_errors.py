"""A step whose function raises raises ``wfctl.StepError`` in the workflow (tests/process/
test_step_errors_workers.py holds the same on real workers): caught, the failure is history
that every replay raises again at the same step without calling the function; uncaught, it
leaves no history, and the step runs again when the workflow runs again."""

from __future__ import annotations

from typing import Any

import pytest

import wfctl
from wfctl.context import Context, StepFailed
from wfctl.journal import HandledFailure, RecordedStep
from wfctl.testing import MemoryJournal


class OutOfStock(Exception):
    pass


class Shop:
    """Step functions that count their calls; ``reserve`` fails while ``stock`` is short."""

    def __init__(self, stock: int) -> None:
        self.stock = stock
        self.calls: list[str] = []

    def charge(self, order: str) -> str:
        self.calls.append("charge")
        return f"charge-{order}"

    def reserve(self, count: int) -> str:
        self.calls.append("reserve")
        if self.stock < count:
            raise OutOfStock(f"only {self.stock} left")
        return f"reserved {count}"

    def refund(self, charge_id: str) -> str:
        self.calls.append("refund")
        return f"refunded {charge_id}"


def saga(shop: Shop) -> Any:
    def checkout(ctx: Context, data: dict[str, Any]) -> dict[str, Any]:
        charge_id = ctx.step("charge", shop.charge, data["order"])
        try:
            ctx.step("reserve", shop.reserve, data["count"])
        except wfctl.StepError as failed:
            return {"refund": ctx.step("refund", shop.refund, charge_id), "why": failed.message}
        return {"charge": charge_id}

    return checkout


def run(fn: Any, journal: MemoryJournal, data: dict[str, Any], attempt: int = 1) -> Any:
    return fn(Context("w-1", "checkout", data, attempt, journal), data)


def test_a_caught_step_error_is_history_a_replay_raises_again_without_the_function():
    shop = Shop(stock=3)
    journal = MemoryJournal()
    first = run(saga(shop), journal, {"order": "B-7", "count": 5})
    assert first == {"refund": "refunded charge-B-7", "why": "only 3 left"}
    assert shop.calls == ["charge", "reserve", "refund"]
    assert journal.steps[2] == RecordedStep(2, "reserve", None, HandledFailure("OutOfStock", "only 3 left"))
    # a replay (the worker died before the run ended): the same path, no step function called
    shop.stock = 10  # reserving would now succeed: the replay must not ask again
    replayed = run(saga(shop), journal, {"order": "B-7", "count": 5}, attempt=2)
    assert replayed == first
    assert shop.calls == ["charge", "reserve", "refund"]


def test_the_step_error_names_the_step_and_the_original_error():
    shop = Shop(stock=0)
    journal = MemoryJournal()
    caught: list[wfctl.StepError] = []

    def workflow(ctx: Context, data: Any) -> None:
        try:
            ctx.step("reserve", shop.reserve, 1)
        except wfctl.StepError as failed:
            caught.append(failed)
        ctx.step("after", lambda: 1)  # goes on: the failure becomes history

    run(workflow, journal, {})
    run(workflow, journal, {}, attempt=2)
    first, replayed = caught
    for error in (first, replayed):
        assert isinstance(error, Exception) and not isinstance(error, wfctl.WfctlError)
        assert (error.number, error.name, error.error_type, error.message) == (
            1,
            "reserve",
            "OutOfStock",
            "only 0 left",
        )
        assert str(error) == "step 1 ('reserve') failed: OutOfStock: only 0 left"
    assert isinstance(first.__cause__, OutOfStock)  # where the function raised
    assert replayed.__cause__ is None  # a replay has only the type's name and the message
    assert shop.calls == ["reserve"]


def test_an_uncaught_step_error_leaves_no_history_and_the_step_runs_again():
    shop = Shop(stock=3)
    journal = MemoryJournal()

    def strict(ctx: Context, data: dict[str, Any]) -> str:
        ctx.step("charge", shop.charge, data["order"])
        return ctx.step("reserve", shop.reserve, data["count"])

    with pytest.raises(wfctl.StepError) as raised:
        run(strict, journal, {"order": "B-8", "count": 5})
    assert isinstance(raised.value.__cause__, OutOfStock)
    assert sorted(journal.steps) == [1]  # the charge only: the failure is not history
    shop.stock = 10
    assert run(strict, journal, {"order": "B-8", "count": 5}, attempt=2) == "reserved 5"
    assert shop.calls == ["charge", "reserve", "reserve"]


def test_a_failing_transactional_step_raises_a_step_error_too():
    journal = MemoryJournal()

    def debit(connection: Any) -> int:
        raise LookupError("no such account")

    def workflow(ctx: Context, data: Any) -> str:
        try:
            ctx.transaction("debit", debit)
        except wfctl.StepError as failed:
            note = f"{failed.error_type}: {failed.message}"
            return ctx.step("note", lambda: note)
        return "debited"

    assert run(workflow, journal, {}) == "LookupError: no such account"
    assert journal.steps[1].failure == HandledFailure("LookupError", "no such account")


def test_a_step_the_database_cannot_store_fails_the_attempt_uncatchably():
    """A result that is no JSON is a bug in the workflow, not a failure it can handle."""

    def workflow(ctx: Context, data: Any) -> str:
        try:
            ctx.step("bad", lambda: object())
        except wfctl.StepError:  # pragma: no cover - must not be reached
            return "caught"
        return "returned"

    with pytest.raises(StepFailed, match="cannot be stored as JSON"):
        run(workflow, MemoryJournal(), {})
