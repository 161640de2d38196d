"""`wfctl send`, `wfctl event`, `wfctl wait` and `wfctl submit --timeout` as a shell runs them,
against a real worker running tests/apps/coordflows.py; and the library call beneath `wfctl send`,
which says whether a keyed send stored a message.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_cli_coordination.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import fakeclock
import psycopg
import pytest
from helpers import APPS, rows, wait_for
from support.cli_coordination import one

from wfctl import recovery

APP = "coordflows"


def submit(workers, *args: str) -> str:
    result = workers.wfctl("submit", *args)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def parked_on(dsn: str, wid: str, topic: str) -> bool:
    return bool(
        rows(
            dsn,
            "SELECT 1 FROM workflows WHERE id = %s AND status = 'pending' AND wait_kind = 'message'"
            " AND wait_topic = %s",
            wid,
            topic,
        )
    )


def background(workers, *args: str) -> subprocess.Popen[str]:
    """A wfctl command left running (a wait), as a shell would start it."""
    return subprocess.Popen(
        [sys.executable, "-m", "wfctl", *args],
        cwd=APPS,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"still waiting after {timeout}s: {out}{err}") from None
    return proc.returncode, out, err


def awaited(dsn: str, wid: str) -> bool:
    """A `wfctl wait` / `wfctl event --wait` has asked to be told about this workflow: it read,
    found nothing yet, and is now waiting for a notification."""
    return bool(one(dsn, "SELECT awaited FROM workflows WHERE id = %s", wid))


def test_send_wakes_a_parked_workflow_and_wait_prints_its_output(workers):
    workers.start(app=APP)
    wid = submit(workers, "approval", '{"order": 7}')
    wait_for(lambda: parked_on(workers.dsn, wid, "approval"), what="the run to park on 'approval'")

    first = workers.wfctl("send", wid, "approval", '{"ok": true, "by": "ann"}', "--key", "ann-7")
    again = workers.wfctl("send", wid, "approval", '{"ok": false}', "--key", "ann-7")
    messages = rows(
        workers.dsn, "SELECT id, topic, payload FROM workflow_messages WHERE workflow_id = %s", wid
    )
    assert [(t, p) for _, t, p in messages] == [("approval", {"ok": True, "by": "ann"})]
    number = messages[0][0]
    assert (first.exit_code, first.stderr) == (0, "")
    assert first.stdout == f"sent message {number} to {wid} on 'approval'\n"
    assert (again.exit_code, again.stderr) == (0, "")
    assert again.stdout == (
        f"message {number} to {wid} on 'approval' was sent before with key 'ann-7': nothing new was stored\n"
    )

    done = workers.wfctl("wait", wid, "--timeout", "30s")
    assert (done.exit_code, done.stderr) == (0, ""), done.output
    assert json.loads(done.stdout) == {"order": 7, "decision": {"ok": True, "by": "ann"}}
    assert one(workers.dsn, "SELECT status FROM workflows WHERE id = %s", wid) == "completed"
    assert one(workers.dsn, "SELECT consumed_at IS NOT NULL FROM workflow_messages WHERE id = %s", number)

    late = workers.wfctl("send", wid, "approval", '{"ok": true}')
    assert late.exit_code == 7 and late.stdout == ""
    assert late.stderr == f"wfctl: error: workflow {wid} is completed: it takes no more messages\n"
    # the key still answers once the workflow has finished: the same message, nothing stored
    keyed = workers.wfctl("--json", "send", wid, "approval", "{}", "--key", "ann-7")
    assert keyed.exit_code == 0, keyed.output
    assert json.loads(keyed.stdout) == {
        "id": number,
        "workflow_id": wid,
        "topic": "approval",
        "created": False,
    }
    assert one(workers.dsn, "SELECT count(*) FROM workflow_messages") == 1


def test_event_wait_returns_a_value_the_workflow_set_while_it_still_runs(workers):
    workers.gate.touch()  # the run stops in its step "charge", after set_event
    wid = submit(workers, "stages")
    missing = workers.wfctl("event", wid, "stage")
    assert missing.exit_code == 6 and missing.stdout == ""
    assert missing.stderr == (
        f"wfctl: error: workflow {wid} has not set event 'stage' (yet: --wait waits for it)\n"
    )

    waiting = background(workers, "event", wid, "stage", "--wait", "30s")
    wait_for(lambda: awaited(workers.dsn, wid) or waiting.poll() is not None, what="event --wait to wait")
    assert waiting.poll() is None, "event --wait returned before the workflow ran"
    workers.start(app=APP)
    code, out, err = finish(waiting)
    assert (code, err) == (0, ""), out + err
    # every stored digit: the value is printed as stored, not through a float
    assert '"exact": 0.12345678901234567890123' in out
    assert json.loads(out) == {"stage": "charging", "exact": pytest.approx(0.12345678901234568)}
    # the workflow had not finished: it is held in the step after set_event
    assert one(workers.dsn, "SELECT status FROM workflows WHERE id = %s", wid) == "running"

    as_json = workers.wfctl("--json", "event", wid, "stage")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["value"]["stage"] == "charging"
    assert json.loads(as_json.stdout)["workflow_id"] == wid and json.loads(as_json.stdout)["key"] == "stage"

    never = workers.wfctl("event", wid, "refund", "--wait", "1s")
    assert never.exit_code == 13 and never.stdout == ""
    assert never.stderr == f"wfctl: error: workflow {wid} did not set event 'refund' within 1s\n"

    workers.gate.unlink()
    assert workers.wfctl("wait", wid, "--timeout", "30s").stdout == '"charged"\n'
    started = time.monotonic()
    finished = workers.wfctl("event", wid, "refund", "--wait", "60s")
    assert finished.exit_code == 6 and time.monotonic() - started < 20  # at once, not after 60s
    assert finished.stderr == f"wfctl: error: workflow {wid} is completed and never set event 'refund'\n"
    # the value stays readable after the end
    assert json.loads(workers.wfctl("event", wid, "stage").stdout)["stage"] == "charging"


def test_wait_without_a_timeout_waits_as_long_as_it_takes(workers):
    wid = submit(workers, "quick", '{"n": 21}')
    waiting = background(workers, "wait", wid)
    wait_for(lambda: awaited(workers.dsn, wid) or waiting.poll() is not None, what="wait to wait")
    assert waiting.poll() is None, "wait returned before the workflow ran"
    workers.start(app=APP)
    code, out, err = finish(waiting)
    assert (code, out, err) == (0, '{\n  "n": 42\n}\n', "")


def test_wait_exit_codes(workers):
    workers.start(app=APP)
    completed = submit(workers, "quick", '{"n": 2}')
    failed = submit(workers, "declines", json.dumps({"message": "card declined\nby the bank"}))
    parked = submit(workers, "approval")
    cancelled = submit(workers, "approval")
    wait_for(lambda: parked_on(workers.dsn, cancelled, "approval"), what="the run to park")
    cancel = workers.wfctl("cancel", cancelled, "--reason", "changed my mind\nsee ticket 12")
    assert cancel.exit_code == 0, cancel.output

    outcomes = {}
    for name, wid in (("completed", completed), ("failed", failed), ("cancelled", cancelled)):
        outcomes[name] = workers.wfctl("wait", wid, "--timeout", "30s")
    assert (outcomes["completed"].exit_code, outcomes["completed"].stdout) == (0, '{\n  "n": 4\n}\n')
    assert outcomes["failed"].exit_code == 11 and outcomes["failed"].stdout == ""
    # the workflow's error, its first line only: one line on stderr
    assert outcomes["failed"].stderr == (
        f"wfctl: error: workflow {failed} failed: RuntimeError: card declined\n"
    )
    assert outcomes["cancelled"].exit_code == 12 and outcomes["cancelled"].stdout == ""
    assert (
        outcomes["cancelled"].stderr == f"wfctl: error: workflow {cancelled} was cancelled: changed my mind\n"
    )

    wait_for(lambda: parked_on(workers.dsn, parked, "approval"), what="the run to park")
    started = time.monotonic()
    timed_out = workers.wfctl("wait", parked, "--timeout", "1s")
    assert time.monotonic() - started >= 1.0
    assert timed_out.exit_code == 13 and timed_out.stdout == ""
    assert timed_out.stderr == f"wfctl: error: workflow {parked} did not finish within 1s\n"
    once = workers.wfctl("wait", parked, "--timeout", "0s")  # look once
    assert once.exit_code == 13 and "did not finish within 0s" in once.stderr
    assert one(workers.dsn, "SELECT status FROM workflows WHERE id = %s", parked) == "pending"

    unknown = str(uuid.uuid4())
    missing = workers.wfctl("wait", unknown)
    assert (missing.exit_code, missing.stderr) == (6, f"wfctl: error: no workflow {unknown}\n")


def test_submit_timeout_fails_a_parked_run_at_its_deadline(workers, tmp_path: Path):
    # The database's clock stands still until the test moves it: every run parks before its
    # deadline however slowly a loaded machine starts the worker, and the deadline is exact.
    fakeclock.stop(workers.dsn)
    workers.start(app=APP)  # --heartbeat 200ms: the deadline duty runs five times a second
    wid = submit(workers, "approval", "--timeout", "3s")
    batch = tmp_path / "orders.jsonl"
    batch.write_text('{"order": 1}\n{"order": 2}\n')
    listed = workers.wfctl("submit", "approval", "--input-file", str(batch), "--timeout", "3s")
    assert listed.exit_code == 0, listed.output
    ids = [wid, *listed.stdout.split()]
    assert len(ids) == 3
    for each in ids:
        wait_for(lambda each=each: parked_on(workers.dsn, each, "approval"), what="the runs to park")
    fakeclock.advance(workers.dsn, timedelta(seconds=2.9))
    with psycopg.connect(workers.dsn, autocommit=True) as conn:
        assert recovery.expire_due(conn) == []  # not a moment early

    fakeclock.advance(workers.dsn, timedelta(seconds=0.1))
    result = workers.wfctl("wait", wid, "--timeout", "30s")
    assert result.exit_code == 11, result.output
    assert result.stderr == f"wfctl: error: workflow {wid} failed: timed out after 3s\n"
    for each in ids[1:]:
        assert workers.wfctl("wait", each, "--timeout", "30s").exit_code == 11
    found = rows(
        workers.dsn,
        "SELECT status, error_message, deadline_at - created_at FROM workflows WHERE id = ANY(%s::uuid[])",
        ids,
    )
    assert found == [("failed", "timed out after 3s", timedelta(seconds=3))] * 3
    # the message that never came: nothing consumed, nothing sent
    assert one(workers.dsn, "SELECT count(*) FROM workflow_messages") == 0


def test_submit_timeout_replaces_a_shorter_timeout_of_the_type(workers):
    workers.gate.touch()
    workers.start("--types", "timed_stages", app=APP)
    wid = submit(workers, "timed_stages", "--timeout", "1h")  # the type's: 2s
    wait_for(lambda: (wid, "charge") in workers.effects(), what="inside the step")
    span, error = rows(
        workers.dsn,
        "SELECT extract(epoch FROM deadline_at - created_at), deadline_error FROM workflows WHERE id = %s",
        wid,
    )[0]
    assert 3600 - 60 < float(span) <= 3600 and error == "timed out after 1h"
    workers.gate.unlink()
    done = workers.wfctl("wait", wid, "--timeout", "30s")
    assert (done.exit_code, done.stdout) == (0, '"charged"\n'), done.output
