"""``ctx.patched``: a deploy that changes a workflow's steps under running workflows, on real
workers: version 1 -> version 2 (patched) -> version 3 (patch removed)."""

from __future__ import annotations

import signal

from helpers import rows, wait_for

import wfctl


def parked_at(dsn: str, wid: object, step: int) -> bool:
    found = rows(dsn, "SELECT status, wait_kind, wait_step FROM workflows WHERE id = %s", wid)
    return found == [("pending", "message", step)]


def stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_a_deploy_with_a_patch_keeps_old_runs_on_their_path_and_new_runs_on_the_new_one(dsn, workers) -> None:
    v1 = workers.start(app="deploy_v1")
    old = wfctl.submit(dsn, "deploy", None)
    wfctl.send(dsn, old, "go")
    wait_for(lambda: parked_at(dsn, old, 4), what="the old run charged and waits for 'confirm'")
    unpatched_victim = wfctl.submit(dsn, "deploy", None)
    wfctl.send(dsn, unpatched_victim, "go")
    wait_for(lambda: parked_at(dsn, unpatched_victim, 4), what="a second old run waits too")
    stop(v1)

    v2 = workers.start(app="deploy_v2")
    new = wfctl.submit(dsn, "deploy", None)
    wfctl.send(dsn, new, "go")
    wait_for(lambda: parked_at(dsn, new, 6), what="the new run took the patched path")
    wfctl.send(dsn, old, "confirm")
    assert wfctl.result(dsn, old, timeout=30) == ["reserve", "charge", "ship"]
    stop(v2)

    v3 = workers.start(app="deploy_v3")
    wfctl.send(dsn, new, "confirm")
    assert wfctl.result(dsn, new, timeout=30) == ["reserve", "fraud", "charge", "ship"]
    stop(v3)

    # every step ran once, and the marker is a step of the new run only
    effects = workers.effects()
    for wid in (old, new):
        names = [name for run, name in effects if run == str(wid)]
        assert len(names) == len(set(names)), names
    steps = rows(dsn, "SELECT workflow_id, step_name FROM workflow_steps WHERE step_name LIKE 'patch:%%'")
    assert steps == [(new, "patch:fraud-check")]

    # v3 deployed too early (the same change made without a patch) fails a run that passed
    # the changed point on v1
    workers.start(app="deploy_v3")
    wfctl.send(dsn, unpatched_victim, "confirm")
    try:
        wfctl.result(dsn, unpatched_victim, timeout=30)
    except wfctl.WorkflowFailed as exc:
        assert "workflow code changed under a running workflow" in str(exc)
    else:
        raise AssertionError("an unpatched change replayed an old run without complaint")
