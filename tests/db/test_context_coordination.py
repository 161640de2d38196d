"""The coordination steps of ``Context`` over ``MemoryJournal``: replay rules, patch markers and
the determinism guard, without a database."""

from __future__ import annotations

from typing import Any

import pytest

import wfctl
from wfctl.context import Context, DeterminismError, MemoryJournal, Parked, RecordedStep


def make(journal: MemoryJournal) -> Context:
    return Context("00000000-0000-4000-8000-000000000001", "t", None, 1, journal)


def test_recv_parks_then_returns_the_message_and_replays_it() -> None:
    journal = MemoryJournal()
    with pytest.raises(Parked) as info:
        make(journal).recv("go")
    assert info.value.waiting_for == "a message on 'go'"
    journal.messages["go"] = ["first", "second"]
    assert make(journal).recv("go") == "first"
    assert make(journal).recv("go") == "first"  # a replay: the stored step, nothing consumed
    assert journal.messages["go"] == ["second"]
    assert make(journal).recv("go", timeout=0) == "first"


def test_recv_with_a_zero_timeout_and_no_message_gives_none() -> None:
    assert make(MemoryJournal()).recv("go", timeout=0) is None


@pytest.mark.parametrize("topic", ["", "x" * 151, 5])
def test_a_bad_topic_is_refused(topic: Any) -> None:
    with pytest.raises(wfctl.InvalidInput):
        make(MemoryJournal()).recv(topic)


def test_a_negative_timeout_is_refused() -> None:
    with pytest.raises(wfctl.InvalidInput):
        make(MemoryJournal()).recv("go", timeout=-1)


def test_children_are_started_once_and_joined() -> None:
    journal = MemoryJournal()

    def flow(ctx: Context) -> Any:
        ids = [ctx.start_child("leaf", {"n": n}) for n in range(3)]
        return ctx.wait(ids)

    with pytest.raises(Parked):
        flow(make(journal))
    assert len(journal.children) == 3
    for n, child in enumerate(journal.children.values()):
        child.update(status="completed", output=n * 10)
    assert flow(make(journal)) == [0, 10, 20]
    assert len(journal.children) == 3  # replayed, not started again


def test_a_failed_child_raises_child_failed() -> None:
    journal = MemoryJournal()
    ctx = make(journal)
    child = ctx.start_child("leaf")
    journal.children[child].update(status="failed", error="ValueError: no")
    with pytest.raises(wfctl.ChildFailed) as info:
        ctx.wait(child)
    assert (info.value.workflow_id, info.value.status, info.value.error) == (
        child,
        "failed",
        "ValueError: no",
    )


def test_set_event_is_checkpointed() -> None:
    journal = MemoryJournal()
    make(journal).set_event("stage", {"n": 1})
    assert journal.events == {"stage": {"n": 1}}
    assert journal.steps[1].name == "set_event:stage"


def test_patched_is_true_on_new_ground_and_false_where_old_code_ran_another_step() -> None:
    journal = MemoryJournal()
    ctx = make(journal)
    assert ctx.patched("p") is True
    assert journal.steps[1].name == "patch:p"
    ctx.step("new", lambda: 1)
    # replaying the new run: the marker says True again
    replay = make(journal)
    assert replay.patched("p") is True
    assert replay.step("new", lambda: 2) == 1
    # a run that passed this point on old code: its step 1 is 'old'
    old = MemoryJournal({1: RecordedStep(1, "old", 5)})
    ctx = make(old)
    assert ctx.patched("p") is False
    assert ctx.step("old", lambda: 6) == 5


def test_a_removed_patch_call_is_passed_over_and_other_changes_still_refused() -> None:
    journal = MemoryJournal({1: RecordedStep(1, "patch:p", True), 2: RecordedStep(2, "new", 1)})
    ctx = make(journal)
    assert ctx.step("new", lambda: 2) == 1  # the code no longer calls patched("p")
    with pytest.raises(DeterminismError):
        make(MemoryJournal({1: RecordedStep(1, "a", 1)})).step("b", lambda: 2)


def parked_in_recv() -> MemoryJournal:
    """A journal of a run that made step 'a' and parked in ``ctx.recv("go")`` at step 2."""
    journal = MemoryJournal()
    ctx = make(journal)
    ctx.step("a", lambda: 1)
    with pytest.raises(Parked):
        ctx.recv("go")
    return journal


def test_patched_at_the_wait_a_run_parked_in_is_false_and_after_it_true() -> None:
    journal = parked_in_recv()
    journal.messages["go"] = ["yes"]
    ctx = make(journal)
    ctx.step("a", lambda: 2)
    assert ctx.patched("x") is False  # the run reached this point on code without the patch
    assert ctx.recv("go") == "yes"
    assert ctx.patched("after") is True  # the run had not got this far
    assert [s.name for s in journal.steps.values()] == ["a", "recv:go", "patch:after"]


def test_patched_at_a_wait_for_children_a_run_parked_in_is_false() -> None:
    journal = MemoryJournal()
    ctx = make(journal)
    child = ctx.start_child("kid")
    with pytest.raises(Parked):
        ctx.wait(child)
    ctx = make(journal)
    assert ctx.start_child("kid") == child
    assert ctx.patched("x") is False
    with pytest.raises(Parked):  # the same wait, still unfinished
        ctx.wait(child)
    assert [s.name for s in journal.steps.values()] == ["start_child:kid"]


@pytest.mark.parametrize(
    ("changed", "now_calls"),
    [
        (lambda ctx: ctx.recv("went"), "recv:went"),
        (lambda ctx: ctx.step("c", lambda: 3), "c"),
        (lambda ctx: ctx.sleep(1), "sleep"),
        (lambda ctx: ctx.wait(ctx.start_child("kid")), "start_child:kid"),
        (lambda ctx: ctx.set_event("k", 1), "set_event:k"),
        (lambda ctx: ctx.transaction("t", lambda conn: 4), "t"),
    ],
    ids=["another-topic", "a-plain-step", "a-sleep", "a-child", "an-event", "a-transaction"],
)
def test_code_that_no_longer_makes_the_wait_a_run_parked_in_is_a_determinism_error(
    changed: Any, now_calls: str
) -> None:
    journal = parked_in_recv()
    journal.messages["go"] = ["yes"]
    ctx = make(journal)
    ctx.step("a", lambda: 2)
    with pytest.raises(DeterminismError, match=f"step 2 was 'recv:go' .* now calls '{now_calls}'"):
        changed(ctx)
    assert [s.name for s in journal.steps.values()] == ["a"]
    assert journal.children == {} and journal.events == {} and journal.messages["go"] == ["yes"]
