"""Coordination on real workers: messages, events, child workflows, results,
deadlines; each primitive survives SIGKILL of its worker while parked and while running."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime, timedelta

import fakeclock
import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import coordination, recovery
from wfctl.worker.calls import Call, execute
from wfctl.worker.checkpoints import Request, flush

APP = "coordengine"


def status(dsn: str, wid: object) -> str:
    return rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid)[0][0]


def parked(dsn: str, wid: object, kind: str) -> bool:
    found = rows(dsn, "SELECT status, wait_kind FROM workflows WHERE id = %s", wid)
    return found[0] == ("pending", kind)


# -- messages -------------------------------------------------------------------------------------


def test_a_parked_workflow_receives_messages_in_order_and_each_once(dsn: str, workers) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 2})
    wait_for(lambda: parked(dsn, wid, "message"), what="the workflow parks on 'go'")
    assert rows(
        dsn,
        "SELECT lease_owner IS NOT NULL, run_at > now() + interval '1000 years' FROM workflows WHERE id = %s",
        wid,
    ) == [(True, True)]
    other = wfctl.send(dsn, wid, "other", {"n": 3})  # another topic: not taken
    first = wfctl.send(dsn, wid, "go", {"n": 1})
    wfctl.send(dsn, wid, "go", {"n": 2})
    assert wfctl.result(dsn, wid, timeout=30) == {"got": [{"n": 1}, {"n": 2}]}
    consumed = rows(
        dsn, "SELECT topic, consumed_step FROM workflow_messages WHERE workflow_id = %s ORDER BY id", wid
    )
    assert consumed == [("other", None), ("go", 1), ("go", 3)]
    assert other < first


def test_a_keyed_send_is_stored_once(dsn: str, workers) -> None:
    wid = wfctl.submit(dsn, "inbox", {"count": 1})
    one = wfctl.send(dsn, wid, "go", "a", key="k")
    two = wfctl.send(dsn, wid, "go", "b", key="k")
    assert one == two
    assert rows(dsn, "SELECT count(*), min(payload::text) FROM workflow_messages") == [(1, '"a"')]


def test_a_send_to_an_unknown_or_finished_workflow_is_refused_and_stores_nothing(dsn: str, workers) -> None:
    with pytest.raises(wfctl.NotFound, match="no workflow"):
        wfctl.send(dsn, "6f1c1b7e-0000-4000-8000-000000000000", "go", 1)
    wid = wfctl.submit(dsn, "leaf", {"n": 1})
    workers.run(app=APP)
    assert status(dsn, wid) == "completed"
    with pytest.raises(wfctl.InvalidState, match="is completed"):
        wfctl.send(dsn, wid, "go", 1)
    with pytest.raises(wfctl.InvalidInput):
        wfctl.send(dsn, wid, "x" * 151, 1)
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


def test_send_inside_the_callers_transaction_is_delivered_only_if_it_commits(dsn: str, workers) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 1})
    wait_for(lambda: parked(dsn, wid, "message"), what="parked")
    with psycopg.connect(dsn) as conn:  # not autocommit: the send joins this transaction
        wfctl.send(conn, wid, "go", "rolled back")
        conn.rollback()
        wfctl.send(conn, wid, "go", "committed")
        assert parked(dsn, wid, "message")  # not visible, not woken before the commit
        conn.commit()
    assert wfctl.result(dsn, wid, timeout=30) == {"got": ["committed"]}


def test_recv_gives_none_after_its_timeout(dsn: str, workers) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 1, "timeout": "300ms"})
    assert wfctl.result(dsn, wid, timeout=30) == {"got": [None]}
    assert rows(
        dsn, "SELECT output_data FROM workflow_steps WHERE workflow_id = %s AND step_number = 1", wid
    ) == [({"payload": None, "timed_out": True},)]


def test_a_message_consumed_before_a_crash_is_replayed_not_consumed_again(dsn: str, workers) -> None:
    workers.gate.touch()
    first = workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 2})
    wait_for(lambda: parked(dsn, wid, "message"), what="parked")
    wfctl.send(dsn, wid, "go", "one")
    wait_for(lambda: (str(wid), "after-0") in workers.effects(), what="inside the gated step")
    first.send_signal(signal.SIGKILL)  # killed while running, after the message was consumed
    first.wait(timeout=10)
    wfctl.send(dsn, wid, "go", "two")
    workers.gate.unlink()
    workers.start(app=APP)
    assert wfctl.result(dsn, wid, timeout=30) == {"got": ["one", "two"]}
    assert rows(
        dsn, "SELECT count(*) FILTER (WHERE consumed_at IS NOT NULL), count(*) FROM workflow_messages"
    ) == [(2, 2)]


def test_a_worker_killed_while_its_workflow_is_parked_loses_nothing(dsn: str, workers) -> None:
    first = workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 1})
    wait_for(lambda: parked(dsn, wid, "message"), what="parked")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    wfctl.send(dsn, wid, "go", "late")  # nobody runs it now: it waits in the table
    workers.start(app=APP)
    assert wfctl.result(dsn, wid, timeout=30) == {"got": ["late"]}


# -- events ---------------------------------------------------------------------------------------


def test_events_are_published_while_the_workflow_runs_and_the_latest_wins(dsn: str, workers) -> None:
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "progress", None)
    assert wfctl.get_event(dsn, wid, "stage", timeout=30) == "started"
    assert wfctl.get_event(dsn, wid, "missing") is None
    with pytest.raises(wfctl.WaitTimeout):
        wfctl.get_event(dsn, wid, "missing", timeout=0.3, default=...)
    wfctl.send(dsn, wid, "continue")
    assert wfctl.result(dsn, wid, timeout=30) == "done"
    assert wfctl.get_event(dsn, wid, "stage") == "finished"
    with pytest.raises(wfctl.NotFound):  # finished, never set: no waiting
        wfctl.get_event(dsn, wid, "missing", timeout=30, default=...)


# -- children -------------------------------------------------------------------------------------


def test_a_fan_out_is_joined_and_wakes_the_parent_once(dsn: str, workers) -> None:
    workers.start(app=APP)
    workers.start(app=APP)
    parent = wfctl.submit(dsn, "fanout", {"n": 200})
    output = wfctl.result(dsn, parent, timeout=60)
    assert output["sum"] == sum(2 * n for n in range(200))
    assert len(set(output["ids"])) == 200
    assert rows(
        dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s AND status = 'completed'", parent
    ) == [(200,)]
    # executions of the parent: the one that started the children and parked on them, then
    # (at most) one more for each time it was woken: once
    outcomes = rows(
        dsn, "SELECT outcome FROM workflow_attempts WHERE workflow_id = %s ORDER BY lease_epoch", parent
    )
    assert [o for (o,) in outcomes] == ["parked", "completed"] or [o for (o,) in outcomes] == ["completed"]


def test_a_failed_child_raises_child_failed_in_the_parent(dsn: str, workers) -> None:
    workers.start(app=APP)
    parent = wfctl.submit(dsn, "fanout", {"n": 3, "fail": [1]})
    output = wfctl.result(dsn, parent, timeout=30)
    assert output["status"] == "failed" and "leaf 1 refused" in output["error"]


def test_a_child_started_before_a_crash_is_started_once(dsn: str, workers) -> None:
    workers.gate.touch()
    first = workers.start(app=APP)
    parent = wfctl.submit(dsn, "fanout", {"n": 3})
    wait_for(lambda: (str(parent), "after-first-child") in workers.effects(), what="after the first child")
    # the first child is the first worker's to finish (a leaf has no retries: killed mid-run it
    # would fail, which is the retry policy's promise, not the one held here)
    wait_for(
        lambda: rows(dsn, "SELECT status FROM workflows WHERE parent_id = %s", parent) == [("completed",)],
        what="the first child completed",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    workers.gate.unlink()
    workers.start(app=APP)
    output = wfctl.result(dsn, parent, timeout=30)
    assert output["sum"] == 0 + 2 + 4
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s", parent) == [(3,)]


def test_cancelling_a_parent_cancels_its_unfinished_descendants(dsn: str, workers) -> None:
    workers.start(app=APP)
    parent = wfctl.submit(dsn, "fanout", {"n": 3, "wait": True})
    wait_for(lambda: parked(dsn, parent, "children"), what="the parent waits for its children")
    wait_for(
        lambda: (
            rows(
                dsn,
                "SELECT count(*) FROM workflows"
                " WHERE parent_id = %s AND wait_kind = 'message' AND status = 'pending'",
                parent,
            )[0][0]
            == 3
        ),
        what="children parked",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = wfctl.control.cancel(conn, parent)
    assert done.previous_status == "pending" and len(done.descendants) == 3
    assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("cancelled", 4)]
    with pytest.raises(wfctl.WorkflowCancelled):
        wfctl.result(dsn, parent, timeout=5)


# -- results --------------------------------------------------------------------------------------


def test_result_is_woken_by_the_completion_not_by_polling(dsn: str, workers, monkeypatch) -> None:
    monkeypatch.setattr(coordination, "RECHECK", 3600.0)  # only a notification can wake it
    workers.start(app=APP)
    wid = wfctl.submit(dsn, "inbox", {"count": 1})
    wait_for(lambda: parked(dsn, wid, "message"), what="parked")
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(wfctl.result(dsn, wid, timeout=60)))
    waiter.start()
    wait_for(
        lambda: rows(dsn, "SELECT awaited FROM workflows WHERE id = %s", wid)[0][0],
        what="the waiter registered",
    )
    wfctl.send(dsn, wid, "go", 7)
    waiter.join(timeout=30)
    assert got == [{"got": [7]}]


def test_result_raises_for_failed_cancelled_unknown_and_timeout(dsn: str, workers) -> None:
    workers.start(app=APP)
    failed = wfctl.submit(dsn, "leaf", {"n": 1, "fail": True})
    with pytest.raises(wfctl.WorkflowFailed, match="leaf 1 refused"):
        wfctl.result(dsn, failed, timeout=30)
    waiting = wfctl.submit(dsn, "inbox", {"count": 1})
    with pytest.raises(wfctl.WaitTimeout) as info:
        wfctl.result(dsn, waiting, timeout=0.3)
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(wfctl.NotFound):
        wfctl.result(dsn, "6f1c1b7e-0000-4000-8000-000000000000", timeout=1)


# -- deadlines ------------------------------------------------------------------------------------


def test_a_deadline_fails_a_parked_a_pending_and_a_running_run(dsn: str, workers) -> None:
    fakeclock.stop(dsn)
    workers.start("--types", "inbox,slowsteps", app=APP)
    parked_run = wfctl.submit(dsn, "inbox", {"count": 1}, timeout="1s")
    pending_run = wfctl.submit(dsn, "leaf", {"n": 1}, timeout=0.5)  # no worker runs 'leaf'
    running_run = wfctl.submit(dsn, "slowsteps", {"steps": 20, "nap": 0.2}, timeout="1s")
    wait_for(lambda: parked(dsn, parked_run, "message"), what="the inbox to park")
    wait_for(
        lambda: (
            rows(dsn, "SELECT status, current_step > 0 FROM workflows WHERE id = %s", running_run)
            == [("running", True)]
        ),
        what="the slow run to take its first step",
    )
    fakeclock.advance(dsn, timedelta(seconds=1))
    for wid, message in (
        (parked_run, "timed out after 1s"),
        (pending_run, "timed out after 0.5s"),
        (running_run, "timed out after 1s"),
    ):
        with pytest.raises(wfctl.WorkflowFailed, match=message):
            wfctl.result(dsn, wid, timeout=30)
    # the running one stopped at a step boundary, long before its 20 steps
    assert rows(dsn, "SELECT current_step < 20 FROM workflows WHERE id = %s", running_run) == [(True,)]


def test_a_deadline_holds_when_the_worker_that_ran_the_run_is_gone(dsn: str, workers) -> None:
    fakeclock.stop(dsn)
    workers.gate.touch()
    first = workers.start(app=APP)
    workers.wait_ready()
    wid = wfctl.submit(dsn, "held", None, timeout="2s")
    wait_for(lambda: (str(wid), "hold") in workers.effects(), what="inside the step")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    workers.gate.unlink()
    fakeclock.advance(dsn, timedelta(seconds=2))
    workers.start("--types", "leaf", app=APP)  # sweeps and expires; never runs 'held'
    with pytest.raises(wfctl.WorkflowFailed, match="timed out after 2s"):
        wfctl.result(dsn, wid, timeout=30)


def test_a_running_run_past_its_deadline_fails_and_its_step_commits_nothing(dsn: str, workers) -> None:
    fakeclock.stop(dsn)
    workers.gate.touch()
    worker = workers.start("--types", "timed_hold", app=APP)
    workers.wait_ready()
    wid = wfctl.submit(dsn, "timed_hold", None)  # the type's timeout: 2s
    wait_for(lambda: (str(wid), "hold") in workers.effects(), what="inside the step")
    assert status(dsn, wid) == "running"
    # the step does not return while the gate is there: the run fails at its deadline all the same
    fakeclock.advance(dsn, timedelta(seconds=2))
    wait_for(lambda: status(dsn, wid) == "failed", timeout=15, what="the run to fail at its deadline")
    assert rows(dsn, "SELECT error_message, output_data, current_step FROM workflows WHERE id = %s", wid) == [
        ("timed out after 2s", None, 0)
    ]
    # its execution's attempt is closed, and the lease epoch moved past it (the step is fenced)
    assert rows(
        dsn,
        "SELECT a.ended_at IS NOT NULL, a.outcome, a.error, w.lease_epoch > a.lease_epoch"
        " FROM workflow_attempts a JOIN workflows w ON w.id = a.workflow_id WHERE a.workflow_id = %s",
        wid,
    ) == [(True, "error", "timed out after 2s", True)]
    # the step returns, past the deadline: nothing of it commits, and its worker stops the execution
    workers.gate.unlink()
    wait_for(lambda: f"{wid} lease lost" in worker.log_path.read_text(), what="the worker to drop the run")
    assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", wid) == [(0,)]
    assert rows(dsn, "SELECT status, error_message, output_data FROM workflows WHERE id = %s", wid) == [
        ("failed", "timed out after 2s", None)
    ]


def _running(conn: psycopg.Connection, deadline_in: float) -> object:
    """A run held by a worker under epoch 1, its deadline ``deadline_in`` seconds from now."""
    return conn.execute(
        "INSERT INTO workflows (workflow_type, status, lease_epoch, started_at, deadline_at, deadline_error)"
        " VALUES ('leaf', 'running', 1, now(), now() + make_interval(secs => %s), 'timed out after 1s')"
        " RETURNING id",
        (deadline_in,),
    ).fetchone()[0]


def test_a_write_past_the_deadline_matches_no_row_and_the_run_fails_timed_out(dsn: str, conn) -> None:
    late, on_time = _running(conn, -1), _running(conn, 3600)
    now = datetime.now(UTC)
    checkpoints = {
        w: Request(w, 1, "step", 1, step=1, name="one", output="1", started=now) for w in (late, on_time)
    }
    flush(conn, list(checkpoints.values()))
    assert (checkpoints[late].ok, checkpoints[on_time].ok) == (False, True)
    completions = {
        late: Request(late, 1, "complete", 1, result='"done"', expect=0),
        on_time: Request(on_time, 1, "complete", 1, result='"done"', expect=1),
    }
    flush(conn, list(completions.values()))
    assert (completions[late].ok, completions[on_time].ok) == (False, True)
    # a coordination step is refused the same way, and says why
    event = Call("set_event", late, 1, 1, 1, "event", now, {"key": "k", "value": "1"})
    execute(conn, event)
    assert (event.state, event.output) == ("expired", "timed out after 1s")
    assert rows(dsn, "SELECT count(*) FROM workflow_events") == [(0,)]
    assert rows(dsn, "SELECT status, current_step FROM workflows WHERE id = %s", late) == [("running", 0)]
    assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", late) == [(0,)]
    # the one write that passes past the deadline: the run timed out (the worker's, or expire)
    timed_out = Request(late, 1, "timeout", 1, error="timed out after 1s")
    flush(conn, [timed_out])
    assert timed_out.ok
    assert rows(dsn, "SELECT status, error_message, lease_epoch FROM workflows WHERE id = %s", late) == [
        ("failed", "timed out after 1s", 1)
    ]
    # ...and refused before it: only the database's clock says a run timed out
    early = Request(_running(conn, 3600), 1, "timeout", 1, error="timed out after 1s")
    flush(conn, [early])
    assert not early.ok
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", early.workflow_id) == [("running",)]


def test_the_deadline_duty_fails_a_running_run_and_closes_its_attempt(dsn: str, conn) -> None:
    late, on_time = _running(conn, -1), _running(conn, 3600)
    for wid in (late, on_time):
        conn.execute(
            "INSERT INTO workflow_attempts (workflow_id, lease_epoch, attempt, worker_id,"
            " workflow_created_at) SELECT id, 1, 1, 'w', created_at FROM workflows WHERE id = %s",
            (wid,),
        )
    assert [(e.id, e.error_message) for e in recovery.expire_due(conn)] == [(late, "timed out after 1s")]
    assert [(e.id, e.error_message) for e in recovery.expire(conn)] == [(late, "timed out after 1s")]
    assert rows(
        dsn,
        "SELECT status, error_message, lease_epoch, finished_at IS NOT NULL FROM workflows WHERE id = %s",
        late,
    ) == [("failed", "timed out after 1s", 2, True)]
    assert rows(
        dsn, "SELECT outcome, error, ended_at IS NOT NULL FROM workflow_attempts WHERE workflow_id = %s", late
    ) == [("error", "timed out after 1s", True)]
    assert rows(dsn, "SELECT status, lease_epoch FROM workflows WHERE id = %s", on_time) == [("running", 1)]
    assert rows(dsn, "SELECT ended_at FROM workflow_attempts WHERE workflow_id = %s", on_time) == [(None,)]


def test_a_submits_timeout_replaces_the_types_longer_or_shorter(dsn: str, workers) -> None:
    workers.gate.touch()
    workers.start("--types", "timed_hold", app=APP)
    longer = wfctl.submit(dsn, "timed_hold", None, timeout="1h")  # the type's: 2s
    wait_for(lambda: (str(longer), "hold") in workers.effects(), what="inside the step")
    # claimed: the deadline stays the submit's
    ((span, error),) = rows(
        dsn,
        "SELECT extract(epoch FROM deadline_at - created_at), deadline_error FROM workflows WHERE id = %s",
        longer,
    )
    assert 3600 - 60 < float(span) <= 3600 and error == "timed out after 1h"
    shorter = wfctl.submit(dsn, "timed_hold", None, timeout="1s")
    with pytest.raises(wfctl.WorkflowFailed, match="timed out after 1s"):
        wfctl.result(dsn, shorter, timeout=30)
    workers.gate.unlink()
    assert wfctl.result(dsn, longer, timeout=30) == "released"


def test_a_child_gets_at_most_its_parents_remaining_time(dsn: str, workers) -> None:
    workers.start(app=APP)
    workers.wait_ready()
    parent = wfctl.submit(dsn, "nested", {"n": 1, "wait": True, "child_timeout": "1h"}, timeout="2s")
    with pytest.raises(wfctl.WorkflowFailed, match="timed out"):
        wfctl.result(dsn, parent, timeout=30)
    ((child_deadline, child_error, child_status),) = rows(
        dsn, "SELECT deadline_at, deadline_error, status FROM workflows WHERE parent_id = %s", parent
    )
    ((parent_deadline,),) = rows(dsn, "SELECT deadline_at FROM workflows WHERE id = %s", parent)
    assert child_deadline == parent_deadline
    assert "parent" in child_error and child_status == "failed"


def test_a_type_timeout_counts_from_the_submit(dsn: str, workers) -> None:
    wid = wfctl.submit(dsn, "leaf", {"n": 1})
    rows(dsn, "UPDATE workflows SET created_at = now() - interval '2 hours' WHERE id = %s RETURNING 1", wid)
    env = {"PYTHONPATH": str(workers.tmp)}
    (workers.tmp / "typed.py").write_text(
        "import wfctl\n\n@wfctl.workflow('leaf', timeout='1h')\ndef leaf(ctx, data):\n    return 1\n"
    )
    workers.run("--burst-wait", "0s", app="typed", env=env)
    assert rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", wid) == [
        ("failed", "timed out after 1h")
    ]


def test_a_parent_parked_on_children_survives_the_death_of_its_worker(dsn: str, workers) -> None:
    first = workers.start("--types", "fanout", app=APP)
    parent = wfctl.submit(dsn, "fanout", {"n": 5})
    wait_for(lambda: parked(dsn, parent, "children"), what="the parent waits for its children")
    first.send_signal(signal.SIGKILL)  # nobody runs the parent now; the children are pending
    first.wait(timeout=10)
    workers.start("--types", "leaf", app=APP)  # finishes the children: the last one wakes the parent
    wait_for(
        lambda: (
            rows(dsn, "SELECT status, run_at <= now() FROM workflows WHERE id = %s", parent)
            == [("pending", True)]
        ),
        what="the parent woken by its last child",
    )
    workers.start("--types", "fanout", app=APP)
    assert wfctl.result(dsn, parent, timeout=30)["sum"] == sum(2 * n for n in range(5))


def test_start_children_fans_out_in_one_step(dsn: str, workers) -> None:
    workers.start(app=APP)
    workers.start(app=APP)
    parent = wfctl.submit(dsn, "bulk", {"n": 500})
    assert wfctl.result(dsn, parent, timeout=60) == sum(2 * n for n in range(500))
    assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", parent) == [(2,)]
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE parent_id = %s", parent) == [(500,)]


def test_a_burst_worker_leaves_parked_workflows_and_says_so(dsn: str, workers) -> None:
    wid = wfctl.submit(dsn, "inbox", {"count": 1})
    log = workers.run("--burst-wait", "0s", app=APP)
    assert parked(dsn, wid, "message")
    assert "1 workflow(s) of its types parked on a message or on child workflows" in log
    assert "wait beyond" not in log  # not reported as due in the year 9999


def test_waiting_for_a_workflow_that_is_not_a_child_fails_the_run_instead_of_sleeping(
    dsn: str, workers
) -> None:
    workers.start(app=APP)
    stranger = wfctl.submit(dsn, "inbox", {"count": 1})  # parks, never finishes on its own
    waiter = wfctl.submit(dsn, "stranger_wait", {"id": str(stranger)})
    with pytest.raises(wfctl.WorkflowFailed, match="not: " + str(stranger)):
        wfctl.result(dsn, waiter, timeout=30)
    assert rows(dsn, "SELECT attempt FROM workflows WHERE id = %s", waiter) == [(1,)]  # not retried


def test_a_child_types_own_timeout_applies_when_shorter_than_its_parents(dsn: str, workers) -> None:
    workers.start(app=APP)
    parent = wfctl.submit(dsn, "short_child_parent", None, timeout="1h")
    output = wfctl.result(dsn, parent, timeout=30)
    assert output["status"] == "failed" and output["error"] == "timed out after 1s"


def test_cancelling_a_finished_parent_changes_nothing(dsn: str, workers) -> None:
    workers.start("--types", "orphaner", app=APP)
    parent = wfctl.submit(dsn, "orphaner", None)
    assert wfctl.result(dsn, parent, timeout=30) == "left a child running"
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(wfctl.InvalidState):
        wfctl.control.cancel(conn, parent)
    assert rows(dsn, "SELECT status FROM workflows WHERE parent_id = %s", parent) == [("pending",)]
