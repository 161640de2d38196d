"""A deploy under runs parked in a wait (``ctx.recv``, ``ctx.wait``), on real workers: the wait
a run parked in is part of its history although no step is stored for it yet, so
``ctx.patched`` at that position answers False and code that no longer makes that wait there
fails the run as changed code. Each version of the code runs in a burst worker
(tests/apps/parkedflows.py), which exits once nothing is runnable."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import rows

import wfctl

APP = "parkedflows"


def deploy(workers: Any, code: str) -> None:
    """Run every runnable workflow on version ``code`` of the app until none is left."""
    workers.run(app=APP, env={"WFCTL_TEST_CODE": code})


def parked(dsn: str, wid: object) -> tuple[Any, ...]:
    [found] = rows(dsn, "SELECT status, wait_kind, wait_step, wait_topic FROM workflows WHERE id = %s", wid)
    return found


def steps(dsn: str, wid: object) -> list[tuple[int, str]]:
    return rows(
        dsn, "SELECT step_number, step_name FROM workflow_steps WHERE workflow_id = %s ORDER BY 1", wid
    )


def ran(workers: Any, wid: object) -> list[str]:
    return [name for run, name in workers.effects() if run == str(wid)]


def child_of(dsn: str, parent: object) -> Any:
    [(child,)] = rows(dsn, "SELECT id FROM workflows WHERE parent_id = %s", parent)
    return child


def outcome(dsn: str, wid: object) -> tuple[Any, ...]:
    [found] = rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", wid)
    return found


def test_a_patch_at_the_wait_a_run_is_parked_in_keeps_that_run_on_the_old_path(dsn: str, workers) -> None:
    old = wfctl.submit(dsn, "parcel", None)
    deploy(workers, "old")
    assert parked(dsn, old) == ("pending", "message", 2, "go")

    wfctl.send(dsn, old, "go")
    new = wfctl.submit(dsn, "parcel", None)
    wfctl.send(dsn, new, "go")
    deploy(workers, "patched")

    # the parked run keeps the wait it was in: no marker, no step c; the patch after the wait
    # is new to it, and it takes that one
    assert wfctl.result(dsn, old, timeout=30) == ["a", "d", "b"]
    assert steps(dsn, old) == [(1, "a"), (2, "recv:go"), (3, "patch:after"), (4, "d"), (5, "b")]
    assert ran(workers, old) == ["a", "d", "b"]
    # a run that reaches the point on the new code takes both patches
    assert wfctl.result(dsn, new, timeout=30) == ["a", "c", "d", "b"]
    assert [name for _, name in steps(dsn, new)] == ["a", "patch:x", "c", "recv:go", "patch:after", "d", "b"]


def test_a_patch_at_a_wait_for_children_a_run_is_parked_in_keeps_that_run_on_the_old_path(
    dsn: str, workers
) -> None:
    parent = wfctl.submit(dsn, "brood", None)
    deploy(workers, "old")
    assert parked(dsn, parent)[:3] == ("pending", "children", 3)

    wfctl.send(dsn, child_of(dsn, parent), "release")
    deploy(workers, "patched")

    assert wfctl.result(dsn, parent, timeout=30) == ["a", "grown", "b"]
    assert [name for _, name in steps(dsn, parent)] == ["a", "start_child:kid", "wait", "b"]
    assert "c" not in ran(workers, parent)


@pytest.mark.parametrize(
    ("workflow_type", "code", "waited", "now_calls"),
    [
        ("parcel", "topic", "recv:go", "recv:went"),
        ("parcel", "step", "recv:go", "c"),
        ("parcel", "sleep", "recv:go", "sleep"),
        ("parcel", "children", "recv:go", "start_child:kid"),
        ("brood", "recv", "wait", "recv:go"),
    ],
    ids=["another-topic", "a-plain-step", "a-sleep", "a-child", "a-message-for-children"],
)
def test_code_that_no_longer_makes_the_wait_a_run_is_parked_in_fails_the_run_as_changed_code(
    dsn: str, workers, workflow_type: str, code: str, waited: str, now_calls: str
) -> None:
    wid = wfctl.submit(dsn, workflow_type, None)
    deploy(workers, "old")
    number = parked(dsn, wid)[2]
    assert number in (2, 3)
    if workflow_type == "brood":
        wfctl.send(dsn, child_of(dsn, wid), "release")
    else:
        wfctl.send(dsn, wid, "go")
    children = rows(dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s", wid)
    deploy(workers, code)

    status, error = outcome(dsn, wid)
    assert status == "failed", (status, error)
    assert error.startswith("workflow code changed under a running workflow"), error
    assert f"step {number} was {waited!r}" in error and repr(now_calls) in error, error
    # nothing of the new code ran at or after the wait: no step, no child, no message taken
    assert ran(workers, wid) == ["a"]
    assert len(steps(dsn, wid)) == number - 1
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s", wid) == children
    if workflow_type == "parcel":
        assert rows(dsn, "SELECT consumed_at IS NULL FROM workflow_messages WHERE workflow_id = %s", wid) == [
            (True,)
        ]


def test_a_run_failed_at_its_wait_by_changed_code_resumes_there_on_a_retry_with_a_patch(
    dsn: str, workers
) -> None:
    wid = wfctl.submit(dsn, "parcel", None)
    deploy(workers, "old")
    wfctl.send(dsn, wid, "go")
    deploy(workers, "topic")  # the change deployed without a patch
    assert outcome(dsn, wid)[0] == "failed"

    retried = workers.wfctl("retry", str(wid))
    assert retried.exit_code == 0, retried.output
    deploy(workers, "patched")  # the same change behind a patch, then the retry
    assert wfctl.result(dsn, wid, timeout=30) == ["a", "d", "b"]
    assert [name for _, name in steps(dsn, wid)] == ["a", "recv:go", "patch:after", "d", "b"]


def test_a_retry_keeps_a_run_at_the_wait_it_was_parked_in_unless_from_step_forgets_that_wait(
    dsn: str, workers
) -> None:
    kept = wfctl.submit(dsn, "parcel", None)
    later = wfctl.submit(dsn, "parcel", None)  # --from-step after the wait: kept too
    forgotten = wfctl.submit(dsn, "parcel", None)  # --from-step at the wait: forgotten
    deploy(workers, "old")
    for wid, from_step in ((kept, None), (later, "3"), (forgotten, "2")):
        assert parked(dsn, wid) == ("pending", "message", 2, "go")
        cancelled = workers.wfctl("cancel", str(wid))
        assert cancelled.exit_code == 0, cancelled.output
        extra = () if from_step is None else ("--from-step", from_step)
        retried = workers.wfctl("retry", str(wid), *extra)
        assert retried.exit_code == 0, retried.output
        # the retried wait starts afresh: it is no longer parked, and takes a new deadline
        assert rows(dsn, "SELECT status, wait_step, wait_deadline FROM workflows WHERE id = %s", wid) == [
            ("pending", None, None)
        ]
        wfctl.send(dsn, wid, "go")
    deploy(workers, "patched")

    assert wfctl.result(dsn, kept, timeout=30) == ["a", "d", "b"]
    assert wfctl.result(dsn, later, timeout=30) == ["a", "d", "b"]
    assert wfctl.result(dsn, forgotten, timeout=30) == ["a", "c", "d", "b"]
