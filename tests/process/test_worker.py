"""Durable execution with real worker processes against a real PostgreSQL."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys

import psycopg
import pytest
from helpers import APPS, REFERENCE_SQL, wait_for

import wfctl


def rows(dsn: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def status_of(dsn: str, wid: str) -> str:
    return rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid)[0][0]


def counts(effects: list[tuple[str, str]], wid: str) -> dict[str, int]:
    return dict(collections.Counter(step for w, step in effects if w == wid))


def recover_until(workers, wid: str, stale: str = "1s") -> str:
    """Run `wfctl recover` as cron would until it requeues ``wid``."""

    def attempt() -> str | None:
        result = workers.wfctl("recover", "--stale", stale)
        assert result.exit_code == 0, result.output
        return result.stdout if wid in result.stdout else None

    return wait_for(attempt, timeout=30, what=f"recover to requeue {wid}")


def test_runs_workflows_to_completion(workers, dsn):
    ids = [str(wfctl.submit(dsn, "three", {"n": i})) for i in range(5)]
    log = workers.run()
    assert log.count("completed ") == 5
    for wid in ids:
        assert rows(
            dsn, "SELECT status, current_step, output_data, attempt FROM workflows WHERE id = %s", wid
        ) == [("completed", 3, {"sum": 6}, 1)]
        steps = rows(
            dsn,
            "SELECT step_number, step_name, status, output_data, started_at <= completed_at"
            " FROM workflow_steps WHERE workflow_id = %s ORDER BY 1",
            wid,
        )
        assert steps == [
            (1, "one", "completed", 1, True),
            (2, "two", "completed", 2, True),
            (3, "three", "completed", 3, True),
        ]
        assert counts(workers.effects(), wid) == {"one": 1, "two": 1, "three": 1}
    # the reference design's slow-step query gives true answers on what the worker wrote
    slow_sql = REFERENCE_SQL.read_text().split(";")[-2]
    slow = {(t, s) for t, s, _avg in rows(dsn, slow_sql)}
    assert slow == {("three", "one"), ("three", "two"), ("three", "three")}


def test_crash_mid_step_resumes_after_last_checkpoint(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    proc = workers.start()
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert status_of(dsn, wid) == "running"
    out = recover_until(workers, wid)
    assert "requeued" in out and "attempt=2" in out
    workers.gate.unlink()
    workers.run()
    assert status_of(dsn, wid) == "completed"
    assert counts(workers.effects(), wid) == {"one": 1, "two": 2, "three": 1}
    stored = rows(
        dsn,
        "SELECT step_number, count(*) FROM workflow_steps WHERE workflow_id = %s GROUP BY 1 ORDER BY 1",
        wid,
    )
    assert stored == [(1, 1), (2, 1), (3, 1)]
    assert rows(dsn, "SELECT attempt, lease_epoch FROM workflows WHERE id = %s", wid) == [(2, 3)]


def test_zombie_worker_commits_nothing_after_recovery(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    zombie = workers.start()
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    zombie.send_signal(signal.SIGSTOP)
    try:
        recover_until(workers, wid)
        workers.gate.unlink()
        workers.run()  # another worker completes it
        assert status_of(dsn, wid) == "completed"
        before = rows(
            dsn,
            "SELECT step_number, lease_epoch, completed_at FROM workflow_steps"
            " WHERE workflow_id = %s ORDER BY 1",
            wid,
        )
    finally:
        zombie.send_signal(signal.SIGCONT)
    wait_for(lambda: "lease lost" in zombie.log_path.read_text(), what="the zombie to notice")
    zombie.send_signal(signal.SIGTERM)
    assert zombie.wait(timeout=30) == 0
    after = rows(
        dsn,
        "SELECT step_number, lease_epoch, completed_at FROM workflow_steps WHERE workflow_id = %s ORDER BY 1",
        wid,
    )
    assert after == before, "the resumed zombie wrote a checkpoint"
    assert rows(dsn, "SELECT status, output_data FROM workflows WHERE id = %s", wid) == [
        ("completed", {"sum": 6})
    ]
    # step 2 ran twice (zombie + rescuer), step 3 only once: the zombie never got past step 2
    assert counts(workers.effects(), wid) == {"one": 1, "two": 2, "three": 1}


@pytest.mark.slow
def test_four_workers_eight_slots_two_thousand_workflows(workers, dsn):
    lines = "".join(json.dumps({"n": i}) + "\n" for i in range(2000))
    path = workers.tmp / "inputs.jsonl"
    path.write_text(lines)
    result = workers.wfctl("submit", "three", "--input-file", str(path))
    assert result.exit_code == 0, result.output
    ids = result.stdout.split()
    assert len(ids) == 2000
    procs = [workers.start("--burst", "--concurrency", "8", "--quiet") for _ in range(4)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.log_path.read_text()
    assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 2000)]
    assert rows(dsn, "SELECT count(*), count(DISTINCT (workflow_id, step_number)) FROM workflow_steps")[
        0
    ] == (6000, 6000)
    effects = workers.effects()
    assert len(effects) == 6000 and len(set(effects)) == 6000, "a step ran twice"
    assert rows(dsn, "SELECT max(lease_epoch), min(lease_epoch) FROM workflows") == [(1, 1)]
    assert sum(1 for p in procs if "started" not in p.log_path.read_text()) == 4  # --quiet


def burst_until_terminal(workers, dsn: str, wid: str, **kwargs: object) -> str:
    def done() -> str | None:
        workers.run(**kwargs)
        status = status_of(dsn, wid)
        return status if status in ("completed", "failed", "cancelled") else None

    return wait_for(done, timeout=60, what=f"{wid} to finish")


def test_retries_with_backoff_until_success(workers, dsn):
    wid = str(wfctl.submit(dsn, "flaky", {"fail_times": 2}))
    workers.run("--burst-wait", "0s")  # exit with the retry still backing off
    row = rows(dsn, "SELECT status, attempt, run_at > now(), error_message FROM workflows WHERE id = %s", wid)
    assert row[0][:2] == ("pending", 2)
    assert "card declined on attempt 1" in row[0][3]
    failed_step = rows(
        dsn,
        "SELECT status, error_message FROM workflow_steps WHERE workflow_id = %s AND step_number = 2",
        wid,
    )[0]
    # the step row and the workflow row say what failed in one line; the traceback is kept apart
    assert failed_step == ("failed", "RuntimeError: card declined on attempt 1")
    (trace,) = rows(dsn, "SELECT error_traceback FROM workflows WHERE id = %s", wid)[0]
    assert trace.startswith("Traceback (most recent call last):") and 'testflows.py", line' in trace
    assert burst_until_terminal(workers, dsn, wid) == "completed"
    assert rows(dsn, "SELECT attempt, output_data, error_message FROM workflows WHERE id = %s", wid) == [
        (3, {"attempt": 3}, None)
    ]
    # completed steps never run again: 'prepare' ran once, 'charge' once per attempt
    assert counts(workers.effects(), wid) == {"prepare": 1, "charge": 3}
    assert rows(
        dsn, "SELECT step_name, status FROM workflow_steps WHERE workflow_id = %s ORDER BY step_number", wid
    ) == [("prepare", "completed"), ("charge", "completed")]


def test_retries_exhausted_fail_with_error_kept(workers, dsn):
    wid = str(wfctl.submit(dsn, "doomed", {}))
    assert burst_until_terminal(workers, dsn, wid) == "failed"
    ((status, attempt, error, finished),) = rows(
        dsn,
        "SELECT status, attempt, error_message, finished_at IS NOT NULL FROM workflows WHERE id = %s",
        wid,
    )
    assert (status, attempt, finished) == ("failed", 2, True)
    assert error == "RuntimeError: always broken"
    assert rows(dsn, "SELECT step_number, status FROM workflow_steps WHERE workflow_id = %s", wid) == [
        (1, "failed")
    ]
    assert counts(workers.effects(), wid) == {"only": 2}


def test_max_retries_from_submit_overrides_the_type(workers, dsn):
    wid = str(wfctl.submit(dsn, "doomed", {}, max_retries=0))
    assert burst_until_terminal(workers, dsn, wid) == "failed"
    assert counts(workers.effects(), wid) == {"only": 1}


def test_determinism_guard(workers, dsn):
    wid = str(wfctl.submit(dsn, "changing", {}))
    # variant 1: checkpoints 'first' and 'second', then fails; exit before its retry is due
    workers.run("--burst-wait", "0s")
    assert status_of(dsn, wid) == "pending"
    assert burst_until_terminal(workers, dsn, wid, env={"WFCTL_TEST_VARIANT": "2"}) == "failed"
    error = rows(dsn, "SELECT error_message FROM workflows WHERE id = %s", wid)[0][0]
    assert "workflow code changed under a running workflow" in error
    assert "step 2 was 'second'" in error and "'second-v2'" in error
    assert "second-v2" not in counts(workers.effects(), wid)


def test_non_serialisable_step_result_fails_naming_step_and_type(workers, dsn):
    wid = str(wfctl.submit(dsn, "badoutput", {}))
    workers.run()
    error = rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", wid)[0]
    assert error[0] == "failed" and "'set'" in error[1] and "type set" in error[1]


def test_unknown_types_are_left_pending(workers, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('nobody-knows', '{}')")
    known = str(wfctl.submit(dsn, "three", {}))
    workers.run()
    assert status_of(dsn, known) == "completed"
    assert rows(
        dsn,
        "SELECT status, attempt, error_message, lease_owner FROM workflows"
        " WHERE workflow_type = 'nobody-knows'",
    ) == [("pending", 1, None, None)]


def test_delay_keeps_it_waiting(workers, dsn):
    result = workers.wfctl("submit", "three", "{}", "--delay", "1h", "--force")
    assert result.exit_code == 0, result.output
    wid = result.stdout.strip()
    seconds = rows(dsn, "SELECT extract(epoch FROM run_at - created_at) FROM workflows WHERE id = %s", wid)
    assert 3590 < float(seconds[0][0]) < 3610
    workers.run()
    assert status_of(dsn, wid) == "pending" and counts(workers.effects(), wid) == {}


def test_durable_sleep_across_worker_restart(workers, dsn):
    wid = str(wfctl.submit(dsn, "sleeper", {"sleep": "1s"}))
    # runs 'before', parks, exits: nothing runnable until the wake time (without
    # --burst-wait 0s it would wait for that short sleep)
    workers.run("--burst-wait", "0s")
    row = rows(dsn, "SELECT status, current_step, run_at > now() FROM workflows WHERE id = %s", wid)
    assert row == [("pending", 2, True)]
    assert counts(workers.effects(), wid) == {"before": 1}
    second = workers.start()  # a new worker process picks it up at the wake time
    wait_for(lambda: status_of(dsn, wid) == "completed", what="the sleeper to wake")
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0
    assert counts(workers.effects(), wid) == {"before": 1, "after": 1}
    assert rows(dsn, "SELECT output_data FROM workflows WHERE id = %s", wid) == [("woke",)]


def test_listen_wakes_an_idle_worker_on_plain_insert(workers, dsn):
    proc = workers.start("--poll", "60s")
    wait_for(lambda: "ready" in proc.log_path.read_text(), what="the worker to be ready")
    with psycopg.connect(dsn, autocommit=True) as conn:
        wid = conn.execute(
            "INSERT INTO workflows (workflow_type, input_data) VALUES ('three', '{}') RETURNING id"
        ).fetchone()[0]
    # polling is once a minute: finishing within the timeout means the NOTIFY woke it
    wait_for(lambda: status_of(dsn, wid) == "completed", timeout=20, what="the insert to run")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_sigterm_lets_the_step_finish_then_releases(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    proc = workers.start("--grace", "30s")
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM" in proc.log_path.read_text(), what="the worker to see SIGTERM")
    workers.gate.unlink()  # step 2 may now finish
    assert proc.wait(timeout=30) == 0
    log = proc.log_path.read_text()
    assert "released" in log
    # step 2's result was kept; the workflow is runnable at once for another worker
    assert rows(dsn, "SELECT status, current_step, run_at <= now() FROM workflows WHERE id = %s", wid) == [
        ("pending", 2, True)
    ]
    assert rows(dsn, "SELECT stopped_at IS NOT NULL FROM workers") == [(True,)]
    workers.run()
    assert status_of(dsn, wid) == "completed"
    assert counts(workers.effects(), wid) == {"one": 1, "two": 1, "three": 1}


def test_sigterm_grace_expires_and_releases(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 2}))
    proc = workers.start("--grace", "300ms")
    wait_for(lambda: counts(workers.effects(), wid).get("two"), what="step 2 to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "grace period over" in proc.log_path.read_text()
    assert rows(dsn, "SELECT status, current_step FROM workflows WHERE id = %s", wid) == [("pending", 1)]


def test_second_sigint_exits_at_once(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 1}))
    proc = workers.start("--grace", "60s")
    wait_for(lambda: counts(workers.effects(), wid).get("one"), what="step 1 to start")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "SIGINT" in proc.log_path.read_text(), what="the first SIGINT")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 130
    assert status_of(dsn, wid) == "running"  # left for `wfctl recover`


def test_worker_app_errors(workers, tmp_path):
    bad = workers.wfctl("worker", "--app", "no_such_module_xyz", "--burst")
    assert bad.exit_code == 9 and "cannot import --app no_such_module_xyz" in bad.stderr
    assert "Traceback" not in bad.output
    (APPS / "emptyapp_tmp.py").write_text("x = 1\n")
    try:
        empty = workers.wfctl("worker", "--app", "emptyapp_tmp", "--burst")
    finally:
        (APPS / "emptyapp_tmp.py").unlink()
    assert empty.exit_code == 9 and "registers no workflow" in empty.stderr
    types = workers.wfctl("worker", "--app", "testflows", "--types", "three,nope", "--burst")
    assert types.exit_code == 2 and "nope" in types.stderr


def test_recover_is_silent_when_nothing_is_stale(workers):
    result = workers.wfctl("recover", "--stale", "5m")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    bad = workers.wfctl("recover", "--stale", "5")
    assert bad.exit_code == 2 and "invalid --stale '5'" in bad.stderr


def make_stale(dsn: str, n: int, *, attempt: int = 1, max_retries: int = 3) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at)"
            " VALUES ('dead:1:x', 'dead', 1, 8, now() - interval '1 hour')"
        )
        return [
            str(r[0])
            for r in conn.execute(
                "INSERT INTO workflows"
                " (workflow_type, status, lease_owner, lease_epoch, attempt, max_retries, updated_at)"
                " SELECT 'three', 'running', 'dead:1:x', 5, %s, %s, now() - interval '1 hour'"
                " FROM generate_series(1, %s) RETURNING id",
                (attempt, max_retries, n),
            ).fetchall()
        ]


def test_concurrent_recovers_requeue_each_once(workers, dsn):
    ids = make_stale(dsn, 50)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "wfctl", "recover", "--stale", "5m"],
            cwd=APPS,
            env=workers.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    lines = [line for out, _err in outputs for line in out.splitlines()]
    assert sorted(line.split()[1] for line in lines) == sorted(ids)
    assert rows(dsn, "SELECT status, lease_epoch, attempt, count(*) FROM workflows GROUP BY 1, 2, 3") == [
        ("pending", 6, 2, 50)
    ]


def test_recover_past_max_retries_fails_as_abandoned(workers, dsn):
    (wid,) = make_stale(dsn, 1, attempt=2, max_retries=1)
    dry = workers.wfctl("recover", "--stale", "5m", "--dry-run", "--json")
    assert json.loads(dry.stdout)[0]["status"] == "failed" and status_of(dsn, wid) == "running"
    result = workers.wfctl("recover", "--stale", "5m")
    assert result.stdout.startswith(f"failed {wid}")
    ((status, error),) = rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", wid)
    assert status == "failed" and "abandoned" in error and "dead:1:x" in error


def test_heartbeat_moves_updated_at_so_reference_stuck_query_agrees(workers, dsn):
    workers.gate.touch()
    wid = str(wfctl.submit(dsn, "three", {"gate": 1}))
    proc = workers.start("--heartbeat", "100ms")
    wait_for(lambda: counts(workers.effects(), wid).get("one"), what="step 1 to start")
    first = rows(dsn, "SELECT updated_at FROM workflows WHERE id = %s", wid)[0][0]
    wait_for(
        lambda: rows(dsn, "SELECT updated_at FROM workflows WHERE id = %s", wid)[0][0] > first,
        what="the heartbeat to touch updated_at",
    )
    workers.gate.unlink()
    wait_for(lambda: status_of(dsn, wid) == "completed", what="completion")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
