"""Replay rules of Context, over the in-memory journal (no database needed)."""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta

import pytest

import wfctl
from wfctl.context import (
    Context,
    DeterminismError,
    MemoryJournal,
    Parked,
    RecordedStep,
    StepFailed,
)


class Level(enum.IntEnum):
    HIGH = 3


def make(journal: MemoryJournal, attempt: int = 1) -> Context:
    return Context("wf-1", "order", {"n": 1}, attempt, journal)


def test_step_records_and_replays_without_calling_again():
    calls: list[int] = []

    def work(x: int) -> dict:
        calls.append(x)
        return {"x": x, "t": (1, 2)}

    journal = MemoryJournal()
    first = make(journal).step("work", work, 5)
    assert first == {"x": 5, "t": [1, 2]}  # the stored JSON value, same as on replay
    assert calls == [5] and journal.steps[1].name == "work"
    again = make(journal, attempt=2).step("work", work, 5)
    assert again == first and calls == [5]


@pytest.mark.parametrize(
    "value", [7, 2**70, "naïve", "", True, None, 1.5, Level.HIGH, [1, (2, 3)], {"k": Level.HIGH}]
)
def test_what_a_step_returns_the_first_time_is_what_a_replay_returns(value):
    journal = MemoryJournal()
    first = make(journal).step("give", lambda: value)
    again = make(journal, attempt=2).step("give", lambda: pytest.fail("replayed steps are not run"))
    assert first == again and type(first) is type(again)


def test_renamed_step_is_a_determinism_error():
    journal = MemoryJournal({1: RecordedStep(1, "charge", 10)})
    with pytest.raises(DeterminismError, match=r"step 1 was 'charge'.*now calls 'ship'"):
        make(journal).step("ship", lambda: None)


def test_a_step_exception_becomes_a_step_error_the_workflow_may_catch():
    def broken() -> None:
        raise ValueError("nope")

    ctx = make(MemoryJournal())
    try:
        ctx.step("broken", broken)
    except Exception as caught:  # a workflow's own except Exception handles it
        assert isinstance(caught, wfctl.StepError)
        assert caught.number == 1 and isinstance(caught.__cause__, ValueError)
    else:
        pytest.fail("the step's exception did not reach the workflow")


def test_non_json_result_names_step_and_type():
    with pytest.raises(StepFailed) as info:
        make(MemoryJournal()).step("make_set", lambda: {1, 2})
    message = str(info.value.error)
    assert "'make_set'" in message and "set" in message and "JSON" in message


def test_sleep_parks_with_checkpointed_wake_time_then_continues():
    journal = MemoryJournal()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    journal.clock = lambda: now
    with pytest.raises(Parked) as info:
        make(journal).sleep("1h")
    assert info.value.wake_at == now + timedelta(hours=1)
    assert journal.parked_until == now + timedelta(hours=1)
    journal.clock = lambda: now + timedelta(minutes=30)  # woken early: sleeps on
    with pytest.raises(Parked):
        make(journal).sleep("1h")
    journal.clock = lambda: now + timedelta(hours=2)
    make(journal).sleep("1h")  # time has come: returns


def test_bad_sleep_duration():
    from wfctl.errors import InvalidInput

    with pytest.raises(InvalidInput, match="invalid sleep duration"):
        make(MemoryJournal()).sleep("soon")
